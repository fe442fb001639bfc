"""Who runs the load: this process (:class:`InProcess`) or N worker processes merged into one result
(:class:`WorkerPool`, ``diffbench load --workers N``).

Both implement :class:`LoadExecutor` and return the same :class:`~diffbench.load.client.runners.RunResult`
(records sorted by id, planned, dispatched, interrupted, window), so
:func:`~diffbench.load.summary.summarize_rate` works unchanged.

WorkerPool semantics:

- **Processes.** ``multiprocessing`` with the *spawn* start method, not daemonic (a worker starts its own
  payload-check processes); each worker has one event loop (uvloop where installed) and one
  ``HttpBackend(target)``. A worker whose parent disappears sees its pipe close, stops and exits; a pool
  never closed is shut down at interpreter exit. They are started once (first run, or :meth:`start`) and
  serve every run of a sweep until :meth:`close`. A pool belongs to the event loop it was started in (its
  pipe readers hand messages to that loop). The warm-up stays in the parent (sweep).
- **Open loop: partition by request index.** The parent builds the seeded schedule and the specs exactly as
  one process would; request ``i`` goes to worker ``i % N`` with its intended time and its spec (id ``i``),
  so the union of the workers' schedules *is* the one-process schedule (:func:`partition`).
- **One clock.** Every worker dispatches against one ``t0_ns`` on ``time.perf_counter_ns``
  (CLOCK_MONOTONIC, system-wide on Linux), set :data:`POOL_START_DELAY_S` in the future once every worker
  reported ready, so process start-up and job transfer are outside the window.
- **Closed loop.** Users are split round-robin (users ``w, w+N, …`` on worker ``w``, :func:`split_users`).
  Each worker walks a copy of the parent's planner in groups of N draws and keeps draw ``w`` of each group,
  so its ``j``-th request has id ``base + j*N + w`` (disjoint id spaces) and carries exactly the spec that
  the one-process planner would have drawn for that id. The parent's planner is then advanced past every id
  used, so later runs of the sweep continue the stream.
- **Streaming.** Workers send finished records (and the lags of requests sent) in batches every
  :data:`~diffbench.load.client.worker.FLUSH_S` s; the parent reads each pipe in a reader thread that hands
  messages to its loop (``call_soon_threadsafe``; the loop never blocks on a pipe) and calls ``sink.write`` / ``on_record`` once per record and ``on_sent`` once
  per request.
- **Stop.** ``control.request_stop`` in the parent (Ctrl-C) is sent to every worker: they stop dispatching,
  give in-flight requests ``drain_s`` and cancel the rest; every record comes back (a valid partial result).
- **A worker that dies** (killed, crashed) stops the run: the other workers are stopped and drained, their
  records still reach the sink, and :class:`WorkerDied` is raised naming the worker, its exit code and how
  many of its planned requests were lost. A run with a hole in its schedule is not a measurement of the
  offered rate, so no summary is made from it.
- **Client cap.** ``max_inflight`` is split like the users (worker ``w`` gets ``len(range(w, cap, N))``
  slots; the sum is the cap, but a worker cannot lend idle slots to another); it must be ``>= N``.
- **Merge.** Records are always merged exactly (:func:`~diffbench.load.merge.merge_records`; the summary
  percentiles equal those of one list). ``merge="hdr"`` additionally has each worker build HdrHistograms of
  its ok requests, merged in ``RunResult.hdr`` with the error stated (:mod:`diffbench.load.merge`);
  ``"auto"`` does so when an open-loop run plans more than :data:`AUTO_HDR_THRESHOLD` requests. In this
  version records are kept in every mode (bounded by ``--max-requests``), so the summary is exact; the
  histograms are the path for runs whose records will not be shipped (many machines).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import multiprocessing as mp
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import numpy as np

from diffbench.core.records import RequestRecord
from diffbench.errors import DiffbenchError, UsageError
from diffbench.load.client.base import Backend
from diffbench.load.client.control import JsonlSink, RunControl
from diffbench.load.client.runners import (
    SPIN_TAIL_S,
    OnRecord,
    OnSent,
    RunResult,
    check_closed_loop_args,
    run_closed_loop,
    run_open_loop,
    start_time_ns,
)
from diffbench.load.client.workload import RequestPlanner, RequestSpec
from diffbench.load.merge import LatencyHistograms, merge_records

MergeMode = Literal["exact", "hdr", "auto"]
AUTO_HDR_THRESHOLD = 100_000
"""``merge="auto"``: HdrHistograms are added when an open-loop run plans more requests than this."""
POOL_START_DELAY_S = 0.1
"""The shared t0 is set this far in the future after every worker reported ready (the ``go`` message must
reach every process first)."""
START_TIMEOUT_S = 120.0
"""Seconds a worker may take to start (spawn, imports, backend) or to accept a job."""


_LIVE: set[WorkerPool] = set()
_AT_EXIT = False


def _shutdown_live_pools() -> None:
    """Workers are not daemonic (each may start its own payload-check processes, which a daemonic process
    may not), so ``multiprocessing`` joins them at interpreter exit: a pool left open is shut down here
    first. Registered at the first :meth:`WorkerPool.start`, after ``multiprocessing.util`` registered its
    own exit handler, so it runs before it (atexit runs the last registered first)."""
    for pool in list(_LIVE):
        pool._shutdown_now()


def _register_at_exit() -> None:
    global _AT_EXIT
    if not _AT_EXIT:
        import multiprocessing.util  # noqa: F401  (its atexit handler must be registered before ours)

        atexit.register(_shutdown_live_pools)
        _AT_EXIT = True


class WorkerDied(DiffbenchError):
    """A load worker process exited during a run; the message names it, its exit code and the lost requests
    (exit 1: nothing valid to summarize)."""

    exit_code = 1


class LoadExecutor(Protocol):
    """Runs one open-loop rate or one closed-loop user count and returns its records."""

    async def open_loop(self, schedule: np.ndarray, specs: Sequence[RequestSpec], *, offered_rate: float | None,
                        duration_s: float, max_inflight: int | None = None, drain_s: float = 10.0,
                        control: RunControl | None = None, sink: JsonlSink | None = None,
                        on_record: OnRecord | None = None, on_sent: OnSent | None = None,
                        run_label: str | None = None) -> RunResult:
        """As :func:`~diffbench.load.client.runners.run_open_loop`."""

    async def closed_loop(self, users: int, planner: RequestPlanner, *, duration_s: float,
                          think_time_s: float = 0.0, drain_s: float = 10.0, control: RunControl | None = None,
                          sink: JsonlSink | None = None, on_record: OnRecord | None = None,
                          on_sent: OnSent | None = None) -> RunResult:
        """As :func:`~diffbench.load.client.runners.run_closed_loop`, drawing from ``planner``."""


class InProcess:
    """Runs the load in this process's event loop on ``backend`` (the default executor)."""

    workers = 1

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def open_loop(self, schedule: np.ndarray, specs: Sequence[RequestSpec], *, offered_rate: float | None,
                        duration_s: float, max_inflight: int | None = None, drain_s: float = 10.0,
                        control: RunControl | None = None, sink: JsonlSink | None = None,
                        on_record: OnRecord | None = None, on_sent: OnSent | None = None,
                        run_label: str | None = None) -> RunResult:
        return await run_open_loop(schedule, specs, self.backend, offered_rate=offered_rate,
                                   duration_s=duration_s, max_inflight=max_inflight, drain_s=drain_s,
                                   control=control, sink=sink, on_record=on_record, on_sent=on_sent,
                                   run_label=run_label)

    async def closed_loop(self, users: int, planner: RequestPlanner, *, duration_s: float,
                          think_time_s: float = 0.0, drain_s: float = 10.0, control: RunControl | None = None,
                          sink: JsonlSink | None = None, on_record: OnRecord | None = None,
                          on_sent: OnSent | None = None) -> RunResult:
        return await run_closed_loop(users, planner.next, self.backend, duration_s=duration_s,
                                     think_time_s=think_time_s, drain_s=drain_s, control=control, sink=sink,
                                     on_record=on_record, on_sent=on_sent)


def partition(n: int, workers: int) -> list[np.ndarray]:
    """Request indices per worker: worker ``w`` gets ``w, w+N, w+2N, …`` (int64 arrays; their union is
    ``0..n-1``, each index once)."""
    return [np.arange(w, n, workers, dtype=np.int64) for w in range(workers)]


def split_open(schedule: np.ndarray, specs: Sequence[RequestSpec],
               workers: int) -> list[tuple[np.ndarray, list[RequestSpec]]]:
    """Each worker's share of an open-loop run: (intended times in s, float64; specs), by :func:`partition`.

    ``specs`` is read once, in order (a lazy :class:`~diffbench.load.client.workload.PlannedSpecs` works).
    Each share stays sorted by time, because the schedule is."""
    times = np.asarray(schedule, dtype=np.float64)
    spec_list = [specs[i] for i in range(len(times))]
    return [(times[idx], [spec_list[i] for i in idx]) for idx in partition(len(times), workers)]


def split_users(users: int, workers: int) -> list[int]:
    """Closed-loop users per worker, round-robin (user ``u`` on worker ``u % N``); sums to ``users``."""
    return [len(range(w, users, workers)) for w in range(workers)]


class _Worker:
    def __init__(self, index: int, proc: Any, conn: Any) -> None:
        self.index, self.proc, self.conn = index, proc, conn
        self.loop_name: str | None = None
        self.alive = True
        self.inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def send(self, msg: tuple[Any, ...]) -> None:
        if self.alive:
            with contextlib.suppress(OSError, ValueError):  # broken pipe: the reader reports the death
                self.conn.send(msg)

    def exit_code(self) -> int | None:
        self.proc.join(2.0)
        return self.proc.exitcode


class WorkerPool:
    """N load processes behind one :class:`LoadExecutor` (module docstring for the semantics).

    Args:
        target: where to send (pickled to every worker; each builds its own ``HttpBackend(target)``).
        workers: number of processes (>= 1).
        merge: ``"exact"``, ``"hdr"`` or ``"auto"`` (module docstring).
        use_uvloop: passed to :func:`diffbench.load.client.eventloop.run` in each worker (None = auto).
        backend_options: keyword arguments of each worker's ``HttpBackend(target, **backend_options)``
            (picklable; e.g. a smaller payload-check pool per worker).
        spin_tail_s: each worker's busy-wait tail (:data:`~diffbench.load.client.runners.SPIN_TAIL_S`).

    Raises:
        UsageError: ``workers`` < 1 or an unknown merge mode.
    """

    def __init__(self, target: Any, workers: int, *, merge: MergeMode = "auto",
                 use_uvloop: bool | None = None, backend_options: Mapping[str, Any] | None = None,
                 spin_tail_s: float = SPIN_TAIL_S) -> None:
        if workers < 1:
            raise UsageError(f"--workers must be >= 1, got {workers}")
        if merge not in ("exact", "hdr", "auto"):
            raise UsageError(f"merge must be exact, hdr or auto, got {merge!r}")
        self.target, self.workers, self.merge, self.use_uvloop = target, workers, merge, use_uvloop
        self.backend_options = dict(backend_options or {})
        self.spin_tail_s = spin_tail_s
        self.start_delay_s = POOL_START_DELAY_S  # how far ahead the shared t0 is set (a Ray pool sets more)
        self._procs: list[_Worker] = []
        self._broken: str | None = None

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), empty before :meth:`start`."""
        return [w.proc for w in self._procs]

    @property
    def loop_names(self) -> list[str | None]:
        """``"uvloop"`` / ``"asyncio"`` per worker (what each one runs)."""
        return [w.loop_name for w in self._procs]

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Spawn the workers and wait until each has its backend open (idempotent).

        Raises:
            WorkerDied: a worker exited or did not start within :data:`START_TIMEOUT_S`.
        """
        if self._broken:
            raise WorkerDied(self._broken)
        if self._procs:
            return
        from diffbench.load.client.worker import start_reader, worker_main

        ctx = mp.get_context("spawn")
        loop = asyncio.get_running_loop()
        _register_at_exit()
        _LIVE.add(self)
        for w in range(self.workers):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=worker_main, args=(child, self.target, w, self.workers, self.use_uvloop,
                                                            self.backend_options),
                               name=f"diffbench-load-worker-{w}", daemon=False)
            proc.start()
            child.close()  # so the parent sees EOF when the worker exits
            worker = _Worker(w, proc, parent)
            self._procs.append(worker)
            start_reader(parent, loop, worker.inbox, ("died",), f"diffbench-load-pool-reader-{w}")
        for worker in self._procs:
            msg = await self._expect(worker, "started")
            worker.loop_name = str(msg[1])

    async def _expect(self, worker: _Worker, kind: str) -> tuple[Any, ...]:
        try:
            msg = await asyncio.wait_for(worker.inbox.get(), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            msg = ("timeout",)
        if msg[0] == kind:
            return msg
        if msg[0] == "died":
            worker.alive = False
        what = {"died": f"exited (exit code {worker.exit_code()})",
                "timeout": f"did not answer within {START_TIMEOUT_S:g} s"}.get(msg[0], f"answered {msg!r}")
        if msg[0] == "error":
            what = f"failed: {msg[1]}"
        await self.close()
        self._broken = f"load worker {worker.index} {what} before the run started; nothing was measured"
        raise WorkerDied(self._broken)

    async def close(self) -> None:
        """Ask every worker to quit, wait briefly, terminate stragglers (idempotent)."""
        for w in self._procs:
            w.send(("quit",))
        deadline = time.monotonic() + 5.0
        for w in self._procs:
            while w.proc.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if w.proc.is_alive():
                w.proc.kill()  # SIGTERM is ignored by workers (they stop when told)
                w.proc.join(2.0)
            w.alive = False
            with contextlib.suppress(OSError):  # after the exit: the reader thread has seen EOF
                w.conn.close()
        self._procs = []
        _LIVE.discard(self)

    def _shutdown_now(self) -> None:
        """At interpreter exit (a pool never closed): quit, wait briefly, terminate; never blocks long."""
        for w in self._procs:
            w.send(("quit",))
        for w in self._procs:
            w.proc.join(2.0)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(1.0)
        self._procs = []
        _LIVE.discard(self)

    async def __aenter__(self) -> WorkerPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- runs -----------------------------------------------------------------------------------------
    def uses_hdr(self, planned: int | None) -> bool:
        """Whether a run planning ``planned`` requests (None: closed loop) builds HdrHistograms."""
        return self.merge == "hdr" or (self.merge == "auto" and planned is not None
                                       and planned > AUTO_HDR_THRESHOLD)

    async def open_loop(self, schedule: np.ndarray, specs: Sequence[RequestSpec], *, offered_rate: float | None,
                        duration_s: float, max_inflight: int | None = None, drain_s: float = 10.0,
                        control: RunControl | None = None, sink: JsonlSink | None = None,
                        on_record: OnRecord | None = None, on_sent: OnSent | None = None,
                        run_label: str | None = None) -> RunResult:
        """As :func:`~diffbench.load.client.runners.run_open_loop`, split over the workers.

        Raises:
            UsageError: as the runner, or ``max_inflight`` below the worker count.
            WorkerDied: a worker exited during the run.
        """
        n = len(schedule)
        if len(specs) != n:
            raise UsageError(f"{len(specs)} request specs for {n} arrivals")
        if not duration_s > 0:
            raise UsageError(f"--duration must be > 0 seconds, got {duration_s}")
        if max_inflight is not None and max_inflight < self.workers:
            raise UsageError(f"--max-inflight {max_inflight} is below --workers {self.workers}: the cap is split "
                             "across the workers; raise the cap or lower --workers")
        hdr = self.uses_hdr(n)
        caps = split_users(max_inflight, self.workers) if max_inflight is not None else [None] * self.workers
        jobs = [("open", {"times": times, "specs": part, "offered_rate": offered_rate, "duration_s": duration_s,
                          "max_inflight": caps[w], "drain_s": drain_s, "hdr": hdr,
                          "spin_tail_s": self.spin_tail_s})
                for w, (times, part) in enumerate(split_open(schedule, specs, self.workers))]
        run = run_label or (f"rate={offered_rate:g}" if offered_rate is not None else "trace")
        return await self._run(jobs, [len(j[1]["specs"]) for j in jobs], "open", run, duration_s=duration_s,
                               drain_s=drain_s, control=control, sink=sink, on_record=on_record,
                               on_sent=on_sent, offered_rate=offered_rate, users=None, planner=None)

    async def closed_loop(self, users: int, planner: RequestPlanner, *, duration_s: float,
                          think_time_s: float = 0.0, drain_s: float = 10.0, control: RunControl | None = None,
                          sink: JsonlSink | None = None, on_record: OnRecord | None = None,
                          on_sent: OnSent | None = None) -> RunResult:
        """As :func:`~diffbench.load.client.runners.run_closed_loop`, users split round-robin.

        Raises:
            UsageError: as the runner.
            WorkerDied: a worker exited during the run.
        """
        check_closed_loop_args(users, duration_s, think_time_s)
        hdr = self.uses_hdr(None)
        jobs = [("closed", {"users": u, "planner": planner, "duration_s": duration_s, "think_time_s": think_time_s,
                            "drain_s": drain_s, "hdr": hdr}) if u else None
                for u in split_users(users, self.workers)]
        return await self._run(jobs, None, "closed", f"users={users}", duration_s=duration_s, drain_s=drain_s,
                               control=control, sink=sink, on_record=on_record, on_sent=on_sent,
                               offered_rate=None, users=users, planner=planner)

    async def _run(self, jobs: list[Any], planned_per: list[int] | None, mode: Literal["open", "closed"],
                   run: str, *, duration_s: float, drain_s: float, control: RunControl | None,
                   sink: JsonlSink | None, on_record: OnRecord | None, on_sent: OnSent | None,
                   offered_rate: float | None, users: int | None, planner: RequestPlanner | None) -> RunResult:
        await self.start()
        control = control or RunControl()
        active = [w for w, job in zip(self._procs, jobs, strict=True) if job is not None]
        for w in active:
            w.send(jobs[w.index])
        for w in active:
            await self._expect(w, "ready")
        t0_ns = start_time_ns(self.start_delay_s)
        for w in active:
            w.send(("go", t0_ns))

        records: list[RequestRecord] = []
        received = dict.fromkeys(range(self.workers), 0)
        infos: dict[int, dict[str, Any]] = {}
        errors: list[str] = []
        dead: list[tuple[int, int | None]] = []

        def stop_all(reason: str) -> None:
            for w in active:
                w.send(("stop", reason))

        async def follow(w: _Worker) -> None:
            while True:
                msg = await w.inbox.get()
                kind = msg[0]
                if kind == "batch":
                    for rec in msg[1]:
                        records.append(rec)
                        received[w.index] += 1
                        if sink is not None:
                            sink.write(rec, run=run, mode=mode, t0_ns=t0_ns)
                        if on_record is not None:
                            on_record(rec)
                    if on_sent is not None:
                        for lag in msg[2]:
                            on_sent(lag)
                elif kind == "done":
                    infos[w.index] = msg[1]
                    return
                elif kind == "error":
                    errors.append(f"load worker {w.index} failed: {msg[1]}")
                    stop_all("a worker failed")
                    return
                elif kind == "died":
                    w.alive = False
                    dead.append((w.index, w.exit_code()))
                    stop_all("a worker died")
                    return

        followers = asyncio.gather(*(follow(w) for w in active))

        async def wait_followers() -> None:
            await asyncio.shield(followers)

        finished = await control.interruptible(wait_followers())
        if not finished:
            stop_all(control.reason or "interrupted")
            await followers
        if dead or errors:
            lost = []
            for idx, code in dead:
                planned = f" of {planned_per[idx]} planned" if planned_per is not None else ""
                lost.append(f"load worker {idx} exited with exit code {code} during the run "
                            f"({received[idx]}{planned} requests returned; the rest are lost)")
            await self.close()
            msg = "; ".join(lost + errors)
            self._broken = msg
            raise WorkerDied(msg + "; the records that came back are in --jsonl; no summary is made from a "
                             "run with a hole in its schedule")

        merged = merge_records([records])
        hist_parts = [LatencyHistograms.decode(i["hdr"]) for i in infos.values() if i.get("hdr")]
        hdr_summary = None
        if hist_parts:
            total = hist_parts[0]
            for h in hist_parts[1:]:
                total.merge(h)
            hdr_summary = total.summary()
        if planner is not None:  # advance the parent's planner past every id the workers used
            planner.take(max((i["drawn"] for i in infos.values()), default=0))
        dispatched = sum(i["dispatched"] for i in infos.values())
        planned = sum(i["planned"] for i in infos.values())
        interrupted = control.stopped or any(i["interrupted"] for i in infos.values())
        windows = [i["window_s"] for i in infos.values() if i["planned"] > 0]
        window = max(windows) if interrupted and windows else duration_s
        if mode == "closed" and interrupted:
            window = max(min(window, duration_s), 1e-9)
        elapsed = max((i["elapsed_s"] for i in infos.values()), default=0.0)
        return RunResult(mode=mode, offered_rate=offered_rate, users=users, duration_s=window, elapsed_s=elapsed,
                         planned=planned, dispatched=dispatched, interrupted=interrupted, records=merged,
                         hdr=hdr_summary, t0_ns=t0_ns)
