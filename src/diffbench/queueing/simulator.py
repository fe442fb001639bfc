"""Discrete-event simulation of ``c`` identical devices behind one FCFS queue (the engine of
``diffbench simulate`` and of the planner's queueing-aware capacity).

Model: requests are served first come, first served by ``c`` identical devices; a request starts when it
has arrived and a device is free, and runs for its service time. For FCFS with identical servers each
arrival takes the earliest-free device, so the whole simulation is one pass over arrivals in time order
with a heap of device free times (``start = max(arrival, min free time)``), O(n log c).

- **Open loop** (:func:`simulate_open`): arrivals from any schedule of :mod:`diffbench.queueing.schedules`,
  independent of the queue.
- **Closed loop** (:func:`simulate_closed`): ``N`` users, all ready at t = 0; each sends its next request
  ``think`` seconds after its previous one completes, and stops sending at ``duration_s`` (requests already
  sent complete).

Records follow :class:`~diffbench.core.records.RequestRecord`: ``intended = sent = arrival`` (the simulated
client is never late), ``done = completion``, outcome ``ok``; latency from arrival = waiting + service.
``diffbench.load.simulator`` summarises runs with the same ``RateSummary`` as ``diffbench load``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Literal

import numpy as np

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError
from diffbench.queueing.service_time import ServiceTime


def fcfs_completions(arrivals: np.ndarray, service: np.ndarray, devices: int) -> np.ndarray:
    """Completion times of FCFS service on ``devices`` identical servers.

    Args:
        arrivals: float64 seconds, sorted non-decreasing, shape (n,).
        service: float64 seconds >= 0, shape (n,), the service time of each arrival.
        devices: number of servers, >= 1.

    Returns:
        float64 completion times in seconds, shape (n,); waiting time = done - service - arrival.

    Raises:
        ValueError: mismatched shapes or devices < 1.
    """
    if arrivals.shape != service.shape:
        raise ValueError(f"arrivals {arrivals.shape} and service {service.shape} differ in shape")
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    free = [0.0] * devices  # a valid heap: all equal
    replace = heapq.heapreplace
    out: list[float] = []
    append = out.append
    for a, s in zip(arrivals.tolist(), service.tolist(), strict=True):
        f = free[0]
        d = (a if a > f else f) + s
        replace(free, d)
        append(d)
    return np.asarray(out, dtype=np.float64)


@dataclass(frozen=True)
class SimRun:
    """One simulated rate or user count, as columns (float64 seconds, shape (n,), in arrival order)."""

    mode: Literal["open", "closed"]
    intended: np.ndarray
    done: np.ndarray
    service: np.ndarray
    duration_s: float
    offered_rate: float | None = None
    users: int | None = None

    @property
    def latency(self) -> np.ndarray:
        """Latency from arrival (waiting + service), seconds."""
        return self.done - self.intended

    @property
    def waiting(self) -> np.ndarray:
        """Time in queue before service, seconds."""
        return self.done - self.service - self.intended

    def to_records(self) -> list[RequestRecord]:
        """Per-request records (intended = sent = arrival, done = completion, outcome ok)."""
        rate = self.offered_rate
        return [RequestRecord(id=i, rate=rate, intended_s=a, sent_s=a, done_s=d, outcome="ok")
                for i, (a, d) in enumerate(zip(self.intended.tolist(), self.done.tolist(), strict=True))]


def simulate_open(
    arrivals: np.ndarray,
    service: ServiceTime,
    devices: int,
    rng: np.random.Generator,
    *,
    duration_s: float,
    offered_rate: float | None = None,
) -> SimRun:
    """Open loop: ``arrivals`` (float64 seconds, sorted) served FCFS by ``devices`` servers.

    Args:
        arrivals: arrival times from a schedule, seconds.
        service: the service-time distribution (one draw per request).
        devices: number of identical devices, >= 1.
        rng: generator for service times.
        duration_s: the schedule's window in seconds (for the summary's halves).
        offered_rate: target req/s recorded in the summary.
    """
    arrivals = np.asarray(arrivals, dtype=np.float64)
    svc = service.sample(arrivals.size, rng)
    done = fcfs_completions(arrivals, svc, devices)
    return SimRun("open", arrivals, done, svc, float(duration_s), offered_rate=offered_rate)


def simulate_closed(
    users: int,
    duration_s: float,
    service: ServiceTime,
    devices: int,
    rng: np.random.Generator,
    *,
    think: ServiceTime | None = None,
) -> SimRun:
    """Closed loop: ``users`` users, each sending again ``think`` seconds after its previous completion.

    All users are ready at t = 0; no request is sent at or after ``duration_s`` seconds; requests in
    flight at that time complete.

    Args:
        users: number of users, >= 1.
        duration_s: seconds during which users send, > 0.
        service: service-time distribution.
        devices: identical devices, >= 1.
        rng: generator for service (and think) times.
        think: think-time distribution in seconds (None: send again immediately).

    Raises:
        UsageError: users, devices or duration_s not positive.
    """
    if users < 1 or devices < 1 or not duration_s > 0:
        raise UsageError(f"closed loop needs users >= 1, devices >= 1, duration > 0; got {users}, {devices}, "
                         f"{duration_s}")
    block = 65536
    svc_block: list[float] = []
    think_block: list[float] = []
    ready = [0.0] * users
    free = [0.0] * devices
    replace = heapq.heapreplace
    intended: list[float] = []
    done: list[float] = []
    svc_used: list[float] = []
    si = ti = 0
    while ready[0] < duration_s:
        if si == len(svc_block):
            svc_block, si = service.sample(block, rng).tolist(), 0
        s = svc_block[si]
        si += 1
        r = ready[0]
        f = free[0]
        d = (r if r > f else f) + s
        replace(free, d)
        nxt = d
        if think is not None:
            if ti == len(think_block):
                think_block, ti = think.sample(block, rng).tolist(), 0
            nxt += think_block[ti]
            ti += 1
        replace(ready, nxt)
        intended.append(r)
        done.append(d)
        svc_used.append(s)
    return SimRun("closed", np.asarray(intended), np.asarray(done), np.asarray(svc_used), float(duration_s),
                  users=users)
