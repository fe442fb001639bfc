"""Typed schema of the ledger catalog (models, GPUs, optimization factors, timing anchors).

Every model is frozen and forbids unknown fields, so a typo in a user ``--catalog`` file is an error that
names the field (see :mod:`diffbench.ledger.catalog` for the line number). Numbers must be finite (``.inf`` is
refused like ``.nan``); GPU figures must lie in :data:`GPU_RANGES` and bytes per parameter in the range of their
bit width, so a unit slip cannot drive a time to 0 or make a model fit in a few GiB.
Units: parameters are counts, TFLOPS are 1e12 FLOP/s, bandwidths GB/s (1e9 B/s), memory GiB, dB PSNR.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

Arch = Literal["ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"]
"""GPU architectures: NVIDIA Ampere/Ada/Hopper/Blackwell, AMD CDNA 3 (MI300X, MI325X) and CDNA 4 (MI355X)."""

AMD_ARCHS = ("cdna3", "cdna4")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BlockGroup(_Strict):
    """A run of identical transformer blocks.

    ``tok_params_d2``: linear parameters each sequence token passes through, in units of d² (P_tok / d²);
    ``tok_params_ffn``: extra per-token parameters in units of d·ffn; ``text_kv_d2``: K/V projection
    parameters applied to the cross-attention text tokens (d² units); ``seq``: ``joint`` (image/video plus
    joint text tokens) or ``image`` (image/video tokens only). ``weights_*``: stored parameters per block
    (memory, including modulation), same units. Counting rule: docs/concepts/time-model.md.
    """

    name: str
    count: int = Field(ge=0)
    tok_params_d2: float = Field(ge=0)
    tok_params_ffn: float = Field(default=0.0, ge=0)
    text_kv_d2: float = Field(default=0.0, ge=0)
    cross_attn: bool = False
    self_attn: bool = True
    seq: Literal["joint", "image"] = "joint"
    weights_d2: float = Field(ge=0)
    weights_ffn: float = Field(default=0.0, ge=0)


class AttentionLevel(_Strict):
    """One UNet level with transformer layers: tokens = (H/downsample)·(W/downsample)."""

    downsample: int = Field(gt=0)
    channels: int = Field(gt=0)
    layers: int = Field(ge=0)


class UNetSpec(_Strict):
    """UNet cost: non-attention FLOPs at 1024² (scaled with pixels) plus attention cores per level."""

    nonattn_flops_at_1024: float = Field(gt=0)
    context_dim: int = Field(gt=0)
    attention_levels: list[AttentionLevel]


class Denoiser(_Strict):
    arch: Literal["dit", "unet"] = "dit"
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ffn: int = Field(default=0, ge=0)
    blocks: list[BlockGroup]
    unet: UNetSpec | None = None
    extra_params: float = Field(default=0.0, ge=0)
    params: float = Field(gt=0, description="parameters used for weight memory (per expert)")
    published_params: float | None = Field(default=None, gt=0)
    patch_size: int = Field(default=2, gt=0, description="spatial patch side in latent pixels (FLUX, Wan: 2)")
    patch_t: int = Field(default=1, gt=0, description="temporal patch in latent frames (video)")
    attention_kind: Literal["softmax", "linear"] = Field(
        default="softmax", description="linear: attention cost grows with N, not N² (SANA's ReLU linear attention)")
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _arch_fields(self) -> Denoiser:
        if self.arch == "unet" and self.unet is None:
            raise ValueError("arch 'unet' needs a 'unet' section")
        if self.arch == "dit" and not self.blocks:
            raise ValueError("arch 'dit' needs at least one entry in 'blocks'")
        return self


class TextEncoder(_Strict):
    name: str
    params: float = Field(gt=0)
    lm_params: float | None = Field(default=None, gt=0, description="parameters a token passes through, if not all")
    tokens: int = Field(gt=0)
    source: str = Field(min_length=1)


class Vae(_Strict):
    kind: Literal["2d", "3d"]
    params: float = Field(gt=0)
    fp32: bool = False
    conv_flops_at_1024: float | None = Field(default=None, gt=0, description="2D: conv FLOPs at 1024², ∝ pixels")
    mid_attn_channels: int = Field(default=512, gt=0)
    act_bytes_per_px: float = Field(default=3072.0, gt=0, description="decode activation peak per output pixel")
    tile_px: int = Field(default=512, gt=0, description="tile side when tiling is on")
    tiling: bool = Field(default=True, description="decoder supports tiled decode (AutoencoderKLWan does not)")
    flops_per_mpx_per_latent_frame: float | None = Field(default=None, gt=0)
    spatial_compression: int = Field(default=8, gt=0, description="pixels per latent pixel along each side")
    latent_channels: int | None = Field(default=None, gt=0)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _kind_fields(self) -> Vae:
        if self.kind == "3d" and self.flops_per_mpx_per_latent_frame is None:
            raise ValueError("a 3d VAE needs 'flops_per_mpx_per_latent_frame'")
        if self.kind == "2d" and self.conv_flops_at_1024 is None:
            raise ValueError("a 2d VAE needs 'conv_flops_at_1024'")
        return self


class FewStep(_Strict):
    name: str
    steps: int = Field(gt=0)
    forwards_per_step: int = Field(default=1, ge=1, le=2)
    source: str = Field(min_length=1)


class Conditioning(_Strict):
    """What an image-to-video variant adds to the text-to-video work of the same denoiser.

    ``latent_frames``: conditioning latent frames appended to the denoiser's sequence (0 when the image
    replaces the first latent frame or enters by channel concatenation); ``cross_tokens``: image-embedding tokens
    the cross-attention reads besides the text (Wan2.1-I2V's CLIP ViT-H/14: 257). The VAE encode of the
    conditioning image is not timed."""

    latent_frames: int = Field(default=0, ge=0)
    cross_tokens: int = Field(default=0, ge=0)
    source: str = Field(min_length=1)


class ModelSpec(_Strict):
    display_name: str
    kind: Literal["image", "video"]
    guidance: Literal["distilled", "cfg", "none"]
    default_cfg: float = 3.5
    size_multiple: int = Field(default=16, gt=0)
    temporal_compression: int = Field(default=1, ge=1)
    default_steps: int = Field(gt=0)
    default_frames: int | None = Field(default=None, gt=0)
    text_tokens_joint: int = Field(default=0, ge=0)
    text_tokens_cross: int = Field(default=0, ge=0)
    cfg_sequential: bool = False
    experts: int = Field(default=1, ge=1)
    default_steps_source: str | None = Field(default=None, description="where default_steps comes from")
    max_text_tokens: int | None = Field(default=None, gt=0, description="most text tokens the pipeline "
                                        "takes (--text-tokens); None: the model's default count is the most")
    denoiser: Denoiser
    text_encoders: list[TextEncoder]
    vae: Vae
    few_step: FewStep | None = None
    conditioning: Conditioning | None = None
    source: str = Field(min_length=1)

    @property
    def patch_px(self) -> int:
        """Pixels per token along each side: VAE spatial compression × denoiser patch (FLUX 8 × 2 = 16)."""
        return self.vae.spatial_compression * self.denoiser.patch_size


GPU_RANGES: dict[str, tuple[float, float, str]] = {
    "bf16_tflops": (1, 20_000, "TFLOPS"),
    "fp8_tflops": (1, 40_000, "TFLOPS"),
    "memory_gib": (1, 10_000, "GiB"),
    "mem_bw_gbps": (10, 100_000, "GB/s"),
    "nvlink_gbps": (1, 100_000, "GB/s"),
    "pcie_gbps": (0.1, 10_000, "GB/s"),
    "board_power_w": (10, 10_000, "W"),
}
"""Plausible (lowest, highest, unit) of each GPU figure: ~10× around today's range (an L4's 121 TFLOPS and 300 GB/s
to a B200's 2,250 TFLOPS and 8,000 GB/s), so a new GPU fits and a unit slip (TFLOPS given as FLOPS) does not."""


class GpuSpec(_Strict):
    """A GPU. ``nvlink_gbps``: the scale-up link per direction (NVLink; AMD Infinity Fabric/xGMI);
    ``int8_tops``: dense INT8 tensor rate (8-bit attention kernels such as SageAttention's INT8 QKᵀ);
    ``board_power_w``: the datasheet's maximum board power, which bounds the sustained tensor rate
    (:meth:`diffbench.ledger.fit.FitResult.power_fraction`)."""

    display_name: str
    arch: Arch
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    int8_tops: float | None = Field(default=None, gt=0)
    fp16_acc_tflops: float | None = Field(
        default=None, gt=0, description="dense FP16 rate with FP16 accumulation where it differs (GeForce: 2× BF16); "
        "used by --accumulate fp16 (diffbench.ledger.timing.accumulate_factor)")
    fit_group: str | None = Field(
        default=None, min_length=1, description="group whose fitted factors this GPU shares (default: its arch)")
    memory_gib: float = Field(gt=0)
    mem_bw_gbps: float = Field(gt=0)
    nvlink_gbps: float | None = Field(default=None, gt=0, description="per direction")
    pcie_gbps: float = Field(gt=0, description="effective per direction")
    board_power_w: float | None = Field(
        default=None, gt=0, description="datasheet board power (TDP/TBP/TGP), W; unset: no power term for this GPU")
    provisional: bool = False
    source: str = Field(min_length=1)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @field_validator(*GPU_RANGES)
    @classmethod
    def _plausible(cls, value: float | None, info: ValidationInfo) -> float | None:
        lo, hi, unit = GPU_RANGES[str(info.field_name)]
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"{value:g} is outside [{lo:g}, {hi:g}] {unit}, the range of any GPU (a unit slip?); "
                             "give the datasheet figure in those units")
        return value

    @property
    def group(self) -> str:
        """The group of the per-architecture factors of the anchor fit: ``fit_group``, else ``arch``."""
        return self.fit_group or self.arch

    @model_validator(mode="after")
    def _fp16_acc_at_least_bf16(self) -> GpuSpec:
        if self.fp16_acc_tflops is not None and self.fp16_acc_tflops < self.bf16_tflops:
            raise ValueError(f"fp16_acc_tflops {self.fp16_acc_tflops:g} is below bf16_tflops {self.bf16_tflops:g}: "
                             "the FP16-accumulate rate is the faster one (GeForce: 2× the FP32-accumulate rate); "
                             "give the datasheet's FP16-accumulate figure, or leave it out where it equals the BF16 peak")
        return self

    @property
    def peak_per_watt(self) -> float | None:
        """BF16 dense TF per board watt (``bf16_tflops ÷ board_power_w``), None without a board power."""
        return self.bf16_tflops / self.board_power_w if self.board_power_w else None

    @property
    def vendor(self) -> str:
        """``amd`` for CDNA architectures, else ``nvidia``."""
        return "amd" if self.arch in AMD_ARCHS else "nvidia"


class MemoryFacts(_Strict):
    runtime_overhead_gib: float = Field(ge=0)
    margin: float = Field(ge=0, lt=1)
    activation_fp32_factor: float = Field(ge=1)
    bytes_per_param: dict[str, float]
    source: str = Field(min_length=1)

    @field_validator("bytes_per_param")
    @classmethod
    def _storage(cls, value: dict[str, float]) -> dict[str, float]:
        """A format named with its bit width (bf16, fp8, int4, nf4) stores at least bits/8 bytes per parameter
        and, with its scales, at most twice that; a format without a width, (0, 8] bytes."""
        for name, b in value.items():
            m = re.match(r"[a-z_]*?(\d+)", name.lower())
            lo = int(m.group(1)) / 8 if m else 0.0
            hi = 2 * lo if m else 8.0
            if not (lo <= b <= hi and b > 0):
                need = f"at least {lo:g} ({m.group(1)} bits) and at most {hi:g}" if m else "in (0, 8]"
                raise ValueError(f"{name}: {b:g} bytes per parameter; a {name} weight takes {need} bytes, scales "
                                 f"included; set {name}: {lo if m else 2.0:g} or the format's storage size")
        return value


class GpuEfficiency(_Strict):
    """A per-GPU override of fitted efficiencies, written by ``--calibrate BENCH.json`` (or by hand).

    ``gemm``: fraction of the BF16 dense peak the denoiser GEMMs reach; ``attention``: fraction reached
    by the attention core of ``attention_backend`` (the backend the bench ran)."""

    gemm: float | None = Field(default=None, gt=0, le=1)
    attention: float | None = Field(default=None, gt=0, le=1)
    attention_backend: str = "sdpa"
    source: str = Field(min_length=1)


class Efficiency(_Strict):
    """Fixed efficiencies and settings of the fitted ones (:mod:`diffbench.ledger.fit`).

    ``eta_mem``: achieved fraction of the memory bandwidth for memory-bound kernels (weights read by
    small-token GEMMs, elementwise/norm kernels); ``eta_gemm_eager`` / ``eta_gemm_compiled``: fix the
    GEMM η instead of fitting it; ``prior_sigma``: spread (natural log) of the priors that pull a fitted
    attention η toward its sourced value and the GEMM η toward ``eta_gemm_prior`` (None: no GEMM prior);
    ``tflops_per_watt_prior``: centre of the prior of the power term's sustained TF per board watt (None: off);
    ``per_gpu``: calibrated overrides by GPU id."""

    eta_vae: float = Field(gt=0, le=1)
    eta_text: float = Field(gt=0, le=1)
    eta_mem: float = Field(default=0.8, gt=0, le=1)
    fp32_vae_peak_fraction: float = Field(gt=0, le=1)
    comm_efficiency: float = Field(gt=0, le=1)
    eta_gemm_eager: float | None = Field(default=None, gt=0, le=1)
    eta_gemm_compiled: float | None = Field(default=None, gt=0, le=1)
    prior_sigma: float = Field(default=0.5, gt=0)
    arch_sigma: float = Field(default=0.5, gt=0, description="prior spread (natural log) of per-architecture factors")
    eta_gemm_prior: float | None = Field(default=0.7, gt=0, le=1)
    tflops_per_watt_prior: float | None = Field(
        default=None, ge=0.01, le=100,
        description="centre of the log-normal prior (σ = prior_sigma) of the fitted sustained dense BF16 TF per board "
                    "watt; None: no power term")
    per_gpu: dict[str, GpuEfficiency] = Field(default_factory=dict)
    source: str = Field(min_length=1)


class SpAnchor(_Strict):
    """A published sequence-parallel latency with its single-GPU twin from the same source (solves the
    parallel inefficiency α of :func:`diffbench.ledger.multigpu.sp_alpha`)."""

    model: str = "flux.1-dev"
    gpu: str = "h100-sxm"
    width: int = Field(default=1024, gt=0)
    height: int = Field(default=1024, gt=0)
    steps: int = Field(default=28, gt=0)
    strategy: Literal["ulysses"]
    degree: int = Field(gt=1)
    compiled_s: float = Field(gt=0)
    single_gpu_s: float = Field(gt=0, description="the same source's single-GPU compiled time")
    source: str = Field(min_length=1)


class Anchor(_Strict):
    """One published single-GPU latency the time model is fitted to (seconds per request).

    ``covers``: ``denoise`` (the loop only, e.g. latent output) or ``end_to_end`` (text encode + denoise +
    VAE decode); ``accumulate``: ``fp16`` for a runtime whose GEMMs accumulate in FP16
    (:func:`diffbench.ledger.timing.accumulate_factor`); ``outlier``: a reason to keep it out of the fit (``--validate`` still shows it)."""

    id: str = Field(min_length=1)
    model: str
    gpu: str
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    frames: int | None = Field(default=None, ge=1)
    steps: int = Field(gt=0)
    cfg: float | None = Field(default=None, ge=0)
    attention: str = "sdpa"
    compile: bool = False
    precision: Literal["bf16", "fp8", "int4", "nf4", "int8"] = "bf16"
    accumulate: Literal["fp32", "fp16"] = "fp32"
    measured_s: float = Field(gt=0)
    covers: Literal["denoise", "end_to_end"]
    outlier: str | None = None
    source: str = Field(min_length=1)


class AttentionBackend(_Strict):
    """``eta``: fraction of the BF16 dense peak the attention core reaches; ``eta_by_arch``: per-architecture
    values where they differ (sourced; the fit starts from and is pulled toward them). ``tensor_cores``:
    ``int8``/``fp8`` for a kernel that runs its matmuls on the 8-bit tensor cores, whose η may exceed 1 of the
    BF16 peak (up to ``max_eta``); ``requires_arch``: the architectures it runs on (empty: all)."""

    eta: float = Field(gt=0, le=2)
    eta_by_arch: dict[str, float] = Field(default_factory=dict)
    lossless: bool
    psnr_db: float | None = Field(default=None, gt=0)
    requires_arch: list[str] = Field(default_factory=list)
    tensor_cores: Literal["bf16", "int8", "fp8"] = "bf16"
    source: str = Field(min_length=1)

    @property
    def max_eta(self) -> float:
        """Upper bound of η as a fraction of the BF16 peak: 1, or 2 for an 8-bit kernel (8-bit rate = 2× BF16)."""
        return 1.0 if self.tensor_cores == "bf16" else 2.0

    @model_validator(mode="after")
    def _eta_bound(self) -> AttentionBackend:
        for where, v in [("eta", self.eta), *((f"eta_by_arch.{a}", x) for a, x in self.eta_by_arch.items())]:
            if not 0 < v <= self.max_eta:
                raise ValueError(f"{where} {v}: must be in (0, {self.max_eta:g}] of the BF16 peak "
                                 f"(tensor_cores {self.tensor_cores})")
        return self


class SdpaRule(_Strict):
    """Which kernel ``torch.nn.functional.scaled_dot_product_attention`` runs: ``torch`` is a version range
    (``>=2.5``, ``<2.5``, ``any``), ``arch`` an architecture, ``backend`` the named backend it resolves to."""

    torch: str = Field(min_length=1)
    arch: str = Field(min_length=1)
    backend: str = Field(min_length=1)
    source: str = Field(min_length=1)


class Fp8Linear(_Strict):
    """FP8 dynamic quantization of the denoiser's linear layers.

    ``archs``: GPU architectures whose serving stacks ship an FP8 path the planner may take (others are
    skipped unless ``plan --assume-fp8``); ``archs_source`` says why."""

    gemm_retention: float = Field(gt=0, le=1)
    psnr_db: float = Field(gt=0)
    archs: list[str] = Field(default_factory=lambda: ["hopper", "blackwell"])
    archs_source: str = ""
    source: str = Field(min_length=1)


class Int4Linear(_Strict):
    """4-bit weights and activations with a 16-bit low-rank branch (SVDQuant / Nunchaku class).

    ``requires_arch``: architectures with the 4-bit kernels (elsewhere the option is not offered);
    ``gemm_speedup``: denoiser GEMM time of BF16 ÷ INT4 (low-rank branch included) on those GPUs;
    ``lowrank_rank``: rank of the 16-bit branch (memory: 2 B × rank × (d_in + d_out) per linear layer,
    counted as ``lowrank_overhead`` of the BF16 denoiser bytes); ``psnr_db``: estimated PSNR vs BF16."""

    method: str
    requires_arch: list[str]
    gemm_speedup: float = Field(ge=1)
    lowrank_rank: int = Field(default=32, ge=0)
    lowrank_overhead: float = Field(default=0.0, ge=0, lt=1)
    psnr_db: float = Field(gt=0)
    source: str = Field(min_length=1)


class CacheThreshold(_Strict):
    threshold: float = Field(gt=0)
    denoise_speedup: float = Field(ge=1)
    psnr_db: float = Field(gt=0)


class StepCache(_Strict):
    method: str
    thresholds: list[CacheThreshold] = Field(min_length=1)
    source: str = Field(min_length=1)


class SparseAttention(_Strict):
    attention_speedup: float = Field(ge=1)
    psnr_db: float = Field(gt=0)
    video_only: bool = True
    source: str = Field(min_length=1)


class Offload(_Strict):
    model_cpu_offload: str
    group_offload_overlap: bool = True
    source: str = Field(min_length=1)


class WeightQuant(_Strict):
    """A weight quantization the planner may take (INT8 W8A8 / weight-only, NF4 weight-only).

    ``denoise_speedup``: BF16 ÷ quantized time of the denoiser GEMMs on ``archs`` when both fit (< 1: slower; the
    timing divides the GEMM time by it, :func:`diffbench.ledger.timing.int8_factor` / ``nf4_factor``);
    ``bytes_per_param``: stored bytes per weight, scales included; ``psnr_db``: estimated PSNR vs BF16."""

    method: str
    archs: list[str] = Field(min_length=1)
    denoise_speedup: float = Field(gt=0)
    eager_speedup: float | None = Field(default=None, gt=0, description="the same ratio without torch.compile")
    bytes_per_param: float = Field(gt=0)
    psnr_db: float = Field(gt=0)
    source: str = Field(min_length=1)


class Optimizations(_Strict):
    attention_backends: dict[str, AttentionBackend]
    sdpa_resolution: list[SdpaRule] = Field(default_factory=list)
    fp8_linear: Fp8Linear
    int4_linear: Int4Linear
    int8_linear: WeightQuant | None = None
    nf4_weights: WeightQuant | None = None
    step_cache: StepCache
    sparse_attention: SparseAttention
    offload: Offload


class Catalog(_Strict):
    """The whole catalog. Look-ups with suggestions live in :mod:`diffbench.ledger.catalog`."""

    schema_version: int = 1
    models: dict[str, ModelSpec]
    gpus: dict[str, GpuSpec]
    memory: MemoryFacts
    efficiency: Efficiency
    anchors: list[Anchor] = Field(min_length=1)
    sp_anchor: SpAnchor
    optimizations: Optimizations

    @model_validator(mode="after")
    def _references(self) -> Catalog:
        backends = self.optimizations.attention_backends
        seen: set[str] = set()
        for i, a in enumerate(self.anchors):
            where = f"anchors[{i}] ({a.id})"
            if a.id in seen:
                raise ValueError(f"{where}: duplicate anchor id {a.id!r}")
            seen.add(a.id)
            if a.model not in self.models:
                raise ValueError(f"{where}: model {a.model!r} is not a model in the catalog")
            if a.gpu not in self.gpus:
                raise ValueError(f"{where}: gpu {a.gpu!r} is not a GPU in the catalog")
            if a.attention not in backends:
                raise ValueError(f"{where}: attention {a.attention!r} is not an attention backend")
        sp = self.sp_anchor
        if sp.model not in self.models or sp.gpu not in self.gpus:
            raise ValueError(f"sp_anchor: model {sp.model!r} / gpu {sp.gpu!r} must be in the catalog")
        for i, rule in enumerate(self.optimizations.sdpa_resolution):
            if rule.backend not in backends:
                raise ValueError(f"optimizations.sdpa_resolution[{i}]: backend {rule.backend!r} is not an attention "
                                 "backend")
        for gid in self.efficiency.per_gpu:
            if gid not in self.gpus:
                raise ValueError(f"efficiency.per_gpu: {gid!r} is not a GPU in the catalog")
        return self
