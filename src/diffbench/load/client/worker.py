"""The load worker process of :class:`~diffbench.load.client.executor.WorkerPool`.

One process = one event loop (uvloop where installed) = one :class:`~diffbench.load.client.http.HttpBackend`.
It talks to the parent over one :func:`multiprocessing.Pipe` end. Messages (tuples, pickled):

parent → worker: ``("open", job)`` / ``("closed", job)`` (a run; the worker answers ``("ready",)``),
``("go", t0_ns)`` (the shared start on ``time.perf_counter_ns``), ``("stop", reason)`` (stop dispatching,
drain, cancel the rest), ``("quit",)``.

worker → parent: ``("started", loop_name)`` once the backend is open; ``("batch", records, lags)`` every
:data:`FLUSH_S` seconds while a run goes on (finished records and the lags of the requests sent since the
last batch); ``("done", info)`` at the end of a run (counts, window, encoded histograms in hdr mode);
``("error", text)`` when a run raised.

SIGINT is ignored here: Ctrl-C reaches the whole process group, and the parent decides (it sends ``stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
from multiprocessing.connection import Connection
from typing import Any

from diffbench.core.records import RequestRecord

FLUSH_S = 0.05
"""Seconds between two batches of records and lags sent to the parent."""


class SpecShare:
    """Worker ``index`` of ``workers``'s share of a planner's spec stream (closed loop): each call draws the
    next group of ``workers`` specs from ``planner`` and returns the ``index``-th, so its ``j``-th spec has id
    ``base + j*workers + index`` and equals what the one-process planner draws for that id. ``drawn``
    counts the draws (the parent advances its own planner by the largest)."""

    def __init__(self, planner: Any, index: int, workers: int) -> None:
        self.planner, self.index, self.workers = planner, index, workers
        self.drawn = 0

    def __call__(self) -> Any:
        group = self.planner.take(self.workers)
        self.drawn += self.workers
        return group[self.index]


def start_reader(conn: Connection, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[tuple[Any, ...]],
                 on_eof: tuple[Any, ...], name: str) -> threading.Thread:
    """Read ``conn`` in a daemon thread and hand each message to ``inbox`` on ``loop``'s thread.

    Blocking reads in a thread, not ``loop.add_reader``: uvloop (libuv) makes a watched fd non-blocking,
    and a message larger than the socket buffer then cannot be read whole in one callback. The loop never
    blocks on the pipe; unpickling runs in the thread. ``on_eof`` is queued when the other end closes."""

    def read() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = on_eof
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, msg)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return
            if msg is on_eof:
                return

    t = threading.Thread(target=read, name=name, daemon=True)
    t.start()
    return t


def worker_main(conn: Connection, target: Any, index: int, workers: int, use_uvloop: bool | None,
                backend_options: dict[str, Any] | None = None) -> None:
    """Entry point of a worker process (``multiprocessing`` spawn target).

    Ctrl-C and SIGTERM sent to the whole process group are ignored here: the parent turns them into a stop
    that it forwards, so the workers drain and return their records; a worker whose parent is gone quits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from diffbench.load.client.eventloop import run

    try:
        run(serve(conn, target, index, workers, backend_options or {}), use_uvloop=use_uvloop)
    finally:
        with contextlib.suppress(OSError):
            conn.close()


async def serve(conn: Connection, target: Any, index: int, workers: int, options: dict[str, Any]) -> None:
    """The load worker's serve loop on the running event loop: one ``HttpBackend`` on ``target`` (with
    ``options``), answering the parent's messages on ``conn`` until ``("quit",)``. Worker ``index`` of
    ``workers`` (a process of :class:`~diffbench.load.client.executor.WorkerPool`, or a Ray actor's thread).
    A backend that cannot start is reported as ``("error", text)`` and the loop returns."""
    from diffbench.load.client.eventloop import running_loop_name
    from diffbench.load.client.http import HttpBackend

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    start_reader(conn, loop, inbox, ("quit",), f"diffbench-load-worker-{index}-reader")
    try:
        backend = HttpBackend(target, **options)
        await backend.start()
    except Exception as exc:  # e.g. a TLS setting the transport rejects: the parent names it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        conn.send(("started", running_loop_name()))
        while True:
            msg = await inbox.get()
            if msg[0] == "quit":
                return
            if msg[0] not in ("open", "closed"):
                continue  # a stale go/stop between runs
            try:
                info = await _one_run(conn, inbox, backend, msg[0], msg[1], index, workers)
            except Exception as exc:  # reported to the parent, which raises it as a DiffbenchError
                with contextlib.suppress(OSError):
                    conn.send(("error", f"{type(exc).__name__}: {exc}"))
                continue
            if info is None:
                return
            with contextlib.suppress(OSError):  # a parent that is gone gets nothing
                conn.send(("done", info))
            if info["quit"]:  # the parent quit (or died) during the run: nothing more will come
                return
    finally:
        await backend.close()


async def _one_run(conn: Connection, inbox: asyncio.Queue[tuple[Any, ...]], backend: Any, kind: str,
                   job: dict[str, Any], index: int, workers: int) -> dict[str, Any] | None:
    from diffbench.load.client.control import RunControl
    from diffbench.load.client.runners import run_closed_loop, run_open_loop
    from diffbench.load.merge import LatencyHistograms

    control = RunControl()
    # The job's objects are collected and frozen now, before t0 is fixed: the runner's own full collection
    # (quiet_gc) then has little left to walk after t0, so the first arrivals are not late from it.
    gc.collect()
    gc.freeze()
    conn.send(("ready",))
    while True:
        msg = await inbox.get()
        if msg[0] == "go":
            t0_ns = int(msg[1])
            break
        if msg[0] == "stop":
            control.request_stop(str(msg[1]))
        if msg[0] == "quit":
            return None

    records: list[RequestRecord] = []
    lags: list[float] = []
    hist = LatencyHistograms() if job.get("hdr") else None

    def on_record(rec: RequestRecord) -> None:
        records.append(rec)
        if hist is not None:
            hist.add(rec)

    def flush() -> None:
        if records or lags:
            with contextlib.suppress(OSError):  # a parent that is gone gets nothing
                conn.send(("batch", records[:], lags[:]))
            records.clear()
            lags.clear()

    async def flusher() -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            flush()

    quit_seen = False

    async def listen() -> None:
        nonlocal quit_seen
        while True:
            m = await inbox.get()
            if m[0] == "quit":
                quit_seen = True
                control.request_stop("the parent quit")
            elif m[0] == "stop":
                control.request_stop(str(m[1]))

    tasks = [asyncio.create_task(flusher()), asyncio.create_task(listen())]
    stream: SpecShare | None = None
    try:
        if kind == "open":
            res = await run_open_loop(job["times"], job["specs"], backend, offered_rate=job["offered_rate"],
                                      duration_s=job["duration_s"], max_inflight=job["max_inflight"],
                                      drain_s=job["drain_s"], control=control, on_record=on_record,
                                      on_sent=lags.append, t0_ns=t0_ns, spin_tail_s=job["spin_tail_s"])
        else:
            stream = SpecShare(job["planner"], index, workers)
            res = await run_closed_loop(job["users"], stream, backend, duration_s=job["duration_s"],
                                        think_time_s=job["think_time_s"], drain_s=job["drain_s"],
                                        control=control, on_record=on_record, on_sent=lags.append,
                                        t0_ns=t0_ns)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    flush()
    return {"planned": res.planned, "dispatched": res.dispatched, "window_s": res.duration_s,
            "elapsed_s": res.elapsed_s, "interrupted": res.interrupted, "n_records": len(res.records),
            "drawn": stream.drawn if stream is not None else 0, "hdr": hist.encode() if hist is not None else None, "quit": quit_seen}
