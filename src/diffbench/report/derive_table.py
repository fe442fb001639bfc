"""The cells of a :class:`~diffbench.derive.models.DeriveResult` (``derive.json``), for the console and the report.

One formatting for both: :func:`print_console` (rich, what ``diffbench derive`` prints) and the report
builder ``report/kinds/derive.py`` (HTML / Markdown) take their headers, rows and facts from here, so a
number reads the same wherever it is shown. Seconds, dB and speed-ups (× ; > 1 is faster than the
configuration the step started from) throughout.
"""

from __future__ import annotations

import math

from diffbench.derive.models import STAGES, DeriveResult, Final, Measured, Sizing, StepRecord
from diffbench.report.kinds.plan import circled

STEP_HEADERS = ["stage", "candidate", "decision", "reason", "predicted (×)", "measured (×) (95 % CI)",
                "noise floor CI", "PSNR p50 / p10 / worst (dB)", "latency after (s)", "GPU·s after",
                "PSNR spent (dB)"]
"""Columns of :func:`step_rows`: one row per step, in the order the derivation ran them."""

SIZING_HEADERS = ["layout", "GPUs/instance", "latency (s)", "p99 with queueing (s)", "meets SLO", "instances",
                  "total GPUs", "nodes", "GPU·s", "spread", "source"]
"""Columns of :func:`sizing_rows`."""

PREDICTED = "predicted, not measured"
"""The source cell of a sizing row from the ledger (e.g. a multi-GPU layout the engine cannot run here)."""


def stage_label(stage: int, name: str | None = None) -> str:
    """``① account``: the circled number and the stage's name from :data:`STAGES` (``name`` if unknown)."""
    return f"{circled(stage)} {STAGES.get(stage, name or '')}".rstrip()


def db(v: float | None) -> str:
    """dB with two decimals; ``∞`` for identical outputs; ``—`` for none."""
    if v is None or math.isnan(v):
        return "—"
    return "∞" if math.isinf(v) else f"{v:.2f}"


def seconds(v: float | None) -> str:
    """Seconds with three decimals (``—`` for none)."""
    return "—" if v is None else f"{v:.3f}"


def ci(pair: tuple[float, float] | None) -> str:
    """``low–high`` with three decimals, ``—`` for none."""
    return "—" if pair is None else f"{pair[0]:.3f}–{pair[1]:.3f}"


def speedup_cell(m: Measured | None) -> str:
    """``1.234 (1.201–1.270)``: the measured speed-up with its 95 % paired-bootstrap CI."""
    return "—" if m is None else f"{m.speedup:.3f} ({ci(m.ci)})"


def quality_cell(m: Measured | None) -> str:
    """``identical`` when every image is bitwise equal to the baseline's, else PSNR ``p50 / p10 / worst``."""
    if m is None:
        return "—"
    if m.identical:
        return "identical"
    return f"{db(m.psnr_p50)} / {db(m.psnr_p10)} / {db(m.psnr_worst)}"


def spent_cell(v: float | None) -> str:
    """The combined PSNR p10 of the lossy options kept so far; ``lossless`` while none is."""
    return "lossless" if v is None else db(v)


def step_row(s: StepRecord) -> list[str]:
    """The cells of one step under :data:`STEP_HEADERS`."""
    pred = "—" if s.predicted_speedup is None else f"{s.predicted_speedup:.3f}"
    m = s.measured
    return [stage_label(s.stage, s.stage_name), s.candidate, s.decision, s.reason, pred, speedup_cell(m),
            ci(m.noise_floor) if m is not None else "—", quality_cell(m), seconds(s.latency_s), seconds(s.gpu_s),
            spent_cell(s.psnr_spent_db)]


def step_rows(result: DeriveResult) -> list[list[str]]:
    """One row per step (see :data:`STEP_HEADERS`)."""
    return [step_row(s) for s in result.steps]


def sizing_rows(result: DeriveResult) -> list[list[str]]:
    """One row per sizing (see :data:`SIZING_HEADERS`); ledger rows say :data:`PREDICTED`."""
    return [sizing_row(z) for z in result.sizing]


def sizing_row(z: Sizing) -> list[str]:
    """The cells of one sizing row under :data:`SIZING_HEADERS`."""
    return [z.layout, str(z.gpus_per_instance), seconds(z.latency_s), seconds(z.p99_s),
            "yes" if z.meets_slo else "no", str(z.instances), str(z.total_gpus), str(z.nodes), f"{z.gpu_s:.3f}",
            z.spread, PREDICTED if z.predicted else "measured"]


def shape_text(result: DeriveResult) -> str:
    """``WxH`` or ``WxHxF`` (frames)."""
    c = result.config
    return f"{c.width}x{c.height}" + (f"x{c.frames}" if c.frames else "")


def status_text(result: DeriveResult) -> str:
    """``complete``, ``partial`` or ``partial (interrupted)``."""
    if result.interrupted:
        return "partial (interrupted: every finished step is kept)"
    return "partial (not finished)" if result.partial else "complete"


def header_items(result: DeriveResult) -> list[tuple[str, str]]:
    """The conditions of the derivation: model, shape, steps, device, SLO, QPS, budget, status."""
    c = result.config
    e = c.engine
    items = [
        ("model", f"{e.model} ({e.engine} engine, {e.dtype})"),
        ("shape", shape_text(result)),
        ("steps", str(c.steps) + (f" (few-step model {c.few_step_model}"
                                  + (f", {c.few_step_steps} steps)" if c.few_step_steps else ")")
                                  if c.few_step_model else "")),
        ("device", e.device + (f" · ledger GPU {c.gpu} × {c.gpus_per_node}/node" if c.gpu else "")),
        ("SLO p99", f"{c.slo_p99_s:g} s"),
        ("QPS", f"{c.qps:g} (headroom {c.headroom:g})"),
        ("quality budget", f"combined PSNR p10 ≥ {c.budget_db:g} dB"),
        ("status", status_text(result)),
        ("store", result.store),
    ]
    if result.elapsed_s is not None:
        items.append(("elapsed", f"{result.elapsed_s:.1f} s"))
    return items


def budget_text(spent: float | None, budget_db: float) -> str:
    """``31.20 dB (budget ≥ 30 dB)``, or lossless."""
    if spent is None:
        return f"lossless (budget {budget_db:g} dB not used)"
    within = "within" if spent >= budget_db else "OVER"
    return f"combined PSNR p10 {db(spent)} dB, {within} the budget ≥ {budget_db:g} dB"


def final_items(final: Final, budget_db: float) -> list[tuple[str, str]]:
    """The final configuration: measured speed-up against the start (CI, floor), quality spent, engine."""
    e = final.engine
    m = final.measured
    items = [("result", final.message)]
    if m is not None:
        items += [
            ("speed-up vs start", f"{m.speedup:.3f}× (95 % CI {ci(m.ci)}; noise floor {ci(m.noise_floor)}) · "
                                  + ("measurably faster" if m.measurably_faster else "not measurably faster")),
            ("latency", f"{seconds(m.latency_s)} s (start {seconds(m.baseline_latency_s)} s, median, same blocks)"),
            ("quality vs start", quality_cell(m) + ("" if m.identical else " dB (p50 / p10 / worst)")),
        ]
    else:
        items.append(("speed-up vs start", "not measured"))
    items += [
        ("quality spent", budget_text(final.psnr_spent_db, budget_db)),
        ("engine", f"{e.engine} · {e.model} · {e.device} · {e.dtype} · attention {e.attention_backend or 'default'}"
                   f" · compile {'on' if e.compile else 'off'} · offload {e.offload} · VAE tiling "
                   f"{'on' if e.vae_tiling else 'off'} · cache {e.cache or 'none'}"),
    ]
    return items


def print_console(result: DeriveResult, console: object | None = None) -> None:
    """The derivation on the console: conditions, every step, the final configuration, the sizing, the
    serve command, the outputs and the warnings (rich; ``console`` defaults to stdout)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from diffbench.core.console import make_console

    con: Console = console if console is not None else make_console()  # type: ignore[assignment]
    con.print("[bold]derive[/bold] · " + " · ".join(f"{k} {escape(v)}" for k, v in header_items(result)))
    if result.partial or result.interrupted:
        con.print(f"[bold red]PARTIAL result: {status_text(result)}[/bold red]")
    t = Table(title="derivation: every step (speed-up > 1 is faster than the deployment before the step)")
    for col in STEP_HEADERS:
        t.add_column(col, justify="left" if col in ("stage", "candidate", "decision", "reason") else "right")
    for row in step_rows(result):
        t.add_row(*(escape(c) for c in row))
    con.print(t)
    if result.final is not None:
        con.print("[bold]final configuration[/bold]")
        for k, v in final_items(result.final, result.config.budget_db):
            con.print(f"  {k}: {escape(v)}", soft_wrap=True)
    else:
        con.print("[yellow]no final configuration (the derivation did not reach it)[/yellow]")
    if result.sizing:
        z = Table(title="sizing for the QPS target (p99 with queueing)")
        for col in SIZING_HEADERS:
            z.add_column(col)
        for row in sizing_rows(result):
            z.add_row(*(escape(c) for c in row))
        con.print(z)
    if result.serve_command:
        con.print("[bold]serve with[/bold]")
        con.print(escape(result.serve_command), soft_wrap=True)
    for name, path in result.outputs.items():
        con.print(f"  wrote {escape(name)}: {escape(path)}", soft_wrap=True)
    for w in result.warnings:
        con.print(f"[yellow]warning:[/yellow] {escape(w)}", soft_wrap=True)
