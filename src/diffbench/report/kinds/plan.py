"""Report sections of ledger and plan results (placeholder: the builders are being written)."""

from __future__ import annotations

from diffbench.report.document import Note, Section
from diffbench.report.kinds import ReportOptions
from diffbench.report.loader import LoadedResult


def build_plan(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    return [Section(id="plan", title="plan", blocks=[Note(id="plan-todo", text="not yet rendered")])]


def build_ledger(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    return [Section(id="ledger", title="ledger", blocks=[Note(id="ledger-todo", text="not yet rendered")])]
