"""Time = FLOPs / (peak × η), with separate η for GEMM-bound work, attention, VAE convolutions and text
encoders (gpus.md §6). MFU = FLOPs / (time × GPUs × BF16 dense peak) (gpus.md §5.1).

GEMM η is solved from the FLUX.1-dev H100 anchors in the catalog (eager and compiled) given the attention
η of the backend those runs used, unless the catalog or the caller sets it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from diffbench.errors import UsageError
from diffbench.ledger.flops import forward_flops, forwards_per_step, vae_decode_flops
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec
from diffbench.ledger.tokens import count_tokens

TERA = 1e12


class Etas(BaseModel):
    """Efficiencies in use (fractions of the BF16 dense peak unless noted)."""

    model_config = ConfigDict(frozen=True)

    gemm: float        # linear layers (and, in eager mode, the unfused elementwise work around them)
    attention: float   # attention core (QKᵀ, PV) for the chosen backend
    vae: float
    text: float
    fp8_gemm_retention: float  # FP8 GEMMs: fraction of `gemm` reached on the FP8 peak


_ETA_CACHE: dict[tuple[int, bool], tuple[Catalog, float]] = {}


def mfu(flops: float, time_s: float, gpu: GpuSpec, n_gpus: int = 1) -> float:
    """Model FLOPs utilisation against the BF16 dense peak. Raises UsageError for a non-positive time."""
    if time_s <= 0:
        raise UsageError(f"--measured-s {time_s}: must be > 0 seconds")
    return flops / (time_s * n_gpus * gpu.bf16_tflops * TERA)


def anchor_flops(catalog: Catalog) -> tuple[float, float, float]:
    """(linear, attention, other) FLOPs of the calibration anchor request."""
    cal = catalog.calibration
    model = catalog.models[cal.model]
    tokens = count_tokens(model, cal.width, cal.height, 1)
    fwd = forward_flops(model, tokens, cal.width, cal.height)
    n = cal.steps * forwards_per_step(model, None)
    other = 0.0
    if cal.includes_vae_decode:
        other = vae_decode_flops(model, cal.width, cal.height, 1)
    return fwd.linear * n, fwd.attention * n, other


def calibrated_eta_gemm(catalog: Catalog, compiled: bool) -> float:
    """GEMM η that reproduces the anchor time (eager or compiled) with the anchor's attention backend.

    Solves T = L/(P·η_g) + A/(P·η_a) [+ VAE/(P·η_vae)] for η_g. A catalog value overrides it.
    """
    override = catalog.efficiency.eta_gemm_compiled if compiled else catalog.efficiency.eta_gemm_eager
    if override is not None:
        return override
    key = (id(catalog), compiled)
    hit = _ETA_CACHE.get(key)
    if hit is not None and hit[0] is catalog:
        return hit[1]
    cal = catalog.calibration
    peak = catalog.gpus[cal.gpu].bf16_tflops * TERA
    eta_a = catalog.optimizations.attention_backends[cal.attention].eta
    lin, att, other = anchor_flops(catalog)
    t = cal.compiled_s if compiled else cal.eager_s
    rest = t - att / (peak * eta_a) - other / (peak * catalog.efficiency.eta_vae)
    if rest <= 0:
        raise UsageError("catalog calibration: the anchor time is shorter than its attention time; "
                         "raise the attention backend's eta or the anchor time")
    eta = min(lin / (peak * rest), 1.0)
    _ETA_CACHE[key] = (catalog, eta)
    return eta


def resolve_etas(catalog: Catalog, gpu: GpuSpec, attention: str, compiled: bool,
                 eta_gemm: float | None = None, eta_attn: float | None = None,
                 eta_vae: float | None = None) -> Etas:
    """Efficiencies for a configuration; explicit arguments override catalog and calibration.

    Raises:
        UsageError: unknown attention backend or one this GPU cannot run (e.g. fa3 off Hopper).
    """
    backends = catalog.optimizations.attention_backends
    if attention not in backends:
        raise UsageError(f"--attention {attention!r}: unknown; valid values: {', '.join(sorted(backends))}")
    be = backends[attention]
    if be.requires_arch and gpu.arch not in be.requires_arch:
        raise UsageError(f"--attention {attention}: needs a {'/'.join(be.requires_arch)} GPU, "
                         f"{gpu.display_name} is {gpu.arch}; use sdpa")
    for name, v in (("--eta-gemm", eta_gemm), ("--eta-attn", eta_attn), ("--eta-vae", eta_vae)):
        if v is not None and not 0 < v <= 1:
            raise UsageError(f"{name} {v}: must be in (0, 1]")
    return Etas(
        gemm=eta_gemm if eta_gemm is not None else calibrated_eta_gemm(catalog, compiled),
        attention=eta_attn if eta_attn is not None else be.eta,
        vae=eta_vae if eta_vae is not None else catalog.efficiency.eta_vae,
        text=catalog.efficiency.eta_text,
        fp8_gemm_retention=catalog.optimizations.fp8_linear.gemm_retention,
    )


def fp8_effective(gpu: GpuSpec, precision: str) -> bool:
    """FP8 speeds linear layers only on GPUs with FP8 tensor cores; elsewhere it is storage only."""
    return precision == "fp8" and gpu.fp8_tflops is not None


def linear_time(flops: float, gpu: GpuSpec, etas: Etas, precision: str) -> float:
    if fp8_effective(gpu, precision):
        assert gpu.fp8_tflops is not None
        return flops / (gpu.fp8_tflops * TERA * etas.gemm * etas.fp8_gemm_retention)
    return flops / (gpu.bf16_tflops * TERA * etas.gemm)


def attention_time(flops: float, gpu: GpuSpec, etas: Etas) -> float:
    return flops / (gpu.bf16_tflops * TERA * etas.attention)


def text_time(flops: float, gpu: GpuSpec, etas: Etas) -> float:
    return flops / (gpu.bf16_tflops * TERA * etas.text)


def vae_time(catalog: Catalog, model: ModelSpec, flops: float, gpu: GpuSpec, etas: Etas) -> float:
    frac = catalog.efficiency.fp32_vae_peak_fraction if model.vae.fp32 else 1.0
    return flops / (gpu.bf16_tflops * TERA * etas.vae * frac)
