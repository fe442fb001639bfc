"""The reference service (``diffbench serve``): OpenAI-style images API and async video jobs over one engine.

Importing this package imports neither FastAPI nor torch; :func:`create_app` and
:func:`run_in_background` import them when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffbench.server.background import run_in_background
from diffbench.server.config import Limits, ServerConfig

if TYPE_CHECKING:
    from fastapi import FastAPI

    from diffbench.engines.base import Engine


def create_app(config: ServerConfig, engine: Engine | None = None) -> FastAPI:
    """Build the FastAPI app (see :func:`diffbench.server.app.create_app`)."""
    from diffbench.server.app import create_app as _create

    return _create(config, engine)


__all__ = ["Limits", "ServerConfig", "create_app", "run_in_background"]
