"""Report sections of a bench result (placeholder: the bench builder is being written)."""

from __future__ import annotations

from diffbench.report.document import Note, Section
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    return [Section(id="bench", title="bench", blocks=[Note(id="bench-todo", text="not yet rendered")])]
