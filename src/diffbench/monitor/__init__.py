"""After launch: the signals a diffusion service must export, and the tools that read them.

- the metric contract (names, shapes, scrape parser, quantiles) lives in :mod:`diffbench.metrics`, one package
  below this one: the exporter, the alert rules, the dashboard, ``plan``, ``doctor`` and ``load --scrape`` read it.
- ``attach``, ``detach`` (re-exported here lazily from :mod:`diffbench.engines.instrument.pipeline`): hooks
  that measure stage and step times, memory, cache decisions, recompiles, per-rank compute and FLOPs of a
  pipeline, and report each request to the exporter (:mod:`diffbench.monitor.exporter`).

Importing this package imports neither torch nor prometheus_client.
"""

from typing import Any

__all__ = ["attach", "detach"]


def __getattr__(name: str) -> Any:
    """Lazy re-exports: ``attach``/``detach`` import :mod:`diffbench.engines.instrument.pipeline` on use."""
    if name in ("attach", "detach", "Instrumentation"):
        from diffbench.engines.instrument import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'diffbench.monitor' has no attribute {name!r}")
