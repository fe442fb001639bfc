"""Report sections of a load result (placeholder: the load builder is being written)."""

from __future__ import annotations

from diffbench.report.document import Note, Section
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    return [Section(id="load", title="load", blocks=[Note(id="load-todo", text="not yet rendered")])]
