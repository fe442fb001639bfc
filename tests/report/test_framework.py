"""The report framework: document → self-contained HTML (opened in Chromium) and Markdown + PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank

from diffbench.errors import InputError
from diffbench.report.document import (
    Document,
    Facts,
    ImageCell,
    ImageGrid,
    ImageRow,
    Note,
    Plot,
    Section,
    Table,
)
from diffbench.report.figures import new_figure, to_png
from diffbench.report.html_render import render_html
from diffbench.report.loader import detect_kind, load_result
from diffbench.report.markdown_render import render_markdown


def _doc() -> Document:
    fig = new_figure()
    ax = fig.axes[0]
    x = np.linspace(0, 1, 50)
    ax.plot(x, x**2, label="curve")
    ax.legend()
    img = new_figure(1, 1)
    img.axes[0].imshow(np.arange(64).reshape(8, 8))
    png = to_png(img)
    return Document(title="framework", sources=["a.json"], sections=[Section(id="s", title="S", blocks=[
        Facts(id="f", title="Conditions", items=[("model", "tiny-flux"), ("steps", "4")]),
        Plot(id="p", title="A curve", figure=fig, caption="x²"),
        Table(id="t", title="Numbers", headers=["shape", "p50 (ms)"], rows=[["64x64", "1.00 | 2"]]),
        Note(id="n", text="careful", level="warn"),
        ImageGrid(id="g", title="Worst", rows=[ImageRow(title="pair 1", cells=[ImageCell(png=png, label="base")],
                                                        numbers=[("PSNR", "30.0 dB")])]),
    ])])


def test_html_is_self_contained_and_renders(tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.html"
    out.write_text(render_html(_doc()), encoding="utf-8")
    page = open_page(chrome, out)
    assert page.url.startswith("file://")
    found = blocks(chrome)
    assert set(found) == {"f", "p", "t", "n", "g"}
    assert blocks(chrome, "plot")["p"].find_element("css selector", "svg").size["width"] > 300
    img = found["g"].find_element("css selector", "img")
    assert chrome.driver.execute_script("return arguments[0].naturalWidth", img) == 100
    screenshot_nonblank(chrome)


def test_duplicate_ids_are_refused() -> None:
    doc = Document(title="x", sections=[Section(id="a", title="A", blocks=[Note(id="a", text="")])])
    with pytest.raises(ValueError, match="duplicate"):
        render_html(doc)


def test_markdown_writes_tables_and_pngs(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    written = render_markdown(_doc(), out)
    text = out.read_text()
    assert "| 64x64 | 1.00 \\| 2 |" in text and "> **warning:** careful" in text
    pngs = [p for p in written if p.suffix == ".png"]
    assert len(pngs) == 2 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    for p in pngs:
        assert f"]({p.parent.name}/{p.name})" in text


def test_loader_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_result(tmp_path / "missing.json")
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not JSON"):
        load_result(bad)
    bad.write_text('{"kind": "something-else"}')
    with pytest.raises(InputError, match="kind 'something-else'"):
        load_result(bad)
    bad.write_text('{"kind": "diffbench.bench", "schema_version": 99}')
    with pytest.raises(InputError, match="newer"):
        load_result(bad)
    bad.write_text('{"kind": "diffbench.bench", "schema_version": 1}')
    with pytest.raises(InputError, match="not a valid bench result"):
        load_result(bad)
    assert detect_kind({"rates": [], "knee": {}}) == "load"


def test_long_cells_wrap_and_short_cells_do_not() -> None:
    long_text = "run `diffbench sweep --axis cache` to confirm this assumption on the deployment"
    doc = Document(title="x", sections=[Section(id="s", title="S", blocks=[
        Table(id="t", title="T", headers=["a", "b"], rows=[["12.5", long_text]])])])
    html = render_html(doc)
    assert '<td class="wrap">run `diffbench sweep' in html and "<td>12.5</td>" in html
