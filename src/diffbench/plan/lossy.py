"""The best set of lossy options within the quality budget (steps ③ lossy I and ④ lossy II).

The lossy options are few: FP8 or INT4 linear layers (exclusive), 8-bit attention, one step-cache
threshold, sparse attention (video). Every valid subset is evaluated with the ledger and the fastest one
(lowest GPU-seconds per request; ties go to the higher combined PSNR) whose combined PSNR stays within the
budget is chosen. Taking options greedily in a fixed order lets a small win (8-bit attention, 1.05-1.2×)
spend the budget that a larger one (the step cache) needed; the planning rule "lossless before lossy, lossy
in order of visibility, stop at the budget" (docs/guides/plan-a-deployment.md) is the order in which options
are *applied and confirmed*, not a reason to keep a poor trade. Quality costs combine as independent errors
(:func:`diffbench.plan.quality.combine_psnr`).

Hardware rules (each with its source in the catalog): FP8 only on ``fp8_linear.archs`` unless
``assume_fp8`` (and never without FP8 tensor cores); INT4 only on ``int4_linear.requires_arch``; 8-bit
attention only where its backend runs and only if faster than the current kernel; no step cache on UNet
denoisers or few-step models; sparse attention only for video when the catalog says so.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pydantic import BaseModel

from diffbench.ledger.account import LedgerConfig, LedgerResult, evaluate
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec
from diffbench.plan.quality import combine_psnr, within_budget

# order of visibility: ③ lossy I (numerics) before ④ lossy II (skipped or approximated work)
ORDER = ("fp8 linear", "int4 linear", "8-bit attention", "step cache", "sparse attention")
STAGE = {"fp8 linear": 3, "int4 linear": 3, "8-bit attention": 3, "step cache": 4, "sparse attention": 4}


@dataclass(frozen=True)
class LossyOption:
    """One lossy change: ``name`` (one of :data:`ORDER`), its ledger ``update``, its PSNR (dB) vs lossless,
    its exclusive ``group`` (at most one option per group in a set) and a label for tables."""

    name: str
    label: str
    group: str
    psnr_db: float
    update: dict[str, object] = field(default_factory=dict)


class LossySet(BaseModel):
    """One evaluated subset: option labels in order of visibility, combined PSNR (None = lossless),
    single-GPU latency = GPU-seconds per request, speed-up over the lossless plan."""

    options: list[str]
    psnr_db: float | None
    latency_s: float
    gpu_s: float
    speedup: float
    fits: bool
    within_budget: bool


def lossy_options(catalog: Catalog, model: ModelSpec, gpu: GpuSpec, current: LedgerResult, *,
                  lossy_ok: bool, assume_fp8: bool = False, few_step: bool = False,
                  ) -> tuple[list[LossyOption], dict[str, str]]:
    """The options this model/GPU may try, and for every other option of :data:`ORDER` why not.

    ``current`` is the lossless plan (its attention η decides whether 8-bit attention is faster).
    Returns (options, {option name: reason it is not offered}).
    """
    opt = catalog.optimizations
    out: list[LossyOption] = []
    skip: dict[str, str] = {}
    if not lossy_ok:
        return [], {n: "lossy steps not allowed (no --quality-budget, or --no-lossy)" for n in ORDER}

    fp8 = opt.fp8_linear
    if gpu.fp8_tflops is None:
        skip["fp8 linear"] = f"{gpu.display_name} has no FP8 tensor cores (speed-up needs them)"
    elif gpu.arch not in fp8.archs and not assume_fp8:
        skip["fp8 linear"] = (f"{gpu.display_name} ({gpu.arch}) is not in fp8_linear.archs "
                              f"({', '.join(fp8.archs)}): {fp8.archs_source}; pass --assume-fp8 to plan it anyway")
    else:
        out.append(LossyOption("fp8 linear", "fp8", "linear", fp8.psnr_db, {"precision": "fp8"}))

    i4 = opt.int4_linear
    if gpu.arch not in i4.requires_arch:
        skip["int4 linear"] = (f"no {i4.method} kernels for {gpu.arch} ({gpu.display_name}); "
                               f"supported: {', '.join(i4.requires_arch)}")
    else:
        out.append(LossyOption("int4 linear", "int4", "linear", i4.psnr_db, {"precision": "int4"}))

    sage = opt.attention_backends.get("sage8")
    if sage is None:
        skip["8-bit attention"] = "no 8-bit attention backend in the catalog"
    elif sage.requires_arch and gpu.arch not in sage.requires_arch:
        skip["8-bit attention"] = f"GPU not supported ({'/'.join(sage.requires_arch)} only)"
    elif sage.eta <= current.etas.attention:
        skip["8-bit attention"] = "not faster than the current kernel"
    else:
        out.append(LossyOption("8-bit attention", "sage8", "attention", sage.psnr_db or 0.0,
                               {"attention": "sage8"}))

    sc = opt.step_cache
    if few_step:
        skip["step cache"] = ("a few-step model leaves no adjacent steps similar enough to reuse: the cache "
                              "loses its effect (first-block/TeaCache reuse a residual across neighbouring "
                              f"steps; {sc.source})")
    elif model.denoiser.arch == "unet":
        skip["step cache"] = ("UNet denoisers have no enable_cache; first-block cache raises on them "
                              "(diffusers.hooks: UNet2DConditionModel does not inherit CacheMixin)")
    else:
        for t in sc.thresholds:
            out.append(LossyOption("step cache", f"cache {t.threshold:g}", "cache", t.psnr_db,
                                   {"cache_speedup": t.denoise_speedup}))

    sp = opt.sparse_attention
    if model.kind == "video" or not sp.video_only:
        out.append(LossyOption("sparse attention", "sparse", "sparse", sp.psnr_db,
                               {"attention_speedup": sp.attention_speedup}))
    else:
        skip["sparse attention"] = "image model: sparse attention is catalogued for video only"
    return out, skip


def subsets(options: list[LossyOption]) -> list[tuple[LossyOption, ...]]:
    """Every valid subset (at most one option per group), options in order of visibility; includes ()."""
    groups: dict[str, list[LossyOption]] = {}
    for o in options:
        groups.setdefault(o.group, []).append(o)
    out = []
    for combo in itertools.product(*[[None, *g] for g in groups.values()]):
        chosen = [o for o in combo if o is not None]
        out.append(tuple(sorted(chosen, key=lambda o: ORDER.index(o.name))))
    return out


def apply_options(catalog: Catalog, lossless: LedgerConfig, opts: tuple[LossyOption, ...],
                  fit_memory) -> tuple[LedgerConfig, LedgerResult]:  # type: ignore[no-untyped-def]
    """The lossless config with ``opts`` applied. Memory is re-planned: a set that fits one GPU without
    offload drops the offload ② needed (INT4 is what lets FLUX.1-dev leave offload on a 24 GB card);
    otherwise ``fit_memory`` (the lossless memory ladder of ②) is applied again."""
    update: dict[str, object] = {}
    for o in opts:
        update.update(o.update)
    lc = lossless.model_copy(update={**update, "offload": "none"})
    r = evaluate(catalog, lc)
    if not r.fits:
        lc, _ = fit_memory(catalog, lc)
        r = evaluate(catalog, lc)
    return lc, r


def _rank_key(s: LossySet) -> tuple[bool, float, float]:
    return (not s.fits, round(s.gpu_s, 9), -(s.psnr_db if s.psnr_db is not None else float("inf")))


def best_set(catalog: Catalog, lossless: LedgerConfig, lossless_r: LedgerResult, options: list[LossyOption],
             budget_db: float | None, fit_memory,  # type: ignore[no-untyped-def]
             ) -> tuple[tuple[LossyOption, ...], list[LossySet]]:
    """The fastest subset within the budget and every subset within it, ranked best first.

    Rank: sets that fit one GPU first, then lowest GPU-seconds, then higher combined PSNR.
    Returns (chosen options, ranked sets within the budget; the chosen one is first).
    """
    ranked: list[tuple[LossySet, tuple[LossyOption, ...]]] = []
    base = lossless_r.total_time_s
    for opts in subsets(options):
        psnrs = [o.psnr_db for o in opts]
        if not within_budget(psnrs, budget_db):
            continue
        _, r = apply_options(catalog, lossless, opts, fit_memory) if opts else (lossless, lossless_r)
        ranked.append((LossySet(options=[o.label for o in opts], psnr_db=combine_psnr(psnrs),
                                latency_s=r.total_time_s, gpu_s=r.total_time_s,
                                speedup=base / r.total_time_s if r.total_time_s > 0 else 1.0, fits=r.fits,
                                within_budget=True), opts))
    ranked.sort(key=lambda x: _rank_key(x[0]))
    return ranked[0][1], [s for s, _ in ranked]

