"""The ordered derivation: ① account, ② lossless single GPU, ③ lossy I, ④ lossy II, ⑤ multi-GPU,
⑥ few-step model, ⑦ serving, ⑧ signals. Lossless before lossy, lossy ordered by visibility, more GPUs
before a different model, each lossy step checked against the quality budget (combined PSNR).

Lossy steps ③-④ are taken whenever the budget allows, because they lower GPU-seconds (cost) even when
the SLO is already met; multi-GPU (⑤) only when the SLO is still missed or the model does not fit one GPU,
because it lowers latency but not GPU-seconds; a few-step model (⑥) only when allowed and still needed.
"""

from __future__ import annotations

from diffbench.errors import ModelError
from diffbench.ledger.account import LedgerConfig, LedgerResult, evaluate, fit_suggestions
from diffbench.ledger.catalog import get_gpu, get_model
from diffbench.ledger.multigpu import ParallelPlan, evaluate_parallel
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec
from diffbench.ledger.timing import fp8_effective
from diffbench.ledger.tokens import check_shape
from diffbench.plan.capacity import capacity
from diffbench.plan.commands import (
    ATTENTION_BACKENDS,
    bench_cmd,
    ledger_cmd,
    load_cmd,
    quality_cmd,
    sweep_cmd,
)
from diffbench.plan.models import Alternative, PlanConfig, PlanResult, PlanStep
from diffbench.plan.quality import combine_psnr, within_budget
from diffbench.plan.signals import alerts_for, signals_for


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


def _parallel_candidates(model: ModelSpec, gpu: GpuSpec, fps: int, gpn: int, fits: bool) -> list[tuple[str, int]]:
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
            cands.append(("pipefusion", d))
            cands.append(("usp", d))
        if not fits:
            cands.append(("tp", d))
    return cands


def _choose_parallel(catalog: Catalog, model: ModelSpec, gpu: GpuSpec, base: LedgerResult, cfg: PlanConfig,
                     ) -> tuple[ParallelPlan | None, list[ParallelPlan]]:
    """Fewest GPUs meeting the SLO (then fewest GPU-seconds); else the lowest latency. Only layouts that fit."""
    plans = [evaluate_parallel(catalog, model, gpu, base, s, d, cfg.gpus_per_node)  # type: ignore[arg-type]
             for s, d in _parallel_candidates(model, gpu, base.forwards_per_step, cfg.gpus_per_node, base.fits)]
    ok = [p for p in plans if p.valid and p.fits]
    if not ok:
        return None, plans
    meeting = [p for p in ok if p.latency_s <= cfg.slo_p99_s]
    if meeting:
        return min(meeting, key=lambda p: (p.gpus, p.gpu_s, p.latency_s)), plans
    return min(ok, key=lambda p: (p.latency_s, p.gpus)), plans


def _latency(r: LedgerResult, par: ParallelPlan | None) -> tuple[float, float, float]:
    """(latency, work GPU-seconds, occupied GPU-seconds) of the current plan."""
    if par is None:
        return r.total_time_s, r.total_time_s, r.total_time_s
    return par.latency_s, par.gpu_s, par.occupied_gpu_s


def plan(catalog: Catalog, cfg: PlanConfig) -> PlanResult:
    """Derive a serving configuration. An unmet SLO is a valid result (``slo_met=False``, ``stopped_at``).

    Raises:
        ModelError / UsageError / ShapeError: unknown model or GPU, a shape the model cannot take.
        ModelError: the model fits nowhere (no single- or multi-GPU layout on this GPU type); the message
            says what would make it fit.
    """
    model = get_model(catalog, cfg.model)
    gpu = get_gpu(catalog, cfg.gpu)
    frames = check_shape(model, cfg.width, cfg.height, cfg.frames)
    steps = cfg.steps if cfg.steps is not None else model.default_steps
    lossy_ok = cfg.allow_lossy and cfg.quality_budget_db is not None
    out: list[PlanStep] = []
    psnrs: list[float] = []

    def add(stage: int, name: str, applied: bool, reason: str, assumption: str, r: LedgerResult,
            command: str, cost: float | None = None, par: ParallelPlan | None = None) -> None:
        lat, gs, _ = _latency(r, par)
        out.append(PlanStep(stage=stage, name=name, applied=applied, reason=reason, assumption=assumption,
                            latency_s=lat, gpu_s=gs, quality_cost_db=cost, psnr_db=combine_psnr(psnrs),
                            command=command))

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
        f"(calibrated on the xDiT FLUX.1-dev H100 anchors)",
        r, ledger_cmd(cfg, frames, steps))

    # ② lossless single GPU: memory, attention backend, compile, warmup
    if not r.fits:
        lc2, why = _fit_memory(catalog, lc)
        r2 = evaluate(catalog, lc2)
        if why:
            add(2, "memory", True, f"{why}; peak {r2.peak_memory_bytes / 2**30:.1f} GiB, "
                f"+{r2.offload_time_s:.2f} s of transfers", "offload time = bytes moved ÷ host-to-device "
                "bandwidth minus overlap with compute (model-catalog.md §8)", r2,
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
        "compiled/eager ratio of the xDiT H100 anchors (4.30 s vs 6.71 s) carries over", r,
        bench_cmd(cfg, frames, steps, lc, "--warmup 0 --runs 10"))
    add(2, "warmup", True, f"warm up every served shape ({cfg.width}x{cfg.height}, {steps} steps) before traffic",
        "compiled graphs specialise per shape; an unwarmed shape pays the compile on a live request", r,
        bench_cmd(cfg, frames, steps, lc, "--warmup 3"))

    # ③ lossy I: FP8 linear layers, 8-bit attention
    fp8 = catalog.optimizations.fp8_linear
    fp8_cmd = quality_cmd(cfg, "BF16_OUTPUTS", "FP8_OUTPUTS")
    if not lossy_ok:
        add(3, "fp8 linear", False, "lossy steps not allowed (no --quality-budget or --no-lossy)", fp8.source, r,
            fp8_cmd)
    elif not fp8_effective(gpu, "fp8"):
        add(3, "fp8 linear", False, f"{gpu.display_name} has no FP8 tensor cores (speed-up needs them)",
            fp8.source, r, fp8_cmd)
    elif not within_budget([*psnrs, fp8.psnr_db], cfg.quality_budget_db):
        add(3, "fp8 linear", False, f"estimated {fp8.psnr_db:.0f} dB would break the {cfg.quality_budget_db} dB budget",
            fp8.source, r, fp8_cmd, fp8.psnr_db)
    else:
        psnrs.append(fp8.psnr_db)
        lc = lc.model_copy(update={"precision": "fp8"})
        r = evaluate(catalog, lc)
        add(3, "fp8 linear", True, "FP8 dynamic quantization of linear layers (attention and VAE stay 16-bit)",
            f"FP8 GEMMs at {fp8.gemm_retention:.0%} of the BF16 efficiency on the 2× FP8 peak; {fp8.source}", r,
            fp8_cmd, fp8.psnr_db)
    sage = catalog.optimizations.attention_backends.get("sage8")
    sage_cmd = sweep_cmd(cfg, frames, steps, lc, f"--option attention-backend --values {ATTENTION_BACKENDS.get(best) or 'native'},sage")
    if sage is not None:
        usable = not sage.requires_arch or gpu.arch in sage.requires_arch
        better = sage.eta > r.etas.attention
        cost = sage.psnr_db or 0.0
        if lossy_ok and usable and better and within_budget([*psnrs, cost], cfg.quality_budget_db):
            psnrs.append(cost)
            lc = lc.model_copy(update={"attention": "sage8"})
            r = evaluate(catalog, lc)
            add(3, "8-bit attention", True, "SageAttention-style INT8 QKᵀ attention", sage.source, r,
                sage_cmd, cost)
        else:
            why = ("lossy steps not allowed" if not lossy_ok else "not faster than the current kernel" if not better
                   else "GPU not supported" if not usable else f"estimated {cost:.0f} dB would break the budget")
            add(3, "8-bit attention", False, why, sage.source, r, sage_cmd,
                cost)

    # ④ lossy II: step cache at a threshold, sparse attention for video
    sc = catalog.optimizations.step_cache
    cache_cmd = sweep_cmd(cfg, frames, steps, lc, f"--cache {sc.method} --values "
                          f"{','.join(f'{t.threshold:g}' for t in sc.thresholds)}")
    if not lossy_ok:
        add(4, "step cache", False, "lossy steps not allowed", sc.source, r, cache_cmd)
    elif model.denoiser.arch == "unet":
        add(4, "step cache", False, "UNet denoisers have no enable_cache; first-block cache raises on them "
            "(quality-metrics.md §11)", sc.source, r, cache_cmd)
    else:
        fitting = [t for t in sc.thresholds if within_budget([*psnrs, t.psnr_db], cfg.quality_budget_db)]
        if fitting:
            t = max(fitting, key=lambda x: x.denoise_speedup)
            psnrs.append(t.psnr_db)
            lc = lc.model_copy(update={"cache_speedup": t.denoise_speedup})
            r = evaluate(catalog, lc)
            add(4, "step cache", True, f"{sc.method} cache at threshold {t.threshold:g}: denoise "
                f"{t.denoise_speedup:.2f}× faster (the most aggressive threshold inside the budget)",
                f"{sc.source}; with FP8 a larger threshold may be needed for the same hit rate", r,
                cache_cmd, t.psnr_db)
        else:
            add(4, "step cache", False, "even the lightest threshold would break the quality budget", sc.source,
                r, cache_cmd, min(x.psnr_db for x in sc.thresholds))
    sp = catalog.optimizations.sparse_attention
    if model.kind == "video" or not sp.video_only:
        if lossy_ok and within_budget([*psnrs, sp.psnr_db], cfg.quality_budget_db):
            psnrs.append(sp.psnr_db)
            lc = lc.model_copy(update={"attention_speedup": sp.attention_speedup})
            r = evaluate(catalog, lc)
            add(4, "sparse attention", True, f"attention core {sp.attention_speedup:g}× faster", sp.source, r,
                quality_cmd(cfg, "DENSE_OUTPUTS", "SPARSE_OUTPUTS"), sp.psnr_db)
        else:
            add(4, "sparse attention", False, "lossy steps not allowed" if not lossy_ok else
                "would break the quality budget", sp.source, r, quality_cmd(cfg, "DENSE_OUTPUTS", "SPARSE_OUTPUTS"),
                sp.psnr_db)

    single = r
    par: ParallelPlan | None = None
    stopped_at: str | None = None

    # ⑤ multi-GPU
    def multi(base: LedgerResult, label: str) -> ParallelPlan | None:
        nonlocal stopped_at
        if base.fits and base.total_time_s <= cfg.slo_p99_s:
            add(5, "multi-GPU", False, f"SLO met on one GPU ({base.total_time_s:.2f} s ≤ {cfg.slo_p99_s:g} s); "
                "more GPUs per request would lower latency, not GPU-seconds", "—", base,
                label)
            return None
        chosen, tried = _choose_parallel(catalog, model, gpu, base, cfg)
        if chosen is None:
            if not base.fits:
                raise ModelError(_fits_nowhere(catalog, cfg, base, tried))
            add(5, "multi-GPU", False, _no_layout_reason(cfg, base, tried), "—", base, label)
            return None
        link = "NVLink" if chosen.link == "nvlink" else "PCIe"
        add(5, "multi-GPU", True, f"{chosen.label} over {link}: {chosen.latency_s:.2f} s "
            f"(comm {chosen.comm_bytes_per_forward / 1e9:.2f} GB/forward/GPU, {chosen.exposed_comm_s:.3f} s exposed)"
            + ("" if base.fits else "; splits memory that one GPU cannot hold"),
            "parallel inefficiency per extra rank from the xDiT Ulysses-4 anchor; GPU-seconds unchanged except "
            f"exposed communication (occupied bound {chosen.occupied_gpu_s:.2f} GPU·s)", base,
            load_cmd(cfg, frames, steps, closed=True)
            + f"  # on a service running {chosen.label}", par=chosen)
        return chosen

    par = multi(single, bench_cmd(cfg, frames, steps, lc))
    lat, _, _ = _latency(single, par)
    if lat > cfg.slo_p99_s:
        stopped_at = "⑤ multi-GPU" if par is not None else "④ lossy II"

    # ⑥ few-step model
    alternatives: list[Alternative] = []
    fs = model.few_step
    if fs is None:
        add(6, "few-step model", False, f"no few-step variant of {model.display_name} in the catalog", "—", single,
            "—")
    else:
        few_lc = lc.model_copy(update={"steps": fs.steps, "cache_speedup": 1.0,
                                       "cfg": 1.0 if fs.forwards_per_step == 1 else lc.cfg})
        few = evaluate(catalog, few_lc)
        cap = capacity(cfg.qps, few.total_time_s, cfg.headroom, 1, cfg.gpus_per_node)
        few_cmd = bench_cmd(cfg, frames, fs.steps, few_lc).replace(f"/path/to/{cfg.model}", "/path/to/few-step-model")
        note = (f"{fs.name}: {fs.steps} steps, {fs.forwards_per_step} forward(s)/step, no step cache; "
                "a different model, so PSNR against the original is not meaningful: judge with a set-level metric")
        need = lat > cfg.slo_p99_s
        if cfg.allow_model_swap and need:
            single = few
            add(6, "few-step model", True, note, fs.source, few, few_cmd)
            par = multi(few, few_cmd) if few.total_time_s > cfg.slo_p99_s \
                else None
            lat, _, _ = _latency(single, par)
            stopped_at = None if lat <= cfg.slo_p99_s else "⑥ few-step model"
        else:
            why = ("model swap not allowed (--allow-model-swap)" if not cfg.allow_model_swap
                   else "SLO already met")
            add(6, "few-step model", False, f"{why}; alternative: {few.total_time_s:.2f} s, {cap.total_gpus} GPUs",
                fs.source, single, few_cmd, par=par)
            alternatives.append(Alternative(name=fs.name, latency_s=few.total_time_s,
                                            per_request_gpu_s=few.total_time_s, total_gpus=cap.total_gpus,
                                            nodes=cap.nodes, note=note))

    # ⑦ serving
    lat, gpu_s, occupied = _latency(single, par)
    per_inst = par.gpus if par is not None else 1
    cap = capacity(cfg.qps, gpu_s, cfg.headroom, per_inst, cfg.gpus_per_node)
    bound = capacity(cfg.qps, occupied, cfg.headroom, per_inst, cfg.gpus_per_node)
    api = ("job API (submit, poll, fetch)" if model.kind == "video" or lat > 30
           else "synchronous (OpenAI images style)")
    pools = (f"one pool for {cfg.width}x{cfg.height}" + (f"×{frames}f" if frames > 1 else "") +
             f", {steps} steps; give every other shape its own pool (service time differs by orders of magnitude)")
    add(7, "serving", True,
        f"{cap.instances} instance(s) × {per_inst} GPU = {cap.total_gpus} GPUs on {cap.nodes} node(s) of "
        f"{cfg.gpus_per_node} (QPS {cfg.qps:g} × {gpu_s:.2f} GPU·s × headroom {cfg.headroom:g}); {api}; {pools}",
        "p99 ≈ predicted service time at utilisation ≤ 1/headroom; sequence parallelism lowers latency, not "
        f"GPU-seconds (if its inefficiency is unrecoverable GPU time: {bound.total_gpus} GPUs)", single,
        load_cmd(cfg, frames, steps), par=par)

    # ⑧ signals and alerts
    psnr = combine_psnr(psnrs)
    sigs = signals_for(cfg, single, lat, par is not None)
    alerts = alerts_for(cfg, single, lat, par is not None, lc.compile, psnr)
    add(8, "signals", True, f"{len(sigs)} series to set or watch, {len(alerts)} alerts to enable",
        "names from monitoring.md §3-§4; baselines from this plan, to be replaced by measured values", single,
        "— (no diffbench command yet: set them from the plan's --json signals and alerts)", par=par)

    return PlanResult(
        config=cfg, model_name=model.display_name, gpu_name=gpu.display_name, frames=frames, steps_count=steps,
        steps=out, latency_s=lat, slo_met=lat <= cfg.slo_p99_s, stopped_at=stopped_at, per_request_gpu_s=gpu_s,
        occupied_gpu_s=occupied, gpus_per_instance=per_inst, instances=cap.instances, total_gpus=cap.total_gpus,
        nodes=cap.nodes, total_gpus_occupied_bound=bound.total_gpus, parallel=par, psnr_db=psnr, api=api,
        pools=pools, alternatives=alternatives, signals=sigs, alerts=alerts,
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
