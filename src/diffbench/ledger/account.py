"""The ledger: FLOPs, time and memory of the three stages (text encode, denoise, VAE decode) on one GPU.

``batch`` B > 1 accounts for B requests served as one batch (the model is in :mod:`diffbench.ledger.timing`):
stage times and FLOPs are those of the whole batch (every output is ready at ``total_time_s``), denoiser
activations scale with B, the VAE decodes sample by sample (its peak is one sample's), weights are shared.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from diffbench.errors import UsageError
from diffbench.ledger import memory as mem
from diffbench.ledger import timing as tm
from diffbench.ledger.catalog import get_gpu, get_model
from diffbench.ledger.etas import resolve_etas
from diffbench.ledger.flops import (
    ForwardFlops,
    forward_flops,
    forwards_per_step,
    text_encode_flops,
    vae_decode_flops,
)
from diffbench.ledger.schema import Catalog
from diffbench.ledger.tokens import Tokens, check_shape, count_tokens

SCHEMA_VERSION = 1


class LedgerConfig(BaseModel):
    """What to account for. Sizes in pixels; ``steps``/``frames``/``cfg`` default to the model's own.

    Numbers must be finite (nan/inf are refused); the CLI checks the tighter ranges of
    :mod:`diffbench.ledger.options` first, so its messages name the flags."""

    model_config = ConfigDict(extra="forbid")

    model: str
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    frames: int | None = Field(default=None, ge=1)
    steps: int | None = Field(default=None, ge=1)
    cfg: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    text_tokens: int | None = Field(default=None, gt=0)
    gpu: str
    precision: mem.Precision = "bf16"
    attention: str = "sdpa"
    compile: bool = False
    accumulate: tm.Accumulate = "fp32"
    vae_tiling: bool = False
    offload: mem.Offload = "none"
    cache_speedup: float = Field(default=1.0, ge=1.0, description="step-cache speed-up of the denoise loop")
    attention_speedup: float = Field(default=1.0, ge=1.0, description="sparse-attention speed-up of the core")
    eta_gemm: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    eta_attn: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    eta_vae: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    margin: float | None = Field(default=None, ge=0, lt=1, allow_inf_nan=False)
    measured_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    batch: int = Field(default=1, ge=1, description="requests served together as one batch")


class Stage(BaseModel):
    """One stage: FLOPs, predicted seconds and the memory it needs (resident weights + its activations)."""

    name: str
    flops: float
    time_s: float
    memory_bytes: int


class LedgerResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "diffbench.ledger"
    config: LedgerConfig
    model_name: str
    gpu_name: str
    width: int
    height: int
    frames: int
    steps: int
    tokens: Tokens
    forwards_per_step: int
    forward: ForwardFlops
    etas: tm.Etas
    stages: list[Stage]
    weights: list[mem.ComponentBytes]
    weights_bytes: int
    resident_weights_bytes: int
    activation_bytes: int
    vae_decode_peak_bytes: int
    peak_memory_bytes: int
    capacity_bytes: int
    usable_bytes: int
    fits: bool
    offload_time_s: float
    total_flops: float
    total_time_s: float
    denoise_linear_s: float
    denoise_attention_s: float
    attention_time_share: float
    denoise_elementwise_s: float = 0.0
    denoise_overhead_s: float = 0.0
    denoise_memory_bound_s: float = 0.0
    assumed_mfu: float
    measured_mfu: float | None = None
    notes: list[str] = Field(default_factory=list)
    batch: int = 1
    """Requests served together; times, FLOPs and activations are those of the whole batch."""
    throughput_per_s: float = 0.0
    """Outputs per second of one instance serving back-to-back full batches: ``batch ÷ total_time_s``."""


def evaluate(catalog: Catalog, cfg: LedgerConfig) -> LedgerResult:
    """Account for one request on one GPU.

    Raises:
        ModelError / UsageError: unknown model or GPU (with the closest id), bad option values.
        ShapeError: a size or frame count the model cannot take.
    """
    model = get_model(catalog, cfg.model)
    gpu = get_gpu(catalog, cfg.gpu)
    frames = check_shape(model, cfg.width, cfg.height, cfg.frames)
    steps = cfg.steps if cfg.steps is not None else model.default_steps
    if steps <= 0:
        raise UsageError(f"--steps {steps}: must be a positive integer")
    tokens = count_tokens(model, cfg.width, cfg.height, frames, cfg.text_tokens)
    fps = forwards_per_step(model, cfg.cfg)
    fwd = forward_flops(model, tokens, cfg.width, cfg.height)
    etas = resolve_etas(catalog, gpu, cfg.attention, cfg.compile, cfg.eta_gemm, cfg.eta_attn, cfg.eta_vae,
                           gpu_id=cfg.gpu.strip().lower())
    notes: list[str] = []
    if cfg.precision == "fp8" and not tm.fp8_effective(gpu, "fp8"):
        notes.append(f"{gpu.display_name} has no FP8 tensor cores: fp8 saves memory only (no speed-up)")
    if cfg.precision == "int4":
        i4 = catalog.optimizations.int4_linear
        if tm.int4_effective(catalog, gpu, "int4"):
            notes.append(f"int4 ({i4.method}): denoiser GEMMs {i4.gemm_speedup:g}× faster than bf16 on {gpu.arch}")
        else:
            notes.append(f"int4 on {gpu.arch}: no 4-bit kernels for this architecture ({'/'.join(i4.requires_arch)} "
                         "only); weight-only storage, compute stays 16-bit (no speed-up)")
        lr = mem.lowrank_bytes(catalog, model.denoiser.params * model.experts, "int4")
        notes.append(f"int4 memory: 4-bit denoiser weights plus a {lr / 2**30:.2f} GiB 16-bit low-rank branch "
                     f"({catalog.optimizations.int4_linear.method})")
    if cfg.precision == "int8":
        q8 = catalog.optimizations.int8_linear
        tm.int8_factor(catalog, gpu, "int8", cfg.compile)  # raises where the kernels do not run
        assert q8 is not None
        speed = q8.denoise_speedup if cfg.compile or q8.eager_speedup is None else q8.eager_speedup
        notes.append(f"int8 ({q8.method}): denoiser GEMMs {speed:g}× the bf16 speed"
                     + ("" if cfg.compile else " in eager mode (unfused quantize kernels); plan it with --compile"))
    if cfg.precision == "nf4":
        nf4 = catalog.optimizations.nf4_weights
        tm.nf4_factor(catalog, gpu, "nf4")  # raises where the kernels do not run
        assert nf4 is not None
        notes.append(f"nf4 ({nf4.method}): denoiser {nf4.denoise_speedup:g}× the bf16 speed, 4-bit weights")
    if cfg.accumulate == "fp16":
        acc = tm.accumulate_factor(gpu, "fp16")
        if acc > 1.0 and cfg.precision in ("bf16", "fp8"):
            f_acc = tm.gemm_power_fraction(gpu, etas, acc)
            held = (f"; {f_acc / etas.power_fraction:.0%} of that rate is sustained within its {gpu.board_power_w:g} W "
                    f"board power, so {acc * f_acc / etas.power_fraction:.2f}× in all") if f_acc < etas.power_fraction else ""
            notes.append(f"FP16 accumulation: denoiser GEMMs at {acc:.2f}× the FP32-accumulate rate of the "
                         f"{gpu.display_name} (its datasheet's FP16-accumulate peak){held}; rounding grows with the "
                         "reduction length, so compare the outputs with diffbench quality")
        elif acc > 1.0:
            notes.append(f"--accumulate fp16 has no effect with --precision {cfg.precision} (bf16 and fp8 GEMMs only)")
        else:
            notes.append(f"--accumulate fp16 has no effect on the {gpu.display_name}: the catalog gives it no "
                         "FP16-accumulate rate above its BF16 peak (fp16_acc_tflops; GeForce cards have one)")
    if gpu.provisional:
        notes.append(f"{gpu.display_name} peak figures are provisional (see its catalog source)")
    from diffbench.ledger.fit import fit_warning, fitted_params

    poor = fit_warning(fitted_params(catalog))
    if poor:
        notes.append(poor)

    # Text encode
    te_flops = text_encode_flops(model, fps, cfg.text_tokens)
    b = cfg.batch
    te_flops *= b  # text encoders and the VAE run per sample
    te_time = tm.text_time(te_flops, gpu, etas)
    # Denoise: forwards × steps, the step cache skips a share of the forwards (timing.py: per kernel class)
    n_fwd = steps * fps
    work = tm.denoise_work(catalog, model, tokens, cfg.width, cfg.height, steps, fps, cfg.precision, b)
    dt = tm.denoise_time(catalog, work, gpu, etas, cfg.precision, cfg.cache_speedup, cfg.attention_speedup,
                         compiled=cfg.compile, accumulate=cfg.accumulate)
    lin_s, att_s = dt.linear_s, dt.attention_s
    den_flops = fwd.total * n_fwd * b / cfg.cache_speedup
    den_time = dt.total_s
    # VAE decode
    vae_flops = vae_decode_flops(model, cfg.width, cfg.height, tokens.latent_frames) * b
    vae_s = tm.vae_time(catalog, model, vae_flops, gpu, etas)

    # Memory
    weights = mem.component_weights(catalog, model, cfg.precision)
    weights_bytes = sum(w.bytes for w in weights)
    blocks = sum(g.count for g in model.denoiser.blocks) or 1
    resident = mem.resident_weight_bytes(weights, cfg.offload, blocks)
    batch = (2 if (fps == 2 and not model.cfg_sequential) else 1) * b
    act = mem.denoise_activation_bytes(catalog, model, tokens, batch)
    vae_peak = mem.vae_decode_peak_bytes(model, cfg.width, cfg.height, cfg.vae_tiling)
    overhead = int(catalog.memory.runtime_overhead_gib * 2**30)
    te_w = sum(w.bytes for w in weights if w.component.startswith("text_encoder"))
    den_w = next(w.bytes for w in weights if w.component == "denoiser")
    vae_w = next(w.bytes for w in weights if w.component == "vae")
    peak = resident + max(act, vae_peak) + overhead
    margin = catalog.memory.margin if cfg.margin is None else cfg.margin
    usable = int(gpu.memory_bytes * (1 - margin))
    fits = peak <= usable
    if cfg.vae_tiling and not model.vae.tiling:
        notes.append(f"{model.display_name}'s VAE does not support tiling; it decodes in causal chunks instead")

    # Offload transfer time: host→device bytes over PCIe, minus overlap with compute for group offload
    moved, per_fwd = mem.offload_bytes_per_request(weights, cfg.offload, n_fwd)
    h2d = gpu.pcie_gbps * 1e9
    offload_s = 0.0
    if cfg.offload == "model":
        offload_s = 2 * moved / h2d  # in and back out, per component
    elif cfg.offload == "sequential":
        offload_s = moved / h2d
    elif cfg.offload == "group":
        per_fwd_compute = den_time / max(n_fwd / cfg.cache_speedup, 1.0)
        exposed = max(0.0, per_fwd / h2d - per_fwd_compute)
        offload_s = exposed * n_fwd / cfg.cache_speedup + (moved - per_fwd * n_fwd) / h2d
        notes.append("group offload needs about 2× the model size in pinned host RAM (https://huggingface.co/docs/diffusers/optimization/memory)")

    stages = [
        Stage(name="text_encode", flops=te_flops, time_s=te_time, memory_bytes=te_w + overhead),
        Stage(name="denoise", flops=den_flops, time_s=den_time, memory_bytes=den_w + act + overhead),
        Stage(name="vae_decode", flops=vae_flops, time_s=vae_s, memory_bytes=vae_w + vae_peak + overhead),
    ]
    total_flops = te_flops + den_flops + vae_flops
    total_time = te_time + den_time + vae_s + offload_s
    measured = tm.mfu(total_flops, cfg.measured_s, gpu) if cfg.measured_s is not None else None
    if b > 1:
        notes.append(f"batch {b}: {total_time:.3f} s for {b} outputs ({b / total_time:.3g} outputs/s); GEMMs run "
                     f"batched, attention, text encode and VAE decode per sample")
    return LedgerResult(
        config=cfg, model_name=model.display_name, gpu_name=gpu.display_name, width=cfg.width, height=cfg.height,
        frames=frames, steps=steps, tokens=tokens, forwards_per_step=fps, forward=fwd, etas=etas, stages=stages,
        weights=weights, weights_bytes=weights_bytes, resident_weights_bytes=resident, activation_bytes=act,
        vae_decode_peak_bytes=vae_peak, peak_memory_bytes=peak, capacity_bytes=gpu.memory_bytes,
        usable_bytes=usable, fits=fits, offload_time_s=offload_s, total_flops=total_flops,
        total_time_s=total_time, denoise_linear_s=lin_s, denoise_attention_s=att_s,
        denoise_elementwise_s=dt.elementwise_s, denoise_overhead_s=dt.overhead_s,
        denoise_memory_bound_s=dt.memory_bound_s,
        attention_time_share=att_s / den_time if den_time else 0.0,
        assumed_mfu=tm.mfu(total_flops, total_time, gpu) if total_time > 0 else 0.0,
        measured_mfu=measured, notes=notes, batch=b,
        throughput_per_s=b / total_time if total_time > 0 else 0.0,
    )


def fit_suggestions(catalog: Catalog, cfg: LedgerConfig) -> list[str]:
    """What would make a configuration fit one GPU: tiling, offload, lower precision, a bigger GPU."""
    tries: list[dict[str, object]] = [
        {"vae_tiling": True},
        {"offload": "model", "vae_tiling": True},
        {"offload": "group", "vae_tiling": True},
        {"precision": "fp8", "vae_tiling": True},
        {"precision": "fp8", "offload": "group", "vae_tiling": True},
    ]
    out: list[str] = []
    seen: set[str] = set()
    for change in tries:
        # name only what differs from the configuration (fp8 already on: "--precision fp8" is no suggestion)
        named = [f"--{k} {v}" for k, v in change.items() if k != "vae_tiling" and getattr(cfg, k) != v]
        label = " ".join(named) if named else "--vae-tiling"
        if label in seen or (not named and len(change) > 1):
            continue
        seen.add(label)
        r = evaluate(catalog, cfg.model_copy(update=change))
        if r.fits:
            out.append(f"{label} (peak {r.peak_memory_bytes / 2**30:.1f} GiB, {r.total_time_s:.2f} s)")
    base = evaluate(catalog, cfg)
    bigger = sorted((g.memory_gib, gid) for gid, g in catalog.gpus.items()
                    if g.memory_bytes * (1 - catalog.memory.margin) >= base.peak_memory_bytes)
    if bigger:
        out.append(f"a GPU with ≥ {base.peak_memory_bytes / 2**30 / (1 - catalog.memory.margin):.0f} GiB "
                   f"(e.g. --gpu {bigger[0][1]})")
    return out
