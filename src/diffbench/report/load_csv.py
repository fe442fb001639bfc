"""``diffbench load --csv``: one row per rate (open loop) or user count (closed loop) of a sweep.

The console table's columns in machine units: rates in requests per second, times in **seconds** (the
JSON result's units, full float precision, so a value reads back equal to the JSON one), counts as
integers, an empty cell where the JSON has null. Written with :mod:`csv` (RFC 4180 quoting).

Columns: ``mode``, ``users``, ``offered_rate`` (empty for a burst), ``offered`` (the table's text:
users, rate or ``inf``), ``schedule``, ``stopped_by`` (``duration`` / ``num_requests``), ``duration_s`` (the row's window), ``n``, ``n_sent``,
``n_completed``, ``n_ok``, ``n_good``, the rates ``scheduled_rate``, ``sent_rate``, ``ok_rate``,
``goodput``, ``completed_rate``, ``failed_fraction``; latency from intended arrival
``latency_{mean,p50,p90,p99,p999,max}_s`` (ok requests), ``latency_from_send_{p50,p99}_s``,
``lag_{p50,p99,max}_s``, ``client_queue_p99_s``; one ``outcome_<kind>`` count per outcome kind; the
flags ``knee``, ``unstable``, ``saturated``; ``warnings`` (their count) and ``goodput_definition``; with
``--scrape``, the server's view (:data:`SERVER_COLUMNS`: scrapes, queue depth mean/max, running mean/max,
queue wait / request / service / stage means in seconds, ``server_n`` and one ``server_outcome_<kind>``
per server outcome), empty cells without it; with per-request SLOs (``load --trace`` ``slo_s`` column,
``--slo-scale``), ``slo_requests``, ``slo_met`` and ``slo_attainment`` (empty without); then, each group
empty where the run did not measure it, :data:`ABANDON_COLUMNS`, :data:`WORK_COLUMNS`,
:data:`QUALITY_COLUMNS` and :data:`ENERGY_COLUMNS`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from diffbench.core.records import OUTCOMES
from diffbench.load.knee import LoadResult
from diffbench.load.summary import RateSummary
from diffbench.metrics.names import OUTCOMES as SERVER_OUTCOMES
from diffbench.report.load_table import offered_text

SERVER_COLUMNS: tuple[str, ...] = (
    "server_scrapes", "server_queue_depth_mean", "server_queue_depth_max", "server_running_mean",
    "server_running_max", "server_queue_wait_mean_s", "server_request_mean_s", "server_service_mean_s",
    *(f"server_{st}_mean_s" for st in ("text_encode", "denoise", "vae_decode")),
    "server_n", *(f"server_outcome_{k}" for k in SERVER_OUTCOMES),
)
"""``load --scrape``: the server's view of the row (empty cells without ``--scrape``)."""

ABANDON_COLUMNS: tuple[str, ...] = (
    "outcome_abandoned", "server_cancelled_running", "server_cancel_release_mean_s", "server_cancelled_s",
)
"""``load --abandon-after``: the requests given up by their client and, with ``--scrape``, the server's
cancels of them (last, so the earlier columns keep their places)."""
WORK_COLUMNS: tuple[str, ...] = (
    "started_unix_s", "ok_outputs", "mpx_steps_per_s", "gpus", "mpx_steps_per_s_per_gpu", "gpu_s_per_output",
    "gpu_hour_price", "cost_per_1000",
)
"""The row's start (Unix seconds, UTC), its work-normalized throughput and, with ``--gpus`` /
``--gpu-hour-price``, its GPU time and cost per 1,000 ok outputs (:mod:`diffbench.load.workcost`)."""
QUALITY_COLUMNS: tuple[str, ...] = (
    "quality_n_reference", "quality_n_scored", "psnr_p50_db", "psnr_p10_db", "psnr_worst_db", "ssim_p50",
    "ssim_worst", "psnr_gate_db", "fraction_under_gate", "quality_n_good", "quality_goodput_fraction",
    "quality_goodput_ci_low", "quality_goodput_ci_high",
)
"""``load --reference``: the row's scored reference requests (:mod:`diffbench.load.scored`); identical
answers count as 200 dB."""
ENERGY_COLUMNS: tuple[str, ...] = ("server_energy_j", "server_energy_per_ok_output_j", "server_energy_source")
"""``load --scrape``: the server's energy counter over the row (joules) and per ok output."""
_OUTCOMES = tuple(k for k in OUTCOMES if k != "abandoned")

_LATENCY = (("mean", "mean"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p999"), ("max", "max"))

COLUMNS: tuple[str, ...] = (
    "mode", "users", "offered_rate", "offered", "schedule", "stopped_by", "duration_s", "n", "n_sent", "n_completed", "n_ok",
    "n_good", "scheduled_rate", "sent_rate", "ok_rate", "goodput", "completed_rate", "failed_fraction",
    *(f"latency_{k}_s" for k, _ in _LATENCY), "latency_from_send_p50_s", "latency_from_send_p99_s",
    "lag_p50_s", "lag_p99_s", "lag_max_s", "client_queue_p99_s", *(f"outcome_{k}" for k in _OUTCOMES),
    "knee", "unstable", "saturated", "warnings", "goodput_definition",
    *SERVER_COLUMNS, "slo_requests", "slo_met", "slo_attainment", *ABANDON_COLUMNS,
    *WORK_COLUMNS, *QUALITY_COLUMNS, *ENERGY_COLUMNS,
)
"""Every column; each group added later goes last, so the earlier columns keep their places."""


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def row_values(row: RateSummary, *, is_knee: bool) -> dict[str, object]:
    """The CSV columns of one row (values as in the JSON result)."""
    lat, send, lag = row.latency_from_arrival_s, row.latency_from_send_s, row.lag_s
    out: dict[str, object] = {
        "mode": row.mode, "users": row.users, "offered_rate": row.offered_rate, "offered": offered_text(row),
        "schedule": row.schedule, "stopped_by": row.stopped_by, "duration_s": row.duration_s, "n": row.n, "n_sent": row.n_sent,
        "n_completed": row.n_completed, "n_ok": row.n_ok, "n_good": row.n_good,
        "scheduled_rate": row.scheduled_rate, "sent_rate": row.sent_rate, "ok_rate": row.ok_rate,
        "goodput": row.goodput, "completed_rate": row.completed_rate, "failed_fraction": row.failed_fraction,
    }
    for name, attr in _LATENCY:
        out[f"latency_{name}_s"] = getattr(lat, attr)
    out.update({
        "latency_from_send_p50_s": send.p50, "latency_from_send_p99_s": send.p99,
        "lag_p50_s": lag.p50, "lag_p99_s": lag.p99, "lag_max_s": lag.max,
        "client_queue_p99_s": row.client_queue_s.p99,
    })
    for k in OUTCOMES:
        out[f"outcome_{k}"] = row.outcomes.get(k, 0)  # abandoned included (its column is among the last)
    out.update({"knee": is_knee, "unstable": row.unstable, "saturated": row.saturated,
                "warnings": len(row.warnings),
                "goodput_definition": " ".join(c.text() for c in row.goodput_constraints)
                or (f"latency:{row.slo_s:g}" if row.slo_s is not None else "")})
    sv = row.server
    out["server_scrapes"] = sv.scrapes if sv else None
    for col in ("queue_depth_mean", "queue_depth_max", "running_mean", "running_max", "queue_wait_mean_s",
                "request_mean_s", "service_mean_s"):
        out[f"server_{col}"] = getattr(sv, col) if sv else None
    for st in ("text_encode", "denoise", "vae_decode"):
        out[f"server_{st}_mean_s"] = sv.stages_mean_s.get(st) if sv else None
    out["server_n"] = sv.n if sv else None
    for k in SERVER_OUTCOMES:
        out[f"server_outcome_{k}"] = sv.outcomes.get(k, 0) if sv else None
    out.update({"slo_requests": row.slo_requests, "slo_met": row.slo_met, "slo_attainment": row.slo_attainment})
    out["server_cancelled_running"] = sv.cancelled_running if sv else None
    out["server_cancel_release_mean_s"] = sv.cancel_release_mean_s if sv else None
    out["server_cancelled_s"] = sv.cancelled_s if sv else None
    for col in WORK_COLUMNS:
        out[col] = getattr(row, col)
    q = row.quality
    out.update({
        "quality_n_reference": q.n_reference if q else None, "quality_n_scored": q.n_scored if q else None,
        "psnr_p50_db": q.psnr_p50_db if q else None, "psnr_p10_db": q.psnr_p10_db if q else None,
        "psnr_worst_db": q.psnr_worst_db if q else None, "ssim_p50": q.ssim_p50 if q else None,
        "ssim_worst": q.ssim_worst if q else None, "psnr_gate_db": q.gate_psnr_db if q else None,
        "fraction_under_gate": q.fraction_under_gate if q else None,
        "quality_n_good": q.goodput.n_good if q else None, "quality_goodput_fraction": q.goodput.fraction if q else None,
        "quality_goodput_ci_low": q.goodput.ci_low if q else None,
        "quality_goodput_ci_high": q.goodput.ci_high if q else None,
    })
    out["server_energy_j"] = sv.energy_j if sv else None
    out["server_energy_per_ok_output_j"] = sv.energy_per_ok_output_j if sv else None
    out["server_energy_source"] = sv.energy_source if sv else None
    return out


def sweep_csv(result: LoadResult) -> str:
    """The CSV text of a sweep (header and one line per row, ``\\r\\n`` line ends as the csv module writes)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS))
    w.writeheader()
    for i, row in enumerate(result.rates):
        w.writerow({k: _cell(v) for k, v in row_values(row, is_knee=result.knee.index == i).items()})
    return buf.getvalue()


def write_sweep_csv(path: str | Path, result: LoadResult) -> None:
    """Write :func:`sweep_csv` to ``path`` with :func:`diffbench.core.jsonio.write_text_atomic` (a reader
    never sees half a file). The caller checked the path with :func:`diffbench.core.outpath.check_output_file`.

    Raises:
        InputError: the file cannot be written."""
    from diffbench.core.jsonio import write_text_atomic

    write_text_atomic(path, sweep_csv(result), newline="")


__all__ = ["ABANDON_COLUMNS", "COLUMNS", "ENERGY_COLUMNS", "QUALITY_COLUMNS", "WORK_COLUMNS", "row_values", "sweep_csv",
           "write_sweep_csv"]
