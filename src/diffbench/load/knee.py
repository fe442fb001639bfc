"""Sweep analysis: the knee, the capacity estimate and the :class:`LoadResult` of ``load`` and ``simulate``.

Every rate here is the **ok rate** (ok completions per second, :mod:`diffbench.load.summary`): a failed
request never counts as throughput, capacity or knee.

Knee rules (rows are sorted by offered rate, open loop, or by user count, closed loop). A row is *past
the knee* when it is flagged unstable or saturated (:mod:`diffbench.load.saturation`), when more than
``MAX_FAILED_FRACTION`` (1 %) of its requests failed, or by the rule of the mode:

- **With an SLO** (``slo_s``): a row *meets the SLO* when its p99 latency from intended arrival is
  ``<= slo_s`` and it is not past the knee as above. The knee is the last row of the run of passing rows
  that starts at the lowest load (a pass above a failure is treated as noise, not as a second operating
  region). None when the lowest row fails.
- **Without an SLO, open loop**: the tail ratio ``p99 / p50`` (from arrival) of each row is compared with
  that of the lowest-rate row. The knee is the last row before the first row whose ratio exceeds
  ``TAIL_RATIO_GROWTH`` (2) × the lowest row's, or that is past the knee as above. If no row trips, the
  knee is the highest rate and the reason says the sweep did not reach it.
- **Without an SLO, closed loop**: p99 stays bounded in a closed loop, so the knee is the saturation point:
  the fewest users whose ok rate is ``>= SATURATION_FRACTION`` (95 %) of the best ok rate (rows past the
  knee by failures left out); more users only add queueing latency. None when no request succeeded.

The knee's ``reason`` always starts with the knee row's label (or "none"), the row the table flags KNEE.

Capacity estimate (ok requests per second): the highest ok rate of any row, None when no request
succeeded. It is marked ``capacity_saturated`` when that row is a closed-loop row at the plateau (another
row within 5 %) or when an open-loop row is flagged unstable or saturated without more than 5 % of
failures other than ``rejected`` (a broken server is not a saturated one); otherwise it is only a lower
bound. With ``--rates auto`` the closed-loop probe of the same run is folded in
(:func:`merge_probe_capacity`): the capacity is the higher of both and says where it came from, so the
capacity line never contradicts the probe printed above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from diffbench.load.summary import FAILED_WARN_FRACTION, SCHEMA_VERSION, RateSummary, detect_divergence

TAIL_RATIO_GROWTH = 2.0
SATURATION_FRACTION = 0.95
MAX_FAILED_FRACTION = 0.01


class Knee(BaseModel):
    """The knee of a sweep. ``index`` points into ``LoadResult.rates`` (None: no row qualifies);
    ``offered_rate`` (req/s, open loop) or ``users`` (closed loop) identify the row; ``method`` is
    ``"slo"``, ``"tail_ratio"`` or ``"saturation"``; ``reason`` explains the choice in words."""

    model_config = ConfigDict(frozen=True)

    index: int | None
    offered_rate: float | None = None
    users: int | None = None
    method: Literal["slo", "tail_ratio", "saturation"]
    reason: str


class ServiceStart(BaseModel):
    """The cold start of the reference service ``load`` started itself (``--serve-engine``; seconds from the
    call that started it, ``time.perf_counter``): ``ready_s`` when its ``/health`` first answered 200 (the
    weights loaded, the service's own warmups done), ``first_ok_s`` when the first ok answer arrived: the
    first warm-up request of the load, so it includes that request's compile. ``first_ok_s`` is None with
    ``--warmup 0`` (the first answers are then measured requests; ``note`` says so)."""

    model_config = ConfigDict(frozen=True)

    ready_s: float
    first_ok_s: float | None = None
    note: str | None = None


class LoadResult(BaseModel):
    """A rate (or user-count) sweep: one :class:`~diffbench.load.summary.RateSummary` per row, sorted by
    load, plus the knee and a capacity estimate in ok requests per second.

    ``source`` is ``"load"`` or ``"simulate"``; ``conditions`` holds the run's conditions as text
    (e.g. ``{"devices": "4", "service": "3.0*N(1,0.02)+0.8*B(0.1)"}``) so a saved result re-renders alone.
    ``n``/``n_ok``/``outcomes``/``failed_fraction`` total every row; ``capacity_source`` says which rows the
    capacity came from. ``partial`` and ``interrupted`` are true for a run stopped by Ctrl-C. A run that
    ended before any measurement (every warm-up request failed to connect) has no rows, ``partial`` true,
    the reason in ``error`` and the warm-up outcome counts in ``warmup_outcomes``.
    """

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    kind: str = "diffbench.load"
    """The same for ``load`` and ``simulate`` results (``source`` tells them apart)."""
    source: str
    mode: Literal["open", "closed"]
    slo_s: float | None = None
    rates: list[RateSummary]
    knee: Knee
    capacity_rps: float | None
    capacity_saturated: bool
    capacity_source: str | None = None
    n: int = 0
    n_ok: int = 0
    outcomes: dict[str, int] = {}
    failed_fraction: float = 0.0
    partial: bool = False
    interrupted: bool = False
    conditions: dict[str, str] = {}
    warnings: list[str] = []
    error: str | None = None
    warmup_outcomes: dict[str, int] = {}
    service_start: ServiceStart | None = None
    """Set when ``load`` started the service itself (no ``--url``)."""


def _load_key(row: RateSummary) -> float:
    if row.mode == "closed":
        return float(row.users or 0)
    return row.offered_rate if row.offered_rate is not None else row.achieved_rate


def _tail_ratio(row: RateSummary) -> float:
    s = row.latency_from_arrival_s
    if s.n == 0 or not s.p50 > 0:
        return math.inf
    return s.p99 / s.p50


def _past_knee(row: RateSummary) -> str | None:
    """Why a row is past the knee whatever the mode's rule (None: it is not)."""
    if row.n_ok == 0 and row.n:
        return "no request succeeded"
    if row.failed_fraction > MAX_FAILED_FRACTION:
        return f"{row.failed_fraction:.0%} of requests failed"
    if row.unstable:
        return "flagged unstable"
    if row.saturated:
        return "flagged saturated"
    return None


def _meets_slo(row: RateSummary, slo_s: float) -> bool:
    s = row.latency_from_arrival_s
    return s.n > 0 and s.p99 <= slo_s and _past_knee(row) is None


def _knee_fields(rows: Sequence[RateSummary], index: int | None) -> dict[str, object]:
    if index is None:
        return {"index": None}
    row = rows[index]
    return {"index": index, "offered_rate": row.offered_rate, "users": row.users}


def _knee(method: str, rows: Sequence[RateSummary], index: int | None, why: str) -> Knee:
    head = "none" if index is None else rows[index].label
    return Knee(method=method, reason=f"{head}: {why}", **_knee_fields(rows, index))  # type: ignore[arg-type]


def find_knee(rows: Sequence[RateSummary], slo_s: float | None = None) -> Knee:
    """The knee of rows already sorted by load (see the module docstring for the rules).

    Raises:
        ValueError: ``rows`` is empty or mixes open- and closed-loop rows.
    """
    if not rows:
        raise ValueError("find_knee() needs at least one row")
    if len({r.mode for r in rows}) > 1:
        raise ValueError("find_knee() got both open- and closed-loop rows; analyse them separately")
    if all(r.n_ok == 0 for r in rows):
        return _knee("slo" if slo_s is not None else ("saturation" if rows[0].mode == "closed" else "tail_ratio"),
                     rows, None, "no request succeeded at any load; a knee needs ok requests")
    if slo_s is not None:
        index = None
        for i, row in enumerate(rows):
            if not _meets_slo(row, slo_s):
                break
            index = i
        if index is None:
            extra = _past_knee(rows[0])
            why = f"the lowest load ({rows[0].label}) already misses the SLO p99 <= {slo_s:g} s" + (
                f" ({extra})" if extra else "")
        else:
            tail = "every row meets it" if index == len(rows) - 1 else f"{rows[index + 1].label} misses it"
            why = (f"highest load meeting p99 <= {slo_s:g} s with <= {MAX_FAILED_FRACTION:.0%} failures and no "
                   f"saturation flag; {tail}")
        return _knee("slo", rows, index, why)

    if rows[0].mode == "closed":
        usable = [i for i, r in enumerate(rows) if r.n_ok > 0 and r.failed_fraction <= MAX_FAILED_FRACTION]
        if not usable:
            return _knee("saturation", rows, None,
                         f"every user count had more than {MAX_FAILED_FRACTION:.0%} failed requests")
        best = max(rows[i].ok_rate for i in usable)
        index = next(i for i in usable if rows[i].ok_rate >= SATURATION_FRACTION * best)
        why = (f"ok rate saturates here ({rows[index].ok_rate:.4g} ok/s, >= {SATURATION_FRACTION:.0%} of the "
               f"best {best:.4g} ok/s); more users only add latency")
        return _knee("saturation", rows, index, why)

    base = _tail_ratio(rows[0])
    index = None
    why = ""
    for i, row in enumerate(rows):
        ratio = _tail_ratio(row)
        past = _past_knee(row)
        if past is None and ratio > TAIL_RATIO_GROWTH * base:
            past = f"p99/p50 {ratio:.3g} > {TAIL_RATIO_GROWTH:g} x {base:.3g} at the lowest rate"
        if past is not None:
            why = (f"last rate before {row.label} ({past})" if index is not None
                   else f"the lowest rate {row.label} is already past the knee ({past})")
            break
        index = i
    else:
        why = f"no row past the knee; the knee is at or above {rows[-1].label}"
    return _knee("tail_ratio", rows, index, why)


def estimate_capacity(rows: Sequence[RateSummary]) -> tuple[float | None, bool]:
    """(capacity in ok req/s, saturated?) from the highest row ok rate (rules in the module docstring)."""
    if not rows:
        return None, False
    best_i = max(range(len(rows)), key=lambda i: rows[i].ok_rate)
    best = rows[best_i]
    if best.ok_rate <= 0:
        return None, False
    if best.mode == "closed":
        plateau = sum(1 for r in rows if r.ok_rate >= SATURATION_FRACTION * best.ok_rate) >= 2
        return best.ok_rate, plateau
    return best.ok_rate, any(_saturation_evidence(r) for r in rows)


def _saturation_evidence(row: RateSummary) -> bool:
    """An open-loop row shows the service's limit: flagged unstable or saturated, and not failing for other
    reasons (errors other than ``rejected`` above 5 %: a broken server is not a saturated one)."""
    if not (row.unstable or row.saturated):
        return False
    ended = row.n - row.outcomes.get("cancelled", 0) - row.outcomes.get("abandoned", 0)
    broken = ended - row.n_ok - row.outcomes.get("rejected", 0)
    return not (ended and broken / ended > FAILED_WARN_FRACTION)


def _totals(rows: Sequence[RateSummary]) -> dict[str, object]:
    outcomes: dict[str, int] = {}
    for r in rows:
        for k, v in r.outcomes.items():
            outcomes[k] = outcomes.get(k, 0) + v
    n = sum(r.n for r in rows)
    n_ok = sum(r.n_ok for r in rows)
    ended = n - outcomes.get("cancelled", 0) - outcomes.get("abandoned", 0)  # abandoned: given up on purpose
    return {"n": n, "n_ok": n_ok, "outcomes": outcomes,
            "failed_fraction": (ended - n_ok) / ended if ended else 0.0}


def analyze_sweep(
    rows: Sequence[RateSummary],
    *,
    slo_s: float | None = None,
    source: str = "load",
    conditions: dict[str, str] | None = None,
) -> LoadResult:
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
    totals = _totals(ordered)
    warnings = []
    warnings.extend(unstable_warnings(ordered, capacity))
    sat = [r.label for r in ordered if r.saturated and not r.unstable]
    if sat:
        warnings.append(f"{', '.join(sat)}: saturated: the ok rate does not keep up with the offered rate "
                        "(see the row warnings)")
    ff = float(totals["failed_fraction"])  # type: ignore[arg-type]
    if ff > FAILED_WARN_FRACTION:
        warnings.append(f"{ff:.0%} of requests failed: ok/s counts only the successes (see outcomes)")
    if not saturated and capacity is not None:
        warnings.append(f"capacity {capacity:.4g} ok/s is a lower bound: no row saturated the service")
    source_rows = "closed-loop rows" if ordered[0].mode == "closed" else "open-loop rows"
    return LoadResult(source=source, mode=ordered[0].mode, slo_s=slo_s, rates=list(ordered), knee=knee,
                       capacity_rps=capacity, capacity_saturated=saturated,
                       capacity_source=source_rows if capacity is not None else None,
                       conditions=conditions or {}, warnings=warnings, **totals)  # type: ignore[arg-type]


UNSTABLE_MARK = "unstable: p99 depends on test duration"


def unstable_warnings(rows: Sequence[RateSummary], capacity: float | None) -> list[str]:
    """The sweep-level sentences for unstable rows, worded against the capacity the result reports.

    A row is called "above capacity" only when its offered rate (req/s) exceeds ``capacity`` (ok req/s,
    the figure of the capacity line) or no capacity is known; an unstable row at or below it is named as
    such, so the sentence and the capacity line never contradict each other.
    """
    out = []
    above = [r.label for r in rows if r.unstable and (capacity is None or _load_key(r) > capacity)]
    below = [r.label for r in rows if r.unstable and capacity is not None and _load_key(r) <= capacity]
    cap = "" if capacity is None else f" {capacity:.4g} ok/s"
    if above:
        out.append(f"{', '.join(above)}: {UNSTABLE_MARK} (offered load above the capacity{cap}; the queue "
                   "grows for as long as the test runs)")
    if below:
        out.append(f"{', '.join(below)}: {UNSTABLE_MARK}, although offered below the capacity{cap}: the "
                   "queue grew during this run (bursts, or the open loop sustains less than that capacity); "
                   "a longer --duration tells which")
    return out


def merge_probe_capacity(result: LoadResult, probe: LoadResult | None) -> LoadResult:
    """Fold the closed-loop capacity probe of the same run into an open-loop sweep's capacity.

    The capacity becomes the higher of the two (both are ok rates), saturated when either is; the source
    names the probe when it won. Without a probe (or a probe with no ok request) the result is unchanged.
    """
    if probe is None or probe.capacity_rps is None:
        return result
    own = result.capacity_rps or 0.0
    warnings = [w for w in result.warnings if "is a lower bound" not in w and UNSTABLE_MARK not in w]
    saturated = result.capacity_saturated or probe.capacity_saturated
    if probe.capacity_rps > own:
        capacity, src = probe.capacity_rps, "closed-loop capacity probe"
        if result.capacity_rps is not None:
            src += f" (open-loop rows reached {result.capacity_rps:.4g} ok/s)"
    else:
        capacity, src = own, (result.capacity_source or "open-loop rows") + \
            f" (closed-loop probe {probe.capacity_rps:.4g} ok/s)"
    warnings = unstable_warnings(result.rates, capacity) + warnings  # worded against the merged capacity
    if not saturated:
        warnings.append(f"capacity {capacity:.4g} ok/s is a lower bound: no row saturated the service")
    return result.model_copy(update={"capacity_rps": capacity, "capacity_saturated": saturated,
                                     "capacity_source": src, "warnings": warnings})


__all__ = [
    "Knee",
    "LoadResult",
    "analyze_sweep",
    "detect_divergence",
    "estimate_capacity",
    "find_knee",
    "merge_probe_capacity",
    "unstable_warnings",
]
