"""The HTTP engine: a running image service (``diffbench serve``, SGLang, vLLM-Omni) behind the Engine protocol.

``bench --engine http --url URL`` and ``sweep --engine http`` run the single-request protocol against it:
one request at a time, timed at the client. Request bodies come from the load client's dialects
(:func:`diffbench.load.client.dialects.image_body`: ``openai``, ``vllm-omni``, ``sglang``) and the
server-reported stage durations and peak memory from :func:`~diffbench.load.client.dialects.server_timings`,
so ``bench`` and ``load`` send and read the same fields. The transport is the load client's library,
aiohttp (a core dependency, so ``pip install diffbench`` runs it): one ``ClientSession`` (keep-alive, no
proxies from the environment, no redirects followed, no cookies) on an event loop the engine owns; the
synchronous methods run it to completion (call them from a thread without a running event loop, as bench and
sweep do).

Deadlines: ``timeout_s`` is a *total* deadline per request, enforced by the client with one asyncio deadline
around connect, send and the whole body (a service that sends its headers and then drips its body fails at
the deadline, it is never a sample); aiohttp's own timeouts are off except the TCP connect, bounded by
``min(connect_timeout_s, timeout_s)``. ``GET /v1/models`` at start has the total deadline
``min(connect_timeout_s, timeout_s)``.

Timing: :meth:`HttpEngine.generate` reports ``extra["client_latency_s"]``, from just before the request is
sent to the last byte of the response, before the JSON is parsed and the PNGs decoded (as ``load`` times
``done_s``); the bench protocol uses it as the run's latency. Server-reported stages fill
:class:`~diffbench.engines.base.StageTimes` (``text_encode``, ``image_encode``, ``denoise``, ``vae_decode``) when
present (:func:`stage_times`);
every reported stage, including ``service_time`` and ``queue_wait``, is kept in ``extra`` as
``server_<name>_s``. Peak memory is the server's ``peak_memory_bytes`` (or ``peak_memory_mb`` × 2**20).

Errors are data: a non-2xx answer (a redirect with its ``Location``), a malformed payload or a request past
``timeout_s`` raises :class:`~diffbench.engines.base.RequestFailed` with the status, the server's message and
the load client's outcome name (``timeout``, ``connection_error``, ``rejected``, ``http_error``,
``invalid_payload``); the protocol counts it as a failed run and goes on. A service that does not answer at
start is an :class:`~diffbench.errors.InputError` naming the URL.

Images only: a video model behind the videos API is measured with ``load`` (asynchronous jobs).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import time
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import numpy as np

from diffbench.engines.base import (
    CLIENT_LATENCY,
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    MemoryStats,
    RequestFailed,
    StageTimes,
)
from diffbench.engines.config import EngineConfig, HttpParams
from diffbench.errors import InputError, ShapeError, UsageError, require

T = TypeVar("T")
MODELS_PATH = "/v1/models"
MAX_N = 10  # images per request the load client's workload accepts (OpenAI's n <= 10)
_MEMORY_KINDS = ("cuda", "cpu-rss", "sim")


def check_url(url: str, option: str = "--url") -> str:
    """The service base URL, checked as the load client checks ``--url`` (:class:`Target`).

    Raises:
        UsageError: not ``http(s)://host[:port][/path]``, a bad port, a query or fragment.
    """
    from pydantic import ValidationError

    from diffbench.load.client.http import Target

    try:
        return Target(base_url=url, timeout_s=1.0).base_url
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise UsageError(f"{option} {url!r}: {msg}; give the service's base URL, e.g. http://127.0.0.1:8000") from None


def _snippet(body: bytes) -> str:
    text = body[:300].decode("utf-8", "replace")
    try:
        obj = json.loads(body)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:300]
        if isinstance(obj, dict) and isinstance(obj.get("detail"), str):
            return obj["detail"][:300]
    except (ValueError, UnicodeDecodeError):
        pass
    return " ".join(text.split())


def _session(connect_s: float) -> Any:
    """The one aiohttp session of an engine (call on its loop): keep-alive, no proxies from the environment,
    no cookies, identity bodies; every aiohttp timeout off but the TCP connect (``connect_s``): the total
    deadline is the caller's (:func:`~diffbench.load.client.http.with_deadline`)."""
    import aiohttp

    from diffbench.load.client.http import READ_BUFSIZE

    return aiohttp.ClientSession(
        headers={"Accept-Encoding": "identity"},
        timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=connect_s),
        read_bufsize=READ_BUFSIZE, auto_decompress=False, trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(), raise_for_status=False,
    )


async def _request(session: Any, method: str, url: str, deadline_s: float, json_body: object = None
                   ) -> tuple[int, Mapping[str, str], bytes, float]:
    """``method url`` under a total deadline: (status, headers, whole body, seconds from just before the send
    to the last body byte). Redirects are not followed.

    Raises:
        TimeoutError: no complete answer within ``deadline_s`` (connect, send and the whole body).
        aiohttp.ClientError, OSError: the transport failed.
    """
    from diffbench.load.client.http import JSON_HEADERS, with_deadline

    kwargs: dict[str, Any] = {"allow_redirects": False}
    if json_body is not None:
        kwargs.update(data=json.dumps(json_body).encode(), headers=JSON_HEADERS)

    async def go() -> tuple[int, Mapping[str, str], bytes, float]:
        t0 = time.perf_counter()
        async with session.request(method, url, **kwargs) as resp:
            body = await resp.read()
            took = time.perf_counter() - t0  # the last byte has arrived; nothing is parsed yet
        return resp.status, resp.headers, body, took

    return await with_deadline(go(), deadline_s)


def _no_answer(option: str, url: str, exc: BaseException, wait_s: float) -> InputError:
    """The one-line error of a service that does not answer (the OS's reason for a failed connect)."""
    import aiohttp

    if isinstance(exc, TimeoutError):
        detail = "timeout"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        detail = f"{type(exc.os_error).__name__}: {exc.os_error.strerror or exc.os_error}"
    else:
        detail = f"{type(exc).__name__}: {exc or 'no detail'}"
    return InputError(f"{option} {url}: no service answers ({detail}); start it or check the host and port "
                      f"(GET {MODELS_PATH} within {wait_s:g} s)")


def probe(url: str, timeout_s: float = 10.0, option: str = "--url") -> None:
    """Check that a service answers at ``url`` (``GET /v1/models``, any status) before work starts; ``timeout_s``
    is the total deadline (seconds).

    Raises:
        InputError: nothing answers within ``timeout_s`` seconds (connection refused, DNS, timeout).
    """
    import aiohttp

    async def go() -> None:
        async with _session(timeout_s) as session:
            await _request(session, "GET", url + MODELS_PATH, timeout_s)

    try:
        asyncio.run(go())
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise _no_answer(option, url, exc, timeout_s) from None


class HttpEngine:
    """Sends one image request at a time to ``config.http.url``; see the module docstring."""

    def __init__(self, config: EngineConfig) -> None:
        if config.http is None:
            raise UsageError("--engine http needs --url URL (the service's base URL, e.g. http://127.0.0.1:8000)")
        self.config = config
        self.params: HttpParams = config.http
        self.url = check_url(self.params.url)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None  # the aiohttp session, on self._loop
        self._info: EngineInfo | None = None
        self.card: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> EngineInfo:
        """Open the client and read ``GET /v1/models`` (model id, device, dtype, fingerprint when the
        service reports them; a service without the route is measured all the same).

        Raises:
            InputError: nothing answers at the URL (connection refused, DNS, timeout).
            MissingDependencyError: Pillow is not installed (``pip install 'diffbench[serve]'``).
        """
        import aiohttp

        require("PIL", "serve")
        p = self.params
        probe_s = min(p.connect_timeout_s, p.timeout_s)
        self.stop()
        self._loop = asyncio.new_event_loop()

        async def open_session() -> Any:
            return _session(probe_s)

        self._client = self._run(open_session())
        try:
            status, _, body, _ = self._run(_request(self._client, "GET", self.url + MODELS_PATH, probe_s))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self.stop()
            raise _no_answer("--url", self.url, exc, probe_s) from None
        cards = []
        if status == 200:
            try:
                data = json.loads(body).get("data")
                cards = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
            except (ValueError, AttributeError):
                cards = []
        card = cards[0] if cards else {}
        if self.params.model is not None:
            card = next((c for c in cards if c.get("id") == self.params.model), {"id": self.params.model})
        self.card = card

        def text(key: str) -> str | None:
            v = card.get(key)
            return v if isinstance(v, str) and v else None

        fp = card.get("fingerprint") if isinstance(card.get("fingerprint"), dict) else {}
        details = {"url": self.url, "dialect": p.dialect, "timeout_s": f"{p.timeout_s:g}"}
        for key in ("engine", "engine_version", "fingerprint_id"):
            if text(key):
                details[f"server_{key}"] = str(text(key))
        steps = card.get("default_steps")
        from diffbench import __version__

        self._info = EngineInfo(
            engine="http",
            engine_version=__version__,
            model=text("id") or "unknown",
            model_hash=fp.get("model_hash") if isinstance(fp.get("model_hash"), str) else None,
            pipeline_class=text("pipeline_class"),
            device=text("device") or "remote",
            dtype=text("dtype") or (fp.get("precision") if isinstance(fp.get("precision"), str) else "unknown"),
            attention_backend=str(fp.get("attention_backend") or "unknown"),
            compile=bool(fp.get("compile", False)),
            cache=str(fp.get("cache") or "unknown"),
            quantization=str(fp.get("quantization") or "none"),
            fused_projections=fp.get("fused_projections") is True,
            parallelism=str(fp.get("parallelism") or "unknown"),
            cfg="unknown (set by the service)",
            is_video=bool(card.get("is_video", False)),
            default_steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            details=details,
        )
        return self._info

    def fingerprint(self, env: Any) -> dict[str, object]:
        """The deployment fingerprint of the service: the one it reports in ``GET /v1/models``
        (``diffbench serve`` does: its own torch, diffusers and hardware), else one built from the model card
        with ``torch``/``diffusers`` None and ``hardware`` ``remote`` (the client's packages say nothing
        about the server's)."""
        from diffbench.engines.fingerprint import deployment_fingerprint

        reported = self.card.get("fingerprint")
        if isinstance(reported, dict) and reported:
            return dict(reported)
        fp = deployment_fingerprint(self.info(), env)
        return {**fp, "torch": None, "diffusers": None, "hardware": "remote"}

    def peek_info(self) -> EngineInfo:
        """What is known before connecting (an image service; the model named by ``--model`` or unknown), so
        that ``bench``'s preflight refuses a video request before the first connection."""
        from diffbench import __version__

        return EngineInfo(engine="http", engine_version=__version__, model=self.params.model or "unknown",
                          device="remote", details={"url": self.url, "dialect": self.params.dialect})

    def info(self) -> EngineInfo:
        if self._info is None:
            raise RuntimeError("HttpEngine.start() was not called")
        return self._info

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on the engine's own event loop."""
        if self._loop is None:
            coro.close()
            raise RuntimeError("HttpEngine.start() was not called")
        return self._loop.run_until_complete(coro)

    def stop(self) -> None:
        """Close the session and the engine's event loop (a request left by Ctrl-C is cancelled first)."""
        loop, client = self._loop, self._client
        self._loop = self._client = None
        if loop is None:
            return
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            if client is not None:
                loop.run_until_complete(client.close())
        finally:
            loop.close()

    # -- protocol -------------------------------------------------------------------------------
    def validate(self, request: GenerationRequest) -> None:
        """What the client can tell without the server: images only, ``batch`` <= 10 (OpenAI's ``n``).

        Raises:
            ShapeError: frames given (video), or a batch above 10.
        """
        if request.frames is not None or (self._info is not None and self._info.is_video):
            raise ShapeError(
                "frames: the http engine benches image services only (the images API); measure a video "
                "service with `diffbench load` (asynchronous jobs on /v1/videos)"
            )
        if request.batch > MAX_N:
            raise ShapeError(f"batch {request.batch}: the images API takes n <= {MAX_N} per request")

    def body(self, request: GenerationRequest) -> dict[str, object]:
        """The JSON body of ``request`` in this engine's dialect (the load client's :func:`image_body`)."""
        from diffbench.load.client.dialects import image_body
        from diffbench.load.client.workload import RequestSpec, ShapeMix

        shape = ShapeMix(width=request.width, height=request.height, steps=request.steps, n=request.batch,
                         guidance=request.guidance, negative_prompt=request.negative_prompt)
        model = self.params.model or (self._info.model if self._info and self._info.model != "unknown" else None)
        spec = RequestSpec(index=0, kind="image", prompt=request.prompt, shape=shape, seed=request.seed, model=model)
        return dict(image_body(spec, self.params.dialect))

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """POST the request, wait for the whole answer, decode its images.

        Returns:
            images (B, H, W, 3) uint8; stages and memory as the server reported them (None when it did not);
            ``extra``: ``client_latency_s`` and ``server_<stage>_s`` for every reported stage.

        Raises:
            RequestFailed: a transport error, a timeout (``timeout_s`` is the total deadline: connect, send and
                the whole body), a non-2xx status (a redirect names its target) or an invalid payload.
        """
        from diffbench.load.client.dialects import IMAGES_PATH, server_timings
        from diffbench.load.client.outcomes import classify_exception, classify_status, redirect_target

        if self._client is None:
            raise RuntimeError("HttpEngine.start() was not called")
        data = self.body(request)
        p = self.params
        try:
            code, headers, content, latency = self._run(
                _request(self._client, "POST", self.url + IMAGES_PATH, p.timeout_s, data))
        except Exception as exc:  # every transport failure is a failed run, classified as load does
            c = classify_exception(exc)
            if c.outcome == "timeout" and type(exc) is TimeoutError:  # the total deadline
                msg = f"no complete response within {p.timeout_s:g} s (--timeout: connect, send and the whole body)"
            elif c.outcome == "timeout":  # aiohttp's TCP connect bound
                msg = f"{c.error} (TCP connect bounded by {min(p.connect_timeout_s, p.timeout_s):g} s)"
            else:
                msg = c.error or type(exc).__name__
            raise RequestFailed(msg, status=None, outcome=c.outcome) from None
        c = classify_status(code, headers.get("Retry-After"),
                            redirect_target(self.url + IMAGES_PATH, headers.get("Location")))
        if c.outcome != "ok":
            snippet = _snippet(content)
            raise RequestFailed(f"{c.error}: {snippet}" if snippet else str(c.error), status=code, outcome=c.outcome)
        try:
            obj = json.loads(content)
        except ValueError:
            raise RequestFailed(f"HTTP {code}: the answer is not JSON", status=code,
                                outcome="invalid_payload") from None
        if not isinstance(obj, dict):
            raise RequestFailed("the answer is not a JSON object", status=code, outcome="invalid_payload")
        self._check_used(obj, request, code)
        images = self._decode(obj, request)
        stages, peak = server_timings(obj)
        extra = {CLIENT_LATENCY: latency, **{f"server_{k}_s": v for k, v in stages.items()}}
        st = stage_times(stages, latency)
        kind = obj.get("memory_kind")
        mem = None if peak is None else MemoryStats(
            kind=kind if kind in _MEMORY_KINDS else "server", peak_allocated_bytes=peak  # type: ignore[arg-type]
        )
        return GenerationResult(images=images, stages=st, memory=mem, extra=extra)

    def _check_used(self, obj: dict[str, Any], request: GenerationRequest, status: int) -> None:
        """A service that reports the steps or seed it used must have used the ones sent (vLLM-Omni may
        ignore an unsupported parameter silently; the measurement would then be of another workload)."""
        from diffbench.load.client.dialects import sends_steps_and_frames

        if not sends_steps_and_frames(self.params.dialect):
            return
        for field, sent in (("num_inference_steps", request.steps), ("seed", request.seed)):
            used = obj.get(field)
            if isinstance(used, int) and not isinstance(used, bool) and used != sent:
                raise RequestFailed(f"the service reports {field}={used}, but {sent} was sent: it ignored the "
                                    f"parameter, so this is not the requested workload", status=status,
                                    outcome="invalid_payload")

    @staticmethod
    def _decode(obj: dict[str, Any], request: GenerationRequest) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        items = obj.get("data")
        if not isinstance(items, list) or len(items) != request.batch:
            got = len(items) if isinstance(items, list) else "no"
            raise RequestFailed(f"invalid payload: {got} images in data[], requested n={request.batch}", status=200, outcome="invalid_payload")
        out = []
        for i, item in enumerate(items):
            b64 = item.get("b64_json") if isinstance(item, dict) else None
            if not isinstance(b64, str):
                raise RequestFailed(f"invalid payload: data[{i}].b64_json missing (response_format=b64_json)", status=200, outcome="invalid_payload")
            try:
                with Image.open(io.BytesIO(base64.b64decode(b64, validate=True))) as img:
                    arr = np.asarray(img.convert("RGB"))
            except (binascii.Error, ValueError, UnidentifiedImageError, OSError) as exc:
                raise RequestFailed(f"invalid payload: data[{i}] does not decode ({exc})"[:300], status=200, outcome="invalid_payload") from None
            if arr.shape[:2] != (request.height, request.width):
                raise RequestFailed(
                    f"invalid payload: data[{i}] is {arr.shape[1]}x{arr.shape[0]}, requested "
                    f"{request.width}x{request.height} (WIDTHxHEIGHT)", status=200, outcome="invalid_payload")
            out.append(arr)
        return np.stack(out)

    def sync(self) -> None:
        """Nothing is pending: :meth:`generate` returns after the whole answer has arrived."""

    def clock(self) -> int:
        return time.perf_counter_ns()


_TIMED = ("text_encode", "image_encode", "denoise", "vae_decode")


def stage_times(stages: dict[str, float], latency: float) -> StageTimes | None:
    """The stage split of one answer from the server's stages (seconds by name, :func:`server_timings`):
    text encode, image encode (an edit's input picture), denoise and VAE decode as reported (0 when absent),
    ``other`` = the client ``latency`` minus those (queueing, encoding, network; never below 0),
    ``total_s`` = ``latency``. None when the server reports none of text encode, denoise, VAE decode."""
    if not {"text_encode", "denoise", "vae_decode"} & set(stages):
        return None
    enc, img, den, dec = (stages.get(k, 0.0) for k in _TIMED)
    return StageTimes(text_encode_s=enc, image_encode_s=img, denoise_s=den, vae_decode_s=dec,
                      other_s=max(0.0, latency - enc - img - den - dec), total_s=latency)
