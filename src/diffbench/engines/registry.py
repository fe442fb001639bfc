"""The one module that knows every engine: create an engine from an :class:`EngineConfig` lazily.

Engines import their configuration from :mod:`diffbench.engines.config`, never this module. The names
below are re-exported for callers outside ``engines/`` that still import them from here.
"""

from __future__ import annotations

from diffbench.engines.base import Engine
from diffbench.engines.config import DEVICES, ENGINES, EngineConfig, HttpParams, SimParams, check_device
from diffbench.errors import UsageError

__all__ = ["DEVICES", "ENGINES", "EngineConfig", "HttpParams", "SimParams", "check_device", "create_engine"]


def create_engine(config: EngineConfig) -> Engine:
    """Instantiate (but do not start) the engine named by ``config.engine``.

    Raises:
        UsageError: unknown engine name.
    """
    if config.engine == "sim":
        from diffbench.engines.sim import SimEngine

        return SimEngine(config)
    if config.engine == "diffusers":
        from diffbench.engines.diffusers_engine import DiffusersEngine

        return DiffusersEngine(config)
    if config.engine == "http":
        from diffbench.engines.http_engine import HttpEngine

        return HttpEngine(config)
    raise UsageError(f"unknown engine {config.engine!r}; choose one of {', '.join(ENGINES)}")
