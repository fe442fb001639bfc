"""Turn API parameters into a :class:`~diffbench.engines.base.GenerationRequest`, or a clear 400/422.

Range problems (steps, n, frames, prompt length) answer 422; a size that is malformed, out of bounds,
not a multiple of ``Limits.size_multiple`` or refused by the engine's ``validate`` (ShapeError) answers
400 (vLLM-Omni's split, serving-apis.md §2.5). Each message names the field and the fix.
"""

from __future__ import annotations

import re

from diffbench.engines.base import Engine, GenerationRequest
from diffbench.errors import ShapeError
from diffbench.server.config import Limits
from diffbench.server.http_errors import APIError

_SIZE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_size(text: str, param: str = "size") -> tuple[int, int]:
    """``"WIDTHxHEIGHT"`` → (width, height) in pixels. Raises APIError 400 when malformed."""
    m = _SIZE.match(text)
    if not m:
        raise APIError(
            400,
            f'{param}: {text!r} is not WIDTHxHEIGHT; send e.g. "512x512"',
            param=param,
            code="invalid_size",
        )
    return int(m.group(1)), int(m.group(2))


def _check_side(name: str, value: int, limits: Limits) -> str | None:
    if not limits.min_side <= value <= limits.max_side:
        return f"{name} {value} is outside {limits.min_side}..{limits.max_side} pixels"
    m = limits.size_multiple
    if value % m:
        lower, upper = value // m * m, value // m * m + m
        near = f"{lower} or {upper}" if lower >= limits.min_side else f"{upper}"
        return f"{name} {value} is not a multiple of {m} (use {near})"
    return None


def check_size(width: int, height: int, limits: Limits, param: str = "size") -> None:
    """Bounds and multiple of each side. Raises APIError 400 naming the side and the nearest valid value."""
    problems = [p for p in (_check_side("width", width, limits), _check_side("height", height, limits)) if p]
    if problems:
        raise APIError(
            400,
            f"{param}: {width}x{height} is not allowed: {'; '.join(problems)}; "
            f"send a size with both sides in {limits.min_side}..{limits.max_side} and multiples of {limits.size_multiple}",
            param=param,
            code="invalid_size",
        )


def _range(param: str, value: int, limit: int, what: str) -> None:
    if value > limit:
        raise APIError(
            422, f"{param}: {value} is above the maximum {limit}; ask for at most {limit} {what}", param=param
        )


def _shape_param(message: str, size_param: str) -> str:
    """The API field an engine's ShapeError is about (engines word them after CLI flags)."""
    low = message.lower()
    for word, param in (("frames", "num_frames"), ("steps", "num_inference_steps"), ("batch", "n")):
        if word in low:
            return param
    return size_param


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
) -> GenerationRequest:
    """Validate against ``limits`` and ``engine.validate``; returns the engine request.

    Raises:
        APIError: 422 for a prompt, steps, n or frames out of range; 400 for a size the service or the
            engine cannot take.
    """
    if len(prompt) > limits.max_prompt_chars:
        raise APIError(
            422,
            f"prompt: {len(prompt)} characters is above the limit of {limits.max_prompt_chars}; shorten it",
            param="prompt",
        )
    _range("num_inference_steps", steps, limits.max_steps, "steps")
    _range("n", n, limits.max_n, "images per request")
    if frames is not None:
        _range("num_frames", frames, limits.max_frames, "frames")
    check_size(width, height, limits, size_param)
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
    )
    try:
        engine.validate(request)
    except ShapeError as exc:
        param = _shape_param(str(exc), size_param)
        raise APIError(400, f"{param}: {exc}", param=param, code="invalid_shape") from exc
    return request
