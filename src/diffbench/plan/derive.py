"""The ordered derivation: ① account, ② lossless single GPU, ③ lossy I, ④ lossy II, ⑤ multi-GPU,
⑥ few-step model, ⑦ serving, ⑧ signals. Lossless before lossy, lossy applied in order of visibility,
more GPUs before a different model.

Lossy steps ③-④: the fastest *set* of lossy options within the quality budget (:mod:`diffbench.plan.lossy`;
every subset is evaluated, not a greedy walk), applied in order of visibility. They are taken whenever the
budget allows, because they lower GPU-seconds (cost) even when the SLO is already met.

⑤ multi-GPU only when one GPU misses the p99 SLO *with queueing* or the model does not fit one GPU; the
layouts of the planning rules (NVLink: USP, + CFG parallel; PCIe: + PipeFusion; does not fit: TP) are compared
on their p99 with queueing and their GPU count including the occupied time (:mod:`diffbench.plan.sizing`).
⑥ a few-step model only when allowed and still needed; it re-does ② and ③ on the few-step model and drops
the step cache and PipeFusion, which lose their effect with few steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from diffbench.errors import ModelError
from diffbench.ledger.account import LedgerConfig, LedgerResult, evaluate, fit_suggestions
from diffbench.ledger.catalog import get_gpu, get_model
from diffbench.ledger.multigpu import ParallelPlan, evaluate_parallel
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec
from diffbench.ledger.tokens import check_shape
from diffbench.plan.batching import POLICY, plan_batch
from diffbench.plan.commands import (
    ATTENTION_BACKENDS,
    bench_cmd,
    ledger_cmd,
    load_cmd,
    quality_cmd,
    sweep_cmd,
)
from diffbench.plan.lossy import ORDER, STAGE, LossyOption, LossySet, apply_options, best_set, lossy_options
from diffbench.plan.models import Alternative, BatchPlan, LayoutRow, PlanConfig, PlanResult, PlanStep
from diffbench.plan.quality import combine_psnr
from diffbench.plan.signals import alerts_for, signals_for
from diffbench.plan.sizing import CV_SOURCE, LayoutSizing, sample_warnings, size_layout

if TYPE_CHECKING:
    import numpy as np

PIPEFUSION_FEW_STEP = ("PipeFusion attends to one-step-stale K/V of the other patches and needs warm-up steps "
                       "without staleness (xdit-project/xDiT docs/methods/pipefusion.md, arXiv 2405.14430): with "
                       "a few steps the stale activations differ too much and the warm-up is most of the run")

Record = Callable[..., None]


def _fit_memory(catalog: Catalog, lc: LedgerConfig) -> tuple[LedgerConfig, str]:
    """Cheapest lossless memory change that makes one GPU fit (tiling, then model, then group offload)."""
    for change, why in (
        ({"vae_tiling": True}, "VAE tiling bounds the decode peak"),
        ({"vae_tiling": True, "offload": "model"}, "model CPU offload keeps one component resident"),
        ({"vae_tiling": True, "offload": "group"}, "group offload streams denoiser blocks from pinned host RAM"),
    ):
        trial = lc.model_copy(update=change)
        if evaluate(catalog, trial).fits:
            return trial, why
    return lc.model_copy(update={"vae_tiling": True}), ""


def _parallel_candidates(model: ModelSpec, gpu: GpuSpec, fps: int, gpn: int, fits: bool,
                         few_step: bool = False) -> list[tuple[str, int]]:
    """The layouts the planning rules name (docs/guides/plan-a-deployment.md): NVLink → USP (+ CFG parallel, CFG-2 × USP-k next to USP-2k);
    PCIe → + PipeFusion (not for few-step models); does not fit one GPU → + tensor parallel."""
    degrees = [d for d in range(2, gpn + 1) if gpn % d == 0]
    nvlink = gpu.nvlink_gbps is not None
    cands: list[tuple[str, int]] = []
    if fps == 2:
        cands.append(("cfg", 2))
    for d in degrees:
        if nvlink:
            cands.append(("usp", d))
            if fps == 2 and d >= 4 and (d // 2) >= 2:
                cands.append(("cfg+usp", d))
        else:
            if not few_step:
                cands.append(("pipefusion", d))
            cands.append(("usp", d))
        if not fits:
            cands.append(("tp", d))
    return cands


def _latency(r: LedgerResult, par: ParallelPlan | None) -> tuple[float, float, float]:
    """(latency, work GPU-seconds, occupied GPU-seconds) of the current plan."""
    if par is None:
        return r.total_time_s, r.total_time_s, r.total_time_s
    return par.latency_s, par.gpu_s, par.occupied_gpu_s


def _size(cfg: PlanConfig, label: str, latency: float, gpus: int, samples: np.ndarray | None) -> LayoutSizing:
    return size_layout(label, cfg.qps, latency, gpus, cfg.slo_p99_s, cfg.headroom, cfg.gpus_per_node,
                       cfg.service_cv, samples)


def _lossless(catalog: Catalog, cfg: PlanConfig, gpu: GpuSpec, lc: LedgerConfig, frames: int, steps: int,
              add: Record) -> tuple[LedgerConfig, LedgerResult]:
    """② lossless single GPU: memory, attention backend, compile, warmup."""
    r = evaluate(catalog, lc)
    if not r.fits:
        lc2, why = _fit_memory(catalog, lc)
        r2 = evaluate(catalog, lc2)
        if why:
            add(2, "memory", True, f"{why}; peak {r2.peak_memory_bytes / 2**30:.1f} GiB, "
                f"+{r2.offload_time_s:.2f} s of transfers", "offload time = bytes moved ÷ host-to-device "
                "bandwidth minus overlap with compute (docs/concepts/time-model.md)", r2,
                bench_cmd(cfg, frames, steps, lc2))
        else:
            add(2, "memory", False, "tiling and offload do not make one GPU fit; splitting across GPUs in ⑤",
                "activations or a single component exceed one GPU", r2, ledger_cmd(cfg, frames, steps, lc2))
        lc, r = lc2, r2
    lossless = {k: b for k, b in catalog.optimizations.attention_backends.items()
                if b.lossless and (not b.requires_arch or gpu.arch in b.requires_arch)}
    best = max(lossless, key=lambda k: lossless[k].eta)
    if best != lc.attention:
        lc = lc.model_copy(update={"attention": best})
        r = evaluate(catalog, lc)
        add(2, "attention backend", True, f"{best} on {gpu.arch}", lossless[best].source, r,
            bench_cmd(cfg, frames, steps, lc))
    else:
        add(2, "attention backend", False, f"{best} is already the fastest lossless kernel on {gpu.arch}",
            lossless[best].source, r, bench_cmd(cfg, frames, steps, lc))
    lc = lc.model_copy(update={"compile": True})
    r = evaluate(catalog, lc)
    add(2, "compile", True, f"torch.compile: η_gemm {r.etas.gemm:.2f}",
        "compiled elementwise passes and launch overhead from the joint fit over the catalog's compiled and eager "
        "anchors (diffbench ledger --validate shows each one predicted by a fit without it)", r,
        bench_cmd(cfg, frames, steps, lc, "--warmup 0 --runs 10"))
    add(2, "warmup", True, f"warm up every served shape ({cfg.width}x{cfg.height}, {steps} steps) before traffic",
        "compiled graphs specialise per shape; an unwarmed shape pays the compile on a live request", r,
        bench_cmd(cfg, frames, steps, lc, "--warmup 3"))
    return lc, r


def _why(catalog: Catalog, x: LossyOption) -> str:
    o = catalog.optimizations
    if x.name == "fp8 linear":
        return "FP8 dynamic quantization of linear layers (attention and VAE stay 16-bit)"
    if x.name == "int4 linear":
        return f"{o.int4_linear.method}: weights ≈ ¼ of BF16 plus the 16-bit branch"
    if x.name == "8-bit attention":
        return "SageAttention-style INT8 QKᵀ attention"
    if x.name == "step cache":
        return (f"{o.step_cache.method} cache at threshold {x.label.split()[-1]}: denoise "
                f"{float(x.update['cache_speedup']):.2f}× faster")  # type: ignore[arg-type]
    return f"attention core {o.sparse_attention.attention_speedup:g}× faster"


def _lossy(catalog: Catalog, cfg: PlanConfig, model: ModelSpec, gpu: GpuSpec, lc: LedgerConfig, r: LedgerResult,
           frames: int, steps: int, add: Record, psnrs: list[float], few_step: bool = False,
           ) -> tuple[LedgerConfig, LedgerResult, list[LossySet]]:
    """③-④: the fastest lossy set within the budget, applied in order of visibility (``psnrs`` gains the
    PSNR of every option applied)."""
    lossy_ok = cfg.allow_lossy and cfg.quality_budget_db is not None
    opts, skip = lossy_options(catalog, model, gpu, r, lossy_ok=lossy_ok, assume_fp8=cfg.assume_fp8,
                               few_step=few_step)
    chosen, ranked = best_set(catalog, lc, r, opts, cfg.quality_budget_db, _fit_memory) if opts else ((), [])
    best_label = " + ".join(ranked[0].options) if ranked and ranked[0].options else "none"
    o = catalog.optimizations
    sage_from = ATTENTION_BACKENDS.get(lc.attention) or "native"
    cmds = {
        "fp8 linear": quality_cmd(cfg, "BF16_OUTPUTS", "FP8_OUTPUTS"),
        "int4 linear": quality_cmd(cfg, "BF16_OUTPUTS", "INT4_OUTPUTS"),
        "8-bit attention": sweep_cmd(cfg, frames, steps, lc, f"--option attention-backend --values {sage_from},sage"),
        "step cache": sweep_cmd(cfg, frames, steps, lc, f"--cache {o.step_cache.method} --values "
                                f"{','.join(f'{t.threshold:g}' for t in o.step_cache.thresholds)}"),
        "sparse attention": quality_cmd(cfg, "DENSE_OUTPUTS", "SPARSE_OUTPUTS"),
    }
    sources = {
        "fp8 linear": f"FP8 GEMMs at {o.fp8_linear.gemm_retention:.0%} of the BF16 efficiency on the FP8 peak; "
                      f"{o.fp8_linear.source}; archs: {o.fp8_linear.archs_source}",
        "int4 linear": f"{o.int4_linear.method}: weights {o.int4_linear.lowrank_overhead:.0%} low-rank branch on top "
                       f"of 4-bit storage; {o.int4_linear.source}",
        "8-bit attention": o.attention_backends["sage8"].source if "sage8" in o.attention_backends else "—",
        "step cache": f"{o.step_cache.source}; with FP8 a larger threshold may be needed for the same hit rate",
        "sparse attention": o.sparse_attention.source,
    }
    for name in ORDER:
        mine = [x for x in chosen if x.name == name]
        offered = [x for x in opts if x.name == name]
        if mine:
            x = mine[0]
            psnrs.append(x.psnr_db)
            before_offload = lc.offload
            lc, r = apply_options(catalog, lc.model_copy(update={"offload": before_offload}), (x,), _fit_memory)
            why = _why(catalog, x)
            if before_offload != "none" and lc.offload == "none":
                why += f"; now fits one GPU without offload (peak {r.peak_memory_bytes / 2**30:.1f} GiB)"
            add(STAGE[name], name, True, f"{why} [fastest set within the budget: {best_label}]", sources[name],
                r, cmds[name], x.psnr_db)
        elif name in skip:
            add(STAGE[name], name, False, skip[name], sources[name], r, cmds[name])
        else:
            cost = max(x.psnr_db for x in offered) if offered else None
            add(STAGE[name], name, False, f"not in the fastest set within the {cfg.quality_budget_db:g} dB budget "
                f"({best_label})", sources[name], r, cmds[name], cost)
    return lc, r, ranked[:5]


def _layouts(catalog: Catalog, cfg: PlanConfig, model: ModelSpec, gpu: GpuSpec, base: LedgerResult,
             samples: np.ndarray | None, few_step: bool,
             ) -> tuple[ParallelPlan | None, LayoutSizing | None, list[LayoutRow], list[ParallelPlan]]:
    """Every named layout that fits, with its p99 with queueing and GPU count (occupied time included).

    Choice: among layouts meeting the p99 SLO with queueing, the fewest GPUs (then the lowest latency);
    if none meets it, the lowest latency. Returns (chosen or None, its sizing, table rows, all tried)."""
    # a model that fits one GPU only with CPU offload does not fit it: its layouts (tensor parallel among them)
    # are costed on the request without offload, whose weights the split then holds in GPU memory
    resident = base
    if base.config.offload != "none":
        resident = evaluate(catalog, base.config.model_copy(update={"offload": "none"}))
    tried = [evaluate_parallel(catalog, model, gpu, resident, s, d, cfg.gpus_per_node)  # type: ignore[arg-type]
             for s, d in _parallel_candidates(model, gpu, resident.forwards_per_step, cfg.gpus_per_node,
                                              resident.fits, few_step)]
    ok = [p for p in tried if p.valid and p.fits]
    sized = [(p, _size(cfg, p.label, p.latency_s, p.gpus, samples)) for p in ok]
    rows = [LayoutRow(label=p.label, strategy=p.strategy, gpus_per_instance=p.gpus, link=p.link,
                      latency_s=p.latency_s, p99_s=z.p99_s, instances=z.instances, total_gpus=z.total_gpus,
                      meets_slo=z.meets_slo, note=p.reason) for p, z in sized]
    if not sized:
        return None, None, rows, tried
    meeting = [(p, z) for p, z in sized if z.meets_slo]
    if meeting:
        chosen, cz = min(meeting, key=lambda x: (x[1].total_gpus, x[0].latency_s))
    else:
        chosen, cz = min(sized, key=lambda x: (x[0].latency_s, x[0].gpus))
    rows = [row.model_copy(update={"chosen": row.label == chosen.label}) for row in rows]
    return chosen, cz, rows, tried


def plan(catalog: Catalog, cfg: PlanConfig, service_samples: np.ndarray | None = None) -> PlanResult:
    """Derive a serving configuration. An unmet SLO is a valid result (``slo_met=False``, ``stopped_at``).

    ``service_samples``: measured per-request seconds (a ``bench`` run) whose spread, rescaled to each
    layout's predicted latency, drives the queueing-aware capacity; None → normal with ``cfg.service_cv``.

    Raises:
        ModelError / UsageError / ShapeError: unknown model or GPU, a shape the model cannot take.
        ModelError: the model fits nowhere (no single- or multi-GPU layout on this GPU type); the message
            says what would make it fit.
    """
    model = get_model(catalog, cfg.model)
    gpu = get_gpu(catalog, cfg.gpu)
    frames = check_shape(model, cfg.width, cfg.height, cfg.frames)
    steps = cfg.steps if cfg.steps is not None else model.default_steps
    out: list[PlanStep] = []
    psnrs: list[float] = []
    spread_note = (f"service-time spread from {cfg.service_from}" if service_samples is not None
                   else f"service-time CV {cfg.service_cv:g}: {CV_SOURCE}")

    def add(stage: int, name: str, applied: bool, reason: str, assumption: str, r: LedgerResult,
            command: str, cost: float | None = None, par: ParallelPlan | None = None) -> None:
        lat, gs, _ = _latency(r, par)
        out.append(PlanStep(stage=stage, name=name, applied=applied, reason=reason, assumption=assumption,
                            latency_s=lat, gpu_s=gs, quality_cost_db=cost, psnr_db=combine_psnr(psnrs),
                            command=command))

    def quiet(*_a: object, **_k: object) -> None:
        return None

    # ① the account: stock pipeline, bf16, eager, SDPA
    lc = LedgerConfig(model=cfg.model, width=cfg.width, height=cfg.height, frames=frames, steps=steps,
                      cfg=cfg.cfg, text_tokens=cfg.text_tokens, gpu=cfg.gpu)
    r = evaluate(catalog, lc)
    fit_txt = "fits" if r.fits else "does NOT fit"
    add(1, "account", True,
        f"{r.total_flops / 1e12:,.0f} TF per request ({r.forwards_per_step} forward(s)/step × {steps} steps), "
        f"peak {r.peak_memory_bytes / 2**30:.1f} GiB: {fit_txt} one {gpu.display_name}; "
        f"attention {r.attention_time_share:.0%} of denoise time",
        f"bf16 eager with SDPA; η_gemm {r.etas.gemm:.2f}, η_attn {r.etas.attention:.2f} "
        f"(calibrated on the catalog's anchors)"
        + "".join(f"; WARNING: {n}" for n in r.notes if n.startswith("the time model's fit")),
        r, ledger_cmd(cfg, frames, steps))

    # ② lossless single GPU, ③-④ the best lossy set
    lc, r = _lossless(catalog, cfg, gpu, lc, frames, steps, add)
    lc, r, lossy_sets = _lossy(catalog, cfg, model, gpu, lc, r, frames, steps, add, psnrs)

    single = r
    par: ParallelPlan | None = None
    sizing: LayoutSizing | None = None
    layouts: list[LayoutRow] = []
    stopped_at: str | None = None

    # ⑤ multi-GPU, on the p99 with queueing
    def multi(base: LedgerResult, label: str, few_step: bool) -> tuple[ParallelPlan | None, LayoutSizing | None]:
        nonlocal layouts
        one = _size(cfg, "1 GPU", base.total_time_s, 1, service_samples) if base.fits else None
        one_row = ([LayoutRow(label="1 GPU", strategy="single", gpus_per_instance=1, link="—",
                              latency_s=base.total_time_s, p99_s=one.p99_s, instances=one.instances,
                              total_gpus=one.total_gpus, meets_slo=one.meets_slo)] if one is not None else [])
        if one is not None and one.meets_slo:
            layouts = [one_row[0].model_copy(update={"chosen": True})]
            add(5, "multi-GPU", False, f"SLO met on one GPU with queueing (p99 {one.p99_s:.2f} s ≤ "
                f"{cfg.slo_p99_s:g} s at {one.instances} instances); more GPUs per request would lower latency, "
                "not GPU-seconds", spread_note, base, label)
            return None, one
        chosen, cz, rows, tried = _layouts(catalog, cfg, model, gpu, base, service_samples, few_step)
        if chosen is not None and one is not None and not cz.meets_slo \
                and base.total_time_s <= chosen.latency_s:  # nothing helps: keep one GPU
            chosen = None
        layouts = one_row + rows
        if chosen is None:
            if not base.fits:
                raise ModelError(_fits_nowhere(catalog, cfg, base, tried))
            layouts = [row.model_copy(update={"chosen": row.label == "1 GPU"}) for row in layouts]
            add(5, "multi-GPU", False, _no_layout_reason(cfg, base, tried), "—", base, label)
            return None, one
        link = "NVLink" if chosen.link == "nvlink" else "PCIe"
        why = "; splits memory that one GPU cannot hold" if not base.fits else (
            f"; one GPU misses the p99 with queueing ({one.p99_s:.2f} s)" if one is not None else "")
        n_meet = sum(row.meets_slo for row in rows)
        rule = (f"fewest GPUs of the {n_meet} of {len(rows)} layouts meeting the SLO with queueing" if n_meet
                else f"none of the {len(rows)} layouts meets the SLO with queueing: the lowest latency")
        add(5, "multi-GPU", True, f"{chosen.label} over {link}: {chosen.latency_s:.2f} s, p99 with queueing "
            f"{cz.p99_s:.2f} s at {cz.instances} × {chosen.gpus} GPUs ({rule}; "
            f"comm {chosen.comm_bytes_per_forward / 1e9:.2f} GB/forward/GPU, "
            f"{chosen.exposed_comm_s:.3f} s exposed)" + why,
            "parallel inefficiency per extra rank from the xDiT Ulysses-4 anchor; an instance holds all its GPUs "
            f"for the whole request (occupied {chosen.occupied_gpu_s:.2f} GPU·s); {spread_note}", base,
            load_cmd(cfg, frames, steps, closed=True) + f"  # on a service running {chosen.label}", par=chosen)
        return chosen, cz

    par, sizing = multi(single, bench_cmd(cfg, frames, steps, lc), few_step=False)
    lat, _, _ = _latency(single, par)
    if sizing is None or not sizing.meets_slo:
        stopped_at = "⑤ multi-GPU" if par is not None else "④ lossy II"

    # ⑥ few-step model: re-do ② and ③ on it; no step cache, no PipeFusion
    alternatives: list[Alternative] = []
    fs = model.few_step
    if fs is None:
        add(6, "few-step model", False, f"no few-step variant of {model.display_name} in the catalog", "—", single,
            "—")
    else:
        few_psnrs: list[float] = []
        few_lc0 = LedgerConfig(model=cfg.model, width=cfg.width, height=cfg.height, frames=frames, steps=fs.steps,
                               cfg=1.0 if fs.forwards_per_step == 1 else cfg.cfg, text_tokens=cfg.text_tokens,
                               gpu=cfg.gpu)
        few_lc, few = _lossless(catalog, cfg, gpu, few_lc0, frames, fs.steps, quiet)
        few_lc, few, _ = _lossy(catalog, cfg, model, gpu, few_lc, few, frames, fs.steps, quiet, few_psnrs,
                                few_step=True)
        few_cmd = bench_cmd(cfg, frames, fs.steps, few_lc).replace(f"/path/to/{cfg.model}", "/path/to/few-step-model")
        redo = (f"② and ③ re-done on it ({few_lc.attention}, compile, {few_lc.precision}"
                + (", sage8" if few_lc.attention == "sage8" else "") + "); step cache and PipeFusion dropped: "
                "they rely on neighbouring steps being alike, which a few-step sampler removes")
        note = (f"{fs.name}: {fs.steps} steps, {fs.forwards_per_step} forward(s)/step; {redo}; a different model, "
                "so PSNR against the original is not meaningful: judge with a set-level metric")
        need = sizing is None or not sizing.meets_slo
        if cfg.allow_model_swap and need:
            single, lc = few, few_lc
            psnrs[:] = few_psnrs
            add(6, "few-step model", True, note, f"{fs.source}; {PIPEFUSION_FEW_STEP}", few, few_cmd)
            par, sizing = multi(few, few_cmd, few_step=True)
            lat, _, _ = _latency(single, par)
            stopped_at = None if sizing is not None and sizing.meets_slo else "⑥ few-step model"
        else:
            fz = _size(cfg, fs.name, few.total_time_s, 1, service_samples) if few.fits else None
            why = ("model swap not allowed (--allow-model-swap)" if not cfg.allow_model_swap
                   else "SLO already met")
            gpus_txt = f"{fz.total_gpus} GPUs" if fz is not None else "does not fit one GPU"
            add(6, "few-step model", False, f"{why}; alternative: {few.total_time_s:.2f} s, {gpus_txt}",
                fs.source, single, few_cmd, par=par)
            if fz is not None:
                alternatives.append(Alternative(name=fs.name, latency_s=few.total_time_s,
                                                per_request_gpu_s=few.total_time_s, total_gpus=fz.total_gpus,
                                                nodes=fz.nodes, note=note))

    # ⑦ serving: the headline count = max(formula on occupied time, queue count)
    lat, gpu_s, occupied = _latency(single, par)
    per_inst = par.gpus if par is not None else 1
    if sizing is None:
        sizing = _size(cfg, par.label if par is not None else "1 GPU", lat, per_inst, service_samples)
    batching: BatchPlan | None = None
    formula_s = lat  # occupied seconds per request in the formula: a full batch's time ÷ its size when batched
    if cfg.max_batch > 1:
        if par is not None:
            add(7, "batching", False, f"batching is planned for one-GPU instances; this plan splits each request "
                f"over {par.gpus} GPUs", POLICY, single, ledger_cmd(cfg, frames, steps, lc), par=par)
        else:
            batching, bz = plan_batch(catalog, cfg, lc, service_samples)
            best = batching.chosen_batch
            better = bz is not None and best > 1 and (not sizing.meets_slo or bz.total_gpus < sizing.total_gpus)
            if better:
                assert bz is not None
                why = (f"batches of up to {best}: {bz.total_gpus} GPUs instead of {sizing.total_gpus} "
                       f"({cfg.qps / bz.total_gpus:.3g} req/s per GPU), p99 with queueing {bz.p99_s:.2f} s; one GPU "
                       f"serves up to {batching.max_qps_per_gpu:.3g} req/s within the SLO")
                sizing = bz
                stopped_at = None
                formula_s = batching.rows[best - 1].batch_s / best
            elif bz is None:
                why = f"no batch limit up to {cfg.max_batch} meets the p99 SLO with queueing"
            else:
                why = (f"batching does not lower the GPU count at {cfg.qps:g} req/s (best limit {best}); one GPU "
                       f"serves up to {batching.max_qps_per_gpu:.3g} req/s within the SLO")
            add(7, "batching", better, why,
                f"{POLICY}; batch time from the ledger at each batch size (GEMMs batched, attention, text encode and "
                "VAE decode per sample); M/G^[B]/c simulation (queueing.batching.size_batched_pool)", single,
                ledger_cmd(cfg, frames, steps, lc) + f" --batch {best}")
    api = ("job API (submit, poll, fetch)" if model.kind == "video" or lat > 30
           else "synchronous (OpenAI images style)")
    pools = (f"one pool for {cfg.width}x{cfg.height}" + (f"×{frames}f" if frames > 1 else "") +
             f", {steps} steps; give every other shape its own pool (service time differs by orders of magnitude)")
    q_txt = (f"queue needs {sizing.queue_instances}" if sizing.queue_instances is not None
             else "no count meets the p99 (the service time's own p99 exceeds the SLO)")
    add(7, "serving", True,
        f"{sizing.instances} instance(s) × {per_inst} GPU = {sizing.total_gpus} GPUs on {sizing.nodes} node(s) of "
        f"{cfg.gpus_per_node}: max(formula QPS {cfg.qps:g} × {formula_s:.2f} s × headroom {cfg.headroom:g} = "
        f"{sizing.formula_instances}, {q_txt}); p99 with queueing {sizing.p99_s:.2f} s; {api}; {pools}",
        f"M/G/c FCFS simulation, Poisson arrivals (queueing.sizing.size_pool); {spread_note}; an instance is "
        f"occupied for the whole request (work {gpu_s:.2f} GPU·s, occupied {occupied:.2f} GPU·s)", single,
        load_cmd(cfg, frames, steps), par=par)

    # ⑧ signals and alerts
    psnr = combine_psnr(psnrs)
    sigs = signals_for(cfg, single, lat, par is not None)
    alerts = alerts_for(cfg, single, lat, par is not None, lc.compile, psnr)
    add(8, "signals", True, f"{len(sigs)} series to set or watch, {len(alerts)} alerts to enable",
        "names from monitoring/alerts.yaml and diffbench.metrics.names; baselines from this plan, to be replaced by measured values", single,
        "— (no diffbench command yet: set them from the plan's --json signals and alerts)", par=par)

    return PlanResult(
        config=cfg, model_name=model.display_name, gpu_name=gpu.display_name, frames=frames,
        steps_count=steps, steps=out, latency_s=lat, slo_met=sizing.meets_slo, stopped_at=stopped_at,
        per_request_gpu_s=gpu_s, occupied_gpu_s=occupied, gpus_per_instance=per_inst, instances=sizing.instances,
        total_gpus=sizing.total_gpus, nodes=sizing.nodes, total_gpus_occupied_bound=sizing.total_gpus,
        parallel=par, psnr_db=psnr, api=api, pools=pools, alternatives=alternatives, signals=sigs, alerts=alerts,
        lossy_sets=lossy_sets, sizing=sizing, layouts=layouts, warnings=sample_warnings(service_samples),
        batching=batching,
    )


def _no_layout_reason(cfg: PlanConfig, base: LedgerResult, tried: list[ParallelPlan]) -> str:
    """Why no multi-GPU layout was chosen, as a sentence (never an empty clause)."""
    if cfg.gpus_per_node < 2:
        return (f"the SLO is missed on one GPU ({base.total_time_s:.2f} s > {cfg.slo_p99_s:g} s), but with 1 GPU "
                "per node there is no second GPU to split a request across (one request stays inside a node); "
                "raise --gpus-per-node to plan sequence/tensor parallelism")
    reasons = sorted({p.reason for p in tried if p.reason and not p.valid})[:2]
    if not tried:
        return f"no multi-GPU strategy applies to {cfg.gpus_per_node} GPUs per node"
    if reasons:
        return "no valid multi-GPU layout on this node: " + "; ".join(reasons)
    return (f"no multi-GPU layout on {cfg.gpus_per_node} GPUs per node fits in memory "
            f"(usable {base.usable_bytes / 2**30:.1f} GiB per GPU)")


def _fits_nowhere(catalog: Catalog, cfg: PlanConfig, base: LedgerResult, tried: list[ParallelPlan]) -> str:
    fixes = fit_suggestions(catalog, base.config)
    peak = base.peak_memory_bytes / 2**30
    hint = "; ".join(fixes) if fixes else "a smaller size or fewer frames, or more GPUs per node for TP"
    return (f"{cfg.model} at {cfg.width}x{cfg.height}" + (f"x{base.frames}f" if base.frames > 1 else "") +
            f" fits nowhere on {cfg.gpus_per_node}× {cfg.gpu}: needs {peak:.1f} GiB on one GPU "
            f"(usable {base.usable_bytes / 2**30:.1f} GiB) and no tensor/sequence-parallel layout fits; "
            f"would fit with: {hint}")
