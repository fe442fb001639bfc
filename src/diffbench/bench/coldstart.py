"""Measure a run's cold start: process start → engine ready → first output (see
:class:`~diffbench.bench.result.ColdStart` for what each figure contains).

The process's start comes from the kernel (:func:`diffbench.core.clock.process_start_unix`); everything
after is timed here. The first call's
duration is the protocol's own measurement of that run (the engine's clock), taken from the first
:class:`~diffbench.bench.progress.RunEvent`, so it is the same number the warmup list shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from diffbench.bench.progress import RunEvent
from diffbench.bench.result import ColdStart, ShapeResult
from diffbench.core import clock
from diffbench.engines.base import Engine, EngineInfo


@dataclass
class ColdStartClock:
    """Collects the cold-start figures of one run: :meth:`start_engine`, then :meth:`watch` around the
    protocol's run callback, then :meth:`result` with the shapes measured so far."""

    process_start_unix: float | None = field(default_factory=lambda: clock.process_start_unix())
    engine_start_s: float | None = None
    ready_unix: float | None = None
    first: RunEvent | None = None

    def start_engine(self, engine: Engine) -> EngineInfo:
        """``engine.start()``, timed."""
        t0 = time.perf_counter()
        info = engine.start()
        self.engine_start_s = time.perf_counter() - t0
        self.ready_unix = time.time()
        return info

    def watch(self, on_run: Callable[[RunEvent], None] | None) -> Callable[[RunEvent], None]:
        """A run callback that keeps the first event (the first call after start), then calls ``on_run``."""
        def hook(ev: RunEvent) -> None:
            if self.first is None:
                self.first = ev
            if on_run is not None:
                on_run(ev)
        return hook

    def result(self, shapes: list[ShapeResult]) -> ColdStart | None:
        """The figures measured so far (None before the engine started)."""
        if self.engine_start_s is None:
            return None
        ready = None
        if self.process_start_unix is not None and self.ready_unix is not None:
            ready = max(0.0, self.ready_unix - self.process_start_unix)
        first = self.first
        shape = next((s for s in shapes if first is not None and s.shape == first.shape), None)
        warm = sum(shape.warmup_s) if shape is not None and shape.warmup_s else None
        p50 = shape.latency_s.p50 if shape is not None and shape.latency_s is not None else None
        first_s = first.last_s if first is not None else None
        return ColdStart(
            process_to_ready_s=ready,
            engine_start_s=self.engine_start_s,
            first_call_s=first_s,
            first_call_phase=first.phase if first is not None else None,
            first_shape=first.shape if first is not None else None,
            first_shape_warmup_s=warm,
            warm_p50_s=p50,
            to_first_output_s=None if ready is None or first_s is None else ready + first_s,
        )
