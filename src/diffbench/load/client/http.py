"""The HTTP backend: images API and async video jobs over one pooled ``httpx.AsyncClient``.

Timeouts are explicit: ``Target.timeout_s`` is the whole request's deadline from the send (for a video job:
create + polls + download), enforced with an asyncio deadline on top of httpx's per-operation timeouts.
There is no hidden default. A video job whose deadline passes is *not* deleted unless
``delete_abandoned`` is set (serving-apis.md lesson 7).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Coroutine
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from diffbench.errors import UsageError, require
from diffbench.load.client.base import Attempt, Now
from diffbench.load.client.dialects import (
    IMAGES_PATH,
    VIDEOS_PATH,
    Dialect,
    image_body,
    sends_steps_and_frames,
    server_timings,
    shape_label,
    video_fields,
    video_uses_form,
)
from diffbench.load.client.outcomes import classify_exception, classify_status
from diffbench.load.client.payload import Verdict, check_images, check_video, parse_json
from diffbench.load.client.workload import RequestSpec

if TYPE_CHECKING:
    import httpx

TERMINAL_FAILED = frozenset({"failed", "cancelled", "canceled", "error", "expired"})
DELETE_TIMEOUT_S = 5.0
INLINE_CHECK_BYTES = 256 * 1024
"""Bodies up to this size are checked on the event loop (a thread hop costs more than the check);
larger ones in the worker pool so decoding never stalls dispatch."""


class Target(BaseModel):
    """Where and how to send requests.

    ``timeout_s`` (seconds, > 0) is required: the caller states it, and reports print it.
    ``poll_interval_s`` is the video status polling interval (default 0.25 s; the measured latency is
    quantized by it). ``max_connections`` None = unbounded pool (an open loop must never queue on it).
    ``pool_shards``: requests are spread round-robin over this many ``httpx.AsyncClient`` pools, because
    httpcore scans every connection of a pool for each request (cost O(connections)); with thousands in
    flight one shared pool becomes the bottleneck (the single-session trap of vllm-project/vllm #39963).
    """

    model_config = ConfigDict(frozen=True)

    base_url: str
    dialect: Dialect = "vllm-omni"
    timeout_s: float = Field(gt=0)
    headers: dict[str, str] = {}
    api_key: SecretStr | None = None
    poll_interval_s: float = Field(default=0.25, gt=0)
    delete_abandoned: bool = False
    verify_tls: bool = True
    decode_payload: bool = True
    max_connections: int | None = Field(default=None, gt=0)
    pool_shards: int = Field(default=256, ge=1, le=4096)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip().rstrip("/")
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"URL must start with http:// or https://, got {v!r}")
        return v


def parse_headers(items: list[str]) -> dict[str, str]:
    """``["K:V", ...]`` → mapping. Raises :class:`UsageError` naming a malformed item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise UsageError(f"--header {item!r} must look like 'Name: value'")
        out[key.strip()] = value.strip()
    return out


async def _with_deadline(coro: Coroutine[object, object, None], seconds: float) -> None:
    """Await ``coro`` under a total deadline (``asyncio.timeout`` on 3.11+, ``wait_for`` on 3.10)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            await coro
    else:  # pragma: no cover
        await asyncio.wait_for(coro, seconds)


class HttpBackend:
    """Sends :class:`RequestSpec` requests to ``target`` (see :class:`diffbench.load.client.base.Backend`).

    Payload checks of bodies above ``INLINE_CHECK_BYTES`` run in a small pool of ``check_workers``
    processes (or threads, ``check_in="thread"``) so decoding never runs on the event loop that keeps the
    dispatch clock.
    """

    def __init__(self, target: Target, check_workers: int = 2,
                 check_in: Literal["process", "thread"] = "process") -> None:
        self.target = target
        self._clients: list[httpx.AsyncClient] = []
        self._next = 0
        self._executor: Executor | None = None
        self._check_workers = check_workers
        self._check_in = check_in
        self.deleted_jobs: list[str] = []
        self.abandoned_jobs: list[str] = []

    async def start(self) -> None:
        """Open the pool shards.

        Raises:
            MissingDependencyError: payload decoding is on and Pillow is not installed.
        """
        import httpx

        if self.target.decode_payload:
            require("PIL", "serve")

        headers = dict(self.target.headers)
        if self.target.api_key is not None:
            headers.setdefault("Authorization", f"Bearer {self.target.api_key.get_secret_value()}")
        t = self.target.timeout_s
        # One TLS context for every shard: building one loads the CA store (~35 ms each).
        tls: ssl.SSLContext | bool = httpx.create_ssl_context(verify=self.target.verify_tls) \
            if self.target.base_url.startswith("https://") else False
        per_shard = None
        if self.target.max_connections is not None:
            per_shard = max(1, self.target.max_connections // self.target.pool_shards)
        self._clients = [
            httpx.AsyncClient(
                base_url=self.target.base_url,
                headers=headers,
                timeout=httpx.Timeout(t, connect=min(t, 30.0)),
                limits=httpx.Limits(max_connections=per_shard, max_keepalive_connections=None),
                verify=tls,
                trust_env=False,
                follow_redirects=False,
            )
            for _ in range(self.target.pool_shards)
        ]

    async def close(self) -> None:
        clients, self._clients = self._clients, []
        for c in clients:
            await c.aclose()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _pool(self) -> Executor:
        """The executor for large payload checks, created on first use.

        ``process`` (default): json/base64 decoding holds the GIL for milliseconds per MB, which would
        delay the dispatch clock in this process; worker processes (``spawn``) do not share it.
        ``thread``: cheaper to start, for small machines or tests.
        """
        if self._executor is None:
            if self._check_in == "process":
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                self._executor = ProcessPoolExecutor(max_workers=self._check_workers,
                                                     mp_context=multiprocessing.get_context("spawn"))
            else:
                from concurrent.futures import ThreadPoolExecutor

                self._executor = ThreadPoolExecutor(max_workers=self._check_workers,
                                                    thread_name_prefix="diffbench-check")
        return self._executor

    def _pick(self) -> httpx.AsyncClient:
        """The next pool shard (round-robin); all calls of one request use the same shard."""
        if not self._clients:
            raise RuntimeError("HttpBackend.start() was not called")
        self._next = (self._next + 1) % len(self._clients)
        return self._clients[self._next]

    def label(self, spec: RequestSpec) -> str:
        """The breakdown key of ``spec`` for this dialect (see :func:`~diffbench.load.client.dialects.shape_label`)."""
        return shape_label(spec, self.target.dialect)

    async def execute(self, spec: RequestSpec, attempt: Attempt, now: Now) -> None:
        body = self._image if spec.kind == "image" else self._video
        client = self._pick()
        try:
            await _with_deadline(body(client, spec, attempt, now), self.target.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure is data
            c = classify_exception(exc)
            attempt.done_s = now()
            attempt.outcome, attempt.error = c.outcome, c.error
            attempt.body = None
            if c.outcome == "timeout":
                attempt.error = f"no complete response within --timeout {self.target.timeout_s:g} s"
            if attempt.job_id is not None:  # the client gave up on a job the server may still run
                await self._abandon(client, attempt)

    async def _image(self, client: httpx.AsyncClient, spec: RequestSpec, a: Attempt, now: Now) -> None:
        req = client.build_request("POST", IMAGES_PATH, json=image_body(spec, self.target.dialect))
        a.sent_s = now()
        resp = await client.send(req, stream=True)
        try:
            a.first_byte_s = now()
            data = await resp.aread()
        finally:
            await resp.aclose()
        a.done_s = now()
        c = classify_status(resp.status_code, resp.headers.get("retry-after"))
        a.outcome, a.status, a.retry_after_s, a.error = c.outcome, c.status, c.retry_after_s, c.error
        if c.outcome == "ok":
            a.body = data

    async def _video(self, client: httpx.AsyncClient, spec: RequestSpec, a: Attempt, now: Now) -> None:
        fields = video_fields(spec, self.target.dialect)
        if video_uses_form(self.target.dialect):
            form = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items()}
            # An empty files list forces multipart/form-data, as the videos API expects.
            req = client.build_request("POST", VIDEOS_PATH, data=form, files={"_": ("", b"")})
        else:
            req = client.build_request("POST", VIDEOS_PATH, json=fields)
        a.sent_s = now()
        resp = await client.send(req, stream=True)
        try:
            a.first_byte_s = now()
            data = await resp.aread()
        finally:
            await resp.aclose()
        if not self._status_ok(resp, data, a, now):
            return
        obj, err = parse_json(data)
        job = None if obj is None else obj.get("id")
        if obj is None or not isinstance(job, (str, int)):
            a.done_s = now()
            a.outcome, a.error = "invalid_payload", err or "video create response has no job id"
            return
        a.job_id = str(job)
        status = str(obj.get("status", ""))
        interval = self.target.poll_interval_s
        next_poll = now()
        while status != "completed":
            if status in TERMINAL_FAILED:
                a.done_s = now()
                detail = obj.get("error") if obj is not None else None
                a.outcome, a.error = "http_error", f"video job {a.job_id} {status}: {detail}"[:300]
                return
            next_poll += interval  # absolute cadence: polling overhead does not stretch the interval
            await asyncio.sleep(max(0.0, next_poll - now()))
            resp = await client.get(f"{VIDEOS_PATH}/{a.job_id}")
            if not self._status_ok(resp, resp.content, a, now):
                return
            obj, err = parse_json(resp.content)
            if obj is None:
                a.done_s = now()
                a.outcome, a.error = "invalid_payload", f"video status: {err}"
                return
            status = str(obj.get("status", ""))
        if obj is not None:
            a.stages_s, a.peak_memory_bytes = server_timings(obj)
            nf = obj.get("num_frames")
            a.reported_frames = nf if isinstance(nf, int) and not isinstance(nf, bool) else None
        resp = await client.send(client.build_request("GET", f"{VIDEOS_PATH}/{a.job_id}/content"),
                                 stream=True)
        try:
            content = await resp.aread()
        finally:
            await resp.aclose()
        a.done_s = now()
        if self._status_ok(resp, content, a, now):
            a.body = content

    def _status_ok(self, resp: httpx.Response, data: bytes, a: Attempt, now: Now) -> bool:
        c = classify_status(resp.status_code, resp.headers.get("retry-after"))
        a.status = c.status
        if c.outcome == "ok":
            return True
        a.done_s = now()
        a.outcome, a.retry_after_s = c.outcome, c.retry_after_s
        snippet = data[:160].decode("utf-8", "replace").strip()
        a.error = f"{c.error}: {snippet}" if snippet else c.error
        return False

    async def _abandon(self, client: httpx.AsyncClient, a: Attempt) -> None:
        """A job the client gave up on: left running unless the user asked to delete it."""
        assert a.job_id is not None
        if not self.target.delete_abandoned:
            self.abandoned_jobs.append(a.job_id)
            a.error = f"{a.error}; video job {a.job_id} left on the server (not deleted)"
            return
        try:
            r = await asyncio.wait_for(client.delete(f"{VIDEOS_PATH}/{a.job_id}"), DELETE_TIMEOUT_S)
            self.deleted_jobs.append(a.job_id)
            a.error = f"{a.error}; video job {a.job_id} deleted (--delete-abandoned, HTTP {r.status_code})"
        except Exception as exc:  # the delete is best effort; its failure is reported, not raised
            a.error = f"{a.error}; deleting video job {a.job_id} failed: {type(exc).__name__}"

    async def abandon_cancelled(self, a: Attempt) -> None:
        """Called by the runner for a job cancelled at the end of a run (Ctrl-C)."""
        if a.job_id is not None:
            await self._abandon(self._pick(), a)

    async def check(self, spec: RequestSpec, attempt: Attempt) -> None:
        body, attempt.body = attempt.body, None
        if attempt.outcome != "ok" or body is None:
            return
        loop = asyncio.get_running_loop()
        s = spec.shape
        try:
            if spec.kind == "image":
                args = (body, s.width, s.height, s.n, self.target.decode_payload)
                if len(body) <= INLINE_CHECK_BYTES:
                    verdict = check_images(*args)
                else:
                    verdict = await loop.run_in_executor(self._pool(), check_images, *args)
                attempt.stages_s, attempt.peak_memory_bytes = verdict.stages_s, verdict.peak_memory_bytes
            else:
                frames = s.frames if sends_steps_and_frames(self.target.dialect) else None
                if frames is not None and attempt.reported_frames not in (None, frames):
                    verdict = Verdict(False, f"video job reports {attempt.reported_frames} frames, requested "
                                             f"{frames}")
                else:
                    verdict = check_video(body, frames)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a checker failure is counted, never dropped
            verdict = Verdict(False, f"payload check failed in the client: {type(exc).__name__}: {exc}"[:300])
        if not verdict.ok:
            attempt.outcome, attempt.error = "invalid_payload", verdict.error
