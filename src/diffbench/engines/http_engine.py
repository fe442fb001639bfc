"""The HTTP engine: a running image service (``diffbench serve``, SGLang, vLLM-Omni) behind the Engine protocol.

``bench --engine http --url URL`` and ``sweep --engine http`` run the single-request protocol against it:
one request at a time, timed at the client. Request bodies come from the load client's dialects
(:func:`diffbench.load.client.dialects.image_body`: ``openai``, ``vllm-omni``, ``sglang``) and the
server-reported stage durations and peak memory from :func:`~diffbench.load.client.dialects.server_timings`,
so ``bench`` and ``load`` send and read the same fields. The transport is one ``httpx.Client`` (keep-alive,
no proxies from the environment, no redirects followed).

Timing: :meth:`HttpEngine.generate` reports ``extra["client_latency_s"]``, from just before the request is
sent to the last byte of the response, before the JSON is parsed and the PNGs decoded (as ``load`` times
``done_s``); the bench protocol uses it as the run's latency. Server-reported stages fill
:class:`~diffbench.engines.base.StageTimes` (``text_encode``, ``image_encode``, ``denoise``, ``vae_decode``) when
present (:func:`stage_times`);
every reported stage, including ``service_time`` and ``queue_wait``, is kept in ``extra`` as
``server_<name>_s``. Peak memory is the server's ``peak_memory_bytes`` (or ``peak_memory_mb`` × 2**20).

Errors are data: a non-2xx answer, a malformed payload or a request past ``timeout_s`` raises
:class:`~diffbench.engines.base.RequestFailed` with the status and the server's message (the protocol counts
it as a failed run and goes on). A service that does not answer at start is an
:class:`~diffbench.errors.InputError` naming the URL.

Images only: a video model behind the videos API is measured with ``load`` (asynchronous jobs).
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from typing import Any

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
        import json

        obj = json.loads(body)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:300]
        if isinstance(obj, dict) and isinstance(obj.get("detail"), str):
            return obj["detail"][:300]
    except (ValueError, UnicodeDecodeError):
        pass
    return " ".join(text.split())


def probe(url: str, timeout_s: float = 10.0, option: str = "--url") -> None:
    """Check that a service answers at ``url`` (``GET /v1/models``, any status) before work starts.

    Raises:
        InputError: nothing answers within ``timeout_s`` seconds (connection refused, DNS, timeout).
    """
    httpx = require("httpx", "serve")
    try:
        with httpx.Client(base_url=url, timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
            client.get(MODELS_PATH)
    except httpx.HTTPError as exc:
        raise InputError(
            f"{option} {url}: no service answers ({type(exc).__name__}: {exc or 'no detail'}); start it "
            f"or check the host and port (GET {MODELS_PATH} within {timeout_s:g} s)"
        ) from None


class HttpEngine:
    """Sends one image request at a time to ``config.http.url``; see the module docstring."""

    def __init__(self, config: EngineConfig) -> None:
        if config.http is None:
            raise UsageError("--engine http needs --url URL (the service's base URL, e.g. http://127.0.0.1:8000)")
        self.config = config
        self.params: HttpParams = config.http
        self.url = check_url(self.params.url)
        self._client: Any = None
        self._info: EngineInfo | None = None
        self.card: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> EngineInfo:
        """Open the client and read ``GET /v1/models`` (model id, device, dtype, fingerprint when the
        service reports them; a service without the route is measured all the same).

        Raises:
            InputError: nothing answers at the URL (connection refused, DNS, timeout).
            MissingDependencyError: httpx or Pillow is not installed.
        """
        httpx = require("httpx", "serve")
        require("PIL", "serve")
        p = self.params
        self._client = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(p.timeout_s, connect=min(p.connect_timeout_s, p.timeout_s)),
            trust_env=False,
            follow_redirects=False,
            headers={"Accept-Encoding": "identity"},
        )
        try:
            probe_s = min(p.connect_timeout_s, p.timeout_s)
            resp = self._client.get(MODELS_PATH, timeout=httpx.Timeout(probe_s))
        except httpx.HTTPError as exc:
            self.stop()
            raise InputError(
                f"--url {self.url}: no service answers ({type(exc).__name__}: {exc or 'no detail'}); start it "
                f"or check the host and port (GET {MODELS_PATH} within {min(p.connect_timeout_s, p.timeout_s):g} s)"
            ) from None
        cards = []
        if resp.status_code == 200:
            try:
                data = resp.json().get("data")
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
        from diffbench.core.fingerprint import deployment_fingerprint

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

    def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

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
            RequestFailed: a transport error, a timeout, a non-2xx status or an invalid payload.
        """
        import httpx

        from diffbench.load.client.dialects import IMAGES_PATH, server_timings

        if self._client is None:
            raise RuntimeError("HttpEngine.start() was not called")
        data = self.body(request)
        t0 = time.perf_counter()
        try:
            resp = self._client.post(IMAGES_PATH, json=data)
        except httpx.TimeoutException as exc:
            raise RequestFailed(
                f"no complete response within {self.params.timeout_s:g} s ({type(exc).__name__})", status=None
            ) from None
        except httpx.HTTPError as exc:
            raise RequestFailed(f"{type(exc).__name__}: {exc or 'no detail'}", status=None) from None
        latency = time.perf_counter() - t0  # httpx has read the whole body: the last byte has arrived
        if not 200 <= resp.status_code < 300:
            raise RequestFailed(f"HTTP {resp.status_code}: {_snippet(resp.content)}", status=resp.status_code)
        try:
            obj = resp.json()
        except ValueError:
            raise RequestFailed(f"HTTP {resp.status_code}: the answer is not JSON", status=resp.status_code) from None
        if not isinstance(obj, dict):
            raise RequestFailed("the answer is not a JSON object", status=resp.status_code)
        self._check_used(obj, request, resp.status_code)
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
                                    f"parameter, so this is not the requested workload", status=status)

    @staticmethod
    def _decode(obj: dict[str, Any], request: GenerationRequest) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        items = obj.get("data")
        if not isinstance(items, list) or len(items) != request.batch:
            got = len(items) if isinstance(items, list) else "no"
            raise RequestFailed(f"invalid payload: {got} images in data[], requested n={request.batch}", status=200)
        out = []
        for i, item in enumerate(items):
            b64 = item.get("b64_json") if isinstance(item, dict) else None
            if not isinstance(b64, str):
                raise RequestFailed(f"invalid payload: data[{i}].b64_json missing (response_format=b64_json)", status=200)
            try:
                with Image.open(io.BytesIO(base64.b64decode(b64, validate=True))) as img:
                    arr = np.asarray(img.convert("RGB"))
            except (binascii.Error, ValueError, UnidentifiedImageError, OSError) as exc:
                raise RequestFailed(f"invalid payload: data[{i}] does not decode ({exc})"[:300], status=200) from None
            if arr.shape[:2] != (request.height, request.width):
                raise RequestFailed(
                    f"invalid payload: data[{i}] is {arr.shape[1]}x{arr.shape[0]}, requested "
                    f"{request.width}x{request.height} (WIDTHxHEIGHT)", status=200)
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
