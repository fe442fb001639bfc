"""Work-normalized throughput, cost and wall-clock start of one load row (the optional fields of
:class:`~diffbench.load.summary.RateSummary` they fill).

Definitions (the formulas of :mod:`diffbench.core.workcost`):

- *ok window* ``W``: the window ok/s is counted over, ``max(duration_s, last ok done - t0)`` with ``t0 =
  min(0, first intended arrival)`` (:mod:`diffbench.load.summary`).
- *work* of an ok request: ``width * height * (frames or 1) * steps * outputs / 1e6`` megapixel·steps, what
  it asked for (:attr:`~diffbench.core.records.RequestRecord.work_mpx_steps`; an edit at strength < 1 runs
  fewer steps than it asks for, and is counted at the steps asked for).
- ``mpx_steps_per_s`` = the work of the ok requests ÷ ``W``; None when an ok request's work is unknown (a
  dialect that sends no steps: the server's default applies).
- ``mpx_steps_per_s_per_gpu`` = ``mpx_steps_per_s ÷ gpus`` (with ``--gpus``).
- ``gpu_s_per_output`` = ``gpus * W ÷ ok outputs``: the GPUs are paid for the whole window, idle time
  included, which is what a deployment pays; ``cost_per_1000`` = ``price * gpu_s_per_output * 1000 / 3600``
  (with ``--gpus`` and ``--gpu-hour-price``).
- ``started_unix_s``: the row's ``t=0`` (the origin of every offset of its records) on the wall clock, Unix
  epoch seconds (UTC), from the run's one wall-clock/monotonic pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from diffbench.core.records import RequestRecord
from diffbench.core.workcost import cost_per_1000, run_clock


def ok_window_s(records: Sequence[RequestRecord], duration_s: float) -> float:
    """The ok window ``W`` of a row (module docstring), seconds."""
    t0 = min(0.0, min((r.intended_s for r in records), default=0.0))
    last = max((r.done_s for r in records if r.outcome == "ok" and r.done_s is not None), default=None)
    return duration_s if last is None else max(duration_s, last - t0)


def work_cost_fields(records: Sequence[RequestRecord], duration_s: float, *, gpus: int | None = None,
                     gpu_hour_price: float | None = None, t0_ns: int | None = None) -> dict[str, object]:
    """The work, cost and start fields of a row of ``records`` over ``duration_s`` (the row's
    ``duration_s``), as a :meth:`pydantic.BaseModel.model_copy` update (only the fields that are known).

    Args:
        records: every request of the row.
        duration_s: the row's arrival window (seconds, > 0).
        gpus: GPUs serving the row (None: unknown, no per-GPU figure and no cost).
        gpu_hour_price: price per GPU-hour (None: no cost).
        t0_ns: the row's ``t=0`` on ``time.perf_counter_ns`` (None: no ``started_unix_s``).
    """
    out: dict[str, object] = {}
    if t0_ns is not None:
        out["started_unix_s"] = run_clock().unix_at(t0_ns)
    if gpus is not None:
        out["gpus"] = gpus
    if gpu_hour_price is not None:
        out["gpu_hour_price"] = gpu_hour_price
    ok = [r for r in records if r.outcome == "ok"]
    if not ok:
        return out
    window = ok_window_s(records, duration_s)
    outputs = sum(r.outputs or 1 for r in ok)
    out["ok_outputs"] = outputs
    works = [r.work_mpx_steps for r in ok]
    if all(w is not None for w in works):
        rate = sum(w for w in works if w is not None) / window
        out["mpx_steps_per_s"] = rate
        if gpus is not None:
            out["mpx_steps_per_s_per_gpu"] = rate / gpus
    if gpus is not None:
        per_output = gpus * window / outputs
        out["gpu_s_per_output"] = per_output
        if gpu_hour_price is not None:
            out["cost_per_1000"] = cost_per_1000(gpu_hour_price, per_output)
    return out


__all__ = ["ok_window_s", "work_cost_fields"]
