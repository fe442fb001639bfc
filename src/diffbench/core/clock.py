"""Clock and device-sync protocol.

Durations come from a monotonic nanosecond clock (``time.perf_counter_ns``), never from wall-clock time;
one wall-clock anchor is taken per run for the report. Both the clock and the device synchronization
are injectable so the measurement protocol can be tested on a simulated device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    """A monotonic clock returning nanoseconds."""

    def __call__(self) -> int: ...


def perf_clock() -> int:
    """The default clock: ``time.perf_counter_ns()`` (monotonic, nanoseconds)."""
    return time.perf_counter_ns()


def no_sync() -> None:
    """A sync that does nothing (CPU execution is synchronous)."""


@dataclass
class Timer:
    """Reads the clock after synchronizing the device, every time.

    ``sync`` is called before every clock read, so an asynchronous device (CUDA, the simulated engine)
    has finished the queued work when the time is taken.
    """

    sync: Callable[[], None] = no_sync
    clock: Callable[[], int] = perf_clock
    reads: int = field(default=0, init=False)

    def now_ns(self) -> int:
        """Synchronize, then read the clock (nanoseconds)."""
        self.sync()
        self.reads += 1
        return self.clock()

    def now_s(self) -> float:
        """Synchronize, then read the clock (seconds)."""
        return self.now_ns() / 1e9


NS = 1e-9


def process_start_unix() -> float | None:
    """Wall-clock start of this process as the kernel records it (seconds since the epoch; resolution one
    clock tick, 10 ms on Linux), read through psutil, or None where it cannot be read. The only way to
    include the interpreter's start and the imports in a cold start: no code of ours runs before them."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # psutil.Error subclasses; an unreadable /proc on a locked-down host
        return None
