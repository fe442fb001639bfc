"""What ``serve --warmup`` generates before the service turns ready: the warm-up keys it declares it takes.

A request whose warm-up key (:class:`~diffbench.workload.warmkey.WarmupKey`) no warm-up covered pays a
first-call compile (``torch.compile``, autotuning, allocator growth) while being served. The service
declares what it takes with ``--warmup`` sizes and the ``--shapes`` allowlist (sizes, video frames and batch
sizes, e.g. ``512x512b4``), so with ``--warmup`` given it warms, at the default steps and guidance:

- each ``--warmup`` size, one image (or one video of the default frame count) per request, as before;
- each ``--shapes`` label, at its batch size and frames (a label without frames on a video model takes the
  default frame count; a video label on an image model is skipped), unless the service would refuse it
  (limits, ``--max-pixels``, the engine's own checks): a refused shape never runs, so it needs no warm-up.

Requests with the same key are sent once. Without ``--warmup`` nothing is warmed (as before).
"""

from __future__ import annotations

from diffbench.engines.base import Engine, GenerationRequest
from diffbench.errors import ShapeError
from diffbench.metrics.shapes import parse_label
from diffbench.server.config import ServerConfig
from diffbench.server.http_errors import APIError
from diffbench.server.validation import api_size, check_pixels, check_size


def warmup_requests(config: ServerConfig, engine: Engine, steps: int, frames: int | None) -> list[GenerationRequest]:
    """The warm-up requests of ``config`` (see the module docstring), one per warm-up key, in order:
    the ``--warmup`` sizes first, then the ``--shapes`` labels. ``steps``: the service's default steps;
    ``frames``: its default frame count (None for an image model). Empty without ``--warmup``."""
    if not config.warmup_sizes:
        return []
    wanted: list[tuple[int, int, int | None, int, bool]] = []  # width, height, frames, batch, declared by --shapes
    for size in config.warmup_sizes:
        w, h = api_size(size, "--warmup")
        wanted.append((w, h, frames, 1, False))
    for label in config.shapes:
        w, h, f, b = parse_label(label)
        if f is not None and frames is None:
            continue  # a video label on an image model: never served
        wanted.append((w, h, f if f is not None else frames, b, True))
    out: dict[object, GenerationRequest] = {}
    for w, h, f, b, declared in wanted:
        req = GenerationRequest(prompt="warmup", width=w, height=h, frames=f, steps=steps, batch=b)
        if declared and not _served(req, config, engine):
            continue
        out.setdefault(req.warmup_key, req)
    return list(out.values())


def _served(req: GenerationRequest, config: ServerConfig, engine: Engine) -> bool:
    """Whether the service would run ``req`` (limits, ``--max-pixels``, the engine's checks)."""
    try:
        check_size(req.width, req.height, config.limits, "--shapes", engine, req.frames)
        check_pixels(req.width, req.height, req.frames, req.batch, config.limits, "--shapes")
        engine.validate(req)
    except (APIError, ShapeError):
        return False
    return True


__all__ = ["warmup_requests"]
