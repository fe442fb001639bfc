"""One image generation as the images, edits and chat routes answer it: validate, queue, run, PNG-encode
(:func:`generate_pngs`), and the ``data`` of the answer (:func:`image_data`: base64 PNGs or URLs).

Shared by :mod:`diffbench.server.app` (``POST /v1/images/generations``), :mod:`diffbench.server.edits` and
:mod:`diffbench.server.chat`, which import it from here rather than from the app factory.
"""

# No ``from __future__ import annotations``, like the route modules that call it.
import asyncio
import base64
import io
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from diffbench.server.files import FILES_PREFIX, ImageFiles
from diffbench.server.http_errors import APIError
from diffbench.server.schemas import GenerationStats, ImageData
from diffbench.server.service import Service, generation_stats
from diffbench.server.validation import build_request, resolve_size

if TYPE_CHECKING:
    from fastapi import Request


def encode_png(image: np.ndarray) -> bytes:
    """One uint8 (H, W, 3) RGB image → PNG bytes (Pillow, compress level 1: lossless, fast)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image), "RGB").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


async def image_data(request: "Request", pngs: list[bytes], response_format: str | None) -> list[ImageData]:
    """The ``data`` of an images answer: base64 PNGs, or (``response_format="url"``) URLs of stored copies.

    A URL is built from the request's own scheme and ``Host`` (``request.base_url``) and stays valid for
    ``serve --url-ttl`` seconds (:class:`diffbench.server.files.ImageFiles`).
    """
    if response_format != "url":
        return [ImageData(b64_json=base64.b64encode(p).decode("ascii")) for p in pngs]
    files: ImageFiles = request.app.state.image_files
    base = str(request.base_url).rstrip("/")
    names = await asyncio.to_thread(lambda: [files.put(p) for p in pngs])  # disk writes off the event loop
    return [ImageData(url=f"{base}{FILES_PREFIX}/{name}") for name in names]


async def until_disconnect(request: "Request") -> None:
    """Return when the client of ``request`` disconnects (its body already read).

    Awaits the ASGI ``receive`` for ``http.disconnect``, as Starlette's streaming responses listen for
    one: the server wakes it when the connection closes, so a generation is cancelled at once rather
    than at the next poll. Any other message (none is expected once the body is read) is skipped.
    """
    while (await request.receive()).get("type") != "http.disconnect":
        await asyncio.sleep(0.05)


@dataclass
class ImagesDone:
    """PNG images of one generation and the parameters used (``width``/``height`` pixels)."""

    pngs: list[bytes]
    stats: GenerationStats
    width: int
    height: int
    steps: int
    seed: int


async def generate_pngs(
    service: Service,
    request: "Request",
    *,
    arrival: float,
    size: str | None,
    width: int | None,
    height: int | None,
    steps: int | None,
    seed: int | None,
    prompt: str,
    negative_prompt: str | None,
    guidance: float | None,
    n: int,
    model: str,
    image: bytes | None = None,
    mask: bytes | None = None,
    strength: float | None = None,
    adapter: str | None = None,
    adapter_scale: float = 1.0,
) -> ImagesDone:
    """Validate, queue and run one image generation, then PNG-encode its images off the event loop.

    Shared by ``POST /v1/images/generations``, ``POST /v1/images/edits`` and ``POST /v1/chat/completions``;
    ``image``/``mask``/``strength`` make it an edit (image-to-image, see :mod:`diffbench.server.edits`);
    ``adapter``/``adapter_scale`` the LoRA adapter to activate (:func:`~diffbench.server.validation.resolve_lora`). Leaves the exported
    shape label and the arrival-to-answer duration in ``request.state`` (counted by ``CountOutcomes``).

    Raises:
        APIError: 400 for a bad shape or parameter (``param`` names the field), the worker's errors
            (429, 500, 503, 504, 507; see :mod:`diffbench.server.http_errors`).
    """
    from fastapi.concurrency import run_in_threadpool

    from diffbench.server.http_errors import TRAFFIC_HEADER, traffic_of

    config = service.config
    traffic = traffic_of(request.headers.get(TRAFFIC_HEADER))
    w, h, size_param = resolve_size(size, width, height, config.default_size)
    steps_used = steps or service.default_steps
    seed_used = service.pick_seed(seed)
    try:
        gen = build_request(
            engine=service.engine,
            limits=config.limits,
            prompt=prompt,
            negative_prompt=negative_prompt,
            width=w,
            height=h,
            frames=None,
            steps=steps_used,
            guidance=guidance,
            n=n,
            seed=seed_used,
            size_param=size_param,
            image=image,
            mask=mask,
            strength=strength,
            adapter=adapter,
            adapter_scale=adapter_scale,
        )
    except APIError as exc:
        if exc.param == "num_frames" and service.info is not None and service.info.is_video:
            # the engine refuses a frame count of None: this endpoint sends none (num_frames unread)
            raise APIError(
                400,
                f"model: {model!r} is a video model and this endpoint makes images without a frame "
                "count (num_frames is not read here); create a video with POST /v1/videos",
                param="model",
                code="invalid_shape",
            ) from exc
        raise
    shape = service.shape_of(gen)
    request.state.diffbench_shape = shape
    done = await service.run(
        gen, traffic=traffic, arrival=arrival, disconnected=request.is_disconnected,
        until_disconnect=lambda: until_disconnect(request),
    )
    swap = done.result.extra.get("adapter_swap_s")
    if service.exporter is not None and swap is not None:
        service.exporter.observe_adapter(gen.adapter, swap)
    images = done.result.images
    if images is None:  # the worker already fails such requests; kept for the type checker
        raise APIError(500, "the engine returned no images", code="generation_failed")
    encode_start = time.perf_counter()
    pngs = await run_in_threadpool(lambda: [encode_png(img) for img in images])
    if service.exporter is not None:
        service.exporter.observe_stage(
            shape=shape, stage="postprocess", seconds=time.perf_counter() - encode_start, traffic=traffic
        )
    stats = generation_stats(done, edit=gen.is_edit)
    request.state.diffbench_duration_s = time.perf_counter() - arrival
    return ImagesDone(pngs=pngs, stats=stats, width=w, height=h, steps=steps_used, seed=seed_used)
