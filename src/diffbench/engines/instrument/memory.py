"""Peak memory per stage of one generation (docs/reference/metrics.md), read at stage boundaries.

- CUDA: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` then ``reset_peak_memory_stats`` at each
  boundary (the caching allocator keeps these counters on the host: reading them needs no device sync). The
  stage that was running when the counter was read holds that peak. Capacity: ``torch.cuda.mem_get_info``
  (free, total) in bytes.
- CPU (Linux): the kernel's resident-set high-water mark ``VmHWM`` of ``/proc/self/status``, reset by writing
  ``5`` to ``/proc/self/clear_refs`` (proc(5)), read and reset at each boundary: exact per-stage peaks with no
  sampling thread (a few tens of microseconds per boundary). Where ``clear_refs`` cannot be written, a thread
  samples the resident set every 5 ms with psutil (the old method; it competes with the pipeline for the CPU).

Both counters are per process (CUDA: per device): another thread allocating during the request is counted
in it, and two pipelines instrumented in one process must not run requests at the same time. On the CPU,
memory freed during the request (e.g. the cyclic garbage collector releasing earlier objects) lowers the
resident set below its start, so the growth can read low.

Peaks on the CPU are growth over the resident set at the start of the request (``MemoryStats.kind`` =
``cpu-rss``); on CUDA they are absolute allocator bytes, and the growth over the start is kept for the
injected memory budget (see :class:`~diffbench.engines.instrument.pipeline.Instrumentation`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from diffbench.engines.base import MemoryStats


def read_status_bytes(field: str) -> int | None:
    """``field`` (e.g. ``"VmHWM:"``) of ``/proc/self/status`` in bytes; None when unreadable."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_hwm() -> bool:
    """Reset this process's peak-RSS mark (``echo 5 > /proc/self/clear_refs``); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


class RssSampler:
    """Fallback for the CPU where VmHWM cannot be reset: samples the resident set every ``interval_s``."""

    def __init__(self, stage_of: Callable[[], str], interval_s: float = 0.005) -> None:
        import psutil

        self._proc = psutil.Process()
        self._stage_of = stage_of
        self._interval = interval_s
        self._stop = threading.Event()
        self.base = self._proc.memory_info().rss
        self.peak = self.base
        self.peak_stage = "other"
        self._thread = threading.Thread(target=self._run, name="diffbench-rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        rss = self._proc.memory_info().rss
        if rss > self.peak:
            self.peak = rss
            self.peak_stage = self._stage_of()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


_HWM_OK: bool | None = None


def hwm_available() -> bool:
    """True when ``/proc/self/status`` has VmHWM and ``/proc/self/clear_refs`` is writable (checked once)."""
    global _HWM_OK
    if _HWM_OK is None:
        _HWM_OK = read_status_bytes("VmHWM:") is not None and reset_hwm()
    return _HWM_OK


class StageMemory:
    """Peak memory by stage for one request. Call :meth:`mark` at each stage boundary with the stage that
    just ran; :meth:`growth` is the largest peak growth over the start of the request so far (bytes)."""

    def __init__(self, cuda: bool, torch: Any, stage_of: Callable[[], str]) -> None:
        self.cuda = cuda
        self._torch = torch
        self.peaks: dict[str, tuple[int, int]] = {}  # stage -> (allocated or rss growth, reserved)
        self._top: tuple[int, str] | None = None  # (peak, stage) first reaching the largest value
        self._sampler: RssSampler | None = None
        if cuda:
            cm = torch.cuda
            cm.reset_peak_memory_stats()
            self.base = int(cm.memory_allocated())
        elif hwm_available():
            self.base = read_status_bytes("VmRSS:") or 0
            reset_hwm()
        else:
            self._sampler = RssSampler(stage_of)
            self.base = self._sampler.base

    def mark(self, stage: str) -> None:
        """Attribute the peak since the previous mark to ``stage`` and start a new window."""
        if self.cuda:
            cm = self._torch.cuda
            alloc, reserved = int(cm.max_memory_allocated()), int(cm.max_memory_reserved())
            cm.reset_peak_memory_stats()
        elif self._sampler is not None:
            return
        else:
            alloc, reserved = (read_status_bytes("VmHWM:") or 0) - self.base, 0
            reset_hwm()
        prev = self.peaks.get(stage, (0, 0))
        self.peaks[stage] = (max(prev[0], alloc), max(prev[1], reserved))
        # After a reset the counter restarts at what is still held, so a later stage can tie with the stage
        # that made the peak: the stage that reached it first holds it.
        if self._top is None or alloc > self._top[0]:
            self._top = (alloc, stage)

    def growth(self) -> int:
        """Largest peak growth over the start of the request seen at the marks so far (bytes)."""
        if self._sampler is not None:
            return self._sampler.peak - self.base
        top = max((a for a, _ in self.peaks.values()), default=0)
        return top - self.base if self.cuda else top

    def close(self) -> MemoryStats:
        """Stop sampling (fallback) and return the request's :class:`MemoryStats`."""
        if self._sampler is not None:
            self._sampler.stop()
            s = self._sampler
            return MemoryStats(kind="cpu-rss", peak_allocated_bytes=max(0, s.peak - s.base),
                               peak_stage=s.peak_stage)
        if self._top is None:
            return MemoryStats(kind="cuda" if self.cuda else "cpu-rss")
        alloc, stage = self._top
        if self.cuda:
            return MemoryStats(kind="cuda", peak_allocated_bytes=alloc,
                               peak_reserved_bytes=max(r for _, r in self.peaks.values()), peak_stage=stage)
        return MemoryStats(kind="cpu-rss", peak_allocated_bytes=max(0, alloc), peak_stage=stage)

    def by_stage(self) -> dict[str, int]:
        """Peak bytes per stage (allocated on CUDA, RSS growth on the CPU)."""
        return {k: max(0, a) for k, (a, _) in self.peaks.items()}
