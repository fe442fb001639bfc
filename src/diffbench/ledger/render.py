"""Rich renderables for a ledger result (no printing here; the CLI prints)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from diffbench.ledger.account import LedgerResult
from diffbench.ledger.fit import TARGET, FitResult, GroupSummary, ValidationRow
from diffbench.ledger.multigpu import ParallelPlan

GIB = 2**30


def fmt_flops(f: float) -> str:
    if f >= 1e15:
        return f"{f / 1e15:,.2f} PF"
    return f"{f / 1e12:,.2f} TF"


def parallel_table(plans: list[ParallelPlan]) -> Group:
    """Multi-GPU layouts for one request: latency, GPU-seconds (work and occupied), traffic, memory."""
    t = Table(title="multi-GPU options (one request)")
    for col in ("layout", "GPUs", "link", "latency", "GPU·s", "occupied GPU·s", "comm/forward/GPU", "peak/GPU", "note"):
        t.add_column(col, justify="left" if col in ("layout", "link", "note") else "right", overflow="fold")
    for p in plans:
        if p.valid:
            t.add_row(p.label, str(p.gpus), p.link, f"{p.latency_s:.3f} s", f"{p.gpu_s:.2f}",
                      f"{p.occupied_gpu_s:.2f}", f"{p.comm_bytes_per_forward / 1e9:.2f} GB",
                      f"{p.peak_per_gpu_bytes / GIB:.1f} GiB", p.reason or ("" if p.fits else "does not fit"))
    invalid = [f"{p.label}: {p.reason}" for p in plans if not p.valid]
    parts: list[Table | Text] = [t]
    if invalid:
        parts.append(Text("not valid: " + "; ".join(invalid), style="dim"))
    return Group(*parts)


def ledger_renderable(r: LedgerResult, suggestions: list[str] | None = None,
                      parallel: list[ParallelPlan] | None = None, gpus_per_node: int | None = None) -> Group:
    """The ledger as rich renderables; ``gpus_per_node`` explains an empty multi-GPU table."""
    shape = f"{r.width}x{r.height}" + (f", {r.frames} frames" if r.frames > 1 else "")
    head = Text(f"{r.model_name} · {shape} · {r.steps} steps · {r.forwards_per_step} forward(s)/step · "
                f"{r.gpu_name} · {r.config.precision}, {r.config.attention}, "
                f"{'compiled' if r.config.compile else 'eager'}"
                + (", FP16 accumulation" if r.config.accumulate == "fp16" else ""), style="bold")
    tok = Text(f"tokens: {r.tokens.visual:,} visual + {r.tokens.text_joint} joint text"
               + (f" (+{r.tokens.text_cross} cross-attention text)" if r.tokens.text_cross else "")
               + f" = N {r.tokens.seq:,}; per forward {fmt_flops(r.forward.linear)} linear + "
                 f"{fmt_flops(r.forward.attention)} attention ({r.forward.attention_share:.0%} of FLOPs)")
    t = Table(title="stages (one GPU)")
    for col in ("stage", "FLOPs", "time", "memory"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for s in r.stages:
        t.add_row(s.name, fmt_flops(s.flops), f"{s.time_s * 1e3:,.1f} ms", f"{s.memory_bytes / GIB:.2f} GiB")
    if r.offload_time_s:
        t.add_row("offload transfers", "—", f"{r.offload_time_s * 1e3:,.1f} ms", "—")
    t.add_row("total", fmt_flops(r.total_flops), f"{r.total_time_s:.3f} s", f"{r.peak_memory_bytes / GIB:.2f} GiB peak",
              style="bold")
    w = Table(title="weights")
    for col in ("component", "parameters", "precision", "bytes"):
        w.add_column(col, justify="left" if col in ("component", "precision") else "right")
    for c in r.weights:
        w.add_row(c.component, f"{c.params / 1e9:.3f} B", c.precision, f"{c.bytes / GIB:.2f} GiB")
    w.add_row("total", "", "", f"{r.weights_bytes / GIB:.2f} GiB", style="bold")
    fits = "yes" if r.fits else "no"
    mem = Text(f"memory: resident weights {r.resident_weights_bytes / GIB:.2f} GiB + max(denoise activations "
               f"{r.activation_bytes / GIB:.2f}, VAE decode {r.vae_decode_peak_bytes / GIB:.2f}) GiB + runtime → "
               f"peak {r.peak_memory_bytes / GIB:.2f} GiB of {r.capacity_bytes / GIB:.0f} GiB "
               f"(usable {r.usable_bytes / GIB:.1f} GiB with margin) → fits = {fits}",
               style="green" if r.fits else "red")
    eta = Text(f"assumptions: η_gemm {r.etas.gemm:.3f}, η_attention {r.etas.attention:.3f}, η_vae {r.etas.vae:.2f}, "
               f"η_text {r.etas.text:.2f}; attention {r.attention_time_share:.0%} of denoise time; "
               f"single-GPU latency {r.total_time_s:.3f} s; implied MFU {r.assumed_mfu:.2f}")
    den = Text(f"denoise by kernel class: GEMM {r.denoise_linear_s:.3f} s"
               + (f" (of which {r.denoise_memory_bound_s:.3f} s weight-bound)" if r.denoise_memory_bound_s else "")
               + f", attention {r.denoise_attention_s:.3f} s, elementwise/norm {r.denoise_elementwise_s:.3f} s "
               f"({r.etas.elementwise_passes:.1f} activation passes/block at η_mem {r.etas.mem:.2f}), launch "
               f"{r.denoise_overhead_s:.3f} s; η from {r.etas.source or 'the catalog'}")
    parts = [head, tok, t, w, mem, eta, den]
    if r.measured_mfu is not None:
        parts.append(Text(f"measured: {r.config.measured_s:g} s → MFU {r.measured_mfu:.3f} "
                          f"(predicted {r.total_time_s:.3f} s)", style="bold"))
    if parallel:
        parts.append(parallel_table(parallel))
    elif gpus_per_node is not None and gpus_per_node < 2:
        parts.append(Text(f"multi-GPU options: none with --gpus-per-node {gpus_per_node}: one request stays "
                          "inside a node, so there is no second GPU to split it across", style="dim"))
    if suggestions:
        parts.append(Text("would fit with: " + "; ".join(suggestions), style="yellow"))
    parts.extend(Text(f"note: {n}", style="dim") for n in r.notes)
    return Group(*parts)


def group_table(groups: list[GroupSummary]) -> Table:
    """``ledger --validate`` by architecture: anchors, how many are within the target, the range of their
    leave-one-out ratios and the architecture's fitted factors on η_gemm and on the elementwise passes."""
    t = Table(title=f"leave-one-out by architecture (target {TARGET[0]}-{TARGET[1]})")
    for col in ("architecture", "anchors", "within", "min ratio", "max ratio", "η_gemm ×", "elementwise ×"):
        t.add_column(col, justify="left" if col == "architecture" else "right")
    for g in groups:
        empty = g.anchors == 0
        t.add_row(g.group, str(g.anchors), f"{g.within}/{g.anchors}", "—" if empty else f"{g.min_ratio:.3f}",
                  "—" if empty else f"{g.max_ratio:.3f}", f"{g.gemm_factor:.3f}", f"{g.elementwise_factor:.3f}")
    return t


def validate_table(rows: list[ValidationRow], fr: FitResult, groups: list[GroupSummary] | None = None) -> Group:
    """``ledger --validate``: one row per anchor (published, leave-one-out and in-sample predictions); the reasons
    of outliers are footnotes under the table (a long reason in a column would make it unreadable)."""
    t = Table(title=f"time model vs published latencies (leave-one-out; target {TARGET[0]}-{TARGET[1]})")
    for col in ("anchor", "model", "GPU", "setting", "published", "LOO pred.", "ratio", "in-sample", "note"):
        t.add_column(col, justify="right" if col in ("published", "LOO pred.", "ratio", "in-sample") else "left",
                     overflow="fold", no_wrap=col in ("published", "LOO pred.", "ratio", "in-sample"))
    footnotes: list[Text] = []
    for r in rows:
        a = r.anchor
        shape = f"{a.width}x{a.height}" + (f"x{a.frames}f" if a.frames else "")
        ok = TARGET[0] <= r.ratio <= TARGET[1]
        note = ""
        if a.outlier:
            footnotes.append(Text(f"[{len(footnotes) + 1}] {a.id} (kept out of the fit) — outlier: {a.outlier}"))
            note = f"outlier [{len(footnotes)}]"
        elif r.loo_s != r.loo_s:  # nan: no other anchor to fit
            note = "no other anchor: no leave-one-out fit"
        elif not ok:
            note = "OUTSIDE TARGET"
        setting = (f"{shape}, {a.steps} steps, {a.attention}, {'compiled' if a.compile else 'eager'}, {a.precision}, "
                   + ("fp16 acc, " if a.accumulate == "fp16" else "") + f"{a.covers.replace('_', ' ')}")
        t.add_row(a.id, a.model, a.gpu, setting, f"{a.measured_s:,.2f} s", "—" if r.loo_s != r.loo_s else f"{r.loo_s:,.2f} s",
                  "—" if r.loo_s != r.loo_s else f"{r.ratio:.3f}",
                  f"{r.in_sample_s / a.measured_s:.3f}", note)
    attn = ", ".join(f"{b}@{arch} {v:.3f}" for (b, arch), v in sorted(fr.eta_attn.items()))
    summary = Text(f"fit over {fr.n_anchors} anchors ({len(fr.free)} free parameters): η_gemm {fr.eta_gemm:.3f}; "
                   f"η_attn {attn}; elementwise passes/block eager {fr.passes[False]:.1f}, compiled "
                   f"{fr.passes[True]:.1f}; launch {fr.launch[False] * 1e3:.3f} ms/forward eager; "
                   + "".join(f"sustained {v:.3f} TF per board W on {g}; " for g, v in sorted(fr.tflops_per_watt.items()))
                   + f"RMS log residual {fr.rms_log_residual:.3f}")
    return Group(t, *footnotes, *([group_table(groups)] if groups else []), summary)
