"""When an open-loop rate stops: at ``--duration`` or after ``--num-requests`` arrivals, whichever is first.

The schedule of a rate is the seeded one of :func:`diffbench.queueing.schedules.build_schedule` over the
duration, truncated to its first ``N`` arrivals. The measurement window then ends when arrival ``N + 1``
would have come (``schedule[N]``), or at the duration when the schedule holds no more than ``N`` arrivals;
so for a constant schedule of rate ``r`` stopped by the count, the window is ``N / r`` and the sent rate
``N / (N / r) = r`` exactly (the same rule as a duration stop: every rate counts over the arrival window).

A burst (``--request-rate inf``, as ``vllm bench serve``) puts all ``N`` arrivals at 0; it has no arrival
window, so its rates are counted over the time the requests took (the caller passes the last event).

The schedule is drawn over a short horizon first and lengthened only while it holds ``<= N`` arrivals:
the seeded arrival process is the same stream whatever the horizon, so the first ``N`` arrivals equal
those of the full-duration schedule (tested), and a high rate with a small ``N`` never allocates
``rate x duration`` arrival times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from diffbench.queueing.schedules import ScheduleSpec, build_schedule


class Arrivals(BaseModel):
    """The arrivals of one rate: ``times`` (float64 seconds, sorted), the arrival window ``window_s``
    (None for a burst: the caller uses the last event) and which stop ended the schedule."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    times: np.ndarray
    window_s: float | None
    stop: Literal["duration", "num_requests"]


def plan_arrivals(spec: ScheduleSpec, *, duration_s: float, seed: Sequence[int],
                  num_requests: int | None = None) -> Arrivals:
    """Arrival times of one rate under both stops (rules in the module docstring).

    Args:
        spec: the schedule at its rate (``spec.rate`` may be ``inf``: a burst, which needs ``num_requests``).
        duration_s: ``--duration`` in seconds, > 0.
        seed: the rate's seed sequence (a fresh ``numpy.random.default_rng(seed)`` per draw).
        num_requests: ``--num-requests`` (None: duration only).

    Raises:
        ValueError: a burst without ``num_requests``, or ``num_requests`` < 1.
        UsageError: from :func:`build_schedule` (bad rate or duration).
    """
    if num_requests is not None and num_requests < 1:
        raise ValueError(f"num_requests must be >= 1, got {num_requests}")
    rate = spec.rate
    if rate is not None and math.isinf(rate):
        if num_requests is None:
            raise ValueError("a burst (rate inf) needs num_requests")
        return Arrivals(times=np.zeros(num_requests), window_s=None, stop="num_requests")

    def draw(horizon: float) -> np.ndarray:
        s = spec.model_copy(update={"duration_s": horizon})
        return build_schedule(s, seed=np.random.default_rng(list(seed)))

    if num_requests is None:
        return Arrivals(times=draw(duration_s), window_s=duration_s, stop="duration")
    horizon = duration_s if rate is None else min(duration_s, 2.0 * (num_requests + 1) / rate + 1.0)
    while True:
        times = draw(horizon)
        if times.size > num_requests:
            return Arrivals(times=times[:num_requests].copy(), window_s=float(times[num_requests]),
                            stop="num_requests")
        if horizon >= duration_s:
            return Arrivals(times=times, window_s=duration_s, stop="duration")
        horizon = min(duration_s, 2.0 * horizon)


__all__ = ["Arrivals", "plan_arrivals"]
