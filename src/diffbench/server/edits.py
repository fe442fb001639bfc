"""``POST /v1/images/edits``: image-to-image in the OpenAI multipart form (OpenAI API reference,
"Create image edit": https://platform.openai.com/docs/api-reference/images/createEdit).

Request: ``multipart/form-data`` as the ``openai`` client's ``images.edit`` sends it (openai-python
``resources/images.py``: files ``image`` — ``image[]`` when a list is given — and ``mask``; text fields
``prompt``, ``model``, ``n``, ``size``, ``response_format``, …), plus the vLLM-Omni / SGLang extras
``num_inference_steps``, ``seed``, ``strength``, ``guidance_scale``, ``negative_prompt`` (vLLM-Omni
``benchmarks/diffusion/backends.py`` ``async_request_image_edits``; SGLang's edits form). ``size`` absent (or
OpenAI's ``"auto"``): the output has the input image's size. Other text fields are accepted and listed in
``ignored_parameters``, as on ``/v1/images/generations``.

``POST /v1/images/variations`` (OpenAI ``images.create_variation``): the same form without ``prompt`` and
without ``mask``; the variation is the edit of the input image with the empty prompt (``strength`` and the
extras as for edits), answered like an edit.

Input checks (each a 400 naming the field and the fix): one input image exactly (``image`` or ``image[]``);
at most ``Limits.max_input_bytes`` encoded bytes (``serve --max-input-mb``); a PNG, JPEG or WebP that Pillow
fully decodes; sides within ``Limits.max_side`` (checked from the header, before decoding, so a
decompression bomb is refused unread); a mask of the same width and height as the image.

Mask convention: the engine takes white = repaint (diffusers inpainting). OpenAI's mask marks the area to
edit with *transparent* pixels (alpha 0); a mask with an alpha channel that has any transparent pixel is
converted (alpha 0 → white, else black), any other mask is read as grey levels (white = repaint).

Response: the ``ImagesResponse`` of ``/v1/images/generations`` (``data[].b64_json`` PNGs, the parameters
used, ``stage_durations`` with the ``image_encode`` stage, service time, peak memory), plus ``strength``.
"""

# No ``from __future__ import annotations``: FastAPI reads the route's ``Request`` annotation at runtime.
import io
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, ValidationError, field_validator

from diffbench.server.config import Limits
from diffbench.server.http_errors import APIError, validation_message
from diffbench.server.schemas import ImageGenerationRequest

if TYPE_CHECKING:
    from fastapi import FastAPI, Request

    from diffbench.server.service import Service

EDITS_PATH = "/v1/images/edits"
VARIATIONS_PATH = "/v1/images/variations"
IMAGE_FIELDS = ("image", "image[]")
"""Form names of the input image: ``image`` (one file) and ``image[]`` (the SDK's name for a list)."""
INPUT_FORMATS = frozenset({"PNG", "JPEG", "WEBP"})
"""Input encodings taken (OpenAI's edits accept png, webp and jpg)."""


class EditForm(ImageGenerationRequest):
    """The text fields of an edits form: the generation fields plus ``strength`` (values arrive as strings;
    pydantic converts them)."""

    strength: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)


class VariationForm(EditForm):
    """The text fields of a variations form (OpenAI ``images.create_variation``): the edit fields without a
    prompt (a variation is an image-to-image run with the empty prompt)."""

    prompt: str = ""

    _prompt = field_validator("prompt")(lambda v: v)


@dataclass(frozen=True)
class InputImage:
    """A checked input picture: its encoded bytes (as the engine gets them) and its size in pixels."""

    data: bytes
    width: int
    height: int


def decode_input(raw: bytes, param: str, limits: Limits) -> InputImage:
    """Check one encoded input image (or mask): size in bytes, format, sides, a full decode.

    Raises:
        APIError: 400 with ``param`` for an empty or too large upload, bytes that are not a PNG/JPEG/WebP
            image Pillow can decode, or a side above ``limits.max_side`` pixels.
    """
    from PIL import Image, UnidentifiedImageError

    if not raw:
        raise APIError(400, f"{param}: the uploaded file is empty; send a PNG, JPEG or WebP image",
                       param=param, code="invalid_image")
    if len(raw) > limits.max_input_bytes:
        raise APIError(400, f"{param}: {len(raw)} bytes is above this service's limit of {limits.max_input_bytes} "
                       f"bytes per input image (serve --max-input-mb {limits.max_input_bytes / 2**20:g}); send a "
                       "smaller image", param=param, code="limit_exceeded")
    try:
        with Image.open(io.BytesIO(raw)) as img:
            fmt, (w, h) = img.format, img.size
            if fmt not in INPUT_FORMATS:
                raise APIError(400, f"{param}: a {fmt} image; send a PNG, JPEG or WebP image", param=param,
                               code="invalid_image")
            if max(w, h) > limits.max_side:
                raise APIError(400, f"{param}: {w}x{h} has a side above this service's limit of {limits.max_side} "
                               f"pixels (serve --max-side); send a smaller image", param=param,
                               code="limit_exceeded")
            img.load()
    except APIError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        detail = " ".join(str(exc).split())[:120]
        if isinstance(exc, UnidentifiedImageError):
            detail = "not an image format Pillow recognises"
        raise APIError(400, f"{param}: the uploaded file is not a decodable PNG, JPEG or WebP image ({detail}); "
                       "send an image file", param=param, code="invalid_image") from None
    return InputImage(raw, w, h)


def mask_bytes(mask: InputImage) -> bytes:
    """The mask in the engine's convention (white = repaint): an OpenAI mask with transparent pixels is
    converted (alpha 0 → 255, else 0; an 8-bit greyscale PNG), any other mask is passed unchanged."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(mask.data)) as img:
        if "A" not in img.getbands() and "transparency" not in img.info:
            return mask.data
        alpha = np.asarray(img.convert("RGBA"))[..., 3]
    if alpha.min() == 255:
        return mask.data
    buf = io.BytesIO()
    Image.fromarray(np.where(alpha == 0, 255, 0).astype(np.uint8), "L").save(buf, format="PNG")
    return buf.getvalue()


def check_mask(image: InputImage, mask: InputImage | None) -> bytes | None:
    """The engine's mask bytes, or None. Raises APIError 400 (``mask``) when its size is not the image's."""
    if mask is None:
        return None
    if (mask.width, mask.height) != (image.width, image.height):
        raise APIError(400, f"mask: {mask.width}x{mask.height} is not the size of image ({image.width}x"
                       f"{image.height}); send a mask of the input image's size", param="mask",
                       code="invalid_image")
    return mask_bytes(mask)


async def read_edit_form(
    request: "Request", limits: Limits, form_model: type[EditForm] = EditForm
) -> tuple[EditForm, InputImage, InputImage | None]:
    """Parse and check an edits (or, with ``form_model=VariationForm``, variations) form: (text fields, input
    image, mask or None).

    Raises:
        APIError: 400 for a body that is not multipart, no or several input images, a file where text is
            expected, a text field out of range, or an input that fails :func:`decode_input`.
    """
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise APIError(400, f"the body is {ctype.split(';')[0] or 'without a content type'}; send "
                       "multipart/form-data with an image file and a prompt (the OpenAI images.edit form)",
                       code="invalid_body")
    try:
        form = await request.form(max_files=8, max_fields=200)
    except Exception as exc:  # starlette's MultiPartException / a malformed body
        raise APIError(400, f"the multipart body does not parse ({' '.join(str(exc).split())[:120]}); send "
                       "multipart/form-data", code="invalid_body") from None
    try:
        images: list[bytes] = []
        masks: list[bytes] = []
        fields: dict[str, str] = {}
        for key, value in form.multi_items():
            if isinstance(value, str):
                if key in IMAGE_FIELDS or key == "mask":
                    raise APIError(400, f"{key}: sent as a text field; upload the image as a file", param=key,
                                   code="invalid_image")
                fields[key] = value
                continue
            if key not in (*IMAGE_FIELDS, "mask"):
                raise APIError(400, f"{key}: a file upload where no file is expected; files are image (or "
                               "image[]) and mask", param=key, code="unsupported_parameter")
            if value.size is not None and value.size > limits.max_input_bytes:
                raise APIError(400, f"{key}: {value.size} bytes is above this service's limit of "
                               f"{limits.max_input_bytes} bytes per input image (serve --max-input-mb "
                               f"{limits.max_input_bytes / 2**20:g}); send a smaller image", param=key,
                               code="limit_exceeded")
            (masks if key == "mask" else images).append(await value.read())
    finally:
        await form.close()
    try:
        body = form_model.model_validate(fields)
    except ValidationError as exc:
        message, param = validation_message(list(exc.errors()))  # type: ignore[arg-type]
        raise APIError(400, message, param=param) from None
    if not images:
        raise APIError(400, "image: no input image in the form; upload the picture to edit as the file field "
                       "image", param="image", code="invalid_image")
    if len(images) > 1 or len(masks) > 1:
        what, count = ("image", len(images)) if len(images) > 1 else ("mask", len(masks))
        raise APIError(400, f"{what}: {count} files sent; this service edits one input image (with at most one "
                       "mask) per request", param=what, code="unsupported_parameter")
    image = decode_input(images[0], "image", limits)
    mask = decode_input(masks[0], "mask", limits) if masks else None
    return body, image, mask


def default_strength() -> float:
    """``GenerationRequest.strength``'s default (reported back when an edit names none)."""
    from diffbench.engines.base import GenerationRequest

    return float(GenerationRequest.model_fields["strength"].default)


def install_edit_route(app: "FastAPI", service: "Service") -> None:
    """Add ``POST /v1/images/edits`` (see the module docstring) to ``app``."""
    from fastapi import Request, Response

    from diffbench.server.images import generate_pngs, image_data
    from diffbench.server.schemas import ImageEditResponse, ignored_parameters
    from diffbench.server.service import timing_headers
    from diffbench.server.validation import refuse_stream

    @app.post(EDITS_PATH, response_model=ImageEditResponse)
    async def edit_images(request: Request, response: Response) -> ImageEditResponse:
        return await _image_to_image(request, response, EditForm)

    @app.post(VARIATIONS_PATH, response_model=ImageEditResponse)
    async def image_variations(request: Request, response: Response) -> ImageEditResponse:
        return await _image_to_image(request, response, VariationForm)

    async def _image_to_image(request: Request, response: Response, form: type[EditForm]) -> ImageEditResponse:
        arrival = time.perf_counter()
        body, image, mask = await read_edit_form(request, service.config.limits, form)
        if mask is not None and form is VariationForm:
            raise APIError(400, "mask: a variation has no mask (OpenAI's variations take one image); send the "
                           "mask to /v1/images/edits with a prompt", param="mask", code="unsupported_parameter")
        model = service.check_model(body.model)
        refuse_stream(body.stream)
        size = None if body.size is not None and body.size.strip().lower() == "auto" else body.size
        if size is None and body.width is None and body.height is None:
            size = f"{image.width}x{image.height}"  # no size asked: the output keeps the input's size
        mask_data = check_mask(image, mask)
        strength = body.strength if body.strength is not None else default_strength()
        out = await generate_pngs(
            service, request, arrival=arrival, size=size, width=body.width, height=body.height,
            steps=body.num_inference_steps, seed=body.seed, prompt=body.prompt,
            negative_prompt=body.negative_prompt, guidance=body.guidance_scale, n=body.n, model=model,
            image=image.data, mask=mask_data, strength=strength,
        )
        response.headers.update(timing_headers(out.stats))
        return ImageEditResponse(
            created=int(time.time()),
            data=await image_data(request, out.pngs, body.response_format),
            model=model,
            size=f"{out.width}x{out.height}",
            num_inference_steps=out.steps,
            seed=out.seed,
            strength=strength,
            ignored_parameters=ignored_parameters(body, service.ignored(body.guidance_scale, body.negative_prompt)),
            **out.stats.model_dump(),
        )
