"""Time per kernel class: a roofline per class plus the per-forward overhead that compile removes.

Denoise time of one request (the per-layer roofline of hahnyuan/LLM-Viewer@472f71f:model_analyzer.py
L56-83, L204-248, with one efficiency per kernel class; docs/concepts/time-model.md):

* GEMM (linear layers, UNet convolutions): ``max(FLOPs ÷ (peak × η_gemm), weight bytes ÷ (bandwidth × η_mem))``
  per forward; the weights are read once per forward, so small-token shapes and FP8/INT4 weights show up.
  FP8 runs on the FP8 peak × ``fp8_linear.gemm_retention`` on GPUs with FP8 tensor cores; INT4 divides the
  BF16 GEMM time by ``int4_linear.gemm_speedup`` on the architectures that have the 4-bit kernels.
  ``accumulate="fp16"`` (a runtime whose 16-bit and FP8 GEMMs accumulate in FP16) runs both on the GPU's
  FP16-accumulate rate where its datasheet gives one (GeForce: 2× the FP32-accumulate rate; :func:`accumulate_factor`).
* attention core: ``FLOPs ÷ (peak × η_attn)`` with η of the backend on this architecture.
* elementwise/norm work: ``passes × activation bytes ÷ (bandwidth × η_mem)``; the activation bytes are
  the hidden state (2·d bytes per token in bf16) of every block, ``passes`` the number of
  activation-sized reads/writes the unfused (eager) or fused (compiled) kernels make per block.
* launch overhead: seconds per forward launch (eager; compile with CUDA graphs removes it).

Batch B (``ledger --batch``, :func:`denoise_work`): B requests run as one batch. GEMMs batch: their FLOPs
scale with B while the weights are still read once per launch, so the GEMM roofline term
``max(B × FLOPs ÷ (peak × η_gemm), weight bytes ÷ (bandwidth × η_mem))`` reaches a higher effective
efficiency as M = B × tokens grows, until it is compute-bound (no GEMM speed-up beyond that: η_gemm is
the fitted large-M efficiency). Attention runs per sample (its FLOPs scale with B; no sharing across
samples), elementwise work scales with B, the launch overhead is paid once per batched launch. Text
encode and VAE decode run per sample (B × their batch-1 time; the VAE decodes sample by sample, so its
memory peak is one sample's).

Power: the GEMM and attention rates are multiplied by ``Etas.power_fraction`` (1, or less on a GPU whose datasheet
peak needs more power than its board power sustains; :meth:`diffbench.ledger.fit.FitResult.power_fraction`). GEMMs
at the FP16-accumulate rate are held to the same sustained TF per watt (``Etas.tflops_per_watt``), measured against
that rate: :func:`power_fraction_of`.

η_gemm, η_attn per (backend, architecture), the passes and the launch overhead are fitted jointly over the
catalog's anchors (:mod:`diffbench.ledger.fit`). MFU = FLOPs / (time × GPUs × BF16 dense peak).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from diffbench.errors import UsageError
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec, WeightQuant
from diffbench.ledger.tokens import Tokens

TERA = 1e12
ACT_BYTES = 2  # bf16 activations


class Etas(BaseModel):
    """Efficiencies in use (fractions of the BF16 dense peak unless noted).

    ``mem``: fraction of the memory bandwidth reached by memory-bound kernels; ``elementwise_passes``:
    activation-sized reads+writes per block and token (eager or compiled, fitted); ``launch_s``: seconds
    of launch overhead per denoiser forward (fitted, eager only); ``power_fraction``: fraction of the tensor peaks
    sustained within the board power (GEMM and attention core; 1 when the power term is off); ``tflops_per_watt``:
    the fitted k behind it (FP16-accumulate GEMMs: :func:`power_fraction_of`); ``source``: where gemm/attention came
    from (the anchor fit, a ``per_gpu`` calibration, or a command-line override)."""

    model_config = ConfigDict(frozen=True)

    gemm: float        # denoiser linear layers / convolutions, compute-bound
    attention: float   # attention core (QKᵀ, PV) for the chosen backend on this architecture
    vae: float
    text: float
    fp8_gemm_retention: float  # FP8 GEMMs: fraction of `gemm` reached on the FP8 peak
    mem: float = 0.8
    elementwise_passes: float = 0.0
    launch_s: float = 0.0
    power_fraction: float = 1.0
    tflops_per_watt: float | None = None  # the fitted sustained TF per board W of this GPU's group (None: term off)
    source: str = ""


class DenoiseWork(BaseModel):
    """What one request's denoise loop moves and computes, before any step cache.

    FLOPs and bytes are totals over all forwards (``forwards`` batch-1 equivalents, ``launches`` forward
    launches: a batched CFG pair is one launch of batch 2; a request batch of B is one launch of batch B or
    2B)."""

    model_config = ConfigDict(frozen=True)

    linear_flops: float
    attention_flops: float
    weight_bytes: float
    activation_bytes: float
    forwards: int
    launches: int


class DenoiseTime(BaseModel):
    """Seconds per kernel class for one request (after the step cache and sparse attention)."""

    model_config = ConfigDict(frozen=True)

    linear_s: float           # GEMM time = max(compute, weight bytes)
    memory_bound_s: float     # the part of linear_s above its compute time (weight-bound shapes)
    attention_s: float
    elementwise_s: float
    overhead_s: float         # launch overhead

    @property
    def total_s(self) -> float:
        return self.linear_s + self.attention_s + self.elementwise_s + self.overhead_s


def mfu(flops: float, time_s: float, gpu: GpuSpec, n_gpus: int = 1) -> float:
    """Model FLOPs utilisation against the BF16 dense peak. Raises UsageError for a non-positive time."""
    if time_s <= 0:
        raise UsageError(f"--measured-s {time_s}: must be > 0 seconds")
    return flops / (time_s * n_gpus * gpu.bf16_tflops * TERA)


def activation_elements(model: ModelSpec, tokens: Tokens, width: int, height: int) -> float:
    """Hidden-state elements written per forward summed over blocks (batch 1): Σ count · tokens · d for a
    DiT; Σ layers · (H/ds)(W/ds) · channels over the transformer levels of a UNet."""
    den = model.denoiser
    if den.arch == "unet" and den.unet is not None:
        return float(sum(lvl.layers * (width // lvl.downsample) * (height // lvl.downsample) * lvl.channels
                         for lvl in den.unet.attention_levels))
    return float(sum(g.count * (tokens.seq if g.seq == "joint" else tokens.visual) * den.hidden
                     for g in den.blocks))


def weight_bytes_per_param(catalog: Catalog, precision: str) -> float:
    bpp = catalog.memory.bytes_per_param
    return bpp.get(precision, bpp["bf16"])


def denoise_work(catalog: Catalog, model: ModelSpec, tokens: Tokens, width: int, height: int, steps: int,
                 forwards_per_step: int, precision: str, batch: int = 1) -> DenoiseWork:
    """FLOPs and bytes of the denoise loop of ``batch`` requests run together (forward FLOPs from
    :mod:`diffbench.ledger.flops`; weight bytes = denoiser parameters × bytes per parameter of ``precision``,
    read once per launch whatever the batch; FLOPs and activation bytes × ``batch``).

    Raises:
        ValueError: ``batch`` < 1.
    """
    from diffbench.ledger.flops import forward_flops

    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    fwd = forward_flops(model, tokens, width, height)
    n_fwd = steps * forwards_per_step
    batched = forwards_per_step == 2 and not model.cfg_sequential
    launches = steps if batched else n_fwd
    return DenoiseWork(
        linear_flops=fwd.linear * n_fwd * batch, attention_flops=fwd.attention * n_fwd * batch,
        weight_bytes=model.denoiser.params * weight_bytes_per_param(catalog, precision) * launches,
        activation_bytes=activation_elements(model, tokens, width, height) * ACT_BYTES * n_fwd * batch,
        forwards=n_fwd * batch, launches=launches)


def _supported(entry: WeightQuant | None, precision: str, key: str, gpu: GpuSpec) -> WeightQuant:
    """The catalog's ``optimizations.<key>`` entry when ``gpu``'s architecture runs its kernels.

    Raises:
        UsageError: the entry is unset or ``gpu``'s architecture is not among its ``archs``.
    """
    if entry is None or gpu.arch not in entry.archs:
        where = "/".join(entry.archs) if entry is not None else f"no architecture (optimizations.{key} is unset)"
        raise UsageError(f"--precision {precision}: {precision.upper()} kernels run on {where}; "
                         f"{gpu.display_name} is {gpu.arch}; use bf16 or fp8")
    return entry


def int8_factor(catalog: Catalog, gpu: GpuSpec, precision: str, compiled: bool) -> float:
    """GEMM time multiplier of INT8 W8A8 against BF16: 1 ÷ ``int8_linear.denoise_speedup`` compiled (÷
    ``eager_speedup`` eager), 1 for any other precision.

    Raises:
        UsageError: ``int8`` on an architecture outside ``int8_linear.archs`` or a catalog without it.
    """
    if precision != "int8":
        return 1.0
    q = _supported(catalog.optimizations.int8_linear, "int8", "int8_linear", gpu)
    speedup = q.denoise_speedup if compiled or q.eager_speedup is None else q.eager_speedup
    return 1.0 / speedup


def nf4_factor(catalog: Catalog, gpu: GpuSpec, precision: str) -> float:
    """GEMM time multiplier of NF4 weight-only (W4A16) against BF16: 1 ÷ ``nf4_weights.denoise_speedup`` on its
    architectures, 1 for any other precision.

    Raises:
        UsageError: ``nf4`` on an architecture without its kernels, or a catalog without ``nf4_weights``.
    """
    if precision != "nf4":
        return 1.0
    return 1.0 / _supported(catalog.optimizations.nf4_weights, "nf4", "nf4_weights", gpu).denoise_speedup


def int4_effective(catalog: Catalog, gpu: GpuSpec, precision: str) -> bool:
    """INT4 (W4A4 + low-rank) speeds GEMMs only on the architectures with the 4-bit kernels."""
    return precision == "int4" and gpu.arch in catalog.optimizations.int4_linear.requires_arch


Accumulate = Literal["fp32", "fp16"]


def power_fraction_of(k: float | None, peak_per_watt: float | None) -> float:
    """Fraction of a tensor rate sustained within the board power: ``min(1, k ÷ peak_per_watt)``, with ``k`` the
    sustained TF per board W and ``peak_per_watt`` the rate's TF ÷ board W; 1 where either is unknown (no power
    term)."""
    return 1.0 if k is None or peak_per_watt is None else min(1.0, k / peak_per_watt)


def gemm_accumulate(gpu: GpuSpec, precision: str, accumulate: str) -> float:
    """:func:`accumulate_factor` where it applies: bf16 GEMMs, and fp8 GEMMs on FP8 tensor cores or computed in 16
    bits; 1 for the int4/nf4/int8 kernels."""
    return accumulate_factor(gpu, accumulate) if precision in ("bf16", "fp8") else 1.0


def accumulate_factor(gpu: GpuSpec, accumulate: str) -> float:
    """Speed of 16-bit and FP8 GEMMs that accumulate in FP16, relative to FP32 accumulation: the GPU's
    FP16-accumulate rate ÷ its BF16 (FP32-accumulate) rate where the datasheet gives one (``fp16_acc_tflops``:
    GeForce Ada, 330.3 ÷ 165.2 TF for FP16 and 660.6 ÷ 330.3 TF for FP8 on the RTX 4090, NVIDIA Ada whitepaper
    appendix), else 1 (data-centre parts run FP32 accumulation at the full rate). PyTorch's own GEMMs accumulate
    in FP32; runtimes that swap in FP16-accumulate kernels (cuBLAS HGEMM with FP16 compute) reach the higher rate,
    and so, by assumption (no published figure), do FP8 matmuls with fast accumulation (``use_fast_accum=True``)."""
    if accumulate == "fp16" and gpu.fp16_acc_tflops is not None:
        return max(1.0, gpu.fp16_acc_tflops / gpu.bf16_tflops)
    return 1.0


def fp8_effective(gpu: GpuSpec, precision: str) -> bool:
    """FP8 speeds linear layers only on GPUs with FP8 tensor cores; elsewhere it is storage only."""
    return precision == "fp8" and gpu.fp8_tflops is not None


def denoise_time(catalog: Catalog, work: DenoiseWork, gpu: GpuSpec, etas: Etas, precision: str,
                 cache_speedup: float = 1.0, attention_speedup: float = 1.0, compiled: bool = True,
                 accumulate: str = "fp32") -> DenoiseTime:
    """Seconds per kernel class of one request's denoise loop (see the module docstring).

    ``cache_speedup`` divides every class (skipped forwards); ``attention_speedup`` the attention core;
    ``compiled`` picks the INT8 speed ratio (torch.compile or eager); ``accumulate`` the GEMMs' accumulation
    (:func:`accumulate_factor`: bf16 and fp8 GEMMs only; the attention kernels accumulate in FP32)."""
    bw = gpu.mem_bw_gbps * 1e9 * etas.mem
    acc = gemm_accumulate(gpu, precision, accumulate)
    f_gemm = gemm_power_fraction(gpu, etas, acc)
    if fp8_effective(gpu, precision):
        assert gpu.fp8_tflops is not None
        compute = work.linear_flops / (gpu.fp8_tflops * TERA * etas.gemm * etas.fp8_gemm_retention * f_gemm * acc)
    else:
        compute = work.linear_flops / (gpu.bf16_tflops * TERA * etas.gemm * f_gemm * acc)
        if int4_effective(catalog, gpu, precision):
            compute /= catalog.optimizations.int4_linear.gemm_speedup
        compute *= nf4_factor(catalog, gpu, precision) * int8_factor(catalog, gpu, precision, compiled)
    weights = work.weight_bytes / bw
    lin = max(compute, weights)
    att = work.attention_flops / (gpu.bf16_tflops * TERA * etas.attention * etas.power_fraction) / attention_speedup
    elem = etas.elementwise_passes * work.activation_bytes / bw
    over = etas.launch_s * work.launches
    c = cache_speedup
    return DenoiseTime(linear_s=lin / c, memory_bound_s=(lin - compute) / c, attention_s=att / c,
                       elementwise_s=elem / c, overhead_s=over / c)


def gemm_power_fraction(gpu: GpuSpec, etas: Etas, acc: float) -> float:
    """Fraction of the GEMM rate sustained within the board power when the GEMMs run ``acc``× the BF16 rate
    (:func:`accumulate_factor`): ``etas.power_fraction`` at ``acc`` = 1, else the fitted TF per watt against the
    faster rate (:func:`power_fraction_of`)."""
    return etas.power_fraction if acc == 1.0 else power_fraction_of(etas.tflops_per_watt, _ppw(gpu, acc))


def _ppw(gpu: GpuSpec, acc: float) -> float | None:
    """TF per board W of the GPU's BF16 rate times ``acc`` (None without a board power)."""
    return gpu.peak_per_watt * acc if gpu.peak_per_watt is not None else None


def attention_eta_prior(catalog: Catalog, backend: str, arch: str) -> float:
    """The sourced attention η of a backend on an architecture (``eta_by_arch``, else ``eta``)."""
    be = catalog.optimizations.attention_backends[backend]
    return be.eta_by_arch.get(arch, be.eta)


def check_backend(catalog: Catalog, gpu: GpuSpec, attention: str) -> None:
    """Raises UsageError for an unknown backend or one this GPU cannot run (e.g. fa3 off Hopper)."""
    backends = catalog.optimizations.attention_backends
    if attention not in backends:
        raise UsageError(f"--attention {attention!r}: unknown; valid values: {', '.join(sorted(backends))}")
    be = backends[attention]
    if be.requires_arch and gpu.arch not in be.requires_arch:
        raise UsageError(f"--attention {attention}: needs a {'/'.join(be.requires_arch)} GPU, "
                         f"{gpu.display_name} is {gpu.arch}; use sdpa")


def text_time(flops: float, gpu: GpuSpec, etas: Etas) -> float:
    return flops / (gpu.bf16_tflops * TERA * etas.text)


def vae_time(catalog: Catalog, model: ModelSpec, flops: float, gpu: GpuSpec, etas: Etas) -> float:
    frac = catalog.efficiency.fp32_vae_peak_fraction if model.vae.fp32 else 1.0
    return flops / (gpu.bf16_tflops * TERA * etas.vae * frac)
