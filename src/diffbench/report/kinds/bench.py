"""Report sections of ``diffbench bench`` results: conditions, latency (CDF, histogram, runs in order with
the warmups apart), per-step timeline, stage bars, memory by stage, reproducibility, warnings and errors.

Several results overlay: every plot has one series per result × shape (legend: the file label, with the
shape where a plot holds several shapes), and a comparison table gives each result's p50 against the first
result's (a ratio with its bootstrap interval and the first result's own noise floor). Shapes that failed
(e.g. out of memory) are rows of the summary and error tables, not gaps. Every plotted number is also in a
table (static SVG has no hover); percentiles are the result's own (:mod:`diffbench.core.stats`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from diffbench.bench.result import BenchResult, ShapeResult
from diffbench.core.stats import min_n_for
from diffbench.report.document import Block, Note, Plot, Section, Table
from diffbench.report.figures import COLORS
from diffbench.report.kinds import ReportOptions
from diffbench.report.kinds import bench_plots as bp
from diffbench.report.kinds.bench_tables import (
    compare_blocks,
    conditions_facts,
    latency_row,
    ms,
    repro_rows,
    samples_table,
    summary_table,
)
from diffbench.report.loader import LoadedResult

LATENCY_HEADERS = ["result", "shape", "n", "min (ms)", "p50 (ms)", "p90 (ms)", "p99 (ms)", "max (ms)",
                   "mean (ms)", "std (ms)"]


@dataclass
class _Entry:
    """One timed result × shape of the page, with its series colour and legends."""

    index: int  # result index (0-based, command-line order)
    label: str
    shape: ShapeResult
    color: str
    legend: str  # in plots of all shapes: "label · shape" (or the shape alone for one result)


def slug(text: str) -> str:
    """A block-id fragment of a shape label: ``"64x64 s2 b1"`` → ``"64x64-s2-b1"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def in_progress(m: BenchResult) -> BenchResult:
    """A result whose shape was still running when the JSON was written (``bench --json`` streams it after
    every run) has timed samples but no summary yet: summarize them here (same method), so the page shows
    the runs done instead of dropping the shape. Finished shapes are untouched."""
    from diffbench.core.stats import summarize

    shapes = [s.model_copy(update={"latency_s": summarize(s.samples_s)}) if s.latency_s is None and s.samples_s
              else s for s in m.shapes]
    return m.model_copy(update={"shapes": shapes})


def _entries(models: list[BenchResult], labels: list[str]) -> list[_Entry]:
    many = len(models) > 1
    out: list[_Entry] = []
    for i, (m, label) in enumerate(zip(models, labels, strict=True)):
        for s in m.shapes:
            if s.latency_s is None or not s.samples_s:
                continue
            legend = f"{label} · {s.shape}" if many else s.shape
            out.append(_Entry(i, label, s, COLORS[len(out) % len(COLORS)], legend))
    return out


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """The bench sections (ids ``bench-...``) of one or several bench results, in command-line order."""
    models: list[BenchResult] = [in_progress(r.model) for r in results]
    labels = [r.label for r in results]
    entries = _entries(models, labels)
    return [s for s in (  # the headline (p50/p99 with n per shape) first, under the title; conditions after
        _summary_section(models, labels),
        _conditions_section(models, labels),
        _latency_section(entries, labels),
        _steps_section(entries),
        _stages_section(entries),
        _memory_section(entries),
        _repro_section(models, labels),
    ) if s.blocks]


def _conditions_section(models: list[BenchResult], labels: list[str]) -> Section:
    blocks: list[Block] = []
    for i, (m, label) in enumerate(zip(models, labels, strict=True), start=1):
        blocks.append(conditions_facts(f"bench-conditions-{i}", label, m))
        status = []
        if m.partial:
            status.append("PARTIAL result (interrupted or still running): the numbers cover the runs done")
        if not m.valid:
            status.append("INVALID: the protocol was violated (unsynchronized timing); these numbers must not "
                          "be used")
        if status:
            blocks.append(Note(id=f"bench-status-{i}", text=f"{label}: " + "; ".join(status), level="warn"))
        for j, w in enumerate(m.warnings, start=1):
            prefix = f"{label}: " if len(models) > 1 else ""
            blocks.append(Note(id=f"bench-warn-{i}-{j}", text=f"{prefix}[{w.code}] {w.message}", level="warn"))
    return Section(id="bench-conditions", title="bench: conditions and warnings", blocks=blocks)


def _summary_section(models: list[BenchResult], labels: list[str]) -> Section:
    blocks: list[Block] = [summary_table("bench-summary", models, labels)]
    failed = [[label, s.shape, s.error or ""] for m, label in zip(models, labels, strict=True)
              for s in m.shapes if s.error]
    if failed:
        blocks.append(Table(id="bench-errors", title="Errors (the run went on with the next shape)",
                            headers=["result", "shape", "error"], rows=failed,
                            caption="A shape that failed (out of memory, an exception) is data: it has no "
                                    "latency and is left out of the plots."))
    if len(models) > 1:
        blocks.extend(compare_blocks(models, labels))
    return Section(id="bench-overview", title="bench: summary", blocks=blocks)


def _latency_section(entries: list[_Entry], labels: list[str]) -> Section:
    blocks: list[Block] = []
    shapes = list(dict.fromkeys(e.shape.shape for e in entries))
    for shape in shapes:
        group = [e for e in entries if e.shape.shape == shape]
        series = [bp.LatencySeries(legend=e.label if len(labels) > 1 else e.shape.shape,
                                   samples_s=list(e.shape.samples_s), warmup_s=list(e.shape.warmup_s),
                                   stats=e.shape.latency_s, color=COLORS[e.index % len(COLORS)])
                  for e in group if e.shape.latency_s is not None]
        ns = ", ".join(f"{s.legend}: n={s.stats.n}" for s in series)
        sid = slug(shape)
        unsupported = [f"p{q}" for q in (90, 99) if any(s.stats.n < min_n_for(q) for s in series)]
        blocks.append(Plot(
            id=f"bench-cdf-{sid}", title=f"Latency CDF · {shape}", figure=bp.cdf_figure(series),
            caption=f"Timed runs only ({ns}); warmups are not in it. Points joined by straight lines at "
                    "k/(n−1), the inverse of the percentile method (linear interpolation, type 7), so the "
                    "curve crosses 0.5 at the table's p50."
                    + (f" Not marked: {', '.join(unsupported)} (n too small to support it)." if unsupported else "")))
        hist, edges = bp.histogram_figure(series)
        blocks.append(Plot(
            id=f"bench-hist-{sid}", title=f"Latency histogram · {shape}", figure=hist,
            caption=f"Timed runs per bin ({ns}); {len(edges) - 1} shared bins of {ms(edges[1] - edges[0])} ms "
                    "(numpy 'auto' rule); no smoothing."))
        blocks.append(Plot(
            id=f"bench-runs-{sid}", title=f"Runs in order · {shape} (warmups apart)", figure=bp.runs_figure(series),
            caption="Every run in the order it ran: warmup runs (crosses, x ≤ 0) are kept apart from the "
                    "statistics; the timed runs follow. A drift or a cold start that outlasted the warmup shows "
                    "here."))
        blocks.append(samples_table(f"bench-samples-{sid}", shape, [(e.label, e.shape) for e in group]))
    rows = [latency_row(e.label, e.shape) for e in entries]
    if rows:
        blocks.append(Table(id="bench-latency-table", title="End-to-end latency (timed runs)",
                            headers=LATENCY_HEADERS, rows=rows,
                            caption="Percentiles by linear interpolation between order statistics (numpy "
                                    "'linear'); a percentile marked * is not supported by n (p90 needs n ≥ 10, "
                                    "p99 n ≥ 100): it is close to the maximum, not a tail estimate."))
        warm = [[e.label, e.shape.shape, str(len(e.shape.warmup_s)),
                 ", ".join(ms(w) for w in e.shape.warmup_s) or "—",
                 f"{e.shape.warmup_s[0] / e.shape.latency_s.p50:.2f}" if e.shape.warmup_s and e.shape.latency_s
                 else "—"] for e in entries]
        blocks.append(Table(id="bench-warmup", title="Warmup runs (never in the statistics)",
                            headers=["result", "shape", "warmups", "warmup times (ms, in order)",
                                     "first warmup / timed p50"], rows=warm))
    return Section(id="bench-latency", title="bench: latency", blocks=blocks)


def _steps_section(entries: list[_Entry]) -> Section:
    with_steps = [e for e in entries if e.shape.step_s is not None and e.shape.step_s.per_step_median]
    if not with_steps:
        return Section(id="bench-timeline", title="bench: per-step timeline")
    series = [bp.StepSeries(e.legend, list(e.shape.step_s.per_step_median), list(e.shape.step_s.per_step_p90),
                            e.color) for e in with_steps if e.shape.step_s is not None]
    rows, headers = _steps_rows(with_steps)
    missing = [e.legend for e in with_steps if e.shape.step_s and not e.shape.step_s.per_step_p90]
    cap = ("Each step index over the timed runs (n per index = the timed runs): median solid, p90 dashed "
           "(linear interpolation). A step that is slower than its neighbours (the first step, a cache "
           "refresh) stands out here.")
    if missing:
        cap += f" No per-step p90 in {', '.join(missing)} (written before it was recorded)."
    return Section(id="bench-timeline", title="bench: per-step timeline", blocks=[
        Plot(id="bench-steps", title="Per-step latency by step index", figure=bp.steps_figure(series), caption=cap),
        Table(id="bench-steps-table", title="Per-step latency (over the timed runs)", rows=rows, headers=headers,
              caption="n per step index = the timed runs of the shape: "
                      + ", ".join(f"{e.legend} n={e.shape.latency_s.n}" for e in with_steps if e.shape.latency_s)
                      + "; — = not recorded."),
    ])


def _steps_rows(with_steps: list[_Entry]) -> tuple[list[list[str]], list[str]]:
    """Few steps: a row per series and statistic, a column per step; many steps: a row per step."""
    width = max(len(e.shape.step_s.per_step_median) for e in with_steps if e.shape.step_s)

    def cell(values: list[float], k: int) -> str:
        return ms(values[k]) if k < len(values) else "—"

    if width <= 12:
        rows = []
        for e in with_steps:
            st = e.shape.step_s
            assert st is not None
            rows.append([e.legend, "median"] + [cell(st.per_step_median, k) for k in range(width)])
            rows.append([e.legend, "p90"] + [cell(st.per_step_p90, k) for k in range(width)])
        return rows, ["series", "statistic"] + [f"step {k + 1} (ms)" for k in range(width)]
    rows = []
    for k in range(width):
        row = [str(k + 1)]
        for e in with_steps:
            st = e.shape.step_s
            assert st is not None
            row += [cell(st.per_step_median, k), cell(st.per_step_p90, k)]
        rows.append(row)
    return rows, ["step"] + [h for e in with_steps for h in (f"{e.legend} median (ms)", f"{e.legend} p90 (ms)")]


def _stages_section(entries: list[_Entry]) -> Section:
    staged = [e for e in entries if e.shape.stages_s is not None]
    if not staged:
        return Section(id="bench-stage-split", title="bench: stages")
    edits = any(e.shape.edit or e.shape.stages_s.image_encode > 0 for e in staged)  # type: ignore[union-attr]
    stages = [k for k, _ in bp.time_stages(edits)]
    parts = [{k: getattr(e.shape.stages_s, k) for k, _ in stages} for e in staged]
    keys = (*stages, ("end_to_end", "end-to-end"))
    means, medians = [], []
    for e in staged:
        st = e.shape.stages_s
        assert st is not None
        means.append([e.legend] + [ms(getattr(st, k)) + (f" ({100 * getattr(st, k) / st.end_to_end:.1f} %)"
                                                           if st.end_to_end > 0 else "") for k, _ in keys])
        medians.append([e.legend] + [ms(st.median.get(k, math.nan)) for k, _ in keys])
    return Section(id="bench-stage-split", title="bench: stages", blocks=[
        Plot(id="bench-stages", title="Where the time goes (mean per run)",
             figure=bp.stages_figure([e.legend for e in staged], parts),
             caption="Mean seconds per stage over the timed runs; 'other' is end-to-end minus the other stages "
                     "per run" + (" (image encode: the VAE encode of an edit's input image)" if edits else "") + ", so the bar's length is the mean end-to-end latency (means add up, medians "
                     "do not)."),
        Table(id="bench-stages-table", title="Stages: mean per run (ms, share of the end-to-end mean)",
              rows=means, headers=["series"] + [n for _, n in keys],
              caption="Means add up to the end-to-end mean (the plotted bars)."),
        Table(id="bench-stages-median", title="Stages: median per run (ms)", rows=medians,
              headers=["series"] + [n for _, n in keys],
              caption="Medians, robust to outliers; they do not add up."),
    ])


def _memory_section(entries: list[_Entry]) -> Section:
    measured = [e for e in entries if e.shape.memory is not None and e.shape.memory.kind != "none"
                and e.shape.memory.peak_allocated_bytes is not None]
    if not measured:
        return Section(id="bench-memory-use", title="bench: memory")
    series, rows = [], []
    for e in measured:
        m = e.shape.memory
        assert m is not None
        series.append(bp.MemorySeries(e.legend, dict(m.stage_peak_bytes), m.peak_allocated_bytes, m.peak_stage,
                                      e.color))
        rows.append([e.label, e.shape.shape, m.kind]
                    + [_mib(m.stage_peak_bytes.get(k)) for k, _ in bp.STAGES]
                    + [_mib(m.peak_allocated_bytes), _mib(m.peak_reserved_bytes), m.peak_stage or "—"])
    kinds = {e.shape.memory.kind for e in measured if e.shape.memory}
    unit = "peak resident-set growth" if kinds == {"cpu-rss"} else "peak allocated"
    only_peak = [s.legend for s in series if not s.by_stage]
    cap = ("Peak memory of each stage over the timed runs (CUDA: allocator bytes; CPU: resident-set growth over "
           "the request's start).")
    if only_peak:
        cap += (f" {', '.join(only_peak)}: not measured per stage; the bar is the overall peak, at the stage that "
                "held it.")
    return Section(id="bench-memory-use", title="bench: memory", blocks=[
        Plot(id="bench-memory", title="Memory by stage", figure=bp.memory_figure(series, unit), caption=cap),
        Table(id="bench-memory-table", title="Memory (MiB)", rows=rows,
              headers=["result", "shape", "kind"] + [f"{n} (MiB)" for _, n in bp.STAGES]
              + ["peak (MiB)", "reserved (MiB)", "peak in"]),
    ])


def _mib(v: int | None) -> str:
    return "—" if v is None else f"{v / bp.MIB:.2f}"


def _repro_section(models: list[BenchResult], labels: list[str]) -> Section:
    rows = repro_rows(models, labels)
    if not rows:
        return Section(id="bench-reproducibility", title="bench: reproducibility")
    return Section(id="bench-reproducibility", title="bench: reproducibility", blocks=[
        Table(id="bench-repro", title="Reproducibility (the first request generated again)", rows=rows,
              headers=["result", "shape", "PSNR of the re-run", "threshold", "verdict", "seed", "generator",
                       "threads", "deterministic algorithms", "attention"],
              caption="PSNR (dB) between the first output and the same request generated once more after the "
                      "timed runs; inf = bitwise identical.")])
