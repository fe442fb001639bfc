"""The candidates of each step and whether they can run here — decided without importing torch.

A :class:`Candidate` is one change to the deployment (an update of :class:`~diffbench.engines.config.
EngineConfig`) with the step it belongs to; :func:`unavailable` says why one cannot run on this device with
the installed packages (or None). Unavailable candidates are recorded as skipped with that reason, never
dropped silently.

Where the candidates come from (diffusers and PyTorch documentation):

* attention backends: diffusers ``attention_dispatch.AttentionBackendName`` — ``flash`` (flash-attn 2),
  ``_flash_3`` (FlashAttention-3, Hopper only) and ``sage`` (SageAttention, 8-bit: lossy) need CUDA and
  their package; on a CPU only PyTorch SDPA runs;
* compile: ``torch.compile`` of the denoiser (Inductor; on a CPU it needs a C++ compiler on the PATH);
* fused projections: the pipeline's ``fuse_qkv_projections()`` (FLUX, SD/SDXL, SD3 in diffusers);
* quantized linear layers: INT8 dynamic (``torch.ao.quantization.quantize_dynamic``, CPU kernels) and FP8
  (torchao, GPUs with FP8 tensor cores: compute capability 8.9+);
* lower precision: bfloat16 weights and activations instead of float32 (numerics change: lossy I).
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass, field

from diffbench.engines.config import EngineConfig

# pipelines whose diffusers class offers fuse_qkv_projections() (diffusers 0.42: pipelines/flux,
# stable_diffusion, stable_diffusion_xl, stable_diffusion_3)
FUSABLE = ("FluxPipeline", "StableDiffusionXLPipeline", "StableDiffusionPipeline", "StableDiffusion3Pipeline")
CUDA_BACKENDS = {"flash": "flash_attn", "_flash_3": "flash_attn_interface"}
SAGE = ("sage", "sageattention")


@dataclass(frozen=True)
class Candidate:
    """One change to try: ``name`` (the label in derive.json), ``stage`` (2 lossless, 3 lossy I),
    ``update`` (EngineConfig fields) and ``ledger`` (the ledger option it corresponds to, for a prediction;
    empty when the ledger has no such option)."""

    name: str
    stage: int
    update: dict[str, object] = field(default_factory=dict)
    ledger: dict[str, object] = field(default_factory=dict)

    def apply(self, engine: EngineConfig) -> EngineConfig:
        """``engine`` with this change."""
        return engine.model_copy(update=self.update)


def pipeline_class(model: str) -> str | None:
    """The pipeline class of ``model`` without loading it (tiny models and local directories), or None."""
    from diffbench.engines.diffusers_engine import peek_pipeline_class

    return peek_pipeline_class(model)


def _cuda_capability(device: str) -> tuple[int, int] | None:
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    index = int(device.split(":")[1]) if ":" in device else 0
    return tuple(torch.cuda.get_device_capability(index))  # type: ignore[return-value]


def unavailable(c: Candidate, engine: EngineConfig, pipeline: str | None, probe_gpu: bool = True) -> str | None:
    """Why ``c`` cannot run on ``engine``'s device with the installed packages, or None when it can.

    Reads the device string, the PATH and installed packages; imports torch only for a CUDA device and only
    with ``probe_gpu`` (a dry run leaves the compute capability to the run).
    """
    cap_of = _cuda_capability if probe_gpu else (lambda _d: None)
    dev = engine.device
    if engine.engine != "diffusers":
        return f"the {engine.engine} engine does not take pipeline options; derive measures the diffusers engine"
    up = c.update
    if up.get("compile") and dev == "cpu" and shutil.which("c++") is None and shutil.which("g++") is None:
        return "torch.compile on a CPU needs a C++ compiler (Inductor); none is on the PATH"
    if up.get("fuse_projections") and pipeline not in FUSABLE:
        return f"{pipeline or 'this pipeline'} has no fuse_qkv_projections() in diffusers"
    backend = up.get("attention_backend")
    if isinstance(backend, str):
        pkg = CUDA_BACKENDS.get(backend) or (SAGE[1] if backend == SAGE[0] else None)
        if backend in CUDA_BACKENDS or backend == SAGE[0]:
            if not dev.startswith("cuda"):
                return f"attention backend {backend} runs on NVIDIA GPUs only; {dev} has torch SDPA"
            if pkg and importlib.util.find_spec(pkg) is None:
                return f"attention backend {backend} needs the {pkg} package, which is not installed"
            cap = cap_of(dev)
            if backend == "_flash_3" and cap is not None and cap[0] != 9:
                return f"FlashAttention-3 runs on Hopper (compute capability 9.x); this GPU is {cap[0]}.{cap[1]}"
    quant = up.get("quantization")
    if quant == "int8-dynamic":
        if dev != "cpu":
            return "INT8 dynamic quantization (torch.ao quantize_dynamic) has CPU kernels only"
        if engine.dtype != "float32" and up.get("dtype") in (None, "float32"):
            return "INT8 dynamic quantization takes a float32 model"
    if quant == "fp8":
        if not dev.startswith("cuda"):
            return f"FP8 linear layers need an NVIDIA GPU with FP8 tensor cores (compute capability 8.9+); {dev} has none"
        if importlib.util.find_spec("torchao") is None:
            return "FP8 linear layers need the torchao package, which is not installed"
        cap = cap_of(dev)
        if cap is not None and cap < (8, 9):
            return f"FP8 linear layers need compute capability 8.9+; this GPU is {cap[0]}.{cap[1]}"
    if up.get("dtype") == "bfloat16":
        if engine.dtype != "float32":
            return f"the deployment already runs in {engine.dtype}"
        if dev == "cpu" and not cpu_has_native_bf16():
            return ("this CPU has no native bfloat16 arithmetic (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo): "
                    "PyTorch emulates it, far slower than float32")
    return None


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when the CPU flags list AVX512-BF16 or AMX-BF16 (x86 Linux); False when they are absent or the
    file cannot be read (then nothing is known, and bfloat16 is not tried on the CPU)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = {w for line in f if line.startswith("flags") for w in line.split()}
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def lossless_candidates(engine: EngineConfig, backends: list[str]) -> list[Candidate]:
    """② of the derivation order (docs/guides/derive.md, "The order"): attention backends (given, else the CUDA ones), compile, fused projections."""
    names = backends or (list(CUDA_BACKENDS) if engine.device.startswith("cuda") else [])
    out = [Candidate(f"attention {b}", 2, {"attention_backend": b},
                     {"attention": "fa3"} if b == "_flash_3" else {}) for b in names]
    if not engine.compile:
        out.append(Candidate("compile", 2, {"compile": True}, {"compile": True}))
    out.append(Candidate("fuse-projections", 2, {"fuse_projections": True}))
    return out


def lossy_i_candidates(engine: EngineConfig) -> list[Candidate]:
    """③ numerics, in order of visibility: quantized linear layers, 8-bit attention, lower precision."""
    out = [
        Candidate("fp8 linear", 3, {"quantization": "fp8"}, {"precision": "fp8"}),
        Candidate("int8 linear", 3, {"quantization": "int8-dynamic"}),
        Candidate("8-bit attention", 3, {"attention_backend": SAGE[0]}, {"attention": "sage8"}),
    ]
    if engine.dtype == "float32":
        out.append(Candidate("bfloat16", 3, {"dtype": "bfloat16"}))
    return out


def skipped_by_user(c: Candidate, skip: list[str]) -> bool:
    """``--skip`` names a candidate by its name or its first word (``attention`` skips every backend)."""
    return c.name in skip or c.name.split()[0] in skip
