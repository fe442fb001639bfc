"""Render a :class:`~diffbench.sweep.models.SweepResult`: rich console, curve JSON and CSV.

Re-renderable from a saved result (``diffbench runs show SWEEP_ID``) without re-running.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from diffbench.bench.result import Conditions
from diffbench.core.jsonio import write_json_atomic, write_text_atomic
from diffbench.sweep.models import SweepResult

CSV_COLUMNS = (
    "value", "speedup", "speedup_ci_low", "speedup_ci_high", "noise_floor_speedup", "noise_floor_ci_low",
    "noise_floor_ci_high", "measurably_faster", "verdict", "warmup_runs", "latency_p50_s", "latency_n", "psnr_p50_db",
    "psnr_p10_db", "psnr_worst_db", "ssim_p50", "ssim_worst", "skipped_steps", "passed", "working_point",
    "run_id", "model", "shape", "steps", "cfg", "engine", "engine_version", "attention_backend", "parallelism",
    "precision", "cache", "compile", "device", "hardware", "driver", "cuda",
)


def _db(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return "inf" if math.isinf(v) else f"{v:.2f}"


def conditions_line(c: Conditions) -> str:
    """The field's minimal report in one line: model · shape · steps · CFG · engine and version · backend ·
    parallelism · precision · cache · hardware · driver/CUDA."""
    return (
        f"{c.model} ({c.pipeline}) · {c.shape} · {c.steps} steps · CFG {c.cfg}"
        f"{'' if c.guidance is None else f' (guidance {c.guidance:g})'} · {c.engine} {c.engine_version} · "
        f"attention {c.attention_backend} · parallelism {c.parallelism} · {c.precision} · cache {c.cache} · "
        f"compile {'on' if c.compile else 'off'} · {c.device}: {c.hardware} · driver {c.driver or '—'} / "
        f"CUDA {c.cuda or '—'}"
    )


def curve_json(result: SweepResult) -> dict[str, object]:
    """The JSON document: the full result (``baseline``, ``points``, ``working_point``, …)."""
    return result.model_dump(mode="python")


def write_json(result: SweepResult, path: Path) -> Path:
    """Write the curve JSON atomically (``inf`` PSNR as the string "inf")."""
    return write_json_atomic(path, curve_json(result))


def to_csv(result: SweepResult) -> str:
    """One row per point (baseline first, speed-up 1), with the timing noise floor and conditions of each."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    wp = result.working_point.value if result.working_point else None
    b = result.baseline
    tf = result.timing_floor
    warm = result.warmup_s
    rows = [("baseline", 1.0, None, None, tf, None, "reference", len(warm.get("baseline", [])) or None, b.latency_s,
             None, None, None, None, b.run_id, b.conditions)]
    for p in result.points:
        rows.append((p.value, p.speedup, p.speedup_ci[0], p.speedup_ci[1], p.noise_floor, p.measurably_faster,
                     p.verdict, len(warm[p.value]) if p.value in warm else None, p.latency_s, p.quality,
                     p.skipped_steps, p.passed, p.value == wp, p.run_id, p.conditions))
    for value, sp, lo, hi, nf, fast, verdict, nwarm, lat, q, skip, passed, is_wp, rid, c in rows:
        psnr = q.psnr if q is not None else None  # type: ignore[union-attr]
        ssim = q.ssim if q is not None else None  # type: ignore[union-attr]
        w.writerow([
            value, sp, lo, hi, nf.speedup if nf else None, nf.low if nf else None,  # type: ignore[union-attr]
            nf.high if nf else None, fast, verdict, nwarm, lat.p50 if lat else None,  # type: ignore[union-attr]
            lat.n if lat else None,  # type: ignore[union-attr]
            psnr.p50 if psnr else None, psnr.p10 if psnr else None, psnr.worst if psnr else None,
            ssim.p50 if ssim else None, ssim.worst if ssim else None, skip, passed, is_wp, rid,
            c.model, c.shape, c.steps, c.cfg, c.engine, c.engine_version, c.attention_backend,  # type: ignore[union-attr]
            c.parallelism, c.precision, c.cache, c.compile, c.device, c.hardware, c.driver, c.cuda,  # type: ignore[union-attr]
        ])
    return buf.getvalue()


def write_csv(result: SweepResult, path: Path) -> Path:
    """Write the curve CSV atomically (the parent directory must exist: checked before the run, see
    core.outpath).

    Raises:
        OutputError: it cannot be written (a full disk); no ``*.tmp`` is left.
    """
    write_text_atomic(path, to_csv(result))
    return path


def make_console() -> object:
    """A rich Console for stdout, sized by :func:`diffbench.core.console.make_console` (``COLUMNS``, the
    terminal, or wide enough that no row wraps in a pipe, a file or a CI log)."""
    from diffbench.core.console import make_console as _make

    return _make()


def print_console(result: SweepResult, console: object | None = None) -> None:
    """The curve table, the gates with the noise floor beside them, the working point and the conditions."""
    from rich.console import Console
    from rich.table import Table

    con: Console = console if console is not None else make_console()  # type: ignore[assignment]
    b = result.baseline
    nf = result.noise_floor_psnr
    con.print(f"[bold]sweep {result.sweep_id}[/bold] · axis {result.axis} (fingerprint field '{result.field}') "
              f"· store {result.store}")
    if result.interrupted:
        con.print("[bold red]INTERRUPTED: partial result (only the values that had finished)[/bold red]")
    blat = (f"median {b.latency_s.p50 * 1e3:.2f} ms (n={b.latency_s.n})" if b.latency_s is not None
            else "no timed session finished")
    con.print(f"baseline run {b.run_id}{' (from the store)' if b.resumed else ''}: {blat}")
    if nf is not None:
        con.print(f"quality noise floor (baseline configuration run twice): psnr p50 {_db(nf.p50)} dB · p10 "
                  f"{_db(nf.p10)} dB · worst {_db(nf.worst)} dB (n={nf.n})")
    tf = result.timing_floor
    if tf is not None:
        con.print(f"timing noise floor (baseline vs itself, even vs odd interleaved blocks, n={tf.n_baseline} "
                  f"pairs): {tf.speedup:.3f}x, 95 % CI {tf.low:.3f}–{tf.high:.3f}; a point whose CI includes 1 "
                  f"or overlaps its floor is not measurably faster")
        from diffbench.sweep.working_point import noise_floor_note

        if (wide := noise_floor_note(tf)) is not None:
            con.print(f"[yellow]note:[/yellow] {wide}")
    if result.schedule is not None:
        sc = result.schedule
        warm = ", ".join(f"{k} {len(v)}" for k, v in result.warmup_s.items())
        con.print(f"protocol: warmup until stable (no downward trend over the last {sc.window} runs, cap "
                  f"{sc.max_warmup}; warmup runs: {warm}), then {sc.blocks} blocks of {len(sc.arms)} "
                  f"configurations in seeded random order (seed {sc.seed}), in one process")
    t = Table(title=f"{result.axis} sweep: speed-up vs quality (speed-up = ratio of median latencies, paired "
                    "by interleaved block)")
    for col in ("value", "median ms (n)", "speed-up", "95 % CI", "noise floor CI", "faster?", "psnr p50",
                "psnr p10", "psnr worst", "ssim worst", "skipped", "gates"):
        t.add_column(col, justify="right" if col not in ("value", "gates", "faster?") else "left")
    t.add_row("baseline", f"{b.latency_s.p50 * 1e3:.2f} ({b.latency_s.n})" if b.latency_s else "—", "1.000", "—",
              f"{tf.low:.3f}–{tf.high:.3f}" if tf else "—", "reference", "—", "—", "—", "—", "—", "—")
    wp = result.working_point.value if result.working_point else None
    for p in result.points:
        ssim = p.quality.ssim
        mark = " ◀ working point" if p.value == wp else ""
        pf = p.noise_floor
        t.add_row(
            p.value + (" (stored)" if p.resumed else ""),
            f"{p.latency_s.p50 * 1e3:.2f} ({p.latency_s.n})",
            f"{p.speedup:.3f}",
            f"{p.speedup_ci[0]:.3f}–{p.speedup_ci[1]:.3f}",
            f"{pf.low:.3f}–{pf.high:.3f}" if pf else "—",
            "yes" if p.measurably_faster else "no",
            _db(p.quality.psnr.p50), _db(p.quality.psnr.p10), _db(p.quality.psnr.worst),
            f"{ssim.worst:.4f}" if ssim else "—",
            "—" if p.skipped_steps is None else f"{p.skipped_steps:.0%}",
            ("PASS" if p.passed else "FAIL") + mark,
        )
    con.print(t)
    g = Table(title="gates (noise floor = the same statistic for the baseline run twice)")
    for col in ("value", "gate", "value measured", "noise floor", "result"):
        g.add_column(col)
    for p in result.points:
        for row in p.gates:
            r = row.gate
            g.add_row(p.value, r.expr, _db(r.value), _db(row.noise_floor), "PASS" if r.passed else "FAIL")
    con.print(g)
    for p in result.points:
        con.print(f"  {p.value}: {p.verdict}")
    skip_units = {p.skipped_detail.unit for p in result.points if p.skipped_detail}
    if skip_units:
        con.print(f"skipped = fraction of cache-hooked computations skipped; unit: {', '.join(sorted(skip_units))}")
    if result.forced:
        con.print(f"[bold red]FORCED comparison: the fingerprints differ in {', '.join(result.fingerprint_differences)}"
                  " — configuration drift is mixed into the quality and speed numbers[/bold red]")
    for w in result.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}")
    if result.working_point is not None:
        style = "green" if result.working_point.value is not None else "yellow"
        con.print(f"[bold {style}]{result.working_point.message}[/bold {style}]")
    con.print("[bold]conditions[/bold]")
    con.print(f"  baseline: {conditions_line(b.conditions)}", soft_wrap=True)
    for p in result.points:
        con.print(f"  {p.value}: {conditions_line(p.conditions)}", soft_wrap=True)
