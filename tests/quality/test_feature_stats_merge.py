"""FeatureStats: shard statistics merged in any order equal one pass, and equal numpy on the concatenation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diffbench.errors import UsageError
from diffbench.quality.distribution import FeatureStats, fid_from_stats


def _rows(seed: int, n: int, d: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # a large common offset makes Σxxᵀ − n·μμᵀ cancel: rounding in the sums shows up in the covariance
    return (rng.normal(0, 1, (n, d)) * rng.uniform(0.1, 3, d) + 50.0).astype(np.float32).astype(np.float64)


def _stats(rows: np.ndarray, keep: bool = False) -> FeatureStats:
    s = FeatureStats(rows.shape[1], keep=keep)
    for r in rows:
        s.update(r[None])
    return s


def test_merged_shards_equal_one_pass_bitwise_in_any_order() -> None:
    f = _rows(0, 300, 6)
    one = _stats(f)
    cuts = [0, 17, 101, 102, 250, 300]
    shards = [_stats(f[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1], [3, 4, 1, 0, 2]):
        m = FeatureStats(6, keep=False)
        for i in order:
            m.merge(shards[i])
        assert m.n == one.n == 300
        mu1, c1 = m.mean_cov()
        mu0, c0 = one.mean_cov()
        assert np.array_equal(mu1, mu0) and np.array_equal(c1, c0)


def test_sums_are_the_correctly_rounded_sums() -> None:
    f = _rows(1, 500, 4)
    s = _stats(f[:250]).merge(_stats(f[250:]))
    total, outer = s.totals()
    for j in range(4):
        assert total[j] == math.fsum(f[:, j])  # math.fsum: the exactly rounded float64 sum
        for k in range(4):
            assert outer[j, k] == math.fsum(f[:, j] * f[:, k])  # float32 products are exact in float64


def test_mean_cov_match_numpy_on_the_concatenation_and_fid_is_merge_invariant() -> None:
    f, g = _rows(2, 400, 5), _rows(3, 350, 5) + 0.3
    a = _stats(f[:123]).merge(_stats(f[123:]))
    mu, cov = a.mean_cov()
    assert np.allclose(mu, f.mean(0), rtol=1e-13, atol=0)
    assert np.allclose(cov, np.cov(f, rowvar=False), rtol=1e-9, atol=1e-12)
    b = _stats(g[:7]).merge(_stats(g[7:200])).merge(_stats(g[200:]))
    assert fid_from_stats(a, b)[0] == fid_from_stats(_stats(f), _stats(g))[0]


def test_merge_keeps_rows_in_merge_order_and_checks_the_width() -> None:
    f = _rows(4, 10, 3)
    m = _stats(f[:4], keep=True).merge(_stats(f[4:], keep=True))
    assert np.array_equal(m.features, f)
    with pytest.raises(UsageError, match="feature width"):
        m.merge(FeatureStats(4))
