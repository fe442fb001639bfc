"""``POST /v1/chat/completions`` in vLLM-Omni's diffusion form.

Request (vLLM-Omni
https://github.com/vllm-project/vllm-omni/blob/main/docs/serving/chat_completions_api.md; its benchmark's ``vllm-omni`` backend,
``benchmarks/diffusion/backends.py`` ``async_request_chat_completions``)::

    {"model": "...", "messages": [{"role": "user", "content": "a lighthouse at dusk"}],
     "extra_body": {"height": 512, "width": 512, "num_inference_steps": 8, "seed": 7}}

The prompt is the text of the user messages (a string, or the ``{"type": "text"}`` parts of a list).
Generation fields are read from ``extra_body`` and, as the OpenAI SDK flattens ``extra_body=`` into the
top level, from the top level too (``extra_body`` wins where both are given; vLLM-Omni handles both).
Read: ``height``/``width`` or ``size``, ``num_inference_steps``, ``seed``, ``guidance_scale``,
``negative_prompt``, ``num_outputs_per_prompt`` (images, default 1), ``num_frames`` (1 or absent: this
route makes images; a video is a job on ``/v1/videos``). ``fps``, ``true_cfg_scale`` and any other field
are accepted and listed in ``ignored_parameters``. An input image (one ``image_url`` part holding a
``data:image/...;base64`` URL, as vLLM-Omni's benchmark sends image-to-image) makes the request an edit,
checked as ``POST /v1/images/edits`` checks its upload (:mod:`diffbench.server.edits`); ``strength`` is read
then, and without a size the output keeps the input's size. A URL that is not a data URL is refused (400:
nothing is fetched from the network).

Response: an OpenAI ``chat.completion`` whose assistant message content is a list of
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` parts (vLLM-Omni
``serving_chat.py`` ``_create_diffusion_chat_completion``), plus ``metrics`` holding this service's
measurements (``stage_durations`` in seconds, ``service_time_s``, ``peak_memory_mb``; the object
vLLM-Omni's benchmark reads ``stage_durations`` and ``peak_memory_mb`` from) and the parameters used
(``size``, ``num_inference_steps``, ``seed``, ``ignored_parameters``).

Errors answer vLLM's ``ErrorResponse`` shape, ``{"error": {"message", "type", "param", "code"}}`` with
``code`` the HTTP status as an integer and ``type`` e.g. ``BadRequestError`` (vLLM
``entrypoints/openai/protocol.py`` ``ErrorInfo``), not the images route's OpenAI shape. Validation
problems answer 400 naming the field (``extra_body.num_inference_steps: ...``).
"""

# No ``from __future__ import annotations``: FastAPI reads the route's ``Request`` annotation at runtime.
import base64
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diffbench.server.http_errors import APIError, validation_message
from diffbench.server.validation import refuse_stream

if TYPE_CHECKING:
    from fastapi import FastAPI

    from diffbench.server.config import Limits
    from diffbench.server.edits import InputImage
    from diffbench.server.service import Service

CHAT_PATH = "/v1/chat/completions"

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
    504: "TimeoutError",
    507: "InsufficientStorageError",
}
"""vLLM error ``type`` names by status (vLLM names 400 ``BadRequestError``, 404 ``NotFoundError``, 500
``InternalServerError``; the others follow the same pattern)."""


def vllm_error_body(err: APIError) -> dict[str, dict[str, object]]:
    """``err`` in vLLM's ``ErrorResponse`` shape: ``{"error": {message, type, param, code: <status>}}``."""
    kind = ERROR_TYPES.get(err.status, "BadRequestError" if err.status < 500 else "InternalServerError")
    return {"error": {"message": err.message, "type": kind, "param": err.param, "code": err.status}}


class GenerationFields(BaseModel):
    """The generation fields of a chat request (from ``extra_body``, else the top level)."""

    model_config = ConfigDict(extra="allow")

    size: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    num_inference_steps: int | None = Field(default=None, ge=1)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    guidance_scale: float | None = Field(default=None, ge=0, le=20, allow_inf_nan=False)
    negative_prompt: str | None = None
    num_outputs_per_prompt: int = Field(default=1, ge=1)
    num_frames: int | None = Field(default=None, ge=1)
    strength: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)


GENERATION_KEYS = frozenset(GenerationFields.model_fields)
CHAT_KEYS = frozenset({"model", "messages", "extra_body", "stream", "user", "n", "max_tokens", "temperature",
                       "modalities"})


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The chat body: ``messages`` (at least one), ``model``, ``extra_body``; other keys are kept."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    extra_body: dict[str, Any] | None = None
    stream: bool = False


def prompt_of(messages: list[ChatMessage]) -> tuple[str, list[object]]:
    """(the user messages' text joined by a space, the ``url`` of each input ``image_url`` part)."""
    parts: list[str] = []
    images: list[object] = []
    for m in messages:
        if m.role != "user":
            continue
        if isinstance(m.content, str):
            parts.append(m.content)
        elif isinstance(m.content, list):
            for part in m.content:
                if part.get("type") == "text" and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif part.get("type") == "image_url":
                    iu = part.get("image_url")
                    images.append(iu.get("url") if isinstance(iu, dict) else iu)
    return " ".join(p.strip() for p in parts if p.strip()), images


def parse_chat(raw: bytes) -> tuple[ChatRequest, GenerationFields, list[str], str, list[object]]:
    """Validate a chat body: (request, generation fields, ignored field names, prompt, input image URLs).

    Raises:
        APIError: 400 naming the field (not JSON, not an object, no messages, no user prompt, a field out of
            range or of the wrong type, ``stream: true``).
    """
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON ({exc}); send a JSON object",
                       code="invalid_body") from None
    if not isinstance(data, dict):
        raise APIError(400, f"the request body is a JSON {type(data).__name__}; send a JSON object with "
                       "messages", code="invalid_body")
    try:
        req = ChatRequest.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message(list(exc.errors()))  # type: ignore[arg-type]
        raise APIError(400, message, param=param) from None
    refuse_stream(req.stream)
    nested = req.extra_body or {}
    top = {k: v for k, v in (req.model_extra or {}).items() if k in GENERATION_KEYS}
    merged = {**top, **nested}
    try:
        gen = GenerationFields.model_validate(merged)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            where = "extra_body" if err["loc"] and err["loc"][0] in nested else None
            errors.append({**err, "loc": ((where,) if where else ()) + tuple(err["loc"])})
        message, param = validation_message(errors)  # type: ignore[arg-type]
        raise APIError(400, message, param=param) from None
    ignored = sorted(set(gen.model_extra or {}) | {k for k in (req.model_extra or {})
                                                    if k not in GENERATION_KEYS and k not in CHAT_KEYS})
    prompt, images = prompt_of(req.messages)
    if not prompt:
        raise APIError(400, "messages: no text prompt found in the user messages; send "
                       '{"role": "user", "content": "<prompt>"}', param="messages")
    return req, gen, ignored, prompt, images


def input_image(urls: list[object], limits: "Limits") -> "InputImage":
    """The one input picture of a chat edit, from its ``image_url`` data URL, checked as an edits upload.

    Raises:
        APIError: 400 (``messages``) for more than one input image, a URL that is not a base64 image data URL
            (this service fetches nothing from the network), broken base64, or an image that fails
            :func:`diffbench.server.edits.decode_input`.
    """
    import binascii

    from diffbench.server.edits import decode_input

    if len(urls) > 1:
        raise APIError(400, f"messages: {len(urls)} input images (image_url parts) sent; this service edits one "
                       "input image per request", param="messages", code="unsupported_parameter")
    url = urls[0]
    if not isinstance(url, str) or not url.startswith("data:"):
        shown = url[:40] if isinstance(url, str) else type(url).__name__
        raise APIError(400, f"messages: image_url.url {shown!r} is not a data URL; send the input image inline "
                       "as data:image/png;base64,... (this service fetches no URLs)", param="messages",
                       code="invalid_image")
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise APIError(400, f"messages: image_url.url header {head[:40]!r} is not data:image/<type>;base64",
                       param="messages", code="invalid_image")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise APIError(400, f"messages: the image_url data URL is not valid base64 ({exc})", param="messages",
                       code="invalid_image") from None
    try:
        return decode_input(raw, "image", limits)
    except APIError as exc:
        raise APIError(400, "messages: the image_url input " + exc.message, param="messages",
                       code=exc.code) from None


def install_chat_route(app: "FastAPI", service: "Service") -> None:
    """Add ``POST /v1/chat/completions`` (see the module docstring) to ``app``."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    from diffbench.server.edits import default_strength
    from diffbench.server.images import generate_pngs
    from diffbench.server.service import timing_headers

    @app.post(CHAT_PATH)
    async def chat_completions(request: Request) -> JSONResponse:
        arrival = time.perf_counter()
        try:
            req, gen, ignored, prompt, images = parse_chat(await request.body())
            image, image_size = None, None
            if images:
                checked = input_image(images, service.config.limits)
                image, image_size = checked.data, f"{checked.width}x{checked.height}"
            if gen.num_frames not in (None, 1):
                raise APIError(400, f"extra_body.num_frames: {gen.num_frames} frames asked; this route makes "
                               "images (num_frames 1 or absent); create a video with POST /v1/videos",
                               param="num_frames")
            model = service.check_model(req.model)
            size = gen.size
            if image_size is not None and size is None and gen.width is None and gen.height is None:
                size = image_size  # an edit without a size keeps the input's size (as /v1/images/edits)
            out = await generate_pngs(
                service, request, arrival=arrival, size=size, width=gen.width, height=gen.height,
                steps=gen.num_inference_steps, seed=gen.seed, prompt=prompt,
                negative_prompt=gen.negative_prompt, guidance=gen.guidance_scale, n=gen.num_outputs_per_prompt,
                model=model, image=image, strength=gen.strength if image is not None else None,
            )
        except APIError as exc:
            return JSONResponse(vllm_error_body(exc), status_code=exc.status, headers=exc.headers)
        ignored = sorted(set(ignored) | set(service.ignored(gen.guidance_scale, gen.negative_prompt))
                         | ({"strength"} if gen.strength is not None and image is None else set()))
        content = [{"type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + base64.b64encode(p).decode("ascii")}}
                   for p in out.pngs]
        words = len(prompt.split())
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": words, "completion_tokens": len(content),
                      "total_tokens": words + len(content)},
            "metrics": out.stats.model_dump(mode="json"),
            "size": f"{out.width}x{out.height}",
            "num_inference_steps": out.steps,
            "seed": out.seed,
            "ignored_parameters": ignored,
        }
        if image is not None:
            body["strength"] = gen.strength if gen.strength is not None else default_strength()
        return JSONResponse(body, headers=timing_headers(out.stats))
