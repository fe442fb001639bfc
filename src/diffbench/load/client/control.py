"""Run control (stop requests from Ctrl-C or a test) and the JSONL record sink."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from diffbench.core.linesink import LineSink
from diffbench.core.records import RequestRecord
from diffbench.core.workcost import run_clock


class RunControl:
    """A stop switch shared by a sweep and its runners.

    :meth:`request_stop` (from a SIGINT handler or a test) stops dispatching at once: the runner task
    waiting on the schedule is cancelled, in-flight requests get ``drain_s`` to finish, the rest are
    recorded as ``cancelled``. Must be used from the event loop's thread.
    """

    def __init__(self) -> None:
        self.stopped = False
        self.hurried = False
        self.reason: str | None = None
        self._waiters: set[asyncio.Task[object]] = set()
        self._hurry: asyncio.Future[None] | None = None

    def request_stop(self, reason: str = "interrupted") -> None:
        """Stop dispatching; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        self.reason = reason
        for task in list(self._waiters):
            task.cancel()

    def request_hurry(self) -> None:
        """Stop now (a second Ctrl-C): :meth:`request_stop`, and the drain ends at once, so in-flight
        requests are recorded ``cancelled`` and the run still returns its partial result."""
        self.request_stop("interrupted twice")
        self.hurried = True
        if self._hurry is not None and not self._hurry.done():
            self._hurry.set_result(None)

    def hurry_future(self) -> asyncio.Future[None]:
        """A future that completes when :meth:`request_hurry` is called (created on first use)."""
        if self._hurry is None:
            self._hurry = asyncio.get_running_loop().create_future()
            if self.hurried:
                self._hurry.set_result(None)
        return self._hurry

    async def interruptible(self, coro: object) -> bool:
        """Run ``coro`` (a coroutine) until it ends or a stop is requested. True when it ended by itself."""
        if self.stopped:
            coro.close()  # type: ignore[attr-defined]
            return False
        task: asyncio.Task[object] = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._waiters.add(task)
        try:
            await task
            return True
        except asyncio.CancelledError:
            if self.stopped and task.cancelled():
                return False
            raise
        finally:
            self._waiters.discard(task)


class JsonlSink:
    """Writes one JSON line per finished request (the file is truncated first) and flushes it at once, so an interrupted run keeps
    every finished request. Each line is a :class:`RequestRecord` plus ``run`` (e.g. ``"rate=0.5"`` or
    ``"users=2"``) and ``mode``; given the row's ``t0_ns`` (its ``t=0`` on ``time.perf_counter_ns``), the
    record's ``row_started_unix_s`` (that instant on the wall clock, from the run's one wall-clock/monotonic
    pair, :func:`diffbench.core.workcost.run_clock`) and ``intended_unix_s`` (``row_started_unix_s +
    intended_s``) are filled in, Unix epoch seconds (UTC).

    A write that fails mid-run (a full disk) is warned once (``warn``, default stderr) and later records are
    dropped: the run goes on; :meth:`check` raises :class:`~diffbench.errors.OutputError` (exit 6) after the
    command has written its other outputs."""

    def __init__(self, path: str | Path, warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self._out = LineSink(self.path, "--jsonl", warn)
        self.count = 0

    def write(self, record: RequestRecord, *, run: str, mode: str, t0_ns: int | None = None) -> None:
        if t0_ns is not None and record.row_started_unix_s is None:
            start = run_clock().unix_at(t0_ns)
            record = record.model_copy(update={"row_started_unix_s": start,
                                               "intended_unix_s": start + record.intended_s})
        data = record.model_dump(mode="json")
        data["run"] = run
        data["mode"] = mode
        if self._out.write_lines([json.dumps(data, separators=(",", ":")) + "\n"]):
            self.count += 1

    @property
    def failed(self) -> bool:
        """True once a write has failed."""
        return self._out.error is not None

    def close(self) -> None:
        self._out.close()

    def check(self) -> None:
        """Raises OutputError (exit 6) when a write failed (see :meth:`LineSink.check`)."""
        self._out.check()


def read_jsonl(path: str | Path) -> list[RequestRecord]:
    """Records of a JSONL file written by :class:`JsonlSink` (the ``run``/``mode`` keys are dropped)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(RequestRecord.model_validate_json(line))
    return out
