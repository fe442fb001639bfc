"""Request and response bodies of the reference service (OpenAI images + vLLM-Omni / SGLang extensions).

Field names and ranges follow the OpenAI images API (https://platform.openai.com/docs/api-reference/images),
vLLM-Omni's request model (vllm-project/vllm-omni ``vllm_omni/entrypoints/openai/protocol/images.py``) and
SGLang Diffusion's OpenAI API (sgl-project/sglang ``python/sglang/multimodal_gen/``). Unknown request fields are accepted and listed back
in ``ignored_parameters`` (vLLM-Omni ignores unsupported parameters silently, which hides mistakes).
Durations are seconds; ``peak_memory_mb`` is MiB (bytes / 2**20), ``peak_memory_bytes`` bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

# OpenAI / vLLM-Omni fields the service accepts but does not act on (reported in ignored_parameters).
ACCEPTED_IGNORED = (
    "quality",
    "style",
    "user",
    "true_cfg_scale",
    "vae_use_slicing",
    "vae_use_tiling",
    "output_format",
    "background",
    "moderation",
    "output_compression",
)


def ignored_parameters(body: object, unused: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Request fields the service accepted but does not act on, sorted.

    Unknown fields, the fields of ACCEPTED_IGNORED that were given, and ``unused``: parameters the served
    pipeline does not use (:meth:`diffbench.server.capabilities.ParameterUse.ignored`).
    """
    extra = set((getattr(body, "model_extra", None) or {}).keys())
    known = {k for k in ACCEPTED_IGNORED if getattr(body, k, None) is not None}
    return sorted(extra | known | set(unused))


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("prompt is empty or only whitespace; send a non-empty prompt")
    return value


class LoraRequest(BaseModel):
    """The ``lora`` field of an images request (vLLM-Omni's request field, its examples/online_serving
    LoRA README): ``name`` of an adapter the service loaded at start (``serve --lora NAME=DIR``; default: the
    stem of ``local_path``), ``local_path`` (optional here: when given it must be that adapter's directory —
    the service never loads a directory a request names), ``scale`` (0-4, default 1), ``int_id`` (accepted,
    not used)."""

    name: str | None = None
    local_path: str | None = None
    scale: float = Field(default=1.0, ge=0, le=4, allow_inf_nan=False)
    int_id: int | None = None


class ImageGenerationRequest(BaseModel):
    """``POST /v1/images/generations`` body.

    Size from ``size`` (``"WIDTHxHEIGHT"``, pixels; OpenAI's ``"auto"`` is the service's default size,
    ``serve --default-size``) or ``width`` + ``height`` (vLLM-Omni / SGLang style); both may be given only
    when they agree (else 400). ``response_format``: ``b64_json`` (default) or ``url`` (a file the service
    serves for ``serve --url-ttl`` seconds, :mod:`diffbench.server.files`). ``stream: true`` is refused
    (400, :func:`diffbench.server.validation.refuse_stream`).
    """

    model_config = ConfigDict(extra="allow")

    prompt: str = Field(min_length=1)
    model: str | None = None
    n: int = Field(default=1, ge=1)
    size: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    response_format: Literal["b64_json", "url"] | None = "b64_json"
    stream: bool | None = None
    num_inference_steps: int | None = Field(default=None, ge=1)
    guidance_scale: float | None = Field(default=None, ge=0, le=20, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    negative_prompt: str | None = None
    quality: str | None = None
    user: str | None = None
    lora: LoraRequest | None = None

    _prompt = field_validator("prompt")(_non_blank)


class VideoCreateRequest(BaseModel):
    """``POST /v1/videos`` body (JSON or multipart form fields).

    Size from ``size`` (``"WIDTHxHEIGHT"``) or ``width`` + ``height`` (both only when they agree).
    Frames: ``num_frames`` exactly as given; else ``seconds × fps`` rounded to the nearest frame count
    the model takes (Wan: 4k + 1); else the pipeline's default frame count, or OpenAI's default of 4 s ×
    ``fps`` rounded the same way. Every change is reported in ``adjusted_parameters``.
    """

    model_config = ConfigDict(extra="allow")

    prompt: str = Field(min_length=1)
    model: str | None = None
    size: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    num_frames: int | None = Field(default=None, ge=1)
    seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    fps: int | None = Field(default=None, ge=1, le=240)
    num_inference_steps: int | None = Field(default=None, ge=1)
    guidance_scale: float | None = Field(default=None, ge=0, le=20, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    negative_prompt: str | None = None
    user: str | None = None

    _prompt = field_validator("prompt")(_non_blank)


class StageDurations(BaseModel):
    """Server-side stage split of one request, seconds (engine stages plus the service's queue wait).

    ``image_encode`` (the VAE encode of an edit's input image) is present for edits only: a
    text-to-image answer has no such stage, and leaves the key out rather than reporting 0.
    """

    text_encode: float
    image_encode: float | None = None
    denoise: float
    vae_decode: float
    other: float
    queue_wait: float
    adapter_swap: float | None = None
    """Seconds spent switching the active LoRA adapter before this request (0.0: it was active already);
    present only on a service that loaded adapters (``serve --lora``)."""

    @model_serializer(mode="wrap")
    def _drop_absent_stage(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        out: dict[str, object] = handler(self)
        for key in ("image_encode", "adapter_swap"):
            if out.get(key) is None:
                out.pop(key, None)
        return out


class GenerationStats(BaseModel):
    """What the service measured for one generation (shared by image responses and video jobs).

    ``inference_time_s`` is the field AIPerf and SGLang read: generation time on the device, excluding
    queue wait and output encoding. Here it is the same measurement as ``service_time_s`` (the worker's
    clock around ``generate`` + device sync), given under both names.
    """

    stage_durations: StageDurations
    service_time_s: float = Field(description="generate + device sync on the worker, seconds")
    inference_time_s: float = Field(description="= service_time_s (the name AIPerf/SGLang read), seconds")
    peak_memory_mb: float | None = Field(description="peak memory, MiB (bytes / 2**20)")
    peak_memory_bytes: int | None
    memory_kind: str


class Adjustment(BaseModel):
    """A parameter the service changed: what the request asked (or implied) and what was used."""

    requested: int | float | str | None
    used: int | float | str | None
    reason: str


class ImageData(BaseModel):
    """One image of an answer: ``b64_json`` (base64 PNG) or ``url`` (per the request's ``response_format``)."""

    b64_json: str | None = None
    url: str | None = None
    revised_prompt: None = None


class ImageResponse(GenerationStats):
    """OpenAI ``ImagesResponse`` plus the generation parameters actually used and the measurements."""

    created: int
    data: list[ImageData]
    model: str
    size: str
    num_inference_steps: int
    seed: int
    output_format: Literal["png"] = "png"
    ignored_parameters: list[str] = []
    adjusted_parameters: dict[str, Adjustment] = {}


class ImageEditResponse(ImageResponse):
    """``POST /v1/images/edits`` answer: the generations answer plus the ``strength`` used."""

    strength: float


class JobError(BaseModel):
    code: str
    message: str


VideoStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled"]


class VideoJob(BaseModel):
    """A video job as returned by ``POST /v1/videos`` and ``GET /v1/videos/{id}``."""

    id: str
    object: Literal["video"] = "video"
    status: VideoStatus
    created_at: int
    completed_at: int | None = None
    model: str
    prompt: str
    size: str
    width: int
    height: int
    num_frames: int
    fps: int
    seconds: str
    num_inference_steps: int
    seed: int
    progress: int = 0
    error: JobError | None = None
    stage_durations: StageDurations | None = None
    service_time_s: float | None = None
    inference_time_s: float | None = None
    peak_memory_mb: float | None = None
    peak_memory_bytes: int | None = None
    ignored_parameters: list[str] = []
    adjusted_parameters: dict[str, Adjustment] = {}


class VideoList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VideoJob]


class VideoDeleted(BaseModel):
    id: str
    object: Literal["video.deleted"] = "video.deleted"
    deleted: bool = True
    status: VideoStatus


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models`` (OpenAI shape plus the engine conditions)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "diffbench"
    engine: str
    engine_version: str
    pipeline_class: str | None
    device: str
    dtype: str
    is_video: bool
    default_steps: int | None
    gpus: int | None = Field(default=None, description="GPUs the engine runs on (1 on a CUDA/ROCm device); absent "
                             "on a CPU or simulated engine. load reads it for its per-GPU figures")
    fingerprint_id: str = Field(default="", description="sha256 (16 hex) of the deployment fingerprint")
    fingerprint: dict[str, object] = Field(
        default_factory=dict, description="deployment_fingerprint of the running service (diffbench.engines.fingerprint)"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "starting", "unavailable"]
    model: str | None
    engine: str | None
    queue_length: int
    running: int
    estimated_wait_s: float | None
    completed: int
    failed: int
    rejected: int
    timed_out: int = 0
