"""``diffbench review``: a blind A/B page for a baseline and a candidate, and the scoring of its verdicts.

(Placeholder: being written.)
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("review")
    def review() -> None:
        """Blind A/B review of a candidate against its baseline (not yet available)."""
        from diffbench.errors import UsageError

        raise UsageError("review is not yet available")
