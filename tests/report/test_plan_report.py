"""The ledger and plan reports, built from real ``diffbench ledger --json`` / ``plan --json`` runs and opened in
headless Chromium: the waterfall and the stage bars read back as the result's own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank
from tests.report.svg_axes import axis_map, centre, rects, value_at

from diffbench.cli.main import main
from diffbench.report.loader import load_result

GIB = 2**30
REQ = ["--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm"]
PLAN = [*REQ, "--gpus-per-node", "8", "--slo-p99", "3", "--qps", "100", "--quality-budget", "30"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("plan")
    out = {"ledger": d / "ledger.json", "plan": d / "plan.json", "plan-strict": d / "plan-strict.json",
           "ledger-fp8": d / "ledger-fp8.json"}
    assert main(["ledger", *REQ, "--json", str(out["ledger"])]) == 0
    assert main(["ledger", *REQ, "--precision", "fp8", "--json", str(out["ledger-fp8"])]) == 0
    assert main(["plan", *PLAN, "--json", str(out["plan"])]) == 0
    # a second plan: no lossy step allowed, a tighter SLO (a different derivation to overlay)
    assert main(["plan", *REQ, "--slo-p99", "2", "--qps", "10", "--json", str(out["plan-strict"])]) == 0
    return out


def _report(paths: list[Path], out: Path, *extra: str) -> None:
    assert main(["report", *map(str, paths), "-o", str(out), "--quiet", *extra]) == 0


def _tol(m: tuple[float, float]) -> float:
    return 1.5 * abs(m[0])  # 1.5 px in data units


def test_plan_waterfall_in_the_browser(runs: dict[str, Path], tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    res = load_result(runs["plan"]).model
    out = tmp_path / "plan.html"
    _report([runs["plan"]], out)
    open_page(chrome, out)
    plot = blocks(chrome, "plot")["plan-waterfall"]
    d = chrome.driver
    lat = rects(d, plot, '[id^="plan-0-latency-"] path')
    gpu = rects(d, plot, '[id^="plan-0-gpu-s-"] path')
    assert len(lat) == len(gpu) == len(res.steps) > 8  # one bar per step ①–⑧ (② and ③ have several)
    ylat, ygpu = axis_map(d, plot, 1, "y"), axis_map(d, plot, 2, "y")
    # the first bar rises from 0 to the first step's latency, on the printed axis
    assert value_at(ylat, lat[0][1]) == pytest.approx(res.steps[0].latency_s, abs=_tol(ylat))
    assert value_at(ylat, lat[0][3]) == pytest.approx(0.0, abs=_tol(ylat))
    # every later bar spans the step before to the step after; the last reads as the plan's GPU·s
    for j in range(1, len(res.steps)):
        lo, hi = sorted((res.steps[j - 1].latency_s, res.steps[j].latency_s))
        assert value_at(ylat, lat[j][3]) == pytest.approx(lo, abs=_tol(ylat))
        assert value_at(ylat, lat[j][1]) == pytest.approx(hi, abs=_tol(ylat))
    assert value_at(ygpu, gpu[-1][3]) == pytest.approx(res.per_request_gpu_s, abs=_tol(ygpu))
    (slo,) = rects(d, plot, '[id="plan-0-slo"] path')
    assert value_at(ylat, centre(slo)[1]) == pytest.approx(res.config.slo_p99_s, abs=_tol(ylat))
    # capacity figures, the derivation, signals and alerts are on the page with the result's numbers
    facts = blocks(chrome, "facts")["plan-0-capacity"].text
    assert f"{res.instances} × {res.gpus_per_instance} GPU(s)" in facts and f"{res.total_gpus} on" in facts
    assert f"{res.total_gpus_occupied_bound} GPUs" in facts
    tables = blocks(chrome, "table")
    rows = tables["plan-0-steps"].find_elements("css selector", "tbody tr")
    assert [r.find_elements("css selector", "td")[3].text for r in rows] == [f"{s.latency_s:.3f}" for s in res.steps]
    assert len(tables["plan-0-signals"].find_elements("css selector", "tbody tr")) == len(res.signals) > 0
    assert len(tables["plan-0-alerts"].find_elements("css selector", "tbody tr")) == len(res.alerts) > 0
    assert "plan-0-alternatives" in tables
    screenshot_nonblank(chrome, "report-plan")


def test_two_plans_overlaid(runs: dict[str, Path], tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    a, b = load_result(runs["plan"]).model, load_result(runs["plan-strict"]).model
    out = tmp_path / "plans.html"
    _report([runs["plan"], runs["plan-strict"]], out)
    open_page(chrome, out)
    plot = blocks(chrome, "plot")["plan-waterfall"]
    d = chrome.driver
    assert len(rects(d, plot, '[id^="plan-0-latency-"] path')) == len(a.steps)
    assert len(rects(d, plot, '[id^="plan-1-latency-"] path')) == len(b.steps)
    ylat = axis_map(d, plot, 1, "y")
    for i, m in enumerate((a, b)):
        (slo,) = rects(d, plot, f'[id="plan-{i}-slo"] path')
        assert value_at(ylat, centre(slo)[1]) == pytest.approx(m.config.slo_p99_s, abs=_tol(ylat))
    assert {"plan-0-steps", "plan-1-steps"} <= set(blocks(chrome, "table"))


def test_ledger_stages_and_memory_in_the_browser(runs: dict[str, Path], tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    res, fp8 = load_result(runs["ledger"]).model, load_result(runs["ledger-fp8"]).model
    out = tmp_path / "ledger.html"
    _report([runs["ledger"], runs["ledger-fp8"]], out)
    open_page(chrome, out)
    plots = blocks(chrome, "plot")
    stages, memory = plots["ledger-stages"], plots["ledger-memory"]
    d = chrome.driver
    yflops, ytime, ymem = (axis_map(d, stages, k, "y") for k in (1, 2, 3))
    for i, m in enumerate((res, fp8)):
        assert len(rects(d, stages, f'[id^="ledger-{i}-flops-"] path')) == len(m.stages) == 3
        for s in m.stages:
            (bar,) = rects(d, stages, f'[id="ledger-{i}-flops-{s.name}"] path')
            assert value_at(yflops, bar[1]) == pytest.approx(s.flops / 1e12, abs=_tol(yflops))
            (mbar,) = rects(d, stages, f'[id="ledger-{i}-memory-{s.name}"] path')
            assert value_at(ymem, mbar[1]) == pytest.approx(s.memory_bytes / GIB, abs=_tol(ymem))
        # the denoise time bar: linear layers, attention stacked on top, together the stage's time
        (lin,) = rects(d, stages, f'[id="ledger-{i}-time-denoise"] path')
        (att,) = rects(d, stages, f'[id="ledger-{i}-time-denoise-attention"] path')
        den = next(s for s in m.stages if s.name == "denoise")
        assert value_at(ytime, lin[1]) == pytest.approx(m.denoise_linear_s, abs=_tol(ytime))
        assert value_at(ytime, att[1]) == pytest.approx(den.time_s, abs=_tol(ytime))
    # memory vs capacity: the capacity and usable marks and the peak bar read as the result's bytes
    xmem = axis_map(d, memory, 1, "x")
    for i, m in enumerate((res, fp8)):
        (cap,) = rects(d, memory, f'[id="ledger-{i}-capacity"] path')
        (usable,) = rects(d, memory, f'[id="ledger-{i}-usable"] path')
        (over,) = rects(d, memory, f'[id="ledger-{i}-overhead"] path')
        assert value_at(xmem, centre(cap)[0]) == pytest.approx(m.capacity_bytes / GIB, abs=_tol(xmem))
        assert value_at(xmem, centre(usable)[0]) == pytest.approx(m.usable_bytes / GIB, abs=_tol(xmem))
        assert value_at(xmem, over[2]) == pytest.approx(m.peak_memory_bytes / GIB, abs=_tol(xmem))
    assert fp8.resident_weights_bytes < res.resident_weights_bytes  # fp8 weights: a shorter bar
    rows = blocks(chrome, "table")["ledger-0-stages"].find_elements("css selector", "tbody tr")
    assert [r.find_elements("css selector", "td")[2].text for r in rows[:3]] == [
        f"{s.time_s * 1e3:,.1f}" for s in res.stages]
    screenshot_nonblank(chrome, "report-ledger")


def test_markdown_has_the_tables_and_the_plots(runs: dict[str, Path], tmp_path: Path) -> None:
    plan = load_result(runs["plan"]).model
    out = tmp_path / "pl.md"
    _report([runs["plan"], runs["ledger"]], out, "--format", "markdown")
    text = out.read_text()
    for s in plan.steps:
        assert f"| {s.name} |" in text and f"| {s.latency_s:.3f} |" in text
    assert "| denoise |" in text and "| capacity |" in text
    names = sorted(p.name for p in (tmp_path / "pl_files").glob("*.png"))
    assert names == ["ledger-memory.png", "ledger-stages.png", "plan-waterfall.png"]
    for n in names:
        assert f"](pl_files/{n})" in text
