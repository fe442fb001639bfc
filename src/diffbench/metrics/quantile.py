"""``histogram_quantile`` as Prometheus computes it, for tests and for reading a saved scrape.

A port of ``bucketQuantile`` in ``prometheus/prometheus`` ``promql/quantile.go`` (v2.42, the version the
Debian package ships): buckets sorted by upper bound, the last one must be ``+Inf``; cumulative counts
are made monotonic; the rank ``q × count`` is located in the first bucket whose cumulative count reaches
it, and the value is interpolated linearly inside that bucket (from 0 for the first bucket when its upper
bound is positive). A rank in the ``+Inf`` bucket returns the largest finite upper bound. The same
float64 operations in the same order, so the result is bit-identical to promtool's (checked by a test).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """The ``q``-quantile (0 ≤ q ≤ 1) of a histogram given as (upper bound ``le``, cumulative count) pairs.

    Returns NaN without a ``+Inf`` bucket, with fewer than two buckets or no observations; ``-inf`` for
    q < 0 and ``+inf`` for q > 1 (as PromQL does). Units are those of ``le`` (seconds for diffbench).
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bs = sorted((float(le), float(c)) for le, c in buckets)
    if not bs or not math.isinf(bs[-1][0]):
        return math.nan
    # coalesceBuckets: merge buckets with the same upper bound
    merged: list[list[float]] = []
    for le, c in bs:
        if merged and merged[-1][0] == le:
            merged[-1][1] += c
        else:
            merged.append([le, c])
    # ensureMonotonic
    top = -math.inf
    for b in merged:
        if b[1] > top:
            top = b[1]
        elif b[1] < top:
            b[1] = top
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i in range(len(merged) - 1) if merged[i][1] >= rank), len(merged) - 1)
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    bucket_start = 0.0
    bucket_end = merged[b][0]
    count = merged[b][1]
    if b > 0:
        bucket_start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    return bucket_start + (bucket_end - bucket_start) * (rank / count)
