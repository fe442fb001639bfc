"""Render a :class:`~diffbench.load.knee.LoadResult` (``diffbench load`` / ``diffbench simulate``) with rich.

One row per offered rate (open loop) or user count (closed loop): offered rate and sent rate (open loop),
``ok/s`` (ok completions per second), ``goodput`` (ok within the SLO per second), ``completed/s`` (any
outcome: secondary), the failed fraction; latency from intended arrival p50/p90/p99/p99.9 (ok requests)
and p99 from send; client lag p99; outcome counts; flags (``KNEE``, ``UNSTABLE``, ``SATURATED``,
warnings). Stored seconds are shown as ms below 1 s. With ``load --scrape`` a second table puts the
server's own view (queue depth and wait, request and stage times, outcomes) beside each row.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from diffbench.core.console import make_console
from diffbench.load.client.scoring import PSNR_IDENTICAL_DB
from diffbench.load.knee import LoadResult
from diffbench.load.summary import RateSummary

if TYPE_CHECKING:
    from diffbench.load.client.profile import ProfileRun


def fmt_seconds(v: float | None) -> str:
    """Seconds as text: ``"—"`` for None/NaN, ms below 1 s, else seconds with 3 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if abs(v) < 1.0:
        return f"{v * 1e3:.3g}ms"
    return f"{v:.3g}s" if abs(v) < 1000 else f"{v:.0f}s"


def _rate(v: float | None) -> str:
    return "—" if v is None or math.isnan(v) else f"{v:.3g}"


def offered_text(row: RateSummary) -> str:
    """The offered column: users (closed loop), ``inf`` for a burst, else the rate (req/s)."""
    if row.mode == "closed":
        return str(row.users)
    return "inf" if row.schedule == "burst" else _rate(row.offered_rate)


def _outcomes(row: RateSummary) -> str:
    parts = [f"ok {row.outcomes.get('ok', 0)}"]
    parts += [f"{k} {v}" + (invalid_kinds_text(row) if k == "invalid_payload" else "")
              for k, v in row.outcomes.items() if k != "ok" and v]
    return " · ".join(parts)


def invalid_kinds_text(row: RateSummary) -> str:
    """`` (black_image 3, duplicate_across_seeds 2)``: the row's invalid answers by sanity kind ("" when none)."""
    return f" ({', '.join(f'{k} {v}' for k, v in row.invalid_kinds.items())})" if row.invalid_kinds else ""


def _flags(row: RateSummary, is_knee: bool) -> Text:
    out = Text()
    if is_knee:
        out.append("KNEE ", style="bold green")
    if row.unstable:
        out.append("UNSTABLE ", style="bold red")
    elif row.saturated:
        out.append("SATURATED ", style="bold red")
    if row.warnings:
        out.append(f"{len(row.warnings)} warning(s)", style="yellow")
    return out


def sweep_table(result: LoadResult, title: str | None = None) -> Table:
    """The per-rate table of a sweep (rates or users as rows, knee marked)."""
    closed = result.mode == "closed"
    table = Table(title=title or f"{result.source} · {result.mode} loop", title_justify="left",
                  box=box.SIMPLE_HEAD, caption="rates per second over [0, max(duration, last event)]: ok/s "
                  "counts ok requests only, goodput ok requests meeting the SLO / --goodput, completed/s any outcome"
                  + ("" if closed else ", sent/s the client's sends") + "; p50..p99.9: latency from intended arrival (ok requests); p99 send: "
                  "from actual send", caption_justify="left")
    table.add_column("users" if closed else "offered", justify="right", no_wrap=True)
    names = ([] if closed else ["sent/s"]) + ["ok/s", "goodput", "completed/s", "failed", "p50", "p90", "p99",
                                              "p99.9", "p99 send", "lag p99", "n ok"]
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("outcomes")
    table.add_column("flags")
    for i, row in enumerate(result.rates):
        lat = row.latency_from_arrival_s
        is_knee = result.knee.index == i
        cells = [offered_text(row)]
        if not closed:
            cells.append(_rate(row.sent_rate))
        cells += [
            _rate(row.ok_rate), _rate(row.goodput), _rate(row.completed_rate), f"{row.failed_fraction:.0%}",
            fmt_seconds(lat.p50), fmt_seconds(lat.p90), fmt_seconds(lat.p99), fmt_seconds(lat.p999),
            fmt_seconds(row.latency_from_send_s.p99), fmt_seconds(row.lag_s.p99), str(row.n_ok),
        ]
        table.add_row(*cells, _outcomes(row), _flags(row, is_knee), style="bold" if is_knee else None)
    return table


def _row_label(row: RateSummary) -> str:
    if row.schedule == "burst":
        return f"burst of {row.n}"
    return f"{row.users} users" if row.mode == "closed" else f"{_rate(row.offered_rate)} req/s"


def per_shape_table(result: LoadResult) -> Table | None:
    """Per-shape breakdown (rows: rate x shape) with latency from arrival; None when no row has shapes."""
    if not any(row.per_shape for row in result.rates):
        return None
    table = Table(title="per shape", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("load", "shape", "n", "ok", "p50", "p90", "p99"):
        table.add_column(name, justify="left" if name in ("load", "shape") else "right", no_wrap=True)
    for row in result.rates:
        for shape, s in row.per_shape.items():
            lat = s.latency_from_arrival_s
            table.add_row(_row_label(row), shape, str(s.n), str(s.outcomes.get("ok", 0)), fmt_seconds(lat.p50),
                          fmt_seconds(lat.p90), fmt_seconds(lat.p99))
    return table


def server_table(result: LoadResult) -> Table | None:
    """The server's own view of each row (``load --scrape``), beside the client's: queue depth mean/max
    and queue wait mean, the mean request and stage times, and the outcomes the server counted; None
    when no row was scraped."""
    if not any(row.server is not None for row in result.rates):
        return None
    url = next(row.server.url for row in result.rates if row.server is not None)
    table = Table(title=f"server side (scraped from {url})", title_justify="left", box=box.SIMPLE_HEAD,
                  caption="queue depth: mean/max of the scrapes inside the row; times: mean from histogram "
                  "sum/count deltas over the row; outcomes: diffusion_requests_total deltas (user traffic)",
                  caption_justify="left")
    sources = list(dict.fromkeys(row.server.energy_source for row in result.rates
                                 if row.server is not None and row.server.energy_j is not None))
    energy = ["J/ok output"] if sources else []  # the column appears only where a counter was scraped
    if sources:
        table.caption = f"{table.caption}; J/ok output: Δ{' / Δ'.join(str(s) for s in sources)} over the row ÷ ok outputs"
    for name in ("load", "client p50", "q depth", "q wait", "request", "service", "text_encode", "denoise",
                 "vae_decode", *energy, "outcomes", "scrapes"):
        table.add_column(name, justify="left" if name in ("load", "outcomes") else "right", no_wrap=True)
    for row in result.rates:
        sv = row.server
        if sv is None:
            table.add_row(_row_label(row), *(["—"] * (10 + len(energy))))
            continue
        joules = [] if not energy else ["—" if sv.energy_per_ok_output_j is None
                                        else f"{sv.energy_per_ok_output_j:.4g}"]
        depth = ("—" if sv.queue_depth_mean is None else
                 f"{sv.queue_depth_mean:.3g}/{sv.queue_depth_max:.3g}")
        outs = " · ".join(f"{k} {v}" for k, v in sv.outcomes.items() if v) or "none"
        table.add_row(_row_label(row), fmt_seconds(row.latency_from_arrival_s.p50 if row.n_ok else None), depth,
                      fmt_seconds(sv.queue_wait_mean_s), fmt_seconds(sv.request_mean_s),
                      fmt_seconds(sv.service_mean_s),
                      *(fmt_seconds(sv.stages_mean_s.get(st)) for st in ("text_encode", "denoise", "vae_decode")),
                      *joules, outs, str(sv.scrapes) + (f" ({len(sv.errors)} failed)" if sv.errors else ""))
    return table


def work_table(result: LoadResult) -> Table | None:
    """Each row's start on the wall clock (UTC), its work-normalized throughput and, with ``load --gpus``
    and ``--gpu-hour-price``, its GPU time and cost per ok output (:mod:`diffbench.load.workcost`); None
    when no row has any of them."""
    rows = result.rates
    if not any(r.started_unix_s is not None or r.mpx_steps_per_s is not None for r in rows):
        return None
    from diffbench.core.workcost import utc_text

    gpus = next((r.gpus for r in rows if r.gpus is not None), None)
    price = next((r.gpu_hour_price for r in rows if r.gpu_hour_price is not None), None)
    caption = ("Mpx·steps/s: width x height x frames x steps of the ok outputs / 1e6 per second of the ok "
               "window" + (f"; per GPU over --gpus {gpus}; GPU·s/output = GPUs x window / ok outputs (the GPUs "
                           "are paid for the whole window)" if gpus is not None else "")
               + (f"; cost/1000 = {price:g} per GPU-hour x GPU·s/output x 1000 / 3600" if price is not None else ""))
    table = Table(title="work and cost", title_justify="left", box=box.SIMPLE_HEAD, caption=caption,
                  caption_justify="left")
    names = ["load", "started (UTC)", "ok outputs", "Mpx·steps/s"]
    if gpus is not None:
        names += ["per GPU", "GPU·s/output"]
    if price is not None:
        names.append("cost/1000")
    for name in names:
        table.add_column(name, justify="left" if name in ("load", "started (UTC)") else "right", no_wrap=True)
    for r in rows:
        cells = [_row_label(r), "—" if r.started_unix_s is None else utc_text(r.started_unix_s),
                 "—" if r.ok_outputs is None else str(r.ok_outputs), _rate(r.mpx_steps_per_s)]
        if gpus is not None:
            cells += [_rate(r.mpx_steps_per_s_per_gpu), _rate(r.gpu_s_per_output)]
        if price is not None:
            cells.append(_rate(r.cost_per_1000))
        table.add_row(*cells)
    return table


def abandon_table(result: LoadResult) -> Table | None:
    """``load --abandon-after``: per row the requests the clients gave up on, and (with ``--scrape``) what
    the server did with them: generations it cancelled while running, its mean time from the cancel to the
    worker released, and the device seconds spent on them; None when no row abandoned a request."""
    if not any(row.outcomes.get("abandoned", 0) for row in result.rates):
        return None
    table = Table(title="abandoned requests", title_justify="left", box=box.SIMPLE_HEAD,
                  caption="abandoned: given up by the client (connection closed, or video job deleted), neither ok "
                  "nor failed; server columns from --scrape: generations cancelled while running, mean cancel → "
                  "worker released, device seconds spent on answers nobody took", caption_justify="left")
    for name in ("load", "abandoned", "server cancelled", "release", "GPU·s on abandoned"):
        table.add_column(name, justify="left" if name == "load" else "right", no_wrap=True)
    for row in result.rates:
        sv = row.server
        gpu_s = "—" if sv is None or sv.cancelled_s is None else f"{sv.cancelled_s:.4g}"
        table.add_row(_row_label(row), str(row.outcomes.get("abandoned", 0)),
                      "—" if sv is None else str(sv.cancelled_running),
                      fmt_seconds(sv.cancel_release_mean_s if sv else None), gpu_s)
    return table


def summary_line(result: LoadResult) -> str:
    """One line: requests, ok, failed fraction (called out above 5 %) and the capacity in ok/s."""
    from diffbench.load.summary import FAILED_WARN_FRACTION

    parts = [f"{result.n} requests, {result.n_ok} ok"]
    if result.failed_fraction > FAILED_WARN_FRACTION:
        parts.append(f"{result.failed_fraction:.0%} of requests failed")
    elif result.failed_fraction > 0:
        parts.append(f"{result.failed_fraction:.1%} failed")
    if result.capacity_rps is None:
        parts.append("capacity: none (no request succeeded)" if result.n_ok == 0 else "capacity: none")
    else:
        how = "saturated" if result.capacity_saturated else "lower bound"
        src = f"; from {result.capacity_source}" if result.capacity_source else ""
        parts.append(f"capacity: {result.capacity_rps:.4g} ok/s ({how}{src})")
    return " · ".join(parts)


def print_sweep(result: LoadResult, console: Console | None = None, title: str | None = None,
                min_width: int = 150) -> None:
    """Print the table, the knee, the capacity estimate and the warnings of a sweep.

    When the console is not a terminal (piped, captured), its width is raised to at least ``min_width``
    columns while printing (restored afterwards) instead of squeezing the table into rich's default 80 —
    unless ``COLUMNS`` is set, which wins (:func:`diffbench.core.console.make_console`).
    """
    console = console or make_console()
    saved = console.width
    if not console.is_terminal and saved < min_width and not os.environ.get("COLUMNS", "").strip():
        console.width = min_width
    try:
        _print_sweep(result, console, title)
    finally:
        console.width = saved


def _print_sweep(result: LoadResult, console: Console, title: str | None) -> None:
    if result.conditions:
        console.print(" · ".join(f"{k} {v}" for k, v in result.conditions.items()), style="dim")
    console.print(sweep_table(result, title))
    for table in (per_shape_table(result), server_table(result), work_table(result), abandon_table(result)):
        if table is not None:  # each only when the run has what it shows
            console.print(table)
    for row in result.rates:
        if row.server_stages_s:
            stages = " · ".join(f"{k} {fmt_seconds(v)}" for k, v in row.server_stages_s.items())
            console.print(f"{_row_label(row)}: server stages (mean) {stages}", style="dim")
        if row.adapter_swaps is not None:
            console.print(f"{_row_label(row)}: LoRA adapter swaps before {row.adapter_swaps} of {row.n_ok} ok requests "
                          "(latency by adapter: the per-shape table)")
        if row.poll_granularity_s is not None:
            console.print(f"{_row_label(row)}: video jobs polled adaptively: each latency is at most "
                          f"{row.poll_granularity_s * 1e3:.1f} ms after its job ended (poll granularity)",
                          style="dim")
    console.print(f"knee: {result.knee.reason}")
    console.print(summary_line(result))
    if result.slo_s is not None:
        console.print(f"SLO: p99 latency from arrival <= {fmt_seconds(result.slo_s)}")
    constraints = next((r.goodput_constraints for r in result.rates if r.goodput_constraints), None)
    if constraints:
        from diffbench.load.goodput import describe

        console.print(f"goodput: ok requests with {describe(constraints)}, per second")
    for w in result.warnings:
        console.print(f"warning: {w}", style="yellow")
    for row in result.rates:
        for w in row.warnings:
            console.print(f"  {_row_label(row)}: {w}", style="yellow")


def _db(v: float | None) -> str:
    return "n/a" if v is None else ("identical" if v >= PSNR_IDENTICAL_DB else f"{v:.2f} dB")


def quality_line(row: RateSummary) -> str:
    """``0.5 req/s: quality vs --reference: 6 scored of 6, PSNR p50 … p10 … worst …, 0% under 30 dB;
    quality goodput 6/6 = 100% (95% CI 54-100%)`` (``row.quality`` must be set)."""
    q = row.quality
    assert q is not None
    text = (f"{_row_label(row)}: quality vs --reference: "
            f"{q.n_scored} scored of {q.n_reference}, PSNR p50 {_db(q.psnr_p50_db)}, p10 {_db(q.psnr_p10_db)}, "
            f"worst {_db(q.psnr_worst_db)}")
    if q.ssim_p50 is not None:
        text += f", SSIM p50 {q.ssim_p50:.4f}"
    if q.fraction_under_gate is not None:
        text += f", {q.fraction_under_gate:.0%} under {q.gate_psnr_db:g} dB"
    g = q.goodput
    if g.fraction is not None and g.floors:
        text += (f"; quality goodput {g.n_good}/{g.n} = {g.fraction:.0%} "
                 f"(95% CI {g.ci_low:.0%}-{g.ci_high:.0%})")
    return text


def print_profile(run: ProfileRun, console: Console) -> None:
    """Print a ``diffbench load`` run: the warm-up counts and errors, the capacity probe (automatic rates),
    the rows (unless the probe measured no ok request), each row's HdrHistogram merge and SLO attainment."""
    if run.warmup.n:
        w = ", ".join(f"{k} {v}" for k, v in run.warmup.outcomes.items())
        console.print(f"warm-up: {run.warmup.n} request(s): {w}")
        for err in run.warmup.errors:
            console.print(f"  warm-up error: {err}")
    if run.probe is not None:
        print_sweep(run.probe, console, title="capacity probe (closed loop)")
    if run.failed_in is None:
        print_sweep(run.result, console, title=f"diffbench load ({run.result.mode} loop)")
        for row in run.result.rates:
            if row.hdr is not None and "latency_from_arrival" in row.hdr.quantities:
                h = row.hdr.quantities["latency_from_arrival"]
                label = f"{row.users} users" if row.mode == "closed" else f"{offered_text(row)} req/s"
                console.print(f"{label}: HdrHistogram merge of the workers: {h.n} ok, latency from "
                              f"arrival p50 {h.p50 * 1e3:.3f} ms, p99 {h.p99 * 1e3:.3f} ms ({row.hdr.error})")
            if row.quality is not None:
                console.print(quality_line(row))
            if row.slo_requests is not None:
                att = "n/a" if row.slo_attainment is None else f"{row.slo_attainment:.1%}"
                console.print(f"{offered_text(row)}: SLO attainment {att} ({row.slo_met} of {row.slo_requests} "
                              "requests with an SLO met it)")


__all__ = ["abandon_table", "fmt_seconds", "offered_text", "per_shape_table", "print_profile", "print_sweep",
           "quality_line", "server_table", "summary_line", "sweep_table", "work_table"]
