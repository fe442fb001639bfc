"""Report sections of ledger and plan results (``diffbench ledger --json``, ``diffbench plan --json``).

Ledger: the stage breakdown (text encode / denoise / VAE decode: FLOPs, predicted time with the denoise
split into linear layers and attention, memory) and the peak-memory bar against the GPU's capacity and
its usable share. Plan: the derivation waterfall, one bar per step ①–⑧ (:class:`PlanStep`) for the
per-request latency and GPU·s (a bar spans the value before the step to the value after it; the first
starts at 0), with the SLO line, then the capacity figures, alternatives, signals and alerts. Several
results of a kind are overlaid (one colour per file). Every plotted number is in a table.

SVG ids for DOM checks: ``ledger-{i}-{flops|time|memory}-{stage}``, ``ledger-{i}-time-denoise-attention``,
``ledger-{i}-peak``, ``ledger-{i}-capacity``, ``ledger-{i}-usable``; ``plan-{i}-latency-{j}``,
``plan-{i}-gpu-s-{j}`` (result i, step j), ``plan-{i}-slo``.
"""

from __future__ import annotations

from typing import Any

from diffbench.report.document import Block, Facts, Note, Plot, Section, Table
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult

GIB = 2**30
STAGE_LABELS = {"text_encode": "text encode", "denoise": "denoise", "vae_decode": "VAE decode"}


def circled(stage: int) -> str:
    """① … ⑳ for stages 1-20 (the plan's step numbers), else the number."""
    return chr(0x2460 + stage - 1) if 1 <= stage <= 20 else str(stage)


def _tag(r: LoadedResult, multi: bool) -> str:
    return f" ({r.label})" if multi else ""


def _offsets(n: int, width: float = 0.8) -> tuple[list[float], float]:
    w = width / n
    return [(k - (n - 1) / 2) * w for k in range(n)], w


def _time(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


# ---------------------------------------------------------------------------------------------- ledger


def _ledger_stages(results: list[LoadedResult]) -> Plot:
    from diffbench.report.figures import COLORS, new_figure

    multi = len(results) > 1
    fig = new_figure(10.0, 3.6, ncols=3)
    ax_f, ax_t, ax_m = fig.axes
    names = [s.name for s in results[0].model.stages]
    offs, w = _offsets(len(results))
    for i, r in enumerate(results):
        m, color = r.model, COLORS[i % len(COLORS)]
        by = {s.name: s for s in m.stages}
        for k, name in enumerate(names):
            s = by.get(name)
            if s is None:
                continue
            x = k + offs[i]
            label = f"{r.label}" if (multi and k == 0) else None
            ax_f.bar([x], [s.flops / 1e12], w, color=color, label=label, gid=f"ledger-{i}-flops-{name}")
            ax_m.bar([x], [s.memory_bytes / GIB], w, color=color, gid=f"ledger-{i}-memory-{name}")
            if name == "denoise":
                lin, att = m.denoise_linear_s, m.denoise_attention_s
                other = m.denoise_elementwise_s + m.denoise_overhead_s  # elementwise/norm kernels + launches
                ax_t.bar([x], [lin], w, color=color, gid=f"ledger-{i}-time-{name}",
                         label="denoise: linear layers" if i == 0 else None)
                if other:
                    ax_t.bar([x], [other], w, bottom=[lin], color=color, alpha=0.7, hatch="..", edgecolor="white",
                             gid=f"ledger-{i}-time-denoise-elementwise",
                             label="denoise: elementwise/norm + launch" if i == 0 else None)
                ax_t.bar([x], [att], w, bottom=[lin + other], color=color, alpha=0.45, hatch="//", edgecolor="white",
                         gid=f"ledger-{i}-time-denoise-attention",
                         label=f"denoise: attention ({m.attention_time_share:.0%} of denoise time)" if i == 0
                         else None)
            else:
                ax_t.bar([x], [s.time_s], w, color=color, gid=f"ledger-{i}-time-{name}")
            for ax, v, text in ((ax_f, s.flops / 1e12, f"{s.flops / 1e12:,.1f}"),
                                (ax_t, s.time_s, _time(s.time_s)),
                                (ax_m, s.memory_bytes / GIB, f"{s.memory_bytes / GIB:.1f}")):
                ax.annotate(text, (x, v), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
    for ax, unit in ((ax_f, "FLOPs per request (TFLOP)"), (ax_t, "predicted time (s)"),
                     (ax_m, "memory of the stage (GiB)")):
        ax.set_xticks(range(len(names)), [STAGE_LABELS.get(n, n) for n in names])
        ax.set_ylabel(unit)
        ax.margins(y=0.12)
    ax_t.margins(y=0.35)  # room for the legend above the bars and their labels
    ax_t.legend(fontsize=7, loc="upper left")
    if multi:
        ax_f.legend(fontsize=7, loc="upper left")
    desc = "; ".join(f"{r.model.model_name} {r.model.width}x{r.model.height}"
                     + (f"x{r.model.frames}f" if r.model.frames > 1 else "")
                     + f", {r.model.steps} steps on {r.model.gpu_name}" + _tag(r, multi) for r in results)
    return Plot(id="ledger-stages", title="Stage breakdown", figure=fig, caption=(
        f"{desc}. Predicted from the catalog (time = FLOPs ÷ (peak × η), per stage; the denoise bar splits "
        "into linear layers, elementwise/norm work with launch overhead, and the attention core). "
        "Memory = the stage's resident weights + its activations "
        "+ the runtime overhead. Numbers in the stages table."))


def _ledger_memory(results: list[LoadedResult]) -> Plot:
    from diffbench.report.figures import COLORS, new_figure

    fig = new_figure(8.0, 1.5 + 0.55 * len(results))
    ax = fig.axes[0]
    for i, r in enumerate(results):
        m = r.model
        act = max(m.activation_bytes, m.vae_decode_peak_bytes)
        which = "denoise activations" if m.activation_bytes >= m.vae_decode_peak_bytes else "VAE decode peak"
        other = m.peak_memory_bytes - m.resident_weights_bytes - act
        left = 0.0
        parts = [("resident weights", m.resident_weights_bytes, COLORS[0], f"ledger-{i}-resident"),
                 (which, act, COLORS[1], f"ledger-{i}-activations"),
                 ("runtime overhead", other, COLORS[7], f"ledger-{i}-overhead")]
        for name, b, color, gid in parts:
            ax.barh([i], [b / GIB], 0.5, left=[left], color=color, gid=gid, label=name if i == 0 else None)
            left += b / GIB
        ax.barh([i], [m.peak_memory_bytes / GIB], 0.5, fill=False, lw=0, gid=f"ledger-{i}-peak")
        ax.vlines([m.capacity_bytes / GIB], i - 0.38, i + 0.38, color="#d62728", lw=2, gid=f"ledger-{i}-capacity",
                  label="GPU capacity" if i == 0 else None)
        ax.vlines([m.usable_bytes / GIB], i - 0.38, i + 0.38, color="#d62728", lw=1.2, ls="--",
                  gid=f"ledger-{i}-usable", label="usable (capacity − margin)" if i == 0 else None)
        ax.annotate(f"peak {m.peak_memory_bytes / GIB:.1f} GiB of {m.capacity_bytes / GIB:.0f} GiB: "
                    + ("fits" if m.fits else "does NOT fit"), (m.peak_memory_bytes / GIB, i),
                    xytext=(4, 9), textcoords="offset points", fontsize=7)
    ax.set_yticks(range(len(results)), [f"{r.label}\n{r.model.gpu_name}" for r in results])
    ax.set_ylim(len(results) - 0.4 + 0.25, -0.6)  # the first result on top
    ax.set_xlim(0, max(max(r.model.capacity_bytes, r.model.peak_memory_bytes) for r in results) / GIB * 1.08)
    ax.set_xlabel("memory on one GPU (GiB)")
    fig.legend(fontsize=7, loc="outside lower center", ncols=5)
    return Plot(id="ledger-memory", title="Peak memory vs capacity", figure=fig, caption=(
        "Peak = resident weights + max(denoise activations, VAE decode peak) + runtime overhead; solid red: "
        "the GPU's memory, dashed: the usable share after the margin. Numbers in the memory table."))


def _ledger_tables(i: int, r: LoadedResult, multi: bool) -> Section:
    m = r.model
    c = m.config
    blocks: list[Block] = [Facts(id=f"ledger-{i}-conditions", title="Conditions", items=[
        ("model", m.model_name), ("size", f"{m.width}x{m.height}" + (f", {m.frames} frames" if m.frames > 1 else "")),
        ("steps", f"{m.steps} × {m.forwards_per_step} forward(s)"), ("GPU", m.gpu_name),
        ("precision · attention · compile", f"{c.precision} · {c.attention} · {'on' if c.compile else 'off'}"),
        ("offload · VAE tiling", f"{c.offload} · {'on' if c.vae_tiling else 'off'}"),
        ("tokens", f"{m.tokens.visual:,} visual + {m.tokens.text_joint:,} joint text = N {m.tokens.seq:,}"),
        ("efficiencies", f"η_gemm {m.etas.gemm:.3f}, η_attention {m.etas.attention:.3f}, η_vae {m.etas.vae:.2f}, "
                         f"η_text {m.etas.text:.2f}"),
        ("MFU", f"assumed {m.assumed_mfu:.2f}" + (f", measured {m.measured_mfu:.2f}" if m.measured_mfu else "")),
    ])]
    rows = [[STAGE_LABELS.get(s.name, s.name), f"{s.flops / 1e12:,.2f}", f"{s.time_s * 1e3:,.1f}",
             f"{s.memory_bytes / GIB:.2f}"] for s in m.stages]
    if m.offload_time_s:
        rows.append(["offload transfers", "—", f"{m.offload_time_s * 1e3:,.1f}", "—"])
    rows.append(["total", f"{m.total_flops / 1e12:,.2f}", f"{m.total_time_s * 1e3:,.1f}",
                 f"{m.peak_memory_bytes / GIB:.2f} (peak)"])
    blocks.append(Table(id=f"ledger-{i}-stages", title="Stages", headers=[
        "stage", "FLOPs (TFLOP)", "time (ms)", "memory (GiB)"], rows=rows,
        caption=f"denoise = linear {m.denoise_linear_s * 1e3:,.1f} ms + elementwise/norm "
                f"{m.denoise_elementwise_s * 1e3:,.1f} ms + launch {m.denoise_overhead_s * 1e3:,.1f} ms + attention "
                f"{m.denoise_attention_s * 1e3:,.1f} ms "
                f"(attention {m.attention_time_share:.1%} of denoise time); per forward {m.forward.linear / 1e12:,.2f} "
                f"TFLOP linear + {m.forward.attention / 1e12:,.2f} TFLOP attention"))
    blocks.append(Table(id=f"ledger-{i}-memory", title="Memory", headers=["item", "GiB"], rows=[
        ["weights (all components)", f"{m.weights_bytes / GIB:.2f}"],
        ["resident weights", f"{m.resident_weights_bytes / GIB:.2f}"],
        ["denoise activations", f"{m.activation_bytes / GIB:.2f}"],
        ["VAE decode peak", f"{m.vae_decode_peak_bytes / GIB:.2f}"],
        ["peak", f"{m.peak_memory_bytes / GIB:.2f}"],
        ["usable", f"{m.usable_bytes / GIB:.2f}"],
        ["capacity", f"{m.capacity_bytes / GIB:.2f}"],
        ["fits", "yes" if m.fits else "no"],
    ]))
    blocks.append(Table(id=f"ledger-{i}-weights", title="Weights", headers=[
        "component", "parameters (B)", "precision", "GiB"], rows=[
        [w.component, f"{w.params / 1e9:.3f}", w.precision, f"{w.bytes / GIB:.2f}"] for w in m.weights]))
    blocks += [Note(id=f"ledger-{i}-note-{k}", text=n, level="info") for k, n in enumerate(m.notes)]
    if not m.fits:
        blocks.append(Note(id=f"ledger-{i}-nofit", text=f"peak {m.peak_memory_bytes / GIB:.1f} GiB exceeds the "
                                                           f"usable {m.usable_bytes / GIB:.1f} GiB", level="warn"))
    return Section(id=f"ledger-{i}", title=f"ledger: {r.label}" if multi else "ledger: details", blocks=blocks)


def build_ledger(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """The stage breakdown and memory vs capacity (overlaid), then each ledger's tables."""
    multi = len(results) > 1
    head = Section(id="ledger", title="ledger: stage breakdown" + (" (overlaid)" if multi else ""),
                   blocks=[_ledger_stages(results), _ledger_memory(results)])
    return [head] + [_ledger_tables(i, r, multi) for i, r in enumerate(results)]


# ------------------------------------------------------------------------------------------------ plan


def _step_keys(results: list[LoadedResult]) -> list[tuple[int, str]]:
    """Every (stage, name) of the results' steps, in stage order then first appearance."""
    keys: list[tuple[int, str]] = []
    for r in results:
        for s in r.model.steps:
            if (s.stage, s.name) not in keys:
                keys.append((s.stage, s.name))
    return sorted(keys, key=lambda k: (k[0], keys.index(k)))


def _waterfall(results: list[LoadedResult]) -> Plot:
    from matplotlib.patches import Patch

    from diffbench.report.figures import COLORS, new_figure

    multi = len(results) > 1
    keys = _step_keys(results)
    fig = new_figure(10.0, 6.2, nrows=2)
    ax_l, ax_g = fig.axes
    offs, w = _offsets(len(results))
    for i, r in enumerate(results):
        m: Any = r.model
        base = COLORS[i % len(COLORS)]
        for field, ax, gid in (("latency_s", ax_l, "latency"), ("gpu_s", ax_g, "gpu-s")):
            prev = 0.0
            for j, s in enumerate(m.steps):
                cur = getattr(s, field)
                x = keys.index((s.stage, s.name)) + offs[i]
                lossy = s.quality_cost_db is not None
                ax.bar([x], [abs(cur - prev)], w, bottom=[min(cur, prev)], gid=f"plan-{i}-{gid}-{j}",
                       color=base if s.applied else "#c7c7c7", hatch="//" if lossy else None,
                       edgecolor="white" if lossy else None)
                ax.hlines([cur], x - w / 2, x + w / 2, color="#222222", lw=0.8)
                if j == 0 or abs(cur - prev) > 1e-12:  # the value after the step, beside its line
                    up = cur >= prev
                    ax.annotate(f"{cur:.2f}", (x, cur), xytext=(0, 2 if up else -2), textcoords="offset points",
                                ha="center", va="bottom" if up else "top", fontsize=7)
                prev = cur
        ax_l.axhline(m.config.slo_p99_s, color=base if multi else "#d62728", ls="--", lw=1.2,
                     gid=f"plan-{i}-slo")
    labels = [f"{circled(st)} {name}" for st, name in keys]
    for ax, unit in ((ax_l, "latency per request (s)"), (ax_g, "GPU·s per request")):
        ax.set_xticks(range(len(keys)), labels, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.margins(y=0.1)
    handles = [Patch(color=COLORS[i % len(COLORS)], label=r.label) for i, r in enumerate(results)] if multi else \
        [Patch(color=COLORS[0], label="applied")]
    handles += [Patch(facecolor="#c7c7c7", label="not applied"),
                Patch(facecolor="#999999", hatch="//", edgecolor="white", label="lossy (PSNR cost)")]
    slo = ", ".join(f"{r.model.config.slo_p99_s:g} s" + _tag(r, multi) for r in results)
    ax_l.plot([], [], color="#d62728", ls="--", label=f"SLO p99 {slo}")
    ax_l.legend(handles=handles + ax_l.get_legend_handles_labels()[0], fontsize=7, loc="upper right")
    desc = "; ".join(f"{r.model.model_name}, {r.model.config.width}x{r.model.config.height}, "
                     f"{r.model.steps_count} steps, {r.model.gpu_name}, {r.model.config.qps:g} QPS"
                     + _tag(r, multi) for r in results)
    return Plot(id="plan-waterfall", title="Derivation waterfall (①–⑧)", figure=fig, caption=(
        f"{desc}. Each bar spans the value before the step to the value after it (the first from 0): how much "
        "each step of the derivation takes off the predicted latency (top, dashed: the SLO) and the GPU·s per "
        "request (bottom). Grey: considered, not applied; hatched: lossy (its PSNR estimate is in the table). "
        "Numbers in the derivation table."))


def _plan_tables(i: int, r: LoadedResult, multi: bool) -> Section:
    m = r.model
    c = m.config
    def p(v: float | None) -> str:
        return "—" if v is None else f"{v:.1f}"

    facts = Facts(id=f"plan-{i}-capacity", title="Capacity", items=[
        ("request", f"{m.model_name} · {c.width}x{c.height}" + (f"x{m.frames}f" if m.frames > 1 else "")
         + f" · {m.steps_count} steps · {m.gpu_name} × {c.gpus_per_node}/node"),
        ("target", f"SLO p99 {c.slo_p99_s:g} s · {c.qps:g} QPS · headroom {c.headroom:g}"
         + (f" · quality budget {c.quality_budget_db:g} dB" if c.quality_budget_db is not None else "")),
        ("latency per request", f"{m.latency_s:.3f} s ({'meets' if m.slo_met else 'MISSES'} the SLO)"),
        ("GPU·s per request", f"{m.per_request_gpu_s:.3f} (occupied {m.occupied_gpu_s:.3f})"),
        ("instances", f"{m.instances} × {m.gpus_per_instance} GPU(s)"),
        ("total GPUs", f"{m.total_gpus} on {m.nodes} node(s)"),
        ("occupied bound", f"{m.total_gpus_occupied_bound} GPUs (an instance holds its GPUs for the whole request)"),
        ("PSNR estimate", f"{m.psnr_db:.1f} dB" if m.psnr_db is not None else "lossless"),
        ("API · pools", f"{m.api} · {m.pools}"),
    ] + ([("capacity with queueing",
           f"max(formula {m.sizing.formula_instances}, queue "
           + (f"{m.sizing.queue_instances}" if m.sizing.queue_instances is not None else "none meets the p99")
           + f") = {m.sizing.instances} instances; p99 with queueing {m.sizing.p99_s:.3f} s; "
           f"service p99 {m.sizing.service_p99_s:.3f} s ({m.sizing.spread})")] if m.sizing is not None else [])
      + ([("pools total", f"{m.pool_plan.total_gpus} GPUs on {m.pool_plan.nodes} node(s) over "
                          f"{len(m.pool_plan.rows)} pools")] if m.pool_plan is not None else [])
      + ([("multi-GPU layout", f"{m.parallel.label}: {m.parallel.gpus} GPUs over {m.parallel.link}, "
                               f"{m.parallel.latency_s:.3f} s")] if m.parallel is not None else []))
    steps = Table(id=f"plan-{i}-steps", title="Derivation", headers=[
        "", "step", "applied", "latency (s)", "GPU·s", "cost (dB)", "PSNR (dB)", "why"],
        rows=[[circled(s.stage), s.name, "yes" if s.applied else "no", f"{s.latency_s:.3f}", f"{s.gpu_s:.3f}",
               p(s.quality_cost_db), p(s.psnr_db) if s.psnr_db is not None else "lossless", s.reason]
              for s in m.steps],
        caption="latency and GPU·s after each step; cost = this step's own PSNR estimate against the lossless "
                "output, PSNR = the combined estimate after it (independent errors, MSE sum)")
    confirm = Table(id=f"plan-{i}-assumptions", title="Assumptions and confirming commands", headers=[
        "", "step", "assumption", "confirm with"],
        rows=[[circled(s.stage), s.name, s.assumption, s.command] for s in m.steps])
    blocks: list[Block] = [facts, steps, confirm]
    if m.stopped_at:
        blocks.append(Note(id=f"plan-{i}-stopped", text=f"stopped at: {m.stopped_at}", level="warn"))
    blocks += [Note(id=f"plan-{i}-warn-{k}", text=w, level="warn") for k, w in enumerate(getattr(m, "warnings", []))]
    if not m.slo_met:
        blocks.append(Note(id=f"plan-{i}-slo-missed", text=f"the plan misses the SLO: {m.latency_s:.3f} s > "
                                                           f"{c.slo_p99_s:g} s", level="warn"))
    if m.lossy_sets:
        blocks.append(Table(id=f"plan-{i}-lossy-sets", title="Lossy sets within the budget (fastest first)",
                            headers=["", "set", "latency (s)", "GPU·s", "speed-up", "PSNR (dB)"], rows=[
            ["chosen" if k == 0 else f"#{k + 1}", " + ".join(ls.options) or "none (lossless)",
             f"{ls.latency_s:.3f}", f"{ls.gpu_s:.3f}", f"{ls.speedup:.2f}×",
             "lossless" if ls.psnr_db is None else f"{ls.psnr_db:.1f}"] for k, ls in enumerate(m.lossy_sets)],
            caption="every subset of the lossy options was evaluated; speed-up over the lossless plan"))
    if len(m.layouts) > 1:
        blocks.append(Table(id=f"plan-{i}-layouts", title="⑤ Layouts (p99 with queueing)", headers=[
            "layout", "GPUs/instance", "link", "latency (s)", "p99 with queueing (s)", "instances", "GPUs",
            "meets SLO", "chosen"], rows=[
            [lay.label, str(lay.gpus_per_instance), lay.link, f"{lay.latency_s:.3f}", f"{lay.p99_s:.3f}",
             str(lay.instances), str(lay.total_gpus), "yes" if lay.meets_slo else "no", "◀" if lay.chosen else ""]
            for lay in m.layouts]))
    if m.pool_plan is not None:
        pp = m.pool_plan
        blocks.append(Table(id=f"plan-{i}-pools", title=f"Shape pools ({pp.workload})", headers=[
            "pool", "share", "QPS", "latency (s)", "p99 (s)", "layout", "instances", "GPUs", "SLO"], rows=[
            [row.shape, f"{row.weight_share:.0%}", f"{row.qps:g}", f"{row.latency_s:.3f}",
             "—" if row.p99_s is None else f"{row.p99_s:.3f}", row.layout,
             f"{row.instances} × {row.gpus_per_instance}", str(row.total_gpus), "met" if row.slo_met else "MISSED"]
            for row in pp.rows] + [["total", "100%", f"{pp.qps:g}", "", "", "", "", str(pp.total_gpus),
                                    "met" if pp.all_slo_met else "MISSED"]]))
    if m.alternatives:
        blocks.append(Table(id=f"plan-{i}-alternatives", title="Alternatives", headers=[
            "alternative", "latency (s)", "GPU·s per request", "total GPUs", "nodes", "note"], rows=[
            [a.name, f"{a.latency_s:.3f}", f"{a.per_request_gpu_s:.3f}", str(a.total_gpus), str(a.nodes), a.note]
            for a in m.alternatives]))
    if m.signals:
        blocks.append(Table(id=f"plan-{i}-signals", title="⑧ Signals to set or watch", headers=[
            "series", "value", "unit", "note"], rows=[
            [s.name, "—" if s.value is None else f"{s.value:.4g}", s.unit, s.note] for s in m.signals]))
    if m.alerts:
        blocks.append(Table(id=f"plan-{i}-alerts", title="⑧ Alerts to enable", headers=[
            "alert", "condition", "threshold"], rows=[[a.name, a.condition, a.threshold] for a in m.alerts]))
    return Section(id=f"plan-{i}", title=f"plan: {r.label}" if multi else "plan: details", blocks=blocks)


def _answer(results: list[LoadedResult]) -> Section:
    """The answer first: per plan, the GPUs and the configuration, against its SLO and QPS."""
    multi = len(results) > 1
    blocks: list[Block] = []
    for i, r in enumerate(results):
        m, c = r.model, r.model.config
        applied = [s.name for s in m.steps if s.applied]
        text = ((f"{r.label}: " if multi else "")
                + f"{m.total_gpus} GPUs ({m.gpu_name}) on {m.nodes} node(s): {m.instances} instance(s) × "
                f"{m.gpus_per_instance} GPU(s) for {c.qps:g} QPS; latency per request {m.latency_s:.3f} s, "
                f"{'meets' if m.slo_met else 'MISSES'} the SLO p99 {c.slo_p99_s:g} s; "
                + (f"PSNR estimate {m.psnr_db:.1f} dB" if m.psnr_db is not None else "lossless")
                + (f"; configuration: {', '.join(applied)}" if applied else ""))
        blocks.append(Note(id=f"plan-{i}-headline", text=text, level="info" if m.slo_met else "warn"))
    return Section(id="plan-answer", title="plan: answer", blocks=blocks)


def build_plan(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """The answer (GPUs and configuration), the waterfall (overlaid), then each plan's capacity,
    derivation, alternatives, signals and alerts."""
    multi = len(results) > 1
    head = Section(id="plan", title="plan: derivation" + (" (overlaid)" if multi else ""),
                   blocks=[_waterfall(results)])
    return [_answer(results), head] + [_plan_tables(i, r, multi) for i, r in enumerate(results)]
