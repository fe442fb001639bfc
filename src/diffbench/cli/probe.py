"""Placeholder: filled in by the issue-11 work (registers nothing yet)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Register this module's command(s) on ``app``."""
