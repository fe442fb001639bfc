"""Speed-up with a bootstrap confidence interval.

Speed-up = median(baseline latency) / median(candidate latency): a ratio of **medians**, robust to the
occasional slow run (a scheduler hiccup, a page fault) that would move a ratio of means.

Interval: the two samples are independent (different runs), so each bootstrap replicate resamples the
baseline and the candidate *separately*, with replacement and at their own sizes, and recomputes the ratio;
the 95 % interval is the 2.5th and 97.5th percentile of the replicates (the percentile bootstrap, Efron &
Tibshirani 1993, ch. 13; the same as ``scipy.stats.bootstrap(..., paired=False, method="percentile")``).
Randomness comes from ``numpy.random.Generator(PCG64(seed))``, so the interval is reproducible.

Interleaved samples (:func:`paired_speedup_ci`): when baseline and candidate ran in the same blocks of an
interleaved schedule, sample *i* of each side comes from block *i* (same request, adjacent in time), so a
replicate resamples **blocks** (pairs) with replacement and recomputes the ratio of medians over the chosen
blocks; the same as ``scipy.stats.bootstrap(..., paired=True, method="percentile")``. Slow drift of the
machine then moves both sides of a pair alike and does not widen or shift the interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0


class SpeedupCI(BaseModel):
    """Speed-up (dimensionless, > 1 means faster than the baseline) and its percentile interval."""

    speedup: float
    low: float
    high: float
    confidence: float
    resamples: int
    n_baseline: int
    n_candidate: int
    statistic: str = "ratio of medians (baseline / candidate)"


def speedup_ci(
    baseline_s: Sequence[float],
    candidate_s: Sequence[float],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> SpeedupCI:
    """Ratio of medians with a percentile-bootstrap interval.

    Args:
        baseline_s, candidate_s: latency samples in seconds (positive, finite), at least 1 each.
        confidence: interval coverage in (0, 1).
        resamples: bootstrap replicates.
        seed: seed of the numpy Generator.

    Raises:
        ValueError: an empty sample, a non-positive or non-finite latency, or confidence outside (0, 1).
    """
    b = np.asarray(baseline_s, dtype=np.float64)
    c = np.asarray(candidate_s, dtype=np.float64)
    _check(b, c, confidence)
    rng = np.random.Generator(np.random.PCG64(seed))
    bi = rng.integers(0, b.size, size=(resamples, b.size))
    ci = rng.integers(0, c.size, size=(resamples, c.size))
    ratios = np.median(b[bi], axis=1) / np.median(c[ci], axis=1)
    return _result(b, c, ratios, confidence, resamples)


def _result(
    b: np.ndarray, c: np.ndarray, ratios: np.ndarray, confidence: float, resamples: int,
    statistic: str = "ratio of medians (baseline / candidate)",
) -> SpeedupCI:
    """Percentile interval of the bootstrap ``ratios`` around the observed ratio of medians."""
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(ratios, [100 * alpha, 100 * (1 - alpha)])
    return SpeedupCI(
        speedup=float(np.median(b) / np.median(c)),
        low=float(low),
        high=float(high),
        confidence=confidence,
        resamples=resamples,
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        statistic=statistic,
    )


def _check(b: np.ndarray, c: np.ndarray, confidence: float) -> None:
    if b.size == 0 or c.size == 0:
        raise ValueError("speedup_ci needs at least one baseline and one candidate sample")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c)) and (b > 0).all() and (c > 0).all()):
        raise ValueError("latency samples must be finite and > 0 seconds")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def paired_speedup_ci(
    baseline_s: Sequence[float],
    candidate_s: Sequence[float],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> SpeedupCI:
    """Ratio of medians with a paired (block) percentile-bootstrap interval.

    Args:
        baseline_s, candidate_s: latency samples in seconds, equal length; element *i* of both comes from the
            same block of an interleaved schedule.
        confidence: interval coverage in (0, 1).
        resamples: bootstrap replicates.
        seed: seed of the numpy Generator.

    Raises:
        ValueError: unequal lengths, an empty sample, a non-positive or non-finite latency, or confidence
            outside (0, 1).
    """
    b = np.asarray(baseline_s, dtype=np.float64)
    c = np.asarray(candidate_s, dtype=np.float64)
    _check(b, c, confidence)
    if b.size != c.size:
        raise ValueError(f"paired samples need equal lengths, got {b.size} and {c.size}")
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, b.size, size=(resamples, b.size))
    ratios = np.median(b[idx], axis=1) / np.median(c[idx], axis=1)
    return _result(
        b, c, ratios, confidence, resamples,
        statistic="ratio of medians (baseline / candidate), paired by interleaved block",
    )
