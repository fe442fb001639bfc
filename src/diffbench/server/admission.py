"""Admission control: predict the queue wait of a new request and reject it (429) above a limit.

Prediction (work-weighted, monitoring.md §3.4): the estimated wait of a new request is the predicted
service time of every queued request plus the predicted remaining time of the running one (one slot per
device). A request's predicted service time is

- the mean of the recent service times of its exact shape (height, width, frames, steps, batch), when
  the service has completed that shape recently (fixed costs such as text encode are then included); else
- ``units × seconds_per_unit``, where ``units = steps × height × width × frames × batch`` and
  ``seconds_per_unit`` = Σ service seconds / Σ units over the last ``window`` completed requests (a
  ratio of sums, so large requests weigh by their work). With a single shape both reduce to
  queue length × recent mean service time.

Before the first request completes there is no estimate: requests are admitted (``max_queue`` still
bounds the queue). ``Retry-After`` (whole seconds, at least 1) is the time for the predicted backlog to
drain to the limit if nothing else is admitted: ``ceil(estimated_wait − max_wait)``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from diffbench.engines.base import GenerationRequest

ShapeKey = tuple[int, int, int | None, int, int]


def work_units(request: GenerationRequest) -> float:
    """steps × height × width × frames × batch (frames = 1 for images)."""
    return float(request.steps * request.height * request.width * (request.frames or 1) * request.batch)


class ServiceTimeModel:
    """Recent service times (seconds) per shape and per work unit. Not thread-safe: callers lock."""

    def __init__(self, window: int = 32, per_shape_window: int = 8) -> None:
        self._recent: deque[tuple[float, float]] = deque(maxlen=window)
        self._per_shape: dict[ShapeKey, deque[float]] = {}
        self._per_shape_window = per_shape_window

    def observe(self, request: GenerationRequest, seconds: float) -> None:
        """Record one completed request's service time (seconds)."""
        self._recent.append((work_units(request), seconds))
        self._per_shape.setdefault(request.shape_key, deque(maxlen=self._per_shape_window)).append(seconds)

    @property
    def seconds_per_unit(self) -> float | None:
        """Σ seconds / Σ units over the window; None before the first observation."""
        units = sum(u for u, _ in self._recent)
        return sum(s for _, s in self._recent) / units if units > 0 else None

    def predict(self, request: GenerationRequest) -> float | None:
        """Predicted service time (seconds) of ``request``; None when nothing was observed yet."""
        same = self._per_shape.get(request.shape_key)
        if same:
            return sum(same) / len(same)
        rate = self.seconds_per_unit
        return None if rate is None else rate * work_units(request)


@dataclass(frozen=True)
class Decision:
    """Outcome of :func:`decide`. ``retry_after_s`` is set when rejected."""

    admit: bool
    estimated_wait_s: float | None
    retry_after_s: int | None = None
    reason: str = ""


def estimate_wait(
    model: ServiceTimeModel,
    queued: list[GenerationRequest],
    running: GenerationRequest | None,
    running_elapsed_s: float,
) -> float | None:
    """Seconds a request arriving now would wait before starting; None without any observation."""
    if model.seconds_per_unit is None:
        return None
    total = 0.0
    for req in queued:
        total += model.predict(req) or 0.0
    if running is not None:
        total += max(0.0, (model.predict(running) or 0.0) - running_elapsed_s)
    return total


def decide(
    estimated_wait_s: float | None,
    queue_length: int,
    max_wait_s: float | None,
    max_queue: int | None,
) -> Decision:
    """Admit or reject one request given the current estimate and the limits (see module docstring)."""
    if max_queue is not None and queue_length >= max_queue:
        retry = max(1, math.ceil(estimated_wait_s / max(queue_length, 1))) if estimated_wait_s else 1
        return Decision(
            False,
            estimated_wait_s,
            retry,
            f"queue is full ({queue_length} waiting, --max-queue {max_queue}); retry later",
        )
    if max_wait_s is not None and estimated_wait_s is not None and estimated_wait_s > max_wait_s:
        retry = max(1, math.ceil(estimated_wait_s - max_wait_s))
        return Decision(
            False,
            estimated_wait_s,
            retry,
            f"estimated queue wait {estimated_wait_s:.2f} s exceeds --max-wait {max_wait_s:g} s; "
            f"retry after {retry} s",
        )
    return Decision(True, estimated_wait_s)
