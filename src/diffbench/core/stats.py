"""Summary statistics with one documented percentile method.

Method: linear interpolation between order statistics, numpy's default (``method="linear"``,
Hyndman & Fan type 7). Every summary carries ``n``.

A percentile q is *supported* by n samples when at least one sample lies beyond it, i.e.
``n * (1 - q/100) >= 1`` (p99 needs n >= 100, p99.9 needs n >= 1000). With fewer samples the value is
an interpolation towards the maximum, not an estimate of the tail; :func:`summarize` returns a
warning for each unsupported percentile instead of hiding it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

PERCENTILE_METHOD = "linear interpolation between order statistics (numpy 'linear', Hyndman-Fan type 7)"


class Summary(BaseModel):
    """Summary of a sample, in the sample's unit (seconds for latencies).

    ``warnings`` lists percentiles that n does not support. Values are NaN only when n == 0.
    """

    model_config = ConfigDict(frozen=True)

    n: int
    mean: float
    std: float
    min: float
    max: float
    p50: float
    p90: float
    p99: float
    p999: float
    warnings: list[str] = []


def min_n_for(q: float) -> int:
    """Smallest n for which percentile ``q`` (0-100) has at least one sample beyond it."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if q >= 100:
        return 1
    return math.ceil(1.0 / (1.0 - q / 100.0) - 1e-9)


def percentile_warnings(n: int, qs: Iterable[float] = (90, 99)) -> list[str]:
    """Warnings for each percentile in ``qs`` that ``n`` samples do not support."""
    out = []
    for q in qs:
        need = min_n_for(q)
        if n < need:
            out.append(
                f"p{q:g} from n={n} is not supported (needs n >= {need}); it is close to the maximum, "
                "not a tail estimate"
            )
    return out


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """Percentile ``q`` in [0, 100] by the documented method; NaN for an empty sample."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return math.nan
    return float(np.percentile(arr, q, method="linear"))


def summarize(values: Sequence[float] | np.ndarray, check: Iterable[float] = (90, 99)) -> Summary:
    """Summarize a sample (n, mean, std (ddof=1), min, max, p50, p90, p99, p99.9).

    Args:
        values: finite samples, any unit.
        check: percentiles whose support by n is checked; a warning is added for each unsupported one.

    Raises:
        ValueError: when a value is NaN or infinite (a NaN never reaches a summary).
    """
    arr = np.asarray(values, dtype=np.float64).ravel()
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError("summarize() got NaN or infinite values; filter or report them before summarizing")
    n = int(arr.size)
    if n == 0:
        nan = math.nan
        return Summary(
            n=0,
            mean=nan,
            std=nan,
            min=nan,
            max=nan,
            p50=nan,
            p90=nan,
            p99=nan,
            p999=nan,
            warnings=["no samples"],
        )
    p50, p90, p99, p999 = (float(v) for v in np.percentile(arr, [50, 90, 99, 99.9], method="linear"))
    return Summary(
        n=n,
        mean=float(arr.mean()),
        std=float(arr.std(ddof=1)) if n > 1 else 0.0,
        min=float(arr.min()),
        max=float(arr.max()),
        p50=p50,
        p90=p90,
        p99=p99,
        p999=p999,
        warnings=percentile_warnings(n, check),
    )
