"""The bare reference client: the peer every load-client figure is compared with.

:func:`run_bare` sends one fixed request body on an open-loop schedule with nothing but aiohttp, so a
benchmark or a fidelity test can put "a bare client on the same schedule" beside ``diffbench load``.

What it does, and nothing more: one :class:`aiohttp.ClientSession` (an unbounded connector, keep-alive, a
``read_bufsize`` of ``READ_BUFSIZE`` bytes), the same absolute-schedule dispatch as the runners (request
``i`` is started at ``t0 + schedule[i]``: ``asyncio.sleep`` until then, recomputed from the absolute target
every time, then a task per request), and per request the timestamps ``intended``, ``sent`` (handed to
aiohttp), ``first_byte`` (response headers received), ``done`` (the last body byte read) from
``time.perf_counter_ns`` and the HTTP status. Like the runners it keeps full garbage collections out of
the measured window (``gc.freeze`` and a raised oldest-generation threshold): with thousands of requests
in flight a full collection pauses the loop for tens of ms, and a peer paused by the collector would
flatter the client compared with it (measured while writing this: 1,500 in flight, lag p99 in the last
second 30 ms without, 1-2 ms with).

What it omits (each is something the real client does): no payload parsing or check of any kind (no JSON,
no base64, no image decoding: a 2xx status is success), no dialects or request planning (the same bytes
every time), no per-request spec or record objects on the send path, no in-flight cap, no stop switch or
drain deadline (it waits for every request, each bounded by ``timeout_s``), no JSONL sink, no progress
callbacks, no retries (neither does the real client).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from diffbench.core.records import Outcome, RequestRecord
from diffbench.load.client.runners import START_DELAY_S, quiet_gc

if TYPE_CHECKING:
    import aiohttp

READ_BUFSIZE = 4 * 1024 * 1024
"""aiohttp's per-response read buffer in bytes (its 64 KiB default throttles multi-MB bodies;
vllm-project/vllm #39963)."""


@dataclass
class BareRecord:
    """One request: seconds since t0 (``None``: did not happen), the status, or the exception's name."""

    id: int
    intended_s: float
    sent_s: float | None = None
    first_byte_s: float | None = None
    done_s: float | None = None
    status: int | None = None
    error: str | None = None

    @property
    def outcome(self) -> Outcome:
        """``ok`` for a 2xx status (no payload check), ``timeout``, ``connection_error`` or ``http_error``."""
        if self.status is not None:
            return "ok" if 200 <= self.status < 300 else "http_error"
        return "timeout" if self.error == "TimeoutError" else "connection_error"


@dataclass
class BareResult:
    """Every request of one :func:`run_bare` call, ``records`` sorted by id; ``elapsed_s`` until the last
    one finished."""

    records: list[BareRecord] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def n_ok(self) -> int:
        return sum(r.outcome == "ok" for r in self.records)

    @property
    def n_failed(self) -> int:
        return len(self.records) - self.n_ok

    def lag_s(self) -> np.ndarray:
        """float64 seconds, sent − intended, over sent requests."""
        return np.array([r.sent_s - r.intended_s for r in self.records if r.sent_s is not None])

    def latency_from_send_s(self) -> np.ndarray:
        """float64 seconds, done − sent, over ok requests."""
        return np.array([r.done_s - r.sent_s for r in self.records
                         if r.outcome == "ok" and r.done_s is not None and r.sent_s is not None])

    def to_request_records(self, rate: float | None = None, shape: str = "") -> list[RequestRecord]:
        """The same requests as :class:`~diffbench.core.records.RequestRecord` objects, so
        :func:`~diffbench.load.summary.summarize_rate` summarizes both clients with one definition."""
        return [RequestRecord(id=r.id, rate=rate, shape=shape, intended_s=r.intended_s, sent_s=r.sent_s,
                              first_byte_s=r.first_byte_s, done_s=r.done_s, outcome=r.outcome,
                              status=r.status, error=r.error) for r in self.records]


async def _dispatch(session: aiohttp.ClientSession, url: str, schedule_s: np.ndarray, body: bytes,
                    timeout: aiohttp.ClientTimeout) -> BareResult:
    times = np.asarray(schedule_s, dtype=np.float64).tolist()
    records = [BareRecord(id=i, intended_s=t) for i, t in enumerate(times)]
    headers = {"Content-Type": "application/json"}
    ns = time.perf_counter_ns

    async def one(rec: BareRecord) -> None:
        try:
            rec.sent_s = (ns() - t0_ns) / 1e9
            async with session.post(url, data=body, headers=headers, timeout=timeout) as resp:
                rec.first_byte_s = (ns() - t0_ns) / 1e9
                await resp.read()
                rec.done_s = (ns() - t0_ns) / 1e9
                rec.status = resp.status
        except Exception as exc:  # a failure is data
            rec.done_s = (ns() - t0_ns) / 1e9
            rec.error = "TimeoutError" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    t0_ns = ns() + int(START_DELAY_S * 1e9)
    for rec, t in zip(records, times, strict=True):
        # re-sleep until due: uvloop's timers are whole milliseconds rounded to nearest and may wake early
        while (delay := (t0_ns - ns()) / 1e9 + t) > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one(rec)))
    if tasks:
        await asyncio.wait(tasks)
    return BareResult(records=records, elapsed_s=(ns() - t0_ns) / 1e9)


async def run_bare(url: str, schedule_s: np.ndarray, body: bytes, timeout_s: float, *,
                   warmup_s: np.ndarray | None = None) -> BareResult:
    """POST ``body`` to ``url`` at ``t0 + schedule_s[i]`` for every i, on one session; wait for all.

    Args:
        url: the full endpoint, e.g. ``http://127.0.0.1:8000/v1/images/generations``.
        schedule_s: float64 seconds from t0, sorted (e.g. :func:`diffbench.queueing.schedules.constant`).
        body: the JSON request body, sent as is with ``Content-Type: application/json``.
        timeout_s: per-request total deadline in seconds (> 0), from the send to the last byte.
        warmup_s: an optional schedule run first on the same session (connections opened, code paths
            warm); its requests are not returned.

    Returns:
        :class:`BareResult` with one record per arrival, sorted by id; failures are records too.

    Raises:
        ValueError: ``timeout_s`` not positive.
    """
    import aiohttp

    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE,
                                     auto_decompress=False, trust_env=False) as session:
        if warmup_s is not None and len(warmup_s):
            await _dispatch(session, url, warmup_s, body, timeout)
        with quiet_gc():
            return await _dispatch(session, url, schedule_s, body, timeout)


__all__ = ["READ_BUFSIZE", "BareRecord", "BareResult", "run_bare"]
