"""Open- and closed-loop runners: decide *when* each request starts and record one
:class:`~diffbench.core.records.RequestRecord` per request.

Open loop: request ``i`` is dispatched at ``t0 + schedule[i]`` on an absolute monotonic clock
(``time.perf_counter``), whatever is in flight; the wait is recomputed from the absolute target every time,
so client overhead never accumulates (vllm-project/vllm #21104). Latency is reported from the intended
arrival (free of coordinated omission, vllm-project/guidellm #1048) and from the send; an optional in-flight
cap queues requests in the client and the wait is recorded as ``client_queue_s`` (it is part of the lag and of
the latency from arrival; vllm-project/vllm #54101), never hidden.

Closed loop: ``users`` coroutines each send their next request when the previous one completed (plus an
optional think time); ``intended`` is when the user was ready.

Both runners stop on :meth:`RunControl.request_stop`: dispatching stops, in-flight requests get
``drain_s`` seconds, the rest are recorded ``cancelled``. The payload check runs after ``done`` is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError
from diffbench.load.client.base import Attempt, Backend
from diffbench.load.client.control import JsonlSink, RunControl
from diffbench.load.client.workload import RequestSpec

FULL_GC_THRESHOLD = 1_000_000
START_DELAY_S = 0.005
"""t0 is set this far in the future so the first arrival is not already late from setup work."""

OnRecord = Callable[[RequestRecord], None]


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """Keep full (oldest-generation) garbage collections out of the measured window.

    A full collection walks every live container object; with thousands of requests in flight (tasks,
    connections, buffers) each one pauses the event loop for tens of ms, so dispatch falls behind and the
    pauses grow with the number in flight. Inside the window the collector's third threshold is raised so
    only young collections run (short-lived cycles are still freed); objects alive before the run are frozen
    (``gc.freeze``). Both are restored afterwards; the next window starts with a full collection.
    """
    gc.collect()
    gc.freeze()
    old = gc.get_threshold()
    gc.set_threshold(old[0], old[1], FULL_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


class RunResult(BaseModel):
    """The records of one rate (open loop) or one user count (closed loop).

    ``duration_s`` is the measurement window (the scheduled duration, or the time until a stop); ``records``
    are sorted by id and hold every request that was dispatched, whatever its outcome.
    """

    mode: Literal["open", "closed"]
    offered_rate: float | None = None
    users: int | None = None
    duration_s: float
    elapsed_s: float
    planned: int
    dispatched: int
    interrupted: bool = False
    records: list[RequestRecord] = Field(default_factory=list)


class _Recorder:
    def __init__(self, run: str, mode: str, rate: float | None, sink: JsonlSink | None,
                 on_record: OnRecord | None) -> None:
        self.run, self.mode, self.rate = run, mode, rate
        self.sink, self.on_record = sink, on_record
        self.records: list[RequestRecord] = []

    def add(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if self.sink is not None:
            self.sink.write(rec, run=self.run, mode=self.mode)
        if self.on_record is not None:
            self.on_record(rec)


async def _one_request(backend: Backend, spec: RequestSpec, intended: float, now: Callable[[], float],
                       sem: asyncio.Semaphore | None, recorder: _Recorder) -> None:
    """Send one request and record it, whatever happens (cancellation included)."""
    a = Attempt()
    queue_s = 0.0
    phase = "queued"
    try:
        if sem is not None:
            tq = now()
            await sem.acquire()
            queue_s = now() - tq
        try:
            phase = "sending"
            await backend.execute(spec, a, now)
        finally:
            if sem is not None:
                sem.release()
        phase = "checking"
        await backend.check(spec, a)
    except asyncio.CancelledError:
        if phase == "checking":
            a.body = None
            a.error = (a.error + "; " if a.error else "") + "payload not checked (run stopped)"
        else:
            a.outcome, a.done_s, a.body = "cancelled", None, None
            a.error = "still in flight when the run stopped" if phase == "sending" else \
                "still queued in the client when the run stopped"
            abandon = getattr(backend, "abandon_cancelled", None)
            if abandon is not None and a.job_id is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.shield(abandon(a))
    label = getattr(backend, "label", None)  # the backend knows what its dialect really sends
    shape = label(spec) if label is not None else spec.shape.label()
    recorder.add(a.to_record(id=spec.index, rate=recorder.rate, shape=shape, intended_s=intended,
                             client_queue_s=queue_s))


async def _drain(tasks: set[asyncio.Task[None]], control: RunControl, drain_s: float) -> None:
    """Wait for ``tasks``; after a stop, wait at most ``drain_s`` more and cancel the rest."""
    if tasks and not control.stopped:
        await control.interruptible(asyncio.wait(set(tasks)))
    if tasks and control.stopped:
        pending = {t for t in tasks if not t.done()}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=drain_s)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def run_open_loop(
    schedule: np.ndarray,
    specs: Sequence[RequestSpec],
    backend: Backend,
    *,
    offered_rate: float | None,
    duration_s: float,
    max_inflight: int | None = None,
    drain_s: float = 10.0,
    control: RunControl | None = None,
    sink: JsonlSink | None = None,
    on_record: OnRecord | None = None,
) -> RunResult:
    """Dispatch ``specs[i]`` at ``schedule[i]`` seconds after the start, whatever is in flight.

    Args:
        schedule: float64 seconds, sorted, from :func:`diffbench.load.schedules.build_schedule`.
        specs: one request spec per arrival (planned before the clock starts).
        backend: started backend.
        offered_rate: target req/s (recorded on each record; None for a trace).
        duration_s: measurement window in seconds (> 0).
        max_inflight: client-side in-flight cap (None: no cap); waiting time is ``client_queue_s``.
        drain_s: seconds in-flight requests get after a stop before they are cancelled.
        control: stop switch (Ctrl-C); a fresh one when None.
        sink: JSONL sink; each record is written as it finishes.
        on_record: callback per finished record (progress, tests).

    Raises:
        UsageError: mismatched lengths, a non-positive duration or cap.
    """
    if len(specs) != len(schedule):
        raise UsageError(f"{len(specs)} request specs for {len(schedule)} arrivals")
    if not duration_s > 0:
        raise UsageError(f"--duration must be > 0 seconds, got {duration_s}")
    if max_inflight is not None and max_inflight < 1:
        raise UsageError(f"--max-inflight must be >= 1, got {max_inflight}")
    control = control or RunControl()
    run = f"rate={offered_rate:g}" if offered_rate is not None else "trace"
    recorder = _Recorder(run, "open", offered_rate, sink, on_record)
    sem = asyncio.Semaphore(max_inflight) if max_inflight else None
    times = np.asarray(schedule, dtype=np.float64).tolist()
    inflight: set[asyncio.Task[None]] = set()
    perf = time.perf_counter

    def now() -> float:
        return perf() - t0

    dispatched = 0

    async def dispatch() -> None:
        nonlocal dispatched
        loop = asyncio.get_running_loop()
        for i, t in enumerate(times):
            spec = specs[i]  # drawn before the wait (specs may be planned lazily), never on the send path
            delay = t0 + t - perf()
            if delay > 0:
                await asyncio.sleep(delay)
            task = loop.create_task(_one_request(backend, spec, t, now, sem, recorder))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
            dispatched = i + 1

    with quiet_gc():
        t0 = perf() + START_DELAY_S
        finished = await control.interruptible(dispatch())
        stop_at = now()
        await _drain(inflight, control, drain_s)
    window = duration_s if finished else max(min(stop_at, duration_s), 1e-9)
    return RunResult(mode="open", offered_rate=offered_rate, duration_s=window, elapsed_s=now(),
                     planned=len(times), dispatched=dispatched, interrupted=not finished or control.stopped,
                     records=sorted(recorder.records, key=lambda r: r.id))


async def run_closed_loop(
    users: int,
    next_spec: Callable[[], RequestSpec],
    backend: Backend,
    *,
    duration_s: float,
    think_time_s: float = 0.0,
    drain_s: float = 10.0,
    control: RunControl | None = None,
    sink: JsonlSink | None = None,
    on_record: OnRecord | None = None,
) -> RunResult:
    """``users`` users, each sending its next request when its previous one completed, for ``duration_s``.

    A user starts no request after ``duration_s``; requests in flight then finish (bounded by the backend's
    per-request timeout). ``intended_s`` is when the user was ready, so lag is ~0 by construction.

    Raises:
        UsageError: ``users`` < 1, a non-positive duration or a negative think time.
    """
    if users < 1:
        raise UsageError(f"--users must be >= 1, got {users}")
    if not duration_s > 0:
        raise UsageError(f"--duration must be > 0 seconds, got {duration_s}")
    if think_time_s < 0:
        raise UsageError(f"--think-time must be >= 0 seconds, got {think_time_s}")
    control = control or RunControl()
    recorder = _Recorder(f"users={users}", "closed", None, sink, on_record)
    perf = time.perf_counter

    def now() -> float:
        return perf() - t0

    count = 0

    async def user() -> None:
        nonlocal count
        await asyncio.sleep(max(0.0, t0 - perf()))
        while not control.stopped:
            ready = now()
            if ready >= duration_s:
                return
            count += 1
            await _one_request(backend, next_spec(), ready, now, None, recorder)
            if think_time_s > 0:
                await asyncio.sleep(think_time_s)

    loop = asyncio.get_running_loop()
    with quiet_gc():
        t0 = perf() + START_DELAY_S
        tasks: set[asyncio.Task[None]] = {loop.create_task(user()) for _ in range(users)}
        finished = await control.interruptible(asyncio.wait(set(tasks)))
        stop_at = now()
        await _drain(tasks, control, drain_s)
    window = duration_s if finished and not control.stopped else max(min(stop_at, duration_s), 1e-9)
    return RunResult(mode="closed", users=users, duration_s=window, elapsed_s=now(), planned=count,
                     dispatched=count, interrupted=control.stopped,
                     records=sorted(recorder.records, key=lambda r: r.id))
