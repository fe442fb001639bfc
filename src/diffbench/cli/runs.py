"""``diffbench runs``: list, show and compare stored runs and sweeps."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

STORE_HELP = "SQLite store (default: $DIFFBENCH_STORE or ~/.local/share/diffbench/store.sqlite)."


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _db(v: float | None) -> str:
    if v is None:
        return "—"
    return "inf" if math.isinf(v) else f"{v:.2f}"


def register(app: typer.Typer) -> None:
    runs_app = typer.Typer(
        help="List, show and compare stored runs and sweeps.", invoke_without_command=True, no_args_is_help=False
    )

    @runs_app.callback()
    def runs(
        ctx: typer.Context,
        store: Path | None = typer.Option(None, help=STORE_HELP),
        limit: int = typer.Option(30, min=1, help="How many runs and sweeps to list."),
        sweep: str | None = typer.Option(None, help="Only the runs of this sweep id."),
    ) -> None:
        """List stored sweeps and runs, newest first (subcommands: show, compare)."""
        if ctx.invoked_subcommand is not None:
            return
        from rich.table import Table

        from diffbench.report.sweep_report import make_console
        from diffbench.store.runs import RunStore

        con: Any = make_console()
        with RunStore.open(store, readonly=True) as st:
            sweeps = st.list_sweeps(limit) if sweep is None else []
            records = st.list_runs(sweep_id=sweep, limit=limit)
            con.print(f"store {st.path}")
        if sweeps:
            t = Table(title="sweeps")
            for col in ("sweep id", "updated (UTC)", "model", "axis", "status", "working point"):
                t.add_column(col)
            for s in sweeps:
                wp = "—"
                if s.result_json:
                    w = json.loads(s.result_json).get("working_point") or {}
                    wp = str(w.get("value")) if w.get("value") is not None else ("none" if w else "—")
                t.add_row(s.id, _when(s.updated_unix), s.model, s.axis, s.status_text, wp)
            con.print(t)
        t = Table(title="runs")
        for col in ("run id", "created (UTC)", "kind", "sweep", "value", "model", "cache", "status",
                    "median ms (n)", "psnr p10", "skipped"):
            t.add_column(col)
        for r in records:
            lat = f"{r.timing.latency_s.p50 * 1e3:.2f} ({r.timing.latency_s.n})" if r.timing else "—"
            t.add_row(r.id, _when(r.created_unix), r.kind, r.sweep_id or "—", r.value or "—", r.model,
                      str(r.conditions.get("cache", "—")), r.status_text, lat,
                      _db(r.quality.psnr.p10) if r.quality else "—",
                      f"{r.skipped.fraction:.0%}" if r.skipped else "—")
        con.print(t)

    @runs_app.command("show")
    def show(
        run_id: str = typer.Argument(..., help="A run id (or unique prefix) or a sweep id."),
        store: Path | None = typer.Option(None, help=STORE_HELP),
        json_out: bool = typer.Option(False, "--json", help="Print the stored record as JSON."),
    ) -> None:
        """Show one run (conditions, fingerprint, timing, quality) or re-render one sweep."""
        from diffbench.report.sweep_report import conditions_line, make_console, print_console
        from diffbench.store.runs import RunStore
        from diffbench.sweep.models import SweepResult

        con: Any = make_console()
        with RunStore.open(store, readonly=True) as st:
            sw = st.get_sweep(run_id)
            if sw is not None:
                if json_out:
                    typer.echo(sw.result_json or "{}")
                elif sw.result_json:
                    print_console(SweepResult.model_validate_json(sw.result_json), con)
                else:
                    con.print(f"sweep {sw.id}: {sw.status_text}, no result yet (resume it by rerunning the command)")
                return
            r = st.get_run(run_id)
        if json_out:
            typer.echo(r.model_dump_json(indent=2))
            return
        from diffbench.bench.result import Conditions

        con.print(f"[bold]run {r.id}[/bold] · {r.kind} · {r.status_text} · created {_when(r.created_unix)} UTC")
        if r.sweep_id:
            con.print(f"sweep {r.sweep_id} · axis {r.axis} · value {r.value}")
        try:
            con.print("conditions: " + conditions_line(Conditions.model_validate(r.conditions)), soft_wrap=True)
        except ValueError:
            con.print(f"conditions: {r.conditions}")
        con.print("fingerprint: " + ", ".join(f"{k}={v}" for k, v in sorted(r.fingerprint.items())),
                  soft_wrap=True)
        if r.timing:
            lat = r.timing.latency_s
            con.print(f"latency: median {lat.p50 * 1e3:.2f} ms, mean {lat.mean * 1e3:.2f} ms, min "
                      f"{lat.min * 1e3:.2f} ms, max {lat.max * 1e3:.2f} ms (n={lat.n}; warmup {r.timing.warmup})")
        elif r.kind == "baseline" and r.sweep_id:
            con.print("latency: none on the baseline run (the quality reference); each point of sweep "
                      f"{r.sweep_id} holds the baseline's samples from its own interleaved session (`diffbench "
                      f"runs show {r.sweep_id}`)")
        if r.quality:
            q = r.quality
            con.print(f"quality vs run {q.against_run}: psnr p50 {_db(q.psnr.p50)} dB · p10 {_db(q.psnr.p10)} dB · "
                      f"worst {_db(q.psnr.worst)} dB (n={q.psnr.n}, identical {q.psnr.n_inf})"
                      + (f" · ssim worst {q.ssim.worst:.4f}" if q.ssim else ""))
        if r.skipped:
            con.print(f"skipped: {r.skipped.fraction:.1%} of {r.skipped.total} ({r.skipped.unit}; {r.skipped.method})")
        if r.manifest:
            con.print(f"outputs: {len(r.manifest.entries)} files in {r.outputs_dir}")
        if r.error:
            con.print(f"[red]error: {r.error}[/red]")

    @runs_app.command("compare")
    def compare(
        baseline: str = typer.Argument(..., help="Baseline run id."),
        candidate: str = typer.Argument(..., help="Candidate run id."),
        allow: str = typer.Option(
            "cache", help="The option under test: the one fingerprint field allowed to differ ('none': none)."
        ),
        force: bool = typer.Option(False, "--force", help="Compare even when other fingerprint fields differ."),
        store: Path | None = typer.Option(None, help=STORE_HELP),
        json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    ) -> None:
        """Speed-up (95 % bootstrap CI) and per-image quality of CANDIDATE against BASELINE; refused when their
        deployment fingerprints differ in anything but --allow, unless --force."""
        from diffbench.report.sweep_report import make_console
        from diffbench.store.runs import RunStore
        from diffbench.sweep.compare import compare_runs

        with RunStore.open(store, readonly=True) as st:
            res = compare_runs(st, baseline, candidate, None if allow == "none" else allow, force)
        if json_out:
            typer.echo(res.model_dump_json(indent=2))
            return
        con: Any = make_console()
        if res.forced:
            con.print(f"[bold red]FORCED: fingerprints differ in {', '.join(res.fingerprint_differences)}[/bold red]")
        for w in res.warnings:
            con.print(f"[yellow]warning:[/yellow] {w}")
        if res.speedup:
            sp = res.speedup
            con.print(f"speed-up {sp.speedup:.3f}x (95 % CI {sp.low:.3f}–{sp.high:.3f}; {sp.statistic}; "
                      f"n={sp.n_baseline}/{sp.n_candidate})")
            nf = res.noise_floor
            if nf is not None:
                con.print(f"timing noise floor (baseline vs itself, even vs odd interleaved blocks): {nf.speedup:.3f}x "
                          f"(95 % CI {nf.low:.3f}–{nf.high:.3f}; n={nf.n_baseline} pairs)")
                from diffbench.sweep.working_point import noise_floor_note

                if (wide := noise_floor_note(nf)) is not None:
                    con.print(f"[yellow]note:[/yellow] {wide}")
            con.print(f"verdict: {res.verdict}")
        if res.quality:
            q = res.quality.psnr
            con.print(f"psnr p50 {_db(q.p50)} dB · p10 {_db(q.p10)} dB · worst {_db(q.worst)} dB (n={q.n})")

    app.add_typer(runs_app, name="runs")
