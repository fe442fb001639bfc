"""One builder per result kind: ``build(results, opts) -> list[Section]`` (see ``report/build.py``).

A builder receives every loaded result of its kind (one, or several to overlay, in the order given on
the command line) and returns sections whose ids start with the kind (``bench-latency``...), so two kinds
on one page never collide. Builders make plots with :func:`diffbench.report.figures.new_figure` and never
know whether the page will be HTML or Markdown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from diffbench.report.document import Section
from diffbench.report.loader import LoadedResult


@dataclass(frozen=True)
class ReportOptions:
    """Options of ``diffbench report`` that builders read.

    worst: how many worst pairs the quality grid shows (by PSNR, lowest first).
    amplify: gain of the quality difference heat map (|candidate − baseline| × amplify, clipped to 255).
    thumb_px: longest side of an image thumbnail in the grid (pixels; larger images are downscaled).
    """

    worst: int = 8
    amplify: float = 10.0
    thumb_px: int = 256


Builder = Callable[[list[LoadedResult], ReportOptions], list[Section]]

_BUILDERS = {
    "bench": "diffbench.report.kinds.bench:build",
    "quality": "diffbench.report.kinds.quality:build",
    "sweep": "diffbench.report.kinds.sweep:build",
    "load": "diffbench.report.kinds.load:build",
    "plan": "diffbench.report.kinds.plan:build_plan",
    "ledger": "diffbench.report.kinds.plan:build_ledger",
    "derive": "diffbench.report.kinds.derive:build",
}


def builder(kind: str) -> Builder:
    """The builder function of a report kind (imported on first use)."""
    mod, _, fn = _BUILDERS[kind].partition(":")
    return getattr(import_module(mod), fn)  # type: ignore[no-any-return]
