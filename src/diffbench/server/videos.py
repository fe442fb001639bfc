"""Async video jobs: ``POST /v1/videos``, ``GET /v1/videos[/{id}[/content]]``, ``DELETE /v1/videos/{id}``.

Lifecycle: ``queued`` (admitted, waiting for the device) → ``in_progress`` (the worker picked it) →
``completed`` or ``failed`` (with ``error.code`` ``out_of_memory`` or ``generation_failed``; ``unavailable``
when the server drained while it ran). ``DELETE`` drops a queued job before it reaches the device and
cancels a running one at its next denoising step (outcome ``cancelled``; the device seconds it spent are
exported as wasted, reason ``deleted``). The deleted job is gone: later GETs answer 404.
``/content`` answers 404 (``not_ready``) until the job is ``completed`` (as SGLang does), then, per
OpenAI's ``variant`` query parameter: ``video`` (default) the MP4 (H.264, encoded once on the first
download, off the event loop); ``thumbnail`` the first frame as a WebP still (``image/webp``, as OpenAI's
videos API returns it); ``spritesheet`` a JPEG grid of up to :data:`SPRITE_FRAMES` evenly spaced frames
(``image/jpeg``, as OpenAI's). Any other variant is a 400 naming the three. Jobs live in memory; at most
``ServerConfig.max_jobs`` are kept (the oldest finished ones are dropped first).

Frames: ``num_frames`` exactly as given; ``seconds × fps`` (OpenAI's ``videos.create(seconds="4")``)
rounded to the nearest count the engine's ``validate`` accepts (Wan: 4k + 1, so 64 → 65); with neither,
the pipeline's default frame count, else OpenAI's default of 4 s. The job's ``num_frames`` and
``seconds`` are what the MP4 holds, and every change is listed in ``adjusted_parameters``.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

import io
import json
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from diffbench.engines.base import GenerationRequest
from diffbench.engines.cancel import Cancelled, CancelToken
from diffbench.server.http_errors import APIError, from_generation_error, validation_message
from diffbench.server.schemas import (
    Adjustment,
    JobError,
    VideoCreateRequest,
    VideoDeleted,
    VideoJob,
    VideoList,
    ignored_parameters,
)
from diffbench.server.service import Service, generation_stats
from diffbench.server.validation import build_request, check_size, nearest_valid_frames, resolve_size
from diffbench.server.worker import Done, Overloaded

if TYPE_CHECKING:
    from fastapi import FastAPI, Request  # noqa: F401 - string annotations

_FINISHED = ("completed", "failed", "cancelled")
DEFAULT_SECONDS = 4  # OpenAI's videos API default duration (openai-python VideoCreateParams.seconds)
VARIANTS = ("video", "thumbnail", "spritesheet")
"""``GET /v1/videos/{id}/content?variant=``: OpenAI's downloadable assets of a video."""
SPRITE_FRAMES = 16
"""Most frames in a spritesheet (evenly spaced over the clip, 4 per row)."""
_FILE_FIELDS = ("input_reference", "image_reference", "video_reference", "audio_reference", "reference_url")


@dataclass
class _Record:
    job: VideoJob
    future: Future[Done] | None = None
    token: CancelToken | None = None
    frames: np.ndarray | None = None
    mp4: bytes | None = None
    stills: dict[str, bytes] | None = None


class VideoJobs:
    """Thread-safe in-memory job table (the worker thread updates it through future callbacks)."""

    def __init__(self, max_jobs: int) -> None:
        self._jobs: dict[str, _Record] = {}
        self._lock = threading.Lock()
        self._max = max_jobs

    def add(self, job: VideoJob) -> None:
        with self._lock:
            self._jobs[job.id] = _Record(job)
            if len(self._jobs) > self._max:
                for jid in [j for j, r in self._jobs.items() if r.job.status in _FINISHED]:
                    if len(self._jobs) <= self._max:
                        break
                    del self._jobs[jid]

    def attach(self, job_id: str, future: Future[Done], token: CancelToken | None = None) -> None:
        with self._lock:
            rec = self._jobs.get(job_id)
            if rec is not None:
                rec.future, rec.token = future, token
        future.add_done_callback(lambda f: self._finish(job_id, f))

    def _update(self, job_id: str, **changes: object) -> None:
        with self._lock:
            rec = self._jobs.get(job_id)
            if rec is not None and rec.job.status not in _FINISHED:
                rec.job = rec.job.model_copy(update=changes)

    def started(self, job_id: str) -> None:
        self._update(job_id, status="in_progress")

    def _finish(self, job_id: str, fut: Future[Done]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        now = int(time.time())
        if exc is not None:
            err = from_generation_error(exc)
            self._update(
                job_id, status="failed", completed_at=now, error=JobError(code=err.code, message=err.message)
            )
            return
        done = fut.result()
        images = done.result.images
        frames = None if images is None else (images[0] if images.ndim == 5 else images[:1])
        stats = generation_stats(done)
        with self._lock:
            rec = self._jobs.get(job_id)
            if rec is None or rec.job.status in _FINISHED:
                return
            rec.frames = frames
            rec.job = rec.job.model_copy(
                update={
                    "status": "completed",
                    "completed_at": now,
                    "progress": 100,
                    "stage_durations": stats.stage_durations,
                    "service_time_s": stats.service_time_s,
                    "inference_time_s": stats.inference_time_s,
                    "peak_memory_mb": stats.peak_memory_mb,
                    "peak_memory_bytes": stats.peak_memory_bytes,
                }
            )

    def get(self, job_id: str) -> _Record:
        with self._lock:
            rec = self._jobs.get(job_id)
        if rec is None:
            raise APIError(
                404,
                f"video job {job_id!r} does not exist (deleted or never created); "
                "list jobs with GET /v1/videos",
                param="id",
                code="not_found",
            )
        return rec

    def list(self) -> list[VideoJob]:
        with self._lock:
            return sorted((r.job for r in self._jobs.values()), key=lambda j: (j.created_at, j.id))

    def delete(self, job_id: str) -> VideoJob:
        rec = self.get(job_id)
        if rec.future is not None and not rec.future.done():
            if rec.token is not None:
                rec.token.cancel("deleted")  # a running job stops at its next step
            rec.future.cancel()  # succeeds while queued
        with self._lock:
            self._jobs.pop(job_id, None)
        status = rec.job.status if rec.job.status in _FINISHED else "cancelled"
        return rec.job.model_copy(update={"status": status})


async def _read_body(request: "Request") -> dict[str, object]:
    ctype = request.headers.get("content-type", "")
    if ctype.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        form = await request.form()
        data: dict[str, object] = {}
        for key, value in form.multi_items():
            if not isinstance(value, str):
                raise APIError(
                    400,
                    f"{key}: file uploads are not supported by the reference service "
                    "(text-to-video only); send the job without files",
                    param=key,
                    code="unsupported_parameter",
                )
            data[key] = value
        return data
    try:
        data = json.loads(await request.body() or b"{}")
    except ValueError as exc:
        raise APIError(
            400,
            f"the request body is not valid JSON ({exc}); send a JSON object or a multipart form",
            code="invalid_body",
        ) from exc
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_body")
    return data


def thumbnail_webp(frames: np.ndarray) -> bytes:
    """The first frame of ``frames`` (uint8, (F, H, W, 3) RGB) as a lossless WebP still."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frames[0]), "RGB").save(buf, format="WEBP", lossless=True)
    return buf.getvalue()


def spritesheet_jpeg(frames: np.ndarray, most: int = SPRITE_FRAMES, per_row: int = 4) -> bytes:
    """Up to ``most`` evenly spaced frames of ``frames`` (uint8, (F, H, W, 3)) tiled ``per_row`` to a row,
    left to right then top to bottom, as a JPEG (quality 90); unused tiles of the last row are black."""
    from PIL import Image

    count = min(most, len(frames))
    picks = np.unique(np.linspace(0, len(frames) - 1, count).round().astype(int))
    h, w = frames.shape[1:3]
    cols = min(per_row, len(picks))
    rows = -(-len(picks) // cols)
    sheet = np.zeros((rows * h, cols * w, 3), np.uint8)
    for k, i in enumerate(picks):
        r, c = divmod(k, cols)
        sheet[r * h:(r + 1) * h, c * w:(c + 1) * w] = frames[i]
    buf = io.BytesIO()
    Image.fromarray(sheet, "RGB").save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def install_video_routes(app: "FastAPI", service: Service) -> None:
    """Register the video-job routes on ``app`` (see module docstring)."""
    from fastapi import Request, Response
    from fastapi.concurrency import run_in_threadpool

    from diffbench.server.mp4 import encode_mp4

    config = service.config
    jobs = VideoJobs(config.max_jobs)
    app.state.video_jobs = jobs

    @app.post("/v1/videos", response_model=VideoJob)
    async def create_video(request: Request) -> VideoJob:
        from diffbench.server.http_errors import TRAFFIC_HEADER, traffic_of

        arrival = time.perf_counter()
        traffic = traffic_of(request.headers.get(TRAFFIC_HEADER))
        data = await _read_body(request)
        for key in _FILE_FIELDS:
            if data.get(key) not in (None, ""):
                raise APIError(
                    400,
                    f"{key}: reference inputs are not supported by the reference service "
                    "(text-to-video only); remove the field",
                    param=key,
                    code="unsupported_parameter",
                )
        try:
            body = VideoCreateRequest.model_validate(data)
        except ValidationError as exc:
            message, param = validation_message(list(exc.errors()))
            raise APIError(400, message, param=param) from exc
        model = service.check_model(body.model)
        width, height, size_param = resolve_size(body.size, body.width, body.height, config.default_size)
        fps = body.fps or config.default_fps
        steps = body.num_inference_steps or service.default_steps
        check_size(width, height, config.limits, size_param, service.engine)
        probe = GenerationRequest(prompt=body.prompt, width=width, height=height, steps=steps)
        frames, adjusted = _frames(service, body, probe, fps)
        seed = service.pick_seed(body.seed)
        gen = build_request(
            engine=service.engine,
            limits=config.limits,
            prompt=body.prompt,
            negative_prompt=body.negative_prompt,
            width=width,
            height=height,
            frames=frames,
            steps=steps,
            guidance=body.guidance_scale,
            n=1,
            seed=seed,
            size_param=size_param,
        )
        if width % 2 or height % 2:
            raise APIError(
                400,
                f"{size_param}: {width}x{height} has an odd side; MP4 (yuv420p) needs even sides",
                param=size_param,
                code="invalid_size",
            )
        job = VideoJob(
            id=f"video_{uuid.uuid4().hex}",
            status="queued",
            created_at=int(time.time()),
            model=model,
            prompt=body.prompt,
            size=f"{width}x{height}",
            width=width,
            height=height,
            num_frames=frames or 1,
            fps=fps,
            seconds=f"{(frames or 1) / fps:g}",
            num_inference_steps=steps,
            seed=seed,
            ignored_parameters=ignored_parameters(
                body, service.ignored(body.guidance_scale, body.negative_prompt)
            ),
            adjusted_parameters=adjusted,
        )
        _, worker = service.require_ready()
        jobs.add(job)
        token = CancelToken()
        try:
            fut = worker.submit(
                gen,
                max_wait_s=config.max_wait_s,
                max_queue=config.max_queue,
                on_start=lambda: jobs.started(job.id),
                token=token,
            )
        except Exception as exc:
            jobs.delete(job.id)
            if isinstance(exc, Overloaded):
                raise APIError(
                    429,
                    str(exc),
                    code="overloaded",
                    headers={"Retry-After": str(exc.decision.retry_after_s or 1)},
                ) from exc
            raise from_generation_error(exc) from exc
        fut.add_done_callback(lambda f: _count(service, f, gen, traffic, arrival, token))
        jobs.attach(job.id, fut, token)
        return jobs.get(job.id).job

    @app.get("/v1/videos", response_model=VideoList)
    async def list_videos() -> VideoList:
        return VideoList(data=jobs.list())

    @app.get("/v1/videos/{video_id}", response_model=VideoJob)
    async def get_video(video_id: str) -> VideoJob:
        return jobs.get(video_id).job

    @app.get("/v1/videos/{video_id}/content")
    async def get_content(video_id: str, variant: str = "video") -> Response:
        if variant not in VARIANTS:
            raise APIError(
                400,
                f"variant: {variant!r} is not a video asset; use one of {', '.join(VARIANTS)} (default video)",
                param="variant",
                code="invalid_value",
            )
        rec = jobs.get(video_id)
        job = rec.job
        if job.status != "completed" or rec.frames is None:
            detail = f": {job.error.message}" if job.error else ""
            raise APIError(
                404,
                f"video job {video_id} is {job.status}{detail}; content is available once "
                f"GET /v1/videos/{video_id} reports status completed",
                param="id",
                code="not_ready",
            )
        frames = rec.frames
        if variant != "video":
            stills = rec.stills if rec.stills is not None else {}
            if variant not in stills:
                make = thumbnail_webp if variant == "thumbnail" else spritesheet_jpeg
                stills[variant] = await run_in_threadpool(make, frames)
            rec.stills = stills
            media = "image/webp" if variant == "thumbnail" else "image/jpeg"
            return Response(stills[variant], media_type=media)
        if rec.mp4 is None:
            rec.mp4 = await run_in_threadpool(encode_mp4, frames, job.fps)
        return Response(rec.mp4, media_type="video/mp4")

    @app.delete("/v1/videos/{video_id}", response_model=VideoDeleted)
    async def delete_video(video_id: str) -> VideoDeleted:
        job = jobs.delete(video_id)
        return VideoDeleted(id=job.id, status=job.status)


def _frames(
    service: Service, body: VideoCreateRequest, probe: GenerationRequest, fps: int
) -> tuple[int | None, dict[str, Adjustment]]:
    """Frame count of a job (None: an image model's single frame) and the adjustments made.

    ``num_frames`` is used as given (the engine refuses a count it cannot take). Otherwise the count
    comes from ``seconds × fps``, else the pipeline's default frame count, else OpenAI's default of
    4 s × ``fps``, and is moved to the nearest count the engine accepts (Wan: 4k + 1); every count the
    client did not give exactly is reported in ``adjusted_parameters``.
    """
    if body.num_frames is not None:
        if body.num_frames == 1 and not _takes_frames(service, probe):
            return None, {}
        return body.num_frames, {}
    use = service.use
    max_frames = service.config.limits.max_frames
    if body.seconds is not None:
        if body.seconds * fps > max_frames + 0.5:
            raise APIError(
                400,
                f"seconds: {body.seconds:g} s × {fps} fps is above this service's limit of {max_frames} frames "
                f"(serve --max-frames {max_frames}); ask for at most {max_frames / fps:g} s at {fps} fps",
                param="seconds",
                code="limit_exceeded",
            )
        wanted = max(1, round(body.seconds * fps))
        why = f"seconds {body.seconds:g} × {fps} fps = {wanted} frames"
    elif use is not None and use.default_frames is not None:
        wanted = use.default_frames
        why = f"no seconds or num_frames given: the pipeline's default of {wanted} frames"
    else:
        wanted = DEFAULT_SECONDS * fps
        why = f"no seconds or num_frames given: OpenAI's default of {DEFAULT_SECONDS} s × {fps} fps = {wanted} frames"
    if not _takes_frames(service, probe):
        if body.seconds is None:
            reason = f"{why}; this is an image model, it makes one frame"
            return None, {"num_frames": Adjustment(requested=None, used=1, reason=reason)}
        return (None, {}) if wanted == 1 else (wanted, {})  # build_request reports the refusal
    found = nearest_valid_frames(service.engine, probe, wanted, max_frames)
    if found is None:
        return wanted, {}  # no count near it is accepted: build_request reports the engine's reason
    adjusted: dict[str, Adjustment] = {}
    if found != wanted or body.seconds is None:
        if found != wanted:
            why += f"; {wanted} is not a frame count this model takes, the nearest valid count is {found}"
        requested = wanted if body.seconds is not None else None
        adjusted["num_frames"] = Adjustment(requested=requested, used=found, reason=why)
    if body.seconds is not None and abs(found / fps - body.seconds) > 1e-9:
        adjusted["seconds"] = Adjustment(
            requested=body.seconds, used=found / fps, reason=f"{found} frames at {fps} fps"
        )
    return found, adjusted


def _takes_frames(service: Service, probe: GenerationRequest) -> bool:
    """False for an image model: it accepts the request without frames and refuses any frame count."""
    from diffbench.errors import ShapeError

    if service.info is not None and service.info.is_video:
        return True
    try:
        service.engine.validate(probe.model_copy(update={"frames": 2}))
    except ShapeError:
        return False
    return True


def _count(
    service: Service,
    fut: Future[Done],
    gen: GenerationRequest,
    traffic: str,
    arrival: float,
    token: CancelToken | None = None,
) -> None:
    """Export a finished job: outcome (with the status an image request would get) and, when it completed,
    its generation and its duration from creation to the result being ready. A job deleted while it ran
    (stopped at a step, or finished after the DELETE) counts as ``cancelled`` with its wasted device seconds;
    one stopped by the drain as ``unavailable``."""
    if fut.cancelled():
        service.count("cancelled", 499, traffic=traffic)  # DELETE before the job reached the device
        return
    exc = fut.exception()
    shape = service.shape_of(gen)
    if token is not None and token.reason is not None and (exc is None or isinstance(exc, Cancelled)):
        service.observe_cancelled(fut, token, gen, traffic)
        status = 503 if token.reason == "drain" else 499
        service.count("unavailable" if status == 503 else "cancelled", status, shape=shape, traffic=traffic)
        return
    if exc is None:
        service.observe(fut.result(), gen, traffic)
        service.count("ok", 200, shape=shape, duration_s=time.perf_counter() - arrival, traffic=traffic)
    else:
        from diffbench.server.http_errors import outcome_of

        status = from_generation_error(exc).status
        service.count(outcome_of(status), status, shape=shape, traffic=traffic)
