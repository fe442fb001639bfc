"""Render a :class:`~diffbench.bench.result.BenchResult`: rich console tables and Markdown."""

from __future__ import annotations

import math

from diffbench.bench.result import BenchResult, ShapeHeadline, ShapeResult


def _ms(v: float | None) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.2f}"


def _mib(v: int | None) -> str:
    return "—" if v is None else f"{v / 2**20:.1f} MiB"


def _db(v: float | None) -> str:
    if v is None:
        return "—"
    return "inf (bitwise identical)" if math.isinf(v) else f"{v:.2f} dB"


def _warmup_text(r: BenchResult) -> str:
    p = r.protocol
    if not p.warmup_auto:
        return str(p.warmup_per_shape)
    counts = "/".join(str(len(s.warmup_s)) for s in r.shapes)
    return f"auto (until warm, max {p.max_warmup}: {counts})"


def partial_lines(r: BenchResult) -> list[str]:
    """What an interrupted run measured, one line per shape begun (warmups, timed runs, p50 of those)."""
    lines = []
    for s in r.shapes:
        warm = ", ".join(f"{w:.4g}" for w in s.warmup_s)
        line = f"partial: {s.shape}: {len(s.warmup_s)} warmup runs" + (f" ({warm} s)" if warm else "")
        line += f", {len(s.samples_s)} timed runs"
        if s.latency_s is not None and s.samples_s:
            line += f", p50 {s.latency_s.p50:.4g} s (n={s.latency_s.n}; partial, not a full result)"
        lines.append(line)
    return lines or ["partial: interrupted before any run finished"]


def cold_start_text(r: BenchResult) -> str | None:
    """The cold start in one line (None for a result without one): process start → engine ready, the engine's
    start, the first call beside the warm p50, the first shape's warmups, and process start → first output."""
    c = r.cold_start
    if c is None:
        return None
    parts = []
    if c.process_to_ready_s is not None:
        parts.append(f"process start → engine ready {c.process_to_ready_s:.3g} s (engine start {c.engine_start_s:.3g} s)")
    else:
        parts.append(f"engine start {c.engine_start_s:.3g} s (process start not readable)")
    if c.first_call_s is not None:
        first = f"first call {c.first_call_s:.3g} s ({c.first_call_phase} run of {c.first_shape}"
        if c.warm_p50_s:
            first += f"; {c.first_call_s / c.warm_p50_s:.3g}× the warm p50 {c.warm_p50_s:.3g} s"
        parts.append(first + ")")
    if c.first_shape_warmup_s is not None:
        parts.append(f"first-shape warmups {c.first_shape_warmup_s:.3g} s in all")
    if c.to_first_output_s is not None:
        parts.append(f"process start → first output {c.to_first_output_s:.3g} s")
    return " · ".join(parts)


def conditions_line(r: BenchResult) -> str:
    """The conditions block in one line, in the field's minimal-report order."""
    c = r.conditions
    gpus = ", ".join(g.name for g in r.env.gpus) or "no GPU"
    shapes = ", ".join(c.shapes) if len(c.shapes) > 1 else c.shape
    return (
        f"{c.model} ({c.pipeline}) · {shapes} · {c.steps} steps · CFG {c.cfg}"
        f"{'' if c.guidance is None else f' (guidance {c.guidance:g})'} · {c.engine} {c.engine_version} · "
        f"attention {c.attention_backend} · parallelism {c.parallelism} · {c.precision} · cache {c.cache} · "
        f"compile {'on' if c.compile else 'off'} · {c.device}: {c.hardware} · {gpus} · driver {c.driver or '—'}"
        f" / CUDA {c.cuda or '—'}"
    )


def _shape_rows(s: ShapeResult) -> list[tuple[str, str]]:
    if s.error and s.latency_s is None:
        return [("error", s.error)]
    lat = s.latency_s
    rows: list[tuple[str, str]] = []
    if s.step_s:
        rows.append(
            (
                "per-step ms (median, n)",
                f"{_ms(s.step_s.median)} (n={s.step_s.n}, "
                f"{s.step_s.steps_per_run} steps × {s.step_s.denoiser_calls_per_step:g} denoiser calls)",
            )
        )
    if s.edit:
        ran = f"{s.steps_run} of {s.steps} steps ran" if s.steps_run is not None else f"{s.steps} steps requested"
        rows.append(("edit", f"{'inpainting' if s.inpaint else 'image-to-image'} at strength {s.strength:g}: {ran}"))
    if s.stages_s:
        st = s.stages_s
        rows.append(
            (
                "stages ms (mean, adds up)",
                f"text encode {_ms(st.text_encode)} · "
                + (f"image encode {_ms(st.image_encode)} · " if s.edit or st.image_encode > 0 else "")
                + f"denoise {_ms(st.denoise)} · "
                f"VAE decode {_ms(st.vae_decode)} · other {_ms(st.other)}",
            )
        )
    if lat:
        rows.append(
            (
                "end-to-end ms",
                f"p50 {_ms(lat.p50)} · p90 {_ms(lat.p90)} · p99 {_ms(lat.p99)} · "
                f"mean {_ms(lat.mean)} · max {_ms(lat.max)} (n={lat.n})",
            )
        )
    if s.warmup_s:
        rows.append(("warmup ms (not in stats)", ", ".join(_ms(w) for w in s.warmup_s)))
    if s.memory:
        m = s.memory
        label = "peak RSS growth" if m.kind == "cpu-rss" else f"peak ({m.kind})"
        res = f" · reserved {_mib(m.peak_reserved_bytes)}" if m.peak_reserved_bytes is not None else ""
        rows.append((label, f"{_mib(m.peak_allocated_bytes)}{res} · in {m.peak_stage or '—'}"))
    if s.throughput_images_per_s is not None:
        rows.append(("throughput", f"{s.throughput_images_per_s:.3g} images/s per device"))
    if s.throughput_videos_per_s is not None:
        rows.append(("throughput", f"{s.throughput_videos_per_s:.3g} videos/s per device"))
        rows.append(("video-seconds per second", _video_seconds(s)))
    if s.mpx_steps_per_s is not None:
        per_gpu = (f" · {s.mpx_steps_per_s_per_gpu:.3g} per GPU (--gpus {s.gpus})"
                   if s.mpx_steps_per_s_per_gpu is not None else "")
        rows.append(("work", f"{s.mpx_steps_per_s:.3g} megapixel·steps/s per device{per_gpu}"))
    if s.cost_per_1000 is not None and s.gpu_s_per_output is not None:
        rows.append(("cost", f"{s.cost_per_1000:.4g} per 1,000 outputs ({s.gpu_s_per_output:.3g} GPU·s per "
                             f"output at {s.gpu_hour_price:g} per GPU-hour)"))
    if s.energy is not None:
        rows.append(("energy", s.energy.text("image" if s.frames is None else "video")))
    if s.repro:
        flag = "" if s.repro.reproducible in (None, True) else "  NOT REPRODUCIBLE"
        rows.append(
            (
                "reproducibility PSNR",
                f"{_db(s.repro.psnr_db)}{flag} (seed {s.repro.seed}, generator "
                f"{s.repro.generator_device}, threads {s.repro.threads}, attention {s.repro.attention_backend})",
            )
        )
    if s.error:
        rows.append(("error", s.error))
    return rows


def _video_seconds(s: ShapeResult) -> str:
    if s.video_seconds_per_s is None or not s.fps or s.frames is None:
        return "— (no fps known: pass --fps)"
    return (
        f"{s.video_seconds_per_s:.3g} s of video per s per device ({s.frames} frames at {s.fps:g} fps = "
        f"{s.frames / s.fps:.3g} s per video; fps: {s.fps_source or 'stated'})"
    )


SUMMARY_HEADER = ("shape", "n", "p50 ms", "p90 ms", "p99 ms", "per device", "video-s/s", "peak")


def summary_rows(r: BenchResult) -> list[tuple[str, ...]]:
    """One row per shape (every shape of a multi-shape run, failed ones with their error)."""
    rows = []
    for h in r.summary or [ShapeHeadline.of(s) for s in r.shapes]:
        if h.error and h.n == 0:
            rows.append((h.shape, "0", "—", "—", "—", "FAILED (error below)", "—", "—"))
            continue
        thr = "—" if h.throughput is None else f"{h.throughput:.3g} {h.throughput_unit}"
        vs = "—" if h.video_seconds_per_s is None else f"{h.video_seconds_per_s:.3g} ({h.fps:g} fps)"
        rows.append((h.shape, str(h.n), _ms(h.p50_s), _ms(h.p90_s), _ms(h.p99_s), thr, vs,
                     _mib(h.peak_memory_bytes)))
    return rows


def print_console(r: BenchResult) -> None:
    """Print the conditions and one table per shape, then the warnings (rich)."""
    from rich.table import Table

    from diffbench.core.console import make_console

    con = make_console(min_width=120)
    con.print(f"[bold]conditions[/bold]: {conditions_line(r)}")
    con.print(
        f"protocol: warmup {_warmup_text(r)}/shape (reported apart) · "
        f"{r.protocol.runs_per_shape} timed runs/shape · synchronized {r.protocol.synchronized} · "
        f"percentiles: {r.protocol.percentile_method}"
    )
    cold = cold_start_text(r)
    if cold:
        con.print(f"cold start (not in stats): {cold}")
    summary = Table(title="summary (every shape; details below)", title_justify="left")
    for col in SUMMARY_HEADER:
        summary.add_column(col)
    for row in summary_rows(r):
        summary.add_row(*row)
    con.print(summary)
    for s in r.shapes:
        t = Table(title=f"{s.shape}", show_header=False, title_justify="left")
        t.add_column("metric", style="bold")
        t.add_column("value")
        for k, v in _shape_rows(s):
            t.add_row(k, v)
        con.print(t)
    for w in r.warnings:
        con.print(f"[bold yellow]warning[/bold yellow] [{w.code}] {w.message}")
    if not r.valid:
        con.print("[bold red]INVALID: the protocol was violated; these numbers must not be used[/bold red]")
    if r.partial:
        con.print("[bold red]PARTIAL result (interrupted)[/bold red]")


def to_markdown(r: BenchResult) -> str:
    """The report as Markdown (conditions block, a section per shape, warnings)."""
    lines = ["# diffbench bench", "", f"**Conditions:** {conditions_line(r)}", ""]
    cold = cold_start_text(r)
    if cold:
        lines += [f"**Cold start (not in stats):** {cold}", ""]
    if r.partial:
        lines += ["**PARTIAL result (interrupted).**", ""]
    if not r.valid:
        lines += ["**INVALID: the protocol was violated.**", ""]
    lines += ["## Summary", "", "| " + " | ".join(SUMMARY_HEADER) + " |", "|" + "---|" * len(SUMMARY_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(r)]
    lines.append("")
    for s in r.shapes:
        lines += [f"## {s.shape}", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in _shape_rows(s)]
        lines.append("")
    if r.warnings:
        lines += ["## Warnings", ""] + [f"- `{w.code}` {w.message}" for w in r.warnings] + [""]
    return "\n".join(lines)
