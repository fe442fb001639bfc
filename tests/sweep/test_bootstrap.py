"""Speed-up interval: closed forms and scipy.stats.bootstrap as the reference."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from diffbench.sweep.bootstrap import speedup_ci


def test_constant_samples_give_the_exact_ratio():
    r = speedup_ci([0.2] * 10, [0.1] * 7)
    assert r.speedup == r.low == r.high == pytest.approx(2.0)
    assert (r.n_baseline, r.n_candidate) == (10, 7)


def test_point_is_ratio_of_medians():
    r = speedup_ci([1.0, 2.0, 100.0], [1.0, 1.0, 0.5])
    assert r.speedup == pytest.approx(np.median([1.0, 2.0, 100.0]) / np.median([1.0, 1.0, 0.5]))


def test_interval_matches_scipy_percentile_bootstrap():
    rng = np.random.default_rng(7)
    base = rng.lognormal(np.log(0.100), 0.05, size=60)
    cand = rng.lognormal(np.log(0.080), 0.05, size=60)
    ours = speedup_ci(base, cand, resamples=4000, seed=1)

    def ratio(b, c, axis=-1):
        return np.median(b, axis=axis) / np.median(c, axis=axis)

    ref = stats.bootstrap((base, cand), ratio, paired=False, vectorized=True, n_resamples=4000,
                          method="percentile", confidence_level=0.95, random_state=np.random.default_rng(2))
    # independent resampling streams: the endpoints agree to Monte Carlo error (well under 1 %)
    assert ours.low == pytest.approx(ref.confidence_interval.low, rel=0.01)
    assert ours.high == pytest.approx(ref.confidence_interval.high, rel=0.01)
    assert ours.low < ours.speedup < ours.high


def test_seeded_and_validated():
    a = speedup_ci([0.1, 0.2, 0.15], [0.1, 0.11, 0.12], seed=3)
    b = speedup_ci([0.1, 0.2, 0.15], [0.1, 0.11, 0.12], seed=3)
    assert (a.low, a.high) == (b.low, b.high)
    with pytest.raises(ValueError):
        speedup_ci([], [0.1])
    with pytest.raises(ValueError):
        speedup_ci([0.1], [0.0])


def test_paired_interval_matches_scipy_paired_bootstrap():
    from diffbench.sweep.bootstrap import paired_speedup_ci

    rng = np.random.default_rng(11)
    drift = np.linspace(0.08, 0.14, 40)  # the machine slows down; both sides see the same blocks
    base = drift * rng.lognormal(0, 0.03, size=40)
    cand = drift / 1.25 * rng.lognormal(0, 0.03, size=40)
    ours = paired_speedup_ci(base, cand, resamples=4000, seed=1)

    def ratio(b, c, axis=-1):
        return np.median(b, axis=axis) / np.median(c, axis=axis)

    ref = stats.bootstrap((base, cand), ratio, paired=True, vectorized=True, n_resamples=4000,
                          method="percentile", confidence_level=0.95, random_state=np.random.default_rng(2))
    assert ours.speedup == pytest.approx(np.median(base) / np.median(cand))
    assert ours.low == pytest.approx(ref.confidence_interval.low, rel=0.01)
    assert ours.high == pytest.approx(ref.confidence_interval.high, rel=0.01)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_speedup_ci([0.1, 0.2], [0.1])
