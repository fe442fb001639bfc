"""The content of a report, independent of its format: sections of plots, tables, facts and image grids.

A kind builder (``report/kinds/*.py``) turns saved results into a :class:`Document`; the HTML renderer
(``report/html_render.py``) writes one self-contained page (plots as inline SVG, images as ``data:`` PNG),
the Markdown renderer (``report/markdown_render.py``) writes tables plus PNG files beside it. Builders never
know the output format.

Plots are matplotlib :class:`~matplotlib.figure.Figure` objects made with :func:`diffbench.report.figures.new_figure`
(no pyplot, no global state). Images are PNG bytes. Every block carries an ``id`` (a short slug, unique within
the document) that the HTML renderer writes as ``data-block`` so tests and readers can find it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Plot:
    """One figure. ``caption`` says what is plotted and how to read it (units, n, method)."""

    id: str
    title: str
    figure: Figure
    caption: str = ""


@dataclass
class Table:
    """A table of already-formatted cells (units in the headers, e.g. ``p99 (ms)``)."""

    id: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Facts:
    """Key/value lines (the conditions block: model, shape, steps, CFG, engine, hardware ...)."""

    id: str
    title: str
    items: list[tuple[str, str]]


@dataclass
class Note:
    """A paragraph; ``level`` ``"warn"`` is shown highlighted (warnings of the result)."""

    id: str
    text: str
    level: str = "info"  # "info" | "warn"


@dataclass
class ImageCell:
    """One image of a grid: PNG bytes and a short label under it."""

    png: bytes
    label: str
    alt: str = ""


@dataclass
class ImageRow:
    """A row of a grid (e.g. baseline | candidate | amplified difference) with the pair's numbers."""

    title: str
    cells: list[ImageCell]
    numbers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ImageGrid:
    """A grid of image rows (the quality report's worst-N pairs)."""

    id: str
    title: str
    rows: list[ImageRow]
    caption: str = ""


Block = Plot | Table | Facts | Note | ImageGrid


@dataclass
class Section:
    """A titled group of blocks (one per result kind and aspect, e.g. ``bench: latency``)."""

    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    """A whole report: title, the sources it was built from, and its sections."""

    title: str
    sources: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def block_ids(self) -> list[str]:
        return [b.id for s in self.sections for b in s.blocks]

    def check_ids(self) -> None:
        """Raise ValueError when two blocks or sections share an id (the renderers rely on uniqueness)."""
        seen: set[str] = set()
        for ident in [s.id for s in self.sections] + self.block_ids():
            if ident in seen:
                raise ValueError(f"duplicate report block id {ident!r}")
            seen.add(ident)
