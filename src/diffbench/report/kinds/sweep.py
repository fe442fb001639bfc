"""Report sections of a sweep result (``diffbench sweep --json``): the speed-up–quality curve and its table.

The curve: one point per swept value at (speed-up, PSNR p10), the speed-up's 95 % paired-bootstrap
interval as the horizontal bar and the per-image PSNR spread (worst … p90) as the vertical bar (the result
holds percentiles of the per-image PSNR, not a confidence interval of it; the gates read p10 and worst),
labelled with the value. Beside it: the quality budget (``psnr.p10 ≥ budget``), the quality noise floor
(the same p10 for the baseline configuration run twice), the timing noise floor (the baseline against
itself, its 95 % interval as a band around 1×) and the working point (ringed). Identical outputs have
infinite PSNR: they sit on a row marked ``∞`` above the finite axis. Several sweeps are overlaid, one
colour per file. Every plotted number is in the table below the plot.

SVG ids (``gid``) for DOM checks: ``sweep-{i}-point-{j}`` (result i, point j), ``sweep-{i}-working-point``,
``sweep-{i}-budget``, ``sweep-{i}-quality-floor``, ``sweep-{i}-timing-floor``.
"""

from __future__ import annotations

import math
from typing import Any

from diffbench.report.document import Block, Facts, Note, Plot, Section, Table
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult

INF_LABEL = "∞ (identical)"


def _db(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "—"
    return "∞" if math.isinf(v) else f"{v:.2f}"


def _ci(lo: float | None, hi: float | None) -> str:
    return "—" if lo is None or hi is None else f"{lo:.3f}–{hi:.3f}"


def _finite(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _y_range(results: list[Any]) -> tuple[float, float, float | None]:
    """(low, high, y of the ∞ row or None): the finite PSNR range of every point, budget and floor."""
    vals: list[float | None] = []
    has_inf = False
    for r in results:
        for p in r.points:
            q = p.quality.psnr
            vals += [q.worst, q.p10, q.p90]
            has_inf |= any(math.isinf(v) for v in (q.worst, q.p10, q.p90))
        if r.budget_db is not None:
            vals += [r.budget_db, r.budget_db - 3]
        nf = r.noise_floor_psnr
        if nf is not None:
            vals.append(nf.p10)
            has_inf |= math.isinf(nf.p10)
    fin = _finite(vals) or [0.0, 50.0]
    lo, hi = min(fin), max(fin)
    span = max(hi - lo, 5.0)
    lo, hi = lo - 0.08 * span, hi + 0.08 * span
    return lo, hi, (hi + 0.12 * span if has_inf else None)


def _curve(results: list[LoadedResult]) -> Plot:
    from matplotlib.ticker import MaxNLocator

    from diffbench.report.figures import COLORS, new_figure

    models = [r.model for r in results]
    fig = new_figure(7.6, 4.6)
    ax = fig.axes[0]
    lo, hi, yinf = _y_range(models)

    def y(v: float) -> float:
        return yinf if (math.isinf(v) and yinf is not None) else v

    xs: list[float] = [1.0]
    ax.axvline(1.0, color="#555555", lw=0.8, gid="sweep-baseline-line")
    for i, (res, m) in enumerate(zip(results, models, strict=True)):
        color = COLORS[i % len(COLORS)]
        tag = f" ({res.label})" if len(results) > 1 else ""
        tf = m.timing_floor
        if tf is not None:
            ax.axvspan(tf.low, tf.high, color=color, alpha=0.12, lw=0, gid=f"sweep-{i}-timing-floor",
                       label=f"timing noise floor 95 % CI {tf.low:.3f}–{tf.high:.3f}×{tag}")
            xs += [tf.low, tf.high]
        if m.budget_db is not None:
            ax.axhline(m.budget_db, color=color, ls="--", lw=1.2, gid=f"sweep-{i}-budget",
                       label=f"quality budget: psnr p10 ≥ {m.budget_db:g} dB{tag}")
        nf = m.noise_floor_psnr
        if nf is not None:
            ax.axhline(y(nf.p10), color=color, ls=":", lw=1.4, gid=f"sweep-{i}-quality-floor",
                       label=f"quality noise floor: psnr p10 {_db(nf.p10)} dB (baseline run twice){tag}")
        wp = m.working_point.value if m.working_point else None
        for j, p in enumerate(m.points):
            q = p.quality.psnr
            yc = y(q.p10)
            err_lo, err_hi = max(0.0, yc - y(q.worst)), max(0.0, y(q.p90) - yc)
            ax.errorbar([p.speedup], [yc], xerr=[[p.speedup - p.speedup_ci[0]], [p.speedup_ci[1] - p.speedup]],
                        yerr=[[err_lo], [err_hi]], fmt="o", color=color, ms=6, capsize=3, lw=1.1,
                        label=f"{m.axis}{tag}" if j == 0 else None)[0].set_gid(f"sweep-{i}-point-{j}")
            ax.annotate(p.value, (p.speedup, yc), xytext=(6, 6), textcoords="offset points", fontsize=8,
                        color=color)
            xs += [p.speedup_ci[0], p.speedup_ci[1]]
            if p.value == wp:
                ax.plot([p.speedup], [yc], marker="o", ms=17, mfc="none", mec="#111111", mew=2.2, ls="none",
                        gid=f"sweep-{i}-working-point", label=f"working point {p.value}{tag}")
    ticks = [t for t in MaxNLocator(7).tick_values(lo, hi) if lo <= t <= hi]
    labels = [f"{t:g}" for t in ticks]
    if yinf is not None:
        ax.axhline(yinf - 0.5 * (yinf - hi), color="#999999", lw=0.6, ls=(0, (1, 3)))
        ticks.append(yinf)
        labels.append(INF_LABEL)
    ax.set_yticks(ticks, labels)
    ax.set_ylim(lo, (yinf if yinf is not None else hi) + 0.04 * (hi - lo))
    xlo, xhi = min(xs), max(xs)
    pad = max(0.05 * (xhi - xlo), 0.02)
    ax.set_xlim(xlo - pad, xhi + pad)
    ax.set_xlabel("speed-up vs the baseline (×, ratio of median latencies; bar: 95 % paired bootstrap CI)")
    ax.set_ylabel("PSNR p10 vs the baseline (dB; bar: worst … p90)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    n = ", ".join(f"{len(m.points)} value(s), {m.points[0].latency_s.n if m.points else 0} timed runs each"
                  + (f" ({r.label})" if len(results) > 1 else "") for r, m in zip(results, models, strict=True))
    cap = (f"One point per swept value ({n}). x: speed-up = baseline median / value median over interleaved "
           "blocks, bar = 95 % paired percentile-bootstrap CI; y: per-image PSNR p10 against the baseline "
           "outputs (the gated statistic), bar from the worst image to p90 (a spread, not a CI). Dashed: the "
           "quality budget (the gate also needs worst ≥ budget − 3 dB); dotted: the quality noise floor; band: "
           "the timing noise floor (baseline vs itself); ring: the working point. Identical outputs (∞ dB) "
           "sit on the ∞ row.")
    return Plot(id="sweep-curve", title="Speed-up vs quality", figure=fig, caption=cap)


def _points_table(results: list[LoadedResult]) -> Table:
    multi = len(results) > 1
    headers = (["result"] if multi else []) + [
        "value", "median (ms) (n)", "speed-up (×)", "95 % CI", "timing noise floor CI", "faster?",
        "psnr p10 (dB)", "psnr p50 (dB)", "psnr worst (dB)", "ssim worst", "skipped", "gates"]
    rows: list[list[str]] = []
    for r in results:
        m = r.model
        b, tf = m.baseline, m.timing_floor
        pre = [r.label] if multi else []
        rows.append(pre + ["baseline", f"{b.latency_s.p50 * 1e3:.2f} ({b.latency_s.n})" if b.latency_s else "—",
                           "1.000", "—", _ci(tf.low, tf.high) if tf else "—", "reference", "—", "—", "—", "—",
                           "—", "—"])
        wp = m.working_point.value if m.working_point else None
        for p in m.points:
            q, s, nf = p.quality.psnr, p.quality.ssim, p.noise_floor
            rows.append(pre + [
                p.value, f"{p.latency_s.p50 * 1e3:.2f} ({p.latency_s.n})", f"{p.speedup:.3f}",
                _ci(*p.speedup_ci), _ci(nf.low, nf.high) if nf else "—", "yes" if p.measurably_faster else "no",
                _db(q.p10), _db(q.p50), _db(q.worst), f"{s.worst:.4f}" if s else "—",
                "—" if p.skipped_steps is None else f"{p.skipped_steps:.0%}",
                ("PASS" if p.passed else "FAIL") + (" ◀ working point" if p.value == wp else ""),
            ])
    return Table(id="sweep-points", title="Every point", headers=headers, rows=rows,
                 caption="speed-up = ratio of median latencies paired by interleaved block; timing noise floor = "
                         "the baseline against itself (even vs odd blocks); skipped = share of cache-hooked "
                         "computations skipped; gates PASS when every quality gate holds.")


def _details(i: int, r: LoadedResult, multi: bool) -> Section:
    from diffbench.report.sweep_report import conditions_line
    from diffbench.sweep.working_point import noise_floor_note

    m = r.model
    b, nf, tf = m.baseline, m.noise_floor_psnr, m.timing_floor
    items = [
        ("sweep", f"{m.sweep_id} · axis {m.axis} (fingerprint field '{m.field}')"),
        ("baseline", f"run {b.run_id}" + (f": median {b.latency_s.p50 * 1e3:.2f} ms (n={b.latency_s.n})"
                                          if b.latency_s else ": no timed session finished")),
        ("quality budget", f"{m.budget_db:g} dB (psnr p10 ≥ budget, worst ≥ budget − 3)" if m.budget_db is not None
         else "— (explicit gates)"),
        ("gates", ", ".join(m.gates) or "—"),
        ("quality noise floor", f"psnr p10 {_db(nf.p10)} dB · p50 {_db(nf.p50)} dB · worst {_db(nf.worst)} dB "
                                f"(n={nf.n}, baseline configuration run twice)" if nf else "—"),
        ("timing noise floor", f"{tf.speedup:.3f}×, 95 % CI {tf.low:.3f}–{tf.high:.3f} (n={tf.n_baseline} pairs "
                               "of blocks, baseline vs itself)" if tf else "—"),
    ]
    if m.schedule is not None:
        sc = m.schedule
        warm = ", ".join(f"{k} {len(v)}" for k, v in m.warmup_s.items())
        items.append(("protocol", f"warmup until stable (window {sc.window}, cap {sc.max_warmup}; warmup runs: "
                                  f"{warm}), then {sc.blocks} blocks of {len(sc.arms)} configurations in seeded "
                                  f"random order (seed {sc.seed}), one process"))
    items.append(("conditions", conditions_line(b.conditions)))
    blocks: list[Block] = [Facts(id=f"sweep-{i}-facts", title="Sweep", items=items)]
    gate_rows = [[p.value, g.gate.expr, _db(g.gate.value), _db(g.noise_floor), "PASS" if g.gate.passed else "FAIL"]
                 for p in m.points for g in p.gates]
    if gate_rows:
        blocks.append(Table(id=f"sweep-{i}-gates", title="Gates", headers=[
            "value", "gate", "measured", "noise floor", "result"], rows=gate_rows,
            caption="noise floor = the same statistic for the baseline configuration run twice"))
    notes: list[tuple[str, str]] = []
    if m.interrupted or m.partial:
        notes.append(("warn", "partial result: the sweep was interrupted; only the values that had finished"))
    if m.forced:
        notes.append(("warn", "forced comparison: the fingerprints differ in "
                              f"{', '.join(m.fingerprint_differences)}"))
    notes += [("warn", w) for w in m.warnings]
    if (wide := noise_floor_note(tf)) is not None:
        notes.append(("warn", wide))
    for k, (level, text) in enumerate(notes):
        blocks.append(Note(id=f"sweep-{i}-note-{k}", text=text, level=level))
    title = f"sweep: {r.label}" if multi else f"sweep {m.sweep_id}: details"
    return Section(id=f"sweep-{i}-details", title=title, blocks=blocks)


def _verdict(results: list[LoadedResult]) -> Section:
    """The answer first: per sweep, the working point (speed-up with its 95 % CI, or why there is none) and
    per value its speed-up, CI, quality-gate result and verdict."""
    multi = len(results) > 1
    blocks: list[Block] = []
    for i, r in enumerate(results):
        m = r.model
        prefix = f"{r.label}: " if multi else ""
        wp = m.working_point
        text = wp.message if wp is not None else "no working point (the sweep has no finished point)"
        blocks.append(Note(id=f"sweep-{i}-headline", text=prefix + "working point: " + text,
                           level="info" if wp is not None and wp.value is not None else "warn"))
        blocks += [Note(id=f"sweep-{i}-verdict-{j}",
                        text=f"{prefix}{p.value}: {p.speedup:.3f}× (95 % CI {p.speedup_ci[0]:.3f}–"
                             f"{p.speedup_ci[1]:.3f}) · quality gates {'PASS' if p.passed else 'FAIL'} · {p.verdict}")
                   for j, p in enumerate(m.points)]
    return Section(id="sweep-verdict", title="sweep: verdict", blocks=blocks)


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """The verdict, then the curve and the table of every point (all results overlaid), then each sweep's
    facts and gates."""
    multi = len(results) > 1
    head = Section(id="sweep", title=f"sweep: {results[0].model.axis}" + (" (overlaid)" if multi else ""),
                   blocks=[_curve(results), _points_table(results)])
    return [_verdict(results), head] + [_details(i, r, multi) for i, r in enumerate(results)]
