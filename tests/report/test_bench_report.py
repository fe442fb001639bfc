"""The bench report, built from real `diffbench bench` runs (tiny-flux at 64x64 with 2 steps, the sim engine),
opened in headless Chromium; plotted values checked against the result's own statistics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank

from diffbench.cli.main import main
from diffbench.report.build import build_document
from diffbench.report.document import Document, Plot, Table
from diffbench.report.html_render import render_html
from diffbench.report.kinds import ReportOptions
from diffbench.report.kinds.bench import slug
from diffbench.report.kinds.bench_plots import MIB, STAGES
from diffbench.report.markdown_render import render_markdown

FLUX = ["--model", "tiny-flux", "--steps", "2", "--warmup", "1", "--runs", "6", "-q"]


def _bench(path: Path, *args: str) -> Path:
    assert main(["bench", *args, "--json", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bench-runs")
    return {
        "flux": _bench(d / "flux.json", *FLUX, "--height", "64", "--width", "64"),
        "flux2": _bench(d / "flux2.json", *FLUX, "--shapes", "64x64,96x64"),
        # a shape above the simulated memory fails (out of memory) and the run goes on
        "sim": _bench(d / "sim.json", "--engine", "sim", "--steps", "4", "--warmup", "2", "--runs", "20",
                      "--shapes", "256x256,1024x1024", "--sim-fail-above-pixels", "300000"),
        "sim_fast": _bench(d / "sim_fast.json", "--engine", "sim", "--steps", "4", "--warmup", "2", "--runs", "20",
                           "--shapes", "256x256", "--sim-step-s", "0.001"),
    }


def _doc(*paths: Path) -> Document:
    return build_document(list(paths), ReportOptions())


def _blocks(doc: Document) -> dict[str, object]:
    return {b.id: b for s in doc.sections for b in s.blocks}


def _cdf_lines(plot: Plot) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The CDF curves of a plot by legend (the p50/p90/p99 markers are separate, unlabelled lines)."""
    return {ln.get_label(): (np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float))
            for ln in plot.figure.axes[0].lines if "(n=" in ln.get_label()}


def _cell(table: Table, row_key: tuple[str, ...], header: str) -> str:
    col = table.headers.index(header)
    row = next(r for r in table.rows if tuple(r[: len(row_key)]) == row_key)
    return row[col]


def _write(doc: Document, path: Path) -> Path:
    path.write_text(render_html(doc), encoding="utf-8")
    return path


def test_bench_report_of_a_tiny_flux_run_in_the_browser(runs: dict[str, Path], tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    r = json.loads(runs["flux2"].read_text())
    doc = _doc(runs["flux2"])
    found = _blocks(doc)
    for s in r["shapes"]:
        lat, sid = s["latency_s"], slug(s["shape"])
        # the CDF crosses 0.5 at the result's p50 and 0.9 at its p90 (the plotted curve, read before rendering)
        ((x, y),) = _cdf_lines(found[f"bench-cdf-{sid}"]).values()  # type: ignore[arg-type]
        assert np.interp(0.5, y, x) == pytest.approx(lat["p50"] * 1e3, rel=1e-12)
        assert np.interp(0.9, y, x) == pytest.approx(lat["p90"] * 1e3, rel=1e-12)
        assert sorted(x / 1e3) == pytest.approx(sorted(s["samples_s"]))
        # the histogram counts every timed run, no warmup
        bars = found[f"bench-hist-{sid}"].figure.axes[0].patches  # type: ignore[attr-defined]
        (stairs,) = [p for p in bars if type(p).__name__ == "StepPatch"]
        assert float(np.sum(stairs.get_data().values)) == lat["n"] == 6
        # per-step timeline: median and p90 per step index, as recorded
        lines = {ln.get_label(): ln.get_ydata() for ln in found["bench-steps"].figure.axes[0].lines}  # type: ignore[attr-defined]
        assert list(lines[f"{s['shape']}: median"]) == pytest.approx([v * 1e3 for v in s["step_s"]["per_step_median"]])
        assert list(lines[f"{s['shape']}: p90"]) == pytest.approx([v * 1e3 for v in s["step_s"]["per_step_p90"]])
    # stage bars: one bar per shape, segments = the recorded stage means, adding up to the mean latency
    ax = found["bench-stages"].figure.axes[0]  # type: ignore[attr-defined]
    widths = np.array([p.get_width() for p in ax.patches]).reshape(len(STAGES), len(r["shapes"]))
    for k, s in enumerate(r["shapes"]):
        assert widths[:, k] == pytest.approx([s["stages_s"][key] * 1e3 for key, _ in STAGES])
        assert widths[:, k].sum() == pytest.approx(s["latency_s"]["mean"] * 1e3, rel=1e-9)
    # memory by stage: tiny-flux measures every stage (resident-set growth on the CPU)
    mem = found["bench-memory"].figure.axes[0].patches  # type: ignore[attr-defined]
    first = r["shapes"][0]["memory"]["stage_peak_bytes"]
    assert [p.get_height() for p in mem[: len(STAGES)]] == pytest.approx([first[k] / MIB for k, _ in STAGES])

    page = _write(doc, tmp_path / "bench.html")
    open_page(chrome, page)
    shown = blocks(chrome)
    expected = {"bench-conditions-1", "bench-summary", "bench-latency-table", "bench-warmup", "bench-steps",
                "bench-steps-table", "bench-stages", "bench-stages-table", "bench-memory", "bench-memory-table",
                "bench-repro"}
    for s in r["shapes"]:
        expected |= {f"bench-{k}-{slug(s['shape'])}" for k in ("cdf", "hist", "runs", "samples")}
    assert expected <= set(shown)
    for ident, el in blocks(chrome, "plot").items():
        assert el.find_element("css selector", "svg").size["width"] > 300, ident
    table = shown["bench-latency-table"].text
    for s in r["shapes"]:
        assert f"{s['latency_s']['p50'] * 1e3:.2f}" in table
        assert f"{s['warmup_s'][0] * 1e3:.2f}" in shown["bench-warmup"].text
    facts = shown["bench-conditions-1"].text
    assert "tiny-flux (FluxPipeline)" in facts and "64x64 s2 b1, 96x64 s2 b1" in facts
    assert r["conditions"]["engine_version"] in facts and "seeds" in facts
    assert "inf (bitwise identical)" in shown["bench-repro"].text
    warn = [el for el in blocks(chrome, "note").values() if "warn" in (el.get_attribute("class") or "")]
    assert len(warn) == len(r["warnings"])
    chrome.driver.execute_script("document.getElementById('bench-overview').scrollIntoView()")
    screenshot_nonblank(chrome, "report-bench")


def test_a_shape_that_ran_out_of_memory_is_data(runs: dict[str, Path], tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    r = json.loads(runs["sim"].read_text())
    ok, oom = r["shapes"]
    assert oom["error"] and "out of memory" in oom["error"] and ok["latency_s"]["n"] == 20
    doc = _doc(runs["sim"])
    found = _blocks(doc)
    assert f"bench-cdf-{slug(ok['shape'])}" in found and f"bench-cdf-{slug(oom['shape'])}" not in found
    errors = found["bench-errors"]
    assert errors.rows == [["sim", oom["shape"], oom["error"]]]  # type: ignore[attr-defined]
    assert _cell(found["bench-summary"], ("sim", oom["shape"]), "status") == "FAILED (see Errors)"  # type: ignore[arg-type]
    # the sim records only the overall peak: the memory bar is that peak, at the stage that held it
    (bar,) = [p for p in found["bench-memory"].figure.axes[0].patches if p.get_height() > 0]  # type: ignore[attr-defined]
    assert bar.get_height() == pytest.approx(ok["memory"]["peak_allocated_bytes"] / MIB)
    # warmups (with the simulated compile) are kept apart: the runs plot shows them left of the timed runs
    ax = found[f"bench-runs-{slug(ok['shape'])}"].figure.axes[0]  # type: ignore[attr-defined]
    timed = next(ln for ln in ax.lines if ln.get_label().endswith(": timed"))
    assert list(timed.get_xdata()) == list(range(1, 21))
    assert list(timed.get_ydata()) == pytest.approx([v * 1e3 for v in ok["samples_s"]])
    page = _write(doc, tmp_path / "oom.html")
    open_page(chrome, page)
    shown = blocks(chrome)
    assert oom["error"] in shown["bench-errors"].text
    assert any("shape_failed" in el.text for el in blocks(chrome, "note").values())


def test_two_results_overlay_with_a_comparison(runs: dict[str, Path], tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    a, b = (json.loads(runs[k].read_text()) for k in ("sim", "sim_fast"))
    doc = _doc(runs["sim"], runs["sim_fast"])
    found = _blocks(doc)
    shape = a["shapes"][0]["shape"]
    curves = _cdf_lines(found[f"bench-cdf-{slug(shape)}"])  # type: ignore[arg-type]
    assert set(curves) == {"sim (n=20)", "sim_fast (n=20)"}
    for label, res in (("sim", a), ("sim_fast", b)):
        x, y = curves[f"{label} (n=20)"]
        assert np.interp(0.5, y, x) == pytest.approx(res["shapes"][0]["latency_s"]["p50"] * 1e3, rel=1e-12)
    cmp = found["bench-compare"]
    ratio = b["shapes"][0]["latency_s"]["p50"] / a["shapes"][0]["latency_s"]["p50"]
    assert _cell(cmp, (shape, "sim_fast"), "p50 ratio") == f"{ratio:.3f}"  # type: ignore[arg-type]
    assert ratio < 0.8 and _cell(cmp, (shape, "sim_fast"), "verdict") == "faster"  # type: ignore[arg-type]
    assert "noise floor 95 % CI" in cmp.headers  # type: ignore[attr-defined]
    diff = {row[0] for row in found["bench-conditions-diff"].rows}  # type: ignore[attr-defined]
    assert "model_hash" in diff  # the sim's parameters differ, so does its hash
    page = _write(doc, tmp_path / "overlay.html")
    open_page(chrome, page)
    shown = blocks(chrome)
    assert {"bench-conditions-1", "bench-conditions-2", "bench-compare", "bench-compare-note"} <= set(shown)
    assert "sim_fast" in shown[f"bench-cdf-{slug(shape)}"].text  # the legend names the file


@pytest.mark.slow
def test_a_real_tiny_flux_overlay_shares_one_plot_per_shape(runs: dict[str, Path]) -> None:
    doc = _doc(runs["flux"], runs["flux2"])
    found = _blocks(doc)
    assert set(_cdf_lines(found["bench-cdf-64x64-s2-b1"])) == {"flux (n=6)", "flux2 (n=6)"}  # type: ignore[arg-type]
    assert set(_cdf_lines(found["bench-cdf-96x64-s2-b1"])) == {"flux2 (n=6)"}  # type: ignore[arg-type]
    assert "bench-compare" in found


@pytest.mark.slow
def test_markdown_has_the_tables_and_a_png_per_plot(runs: dict[str, Path], tmp_path: Path) -> None:
    doc = _doc(runs["flux2"])
    plots = [b.id for s in doc.sections for b in s.blocks if isinstance(b, Plot)]
    out = tmp_path / "bench.md"
    written = render_markdown(doc, out)
    text = out.read_text()
    pngs = {p.stem for p in written if p.suffix == ".png"}
    assert pngs == set(plots) and len(plots) == 2 * 3 + 3  # CDF, histogram, runs per shape; steps, stages, memory
    r = json.loads(runs["flux2"].read_text())
    assert "| result | shape | n | min (ms) | p50 (ms) |" in text
    for s in r["shapes"]:
        assert f"| flux2 | {s['shape']} | 6 | {s['latency_s']['min'] * 1e3:.2f} | {s['latency_s']['p50'] * 1e3:.2f} |" in text


def test_an_older_result_without_per_step_p90_still_renders(runs: dict[str, Path], tmp_path: Path) -> None:
    data = json.loads(runs["sim"].read_text())
    for s in data["shapes"]:
        if s.get("step_s"):
            s["step_s"].pop("per_step_p90")
        if s.get("memory"):
            s["memory"].pop("stage_peak_bytes")
    data["conditions"].pop("seeds")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    found = _blocks(_doc(old))
    assert "No per-step p90 in" in found["bench-steps"].caption  # type: ignore[attr-defined]
    assert all(ln.get_label().endswith("median") for ln in found["bench-steps"].figure.axes[0].lines)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_100_run_bench_report_stays_under_5_mb(tmp_path: Path) -> None:
    path = _bench(tmp_path / "sim100.json", "--engine", "sim", "--runs", "100", "-q")
    assert json.loads(path.read_text())["latency_s"]["n"] == 100
    html = render_html(_doc(path))
    assert len(html.encode("utf-8")) <= 5_000_000


def test_a_result_streamed_mid_shape_shows_the_runs_done(runs: dict[str, Path], tmp_path: Path) -> None:
    """bench --json is rewritten after every run: a shape still running has samples but no summary yet."""
    data = json.loads(runs["sim"].read_text())
    running = data["shapes"][0]
    done = running["samples_s"][:7]
    running.update(samples_s=done, latency_s=None, stages_s=None, step_s=None, memory=None, repro=None)
    data["shapes"] = [running]
    data["partial"] = True
    path = tmp_path / "streaming.json"
    path.write_text(json.dumps(data))
    found = _blocks(_doc(path))
    assert _cell(found["bench-summary"], ("streaming", running["shape"]), "n") == "7"  # type: ignore[arg-type]
    ((x, y),) = _cdf_lines(found[f"bench-cdf-{slug(running['shape'])}"]).values()  # type: ignore[arg-type]
    assert np.interp(0.5, y, x) == pytest.approx(float(np.median(done)) * 1e3, rel=1e-12)
    assert any(getattr(b, "id", "") == "bench-status-1" for b in found.values())


def test_a_comparison_with_a_too_wide_noise_floor_says_so(tmp_path: Path) -> None:
    """Issue 24 item 9: a noise floor too wide to judge anything (e.g. CI 0.04-4.9) got no comment. The first
    result's runs are replaced by noisy ones (lognormal, sigma 1.5), whose even-vs-odd floor reaches 2x by a
    direct bootstrap of the medians' ratio here; the page then says to run more or quiet the machine, and a
    quiet first result gets no such note."""
    base = _bench(tmp_path / "base.json", "--engine", "sim", "--steps", "2", "--warmup", "1", "--runs", "20",
                  "--shapes", "256x256", "-q")
    cand = _bench(tmp_path / "cand.json", "--engine", "sim", "--steps", "2", "--warmup", "1", "--runs", "20",
                  "--shapes", "256x256", "-q")
    data = json.loads(base.read_text())
    rng = np.random.default_rng(5)
    noisy = [float(v) for v in 0.05 * np.exp(rng.normal(0.0, 1.5, 20))]
    data["shapes"][0]["samples_s"] = noisy
    (tmp_path / "noisy.json").write_text(json.dumps(data))
    even, odd = np.asarray(noisy[0::2]), np.asarray(noisy[1::2])
    boot = np.random.default_rng(11).integers(0, even.size, size=(4000, even.size))
    ratios = np.median(even[boot], axis=1) / np.median(odd[boot], axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    assert lo < 0.4 or hi > 2.5  # too wide to tell 2x, by this independent bootstrap
    ids = _doc(tmp_path / "noisy.json", cand).block_ids()
    assert "bench-compare-floor-0" in ids
    assert not [i for i in _doc(base, cand).block_ids() if i.startswith("bench-compare-floor")]
