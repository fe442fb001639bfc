"""HTTP error bodies and the mapping of diffbench exceptions to status codes.

Every error answers ``{"error": {"message", "type", "param", "code"}}`` (the OpenAI shape, which the
``openai`` client surfaces as the exception message).

Status (``code``) and when:

- 400 (``invalid_size``, ``invalid_shape``, ``invalid_body``, ``unsupported_parameter``): a malformed
  ``size``, a shape the engine cannot take (ShapeError), a malformed body, an unsupported field.
- 404 (``model_not_found``, ``not_found``, ``not_ready``): another model, an unknown video id, video
  content requested before the job completed.
- 422 (``invalid_value``): a field out of range or of the wrong type (steps, n, guidance, prompt length,
  empty prompt).
- 429 (``overloaded``): admission control; the ``Retry-After`` header gives seconds.
- 500 (``generation_failed``): the generation raised; the message carries the reason. The service
  keeps serving.
- 503 (``unavailable``): the engine is not started yet or the service is shutting down.
- 507 (``out_of_memory``): the device ran out of memory for this request ("out of memory at WxH, ...").
  The service keeps serving (monitoring.md §8.2, single-device contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffbench.errors import DeviceOutOfMemory, ShapeError

if TYPE_CHECKING:
    from fastapi import Request
    from fastapi.responses import JSONResponse

OOM_STATUS = 507


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
    from diffbench.server.worker import ShuttingDown

    if isinstance(exc, DeviceOutOfMemory):
        return APIError(OOM_STATUS, str(exc), code="out_of_memory")
    if isinstance(exc, ShapeError):
        return APIError(400, str(exc), param="size", code="invalid_shape")
    if isinstance(exc, ShuttingDown):
        return APIError(503, str(exc), code="unavailable")
    return APIError(500, f"generation failed: {type(exc).__name__}: {exc}", code="generation_failed")


def _field_name(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def validation_message(errors: list[dict[str, object]]) -> tuple[str, str | None]:
    """One readable message from pydantic errors: ``field: problem (got value)``; and the first field."""
    parts = []
    first: str | None = None
    for err in errors:
        loc = err.get("loc", ())
        name = _field_name(tuple(loc) if isinstance(loc, (list, tuple)) else ())
        first = first or name
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            parts.append(f"the request body is not valid JSON ({err.get('ctx', {})}); send a JSON object")
            continue
        got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
        parts.append(f"{name}: {msg}{got}")
    return "; ".join(parts), first


def install_handlers(app: object) -> None:
    """Register the JSON error handlers on a FastAPI app."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    def count_invalid(request: Request, status: int) -> None:
        service = getattr(request.app.state, "service", None)
        if status in (400, 422) and service is not None:
            service.count("invalid")

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        err = exc if isinstance(exc, APIError) else APIError(500, str(exc), code="generation_failed")
        count_invalid(request, err.status)
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        errors = list(exc.errors()) if isinstance(exc, RequestValidationError) else []
        message, param = validation_message(errors)
        count_invalid(request, 422)
        return JSONResponse(APIError(422, message, param=param).body(), status_code=422)

    app.add_exception_handler(APIError, on_api_error)  # type: ignore[attr-defined]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[attr-defined]
