"""Clock offset between the driver and a Ray actor, estimated from round trips (NTP's rule, RFC 5905 §8).

One sample: the driver reads its wall clock ``t1`` (``time.time_ns``), asks the actor for its wall clock
``ta``, reads ``t2`` when the answer is back. The actor read its clock at some driver instant ``t`` in
``[t1, t2]``, so its offset ``theta = ta - t`` lies in ``[ta - t2, ta - t1]``. The estimate is the midpoint
``ta - (t1 + t2) / 2``; its error is at most half the round trip ``(t2 - t1) / 2``, whatever the asymmetry
of the two legs. Of several samples the one with the smallest round trip gives the tightest bound (NTP's
clock filter takes the minimum-delay sample for the same reason), so that one is kept.

All times are integer nanoseconds; offsets are reported in seconds (float).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel

from diffbench.errors import DiffbenchError

CLOCK_SAMPLES = 16
"""Round trips per actor at start."""
LARGE_OFFSET_S = 1.0
"""An offset above this means the machines' wall clocks are not synchronized (no NTP): it is corrected, and
a warning says so."""
LARGE_UNCERTAINTY_S = 0.005
"""An uncertainty above this (half the best round trip) means the workers' shared time zero may differ by
that much: a warning says so (lags and intended times of different workers are then comparable only to it)."""


class ClockSample(BaseModel):
    """One round trip: driver clock before (``t1_ns``), the actor's clock (``actor_ns``), driver after
    (``t2_ns``)."""

    t1_ns: int
    actor_ns: int
    t2_ns: int


class ClockOffset(BaseModel):
    """The actor's wall clock minus the driver's, with its bound: the true offset lies in
    ``[offset_s - uncertainty_s, offset_s + uncertainty_s]``."""

    offset_s: float
    uncertainty_s: float
    rtt_s: float
    """The round trip of the sample kept (the smallest); ``uncertainty_s = rtt_s / 2``."""
    samples: int

    @property
    def offset_ns(self) -> int:
        return int(round(self.offset_s * 1e9))

    def describe(self) -> str:
        """``+0.012 ms ± 0.150 ms (min RTT 0.300 ms of 16 round trips)``."""
        return (f"{self.offset_s * 1e3:+.3f} ms ± {self.uncertainty_s * 1e3:.3f} ms (min RTT "
                f"{self.rtt_s * 1e3:.3f} ms of {self.samples} round trips)")

    def warnings(self) -> list[str]:
        """What a large offset or uncertainty means (empty when both are small)."""
        out = []
        if abs(self.offset_s) > LARGE_OFFSET_S:
            out.append(f"clock offset {self.offset_s:+.3f} s: the wall clocks are not synchronized (no NTP?); "
                       "the shared start is corrected by the measured offset, but wall-clock timestamps of "
                       "this worker differ from the driver's by that much")
        if self.uncertainty_s > LARGE_UNCERTAINTY_S:
            out.append(f"clock offset uncertain by ±{self.uncertainty_s * 1e3:.1f} ms (round trip "
                       f"{self.rtt_s * 1e3:.1f} ms): this worker's time zero may differ from the others' by up "
                       "to that much, so its arrivals are shifted by up to that against theirs")
        return out


def estimate_offset(samples: Sequence[ClockSample]) -> ClockOffset:
    """The offset of the minimum-round-trip sample (module docstring).

    Raises:
        DiffbenchError: no samples, or a sample whose driver clock went backwards (``t2 < t1``: the wall
            clock was stepped during the measurement; measure again).
    """
    if not samples:
        raise DiffbenchError("no clock samples to estimate an offset from")
    for s in samples:
        if s.t2_ns < s.t1_ns:
            raise DiffbenchError(f"the driver's wall clock went backwards during a clock round trip "
                                 f"({s.t1_ns} -> {s.t2_ns} ns): it was stepped; measure again")
    best = min(samples, key=lambda s: s.t2_ns - s.t1_ns)
    rtt_ns = best.t2_ns - best.t1_ns
    # midpoint in integers first: t1 + t2 may exceed float precision at epoch nanoseconds
    offset_ns = best.actor_ns - best.t1_ns - rtt_ns / 2
    return ClockOffset(offset_s=offset_ns * 1e-9, uncertainty_s=rtt_ns / 2 * 1e-9, rtt_s=rtt_ns * 1e-9,
                       samples=len(samples))


def measure(read_remote: Callable[[], int], driver_ns: Callable[[], int], n: int = CLOCK_SAMPLES) -> ClockOffset:
    """``n`` round trips of ``read_remote`` (a blocking call returning the remote wall clock in ns) against
    ``driver_ns`` (``time.time_ns``), then :func:`estimate_offset`."""
    samples = []
    for _ in range(max(1, n)):
        t1 = driver_ns()
        ta = int(read_remote())
        t2 = driver_ns()
        samples.append(ClockSample(t1_ns=t1, actor_ns=ta, t2_ns=t2))
    return estimate_offset(samples)
