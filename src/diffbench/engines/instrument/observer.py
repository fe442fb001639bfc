"""What the instrumentation reports to after each request: a structural protocol, so that this package needs
no import of whoever listens (the exporter of ``serve``, :class:`diffbench.monitor.exporter.Exporter`, fits it
without naming it)."""

from __future__ import annotations

from typing import Protocol

from diffbench.engines.base import MemoryStats, StageTimes
from diffbench.engines.instrument.signals import RequestSignals


class GenerationObserver(Protocol):
    """Receives what one finished (or failed) generation measured.

    An observer may also have ``shape_label(width, height, frames, batch) -> str``; when it does, the
    instrumentation labels a request with it (see :meth:`~diffbench.engines.instrument.pipeline.Instrumentation.run`).
    """

    def observe_generation(
        self,
        *,
        shape: str,
        stages: StageTimes | None,
        memory: MemoryStats | None,
        signals: RequestSignals | None,
        traffic: str = "user",
    ) -> None:
        """One request: ``shape`` its label; ``stages`` None after a failure; ``memory``/``signals`` what was
        measured (None when nothing was); ``traffic`` ``user``, ``probe`` or ``warmup``."""
        ...
