"""Direction-aware summaries of per-pair (or per-frame) metric values, +inf handled explicitly.

Percentiles use diffbench.core.stats' method (numpy 'linear', Hyndman-Fan type 7). PSNR of identical
images is +inf: it sorts last, so a percentile whose interpolation touches +inf is +inf, one below it is
finite. Identical pairs (+inf PSNR, or flagged) are counted in ``n_identical`` for every metric and never
enter a mean (``n_inf`` counts +inf values). NaN is rejected before it reaches a summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from diffbench.core.stats import percentile
from diffbench.quality.models import HIGHER_IS_BETTER, MetricSummary, WorstPair


@dataclass(frozen=True)
class Sample:
    """One value with where it came from."""

    value: float
    key: str
    baseline: str
    candidate: str
    frame: int | None = None
    identical: bool = False  # the pair (or frame) is bit-identical; a +inf value counts as identical too


def percentile_with_inf(values: Sequence[float], q: float) -> float:
    """Percentile ``q`` (0-100), linear method, where +inf sorts last (no NaN from inf - inf).

    Raises:
        ValueError: a value is NaN or -inf, or the sample is empty.
    """
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size == 0:
        raise ValueError("empty sample")
    if np.isnan(arr).any() or np.isneginf(arr).any():
        raise ValueError("NaN or -inf in a metric sample")
    if np.isfinite(arr).all():
        return percentile(arr, q)
    h = (arr.size - 1) * q / 100.0
    lo, hi = math.floor(h), math.ceil(h)
    frac = h - lo
    if frac == 0.0 or arr[lo] == arr[hi]:
        return float(arr[lo])
    if math.isinf(arr[hi]):
        return math.inf
    return float(arr[lo] + (arr[hi] - arr[lo]) * frac)


def summarize_metric(metric: str, samples: Sequence[Sample], worst_n: int = 5) -> MetricSummary | None:
    """Summary (n, n_identical, p10, p50, p90, min, max, worst, mean) and the ``worst_n`` samples.

    A sample is identical when flagged (``Sample.identical``) or +inf (PSNR of identical images).
    ``n`` counts every sample; ``mean`` is over the non-identical finite ones (None when there are
    none), so the rows of different metrics over the same pairs describe the same population.

    Returns None for an empty sample. Raises ValueError on NaN (callers turn NaN into a pair error first).
    """
    if not samples:
        return None
    hib = HIGHER_IS_BETTER.get(metric, True)
    vals = [s.value for s in samples]
    same = [s.identical or s.value == math.inf for s in samples]
    finite = [v for v, i in zip(vals, same, strict=True) if math.isfinite(v) and not i]
    p = {q: percentile_with_inf(vals, q) for q in (10, 50, 90)}
    ordered = sorted(samples, key=lambda s: s.value, reverse=not hib)
    worst = [
        WorstPair(key=s.key, value=s.value, baseline=s.baseline, candidate=s.candidate, frame=s.frame)
        for s in ordered[:worst_n]
    ]
    mn, mx = min(vals), max(vals)
    return MetricSummary(
        metric=metric,
        higher_is_better=hib,
        n=len(vals),
        n_inf=sum(1 for v in vals if math.isinf(v)),
        n_identical=sum(same),
        mean=float(np.mean(finite)) if finite else None,
        p10=p[10],
        p50=p[50],
        p90=p[90],
        min=mn,
        max=mx,
        worst=mn if hib else mx,
        worst_pairs=worst,
    )
