"""Sweep analysis: the knee, the capacity estimate and the :class:`SweepResult` of ``load`` and ``simulate``.

Knee rules (rows are sorted by offered rate, open loop, or by user count, closed loop):

- **With an SLO** (``slo_s``): a row *meets the SLO* when its p99 latency from intended arrival is
  ``<= slo_s``, at most ``MAX_FAILED_FRACTION`` (1 %) of its requests are not ok, and it is not flagged
  unstable. The knee is the last row of the run of passing rows that starts at the lowest load (a pass
  above a failure is treated as noise, not as a second operating region). None when the lowest row fails.
- **Without an SLO, open loop**: the tail ratio ``p99 / p50`` (from arrival) of each row is compared with
  that of the lowest-rate row. The knee is the last row before the first row whose ratio exceeds
  ``TAIL_RATIO_GROWTH`` (2) × the lowest row's, or that is flagged unstable (see
  :func:`~diffbench.load.summary.detect_divergence`). If no row trips, the knee is the highest rate and the
  reason says the sweep did not reach it.
- **Without an SLO, closed loop**: p99 stays bounded in a closed loop, so the knee is the saturation point:
  the fewest users whose throughput is ``>= SATURATION_FRACTION`` (95 %) of the best throughput; more users
  only add queueing latency.

Capacity estimate (requests per second): the highest throughput of any row. It is marked
``capacity_saturated`` when that row is a closed-loop row at the plateau (another row within 5 %) or an
open-loop row flagged unstable (offered load above capacity); otherwise it is only a lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from diffbench.load.summary import SCHEMA_VERSION, RateSummary, detect_divergence

TAIL_RATIO_GROWTH = 2.0
SATURATION_FRACTION = 0.95
MAX_FAILED_FRACTION = 0.01


class Knee(BaseModel):
    """The knee of a sweep. ``index`` points into ``SweepResult.rates`` (None: no row qualifies);
    ``offered_rate`` (req/s, open loop) or ``users`` (closed loop) identify the row; ``method`` is
    ``"slo"``, ``"tail_ratio"`` or ``"saturation"``; ``reason`` explains the choice in words."""

    model_config = ConfigDict(frozen=True)

    index: int | None
    offered_rate: float | None = None
    users: int | None = None
    method: Literal["slo", "tail_ratio", "saturation"]
    reason: str


class SweepResult(BaseModel):
    """A rate (or user-count) sweep: one :class:`~diffbench.load.summary.RateSummary` per row, sorted by
    load, plus the knee and a capacity estimate in requests per second.

    ``source`` is ``"load"`` or ``"simulate"``; ``conditions`` holds the run's conditions as text
    (e.g. ``{"devices": "4", "service": "3.0*N(1,0.02)+0.8*B(0.1)"}``) so a saved result re-renders alone.
    """

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    source: str
    mode: Literal["open", "closed"]
    slo_s: float | None = None
    rates: list[RateSummary]
    knee: Knee
    capacity_rps: float | None
    capacity_saturated: bool
    conditions: dict[str, str] = {}
    warnings: list[str] = []


def _load_key(row: RateSummary) -> float:
    if row.mode == "closed":
        return float(row.users or 0)
    return row.offered_rate if row.offered_rate is not None else row.achieved_rate


def _tail_ratio(row: RateSummary) -> float:
    s = row.latency_from_arrival_s
    if s.n == 0 or not s.p50 > 0:
        return math.inf
    return s.p99 / s.p50


def _label(row: RateSummary) -> str:
    return f"{row.users} users" if row.mode == "closed" else f"{_load_key(row):g} req/s"


def _meets_slo(row: RateSummary, slo_s: float) -> bool:
    s = row.latency_from_arrival_s
    failed = row.n - row.outcomes.get("ok", 0)
    return (s.n > 0 and s.p99 <= slo_s and failed <= MAX_FAILED_FRACTION * row.n and not row.unstable)


def _knee_fields(rows: Sequence[RateSummary], index: int | None) -> dict[str, object]:
    if index is None:
        return {"index": None}
    row = rows[index]
    return {"index": index, "offered_rate": row.offered_rate, "users": row.users}


def find_knee(rows: Sequence[RateSummary], slo_s: float | None = None) -> Knee:
    """The knee of rows already sorted by load (see the module docstring for the rules).

    Raises:
        ValueError: ``rows`` is empty or mixes open- and closed-loop rows.
    """
    if not rows:
        raise ValueError("find_knee() needs at least one row")
    if len({r.mode for r in rows}) > 1:
        raise ValueError("find_knee() got both open- and closed-loop rows; analyse them separately")
    if slo_s is not None:
        index = None
        for i, row in enumerate(rows):
            if not _meets_slo(row, slo_s):
                break
            index = i
        if index is None:
            reason = f"the lowest load ({_label(rows[0])}) already misses the SLO p99 <= {slo_s:g} s"
        else:
            tail = "every row meets it" if index == len(rows) - 1 else f"{_label(rows[index + 1])} misses it"
            reason = f"highest load meeting p99 <= {slo_s:g} s with <= 1 % failures: {_label(rows[index])}; {tail}"
        return Knee(method="slo", reason=reason, **_knee_fields(rows, index))  # type: ignore[arg-type]

    if rows[0].mode == "closed":
        best = max(r.throughput for r in rows)
        index = next(i for i, r in enumerate(rows) if r.throughput >= SATURATION_FRACTION * best)
        reason = (f"throughput saturates at {_label(rows[index])} ({rows[index].throughput:.4g} req/s, "
                  f">= {SATURATION_FRACTION:.0%} of the best {best:.4g} req/s); more users only add latency")
        return Knee(method="saturation", reason=reason, **_knee_fields(rows, index))  # type: ignore[arg-type]

    base = _tail_ratio(rows[0])
    index = None
    reason = ""
    for i, row in enumerate(rows):
        ratio = _tail_ratio(row)
        if row.unstable or ratio > TAIL_RATIO_GROWTH * base:
            why = "flagged unstable" if row.unstable else (
                f"p99/p50 {ratio:.3g} > {TAIL_RATIO_GROWTH:g} x {base:.3g} at the lowest rate")
            reason = (f"last rate before {_label(row)} ({why})" if index is not None
                      else f"the lowest rate {_label(row)} is already past the knee ({why})")
            break
        index = i
    else:
        reason = f"no row past the knee; the knee is at or above {_label(rows[-1])}"
    return Knee(method="tail_ratio", reason=reason, **_knee_fields(rows, index))  # type: ignore[arg-type]


def estimate_capacity(rows: Sequence[RateSummary]) -> tuple[float | None, bool]:
    """(capacity in req/s, saturated?) from the highest row throughput (rules in the module docstring)."""
    if not rows:
        return None, False
    best_i = max(range(len(rows)), key=lambda i: rows[i].throughput)
    best = rows[best_i]
    if best.throughput <= 0:
        return None, False
    if best.mode == "closed":
        plateau = sum(1 for r in rows if r.throughput >= SATURATION_FRACTION * best.throughput) >= 2
        return best.throughput, plateau
    return best.throughput, any(r.unstable for r in rows)


def analyze_sweep(
    rows: Sequence[RateSummary],
    *,
    slo_s: float | None = None,
    source: str = "load",
    conditions: dict[str, str] | None = None,
) -> SweepResult:
    """Sort rows by load, find the knee, estimate capacity and collect sweep-level warnings.

    Args:
        rows: one summary per rate / user count, all the same mode.
        slo_s: latency-from-arrival objective in seconds (None: tail-ratio or saturation knee).
        source: ``"load"`` or ``"simulate"``.
        conditions: run conditions as text, stored with the result.

    Raises:
        ValueError: no rows, or mixed modes.
    """
    ordered = sorted(rows, key=_load_key)
    if not ordered:
        raise ValueError("analyze_sweep() needs at least one row")
    knee = find_knee(ordered, slo_s)
    capacity, saturated = estimate_capacity(ordered)
    warnings = []
    unstable = [_label(r) for r in ordered if r.unstable]
    if unstable:
        warnings.append(f"{', '.join(unstable)}: unstable: p99 depends on test duration (offered load above "
                        "capacity; the queue grows for as long as the test runs)")
    if not saturated and capacity is not None:
        warnings.append(f"capacity {capacity:.4g} req/s is a lower bound: no row saturated the service")
    return SweepResult(source=source, mode=ordered[0].mode, slo_s=slo_s, rates=list(ordered), knee=knee,
                       capacity_rps=capacity, capacity_saturated=saturated, conditions=conditions or {},
                       warnings=warnings)


__all__ = [
    "Knee",
    "SweepResult",
    "analyze_sweep",
    "detect_divergence",
    "estimate_capacity",
    "find_knee",
]
