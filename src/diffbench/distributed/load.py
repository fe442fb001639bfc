"""``diffbench load --workers N --ray ADDRESS``: the N load workers as Ray actors.

Each actor runs the very worker loop of a local ``--workers`` process
(:func:`diffbench.load.client.worker.serve`: one event loop, one ``HttpBackend``), on a thread of the actor,
behind a queue pair that stands in for the process pipe. The driver's :class:`RayWorkerPool` is a
:class:`~diffbench.load.client.executor.WorkerPool` whose workers are those actors, so everything the local
pool does holds unchanged: the seeded schedule is built once on the driver and request ``i`` goes to worker
``i mod N`` (:func:`~diffbench.load.client.executor.partition`), closed-loop users and ids are split the same
way, records stream back in batches to the driver (to ``--jsonl``, the progress line and the exact merge),
a stop reaches every worker, and a worker that dies ends the run (:class:`WorkerDied`).

What differs:

- **Placement.** Actors are created with Ray's ``SPREAD`` scheduling strategy (one per node first, then
  round-robin), one CPU each (:data:`ACTOR_CPUS`).
- **Transport.** The driver sends messages with fire-and-forget actor calls (Ray runs the calls of one caller
  on a synchronous actor in submission order) and collects each actor's outgoing messages by polling it every
  :data:`POLL_S` seconds.
- **Clocks.** ``time.perf_counter_ns`` is per machine, so the shared start cannot be one monotonic reading.
  At start the driver measures each actor's wall-clock offset (:mod:`diffbench.distributed.clock`:
  :data:`~diffbench.distributed.clock.CLOCK_SAMPLES` round trips, the minimum-RTT one kept, ± RTT/2). The
  shared start is a driver wall-clock instant :data:`RAY_START_DELAY_S` ahead; each actor gets it shifted by
  its offset and turns it into its own ``perf_counter_ns`` reading on arrival, so every worker's schedule
  starts at the same instant within that worker's uncertainty. Offsets and uncertainties go into the report's
  conditions; a large one adds a warning (:meth:`~diffbench.distributed.clock.ClockOffset.warnings`).
- **Histograms.** Every run builds HdrHistograms in each actor (``merge="hdr"``), merged on the driver
  (:mod:`diffbench.load.merge`: bucket counts add exactly; recording quantizes to 3 significant digits,
  ≤ 0.1 % + 1 µs), and each row carries the merged summary with its error bound (``RateSummary.hdr``).
  The row's figures are still computed from the exact merge of the records.
- **Reachability.** A loopback ``--url`` (or the reference service the command starts on 127.0.0.1) is
  reachable only from the driver's node: a cluster with actors elsewhere is refused before anything runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

from diffbench.distributed.clock import CLOCK_SAMPLES, ClockOffset
from diffbench.distributed.cluster import niceness_warning, process_nice
from diffbench.errors import UsageError
from diffbench.load.client.executor import WorkerDied, WorkerPool
from diffbench.load.client.runners import SPIN_TAIL_S

POLL_S = 0.02
"""Seconds between two polls of an actor with nothing to say (the actor's worker batches every 0.05 s)."""
RAY_START_DELAY_S = 0.5
"""The shared start is set this far ahead once every actor is ready: the ``go`` call must reach every actor,
which over a network takes longer than a local pipe."""
ACTOR_CPUS = 1.0
"""CPUs each load actor reserves: one event loop is one core; its payload checks run in one process."""
CLOSE_WAIT_S = 5.0
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_EOF = ("__eof__",)


class _QueueConn:
    """The pipe end a worker loop expects (``send``, ``recv``, ``close``), over two thread-safe queues."""

    def __init__(self) -> None:
        self.inbound: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.outbound: queue.Queue[tuple[Any, ...]] = queue.Queue()

    def send(self, msg: tuple[Any, ...]) -> None:
        self.outbound.put(msg)

    def recv(self) -> tuple[Any, ...]:
        msg = self.inbound.get()
        if msg is _EOF or msg == _EOF:
            raise EOFError
        return msg

    def close(self) -> None:
        self.inbound.put(_EOF)


class LoadActor:
    """One load worker in a Ray actor (made remote by :func:`~diffbench.distributed.cluster.actor_pool`).

    Args:
        target: the :class:`~diffbench.load.client.http.Target` (each actor opens its own backend).
        workers: the worker count N (for the closed loop's id spaces).
        use_uvloop: as :func:`diffbench.load.client.eventloop.run`.
        backend_options: keyword arguments of ``HttpBackend``.
    """

    def __init__(self, target: Any, workers: int, use_uvloop: bool | None,
                 backend_options: Mapping[str, Any] | None = None) -> None:
        self.target, self.workers, self.use_uvloop = target, workers, use_uvloop
        self.backend_options = dict(backend_options or {})
        self.conn = _QueueConn()
        self.thread: threading.Thread | None = None

    def begin(self, index: int) -> None:
        """Start worker ``index``'s loop on a thread; it answers ``("started", loop)`` (or ``("error", …)``)."""
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._main, args=(index,), name=f"diffbench-load-actor-{index}",
                                       daemon=True)
        self.thread.start()

    def _main(self, index: int) -> None:
        from diffbench.load.client.eventloop import run
        from diffbench.load.client.worker import serve

        try:
            run(serve(self.conn, self.target, index, self.workers, self.backend_options),  # type: ignore[arg-type]
                use_uvloop=self.use_uvloop)
        except BaseException as exc:  # the driver names it (as a local worker's "error")
            self.conn.send(("error", f"{type(exc).__name__}: {exc}"))
        finally:
            self.conn.send(("closed",))

    def clock(self) -> int:
        """This node's wall clock, ``time.time_ns()``."""
        return time.time_ns()

    def where(self) -> dict[str, Any]:
        """Node IP, host name, process id and nice value of this actor."""
        import os
        import socket

        import ray

        return {"ip": ray.util.get_node_ip_address(), "host": socket.gethostname(), "pid": os.getpid(),
                "nice": process_nice()}

    def push(self, msg: tuple[Any, ...]) -> None:
        """A message for the worker loop. ``("go_at", wall_ns)`` (the shared start on this node's wall clock)
        becomes ``("go", perf_counter_ns)``: the same instant on this process's monotonic clock."""
        if msg[0] == "go_at":
            msg = ("go", time.perf_counter_ns() + (int(msg[1]) - time.time_ns()))
        self.conn.inbound.put(msg)

    def poll(self) -> list[tuple[Any, ...]]:
        """Every message the worker loop sent since the last poll (does not block)."""
        out = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self.conn.outbound.get_nowait())
        return out


class _RayWorker:
    """The driver's handle on one actor, shaped like the local pool's worker (``index``, ``send``, ``inbox``,
    ``alive``, ``exit_code``)."""

    def __init__(self, index: int, actor: Any, clock: ClockOffset, node: dict[str, Any]) -> None:
        self.index, self.actor, self.clock, self.node = index, actor, clock, node
        self.proc = None
        self.loop_name: str | None = None
        self.alive = True
        self.closed = False
        self.death: str | None = None
        self.inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.pump: asyncio.Task[None] | None = None

    def send(self, msg: tuple[Any, ...]) -> None:
        if not self.alive:
            return
        if msg[0] == "go":  # the driver's perf_counter t0 -> the driver's wall clock -> this actor's
            wall_ns = time.time_ns() + (int(msg[1]) - time.perf_counter_ns())
            msg = ("go_at", wall_ns + self.clock.offset_ns)
        with contextlib.suppress(Exception):  # a dead actor: the pump reports it
            self.actor.push.remote(msg)

    def exit_code(self) -> str:
        return f"n/a (Ray actor on {self.node.get('ip', '?')}: {self.death or 'died'})"

    async def run_pump(self) -> None:
        """Move the actor's messages into ``inbox``; ``("died",)`` when the actor is gone."""
        while True:
            try:
                msgs = await asyncio.wrap_future(self.actor.poll.remote().future())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # RayActorError and kin: the actor (or its node) died
                self.death = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                self.alive = False
                self.inbox.put_nowait(("died",))
                return
            for m in msgs:
                if m[0] == "closed":
                    self.closed = True
                    continue
                self.inbox.put_nowait(m)
            if self.closed:
                return
            if not msgs:
                await asyncio.sleep(POLL_S)


def check_reachable(base_url: str, driver_ip: str, node_ips: list[str]) -> None:
    """Refuse a loopback target when a worker may run on another node (it would reach its own loopback).

    Raises:
        UsageError: the target's host is loopback and some node's IP differs from the driver's.
    """
    host = (urlsplit(base_url).hostname or "").lower()
    others = sorted({ip for ip in node_ips if ip != driver_ip})
    if (host in LOOPBACK_HOSTS or host.startswith("127.")) and others:
        raise UsageError(f"--ray: the target {base_url} is a loopback address, which load actors on other "
                         f"nodes ({', '.join(others)}) cannot reach; give --url an address every node "
                         "reaches (and start the service there), or use --ray local")


class RayWorkerPool(WorkerPool):
    """N load workers as Ray actors (module docstring).

    Args:
        target: as :class:`WorkerPool`.
        workers: number of actors (>= 1).
        address: ``--ray`` address (:func:`~diffbench.distributed.cluster.check_address`).
        merge: as :class:`WorkerPool` (default ``"hdr"``: histograms in every run).
        clock_samples: round trips per actor for the clock offset.

    Raises:
        UsageError: a bad address or worker count; at :meth:`start`, a cluster without the free CPUs, or a
            loopback target on a multi-node cluster.
        WorkerDied: an actor that does not start.
    """

    def __init__(self, target: Any, workers: int, *, address: str, merge: str = "hdr",
                 use_uvloop: bool | None = None, backend_options: Mapping[str, Any] | None = None,
                 spin_tail_s: float = SPIN_TAIL_S, clock_samples: int = CLOCK_SAMPLES) -> None:
        from diffbench.distributed.cluster import check_address

        super().__init__(target, workers, merge=merge, use_uvloop=use_uvloop,  # type: ignore[arg-type]
                         backend_options=backend_options, spin_tail_s=spin_tail_s)
        self.address = check_address(address)
        self.clock_samples = clock_samples
        self.start_delay_s = RAY_START_DELAY_S
        self.cluster: Any = None
        self._stack: ExitStack | None = None

    @property
    def clocks(self) -> list[ClockOffset]:
        """Each actor's clock offset to the driver, by worker index (empty before :meth:`start`)."""
        return [w.clock for w in self._procs]  # type: ignore[attr-defined]

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """Each actor's node IP, host name and pid, by worker index."""
        return [w.node for w in self._procs]  # type: ignore[attr-defined]

    def conditions(self) -> dict[str, str]:
        """Report conditions: the cluster, where each worker ran, the clock offsets and warnings."""
        if self.cluster is None:
            return {}
        info = self.cluster
        out = {
            "ray": (f"{self.workers} load actors (SPREAD, {ACTOR_CPUS:g} CPU each) on a Ray {info.ray_version} "
                    f"cluster of {len(info.nodes)} node(s), {info.cpus:g} CPUs, address {info.address}"
                    + (" (started by this command)" if info.started_here else "")),
            "ray_workers": "; ".join(f"worker {i} on {n.get('ip')} ({n.get('host')}, pid {n.get('pid')})"
                                     for i, n in enumerate(self.nodes)),
            "clock_offsets": "; ".join(f"worker {i}: {c.describe()}" for i, c in enumerate(self.clocks)),
            "clock_rule": ("wall-clock offset of each actor to the driver, NTP-style: the minimum-RTT round trip, "
                           "offset = actor clock - midpoint, uncertainty ± RTT/2; the shared start is a driver "
                           f"instant {self.start_delay_s:g} s ahead, shifted by each actor's offset"),
            "merge": ("records merged exactly (the row's figures); HdrHistograms of ok requests merged per row "
                      "(3 significant digits, microseconds: each percentile within 0.1 % + 1 us)"),
        }
        warns = [f"worker {i}: {w}" for i, c in enumerate(self.clocks) for w in c.warnings()]
        if warns:
            out["clock_warnings"] = "; ".join(warns)
        low = niceness_warning([(str(n.get("ip")), n.get("nice")) for n in self.nodes],
                               "latencies (and the rate each worker keeps)")
        if low:
            out["actor_niceness"] = low
        return out

    async def start(self) -> None:
        """Connect to the cluster, create the actors, measure their clocks, start their loops (idempotent).

        Raises:
            UsageError: as the class.
            WorkerDied: an actor failed to start or to open its backend.
        """
        if self._broken:
            raise WorkerDied(self._broken)
        if self._procs:
            return
        from diffbench.distributed import clock
        from diffbench.distributed.cluster import actor_pool, connect, import_ray

        stack = ExitStack()
        try:
            self.cluster = stack.enter_context(connect(self.address))
            ray = import_ray()
            check_reachable(self.target.base_url, ray.util.get_node_ip_address(),
                            [n.ip for n in self.cluster.nodes])
            try:
                handles = stack.enter_context(actor_pool(
                    LoadActor, self.workers, tag="load", num_cpus=ACTOR_CPUS, threads=1,
                    args=(self.target, self.workers, self.use_uvloop, self.backend_options),
                    options={"scheduling_strategy": "SPREAD"}))
            except UsageError as exc:  # the pool names its own option; for load it is --workers
                text = str(exc).removeprefix(f"--ray-actors {self.workers}: ").replace(
                    "use fewer actors (or fewer --threads per actor)", "use fewer --workers")
                raise UsageError(f"--workers {self.workers} --ray {self.address}: {text}") from None
            loop = asyncio.get_running_loop()

            def prepare() -> list[tuple[dict[str, Any], ClockOffset]]:
                out = []
                for h in handles:
                    node = ray.get(h.where.remote())  # the actor is up (its first call returned)
                    off = clock.measure(lambda h=h: ray.get(h.clock.remote()), time.time_ns, self.clock_samples)
                    out.append((node, off))
                return out

            try:
                prepared = await loop.run_in_executor(None, prepare)
            except Exception as exc:
                raise WorkerDied(f"a load actor did not start: {type(exc).__name__}: {exc}") from None
            workers = [_RayWorker(i, h, off, node) for i, (h, (node, off)) in enumerate(zip(handles, prepared,
                                                                                            strict=True))]
            for w in workers:
                w.actor.begin.remote(w.index)
                w.pump = asyncio.create_task(w.run_pump())
            self._procs = workers  # type: ignore[assignment]
            self._stack = stack
        except BaseException:
            stack.close()
            raise
        for w in workers:
            msg = await self._expect(w, "started")  # type: ignore[arg-type]
            w.loop_name = str(msg[1])

    async def close(self) -> None:
        """Tell every actor's loop to quit, wait for it briefly, kill the actors, leave the cluster."""
        workers: list[_RayWorker] = list(self._procs)  # type: ignore[arg-type]
        for w in workers:
            w.send(("quit",))
        deadline = time.monotonic() + CLOSE_WAIT_S
        for w in workers:
            if w.pump is None:
                continue
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(w.pump), max(0.0, deadline - time.monotonic()))
            w.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await w.pump
            w.alive = False
        self._procs = []
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def _shutdown_now(self) -> None:
        stack, self._stack = self._stack, None
        self._procs = []
        if stack is not None:
            with contextlib.suppress(Exception):
                stack.close()
