"""Report sections of a derive result (``derive.json`` in ``diffbench derive --out``).

Per result: the answer (the final configuration's message, partial / interrupted flags) with the
conditions (model, shape, steps, device, SLO p99, QPS, budget); the latency waterfall per step, predicted
beside measured, and the quality spent against the budget (``report/kinds/derive_plots.py``); the table of
every step (stage ①–⑧, candidate, decision, reason, predicted and measured speed-up with its 95 % CI and
the timing noise floor, PSNR p50 / p10 / worst or identical, cumulative latency and GPU·s, combined PSNR
spent); then the final configuration, the sizing (ledger rows marked predicted, not measured), the serve
command, the outputs and the warnings. The cells come from :mod:`diffbench.report.derive_table`, the same as
the console. Several results are shown one after the other (section ids ``derive-{i}-...``).
"""

from __future__ import annotations

from diffbench.derive.models import DeriveResult
from diffbench.report.derive_table import (
    PREDICTED,
    SIZING_HEADERS,
    STEP_HEADERS,
    final_items,
    header_items,
    shape_text,
    sizing_rows,
    status_text,
    step_rows,
)
from diffbench.report.document import Block, Facts, Note, Plot, Section, Table
from diffbench.report.kinds import ReportOptions
from diffbench.report.kinds.derive_plots import budget_figure, waterfall, waterfall_figure
from diffbench.report.loader import LoadedResult


def _answer(i: int, r: LoadedResult, multi: bool) -> Section:
    m: DeriveResult = r.model
    c = m.config
    prefix = f"{r.label}: " if multi else ""
    blocks: list[Block] = []
    if m.final is not None:
        ok = m.final.measured is not None and m.final.measured.measurably_faster
        blocks.append(Note(id=f"derive-{i}-headline", text=prefix + m.final.message, level="info" if ok else "warn"))
    else:
        blocks.append(Note(id=f"derive-{i}-headline", level="warn",
                           text=prefix + "no final configuration: the derivation stopped before it "
                                f"({len(m.steps)} step(s) recorded)"))
    if m.partial or m.interrupted:
        blocks.append(Note(id=f"derive-{i}-partial", level="warn",
                           text=f"{status_text(m)}: only the steps that had finished are recorded"))
    blocks.append(Facts(id=f"derive-{i}-conditions", title="Conditions", items=header_items(m)))
    title = (f"derive: {r.label}" if multi else "derive") + (f" · {c.engine.model} {shape_text(m)}, "
                                                             f"{c.steps} steps on {c.engine.device}")
    return Section(id=f"derive-{i}", title=title, blocks=blocks)


def _figures(i: int, r: LoadedResult) -> Section:
    m: DeriveResult = r.model
    blocks: list[Block] = []
    wf = waterfall(m)
    if wf is None:
        blocks.append(Note(id=f"derive-{i}-no-waterfall", level="warn",
                           text="no latency was measured (a dry run, or stopped before the first measurement): "
                                "no waterfall"))
    else:
        kept = len(wf.bars)
        predicted = sum(b.predicted_s is not None for b in wf.bars)
        end = ("the final configuration measured against the start in one interleaved session" if wf.final_measured
               else "the last step's latency (the final configuration was not measured)")
        blocks.append(Plot(id=f"derive-{i}-waterfall", title="Latency per step: predicted beside measured",
                           figure=waterfall_figure(i, m, wf), caption=(
            f"Median latency per request: the starting deployment, then each of the {kept} step(s) kept after "
            "measurement as a bar from the latency before it to the latency after it (cumulative, as recorded), "
            f"with the ledger's prediction beside it where there is one ({predicted}: the latency before the "
            f"step ÷ the predicted speed-up, hatched), ending at {end}. Steps rejected, skipped or not combined "
            "change nothing and are only in the steps table.")))
    blocks.append(Plot(id=f"derive-{i}-budget", title="Quality spent against the budget",
                       figure=budget_figure(i, m), caption=(
        "Combined PSNR p10 against the starting deployment's fixed-seed outputs after each lossy step kept "
        "(the lossy options combined as plan combines them) and for the final configuration; dashed: the "
        f"budget {m.config.budget_db:g} dB. Higher PSNR = less quality spent; below the line is over budget. "
        "Lossless steps spend nothing and are not plotted.")))
    return Section(id=f"derive-{i}-figures", title="derive: latency and quality per step", blocks=blocks)


def _steps(i: int, r: LoadedResult) -> Section:
    m: DeriveResult = r.model
    table = Table(id=f"derive-{i}-steps", title="Every step", headers=STEP_HEADERS, rows=step_rows(m), caption=(
        "Speed-ups are against the deployment the step started from (> 1 is faster): predicted from the ledger, "
        "measured as the ratio of median latencies paired by interleaved block with its 95 % bootstrap CI; "
        "noise floor = the same statistic for the deployment against itself. PSNR against that deployment's "
        "fixed-seed outputs (identical: every image bitwise equal). Latency and GPU·s are the deployment's "
        "after the step; PSNR spent = the combined p10 of the lossy options kept so far."))
    blocks: list[Block] = [table] if m.steps else [
        Note(id=f"derive-{i}-no-steps", text="no step recorded", level="warn")]
    return Section(id=f"derive-{i}-steps-section", title="derive: every step", blocks=blocks)


def _final(i: int, r: LoadedResult) -> Section:
    m: DeriveResult = r.model
    blocks: list[Block] = []
    if m.final is not None:
        blocks.append(Facts(id=f"derive-{i}-final", title="Final configuration",
                            items=final_items(m.final, m.config.budget_db)))
    if m.sizing:
        n_pred = sum(z.predicted for z in m.sizing)
        blocks.append(Table(id=f"derive-{i}-sizing", title="Sizing for the QPS target", headers=SIZING_HEADERS,
                            rows=sizing_rows(m), caption=(
            f"Instances for {m.config.qps:g} QPS within the SLO p99 {m.config.slo_p99_s:g} s, queueing included, "
            "from the measured latency distribution"
            + (f"; {n_pred} row(s) {PREDICTED} (ledger layouts this engine did not run)" if n_pred else ""))))
    if m.serve_command:
        blocks.append(Facts(id=f"derive-{i}-serve", title="Serve it", items=[("command", m.serve_command)]))
    if m.outputs:
        blocks.append(Table(id=f"derive-{i}-outputs", title="Outputs", headers=["output", "path"],
                            rows=[[k, v] for k, v in m.outputs.items()]))
    blocks += [Note(id=f"derive-{i}-warn-{k}", text=w, level="warn") for k, w in enumerate(m.warnings)]
    if not blocks:
        blocks.append(Note(id=f"derive-{i}-no-final", text="nothing beyond the steps: the derivation stopped "
                                                           "before the final configuration", level="warn"))
    return Section(id=f"derive-{i}-final-section", title="derive: final configuration and serving", blocks=blocks)


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """Per result: the answer and conditions, the two figures, the steps table, then the final
    configuration, sizing, serve command, outputs and warnings."""
    multi = len(results) > 1
    out: list[Section] = []
    for i, r in enumerate(results):
        out += [_answer(i, r, multi), _figures(i, r), _steps(i, r), _final(i, r)]
    return out
