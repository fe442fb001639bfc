"""One worker per device: a thread draining a FIFO queue, one generation at a time.

The worker is the only code that calls ``engine.generate`` / ``engine.sync``, so two generations never run
concurrently on one device. Every exception of one request fails that request's future and the loop goes
on: an out-of-memory error (:class:`~diffbench.errors.DeviceOutOfMemory`, or ``torch.OutOfMemoryError``
translated to it) is followed by ``gc.collect()`` and, when CUDA is in use, ``torch.cuda.empty_cache()``
(the single-device contract, docs/reference/http-routes.md: one request's out-of-memory error fails that request,
never the service, unlike an engine that dies with it and fails every later request, vllm-project/vllm#52871).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from diffbench.engines.base import Engine, GenerationRequest, GenerationResult
from diffbench.engines.cancel import Cancelled, CancelToken, cancellable
from diffbench.engines.instrument.energy import EnergyMeter, EnergyTally, Mark
from diffbench.errors import DeviceOutOfMemory, GenerationError
from diffbench.server.admission import Decision, ServiceTimeModel, decide, estimate_wait

LOG = logging.getLogger("diffbench.server")
"""The service's log: one line per generation stopped at a step (the step log of a cancel)."""


class Overloaded(Exception):
    """Admission control rejected the request (HTTP 429)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.decision = decision


class ShuttingDown(GenerationError):
    """The service stopped before the request ran (HTTP 503)."""


@dataclass
class Done:
    """A finished generation: the engine result plus what the worker measured (seconds)."""

    result: GenerationResult
    queue_wait_s: float
    service_s: float


@dataclass
class WorkItem:
    request: GenerationRequest
    future: Future[Done]
    enqueued_ns: int
    on_start: Callable[[], None] | None = None
    started_ns: int | None = field(default=None)
    token: CancelToken = field(default_factory=CancelToken)


@dataclass
class Counters:
    completed: int = 0
    failed: int = 0
    oom: int = 0
    rejected: int = 0
    timed_out: int = 0  # answered 504: not finished within the request timeout (may still complete on device)
    cancelled: int = 0  # running generations stopped at a step boundary (client gone, job deleted, drain)


def size_text(request: GenerationRequest) -> str:
    """``WIDTHxHEIGHT`` plus frames, steps and batch, for messages."""
    frames = f", {request.frames} frames" if request.frames else ""
    return f"{request.width}x{request.height}{frames}, {request.steps} steps, n={request.batch}"


def as_out_of_memory(exc: BaseException, request: GenerationRequest) -> DeviceOutOfMemory | None:
    """Translate an engine's OOM (ours or torch's) into :class:`DeviceOutOfMemory`; None otherwise."""
    oom = isinstance(exc, DeviceOutOfMemory)
    torch = sys.modules.get("torch")
    if not oom and torch is not None:
        cls = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
        oom = cls is not None and isinstance(exc, cls)
    if not oom and isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
        oom = True
    if not oom:
        return None
    err = DeviceOutOfMemory(f"out of memory at {size_text(request)}: {exc}; lower the size, the frame count or n")
    err.memory = getattr(exc, "memory", None)  # what the engine measured for the failed request
    err.signals = getattr(exc, "signals", None)
    return err


def _release_device_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class DeviceWorker:
    """FIFO queue + one thread calling the engine. Thread-safe :meth:`submit`.

    ``energy``: a counter read just before each generation and just after its synchronization (ok or failed:
    the device spent it either way); ``on_energy(joules)`` gets each reading, on the worker thread, before the
    request's future resolves."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        model: ServiceTimeModel | None = None,
        energy: EnergyMeter | None = None,
        on_energy: Callable[[float], None] | None = None,
    ) -> None:
        self.engine = engine
        self.energy = EnergyTally(energy) if energy is not None else None
        self._on_energy = on_energy
        self.model = model or ServiceTimeModel()
        self.counters = Counters()
        self._clock = clock
        self._queue: deque[WorkItem] = deque()
        self._running: WorkItem | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="diffbench-device-worker", daemon=True)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Fail every queued request with :class:`ShuttingDown`, let the running one finish, join."""
        with self._cond:
            self._stop = True
            pending = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for item in pending:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(
                    ShuttingDown("the service is shutting down; retry on another instance")
                )
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def cancel_running(self, reason: str) -> bool:
        """Cancel the generation running now at its next step (``reason`` as in
        :data:`~diffbench.engines.cancel.REASONS`); False when none runs or it was already cancelled."""
        with self._cond:
            item = self._running
        return item is not None and item.token.cancel(reason)

    def join(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for the worker thread to end (after :meth:`stop`)."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        """True while the worker thread is still inside a generation (e.g. after a timed-out stop)."""
        return self._thread.is_alive() and self._running is not None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop

    def count_timeout(self) -> None:
        """One request answered as timed out (thread-safe; the service's handler calls it)."""
        with self._cond:
            self.counters.timed_out += 1

    # -- queue ------------------------------------------------------------------------------------
    def _estimate_locked(self) -> float | None:
        running = self._running
        elapsed = (self._clock() - running.started_ns) / 1e9 if running and running.started_ns else 0.0
        queued = [it.request for it in self._queue if not it.future.cancelled()]
        return estimate_wait(self.model, queued, running.request if running else None, elapsed)

    def snapshot(self) -> tuple[int, int, float | None]:
        """(queue length, running count, estimated wait in seconds or None)."""
        with self._cond:
            return len(self._queue), int(self._running is not None), self._estimate_locked()

    def submit(
        self,
        request: GenerationRequest,
        *,
        max_wait_s: float | None = None,
        max_queue: int | None = None,
        on_start: Callable[[], None] | None = None,
        token: CancelToken | None = None,
    ) -> Future[Done]:
        """Admit and enqueue ``request``; returns a future resolving to :class:`Done`.

        ``token``: cancels the generation at its next denoising step once it runs
        (:mod:`diffbench.engines.cancel`); the future then fails with
        :class:`~diffbench.engines.cancel.Cancelled` (its ``service_s`` filled). A queued request is
        dropped with ``future.cancel()`` instead.

        Raises:
            Overloaded: admission control rejected it (estimate above ``max_wait_s`` or queue full).
            ShuttingDown: the worker is stopping.
        """
        with self._cond:
            if self._stop:
                raise ShuttingDown("the service is shutting down; retry on another instance")
            decision = decide(self._estimate_locked(), len(self._queue), max_wait_s, max_queue)
            if not decision.admit:
                self.counters.rejected += 1
                raise Overloaded(decision)
            fut: Future[Done] = Future()
            self._queue.append(WorkItem(request, fut, self._clock(), on_start, token=token or CancelToken()))
            self._cond.notify()
            return fut

    # -- the loop ---------------------------------------------------------------------------------
    def _next(self) -> WorkItem | None:
        with self._cond:
            while True:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return None
                item = self._queue.popleft()
                if item.future.set_running_or_notify_cancel():  # False: cancelled while queued
                    item.started_ns = self._clock()
                    self._running = item
                    return item

    def _loop(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            try:
                self._run(item)
            except BaseException as exc:  # the worker must never die
                if not item.future.done():
                    item.future.set_exception(exc)
            finally:
                with self._cond:
                    self._running = None

    def _run(self, item: WorkItem) -> None:
        req = item.request
        if item.on_start is not None:
            item.on_start()
        mark = self.energy.begin() if self.energy is not None else None
        try:
            with cancellable(item.token):
                result = self.engine.generate(req)
                self.engine.sync()
            if result.images is None:
                raise GenerationError(f"the engine returned no images for {size_text(req)}")
        except Cancelled as exc:
            self._cancelled(item, exc, mark)
            return
        except Exception as exc:
            self._energy_of(mark)
            oom = as_out_of_memory(exc, req)
            with self._cond:
                self.counters.failed += 1
                self.counters.oom += int(oom is not None)
            if oom is not None:
                _release_device_memory()
            item.future.set_exception(oom or exc)
            return
        self._energy_of(mark)
        end = self._clock()
        started = item.started_ns or end
        service_s = (end - started) / 1e9
        item.token.released_ns = time.perf_counter_ns()
        with self._cond:
            self.model.observe(req, service_s, result.stages)
            self.counters.completed += 1
        item.future.set_result(Done(result, (started - item.enqueued_ns) / 1e9, service_s))

    def _cancelled(self, item: WorkItem, exc: Cancelled, mark: Mark | None = None) -> None:
        """A generation stopped at a step: wait for the device (work already launched), close its energy
        window (the joules it used are counted like any other's), log where it stopped, fail its future with
        ``exc`` (``service_s``: start on the device to release)."""
        with contextlib.suppress(Exception):
            self.engine.sync()
        self._energy_of(mark)
        end = self._clock()
        item.token.released_ns = time.perf_counter_ns()
        exc.service_s = (end - (item.started_ns or end)) / 1e9
        with self._cond:
            self.counters.cancelled += 1
        LOG.info("%s", step_log_line(item, exc))
        item.future.set_exception(exc)

    def _energy_of(self, mark: Mark | None) -> None:
        """Close the energy window of the generation that began at ``mark`` and report its joules."""
        if self.energy is None or mark is None:
            return
        got = self.energy.end(mark)
        if isinstance(got, tuple) and self._on_energy is not None:
            self._on_energy(got[0])


def step_log_line(item: WorkItem, exc: Cancelled) -> str:
    """The step log of a cancelled generation: where it stopped, the measured step time and how long the
    worker took to be released after the cancel, e.g. ``cancelled (disconnect) 256x256, 8 steps, n=1 at step
    3 of 8: step 0.0501 s, released 0.0312 s after the cancel, 0.171 s of device time spent``."""
    token = item.token
    step = token.step_s()
    of = f" of {exc.steps}" if exc.steps is not None else ""
    released = ""
    if token.release_s() is not None:
        released = f", released {token.release_s():.4f} s after the cancel"
    step_text = f"step {step:.4g} s" if step is not None else "step time not measured"
    return (f"cancelled ({exc.reason}) {size_text(item.request)} at step {exc.step}{of}: {step_text}{released}, "
            f"{exc.service_s or 0.0:.4g} s of device time spent")
