"""The Engine protocol: what ``bench``, ``sweep`` and ``serve`` see of an engine.

An engine turns a :class:`GenerationRequest` into a :class:`GenerationResult` (pixels plus the stage and
step timings and memory it measured). The caller owns the timing of the whole call: it reads its
:class:`~diffbench.core.clock.Timer`, which calls :meth:`Engine.sync` before every clock read, so an
asynchronous device (CUDA, the simulated engine) is measured by completion, not by launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from diffbench.core import shapes as core_shapes
from diffbench.engines.instrument.signals import RequestSignals
from diffbench.errors import GenerationError
from diffbench.workload.warmkey import WarmupKey, cfg_state

STAGES = ("text_encode", "image_encode", "denoise", "vae_decode", "other")
CLIENT_LATENCY = "client_latency_s"
"""``GenerationResult.extra`` key of an engine that times the request itself (the HTTP engine: send → last
response byte, before parsing and decoding, as ``load`` times it); ``bench`` and ``sweep`` take it as the
run's time instead of their clock bracket around ``generate``."""


class GenerationRequest(BaseModel):
    """One generation call.

    Sizes are in pixels; ``frames`` is None for images (video models need it). ``guidance`` is the CFG
    scale (or the distilled guidance for guidance-distilled models); None means the pipeline default.

    Image-to-image (an edit, ``POST /v1/images/edits``): ``image`` is the input picture as encoded bytes
    (PNG/JPEG/WebP, decoded by the engine and resized to ``width`` x ``height``), ``mask`` an optional
    inpainting mask (white = repaint, same encoding), ``strength`` in (0, 1] the share of the schedule that
    is re-noised. The steps that run follow the pipeline family (diffusers 0.42 ``get_timesteps``): SD/SDXL
    ``int(steps × strength)``, FLUX/SD3/QwenImage ``steps − int(steps − steps × strength)``; engines report what ran.
    """

    model_config = ConfigDict(frozen=True)

    prompt: str
    prompt_id: str = "p0"
    negative_prompt: str | None = None
    height: int = Field(gt=0)
    width: int = Field(gt=0)
    frames: int | None = Field(default=None, gt=0)
    steps: int = Field(gt=0)
    guidance: float | None = None
    batch: int = Field(default=1, gt=0)
    seed: int = 0
    image: bytes | None = Field(default=None, repr=False)
    mask: bytes | None = Field(default=None, repr=False)
    strength: float = Field(default=0.6, gt=0, le=1)
    adapter: str | None = None
    """The LoRA adapter to activate for this request (one the engine loaded at start), None: the base model."""
    adapter_scale: float = Field(default=1.0, ge=0, le=4)
    """The adapter's scale (diffusers ``set_adapters`` weight)."""

    @property
    def is_edit(self) -> bool:
        """An image-to-image request (an edit): ``image`` holds the input picture."""
        return self.image is not None

    @property
    def shape_key(self) -> tuple[int, int, int | None, int, int]:
        """(height, width, frames, steps, batch): what a warmup must cover (compile/autotune per shape)."""
        return (self.height, self.width, self.frames, self.steps, self.batch)

    @property
    def warmup_key(self) -> WarmupKey:
        """The :class:`~diffbench.workload.warmkey.WarmupKey` (shared with ``load`` and ``serve``): the
        :attr:`shape_key`, CFG on/off (``guidance``), the presence of a negative prompt, the edit flag, the
        mask flag and the strength (an edit runs another pipeline, and its strength sets how many steps run),
        and the adapter and its scale when one is active (switching LoRA weights can recompile a compiled
        denoiser)."""
        edit = self.is_edit
        return WarmupKey(
            width=self.width, height=self.height, frames=self.frames, steps=self.steps, batch=self.batch,
            cfg=cfg_state(self.guidance), negative=self.negative_prompt is not None, edit=edit,
            mask=edit and self.mask is not None, strength=self.strength if edit else None,
            adapter=self.adapter, adapter_scale=self.adapter_scale if self.adapter is not None else None)

    def shape_label(self) -> str:
        """Human label, e.g. ``256x256 s8 b1`` or ``832x480 f33 s30 b1``: WIDTHxHEIGHT, as ``--size``,
        ``--shapes`` and the OpenAI ``size`` field are written everywhere in diffbench."""
        return core_shapes.shape_label(self.width, self.height, self.frames, self.batch, steps=self.steps, human=True)


class StageTimes(BaseModel):
    """Stage split of one generation, in seconds.

    ``other_s`` = total − (text encode + image encode + denoise + VAE decode), so the stages reconcile with the
    total; ``image_encode_s`` is the VAE encode of an edit's input image.
    ``step_s`` lists every denoising step (scheduler steps, not forwards); ``denoiser_calls`` counts
    denoiser forwards (2 per step with CFG run as two calls; 1 when CFG is batched or distilled).
    """

    text_encode_s: float = 0.0
    image_encode_s: float = 0.0  # VAE encode of an edit's input image (0 for text-to-image)
    denoise_s: float = 0.0
    vae_decode_s: float = 0.0
    other_s: float = 0.0
    total_s: float = 0.0
    step_s: list[float] = []
    denoiser_calls: int = 0


class MemoryStats(BaseModel):
    """Peak memory of one generation.

    ``kind`` is ``cuda`` (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` after
    ``reset_peak_memory_stats``), ``cpu-rss`` (peak resident-set growth over the value before the call;
    reserved is None) or ``sim``. Bytes.
    """

    kind: Literal["cuda", "cpu-rss", "sim", "server", "none"] = "none"
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_stage: str | None = None


class RequestFailed(GenerationError):
    """One request to a remote engine failed (transport error, timeout, non-2xx status, invalid payload).

    The bench protocol records it as a failed run (``status``: the HTTP status or None, and the message)
    and goes on; a local engine's :class:`GenerationError` fails the whole shape instead. ``outcome``: the
    load client's outcome name (``timeout``, ``connection_error``, ``rejected``, ``http_error``,
    ``invalid_payload``), None when the engine does not say.
    """

    def __init__(self, message: str, status: int | None = None, outcome: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome


@dataclass
class GenerationResult:
    """What an engine returns.

    ``images``: uint8 array, (B, H, W, 3) for images or (B, F, H, W, 3) for video. For an asynchronous
    engine it may be filled only after :meth:`Engine.sync` (use :meth:`Engine.fetch`). ``signals``: what
    the monitor measured beyond stages and memory (cache decisions, recompiles, ranks, FLOPs); None when the
    engine is not instrumented.
    """

    images: np.ndarray | None
    stages: StageTimes | None = None
    memory: MemoryStats | None = None
    extra: dict[str, float] = field(default_factory=dict)
    signals: RequestSignals | None = None


class EngineInfo(BaseModel):
    """Conditions an engine runs under (part of every report and of the deployment fingerprint).

    ``fps`` is the playback rate of a video model's output (frames per second) and ``fps_source`` says
    where it comes from (the model's published sampling config, or a stated default); None for images.
    """

    engine: str
    engine_version: str
    model: str
    model_hash: str | None = None
    pipeline_class: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    attention_backend: str = "default"
    compile: bool = False
    cache: str = "none"
    quantization: str = "none"
    fused_projections: bool = False
    parallelism: str = "none"
    adapters: dict[str, str] = {}
    """LoRA adapters loaded at start: name -> content hash (:func:`diffbench.engines.adapters.adapter_hashes`)."""
    asynchronous: bool = False
    is_video: bool = False
    default_steps: int | None = None
    default_guidance: float | None = None
    cfg: str = "none"
    fps: float | None = None
    fps_source: str | None = None
    details: dict[str, str] = {}


@runtime_checkable
class Engine(Protocol):
    """The protocol. Lifecycle: ``start()`` → ``validate``/``generate``/``sync`` … → ``stop()``."""

    def start(self) -> EngineInfo:
        """Load the model; returns the conditions. Raises ModelError / MissingDependencyError."""
        ...

    def info(self) -> EngineInfo:
        """The conditions (after start)."""
        ...

    def validate(self, request: GenerationRequest) -> None:
        """Raise :class:`~diffbench.errors.ShapeError` when the model cannot take the request."""
        ...

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """Launch one generation. May return before the device finished (asynchronous engines)."""
        ...

    def sync(self) -> None:
        """Block until all launched work has completed."""
        ...

    def clock(self) -> int:
        """The engine's monotonic clock in nanoseconds (``perf_counter_ns`` for real engines)."""
        ...

    def stop(self) -> None:
        """Release the model and the device."""
        ...
