"""Issue 24 item 17: the headline is the first thing under a report's title, inside the first screen and
before the conditions; a single-rate load page draws no one-point chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.report.browser import blocks, open_page

from diffbench.cli.main import main
from diffbench.report.build import build_document
from diffbench.report.document import Plot
from diffbench.report.kinds import ReportOptions

VIEW = (1280, 800)


def _top_and_order(chrome, head: str, later: str) -> tuple[float, float, bool]:  # type: ignore[no-untyped-def]
    d = chrome.driver
    return d.execute_script(
        "const h = document.querySelector(`[data-block='${arguments[0]}']`);"
        "const c = document.querySelector(`[data-block='${arguments[1]}']`);"
        "return [h.getBoundingClientRect().top, window.innerHeight,"
        " !!(h.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING)];", head, later)


def _open(chrome, html: Path):  # type: ignore[no-untyped-def]
    chrome.driver.set_window_size(*VIEW)
    try:
        open_page(chrome, html)
        chrome.driver.execute_script("window.scrollTo(0, 0)")
    except Exception:
        chrome.driver.set_window_size(1400, 1000)
        raise


def test_bench_headline_comes_first(tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    res = tmp_path / "b.json"
    assert main(["bench", "--engine", "sim", "--steps", "2", "--warmup", "1", "--runs", "20",
                 "--shapes", "256x256,512x512", "-q", "--json", str(res)]) == 0
    out = tmp_path / "b.html"
    assert main(["report", str(res), "-o", str(out), "--quiet"]) == 0
    _open(chrome, out)
    try:
        top, height, before = _top_and_order(chrome, "bench-summary", "bench-conditions-1")
        text = blocks(chrome, "table")["bench-summary"].text
    finally:
        chrome.driver.set_window_size(1400, 1000)
    assert 0 <= top < height and before
    for s in json.loads(res.read_text())["shapes"]:  # the headline holds each shape's n, p50 and p99
        assert str(s["latency_s"]["n"]) in text and f"{s['latency_s']['p50'] * 1e3:.1f}"[:3] in text


def test_plan_answer_comes_first(tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    res = tmp_path / "p.json"
    assert main(["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm",
                 "--gpus-per-node", "8", "--slo-p99", "3", "--qps", "100", "--json", str(res)]) == 0
    out = tmp_path / "p.html"
    assert main(["report", str(res), "-o", str(out), "--quiet"]) == 0
    _open(chrome, out)
    try:
        top, height, before = _top_and_order(chrome, "plan-0-headline", "plan-0-capacity")
        text = blocks(chrome, "note")["plan-0-headline"].text
    finally:
        chrome.driver.set_window_size(1400, 1000)
    data = json.loads(res.read_text())
    assert 0 <= top < height and before
    assert text.startswith(f"{data['total_gpus']} GPUs") and f"{data['instances']} instance(s)" in text


def test_a_single_rate_load_page_draws_no_one_point_chart(tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    res = tmp_path / "one.json"
    assert main(["simulate", "--service", "exp(1)", "--devices", "2", "--rates", "1", "--duration", "200",
                 "--quiet", "--json", str(res)]) == 0
    row = json.loads(res.read_text())["rates"][0]
    doc = build_document([res], ReportOptions())
    assert not [b for s in doc.sections for b in s.blocks if isinstance(b, Plot)]
    out = tmp_path / "one.html"
    assert main(["report", str(res), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    assert not blocks(chrome, "plot") and not chrome.driver.find_elements("css selector", "svg")
    assert "one offered rate only" in blocks(chrome, "note")["load-one-point-note"].text
    table = blocks(chrome, "table")["load-one-point"].text
    assert f"{row['latency_from_arrival_s']['p99'] * 1e3:.0f}"[:3] in table and str(row["n_ok"]) in table


@pytest.mark.parametrize("rates", ["1,2"])
def test_two_rates_still_get_the_charts(tmp_path: Path, rates: str) -> None:
    res = tmp_path / "two.json"
    assert main(["simulate", "--service", "exp(1)", "--devices", "2", "--rates", rates, "--duration", "100",
                 "--quiet", "--json", str(res)]) == 0
    ids = {b.id for s in build_document([res], ReportOptions()).sections for b in s.blocks}
    assert {"load-latency", "load-rates"} <= ids and "load-one-point" not in ids
