"""matplotlib helpers for reports: figures without pyplot, SVG for HTML, PNG for Markdown.

Why matplotlib and not plotly (also in the README): a report must open with no network
and stay small (a 100-run bench report ≤ 5 MB). plotly's inline JavaScript alone is several MB per page
(``include_plotlyjs=True``) and its static export needs kaleido plus a browser; matplotlib writes a few
tens of kB of static SVG per plot, runs no script in the page (no console errors to chase) and writes the
PNG files of ``--format markdown`` with the same code. What is lost is hover and zoom; every plotted number
is also in a table beside the plot.

``matplotlib`` is the ``report`` extra; it is imported only here and inside the kind builders.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from diffbench.errors import MissingDependencyError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# One palette for every report (matplotlib's tab10, colour-blind-safer than the default cycle order).
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf"]

_RC = {
    "svg.fonttype": "none",  # text stays text: smaller SVG, searchable, DOM-checkable
    "font.size": 9.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
}


def _mpl():  # type: ignore[no-untyped-def]
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(
            "reports need matplotlib: pip install 'diffbench[report]' (or '.[report]' in a checkout)") from exc
    # The report style is applied process-wide once: artists read most rcParams when they are created,
    # after new_figure returns, so a context manager around new_figure alone would not reach them.
    matplotlib.rcParams.update(_RC)
    return matplotlib


def new_figure(width_in: float = 6.4, height_in: float = 3.6, *, ncols: int = 1, nrows: int = 1) -> Figure:
    """A matplotlib Figure (no pyplot state) with ``nrows × ncols`` axes made by ``fig.subplots``.

    Use ``fig.axes`` to reach them. Sizes are inches at 100 dpi (6.4 × 3.6 in = 640 × 360 px).
    """
    from matplotlib.figure import Figure

    _mpl()
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    fig.subplots(nrows, ncols, squeeze=False)
    return fig


def to_svg(fig: Figure, salt: str) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog, no DOCTYPE, no creation date).

    ``salt`` (the block id) seeds matplotlib's internal SVG ids so two plots on one page never share a
    clip-path or marker id.
    """
    mpl = _mpl()
    buf = io.StringIO()
    with mpl.rc_context({"svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    start = text.find("<svg")
    if start < 0:
        raise RuntimeError("matplotlib wrote no <svg> element")
    svg = text[start:]
    # matplotlib's <metadata> block (RDF with Dublin Core / Creative Commons namespace URIs) carries nothing
    # a reader needs; dropping it leaves only the SVG namespace URI, which is an identifier, never fetched.
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.DOTALL)
    # Let CSS size the plot (responsive width), keeping matplotlib's viewBox for the aspect ratio.
    svg = re.sub(r'^<svg([^>]*?) width="[^"]*" height="[^"]*"', r"<svg\1", svg, count=1)
    return svg


def to_png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (Markdown reports; no metadata, so equal figures give equal bytes)."""
    _mpl()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def close(fig: Figure) -> None:
    """Free the figure's memory (no pyplot registry holds it; this drops its artists)."""
    fig.clear()
