"""Payload checks in worker processes, batched, so the measuring event loop never decodes.

Base64 and PNG decoding of a multi-MB answer hold the GIL for milliseconds; on the event loop that keeps
the dispatch clock and reads the other responses they delay every send and every reception behind them,
so a fast service would be reported slow (measured by ``benchmarks/bench_load_client.py``). Threads do not help (the GIL is the contention), so
:class:`PayloadChecker` runs the checks in a :class:`~concurrent.futures.ProcessPoolExecutor`:

- **Workers**: ``min(2, os.cpu_count())`` by default. Two keep up with the checks of multi-MB answers at
  tens of req/s (a check is ~3-10 ms per MB) and of small answers at thousands of req/s (batched), while
  leaving the other cores to the load process itself and to the service when it runs on the same machine.
- **Start context** ``spawn``: a forked child would inherit the parent's event loop, sockets and threads.
  :meth:`PayloadChecker.start` starts every worker and imports the checking code (Pillow included) in it
  before the first measured request, so no check pays process start-up inside a run. As with any spawn
  pool, a script that starts a backend must guard its entry point (``if __name__ == "__main__":``).
- **Priority**: the workers lower their own scheduling priority (``os.nice(NICE)``), so on a machine with
  few cores the kernel runs the measuring process first and a backlog of checks waits instead of delaying
  dispatch.
- **Batching**: checks queued within ``window_s`` (20 ms) go to a worker as one task, or at once when the
  queued bodies exceed ``batch_bytes`` (1 MiB), so at thousands of req/s the inter-process traffic is at
  most 50 tasks per second per stream of small answers, and a large body is sent without waiting. Each
  returned task wakes the executor's result thread, which takes the GIL from the measuring loop: measured
  with ``benchmarks/bench_load_client.py --only 1000 --score`` on 2 CPUs (alternated runs), a 2 ms window
  gave a dispatch lag p50 of 3.3-3.6 ms, 20 ms 0.7-2.4 ms (50 ms no better; that machine's run-to-run
  noise is of the same size). The window only delays the verdict, which is taken outside the timed region.
- **Failures are data**: a check that raises, and a worker process that dies (``BrokenProcessPool``),
  give a :class:`~diffbench.load.client.payload.Verdict` that is not ok, with the error ``payload check
  failed in the client: ...``; a broken pool is replaced (at most ``max_restarts`` times, then every
  later check fails with that message). Nothing hangs and nothing is raised into the run.

- **Large bodies bypass the pickle** (``file_bytes``, 256 KiB and more): the executor pickles its tasks in
  a feeder thread (a copy with the GIL held) and writes them in 64 KiB pipe writes, each taking the GIL
  back from the event loop. A large body is instead written by one ``write()`` call, in a helper thread
  that releases the GIL for the kernel copy, to a file in ``/dev/shm`` (memory; the temporary directory
  where it is missing); the worker reads it, and the checker removes it when the batch returns, whatever
  its outcome (a process killed with SIGKILL can leave ``diffbench-body-*`` files behind). Measured on a
  busy 2-core machine, 20 hand-offs of 8 MB bodies (trivial check) every 50 ms, the summed delay of a
  1 ms ticker on the loop: 100-140 ms idle, 250-310 ms pickled, 190-200 ms through a file. Smaller
  bodies are pickled. Where the file cannot be written (a full ``/dev/shm``) the body is pickled instead.
  The caller must keep no reference to the body while it awaits the verdict: a body held in memory is
  memory the next answer cannot reuse, and reading a multi-MB answer into fresh pages costs page faults
  inside the timed region (measured: joining 8 MB of chunks took 1.4 ms into reused memory, 4.2 ms into
  fresh pages).
- **Holding** (:meth:`PayloadChecker.hold` / :meth:`PayloadChecker.release`, ``load --defer-checks``): the
  checks are queued without a task, a file or a worker's CPU until the runner releases them, after the last
  timed response of a run, or earlier once the held bodies reach ``hold_bytes`` (1 GiB; the large ones wait
  in their files, the small ones in memory). On a client machine without a core to spare
  (the checkers, the measuring process and a local service sharing two CPUs), the checks' CPU then never
  competes with the measured sends and receptions; the verdicts, and so each record, come after the run's
  last answer. Released checks go out in tasks of at most ``batch_bytes`` or :data:`MAX_TASK_JOBS` checks,
  so every worker gets a share.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from diffbench.load.client.payload import Verdict

WINDOW_S = 0.02
NICE = 10
BATCH_BYTES = 1 << 20
MAX_RESTARTS = 3
WARM_TRIES = 5
FILE_BYTES = 256 * 1024
FAILED = "payload check failed in the client"
HOLD_BYTES = 1 << 30
"""Held bodies (bytes) above which :meth:`PayloadChecker.hold` hands its queue to the workers anyway."""
MAX_TASK_JOBS = 256
"""Most checks in one task of a released hold (a task of 5,000 small checks would keep one worker busy)."""

Job = tuple[Callable[..., object], tuple[object, ...]]


def default_workers() -> int:
    """``min(2, os.cpu_count())`` (at least 1)."""
    return max(1, min(2, os.cpu_count() or 1))


@dataclass(frozen=True)
class FileBody:
    """A body handed over as a file (``path``, ``size`` bytes) instead of pickled bytes."""

    path: str
    size: int

    def read(self) -> bytes:
        """The body. Raises OSError when the file is gone or short."""
        with open(self.path, "rb", buffering=0) as f:
            data = f.read()
        if len(data) != self.size:
            raise OSError(f"{self.path}: {len(data)} bytes, expected {self.size}")
        return data


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _write_body(body: bytes, directory: str) -> FileBody:
    """Write ``body`` to a new file in ``directory`` (one ``write``: the GIL is released for the copy)."""
    fd, path = tempfile.mkstemp(prefix="diffbench-body-", dir=directory)
    try:
        view, done = memoryview(body), 0
        while done < len(body):
            done += os.write(fd, view[done:])
    except BaseException:
        os.close(fd)
        _remove(path)
        raise
    os.close(fd)
    return FileBody(path, len(body))


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _remove_files(args: Sequence[object]) -> None:
    for a in args:
        if isinstance(a, FileBody):
            _remove(a.path)


def _remove_written(fut: asyncio.Future[FileBody]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        _remove(fut.result().path)


def run_batch(jobs: Sequence[Job]) -> list[object]:
    """Run ``fn(*args)`` for each job in this (worker) process; an exception becomes a failed verdict.

    :class:`FileBody` arguments are read first. A :class:`Verdict` result gets ``checked_pid`` set to this
    process's id, so callers and tests can see where the check ran.
    """
    pid = os.getpid()
    out: list[object] = []
    for fn, args in jobs:
        try:
            args = tuple(a.read() if isinstance(a, FileBody) else a for a in args)
            res = fn(*args)
        except Exception as exc:  # a checker failure is a verdict, never lost
            res = Verdict(False, f"{FAILED}: {type(exc).__name__}: {exc}"[:300])
        if isinstance(res, Verdict):
            res.checked_pid = pid
        out.append(res)
    return out


PARENT_POLL_S = 0.5
"""How often a check worker looks whether its parent is still alive (seconds)."""


def _watch_parent(parent: int) -> None:
    """Exit when the parent process is gone. A killed parent (SIGKILL, the OOM killer) never shuts the pool
    down, and the workers' task queue never reports EOF (each worker holds its write end too), so without
    this watch they would wait forever, ignoring Ctrl-C."""
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            os._exit(0)


def _init_worker() -> None:
    """Worker initializer: a lower scheduling priority than the measuring process, Ctrl-C ignored (the
    terminal sends SIGINT to the whole process group; the parent drains its run, then shuts the workers
    down, and a check of the drain must not fail because its worker was interrupted), and an exit when the
    parent dies (:func:`_watch_parent`)."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(NICE)
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), name="diffbench-check-parent-watch",
                     daemon=True).start()


def _warm(hold_s: float) -> int:
    """Import the checking code (and Pillow when installed) in a worker; return its pid."""
    import diffbench.load.client.payload  # noqa: F401
    import diffbench.load.client.scoring  # noqa: F401  (reference scoring: numpy, the PSNR/SSIM kernels)

    with contextlib.suppress(ImportError):
        import PIL.Image
        import PIL.PngImagePlugin  # noqa: F401
    time.sleep(hold_s)  # keep this worker busy so the next warm task reaches another one
    return os.getpid()


class PayloadChecker:
    """Batched payload checks in ``workers`` spawned processes.

    Lifecycle: ``await start()`` (starts and warms the workers) → ``await run(fn, *args)`` concurrently →
    ``await close()``. ``fn`` must be a module-level (picklable) function returning a :class:`Verdict`.

    Args:
        workers: worker processes (>= 1); :func:`default_workers` when None.
        window_s: seconds a check may wait for others to share its task (>= 0).
        batch_bytes: a task is sent at once when its queued bodies reach this many bytes.
        max_restarts: broken pools replaced before every later check fails.
        file_bytes: a ``bytes`` first argument of at least this size is handed over as a file (None: never).
        hold_bytes: held bodies above which a hold is handed over anyway (see :meth:`hold`).
    """

    def __init__(self, workers: int | None = None, *, window_s: float = WINDOW_S,
                 batch_bytes: int = BATCH_BYTES, max_restarts: int = MAX_RESTARTS,
                 file_bytes: int | None = FILE_BYTES, hold_bytes: int = HOLD_BYTES) -> None:
        self.workers = default_workers() if workers is None else workers
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        self.window_s, self.batch_bytes, self.max_restarts = window_s, batch_bytes, max_restarts
        self.file_bytes, self.hold_bytes = file_bytes, hold_bytes
        self.files_written = 0
        self.holding = False
        self.held_max = 0
        """Most checks held at once (diagnostics and tests)."""
        self._dir = _shm_dir()
        self._writer: ThreadPoolExecutor | None = None
        self.restarts = 0
        self.batches = 0
        self._pool: ProcessPoolExecutor | None = None
        self._pending: list[tuple[Job, asyncio.Future[object], int]] = []
        self._pending_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._closed = False

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker)

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (empty before :meth:`start`)."""
        procs = getattr(self._pool, "_processes", None) or {}
        return sorted(procs)

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the workers and import the checking code in each (a no-op task per worker).

        Raises:
            RuntimeError: the worker processes could not start within ``timeout_s`` seconds (their error is
                on stderr; the usual cause is a script without an ``if __name__ == "__main__":`` guard,
                which spawn re-imports).
        """
        self._pool = self._new_pool()
        try:
            await self._warm(self._pool, timeout_s)
        except (BrokenProcessPool, TimeoutError) as exc:
            await self.close()
            if isinstance(exc, TimeoutError):
                raise RuntimeError(f"the payload-check worker processes did not start within {timeout_s:g} s") \
                    from None
            raise RuntimeError(
                "the payload-check worker processes could not start (see their error above); a script that "
                "starts HttpBackend must guard its entry point with `if __name__ == \"__main__\":` "
                "(multiprocessing spawn re-imports the main module)") from None

    async def _warm(self, pool: ProcessPoolExecutor, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        seen: set[int] = set()
        deadline = loop.time() + timeout_s
        hold = 0.05
        for _ in range(WARM_TRIES):  # until every worker has run one (a slow start may need a longer hold)
            futs = [loop.run_in_executor(pool, _warm, hold) for _ in range(self.workers)]
            seen.update(await asyncio.wait_for(asyncio.gather(*futs), max(0.1, deadline - loop.time())))
            if len(seen) >= self.workers:
                return
            hold *= 2

    def hold(self) -> None:
        """Queue every check from now on without handing it to the workers (no task, no file, no worker
        CPU) until :meth:`release`, or until the held bodies reach ``hold_bytes`` (then what is held goes
        out and holding goes on)."""
        self.holding = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def release(self) -> None:
        """Stop holding: everything queued goes to the workers now. A no-op when not holding."""
        if not self.holding:
            return
        self.holding = False
        self._flush()

    async def run(self, fn: Callable[..., Verdict], *args: object, size: int = 0) -> Verdict:
        """``fn(*args)`` in a worker, batched with the checks queued in the same window (or held, see
        :meth:`hold`).

        ``size`` (bytes) counts towards ``batch_bytes`` and ``hold_bytes``. A large ``bytes`` first argument
        is written to a file at once (see the module docstring; where the file cannot be written, a full
        ``/dev/shm``, it is pickled instead), so a caller that keeps no reference to it frees its memory
        while the check waits. Never raises except cancellation; a failure of the check or of the worker
        is a verdict that is not ok.
        """
        if self._closed or self._pool is None:
            return Verdict(False, f"{FAILED}: the checker is not running")
        loop = asyncio.get_running_loop()
        if self._large(args):
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="diffbench-body-writer")
            written = loop.run_in_executor(self._writer, _write_body, args[0], self._dir)
            try:
                ref = await written
            except OSError:  # no room for the file: the body goes pickled, slower but checked
                ref = None
            except asyncio.CancelledError:  # the write still finishes in its thread: remove its file then
                written.add_done_callback(_remove_written)
                raise
            if ref is not None:
                self.files_written += 1
                args = (ref, *args[1:])
        fut: asyncio.Future[object] = loop.create_future()
        self._pending.append(((fn, args), fut, size))
        del args  # the queue holds the only reference: a body written to a file is freed now
        self._pending_bytes += size
        if self.holding:
            self.held_max = max(self.held_max, len(self._pending))
            if self._pending_bytes >= self.hold_bytes:
                self._flush()
        elif self._pending_bytes >= self.batch_bytes or self.window_s <= 0:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        res = await fut
        if not isinstance(res, Verdict):  # pragma: no cover - fn broke its contract
            return Verdict(False, f"{FAILED}: the check returned {type(res).__name__}")
        return res

    def _flush(self) -> None:
        """Hand what is queued to the workers, in tasks of at most ``batch_bytes`` (a larger body alone)
        and :data:`MAX_TASK_JOBS` checks; checks whose caller is gone (cancelled) are dropped."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        queued, self._pending, self._pending_bytes = self._pending, [], 0
        batch: list[tuple[Job, asyncio.Future[object], int]] = []
        size = 0
        for entry in queued:
            if entry[1].done():
                _remove_files(entry[0][1])
                continue
            if batch and (size + entry[2] > self.batch_bytes or len(batch) >= MAX_TASK_JOBS):
                self._send(batch)
                batch, size = [], 0
            batch.append(entry)
            size += entry[2]
        if batch:
            self._send(batch)

    def _send(self, batch: list[tuple[Job, asyncio.Future[object], int]]) -> None:
        self.batches += 1
        task = asyncio.get_running_loop().create_task(self._deliver(batch))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    def _submit(self, jobs: list[Job]) -> tuple[ProcessPoolExecutor, Future[list[object]]]:
        """Hand ``jobs`` to the pool; a pool found broken before the hand-over is replaced once."""
        pool = self._pool
        if pool is None:
            raise RuntimeError("the checker is closed")
        try:
            return pool, pool.submit(run_batch, jobs)
        except BrokenProcessPool:
            if not self._restart(pool) or self._pool is None:
                raise
            return self._pool, self._pool.submit(run_batch, jobs)

    def _restart(self, broken: ProcessPoolExecutor) -> bool:
        """Replace the ``broken`` pool (new workers start lazily); True when a working pool is in place
        (already replaced by another batch, or now), False once ``max_restarts`` is spent."""
        if self._pool is not broken:
            return self._pool is not None
        if self._closed or self.restarts >= self.max_restarts:
            return False
        self._pool = self._new_pool()
        self.restarts += 1
        broken.shutdown(wait=False, cancel_futures=True)
        return True

    def _large(self, args: tuple[object, ...]) -> bool:
        return self.file_bytes is not None and bool(args) and isinstance(args[0], bytes) \
            and len(args[0]) >= self.file_bytes

    async def _deliver(self, batch: list[tuple[Job, asyncio.Future[object], int]]) -> None:
        jobs = [job for job, _, _ in batch]
        results: list[object]
        pool = self._pool
        try:
            pool, cf = self._submit(jobs)
            results = await asyncio.wrap_future(cf)
        except BrokenProcessPool as exc:
            restarted = pool is not None and self._restart(pool)
            note = "the pool was restarted" if restarted else \
                f"not restarted (already restarted {self.restarts} times)"
            err = f"{FAILED}: a checker process died ({type(exc).__name__}: {exc}); {note}"[:300]
            results = [Verdict(False, err) for _ in batch]
        except asyncio.CancelledError:
            for _, fut, _ in batch:
                fut.cancel()
            raise
        except Exception as exc:  # pickling errors, a shut-down pool: counted, never raised
            results = [Verdict(False, f"{FAILED}: {type(exc).__name__}: {exc}"[:300]) for _ in batch]
        finally:
            for _, args in jobs:
                _remove_files(args)
        if len(results) != len(batch):  # pragma: no cover - run_batch returns one result per job
            results = [Verdict(False, f"{FAILED}: {len(results)} results for {len(batch)} checks")] * len(batch)
        for (_, fut, _), res in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(res)

    async def close(self) -> None:
        """Fail what is still queued, wait for the workers to exit."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for (_, args), fut, _ in self._pending:
            if not fut.done():
                fut.set_result(Verdict(False, f"{FAILED}: the checker was closed"))
            _remove_files(args)
        self._pending = []
        for task in list(self._inflight):
            task.cancel()
        pool, self._pool = self._pool, None
        loop = asyncio.get_running_loop()
        if pool is not None:
            await loop.run_in_executor(None, functools.partial(pool.shutdown, wait=True, cancel_futures=True))
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)
