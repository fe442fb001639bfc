"""One self-contained HTML page from a :class:`~diffbench.report.document.Document`.

Everything is inline: the style sheet, every plot (SVG), every image (``data:image/png;base64``). The page
has no script and references no URL, so it opens from a file with no network (asserted by the browser
tests: no ``http(s)://`` fetch, no console error). Every section is a ``<section data-section=ID>``, every
block carries ``data-block=ID`` and ``data-kind`` (plot / table / facts / note / grid) for DOM checks.
"""

from __future__ import annotations

import base64
from html import escape

from diffbench import __version__
from diffbench.report.document import Document, Facts, ImageGrid, Note, Plot, Section, Table
from diffbench.report.figures import close, to_svg

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c8cdd6;font-size:12px;word-break:break-all}
nav{padding:8px 24px;background:#e9ecf1;font-size:13px}
nav a{margin-right:14px;color:#1d4f91;text-decoration:none}
main{padding:8px 24px 40px;max-width:1400px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;margin:16px 0;padding:8px 18px 16px}
section>h2{font-size:17px;margin:10px 0}
h3{font-size:14px;margin:14px 0 6px}
figure.plot{margin:10px 0;max-width:900px}
figure.plot svg{width:100%;height:auto}
figcaption,.caption{color:#5b6472;font-size:12px;margin-top:2px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
div[data-kind=table]{overflow-x:auto;max-width:100%}
th,td{border-bottom:1px solid #e3e6eb;padding:3px 10px;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
td.wrap{white-space:normal;text-align:left;min-width:18em;max-width:44em}
th{background:#f0f2f5}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 16px;font-size:13px;margin:6px 0}
dl.facts dt{color:#5b6472}
dl.facts dd{margin:0;font-family:ui-monospace,monospace;font-size:12.5px;word-break:break-all}
.note{padding:6px 10px;border-left:3px solid #8aa4c8;background:#f3f6fa;margin:8px 0;font-size:13px}
.note.warn{border-color:#d08a1a;background:#fdf6e9}
.grid-row{display:flex;gap:10px;align-items:flex-start;margin:10px 0;flex-wrap:wrap}
.grid-row .cell{text-align:center;font-size:12px;color:#5b6472}
.grid-row img{display:block;max-width:256px;image-rendering:pixelated;border:1px solid #dde1e7}
.grid-row .numbers{font-size:12px}
footer{color:#8a93a0;font-size:11px;padding:0 24px 24px}
"""


def _plot(b: Plot) -> str:
    try:
        svg = to_svg(b.figure, salt=b.id)
    finally:
        close(b.figure)
    cap = f"<figcaption>{escape(b.caption)}</figcaption>" if b.caption else ""
    return (f'<figure class="plot" data-kind="plot" data-block="{escape(b.id)}">'
            f"<h3>{escape(b.title)}</h3>{svg}{cap}</figure>")


WRAP_CHARS = 40
"""A cell longer than this wraps (left-aligned prose); shorter cells (numbers, labels) stay on one line."""


def _td(cell: str) -> str:
    return f'<td class="wrap">{escape(cell)}</td>' if len(cell) > WRAP_CHARS else f"<td>{escape(cell)}</td>"


def _table(b: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in b.headers)
    body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in b.rows)
    cap = f'<div class="caption">{escape(b.caption)}</div>' if b.caption else ""
    return (f'<div data-kind="table" data-block="{escape(b.id)}"><h3>{escape(b.title)}</h3>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{cap}</div>")


def _facts(b: Facts) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in b.items)
    return (f'<div data-kind="facts" data-block="{escape(b.id)}"><h3>{escape(b.title)}</h3>'
            f'<dl class="facts">{items}</dl></div>')


def _note(b: Note) -> str:
    level = "warn" if b.level == "warn" else "info"
    return f'<div class="note {level}" data-kind="note" data-block="{escape(b.id)}">{escape(b.text)}</div>'


def png_data_url(png: bytes) -> str:
    """``data:image/png;base64,...`` for inline images."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _grid(b: ImageGrid) -> str:
    rows = []
    for r in b.rows:
        cells = "".join(
            f'<div class="cell"><img alt="{escape(c.alt or c.label)}" src="{png_data_url(c.png)}">'
            f"{escape(c.label)}</div>" for c in r.cells)
        nums = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in r.numbers)
        rows.append(f'<div class="grid-row"><div class="numbers"><b>{escape(r.title)}</b>'
                    f"<table>{nums}</table></div>{cells}</div>")
    cap = f'<div class="caption">{escape(b.caption)}</div>' if b.caption else ""
    return (f'<div data-kind="grid" data-block="{escape(b.id)}"><h3>{escape(b.title)}</h3>'
            f'{"".join(rows)}{cap}</div>')


def _block(b: object) -> str:
    if isinstance(b, Plot):
        return _plot(b)
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Facts):
        return _facts(b)
    if isinstance(b, Note):
        return _note(b)
    if isinstance(b, ImageGrid):
        return _grid(b)
    raise TypeError(f"unknown report block {type(b).__name__}")


def _section(s: Section) -> str:
    return (f'<section id="{escape(s.id)}" data-section="{escape(s.id)}"><h2>{escape(s.title)}</h2>'
            + "".join(_block(b) for b in s.blocks) + "</section>")


def render_html(doc: Document) -> str:
    """The page as text (UTF-8). Closes every figure of ``doc`` (a document renders once)."""
    doc.check_ids()
    nav = "".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in doc.sections)
    sources = "<br>".join(escape(s) for s in doc.sources)
    body = "".join(_section(s) for s in doc.sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{escape(doc.title)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>{escape(doc.title)}</h1><p>{sources}</p></header><nav>{nav}</nav>"
            f"<main>{body}</main><footer>diffbench {escape(__version__)} · self-contained report: "
            "every plot and image is inline; no network is needed to view it.</footer></body></html>\n")
