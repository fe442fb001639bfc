"""Turn API parameters into a :class:`~diffbench.engines.base.GenerationRequest`, or a clear 400.

Every validation problem answers 400 (OpenAI's status for an invalid request, ``BadRequestError`` in the table of
https://github.com/openai/openai-python#handling-errors) with
``param`` naming the field and a message naming the field and the fix: a malformed or out-of-bounds
``size``, a ``width``/``height`` that conflicts with ``size``, steps / n / frames / prompt length over the
service's limits (the message names the ``serve`` flag that sets the limit), and shapes the engine's
``validate`` refuses (its :class:`~diffbench.errors.ShapeError`, worded with API field names).
"""

from __future__ import annotations

from diffbench.core import shapes as core_shapes
from diffbench.engines.base import Engine, GenerationRequest
from diffbench.errors import ShapeError
from diffbench.server.config import Limits, ServerConfig
from diffbench.server.http_errors import APIError, api_wording


def api_size(text: str, param: str = "size") -> tuple[int, int]:
    """``"WIDTHxHEIGHT"`` → (width, height) in pixels. Raises APIError 400 when malformed."""
    try:
        return core_shapes.parse_size(text)
    except core_shapes.SizeSyntaxError:
        raise APIError(
            400,
            f'{param}: {text!r} is not WIDTHxHEIGHT; send e.g. "512x512"',
            param=param,
            code="invalid_size",
        ) from None



def shape_allowlist(config: ServerConfig, frames: int | None = None) -> tuple[str, ...]:
    """``config.shapes``, else the default size and the warmup sizes at ``frames`` (a video model's default
    frame count; None for images), as ``shape`` labels, deduplicated."""
    if config.shapes:
        return config.shapes
    from diffbench.metrics.shapes import shape_label

    sizes = [api_size(s, "--warmup") for s in (config.default_size, *config.warmup_sizes)]
    return tuple(dict.fromkeys(shape_label(w, h, frames) for w, h in sizes))


STREAM_REFUSAL = (
    "stream: streaming answers (stream=true, partial_images) are not supported by this service; send stream "
    "false or omit it: the answer is one JSON body with every image"
)


def refuse_stream(stream: object) -> None:
    """The one ``stream`` rule of the images and chat routes: ``stream: true`` is refused.

    Raises:
        APIError: 400 ``unsupported_parameter`` (``param: stream``) when ``stream`` is true.
    """
    if stream:
        raise APIError(400, STREAM_REFUSAL, param="stream", code="unsupported_parameter")


def resolve_size(
    size: str | None, width: int | None, height: int | None, default: str
) -> tuple[int, int, str]:
    """(width, height, param) from ``size`` or ``width`` + ``height``, else ``default``.

    ``size="auto"`` (OpenAI's value: the model picks) counts as no size: ``width`` + ``height`` if given,
    else ``default`` (``serve --default-size``).

    ``param`` is the field later errors about the size should name (``"size"`` or ``"width"``).

    Raises:
        APIError: 400 for a malformed ``size``, only one of ``width``/``height``, or ``width``/``height``
            that disagree with ``size``.
    """
    if size is not None and size.strip().lower() == "auto":
        size = None
    if size is not None:
        w, h = api_size(size)
        for name, given, used in (("width", width, w), ("height", height, h)):
            if given is not None and given != used:
                raise APIError(
                    400,
                    f"{name}: {name}={given} conflicts with size {size!r} ({name} {used}); send size or "
                    "width and height, not both with different values",
                    param=name,
                    code="conflicting_parameters",
                )
        return w, h, "size"
    if width is not None and height is not None:
        return width, height, "width"
    if width is not None or height is not None:
        missing = "height" if height is None else "width"
        raise APIError(
            400,
            f'{missing}: give both width and height, or size as "WIDTHxHEIGHT"',
            param=missing,
            code="invalid_size",
        )
    w, h = api_size(default, "default_size")
    return w, h, "size"


_FRAME_PROBES = (None, 1, 5, 9, 17, 33, 65, 81)
_PROBE_SIDES = (1024, 2048, 4096)


def _accepts(engine: Engine, width: int, height: int, frames: int | None) -> bool:
    """True when ``engine.validate`` takes a probe request of this shape."""
    try:
        engine.validate(GenerationRequest(prompt="probe", width=width, height=height, frames=frames, steps=1))
    except ShapeError:
        return False
    return True


def side_multiples(engine: Engine | None, limits: Limits, frames: int | None = None) -> tuple[int, int]:
    """(width, height) multiples a size must have for both the service and the engine, pixels.

    The service asks for multiples of ``limits.size_multiple``; the engine may ask for more (a FLUX or
    Wan VAE with 2×2 patches: 16). Found by probing ``engine.validate``: the smallest multiple of
    ``size_multiple`` (up to 1024) it accepts for each side, the other side at a size it accepts (with
    ``frames``, else a frame count it accepts). ``limits.size_multiple`` alone when no probe succeeds.
    """
    m = limits.size_multiple
    if engine is None:
        return m, m
    base = next(
        ((ref, f) for f in (frames, *_FRAME_PROBES) for ref in _PROBE_SIDES if _accepts(engine, ref, ref, f)),
        None,
    )
    if base is None:
        return m, m
    ref, f = base
    mw = next((c for c in range(m, 1025, m) if _accepts(engine, c, ref, f)), m)
    mh = next((c for c in range(m, 1025, m) if _accepts(engine, ref, c, f)), m)
    return mw, mh


def _check_side(name: str, value: int, limits: Limits, multiple: int) -> str | None:
    if not limits.min_side <= value <= limits.max_side:
        return f"{name} {value} is outside {limits.min_side}..{limits.max_side} pixels"
    if value % multiple:
        lower, upper = value // multiple * multiple, value // multiple * multiple + multiple
        near = [v for v in (lower, upper) if limits.min_side <= v <= limits.max_side]
        return f"{name} {value} is not a multiple of {multiple} (use {' or '.join(map(str, near))})"
    return None


def check_size(
    width: int,
    height: int,
    limits: Limits,
    param: str = "size",
    engine: Engine | None = None,
    frames: int | None = None,
) -> None:
    """Bounds and multiple of each side, for the service and ``engine`` together (one check).

    The multiple is the service's ``limits.size_multiple`` combined with the engine's own (see
    :func:`side_multiples`), so the nearest valid values in the message are ones the engine accepts.

    Raises:
        APIError: 400 naming the side and the nearest valid values.
    """
    m = limits.size_multiple
    in_bounds = all(limits.min_side <= v <= limits.max_side for v in (width, height))
    service_ok = in_bounds and not width % m and not height % m
    if service_ok and (engine is None or _accepts(engine, width, height, frames)):
        return
    mw, mh = side_multiples(engine, limits, frames) if in_bounds else (m, m)
    sides = [
        (n, p)
        for n, v, mult in (("width", width, mw), ("height", height, mh))
        if (p := _check_side(n, v, limits, mult))
    ]
    if not sides:
        return  # the sizes are fine; the engine refuses something else (its validate says what)
    problems = [p for _, p in sides]
    if param == "width":  # separate width/height fields: name the side at fault
        param = sides[0][0]
    multiples = f"multiples of {mw}" if mw == mh else f"a width multiple of {mw} and a height multiple of {mh}"
    raise APIError(
        400,
        f"{param}: {width}x{height} is not allowed: {'; '.join(problems)}; "
        f"send a size with both sides in {limits.min_side}..{limits.max_side} and {multiples}",
        param=param,
        code="invalid_size",
    )


def _range(param: str, value: int, limit: int, what: str, flag: str) -> None:
    if value > limit:
        raise APIError(
            400,
            f"{param}: {value} is above this service's limit of {limit} {what} (serve {flag} {limit}); "
            f"ask for at most {limit}",
            param=param,
            code="limit_exceeded",
        )


def check_pixels(width: int, height: int, frames: int | None, n: int, limits: Limits, param: str) -> None:
    """width × height × frames × n against ``limits.max_pixels``. Raises APIError 400 naming ``--max-pixels``."""
    if limits.max_pixels is None:
        return
    pixels = width * height * (frames or 1) * n
    if pixels > limits.max_pixels:
        parts = (
            f"{width}x{height}" + (f" × {frames} frames" if frames else "") + (f" × n={n}" if n > 1 else "")
        )
        raise APIError(
            400,
            f"{param}: {parts} = {pixels} pixels is above this service's limit of {limits.max_pixels} "
            f"pixels per request (serve --max-pixels {limits.max_pixels}); ask for a smaller size, fewer "
            "frames or a smaller n",
            param=param,
            code="limit_exceeded",
        )


def _shape_param(message: str, size_param: str) -> str:
    """The API field an engine's ShapeError is about (frames, steps, batch; else the size)."""
    low = message.lower()
    for word, param in (("frames", "num_frames"), ("steps", "num_inference_steps"), ("batch", "n")):
        if word in low:
            return param
    if size_param == "width" and "height" in low and "width" not in low:
        return "height"  # separate width/height fields: name the side at fault
    return size_param


def engine_shape_error(exc: ShapeError, size_param: str) -> APIError:
    """A 400 for an engine's ShapeError: ``param`` is the API field, the message uses API names."""
    text = api_wording(str(exc))
    param = _shape_param(text, size_param)
    return APIError(400, f"{param}: {text}", param=param, code="invalid_shape")


def build_request(
    *,
    engine: Engine,
    limits: Limits,
    prompt: str,
    negative_prompt: str | None,
    width: int,
    height: int,
    frames: int | None,
    steps: int,
    guidance: float | None,
    n: int,
    seed: int,
    size_param: str = "size",
    image: bytes | None = None,
    mask: bytes | None = None,
    strength: float | None = None,
    adapter: str | None = None,
    adapter_scale: float = 1.0,
) -> GenerationRequest:
    """Validate against ``limits`` and ``engine.validate``; returns the engine request.

    ``image``/``mask``/``strength``: an edit's input picture (encoded bytes, already decoded and checked
    by :mod:`diffbench.server.edits`), optional mask and strength (None: the request's default).

    Raises:
        APIError: 400 for a prompt, steps, n, frames or pixels over the limits, or a size the service or
            the engine cannot take.
    """
    if len(prompt) > limits.max_prompt_chars:
        raise APIError(
            400,
            f"prompt: {len(prompt)} characters is above the limit of {limits.max_prompt_chars} "
            f"(serve --max-prompt-chars); shorten it",
            param="prompt",
            code="limit_exceeded",
        )
    _range("num_inference_steps", steps, limits.max_steps, "steps", "--max-steps")
    _range("n", n, limits.max_n, "images per request", "--max-n")
    if frames is not None:
        _range("num_frames", frames, limits.max_frames, "frames", "--max-frames")
    check_size(width, height, limits, size_param, engine, frames)
    check_pixels(width, height, frames, n, limits, size_param)
    request = GenerationRequest(
        prompt=prompt,
        negative_prompt=negative_prompt,
        height=height,
        width=width,
        frames=frames,
        steps=steps,
        guidance=guidance,
        batch=n,
        seed=seed,
        image=image,
        mask=mask,
        adapter=adapter,
        adapter_scale=adapter_scale,
        **({} if strength is None else {"strength": strength}),
    )
    try:
        engine.validate(request)
    except ShapeError as exc:
        if adapter is not None and "LoRA adapter" in str(exc):
            raise APIError(400, f"lora: {exc}", param="lora", code="invalid_lora") from exc
        raise engine_shape_error(exc, size_param) from exc
    return request


def resolve_lora(lora: object, adapters: dict[str, str]) -> tuple[str | None, float]:
    """The adapter name and scale a request's ``lora`` field (:class:`~diffbench.server.schemas.LoraRequest`,
    or None) asks for, checked against the ``adapters`` the service loaded (name -> directory).

    Raises:
        APIError: 400 (``param`` ``lora``) for a field that names no adapter, a ``local_path`` that is not the
            named adapter's directory, or an adapter the service did not load.
    """
    from pathlib import Path

    if lora is None:
        return None, 1.0
    name, path, scale = getattr(lora, "name", None), getattr(lora, "local_path", None), getattr(lora, "scale", 1.0)
    if name is None and path is None:
        raise APIError(400, "lora: give the name of a loaded adapter (or its local_path)", param="lora",
                       code="invalid_lora")
    if name is None:
        name = Path(path).name  # type: ignore[arg-type]
    loaded = ", ".join(sorted(adapters)) or "none (serve --lora NAME=DIR loads one)"
    if name not in adapters:
        raise APIError(400, f"lora: adapter {name!r} is not loaded; loaded: {loaded}", param="lora",
                       code="invalid_lora")
    if path is not None and Path(path).expanduser().resolve() != Path(adapters[name]):
        raise APIError(400, f"lora: local_path {path!r} is not the directory adapter {name!r} was loaded from; "
                       "this service loads adapters at start only (serve --lora NAME=DIR)", param="lora",
                       code="invalid_lora")
    return name, float(scale)


def nearest_valid_frames(
    engine: Engine, request: GenerationRequest, wanted: int, max_frames: int, search: int = 32
) -> int | None:
    """The frame count nearest to ``wanted`` that ``engine.validate`` accepts (ties: the larger), or None.

    Probes ``wanted``, ``wanted ± 1``, … up to ``± search`` frames within 1..``max_frames``; e.g. a Wan
    VAE with 4× temporal compression takes 4k + 1 frames, so 64 → 65 and 62 → 61. None when no count
    in that window is accepted (the error is then about something else, e.g. the size).
    """
    for d in range(search + 1):
        for f in (wanted + d, wanted - d) if d else (wanted,):
            if 1 <= f <= max_frames:
                try:
                    engine.validate(request.model_copy(update={"frames": f}))
                except ShapeError:
                    continue
                return f
    return None


def check_startup(config: ServerConfig, engine: Engine, default_steps: int, frames: int | None) -> None:
    """Refuse a configuration whose own sizes the service would refuse, before it starts serving.

    Checks ``--default-size`` and each ``--warmup`` size as a request of ``default_steps`` steps and
    ``frames`` frames (None for an image model) would be checked: limits, ``--max-pixels`` and
    ``engine.validate``; and ``--default-steps`` against ``--max-steps``.

    Raises:
        UsageError: naming the ``serve`` flag, the value and the reason (exit 2).
    """
    from diffbench.errors import UsageError

    limits = config.limits
    if default_steps > limits.max_steps:
        raise UsageError(
            f"--default-steps {default_steps} is above --max-steps {limits.max_steps}; lower it or raise "
            "--max-steps"
        )
    sizes = [("--default-size", config.default_size)] + [("--warmup", w) for w in config.warmup_sizes]
    for flag, size in sizes:
        try:
            width, height = api_size(size, flag)
            check_size(width, height, limits, flag, engine, frames)
            check_pixels(width, height, frames, 1, limits, flag)
            req = GenerationRequest(
                prompt="check", width=width, height=height, frames=frames, steps=default_steps
            )
            engine.validate(req)
        except APIError as exc:
            raise UsageError(exc.message) from exc
        except ShapeError as exc:
            raise UsageError(f"{flag} {size}: {api_wording(str(exc))}") from exc
