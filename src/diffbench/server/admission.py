"""Admission control: predict the queue wait of a new request and reject it (429) above a limit.

Prediction (work-weighted, not a queue length: one queued video can outweigh ten thumbnails; see
docs/reference/metrics.md, ``diffusion_queue_estimated_wait_seconds``): the estimated wait of a new request is the predicted
service time of every queued request plus the predicted remaining time of the running one (one slot per
device). A request's predicted service time (seconds) is

1. the mean of the recent service times of its exact shape (height, width, frames, steps, batch), when
   the service completed that shape recently; else
2. with two or more distinct work sizes among the last ``window`` completed requests, the least-squares
   line ``t = a + b × units`` (``units = steps × height × width × frames × batch``; ``a, b ≥ 0``) fitted
   on them: ``a`` carries the fixed costs (text encode, launch, per-request overhead) that a ratio
   through the origin spreads over the work and so inflates ~20× for a large unseen shape; else
3. with a single served shape, its stage split scaled part by part: text encode and other stay, the
   denoise time scales with ``units`` and the VAE decode with ``height × width × frames × batch``
   (without a stage split: the whole time scales with ``units``, an upper bound when fixed costs
   dominate).

With a calibration file (``serve --calibration``), a request whose shape label (``WxH[fF][bB]``) the file
calibrates is predicted from its baselines instead: steps × step baseline + text-encode + VAE-decode
baselines (the same rule as :meth:`diffbench.monitor.calibration.ShapeBaseline.predict_s`), before any request completed; other shapes fall back to 1–3 (and count
0 until something was observed: the estimate is then a lower bound).

A line fitted on small shapes can under-predict a much larger one; bound such requests with
``Limits.max_pixels`` / ``max_steps`` (``serve --max-pixels/--max-steps``), which no estimate replaces.
Before the first request completes there is no estimate: requests are admitted (``max_queue`` still
bounds the queue). ``Retry-After`` (whole seconds, at least 1) is the time for the predicted backlog to
drain to the limit if nothing else is admitted: ``ceil(estimated_wait − max_wait)``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from diffbench.engines.base import GenerationRequest, StageTimes

ShapeKey = tuple[int, int, int | None, int, int, int | None]
"""(height, width, frames, steps, batch, an edit's denoising steps or None): see :func:`shape_key`."""


def pixels(request: GenerationRequest) -> float:
    """height × width × frames × batch (frames = 1 for images)."""
    return float(request.height * request.width * (request.frames or 1) * request.batch)


def denoise_steps(request: GenerationRequest) -> int:
    """Denoising steps ``request`` runs: ``steps``, or for an edit the img2img schedule's share of them.

    diffusers' img2img pipelines (``get_timesteps``, e.g. ``FluxImg2ImgPipeline``): ``init = min(steps ×
    strength, steps)``, ``t_start = int(max(steps − init, 0))``, and ``steps − t_start`` steps run (the same
    float operations, so the count matches what the pipeline runs: 8 steps at strength 0.6 run 5).
    """
    if not request.is_edit:
        return request.steps
    init = min(request.steps * request.strength, request.steps)
    return request.steps - int(max(request.steps - init, 0))


def work_units(request: GenerationRequest) -> float:
    """denoising steps × height × width × frames × batch (frames = 1 for images; steps: :func:`denoise_steps`)."""
    return denoise_steps(request) * pixels(request)


def shape_key(request: GenerationRequest) -> ShapeKey:
    """The per-shape key of the recent service times: the request's shape, and for an edit the steps it
    runs (an edit at strength 0.5 is not timed like a generation of the same shape)."""
    return (*request.shape_key, denoise_steps(request) if request.is_edit else None)


def fit_line(x: list[float], y: list[float]) -> tuple[float, float] | None:
    """Least squares ``y = a + b·x`` with ``a, b ≥ 0`` (the constrained optimum; closed form).

    Returns (a, b), or None when ``x`` has fewer than two distinct values.
    """
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    if n < 2 or sxx <= 1e-12 * max(1.0, mx * mx):
        return None
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True)) / sxx
    a = my - b * mx
    if b < 0:  # constrained optimum on the b = 0 edge
        return max(my, 0.0), 0.0
    if a < 0:  # constrained optimum on the a = 0 edge: a line through the origin
        return 0.0, sum(xi * yi for xi, yi in zip(x, y, strict=True)) / sum(xi * xi for xi in x)
    return a, b


@dataclass(frozen=True)
class _Observation:
    units: float
    pixels: float
    seconds: float
    stages: StageTimes | None


def calibrated_baseline(cal: object) -> Callable[[GenerationRequest], float | None]:
    """A :class:`ServiceTimeModel` baseline from a :class:`~diffbench.monitor.calibration.Calibration`:
    seconds for a request whose shape label it calibrates, else None."""
    from diffbench.metrics.shapes import shape_label

    shapes = getattr(cal, "shapes", {})

    def predict(request: GenerationRequest) -> float | None:
        b = shapes.get(shape_label(request.width, request.height, request.frames, request.batch))
        return None if b is None else b.predict_s(denoise_steps(request))

    return predict


class ServiceTimeModel:
    """Recent service times (seconds) per shape and a work model over shapes. Not thread-safe: callers lock."""

    def __init__(
        self,
        window: int = 32,
        per_shape_window: int = 8,
        baseline: Callable[[GenerationRequest], float | None] | None = None,
    ) -> None:
        self.baseline = baseline
        self._recent: deque[_Observation] = deque(maxlen=window)
        self._per_shape: dict[ShapeKey, deque[float]] = {}
        self._per_shape_window = per_shape_window

    def observe(self, request: GenerationRequest, seconds: float, stages: StageTimes | None = None) -> None:
        """Record one completed request's service time (seconds) and, when known, its stage split."""
        self._recent.append(_Observation(work_units(request), pixels(request), seconds, stages))
        self._per_shape.setdefault(shape_key(request), deque(maxlen=self._per_shape_window)).append(seconds)

    @property
    def seconds_per_unit(self) -> float | None:
        """Σ seconds / Σ units over the window; None before the first observation."""
        units = sum(o.units for o in self._recent)
        return sum(o.seconds for o in self._recent) / units if units > 0 else None

    def predict(self, request: GenerationRequest) -> float | None:
        """Predicted service time (seconds) of ``request``; None when nothing was observed yet and no
        calibrated baseline covers it."""
        if self.baseline is not None:
            calibrated = self.baseline(request)
            if calibrated is not None:
                return calibrated
        same = self._per_shape.get(shape_key(request))
        if same:
            return sum(same) / len(same)
        if not self._recent:
            return None
        units = work_units(request)
        line = fit_line([o.units for o in self._recent], [o.seconds for o in self._recent])
        if line is not None:
            return line[0] + line[1] * units
        return self._scale_one_shape(request, units)

    def _scale_one_shape(self, request: GenerationRequest, units: float) -> float:
        obs = list(self._recent)
        seconds = sum(o.seconds for o in obs) / len(obs)
        ref = obs[-1]
        st = ref.stages
        if st is None or st.total_s <= 0:
            return seconds * units / ref.units
        ratio = seconds / st.total_s  # the worker's clock vs the engine's stage clock
        fixed = st.text_encode_s + st.other_s
        scaled = st.denoise_s * units / ref.units + st.vae_decode_s * pixels(request) / ref.pixels
        return ratio * (fixed + scaled)


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
    if model.seconds_per_unit is None and model.baseline is None:
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
