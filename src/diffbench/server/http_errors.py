"""HTTP error bodies and the mapping of diffbench exceptions to status codes.

Every error answers ``{"error": {"message", "type", "param", "code"}}`` (the OpenAI shape, which the
``openai`` client surfaces as the exception message).

Status (``code``) and when. Validation errors answer **400** as OpenAI's API does (not 422), with
``type: invalid_request_error`` and ``param`` naming the request field (``"size"``, ``"n"``; never a
JSON offset); a body that is not JSON has ``param: null``.

- 400 (``invalid_size``, ``invalid_shape``, ``invalid_body``, ``invalid_value``, ``unsupported_parameter``,
  ``limit_exceeded``): a malformed ``size``, a shape the engine cannot take (ShapeError), a body that is
  not a JSON object, a field out of range or of the wrong type (steps, n, guidance, prompt length, empty
  prompt), an unsupported field, a request above the service's ``--max-pixels``/``--max-steps``.
- 404 (``model_not_found``, ``not_found``, ``not_ready``, ``expired``): another model, an unknown video id
  or path (the message lists every route the app serves), video content requested before the job
  completed, a ``response_format=url`` file past its ``serve --url-ttl``. 405 (``method_not_allowed``).
- 429 (``overloaded``): admission control; the ``Retry-After`` header gives seconds.
- 500 (``generation_failed``): the generation raised; the message carries the reason. The service
  keeps serving.
- 503 (``unavailable``): the engine is not started yet or the service is shutting down.
- 504 (``timeout``): the request did not finish within ``serve --request-timeout`` seconds of arrival.
- 499 (``cancelled``, never seen by the client): the client disconnected before its answer, or its video
  job was deleted while it ran (a running generation stops at its next denoising step); counted only.
- 507 (``out_of_memory``): the device ran out of memory for this request ("out of memory at WxH, ...").
  The service keeps serving (the single-device contract: docs/reference/http-routes.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from diffbench.errors import DeviceOutOfMemory, ShapeError

if TYPE_CHECKING:
    from fastapi import Request
    from fastapi.responses import JSONResponse

OOM_STATUS = 507
TIMEOUT_STATUS = 504
CANCELLED_STATUS = 499  # nginx's "client closed request": the client went away before the answer
TRAFFIC_HEADER = "x-diffbench-traffic"
GENERATION_PATHS = ("/v1/images/generations", "/v1/images/edits", "/v1/images/variations", "/v1/chat/completions")
"""Routes whose every answer (any status) is one counted generation."""


def traffic_of(value: str | None) -> str:
    """The ``traffic`` class of a request from its ``X-Diffbench-Traffic`` header: ``probe`` or ``user``
    (any other value, or none, is user traffic: a client cannot hide its requests from the SLO series)."""
    return "probe" if value is not None and value.strip().lower() == "probe" else "user"


class APIError(Exception):
    """An error answer: status, message (names the field and the fix), OpenAI ``param`` and ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str = "invalid_value",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        if self.status == 429:
            return "rate_limit_error"
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def from_generation_error(exc: BaseException) -> APIError:
    """Map a failed generation to its answer (see the module table)."""
    from diffbench.engines.cancel import Cancelled
    from diffbench.server.worker import ShuttingDown

    if isinstance(exc, Cancelled):  # nobody waits for it but a video job's status
        if exc.reason == "drain":
            return APIError(503, f"{exc}: the service stopped; retry on another instance", code="unavailable")
        return APIError(CANCELLED_STATUS, str(exc), code="cancelled")
    if isinstance(exc, DeviceOutOfMemory):
        return APIError(OOM_STATUS, str(exc), code="out_of_memory")
    if isinstance(exc, ShapeError):
        return APIError(400, f"size: {api_wording(str(exc))}", param="size", code="invalid_shape")
    if isinstance(exc, ShuttingDown):
        return APIError(503, str(exc), code="unavailable")
    return APIError(500, f"generation failed: {type(exc).__name__}: {exc}", code="generation_failed")


# CLI flags an engine's message may name -> the API field a client sends instead.
_FLAG_TO_FIELD = {
    "--width": "width",
    "--height": "height",
    "--size": "size",
    "--shapes": "size",
    "--frames": "num_frames",
    "--steps": "num_inference_steps",
    "--batch": "n",
    "--guidance": "guidance_scale",
}
_FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def api_wording(message: str) -> str:
    """An engine message worded for HTTP clients: CLI flags (``--width``) become API field names."""
    return _FLAG.sub(lambda m: _FLAG_TO_FIELD.get(m.group(0), m.group(0).removeprefix("--")), message)


def outcome_of(status: int) -> str:
    """The ``outcome`` label of ``diffusion_requests_total`` for an HTTP status."""
    if status < 400:
        return "ok"
    special = {
        404: "not_found",
        429: "rejected",
        503: "unavailable",
        OOM_STATUS: "oom",
        TIMEOUT_STATUS: "timeout",
        CANCELLED_STATUS: "cancelled",
    }
    if status in special:
        return special[status]
    return "invalid" if status < 500 else "error"


def _field_name(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def validation_message(errors: list[dict[str, object]]) -> tuple[str, str | None]:
    """One readable message from pydantic errors: ``field: problem (got value)``; and the first field.

    A JSON syntax error has no field (its ``loc`` holds a character offset): param None.
    """
    parts = []
    first: str | None = None
    for err in errors:
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            detail = ctx.get("error", "") if isinstance(ctx, dict) else ""
            loc = err.get("loc", ())
            pos = loc[-1] if isinstance(loc, (list, tuple)) and loc and isinstance(loc[-1], int) else None
            at = f" at character {pos}" if pos is not None else ""
            parts.append(f"the request body is not valid JSON ({detail}{at}); send a JSON object")
            continue
        loc = err.get("loc", ())
        name = _field_name(tuple(loc) if isinstance(loc, (list, tuple)) else ())
        first = first or name
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
        parts.append(f"{name}: {msg}{got}")
    return "; ".join(parts), first


def route_list(app: object) -> str:
    """Every route the app serves, ``"METHOD path"`` comma-separated, read from ``app.routes`` (so a
    404 names each route, including ones added later)."""
    entries = []
    for route in getattr(app, "routes", ()):
        path = getattr(route, "path", None)
        methods = sorted(set(getattr(route, "methods", None) or ()) - {"HEAD"})
        if path is not None and methods:
            entries.extend(f"{m} {path}" for m in methods)
    return ", ".join(sorted(entries, key=lambda e: (e.split(" ", 1)[1], e)))


def install_handlers(app: object) -> None:
    """Register the JSON error handlers on a FastAPI app (every error answers the OpenAI shape)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        err = exc if isinstance(exc, APIError) else APIError(500, str(exc), code="generation_failed")
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        errors = list(exc.errors()) if isinstance(exc, RequestValidationError) else []
        message, param = validation_message(errors)
        return JSONResponse(APIError(400, message, param=param).body(), status_code=400)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        if status == 404:
            err = APIError(
                404,
                f"{request.method} {request.url.path}: no such route; this service serves "
                f"{route_list(request.app)}",
                code="not_found",
            )
        elif status == 405:
            err = APIError(
                405, f"{request.method} is not allowed on {request.url.path}", code="method_not_allowed"
            )
        else:
            err = APIError(status, str(getattr(exc, "detail", exc)), code="http_error")
        return JSONResponse(err.body(), status_code=err.status, headers=getattr(exc, "headers", None))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        err = APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")
        return JSONResponse(err.body(), status_code=500)

    app.add_exception_handler(APIError, on_api_error)  # type: ignore[attr-defined]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[attr-defined]
    app.add_exception_handler(HTTPException, on_http)  # type: ignore[attr-defined]
    app.add_exception_handler(Exception, on_unexpected)  # type: ignore[attr-defined]


class CountOutcomes:
    """ASGI middleware: one ``diffusion_requests_total{outcome, status, traffic}`` count per finished request.

    ``traffic`` comes from the ``X-Diffbench-Traffic`` header (:func:`traffic_of`). A handler may leave
    ``diffbench_shape`` (the exported shape label) and ``diffbench_duration_s`` (arrival → response
    ready, seconds; set for successful generations) in the request state; they are passed on.

    Counted: every image generation (:data:`GENERATION_PATHS`: generations, edits, variations, chat; any status), every refused video job creation (an accepted job is
    counted when it finishes, see :mod:`diffbench.server.videos`) and every other error answer (404 on
    an unknown path or video id, 405, 400, 5xx). ``/health`` and ``/metrics`` are never counted, nor are
    successful reads (job polls, model list).
    """

    def __init__(self, app: object, count: object) -> None:
        self.app = app
        self.count = count

    async def __call__(self, scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        if scope.get("type") != "http" or scope.get("path") in ("/health", "/metrics"):
            await self.app(scope, receive, send)  # type: ignore[operator]
            return
        status: int | None = None
        state = scope.setdefault("state", {})
        headers = dict(scope.get("headers") or [])
        raw = headers.get(TRAFFIC_HEADER.encode())
        traffic = traffic_of(raw.decode("latin-1") if raw is not None else None)

        async def send_status(message: dict) -> None:  # type: ignore[type-arg]
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message["status"])
            await send(message)  # type: ignore[operator]

        try:
            await self.app(scope, receive, send_status)  # type: ignore[operator]
        except Exception:
            status = status or 500
            raise
        finally:
            if status is not None:
                path, method = scope.get("path"), scope.get("method")
                generation = method == "POST" and path in GENERATION_PATHS
                job_created = method == "POST" and path == "/v1/videos" and status < 400
                if (generation or status >= 400) and not job_created:
                    self.count(  # type: ignore[operator]
                        outcome_of(status),
                        status,
                        shape=state.get("diffbench_shape"),
                        duration_s=state.get("diffbench_duration_s"),
                        traffic=traffic,
                    )
