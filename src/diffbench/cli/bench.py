"""``diffbench bench`` (placeholder while the command is built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def bench() -> None:
        """Single-request latency benchmark."""
