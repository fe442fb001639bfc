"""Work-normalized throughput, cost per output, and the run's wall-clock anchor.

**Work.** One output (an image, or a video of ``frames`` frames) generated at ``width x height`` pixels
with ``steps`` denoising steps is ``width * height * frames * steps / 1e6`` megapixel·steps (``frames`` is 1
for an image). A rate of work is megapixel·steps per second (:func:`mpx_steps`): images/s hides the
shape, this does not (a 1024² image at 30 steps is 16x the work of a 512² one at 8 steps, not "one image").

**Cost.** With a price ``P`` per GPU-hour (currency-neutral) and ``g`` GPU·seconds paid per ok output,
the cost of 1,000 outputs is ``P * g * 1000 / 3600`` (:func:`cost_per_1000`). What ``g`` is depends on the
command: ``load`` pays its GPUs for the whole window (``GPUs * window_s / ok outputs``: idle time between
requests is paid too, which is what a deployment pays); ``bench`` pays one device for one timed run
(``GPUs * mean run time / outputs per run``, one GPU without ``--gpus``); ``plan`` pays the pool it sizes
(``GPUs * 3600 / outputs per hour at the planned rate``).

**Wall clock.** Durations come from the monotonic clock (``time.perf_counter_ns``); a wall-clock time is
derived from one (wall clock, monotonic) pair taken at the start of a run (:class:`ClockPair`), so every
derived time differs from another by exactly their monotonic difference. Wall-clock times are Unix epoch
seconds (UTC; floats; ``datetime.fromtimestamp(t, timezone.utc)`` reads one).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0


def mpx_steps(width: int, height: int, steps: int, frames: int | None = None, outputs: int = 1) -> float:
    """Megapixel·steps of ``outputs`` outputs: ``width * height * (frames or 1) * steps * outputs / 1e6``."""
    return width * height * (frames or 1) * steps * outputs / 1e6


def cost_per_1000(price_per_gpu_hour: float, gpu_s_per_output: float) -> float:
    """Cost of 1,000 outputs: ``price_per_gpu_hour * gpu_s_per_output * 1000 / 3600`` (the price's currency).

    Args:
        price_per_gpu_hour: >= 0, finite.
        gpu_s_per_output: GPU·seconds paid per ok output (>= 0).
    """
    return price_per_gpu_hour * gpu_s_per_output * 1000.0 / SECONDS_PER_HOUR


def price_error(value: float) -> str | None:
    """Why ``value`` is not a price per GPU-hour (the words after the option's name), or None when it is
    one: finite and >= 0."""
    if not math.isfinite(value):
        return f"must be a finite price per GPU-hour, got {value:g}"
    if value < 0:
        return f"must be >= 0 (a price per GPU-hour), got {value:g}"
    return None


def gpus_error(value: int) -> str | None:
    """Why ``value`` is not a GPU count (the words after the option's name), or None: an integer >= 1."""
    if value < 1:
        return f"must be >= 1 GPUs, got {value}"
    return None


@dataclass(frozen=True)
class ClockPair:
    """One reading of the wall clock (``unix_s``, Unix epoch seconds) and of ``time.perf_counter_ns``
    (``perf_ns``), taken together; :meth:`unix_at` maps a later monotonic reading to the wall clock."""

    unix_s: float
    perf_ns: int

    @classmethod
    def take(cls) -> ClockPair:
        """Read both clocks now (the monotonic one between two wall-clock reads, their midpoint kept)."""
        a = time.time_ns()
        p = time.perf_counter_ns()
        b = time.time_ns()
        return cls(unix_s=(a + b) / 2e9, perf_ns=p)

    def unix_at(self, perf_ns: int) -> float:
        """Unix epoch seconds (UTC) of the monotonic reading ``perf_ns`` (nanoseconds)."""
        return self.unix_s + (perf_ns - self.perf_ns) * 1e-9


def utc_text(unix_s: float) -> str:
    """Unix epoch seconds as ISO 8601 UTC with milliseconds and ``Z``: ``2026-01-31T12:00:00.250Z``."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(unix_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


_RUN_CLOCK: ClockPair | None = None


def start_run_clock() -> ClockPair:
    """Take this process's run anchor now (the start of a run) and return it."""
    global _RUN_CLOCK
    _RUN_CLOCK = ClockPair.take()
    return _RUN_CLOCK


def run_clock() -> ClockPair:
    """This process's run anchor (:func:`start_run_clock`; taken now when no run started one)."""
    return _RUN_CLOCK if _RUN_CLOCK is not None else start_run_clock()


__all__ = [
    "SECONDS_PER_HOUR",
    "ClockPair",
    "cost_per_1000",
    "gpus_error",
    "mpx_steps",
    "price_error",
    "run_clock",
    "start_run_clock",
    "utc_text",
]
