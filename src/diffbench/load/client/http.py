"""The HTTP backend: images API (generations; edits as a multipart form, see :mod:`.dialects`) and async
video jobs over one ``aiohttp.ClientSession``.

Transport (chosen by measurement, ``benchmarks/bench_load_client.py``: httpx-based clients collapsed above ~800 req/s on one core,
a plain aiohttp loop held 2,000 req/s): one session per backend, one
``TCPConnector`` without a connection limit (``Target.max_connections`` None; an open loop must never
queue on the pool), keep-alive, one TLS context built at start, no proxies from the environment, no
redirects followed, no cookies kept (every request is independent, like a fleet of clients).

Timeouts are explicit: ``Target.timeout_s`` is the whole request's deadline from the send (for a video job:
create + polls + download), enforced with one asyncio deadline around the request. aiohttp's own
``ClientTimeout`` is set so that it never fires first (no total, no read timeout; only the TCP connect is
bounded, by ``min(timeout_s, 30 s)``): its 300 s default total is the hidden deadline of
vllm-project/vllm-omni #5548. A video job whose deadline passes is *not* deleted unless
``delete_abandoned`` is set (a client deadline that DELETEs a running job aborts it on the server:
vllm-project/vllm-omni#7246).

Abandonment (``load --abandon-after S [--abandon-fraction F]``): a chosen share F of the requests is given
up on purpose S seconds after the send when it has not finished: an image request's connection is closed
(the server sees the client disconnect), a video job is DELETEd (always, whatever ``delete_abandoned``
says). The attempt's outcome is ``abandoned`` and ``done_s`` the moment it was given up. Which requests:
the k-th measured request a backend sends (the warm-up is never abandoned) is chosen when ``frac(k × φ) < F`` (φ the golden ratio's conjugate), a
low-discrepancy sequence, so any run of requests holds the share F to within one request.

Timestamps: ``first_byte_s`` when the response headers have arrived; ``done_s`` when the last body byte
has arrived (``await resp.read()`` returned), before any parsing. Payload checks run afterwards in worker
processes (:mod:`diffbench.load.client.checker`); the event loop parses only the small JSON of video job
status polls (it must, to proceed).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from diffbench.errors import UsageError, require
from diffbench.load.client.base import Attempt, Now
from diffbench.load.client.checker import PayloadChecker, default_workers
from diffbench.load.client.dialects import (
    VIDEOS_PATH,
    Dialect,
    chat_body,
    edit_fields,
    image_body,
    image_path,
    input_bytes,
    mime_type,
    sends_steps_and_frames,
    server_timings,
    shape_label,
    video_fields,
    video_uses_form,
)
from diffbench.load.client.outcomes import classify_exception, classify_status, redirect_target
from diffbench.load.client.payload import (
    Verdict,
    check_chat,
    check_images,
    check_video,
    check_video_frames,
    decode_body,
    parse_json,
)
from diffbench.load.client.sanity import av_available, request_key
from diffbench.load.client.scoring import score_images, score_video
from diffbench.load.client.workload import RequestSpec

if TYPE_CHECKING:
    import aiohttp

T = TypeVar("T")
TERMINAL_FAILED = frozenset({"failed", "cancelled", "canceled", "error", "expired"})
DELETE_TIMEOUT_S = 5.0
GOLDEN = 0.6180339887498949
CONNECT_TIMEOUT_S = 30.0
READ_BUFSIZE = 4 * 2**20
"""Bytes the response reader buffers before it pauses the socket (aiohttp's ``read_bufsize``).

aiohttp's 64 KiB default pauses and resumes reading every 128 KiB, so a multi-MB body costs hundreds of
loop wake-ups and the client, not the server, limits large answers (vllm-project/vllm #39963: ~10x on
very large responses). 4 MiB holds the body of a 1024x1024 PNG in base64 between wake-ups, so an 8 MB
answer needs a handful; memory is bounded by in-flight requests x 8 MiB (the pause threshold is 2x)."""
KEEPALIVE_S = 15.0
"""Idle keep-alive connections are closed after this many seconds (aiohttp's default, stated)."""
JSON_HEADERS = {"Content-Type": "application/json"}
NO_DECODE_INLINE_BYTES = 16 * 1024
"""With ``--no-decode``, identity bodies up to this size are parsed on the event loop, larger ones in the
workers. Measured (main-thread CPU per check, 2 workers, 2,000 checks): the hand-off to the pool costs
~10 us, parsing a 1 KB body ~4.5 us, a 64 KB body ~40 us, 1 MB ~0.6 ms; they break even near 16 KiB. With
decoding on, every image body goes to the workers (base64 and Pillow never run on the loop)."""


class Target(BaseModel):
    """Where and how to send requests.

    ``timeout_s`` (seconds, > 0) is required: the caller states it, and reports print it.
    Video jobs are polled adaptively: the first status request ``poll_first_s`` (10 ms) after the create
    answer, each next interval ``poll_backoff`` (1.25) times the previous, capped at ``poll_interval_s``
    (default 0.25 s). A job is thus seen done within ~25 % of its elapsed time (or the cap) instead of up to
    a whole fixed interval late (a 0.3 s job measured at 0.5 s with a fixed 0.25 s cadence); each record
    states its bound (``poll_granularity_s``, :class:`~diffbench.core.records.RequestRecord`). ``max_connections`` None = unbounded connection pool (an open loop must never queue on
    it); a number caps the open connections (requests then wait for one inside their deadline).
    ``decode_payload`` False (``--no-decode``) checks the JSON shape and image count only. ``sanity``
    (with decoding) adds the pixel checks of :mod:`~diffbench.load.client.sanity` to every image answer.
    ``defer_checks`` (``--defer-checks``) holds the payload checks of a run until its last timed answer
    (:meth:`~diffbench.load.client.checker.PayloadChecker.hold`).
    """

    model_config = ConfigDict(frozen=True)

    base_url: str
    dialect: Dialect = "vllm-omni"
    timeout_s: float = Field(gt=0)
    headers: dict[str, str] = {}
    api_key: SecretStr | None = None
    poll_interval_s: float = Field(default=0.25, gt=0)
    poll_first_s: float = Field(default=0.01, gt=0)
    poll_backoff: float = Field(default=1.25, ge=1)
    delete_abandoned: bool = False
    verify_tls: bool = True
    decode_payload: bool = True
    sanity: bool = True
    defer_checks: bool = False
    max_connections: int | None = Field(default=None, gt=0)
    abandon_after_s: float | None = Field(default=None, gt=0)
    abandon_fraction: float = Field(default=1.0, gt=0, le=1)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        v = v.strip().rstrip("/")
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"URL must start with http:// or https://, got {v!r}")
        parts = urlsplit(v)
        if not parts.hostname:
            raise ValueError(f"URL {v!r} has no host")
        try:
            parts.port  # noqa: B018  (raises for a port outside 0-65535 or not a number)
        except ValueError:
            raise ValueError(f"URL {v!r} has an invalid port (give 1-65535)") from None
        if parts.query or parts.fragment:
            raise ValueError(f"URL {v!r} must be the service's base URL, without ?query or #fragment")
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


def tls_context(verify: bool) -> ssl.SSLContext:
    """The one TLS context of a backend (building one loads the CA store, ~35 ms): the system's default
    verification, or none at all for ``--insecure``."""
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _encoding(header: str | None) -> str | None:
    """A ``Content-Encoding`` header value, None for identity."""
    return None if header is None or header.strip().lower() in ("", "identity") else header


async def with_deadline(coro: Coroutine[object, object, T], seconds: float) -> T:
    """Await ``coro`` under a total deadline of ``seconds`` (``asyncio.timeout`` on 3.11+, ``wait_for`` on
    3.10) and return its value.

    Raises:
        TimeoutError: the deadline passed first (the coroutine is cancelled).
    """
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await coro
    else:  # pragma: no cover
        return await asyncio.wait_for(coro, seconds)


def _error_text(error: str | None, body: bytes, encoding: str | None) -> str | None:
    """``"HTTP 400: <the first 160 characters of the answer>"`` (the status alone for a compressed or empty
    answer)."""
    if _encoding(encoding) is not None:
        return error
    snippet = " ".join(body[:160].decode("utf-8", "replace").split())
    return f"{error}: {snippet}" if snippet else error


class HttpBackend:
    """Sends :class:`RequestSpec` requests to ``target`` (see :class:`diffbench.load.client.base.Backend`).

    Image payload checks run in ``check_workers`` spawned processes (default ``min(2, cpu count)``, see
    :mod:`diffbench.load.client.checker`); with ``--no-decode`` only bodies above
    :data:`NO_DECODE_INLINE_BYTES` do (the JSON parse of a small body costs the loop less than the
    hand-off). Video downloads are checked on the loop: :func:`check_video` reads the MP4 box headers only
    (measured ~11 us for a 33-frame clip and for a 20 MB 81-frame one), cheaper than copying the file to a
    worker; with sanity on and PyAV installed a clip that passes is then decoded in the workers
    (:func:`~diffbench.load.client.payload.check_video_frames`: black frames, pixel hash).
    """

    def __init__(self, target: Target, *, check_workers: int | None = None) -> None:
        self.target = target
        self._session: aiohttp.ClientSession | None = None
        self._checker: PayloadChecker | None = None
        self._check_workers = default_workers() if check_workers is None else check_workers
        self._images_url = target.base_url + image_path(target.dialect)
        self._edits_url = target.base_url + image_path(target.dialect, edit=True)
        self._videos_url = target.base_url + VIDEOS_PATH
        self.deleted_jobs: list[str] = []
        self.abandoned_jobs: list[str] = []
        self._sent = 0
        self.abandon_enabled = True
        """False while the warm-up runs: ``--abandon-after`` applies to measured requests only."""
        self._video_frames = target.sanity and target.decode_payload and av_available()

    @property
    def check_mode(self) -> str:
        """One line for the report's conditions: how image payloads were checked."""
        where = f"{self._check_workers} worker process{'es' if self._check_workers != 1 else ''}"
        if self.target.decode_payload:
            checks = "base64, PNG, size" + (", black/constant pixels and pixel hashes" if self.target.sanity else "")
            video = ""
            if self.target.sanity:
                video = ("; video frames decoded there too (black frames, pixel hash)" if self._video_frames
                         else "; video frames not checked (PyAV is not installed)")
            held = "; held until each run's last timed answer (--defer-checks)" if self.target.defer_checks else ""
            return f"decoded in {where} ({checks}; never on the measuring event loop{held}){video}"
        return (f"not decoded (--no-decode): JSON shape and image count read on the event loop up to "
                f"{NO_DECODE_INLINE_BYTES // 1024} KiB, in {where} above")

    def hold_checks(self) -> None:
        """Runner hook at a run's start: with ``Target.defer_checks``, hold the payload checks."""
        if self.target.defer_checks and self._checker is not None:
            self._checker.hold()

    def release_checks(self) -> None:
        """Runner hook after a run's last timed answer (or a stop): hand the held checks to the workers."""
        if self._checker is not None:
            self._checker.release()

    @property
    def checker(self) -> PayloadChecker | None:
        """The payload checker (None before :meth:`start` and after :meth:`close`)."""
        return self._checker

    async def start(self) -> None:
        """Open the session and start (and warm) the payload-check workers.

        Raises:
            MissingDependencyError: payload decoding is on and Pillow is not installed.
        """
        import aiohttp

        if self.target.decode_payload:
            require("PIL", "serve")
        headers = dict(self.target.headers)
        given = {k.lower() for k in headers}
        if "accept-encoding" not in given:  # a compressed answer would have to be inflated somewhere
            headers["Accept-Encoding"] = "identity"
        if self.target.api_key is not None and "authorization" not in given:
            headers["Authorization"] = f"Bearer {self.target.api_key.get_secret_value()}"
        tls: ssl.SSLContext | bool = tls_context(self.target.verify_tls) \
            if self.target.base_url.startswith("https://") else True
        t = self.target.timeout_s
        connector = aiohttp.TCPConnector(limit=self.target.max_connections or 0, limit_per_host=0,
                                         keepalive_timeout=KEEPALIVE_S, ssl=tls)
        self._session = aiohttp.ClientSession(
            connector=connector, headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None,
                                          sock_connect=min(t, CONNECT_TIMEOUT_S)),
            read_bufsize=READ_BUFSIZE, auto_decompress=False, trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(), raise_for_status=False,
        )
        checker = PayloadChecker(self._check_workers)
        try:
            await checker.start()
        except BaseException:
            await self._session.close()
            self._session = None
            await checker.close()
            raise
        self._checker = checker

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        checker, self._checker = self._checker, None
        if checker is not None:
            await checker.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("HttpBackend.start() was not called")
        return self._session

    def label(self, spec: RequestSpec) -> str:
        """The breakdown key of ``spec`` for this dialect (see :func:`~diffbench.load.client.dialects.shape_label`)."""
        return shape_label(spec, self.target.dialect)

    def abandons(self, k: int) -> bool:
        """Whether the ``k``-th request (0-based) is one the client gives up on (module docstring)."""
        t = self.target
        return t.abandon_after_s is not None and (k * GOLDEN) % 1.0 < t.abandon_fraction

    async def execute(self, spec: RequestSpec, attempt: Attempt, now: Now) -> None:
        after = self.target.abandon_after_s if self.abandon_enabled else None
        if after is not None:
            k, self._sent = self._sent, self._sent + 1
        if after is None or not self.abandons(k):
            await self._execute(spec, attempt, now)
            return
        try:
            await asyncio.wait_for(self._execute(spec, attempt, now), after)  # _execute raises no TimeoutError
        except (TimeoutError, asyncio.TimeoutError):
            attempt.done_s = now()
            attempt.outcome, attempt.status, attempt.body = "abandoned", None, None
            what = "video job" if spec.kind == "video" else "connection closed"
            attempt.error = f"abandoned by the client after --abandon-after {after:g} s ({what})"
            if attempt.job_id is not None:
                await self._delete_job(self._client(), attempt)

    async def _execute(self, spec: RequestSpec, attempt: Attempt, now: Now) -> None:
        body = self._video if spec.kind == "video" else self._image
        session = self._client()
        try:
            await with_deadline(body(session, spec, attempt, now), self.target.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure is data
            c = classify_exception(exc)
            attempt.done_s = now()
            attempt.outcome, attempt.error = c.outcome, c.error
            attempt.body = None
            if c.outcome == "timeout" and type(exc) in (TimeoutError, asyncio.TimeoutError):  # the deadline
                attempt.error = f"no complete response within --timeout {self.target.timeout_s:g} s"
            elif c.outcome == "timeout":  # the TCP connect bound
                attempt.error = f"{c.error} (TCP connect bounded by {min(self.target.timeout_s, CONNECT_TIMEOUT_S):g} s)"
            if attempt.job_id is not None:  # the client gave up on a job the server may still run
                await self._abandon(session, attempt)

    async def _image(self, session: aiohttp.ClientSession, spec: RequestSpec, a: Attempt, now: Now) -> None:
        chat = self.target.dialect == "vllm-omni-chat"
        url, payload = self._images_url, {"headers": JSON_HEADERS}
        if spec.kind == "edit" and not chat:
            url, payload = self._edits_url, {"data": self._edit_form(spec)}
        else:
            payload["data"] = json.dumps(chat_body(spec) if chat else image_body(spec, self.target.dialect)).encode()
        a.sent_s = now()
        async with session.post(url, allow_redirects=False, **payload) as resp:  # type: ignore[arg-type]
            a.first_byte_s = now()
            body = await resp.read()
            a.done_s = now()
        c = classify_status(resp.status, resp.headers.get("Retry-After"),
                            redirect_target(url, resp.headers.get("Location")))
        a.outcome, a.status, a.retry_after_s = c.outcome, c.status, c.retry_after_s
        if c.outcome == "ok":
            a.body = body
            a.body_encoding = _encoding(resp.headers.get("Content-Encoding"))
        else:  # the server's own explanation (e.g. "width 100 is not a multiple of 8") is kept
            a.error = _error_text(c.error, body, resp.headers.get("Content-Encoding"))

    def _edit_form(self, spec: RequestSpec) -> aiohttp.FormData:
        """The multipart form of one edit: the text fields, the file ``image`` and, when given, ``mask``
        (the bytes are read once per process and cached, :func:`~diffbench.load.client.dialects.input_bytes`)."""
        import os

        import aiohttp

        form = aiohttp.FormData(default_to_multipart=True)
        for k, v in edit_fields(spec, self.target.dialect).items():
            form.add_field(k, str(v).lower() if isinstance(v, bool) else str(v))
        for name, path in (("image", spec.image), ("mask", spec.mask)):
            if path is not None:
                form.add_field(name, input_bytes(path), filename=os.path.basename(path),
                               content_type=mime_type(path))
        return form

    async def _get(self, session: aiohttp.ClientSession, url: str) -> tuple[int, Mapping[str, str], bytes]:
        """GET ``url``: (status, headers, body with its Content-Encoding removed)."""
        async with session.get(url, allow_redirects=False) as resp:
            data = await resp.read()
        return resp.status, resp.headers, decode_body(data, resp.headers.get("Content-Encoding"))

    async def _video(self, session: aiohttp.ClientSession, spec: RequestSpec, a: Attempt, now: Now) -> None:
        import aiohttp

        fields = video_fields(spec, self.target.dialect)
        if video_uses_form(self.target.dialect):
            form = aiohttp.FormData(default_to_multipart=True)  # the videos API takes multipart/form-data
            for k, v in fields.items():
                form.add_field(k, str(v).lower() if isinstance(v, bool) else str(v))
            payload: dict[str, object] = {"data": form}
        else:
            payload = {"data": json.dumps(fields).encode(), "headers": JSON_HEADERS}
        a.sent_s = now()
        async with session.post(self._videos_url, allow_redirects=False, **payload) as resp:  # type: ignore[arg-type]
            a.first_byte_s = now()
            data = await resp.read()
        data = decode_body(data, resp.headers.get("Content-Encoding"))
        if not self._status_ok(resp.status, resp.headers, data, a, now, self._videos_url):
            return
        obj, err = parse_json(data)
        job = None if obj is None else obj.get("id")
        if obj is None or not isinstance(job, (str, int)):
            a.done_s = now()
            a.outcome, a.error = "invalid_payload", err or "video create response has no job id"
            return
        a.job_id = str(job)
        status = str(obj.get("status", ""))
        t = self.target
        interval = min(t.poll_first_s, t.poll_interval_s)
        next_poll = now()
        last_unfinished = a.sent_s  # the send of the last request that saw the job unfinished
        job_url = f"{self._videos_url}/{a.job_id}"
        while status != "completed":
            if status in TERMINAL_FAILED:
                a.done_s = now()
                detail = obj.get("error") if obj is not None else None
                a.outcome, a.error = "http_error", f"video job {a.job_id} {status}: {detail}"[:300]
                return
            next_poll += interval  # absolute cadence: polling overhead does not stretch the interval
            interval = min(interval * t.poll_backoff, t.poll_interval_s)
            await asyncio.sleep(max(0.0, next_poll - now()))
            poll_sent = now()
            code, headers, data = await self._get(session, job_url)
            if not self._status_ok(code, headers, data, a, now, job_url):
                return
            obj, err = parse_json(data)
            if obj is None:
                a.done_s = now()
                a.outcome, a.error = "invalid_payload", f"video status: {err}"
                return
            status = str(obj.get("status", ""))
            if status != "completed":
                last_unfinished = poll_sent
        if obj is not None:
            a.stages_s, a.peak_memory_bytes = server_timings(obj)
            nf = obj.get("num_frames")
            a.reported_frames = nf if isinstance(nf, int) and not isinstance(nf, bool) else None
        async with session.get(f"{job_url}/content", allow_redirects=False) as resp:
            content = await resp.read()
            a.done_s = now()
        if last_unfinished is not None:
            a.poll_granularity_s = a.done_s - last_unfinished
        if self._status_ok(resp.status, resp.headers, content, a, now, f"{job_url}/content"):
            a.body = content
            a.body_encoding = _encoding(resp.headers.get("Content-Encoding"))

    def _status_ok(self, status: int, headers: Mapping[str, str], data: bytes, a: Attempt, now: Now,
                   url: str) -> bool:
        c = classify_status(status, headers.get("Retry-After"), redirect_target(url, headers.get("Location")))
        a.status = c.status
        if c.outcome == "ok":
            return True
        a.done_s = now()
        a.outcome, a.retry_after_s = c.outcome, c.retry_after_s
        a.error = _error_text(c.error, data, None)
        return False

    async def _abandon(self, session: aiohttp.ClientSession, a: Attempt) -> None:
        """A job the client gave up on: left running unless the user asked to delete it."""
        assert a.job_id is not None
        if not self.target.delete_abandoned:
            self.abandoned_jobs.append(a.job_id)
            a.error = f"{a.error}; video job {a.job_id} left on the server (not deleted)"
            return
        await self._delete_job(session, a, "--delete-abandoned, ")

    async def _delete_job(self, session: aiohttp.ClientSession, a: Attempt, why: str = "") -> None:
        """DELETE ``a``'s video job (best effort: a failure is written into ``a.error``, never raised)."""
        assert a.job_id is not None
        try:
            code = await asyncio.wait_for(self._delete(session, f"{self._videos_url}/{a.job_id}"),
                                          DELETE_TIMEOUT_S)
            self.deleted_jobs.append(a.job_id)
            a.error = f"{a.error}; video job {a.job_id} deleted ({why}HTTP {code})"
        except Exception as exc:  # the delete is best effort; its failure is reported, not raised
            a.error = f"{a.error}; deleting video job {a.job_id} failed: {type(exc).__name__}"

    @staticmethod
    async def _delete(session: aiohttp.ClientSession, url: str) -> int:
        async with session.delete(url, allow_redirects=False) as resp:
            await resp.read()
        return resp.status

    async def abandon_cancelled(self, a: Attempt) -> None:
        """Called by the runner for a job cancelled at the end of a run (Ctrl-C)."""
        if a.job_id is not None:
            await self._abandon(self._client(), a)

    async def check(self, spec: RequestSpec, attempt: Attempt) -> None:
        body, attempt.body = attempt.body, None
        encoding, attempt.body_encoding = attempt.body_encoding, None
        if spec.reference is not None:
            attempt.reference = spec.reference.label
        if attempt.outcome != "ok" or body is None:
            return
        s = spec.shape
        try:
            if spec.kind != "video":
                sanity = self.target.sanity and self.target.decode_payload
                if spec.reference is not None:  # a replayed reference: checked, sanity-checked and scored
                    if self._checker is None:
                        raise RuntimeError("HttpBackend.start() was not called")
                    call = self._checker.run(
                        score_images, body, s.width, s.height, s.n, self.target.dialect == "vllm-omni-chat",
                        encoding, spec.reference.files, sanity, size=len(body))
                    del body  # the checker holds the only reference (see checker.PayloadChecker.run)
                    verdict = await call
                    attempt.quality = verdict.quality
                else:
                    args = (body, s.width, s.height, s.n, self.target.decode_payload, encoding, sanity)
                    fn = check_chat if self.target.dialect == "vllm-omni-chat" else check_images
                    if not self.target.decode_payload and encoding is None and len(body) <= NO_DECODE_INLINE_BYTES:
                        verdict = fn(*args)  # JSON only, small: cheaper here than the hand-off
                    elif self._checker is None:
                        raise RuntimeError("HttpBackend.start() was not called")
                    else:
                        call = self._checker.run(fn, *args, size=len(body))
                        del body, args  # the checker holds the only reference
                        verdict = await call
                attempt.stages_s, attempt.peak_memory_bytes = verdict.stages_s, verdict.peak_memory_bytes
                if verdict.ok and verdict.hashes:
                    attempt.answer_hashes = verdict.hashes
                    sent_seed = spec.seed if sends_steps_and_frames(self.target.dialect) else None
                    attempt.request_key = request_key(spec.prompt, sent_seed, spec.image, spec.mask)
            else:
                frames = s.frames if sends_steps_and_frames(self.target.dialect) else None
                if frames is not None and attempt.reported_frames not in (None, frames):
                    verdict = Verdict(False, f"video job reports {attempt.reported_frames} frames, requested "
                                             f"{frames}")
                else:
                    verdict = check_video(decode_body(body, encoding), frames)
                if verdict.ok and spec.reference is not None:  # a replayed video reference: scored per frame
                    if self._checker is None:
                        raise RuntimeError("HttpBackend.start() was not called")
                    verdict = await self._checker.run(score_video, body, encoding, spec.reference.files[0],
                                                      self.target.sanity and self.target.decode_payload,
                                                      size=len(body))
                    attempt.quality = verdict.quality
                    if verdict.ok and verdict.hashes:
                        attempt.answer_hashes = verdict.hashes
                        attempt.request_key = request_key(spec.prompt, spec.seed if sends_steps_and_frames(
                            self.target.dialect) else None)
                elif verdict.ok and self._video_frames:
                    if self._checker is None:
                        raise RuntimeError("HttpBackend.start() was not called")
                    verdict = await self._checker.run(check_video_frames, body, encoding, size=len(body))
                    if verdict.ok and verdict.hashes:
                        attempt.answer_hashes = verdict.hashes
                        attempt.request_key = request_key(spec.prompt, spec.seed if sends_steps_and_frames(
                            self.target.dialect) else None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a checker failure is counted, never dropped
            verdict = Verdict(False, f"payload check failed in the client: {type(exc).__name__}: {exc}"[:300])
        if not verdict.ok:
            attempt.outcome, attempt.error = "invalid_payload", verdict.error
            attempt.invalid_kind = verdict.invalid_kind
