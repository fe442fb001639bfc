"""Open- and closed-loop runners: decide *when* each request starts and record one
:class:`~diffbench.core.records.RequestRecord` per request.

Open loop: request ``i`` is dispatched at ``t0 + schedule[i]`` on an absolute monotonic clock
(``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux, so one ``t0_ns`` can be shared by several processes),
whatever is in flight; the wait is recomputed from the absolute target every time, so client overhead never
accumulates (vllm-project/vllm #21104). Arrivals already due when the dispatcher wakes are dispatched in the
same loop pass, without sleeping between them (see :data:`SPIN_TAIL_S` for the wait itself). Latency is reported from the intended
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
from diffbench.load.client.dialects import sends_steps_and_frames
from diffbench.load.client.workload import RequestSpec
from diffbench.load.merge import HdrSummary

FULL_GC_THRESHOLD = 1_000_000
START_DELAY_S = 0.005
"""t0 is set this far in the future so the first arrival is not already late from setup work."""
SPIN_TAIL_S = 0.001
"""The dispatcher sleeps (``asyncio.sleep``) until this long before the next send time, then waits out the
rest in a loop of ``asyncio.sleep(0)`` (each pass yields to the event loop, so responses are still read).

Why: the selector's timeout has millisecond granularity (``epoll_wait`` in ms, rounded up; libuv timers under
uvloop are ms too), so a plain sleep wakes 0-1 ms late. The tail is bounded: at most ``SPIN_TAIL_S`` per wait
(:data:`SPIN_BUDGET` caps the share of the window spent spinning).

Measured (2026-12-01, a 2-core box shared with other busy processes, so noisy; interleaved runs of 3 s,
3 repetitions each, same process; lag = sent - intended, in ms, p50 / p99 ranges over the repetitions):

========================================  ====================  ====================
run                                       tail 0 (plain sleep)  tail 1 ms
========================================  ====================  ====================
asyncio, no-I/O backend, 500 req/s        0.68-0.73 / 1.14-1.27  0.013-0.015 / 0.41-0.57
asyncio, no-I/O backend, 2,000 req/s      0.58 / 1.28-1.45       0.15 / 0.80-0.84
asyncio, HTTP no-op server, 200 req/s     0.76-0.83 / 1.29-4.43  0.15-0.24 / 0.19-0.39
uvloop, no-I/O backend, 500 req/s         0.13-0.16 / 0.62-0.81  0.010-0.022 / 0.31-0.36
uvloop, HTTP no-op server, 200 req/s      0.14-0.29 / 0.82-2.09  0.15-0.16 / 0.25-0.33
========================================  ====================  ====================

(HTTP: the httpx backend of that day, payload checks off, no-op server in another process.) The tail lowers
lag p99 by 2-4x on both loops, so it is on by default.

Not resolved: on an oversubscribed machine (more runnable processes than cores: 2 cores, other busy
processes, the server and 1-2 load workers, aiohttp, 1,000 req/s) lag p99 ranged 5-74 ms with the tail on
or off, dominated by CPU contention; there the tail's CPU competes with the rest. ``spin_tail_s=0`` (runner,
:class:`~diffbench.load.client.executor.WorkerPool`) turns it off; to be rechecked on a quiet machine."""
SPIN_BUDGET = 0.25
"""At most this fraction of the elapsed window is spent in the busy-wait tail; past it, plain sleeps."""

OnRecord = Callable[[RequestRecord], None]
OnSent = Callable[[float], None]


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
    are sorted by id and hold every request that was dispatched, whatever its outcome. ``hdr``: the
    HdrHistogram merge of a :class:`~diffbench.load.client.executor.WorkerPool` run in hdr mode (None
    otherwise; the summary always comes from ``records``).
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
    hdr: HdrSummary | None = None
    t0_ns: int | None = None
    """The run's ``t=0`` on ``time.perf_counter_ns`` of the process that started it (the origin of the
    records' offsets; None: not recorded)."""


class _Recorder:
    def __init__(self, run: str, mode: str, rate: float | None, sink: JsonlSink | None,
                 on_record: OnRecord | None) -> None:
        self.run, self.mode, self.rate = run, mode, rate
        self.sink, self.on_record = sink, on_record
        self.records: list[RequestRecord] = []
        self.t0_ns: int | None = None  # the row's t=0 on time.perf_counter_ns, once the run fixed it

    def add(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if self.sink is not None:
            self.sink.write(rec, run=self.run, mode=self.mode, t0_ns=self.t0_ns)
        if self.on_record is not None:
            self.on_record(rec)


class _CheckHold:
    """Holds the backend's payload checks while a run has requests to time (``load --defer-checks``).

    A backend with ``hold_checks()`` / ``release_checks()`` (:class:`~diffbench.load.client.http.HttpBackend`)
    is held from the run's start; the checks are released once the run sends nothing more and no request
    is waiting for its answer (the last timed reception), or at once on a stop, so the drain checks them.
    A backend without the two methods is never held."""

    def __init__(self, backend: Backend) -> None:
        self._release: Callable[[], None] | None = getattr(backend, "release_checks", None)
        hold: Callable[[], None] | None = getattr(backend, "hold_checks", None)
        if hold is None or self._release is None:
            self._release = None
        else:
            hold()
        self.executing = 0
        self.sending_done = False

    def enter(self) -> None:
        """A request starts waiting for its answer."""
        self.executing += 1

    def leave(self) -> None:
        """A request's answer is in (or it ended otherwise)."""
        self.executing -= 1
        if self.sending_done and self.executing <= 0:
            self.release()

    def done_sending(self) -> None:
        """The run starts no more requests."""
        self.sending_done = True
        if self.executing <= 0:
            self.release()

    def release(self) -> None:
        """Hand the held checks to the workers (idempotent)."""
        release, self._release = self._release, None
        if release is not None:
            release()


async def _one_request(backend: Backend, spec: RequestSpec, intended: float, now: Callable[[], float],
                       sem: asyncio.Semaphore | None, recorder: _Recorder, on_sent: OnSent | None,
                       detached: set[asyncio.Task[None]] | None = None, hold: _CheckHold | None = None) -> None:
    """Send one request and record it, whatever happens (cancellation included).

    ``on_sent`` gets ``now() - intended`` (seconds) just before the backend's ``execute`` (the record's
    ``sent_s`` is taken by the backend right after it serialized the body). With ``detached`` (the closed
    loop) the payload check and the record run in a task added to that set and this returns when the
    response is complete, so the check never delays the user's next request."""
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
            if on_sent is not None:
                on_sent(now() - intended)
            if hold is not None:
                hold.enter()
            try:
                await backend.execute(spec, a, now)
            finally:
                if hold is not None:
                    hold.leave()
        finally:
            if sem is not None:
                sem.release()
    except asyncio.CancelledError:
        a.outcome, a.done_s, a.body = "cancelled", None, None
        a.error = "still in flight when the run stopped" if phase == "sending" else \
            "still queued in the client when the run stopped"
        abandon = getattr(backend, "abandon_cancelled", None)
        if abandon is not None and a.job_id is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(abandon(a))
        _record(backend, spec, a, intended, queue_s, recorder)
        return
    if detached is None:
        await _check_and_record(backend, spec, a, intended, queue_s, recorder)
        return
    task = asyncio.get_running_loop().create_task(_check_and_record(backend, spec, a, intended, queue_s,
                                                                    recorder))
    detached.add(task)
    task.add_done_callback(detached.discard)


async def _check_and_record(backend: Backend, spec: RequestSpec, a: Attempt, intended: float, queue_s: float,
                            recorder: _Recorder) -> None:
    """The payload check of a finished attempt (outside the timed region), then its record; a stop during
    the check records the attempt with "payload not checked"."""
    try:
        await backend.check(spec, a)
    except asyncio.CancelledError:
        a.body = None
        a.error = (a.error + "; " if a.error else "") + "payload not checked (run stopped)"
    _record(backend, spec, a, intended, queue_s, recorder)


def _record(backend: Backend, spec: RequestSpec, a: Attempt, intended: float, queue_s: float,
            recorder: _Recorder) -> None:
    label = getattr(backend, "label", None)  # the backend knows what its dialect really sends
    shape = label(spec) if label is not None else spec.shape.label()
    recorder.add(a.to_record(id=spec.index, rate=recorder.rate, shape=shape, intended_s=intended,
                             client_queue_s=queue_s, work=work_fields(backend, spec)))


def work_fields(backend: Backend, spec: RequestSpec) -> dict[str, int | None]:
    """What ``spec`` asks for, as the record's ``width``, ``height``, ``frames``, ``steps`` and ``outputs``:
    steps and frames only when the backend's dialect sends them (else the server's defaults apply and they
    are None)."""
    target = getattr(backend, "target", None)
    sends = target is None or sends_steps_and_frames(target.dialect)
    s = spec.shape
    return {"width": s.width, "height": s.height, "frames": s.frames if sends else None,
            "steps": s.steps if sends else None, "outputs": 1 if spec.kind == "video" else s.n}


def make_clock(t0_ns: int) -> Callable[[], float]:
    """``now()``: float seconds since ``t0_ns`` (an integer ``time.perf_counter_ns`` reading).

    The difference is taken in integer nanoseconds and converted once, so a float64 keeps ns precision
    however large the absolute clock value is."""
    perf_ns = time.perf_counter_ns

    def now() -> float:
        return (perf_ns() - t0_ns) * 1e-9

    return now


def start_time_ns(delay_s: float = START_DELAY_S) -> int:
    """A ``t0_ns`` ``delay_s`` seconds in the future on ``time.perf_counter_ns``."""
    return time.perf_counter_ns() + int(delay_s * 1e9)


async def wait_until_ns(target_ns: int, spin_s: float = SPIN_TAIL_S) -> float:
    """Sleep until ``time.perf_counter_ns() >= target_ns``: ``asyncio.sleep`` to ``spin_s`` before it, then
    ``asyncio.sleep(0)`` passes (each yields to the loop). Returns the seconds spent in the spin tail."""
    perf_ns = time.perf_counter_ns
    spin_ns = int(spin_s * 1e9)
    delay = target_ns - perf_ns()
    if delay > spin_ns:
        await asyncio.sleep((delay - spin_ns) * 1e-9)
    if spin_ns <= 0:  # uvloop's ms timers round to nearest and may wake early: sleep again until due
        while (delay := target_ns - perf_ns()) > 0:
            await asyncio.sleep(delay * 1e-9)
        return 0.0
    t_spin = perf_ns()
    while perf_ns() < target_ns:
        await asyncio.sleep(0)
    return (perf_ns() - t_spin) * 1e-9


async def _drain(tasks: set[asyncio.Task[None]], control: RunControl, drain_s: float,
                 hold: _CheckHold | None = None) -> None:
    """Wait for ``tasks``; after a stop, release ``hold`` and wait at most ``drain_s`` more (less after
    :meth:`RunControl.request_hurry`) and cancel the rest."""
    if tasks and not control.stopped:
        await control.interruptible(asyncio.wait(set(tasks)))
    if control.stopped and hold is not None:
        hold.release()
    if tasks and control.stopped:
        pending = {t for t in tasks if not t.done()}
        if pending and not control.hurried:  # a second Ctrl-C (request_hurry) ends the drain at once
            hurry = control.hurry_future()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + drain_s
            while pending and not hurry.done() and (left := deadline - loop.time()) > 0:
                await asyncio.wait(pending | {hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                pending = {t for t in pending if not t.done()}
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
    on_sent: OnSent | None = None,
    t0_ns: int | None = None,
    spin_tail_s: float = SPIN_TAIL_S,
    run_label: str | None = None,
) -> RunResult:
    """Dispatch ``specs[i]`` at ``schedule[i]`` seconds after the start, whatever is in flight.

    Args:
        schedule: float64 seconds, sorted, from :func:`diffbench.queueing.schedules.build_schedule`.
        specs: one request spec per arrival (planned before the clock starts).
        backend: started backend.
        offered_rate: target req/s (recorded on each record; None for a trace).
        duration_s: measurement window in seconds (> 0).
        max_inflight: client-side in-flight cap (None: no cap); waiting time is ``client_queue_s``.
        drain_s: seconds in-flight requests get after a stop before they are cancelled.
        control: stop switch (Ctrl-C); a fresh one when None.
        sink: JSONL sink; each record is written as it finishes.
        on_record: callback per finished record (progress, tests).
        on_sent: callback per request as it is handed to the backend, with its lag (seconds).
        t0_ns: the run start on ``time.perf_counter_ns`` (shared by the processes of a
            :class:`~diffbench.load.client.executor.WorkerPool`); None: :data:`START_DELAY_S` from now.
        spin_tail_s: busy-wait tail of each wait (seconds, >= 0; 0 = plain sleeps), see :data:`SPIN_TAIL_S`.
        run_label: the JSONL ``run`` of these records (default ``rate=R``, or ``trace`` without a rate).

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
    run = run_label or (f"rate={offered_rate:g}" if offered_rate is not None else "trace")
    recorder = _Recorder(run, "open", offered_rate, sink, on_record)
    sem = asyncio.Semaphore(max_inflight) if max_inflight else None
    times_arr = np.asarray(schedule, dtype=np.float64)
    times = times_arr.tolist()
    offsets_ns = np.rint(times_arr * 1e9).astype(np.int64).tolist()
    inflight: set[asyncio.Task[None]] = set()
    perf_ns = time.perf_counter_ns
    dispatched = 0
    n = len(times)

    async def dispatch() -> None:
        nonlocal dispatched
        loop = asyncio.get_running_loop()
        spun = 0.0
        i = 0
        while i < n:
            spec = specs[i]  # drawn before the wait (specs may be planned lazily), never on the send path
            target = t0 + offsets_ns[i]
            if target > perf_ns():
                elapsed = max(perf_ns() - t0, 1) * 1e-9
                tail = spin_tail_s if spun < SPIN_BUDGET * elapsed else 0.0
                spun += await wait_until_ns(target, tail)
            # every arrival due by now goes out in this pass, without sleeping between them
            due = perf_ns()
            while True:
                task = loop.create_task(_one_request(backend, spec, times[i], now, sem, recorder, on_sent,
                                                     hold=hold))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                i += 1
                dispatched = i
                if i >= n or t0 + offsets_ns[i] > due:
                    break
                spec = specs[i]

    hold = _CheckHold(backend)
    with quiet_gc():
        t0 = start_time_ns() if t0_ns is None else int(t0_ns)
        recorder.t0_ns = t0
        now = make_clock(t0)
        try:
            finished = await control.interruptible(dispatch())
            stop_at = now()
            hold.done_sending()
            await _drain(inflight, control, drain_s, hold)
        finally:
            hold.release()
    window = duration_s if finished else max(min(stop_at, duration_s), 1e-9)
    return RunResult(mode="open", offered_rate=offered_rate, duration_s=window, elapsed_s=now(),
                     planned=n, dispatched=dispatched, t0_ns=t0, interrupted=not finished or control.stopped,
                     records=sorted(recorder.records, key=lambda r: r.id))


def check_closed_loop_args(users: int, duration_s: float, think_time_s: float) -> None:
    """Refuse a closed loop that cannot run.

    Raises:
        UsageError: ``users`` < 1, a non-positive duration or a negative think time (seconds).
    """
    if users < 1:
        raise UsageError(f"--users must be >= 1, got {users}")
    if not duration_s > 0:
        raise UsageError(f"--duration must be > 0 seconds, got {duration_s}")
    if think_time_s < 0:
        raise UsageError(f"--think-time must be >= 0 seconds, got {think_time_s}")


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
    on_sent: OnSent | None = None,
    t0_ns: int | None = None,
) -> RunResult:
    """``users`` users, each sending its next request when its previous one completed, for ``duration_s``.

    A user starts no request after ``duration_s``; requests in flight then finish (bounded by the backend's
    per-request timeout). ``intended_s`` is when the user was ready, so lag is ~0 by construction;
    ``on_sent`` gets 0.0 per request. ``t0_ns`` as in :func:`run_open_loop`.

    Raises:
        UsageError: ``users`` < 1, a non-positive duration or a negative think time.
    """
    check_closed_loop_args(users, duration_s, think_time_s)
    control = control or RunControl()
    recorder = _Recorder(f"users={users}", "closed", None, sink, on_record)
    sent_hook = None if on_sent is None else (lambda _lag: on_sent(0.0))
    count = 0

    async def user() -> None:
        nonlocal count
        await asyncio.sleep(max(0.0, -now()))
        while not control.stopped:
            ready = now()
            if ready >= duration_s:
                return
            count += 1
            await _one_request(backend, next_spec(), ready, now, None, recorder, sent_hook, checks, hold)
            if think_time_s > 0:
                await asyncio.sleep(think_time_s)

    loop = asyncio.get_running_loop()
    hold = _CheckHold(backend)
    with quiet_gc():
        recorder.t0_ns = t0 = start_time_ns() if t0_ns is None else int(t0_ns)
        now = make_clock(t0)
        checks: set[asyncio.Task[None]] = set()  # payload checks run beside the users (never between requests)
        tasks: set[asyncio.Task[None]] = {loop.create_task(user()) for _ in range(users)}
        try:
            finished = await control.interruptible(asyncio.wait(set(tasks)))
            stop_at = now()
            await _drain(tasks, control, drain_s, hold)
            hold.done_sending()
            await _drain(checks, control, drain_s, hold)
        finally:
            hold.release()
    window = duration_s if finished and not control.stopped else max(min(stop_at, duration_s), 1e-9)
    return RunResult(mode="closed", users=users, duration_s=window, elapsed_s=now(), planned=count,
                     dispatched=count, t0_ns=t0, interrupted=control.stopped,
                     records=sorted(recorder.records, key=lambda r: r.id))
