"""Report sections of a quality result (placeholder: the quality builder is being written)."""

from __future__ import annotations

from diffbench.report.document import Note, Section
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    return [Section(id="quality", title="quality", blocks=[Note(id="quality-todo", text="not yet rendered")])]
