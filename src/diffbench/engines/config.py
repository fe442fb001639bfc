"""Engine configuration: which engine and model to run, and how. Engines depend on this module only.

:mod:`diffbench.engines.registry` is the one module that knows every engine (it maps
:attr:`EngineConfig.engine` to a class); no engine module imports the registry, so adding an engine never
creates an import cycle. Nothing here imports torch, diffusers or an HTTP client.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diffbench.errors import UsageError

ENGINES = ("sim", "diffusers", "http")
DEVICES = "cpu, cuda, cuda:N, mps (N = a GPU index, e.g. cuda:0)"
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def check_device(device: str) -> str:
    """Check the syntax of a ``--device`` value (no torch import; availability is checked at start).

    Returns:
        The device string, stripped and lower-cased (``"cuda:0"``).

    Raises:
        UsageError: not one of cpu, cuda, cuda:N, mps; the message lists the valid devices.
    """
    d = device.strip().lower()
    if not _DEVICE.match(d):
        raise UsageError(f"--device {device}: unknown device; valid devices: {DEVICES}")
    return d


class SimParams(BaseModel):
    """Parameters of the simulated device (seconds unless stated). See :mod:`diffbench.engines.sim`."""

    model_config = ConfigDict(frozen=True)

    launch_s: float = Field(default=0.002, ge=0)
    text_encode_s: float = Field(default=0.010, ge=0)
    step_s: float = Field(default=0.040, ge=0)
    vae_decode_s: float = Field(default=0.060, ge=0)
    other_s: float = Field(default=0.004, ge=0)
    compile_s: float = Field(default=5.0, ge=0)
    jitter: float = Field(default=0.02, ge=0, description="relative sd of a log-normal factor per stage")
    tail_prob: float = Field(default=0.02, ge=0, le=1)
    tail_s: float = Field(default=0.5, ge=0)
    memory_bytes_per_pixel: float = Field(default=2048.0, ge=0)
    realtime: bool = Field(default=False, description="sleep for real instead of a virtual clock")
    nondeterminism: float = Field(default=0.0, ge=0, description="noise sd (0-255 scale) added to outputs")
    fail_above_pixels: int | None = Field(default=None, description="simulate OOM above H*W*F*batch")
    seed: int = 0


class HttpParams(BaseModel):
    """Where the HTTP engine sends its requests (see :mod:`diffbench.engines.http_engine`).

    ``url`` is the service's base URL (``http://host:port``, without ``/v1``); ``dialect`` one of the load
    client's request dialects (``openai``, ``vllm-omni``, ``sglang``); ``timeout_s`` the deadline of one
    request, seconds (a server that never answers fails the request after it, it never hangs the run).
    """

    model_config = ConfigDict(frozen=True)

    url: str
    model: str | None = Field(default=None, description="the model name sent; None: the service's first model")
    dialect: Literal["openai", "vllm-omni", "sglang"] = "vllm-omni"
    timeout_s: float = Field(default=600.0, gt=0, le=86400)
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600)


class EngineConfig(BaseModel):
    """Which engine and model to run, and how (device, dtype, attention backend, compile, cache, quantized
    linear layers, fused QKV projections)."""

    model_config = ConfigDict(frozen=True)

    engine: Literal["sim", "diffusers", "http"] = "diffusers"
    model: str = "tiny-flux"
    device: str = "cpu"
    dtype: str = "float32"
    attention_backend: str | None = None
    compile: bool = False
    vae_tiling: bool = False
    offload: Literal["none", "model", "sequential"] = "none"
    threads: int | None = None
    quantization: Literal["none", "int8-dynamic", "fp8"] = Field(
        default="none",
        description="quantized linear layers of the denoiser: int8-dynamic (CPU, float32) or fp8 (a GPU with "
        "FP8 tensor cores and torchao); see diffbench.engines.quantize",
    )
    fuse_projections: bool = Field(
        default=False,
        description="fuse the QKV projections of the attention layers (fuse_qkv_projections; same output up to "
        "float rounding); see diffbench.engines.fusion",
    )
    adapters: dict[str, str] = Field(
        default_factory=dict,
        description="LoRA adapters loaded at start, name -> directory (serve --lora NAME=DIR); a request "
        "activates one by name (GenerationRequest.adapter); see diffbench.engines.adapters",
    )
    sim: SimParams = SimParams()
    http: HttpParams | None = Field(default=None, description="the service of the http engine; None otherwise")
    cache: str | None = Field(
        default=None,
        description="a diffusers step cache enabled at start, AXIS=VALUE as the sweep axes take it "
        "(e.g. first-block=0.1; see diffbench.engines.knobs); None: no cache",
    )
    memory_budget_bytes: int | None = Field(
        default=None,
        gt=0,
        description="an injected device memory budget (bytes): a generation whose measured peak exceeds it "
        "fails as out of memory, and it is reported as the device total; for OOM drills on a CPU",
    )


