"""When is a configuration warm? A one-sided Mann-Kendall trend test on the last ``window`` latencies.

A process that is still cold (first calls allocating, page-faulting, filling caches, a CPU still
ramping its clock) shows a *downward* trend: each run is faster than the one before. A run counts as warm
when its last ``window`` warmup samples show **no significant downward trend**:

- Mann-Kendall statistic on the window: the number of strictly decreasing pairs (i < j, x_j < x_i),
  ``I``. Under "no trend" every order of the window is equally likely, so ``P(I >= I_obs)`` is the upper
  tail of the Mahonian distribution (number of permutations of n items with k inversions; Kendall 1938,
  the exact null of Kendall's tau without ties; the same p-value as ``scipy.stats.kendalltau(range(n), x,
  alternative="less", method="exact")``). Ties count as neither order, which makes the test conservative.
- A trend is called only when ``p < alpha`` **and** the window's drop (Theil-Sen slope times the window
  length, relative to the window median) exceeds ``min_drop``; a significant but negligible drift (0.1 %
  over the window) does not keep a run in warmup.

With ``window`` = 5 the smallest attainable p is 1/120 (a strictly falling window); with 4 it is 1/24.
Warmup also stops at a cap (``max_warmup``), and the result then says that the configuration did not
stabilise.

A cold start that outlasted the warmup shows instead as *leading outliers* (:func:`leading_cold`): the first
samples in run (or arrival) order each above ``FIRST_RUN_OUTLIER`` x the median of the samples after them,
as a first call that compiles is. ``bench`` warns ``warmup_insufficient`` on them and ``load`` warns
``cold_start_in_measurement``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

DEFAULT_WINDOW = 5
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_DROP = 0.02  # 2 % over the window
FIRST_RUN_OUTLIER = 3.0  # a sample > 3x the median of the later ones carried a compile or a cold start


@lru_cache(maxsize=64)
def _mahonian(n: int) -> tuple[int, ...]:
    """Counts of permutations of n items by number of inversions (k = 0 .. n(n-1)/2)."""
    row = [1]
    for m in range(2, n + 1):  # insert the m-th item: adds 0 .. m-1 inversions
        new = [0] * (len(row) + m - 1)
        for k, c in enumerate(row):
            for add in range(m):
                new[k + add] += c
        row = new
    return tuple(row)


def downward_trend_pvalue(samples: Sequence[float]) -> float:
    """One-sided p-value of "the samples fall over time" (exact Mann-Kendall, see the module docstring).

    Returns 1.0 for fewer than 2 samples.
    """
    x = np.asarray(samples, dtype=np.float64)
    n = int(x.size)
    if n < 2:
        return 1.0
    diff = x[None, :] - x[:, None]  # diff[i, j] = x_j - x_i
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    inversions = int(np.count_nonzero((diff < 0) & upper))
    counts = _mahonian(n)
    total = sum(counts)
    return float(sum(counts[inversions:]) / total)


def relative_drop(samples: Sequence[float]) -> float:
    """Theil-Sen slope x (n - 1) / median: the fraction the window fell by from its start to its end."""
    x = np.asarray(samples, dtype=np.float64)
    n = int(x.size)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, k=1)
    slope = float(np.median((x[j] - x[i]) / (j - i)))
    med = float(np.median(x))
    return -slope * (n - 1) / med if med > 0 else 0.0


def is_warm(samples: Sequence[float], window: int = DEFAULT_WINDOW, alpha: float = DEFAULT_ALPHA,
            min_drop: float = DEFAULT_MIN_DROP) -> bool:
    """True when the last ``window`` samples show no significant downward trend (False with fewer)."""
    if len(samples) < window:
        return False
    w = list(samples)[-window:]
    return not (downward_trend_pvalue(w) < alpha and relative_drop(w) > min_drop)


def leading_cold(samples: Sequence[float], ratio: float = FIRST_RUN_OUTLIER) -> int:
    """How many leading samples (in run order; seconds or any positive unit) exceed ``ratio`` x the median of
    the samples after them: walk from the first sample while each exceeds ``ratio`` x the median of those
    after it (at least 2 samples always stay after it), then count the walked samples that exceed ``ratio``
    x the median of the rest (the warm part). 0 for fewer than 3 samples."""
    n = 0
    while n < len(samples) - 2:
        rest = float(np.median(samples[n + 1:]))
        if rest > 0 and samples[n] > ratio * rest:
            n += 1
        else:
            break
    if n == 0:
        return 0
    rest = float(np.median(samples[n:]))  # count against the warm part only
    return sum(1 for x in samples[:n] if x > ratio * rest)
