"""Warm-up trend test: the exact Mann-Kendall p-value against scipy, and the warm/cold decisions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from diffbench.core.warmth import _mahonian, downward_trend_pvalue, is_warm, leading_cold, relative_drop


def test_mahonian_counts_are_inversion_counts():
    for n in range(1, 7):  # brute force over all permutations
        counts = [0] * (n * (n - 1) // 2 + 1)
        for perm in itertools.permutations(range(n)):
            counts[sum(perm[i] > perm[j] for i in range(n) for j in range(i + 1, n))] += 1
        assert list(_mahonian(n)) == counts


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [4, 5, 8])
def test_pvalue_matches_scipy_exact_kendall(seed, n):
    x = np.random.default_rng(seed).normal(size=n) - 0.3 * seed * np.arange(n) / n
    ref = stats.kendalltau(np.arange(n), x, alternative="less", method="exact").pvalue
    assert downward_trend_pvalue(x) == pytest.approx(ref, rel=1e-12)


def test_strictly_falling_window_has_the_smallest_p():
    assert downward_trend_pvalue([5, 4, 3, 2, 1]) == pytest.approx(1 / 120)
    assert downward_trend_pvalue([1, 2, 3, 4, 5]) == 1.0


def test_relative_drop_closed_form():
    # a straight line from 1.2 to 0.8 over 5 samples: slope -0.1, median 1.0 -> drop 0.4
    assert relative_drop([1.2, 1.1, 1.0, 0.9, 0.8]) == pytest.approx(0.4)


def test_cold_decay_is_not_warm_and_its_tail_is():
    cold = [2.9, 1.2, 0.6, 0.3, 0.2, 0.17]  # the tiny-flux cold start reported in issue 9
    assert not is_warm(cold, window=5)
    rng = np.random.default_rng(0)
    warm = list(0.17 * np.exp(rng.normal(0, 0.03, size=5)))
    assert is_warm(cold + warm, window=5)
    assert not is_warm([0.17] * 4, window=5)  # too few samples
    assert is_warm([0.17] * 5, window=5)  # all ties: no trend
    # significant but negligible drift (0.1 % over the window) does not keep a run in warmup
    assert is_warm([1.0005, 1.0004, 1.0003, 1.0002, 1.0001])


def test_flat_noise_is_warm_in_most_windows():
    rng = np.random.default_rng(1)
    warm = [is_warm(list(rng.lognormal(0, 0.05, size=5))) for _ in range(2000)]
    # under no trend, a window is called cold with probability P(p < 0.05) = 5/120 (p-values 1/120, 5/120)
    assert np.mean(warm) == pytest.approx(1 - 5 / 120, abs=0.015)


@pytest.mark.parametrize(("samples", "want"), [
    ([5.0, 0.02, 0.03, 0.025, 0.02], 1),  # one compile: 5 > 3 x median(0.02, 0.03, 0.025, 0.02)
    ([5.0, 4.0, 0.02, 0.03, 0.025], 2),  # two leading (4 > 3 x median of the three after it)
    ([0.02, 5.0, 0.03, 0.025, 0.02], 0),  # an outlier that is not leading is a tail, not a cold start
    ([0.06, 0.02, 0.02, 0.02], 0),  # exactly 3x the rest's median: not above it
    ([0.0601, 0.02, 0.02, 0.02], 1),
    ([5.0, 0.02], 0),  # fewer than 3 samples: nothing to compare with
])
def test_leading_cold_counts_leading_samples_above_three_times_the_later_median(samples, want):
    assert leading_cold(samples) == want
    # by hand: the k-th of the counted samples is above 3 x the median of the samples after the counted block
    rest = float(np.median(samples[want:]))
    assert all(x > 3.0 * rest for x in samples[:want])
