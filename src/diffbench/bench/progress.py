"""Progress events of ``diffbench bench`` and the one-line text the CLI draws on stderr.

The protocol (:func:`diffbench.bench.protocol.run_bench`) emits a :class:`RunEvent` after every warmup and
every timed run, always *after* the run's end-time clock read and the pending-work check, so a callback
never sits inside a timed region. The CLI turns each event into a line with :func:`progress_text` and hands
it to :class:`diffbench.core.progress.LiveLine` (which only stores the text; its refresh thread draws it).

The running p50 is the median of the timed samples so far (the project's percentile method,
:func:`diffbench.core.stats.percentile`); warmup runs never enter it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from diffbench.core.stats import percentile


@dataclass(frozen=True)
class RunEvent:
    """One finished run of the protocol.

    shape: the shape's label (``"64x64 s2 b1"``); shape_index: 0-based position among ``shapes`` shapes.
    phase: ``"warmup"`` (never in the statistics) or ``"timed"``.
    done: runs finished in this phase at this shape (1-based count); total: runs planned in this phase
        (None for ``--warmup auto``, which runs until warm, at most ``max_total``).
    last_s: the run's duration (seconds).
    samples_s: the shape's timed samples so far (seconds, run order; empty during warmup). A live view of
        the protocol's list, not a copy: read it in the callback, do not keep it.
    """

    shape: str
    shape_index: int
    shapes: int
    phase: Literal["warmup", "timed"]
    done: int
    total: int | None
    last_s: float
    samples_s: Sequence[float] = ()
    max_total: int | None = None


def fmt_latency(seconds: float) -> str:
    """``"41.2 ms"`` below one second, ``"1.40 s"`` above."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 1.0 else f"{seconds:.3g} s"


def progress_text(ev: RunEvent) -> str:
    """The progress line of an event, e.g.
    ``"shape 1/2 64x64 s2 b1 · timed run 4/6 · last 22.9 ms · p50 23.0 ms (n=4)"``."""
    head = f"shape {ev.shape_index + 1}/{ev.shapes} {ev.shape}"
    if ev.phase == "warmup":
        count = (f"warmup run {ev.done}/{ev.total}" if ev.total is not None
                 else f"warmup run {ev.done} (auto: until warm, max {ev.max_total})")
        return f"{head} · {count} · last {fmt_latency(ev.last_s)} (not in the statistics)"
    p50 = percentile(ev.samples_s, 50) if ev.samples_s else None
    tail = f" · p50 {fmt_latency(p50)} (n={len(ev.samples_s)})" if p50 is not None else ""
    return f"{head} · timed run {ev.done}/{ev.total} · last {fmt_latency(ev.last_s)}{tail}"
