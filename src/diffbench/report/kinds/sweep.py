"""Report sections of a sweep result (placeholder: the sweep builder is being written)."""

from __future__ import annotations

from diffbench.report.document import Note, Section
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    return [Section(id="sweep", title="sweep", blocks=[Note(id="sweep-todo", text="not yet rendered")])]
