"""The sweep report, built from a real ``diffbench sweep`` on tiny-flux and checked in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank
from tests.report.svg_axes import axis_map, centre, rects, value_at

from diffbench.cli.main import main
from diffbench.report.loader import load_result

VALUES = ["0.1", "1000000"]
TINY = ["--model", "tiny-flux", "--height", "64", "--width", "64", "--steps", "2", "--num-prompts", "2",
        "--runs", "6", "--warmup", "0", "--stable-window", "4", "--max-warmup", "4", "--threads", "1"]


@pytest.fixture(scope="module")
def sweep_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    d = tmp_path_factory.mktemp("sweep")
    out = d / "sweep.json"
    threads = torch.get_num_threads()  # --threads 1 sets the process-wide count: restore it for later tests
    try:
        rc = main(["sweep", "--cache", "first-block", "--values", ",".join(VALUES), "--budget", "30",
                   "--store", str(d / "s.sqlite"), "--json", str(out), "--quiet", *TINY])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    return out


def _report(paths: list[Path], out: Path, *extra: str) -> None:
    assert main(["report", *map(str, paths), "-o", str(out), "--quiet", *extra]) == 0


def _point_centres(chrome, plot, i: int, n: int) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    found = rects(chrome.driver, plot, f'[id^="sweep-{i}-point-"] use')
    assert len(found) == n
    return [centre(r) for r in found]


def test_curve_in_the_browser(sweep_json: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    res = load_result(sweep_json).model
    out = tmp_path / "sweep.html"
    _report([sweep_json], out)
    open_page(chrome, out)
    plots = blocks(chrome, "plot")
    assert "sweep-curve" in plots
    plot = plots["sweep-curve"]
    d = chrome.driver
    # one point per swept value, each where the result puts it on the printed x axis
    assert [p.value for p in res.points] == VALUES
    pts = _point_centres(chrome, plot, 0, len(VALUES))
    xmap, ymap = axis_map(d, plot, 1, "x"), axis_map(d, plot, 1, "y")
    for (px, py), p in zip(pts, res.points, strict=True):
        assert value_at(xmap, px) == pytest.approx(p.speedup, abs=1.5 * abs(xmap[0]))
        if p.quality.psnr.p10 != float("inf"):
            assert value_at(ymap, py) == pytest.approx(p.quality.psnr.p10, abs=1.5 * abs(ymap[0]))
    # the budget line reads as the budget on the printed PSNR axis
    (budget,) = rects(d, plot, '[id="sweep-0-budget"] path')
    assert value_at(ymap, centre(budget)[1]) == pytest.approx(res.budget_db, abs=1.5 * abs(ymap[0]))
    # the timing noise floor band spans the floor's interval on the speed-up axis
    (band,) = rects(d, plot, '[id="sweep-0-timing-floor"] path')
    assert value_at(xmap, band[0]) == pytest.approx(res.timing_floor.low, abs=1.5 * abs(xmap[0]))
    assert value_at(xmap, band[2]) == pytest.approx(res.timing_floor.high, abs=1.5 * abs(xmap[0]))
    assert rects(d, plot, '[id="sweep-0-quality-floor"] path')
    # the working point: ringed exactly where the result's working point is, or no ring when there is none
    rings = rects(d, plot, '[id="sweep-0-working-point"] use')
    wp = res.working_point.value
    if wp is None:
        assert rings == []
    else:
        (ring,) = rings
        j = VALUES.index(wp)
        assert centre(ring) == pytest.approx(pts[j], abs=1.0)
    # every point is in the table with the numbers of the result
    table = blocks(chrome, "table")["sweep-points"]
    rows = [[c.text for c in r.find_elements("css selector", "td")] for r in table.find_elements("css selector",
                                                                                                "tbody tr")]
    assert [r[0] for r in rows] == ["baseline", *VALUES]
    for r, p in zip(rows[1:], res.points, strict=True):
        assert r[2] == f"{p.speedup:.3f}" and r[3] == f"{p.speedup_ci[0]:.3f}–{p.speedup_ci[1]:.3f}"
        assert r[-1].startswith("PASS" if p.passed else "FAIL")
        assert ("working point" in r[-1]) == (p.value == wp)
    screenshot_nonblank(chrome, "report-sweep")


def test_working_point_ring_and_overlay(sweep_json: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    """Two sweeps overlaid; in the second the working point is set to the last value (as `choose` would when
    it is measurably faster): the ring sits on that point and reads as its speed-up."""
    data = json.loads(sweep_json.read_text())
    last = data["points"][-1]
    data["working_point"] = {"value": last["value"], "speedup": last["speedup"], "speedup_ci": last["speedup_ci"],
                             "message": f"working point: {last['value']}"}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    out = tmp_path / "two.html"
    _report([sweep_json, other], out)
    open_page(chrome, out)
    plot = blocks(chrome, "plot")["sweep-curve"]
    d = chrome.driver
    a = _point_centres(chrome, plot, 0, len(VALUES))
    b = _point_centres(chrome, plot, 1, len(VALUES))
    assert sum(a, ()) == pytest.approx(sum(b, ()), abs=0.5)  # the same numbers land on the same place in both series
    (ring,) = rects(d, plot, '[id="sweep-1-working-point"] use')
    assert centre(ring) == pytest.approx(b[-1], abs=1.0)
    xmap = axis_map(d, plot, 1, "x")
    assert value_at(xmap, centre(ring)[0]) == pytest.approx(last["speedup"], abs=1.5 * abs(xmap[0]))
    legend = plot.find_element("css selector", "svg").text
    assert "(sweep)" in legend and "(other)" in legend
    rows = blocks(chrome, "table")["sweep-points"].find_elements("css selector", "tbody tr")
    assert len(rows) == 2 * (1 + len(VALUES))


@pytest.mark.slow
def test_markdown_has_the_table_and_the_curve(sweep_json: Path, tmp_path: Path) -> None:
    res = load_result(sweep_json).model
    out = tmp_path / "sweep.md"
    _report([sweep_json], out, "--format", "markdown")
    text = out.read_text()
    for p in res.points:
        assert f"| {p.value} |" in text and f"| {p.speedup:.3f} |" in text
    pngs = sorted((tmp_path / "sweep_files").glob("*.png"))
    assert [p.name for p in pngs] == ["sweep-curve.png"]
    assert f"](sweep_files/{pngs[0].name})" in text and pngs[0].read_bytes()[:4] == b"\x89PNG"


def test_an_interrupted_sweep_still_reports(sweep_json: Path, tmp_path: Path) -> None:
    """A partial result (Ctrl-C before any value finished: no points, no timing floor) gives a page that says
    so, with an empty curve and only the baseline row, instead of failing."""
    from diffbench.report.build import build_document
    from diffbench.report.document import Note, Plot, Table
    from diffbench.report.kinds import ReportOptions

    data = json.loads(sweep_json.read_text())
    data.update(points=[], timing_floor=None, working_point=None, interrupted=True, partial=True,
                warnings=["interrupted: 0 of 2 value(s) finished; rerun the same command to resume"])
    part = tmp_path / "partial.json"
    part.write_text(json.dumps(data))
    doc = build_document([part], ReportOptions())
    got = {b.id: b for s in doc.sections for b in s.blocks}
    assert isinstance(got["sweep-curve"], Plot)
    table = got["sweep-points"]
    assert isinstance(table, Table) and [r[0] for r in table.rows] == ["baseline"]
    warns = [b.text for b in got.values() if isinstance(b, Note) and b.level == "warn"]
    assert any("partial result" in w for w in warns) and any("0 of 2" in w for w in warns)


def test_the_verdict_comes_first(sweep_json: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    """Issue 24 item 17: the verdict sat last, below the first screen. Now the working point and each
    value's speed-up, CI and gate result are under the title, in a 1280x800 viewport, before the facts."""
    res = load_result(sweep_json).model
    out = tmp_path / "verdict.html"
    _report([sweep_json], out)
    d = chrome.driver
    d.set_window_size(1280, 800)
    try:
        open_page(chrome, out)
        d.execute_script("window.scrollTo(0, 0)")
        top, height, before = d.execute_script(
            "const h = document.querySelector(\"[data-block='sweep-0-headline']\");"
            "const c = document.querySelector(\"[data-block='sweep-0-facts']\");"
            "return [h.getBoundingClientRect().top, window.innerHeight,"
            " !!(h.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING)];")
        notes = blocks(chrome, "note")
    finally:
        d.set_window_size(1400, 1000)
    assert 0 <= top < height and before
    assert res.working_point.message in notes["sweep-0-headline"].text
    for j, p in enumerate(res.points):
        text = notes[f"sweep-0-verdict-{j}"].text
        assert f"{p.speedup:.3f}×" in text and f"{p.speedup_ci[0]:.3f}–{p.speedup_ci[1]:.3f}" in text
        assert ("PASS" if p.passed else "FAIL") in text
