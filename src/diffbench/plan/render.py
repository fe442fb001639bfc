"""Rich renderables for a plan result (no printing here; the CLI prints)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from diffbench.plan.models import PlanResult

MARKS = {1: "①", 2: "②", 3: "③", 4: "④", 5: "⑤", 6: "⑥", 7: "⑦", 8: "⑧"}


def _n(count: int, word: str) -> str:
    """``"1 GPU"``, ``"73,795 GPUs"``."""
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def plan_renderable(p: PlanResult) -> Group:
    c = p.config
    shape = f"{c.width}x{c.height}" + (f"×{p.frames}f" if p.frames > 1 else "")
    head = Text(f"{p.model_name} · {shape} · {p.steps_count} steps · {p.gpu_name} × {c.gpus_per_node}/node · "
                f"SLO p99 {c.slo_p99_s:g} s · {c.qps:g} QPS · budget "
                + (f"{c.quality_budget_db:g} dB" if c.quality_budget_db else "lossless only"), style="bold")
    t = Table(title="derivation")
    for col in ("", "step", "applied", "latency", "GPU·s", "cost", "PSNR", "why"):
        t.add_column(col, justify="right" if col in ("latency", "GPU·s", "cost", "PSNR") else "left",
                     overflow="fold")
    for s in p.steps:
        psnr = "lossless" if s.psnr_db is None else f"{s.psnr_db:.1f} dB"
        cost = "—" if s.quality_cost_db is None else f"{s.quality_cost_db:.0f} dB"
        t.add_row(MARKS.get(s.stage, str(s.stage)), s.name, "yes" if s.applied else "no",
                  f"{s.latency_s:.2f} s", f"{s.gpu_s:.2f}", cost, psnr, s.reason,
                  style=None if s.applied else "dim")
    a = Table(title="assumptions and confirming commands")
    a.add_column("", no_wrap=True)
    a.add_column("step", no_wrap=True)
    a.add_column("assumption", overflow="fold")
    a.add_column("confirm with", overflow="fold")
    for s in p.steps:
        a.add_row(MARKS.get(s.stage, ""), s.name, s.assumption, s.command, style=None if s.applied else "dim")
    parts: list[object] = [head, t, a]
    verdict = "meets" if p.slo_met else "MISSES"
    style = "green" if p.slo_met else "red"
    parts.append(Text(f"result: {p.latency_s:.2f} s per request ({verdict} the {c.slo_p99_s:g} s SLO"
                      + (f"; stops at {p.stopped_at}, best achievable" if p.stopped_at else "") + "), "
                      + (f"{p.per_request_gpu_s:.2f} GPU·s of work and {p.occupied_gpu_s:.2f} GPU·s occupied per request"
                         if p.gpus_per_instance > 1 else f"{p.per_request_gpu_s:.2f} GPU·s per request")
                      + f" → {_n(p.total_gpus, 'GPU')} "
                      f"({p.instances:,} × {p.gpus_per_instance}) on {_n(p.nodes, 'node')}", style=f"bold {style}"))
    if p.sizing is not None:
        z = p.sizing
        q = f"{z.queue_instances}" if z.queue_instances is not None else "none meets the p99"
        parts.append(Text(f"capacity: max(formula {z.formula_instances}, queue {q}) = {z.instances} instances; "
                          f"p99 with queueing {z.p99_s:.2f} s (service p99 {z.service_p99_s:.2f} s, {z.spread})"))
    if p.lossy_sets:
        ls_t = Table(title="lossy sets within the budget (fastest first)")
        for col in ("", "set", "latency", "speed-up", "PSNR"):
            ls_t.add_column(col, justify="right" if col in ("latency", "speed-up", "PSNR") else "left")
        for k, ls in enumerate(p.lossy_sets):
            ls_t.add_row("chosen" if k == 0 else f"#{k + 1}", " + ".join(ls.options) or "none (lossless)",
                         f"{ls.latency_s:.2f} s", f"{ls.speedup:.2f}×",
                         "lossless" if ls.psnr_db is None else f"{ls.psnr_db:.1f} dB", style=None if k else "bold")
        parts.append(ls_t)
    if len(p.layouts) > 1:
        lay_t = Table(title="⑤ layouts: p99 with queueing, GPUs including occupied time")
        for col in ("layout", "GPUs/inst", "latency", "p99 (queue)", "instances", "GPUs", "SLO"):
            lay_t.add_column(col, justify="left" if col == "layout" else "right")
        for lay in p.layouts:
            lay_t.add_row(lay.label + (" ◀" if lay.chosen else ""), str(lay.gpus_per_instance),
                          f"{lay.latency_s:.2f} s", f"{lay.p99_s:.2f} s", str(lay.instances), str(lay.total_gpus),
                          "met" if lay.meets_slo else "missed", style="bold" if lay.chosen else None)
        parts.append(lay_t)
    if p.batching is not None:
        bp = p.batching
        bt = Table(title=f"⑦ batch limits (up to {bp.max_batch}): GPUs at {c.qps:g} req/s under the p99 SLO")
        for col in ("batch ≤", "batch time", "saturation/GPU", "mean batch", "p99 (queue)", "GPUs", "req/s per GPU",
                    "SLO"):
            bt.add_column(col, justify="right")
        for row in bp.rows:
            if not row.fits:
                bt.add_row(str(row.batch), f"{row.batch_s:.2f} s", "", "", "", "", "",
                           f"does not fit ({row.peak_memory_bytes / 2**30:.1f} GiB)", style="dim")
                continue
            bt.add_row(str(row.batch) + (" ◀" if row.chosen else ""), f"{row.batch_s:.2f} s",
                       f"{row.saturation_per_gpu:.3g}/s", f"{row.mean_batch or 0:.2f}", f"{row.p99_s or 0:.2f} s",
                       str(row.total_gpus), f"{row.throughput_per_gpu or 0:.3g}", "met" if row.meets_slo else "missed",
                       style="bold" if row.chosen else None)
        parts.append(bt)
        parts.append(Text(f"batching: {bp.policy}; one GPU serves up to {bp.max_qps_per_gpu:.3g} req/s within the "
                          f"SLO at batch ≤ {bp.chosen_batch}"))
    if p.pool_plan is not None:
        pp = p.pool_plan
        pool_t = Table(title=f"shape pools ({pp.workload})")
        for col in ("pool", "share", "QPS", "latency", "p99 (queue)", "layout", "instances", "GPUs", "SLO"):
            pool_t.add_column(col, justify="left" if col in ("pool", "layout") else "right")
        for row in pp.rows:
            pool_t.add_row(row.shape, f"{row.weight_share:.0%}", f"{row.qps:g}", f"{row.latency_s:.2f} s",
                           "—" if row.p99_s is None else f"{row.p99_s:.2f} s", row.layout,
                           f"{row.instances} × {row.gpus_per_instance}", str(row.total_gpus),
                           "met" if row.slo_met else "MISSED")
        pool_t.add_row("total", "100%", f"{pp.qps:g}", "", "", "", "", str(pp.total_gpus),
                       "met" if pp.all_slo_met else "MISSED", style="bold")
        parts.append(pool_t)
        parts.append(Text(f"pools: {_n(pp.total_gpus, 'GPU')} on {_n(pp.nodes, 'node')} in total (details above: the "
                          f"largest pool, {pp.rows[0].shape})", style="bold"))
    if p.cost is not None:
        k = p.cost
        parts.append(Text(f"cost: {k.cost_per_1000:.4g} per 1,000 outputs at {k.gpu_hour_price:g} per GPU-hour "
                          f"({_n(k.gpus, 'GPU')} paid all the time for {k.qps:g} QPS = {k.gpu_s_per_output:.3g} "
                          f"GPU·s per output; {k.cost_per_hour:.4g} per hour)", style="bold"))
    for alt in p.alternatives:
        parts.append(Text(f"alternative: {alt.name}: {alt.latency_s:.2f} s, {_n(alt.total_gpus, 'GPU')} on {_n(alt.nodes, 'node')}",
                          style="cyan"))
    s = Table(title="⑧ signals and alerts")
    s.add_column("series / alert")
    s.add_column("value / threshold", justify="right")
    s.add_column("note", overflow="fold")
    for sig in p.signals:
        val = "" if sig.value is None else f"{sig.value:.4g} {sig.unit}".strip()
        s.add_row(sig.name, val, sig.note)
    for al in p.alerts:
        s.add_row(al.name, al.threshold, al.condition, style="yellow")
    parts.append(s)
    parts.extend(Text(f"warning: {w}", style="yellow") for w in p.warnings)
    return Group(*parts)  # type: ignore[arg-type]
