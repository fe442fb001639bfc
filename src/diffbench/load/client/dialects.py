"""Request bodies and server-timing fields of the serving APIs (OpenAI images API
https://platform.openai.com/docs/api-reference/images; vLLM-Omni and SGLang Diffusion as cited below).

Dialects:

- ``openai``: ``POST /v1/images/generations`` with the OpenAI fields only (``prompt, model, n, size,
  response_format=b64_json``); steps, seed and guidance are *not* sent (the server's defaults apply).
  Video jobs as a multipart form (as the OpenAI videos API takes them).
- ``vllm-omni``: the OpenAI body plus ``num_inference_steps, guidance_scale, seed, negative_prompt``
  (vLLM-Omni https://github.com/vllm-project/vllm-omni/blob/main/docs/serving/image_generation_api.md); video jobs as a multipart form with ``width,
  height, num_frames`` (always sent: the server defaults ``num_frames`` to 1), ``fps``, steps and seed.
- ``sglang``: the same extension fields merged into the JSON object (SGLang Diffusion OpenAI API docs);
  video jobs as JSON.
- ``vllm-omni-chat``: ``POST /v1/chat/completions`` as vLLM-Omni's own diffusion benchmark sends it (its
  default ``vllm-omni`` backend, ``benchmarks/diffusion/backends.py`` ``async_request_chat_completions``):
  ``{model, messages: [{role: "user", content: prompt}], extra_body: {height, width, num_inference_steps,
  seed}}``, plus ``num_frames``/``fps`` when the shape has them, ``negative_prompt``/``guidance_scale`` when
  given and ``num_outputs_per_prompt`` when ``n`` > 1 (vLLM-Omni's name for it); the workload's ``extra``
  goes into ``extra_body`` too. ``extra_body`` is a nested JSON key (as curl/requests send it), not flattened
  as the OpenAI SDK does; vLLM-Omni reads both. The images come back as data URLs in
  ``choices[0].message.content[*].image_url.url``. Video jobs go to ``/v1/videos`` as in ``vllm-omni`` (its
  benchmark sends video to that route, not to chat).

Edits (workload ``kind: edit``): ``openai``, ``vllm-omni`` and ``sglang`` send ``POST /v1/images/edits`` as a
multipart form (the ``openai`` client's ``images.edit`` form: the picture as the file ``image``, the optional
mask as the file ``mask``, and the text fields ``prompt, model, n, size, response_format=b64_json``); the
``vllm-omni`` and ``sglang`` forms add ``num_inference_steps, seed, guidance_scale, negative_prompt`` and
``strength`` (vLLM-Omni ``benchmarks/diffusion/backends.py`` ``async_request_image_edits``; SGLang's edits form
takes the same generation fields as its JSON route). ``vllm-omni-chat`` sends the picture as a data URL
``image_url`` part after the text part of the user message (vLLM-Omni's image-to-image chat form), with
``strength`` in ``extra_body``; it sends no mask (the chat form has no place for one).

Server-reported timings read when present (any dialect): ``stage_durations`` (a mapping of stage name to
seconds; keys ending in ``_ms`` and a ``stage_durations_ms`` mapping are milliseconds), ``stages`` as a
list of ``{name, duration_ms}`` (SGLang perf dump), ``peak_memory_mb`` (MiB, as torch reports it) or
``peak_memory_bytes``, and the total service time ``service_time_s`` (or ``inference_time_s``), kept
as the pseudo-stage ``service_time``. A client cannot tell whether a server ignored a parameter (vLLM-Omni warns that
unsupported ones may be ignored silently), so the payload check compares the decoded image size with the
requested one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Literal

from diffbench.load.client.workload import RequestSpec

Dialect = Literal["openai", "vllm-omni", "vllm-omni-chat", "sglang"]
DIALECTS: tuple[str, ...] = ("openai", "vllm-omni", "vllm-omni-chat", "sglang")

IMAGES_PATH = "/v1/images/generations"
EDITS_PATH = "/v1/images/edits"
CHAT_PATH = "/v1/chat/completions"
VIDEOS_PATH = "/v1/videos"

JsonScalar = str | int | float | bool


def image_body(spec: RequestSpec, dialect: Dialect) -> dict[str, JsonScalar]:
    """JSON body of ``POST /v1/images/generations`` for one request; a shape with a LoRA ``adapter`` adds
    vLLM-Omni's ``lora`` field ``{"name": ..., "scale": ...}`` (the vllm-omni dialect only: the run refuses
    adapters with another one)."""
    s = spec.shape
    body: dict[str, JsonScalar] = {
        "prompt": spec.prompt,
        "n": s.n,
        "size": s.size,
        "response_format": "b64_json",
    }
    if spec.model:
        body["model"] = spec.model
    if dialect != "openai":
        body["num_inference_steps"] = s.steps
        body["seed"] = spec.seed
        if s.guidance is not None:
            body["guidance_scale"] = s.guidance
        if s.negative_prompt is not None:
            body["negative_prompt"] = s.negative_prompt
        if s.adapter is not None:
            body["lora"] = {"name": s.adapter, "scale": s.adapter_scale}  # type: ignore[assignment]
    body.update(spec.extra)
    return body


def edit_fields(spec: RequestSpec, dialect: Dialect) -> dict[str, JsonScalar]:
    """Text fields of the ``POST /v1/images/edits`` form for one edit (the files go beside them)."""
    fields = image_body(spec, dialect)
    if dialect != "openai" and spec.strength is not None:
        fields["strength"] = spec.strength
        fields.update(spec.extra)  # the workload's extra still wins, as in every body
    return fields


_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}


def mime_type(path: str) -> str:
    """The MIME type of an input picture from its file suffix (``image/png`` when unknown)."""
    import os

    return _MIME.get(os.path.splitext(path)[1].lower(), "image/png")


@functools.lru_cache(maxsize=64)
def input_bytes(path: str) -> bytes:
    """The encoded bytes of an input picture or mask (read once per process, then cached)."""
    with open(path, "rb") as f:
        return f.read()


@functools.lru_cache(maxsize=64)
def data_url(path: str) -> str:
    """The input picture as a ``data:<mime>;base64,...`` URL (built once per process, then cached)."""
    import base64

    return f"data:{mime_type(path)};base64," + base64.b64encode(input_bytes(path)).decode("ascii")


def _given_fields(spec: RequestSpec) -> dict[str, JsonScalar]:
    """The optional generation fields the shape sets: ``num_frames``, ``fps``, ``guidance_scale``,
    ``negative_prompt`` (absent ones are left for the server's defaults)."""
    s = spec.shape
    given = {"num_frames": s.frames, "fps": s.fps, "guidance_scale": s.guidance, "negative_prompt": s.negative_prompt}
    return {k: v for k, v in given.items() if v is not None}


def chat_body(spec: RequestSpec) -> dict[str, object]:
    """JSON body of ``POST /v1/chat/completions`` (``vllm-omni-chat``) for one image request (an edit: the
    input picture as a data-URL ``image_url`` part, and ``strength`` in ``extra_body``)."""
    s = spec.shape
    extra: dict[str, JsonScalar] = {"height": s.height, "width": s.width, "num_inference_steps": s.steps,
                                    "seed": spec.seed, **_given_fields(spec)}
    if s.n != 1:
        extra["num_outputs_per_prompt"] = s.n
    if spec.image is not None and spec.strength is not None:
        extra["strength"] = spec.strength
    extra.update(spec.extra)
    content: object = spec.prompt
    if spec.image is not None:
        content = [{"type": "text", "text": spec.prompt},
                   {"type": "image_url", "image_url": {"url": data_url(spec.image)}}]
    body: dict[str, object] = {"messages": [{"role": "user", "content": content}], "extra_body": extra}
    if spec.model:
        body = {"model": spec.model, **body}
    return body


def image_path(dialect: Dialect, edit: bool = False) -> str:
    """The route image requests (``edit``: edits) of ``dialect`` go to."""
    if dialect == "vllm-omni-chat":
        return CHAT_PATH
    return EDITS_PATH if edit else IMAGES_PATH


def video_fields(spec: RequestSpec, dialect: Dialect) -> dict[str, JsonScalar]:
    """Fields of ``POST /v1/videos`` (sent as a form for openai/vllm-omni, JSON for sglang)."""
    s = spec.shape
    fields: dict[str, JsonScalar] = {"prompt": spec.prompt, "size": s.size}
    if spec.model:
        fields["model"] = spec.model
    if dialect != "openai":
        fields.update({"width": s.width, "height": s.height, "num_inference_steps": s.steps,
                       "seed": spec.seed, **_given_fields(spec)})
    elif s.frames is not None and s.fps:
        fields["seconds"] = str(max(1, round(s.frames / s.fps)))
    fields.update(spec.extra)
    return fields


def sends_steps_and_frames(dialect: Dialect) -> bool:
    """True when the dialect sends ``num_inference_steps`` (and ``num_frames`` for video)."""
    return dialect != "openai"


def shape_label(spec: RequestSpec, dialect: Dialect) -> str:
    """The breakdown key of a request, naming only what the dialect sends.

    ``vllm-omni``/``sglang``: :meth:`ShapeMix.label` (``512x384 s8``, ``832x480 f33 s30``). ``openai``
    sends neither steps nor frames (the server's defaults apply), so its label is the size, plus the
    ``seconds`` it sends for a video and the images per request ``n`` when not 1: ``512x384``,
    ``832x480 4s``, ``64x64 n4``.
    """
    if sends_steps_and_frames(dialect):
        return spec.shape.label()
    label = spec.shape.size
    if spec.kind != "video" and spec.shape.n != 1:
        label += f" n{spec.shape.n}"
    if spec.kind == "video":
        seconds = video_fields(spec, dialect).get("seconds")
        if seconds is not None:
            label += f" {seconds}s"
    return label


def video_uses_form(dialect: Dialect) -> bool:
    """True when the dialect creates video jobs with a multipart form (else JSON)."""
    return dialect != "sglang"


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if f == f and f >= 0 else None


def server_timings(obj: Mapping[str, object]) -> tuple[dict[str, float], int | None]:
    """Server-reported stage durations (seconds) and peak memory (bytes) from a response object.

    Returns:
        (stages by name in seconds, peak memory in bytes or None). Missing fields give ({}, None);
        malformed values are skipped, never guessed.
    """
    stages: dict[str, float] = {}
    raw = obj.get("stage_durations")
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            f = _num(v)
            if f is None:
                continue
            key = str(k)
            if key.endswith("_ms"):
                stages[key[:-3]] = f / 1e3
            else:
                stages[key[:-2] if key.endswith("_s") else key] = f
    raw_ms = obj.get("stage_durations_ms")
    if isinstance(raw_ms, Mapping):
        for k, v in raw_ms.items():
            f = _num(v)
            if f is not None:
                stages[str(k)] = f / 1e3
    raw_list = obj.get("stages")
    if isinstance(raw_list, list):
        for item in raw_list:
            if isinstance(item, Mapping) and "name" in item:
                f = _num(item.get("duration_ms"))
                if f is not None:
                    stages[str(item["name"])] = f / 1e3
    for key in ("service_time_s", "inference_time_s"):  # the total, under the key SGLang/AIPerf read too
        f = _num(obj.get(key))
        if f is not None:
            stages["service_time"] = f
            break
    peak: int | None = None
    pb = _num(obj.get("peak_memory_bytes"))
    pm = _num(obj.get("peak_memory_mb"))
    if pb is not None:
        peak = int(pb)
    elif pm is not None:
        peak = int(pm * 1024 * 1024)
    return stages, peak
