"""``diffbench report`` of load and simulate results, from real runs of the commands.

- ``simulate`` (seeded, a few rates past the knee of 2 devices with exp(1) service: capacity 2 req/s);
- ``load`` against ``serve --engine sim`` on a free loopback port (a short sweep past its capacity, with
  ``--max-queue`` so overload shows as ``rejected`` in the outcome stacks);
- a closed-loop ``simulate`` (x axis = users), two overlaid sweeps, and a load run that measured nothing.

Plotted values are checked on the figure before rendering against the result's own numbers (the knee line
at ``knee.offered_rate`` / ``knee.users``, the SLO line at ``slo_s``, the p99 points, the outcome bars),
then the page is opened in headless Chromium with the network cut (see ``tests/report/browser.py``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank

from diffbench.cli.main import main
from diffbench.report.build import build_document
from diffbench.report.document import Document, Note, Plot, Table
from diffbench.report.kinds import ReportOptions
from diffbench.report.markdown_render import render_markdown

SRC = str(Path(__file__).resolve().parents[2] / "src")
SLO_SIM = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _simulate(out: Path, *args: str) -> dict[str, Any]:
    assert main(["simulate", "--service", "exp(1)", "--duration", "200", "--quiet", "--json", str(out),
                 *args]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def sim_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "simulate.json"
    _simulate(out, "--devices", "2", "--rates", "0.5,1,1.5,2.2,3", "--slo", str(SLO_SIM))
    return out


@pytest.fixture(scope="module")
def serve_url() -> Iterator[str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "diffbench.cli.main", "serve", "--engine", "sim", "--port", str(port),
           "--sim-step-s", "0.01", "--max-queue", "8", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.perf_counter() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.perf_counter() < deadline, "serve never became healthy"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def load_json(serve_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("load") / "load.json"
    # sim engine at 64x64, 2 steps: a few tens of ms per request, one at a time -> capacity of a few tens
    # of req/s; 80 req/s is far past it (--max-queue 8 turns the overload into fast 429s)
    assert main(["load", "--url", serve_url, "--rates", "4,16,80", "--duration", "1.5", "--warmup", "2",
                 "--size", "64x64", "--steps", "2", "--slo", "1", "--timeout", "20", "--quiet",
                 "--json", str(out)]) == 0
    return out


def _doc(*paths: Path) -> Document:
    return build_document(list(paths), ReportOptions())


def _by_id(doc: Document) -> dict[str, Any]:
    return {b.id: b for s in doc.sections for b in s.blocks}


def _line(plot: Plot, gid: str) -> Any:
    found = [ln for ax in plot.figure.axes for ln in ax.lines if ln.get_gid() == gid]
    assert len(found) == 1, f"{gid}: {[ln.get_gid() for ax in plot.figure.axes for ln in ax.lines]}"
    return found[0]


def _bars(plot: Plot, gid: str) -> list[float]:
    """Heights of the bars ``<gid>-0``, ``<gid>-1``, ... (one per row)."""
    patches = {p.get_gid(): p for ax in plot.figure.axes for p in ax.patches}
    out = []
    while f"{gid}-{len(out)}" in patches:
        out.append(float(patches[f"{gid}-{len(out)}"].get_height()))
    assert out, f"no bars {gid}-0: {sorted(g for g in patches if g)[:8]}"
    return out


def _check_sweep_plots(doc: Document, data: dict[str, Any], i: int = 0, prefix: str = "load") -> None:
    """The plotted numbers of result ``i`` equal the result's own."""
    found = _by_id(doc)
    lat, rates = found[f"{prefix}-latency"], found[f"{prefix}-rates"]
    rows = data["rates"]
    closed = data["mode"] == "closed"
    xs = [float(r["users"]) if closed else r["offered_rate"] for r in rows]
    ok_rows = [r for r in rows if r["latency_from_arrival_s"]["n"] > 0]
    assert list(_line(lat, f"{prefix}-latency-p99-{i}").get_ydata()) == pytest.approx(
        [r["latency_from_arrival_s"]["p99"] for r in ok_rows])
    assert list(_line(lat, f"{prefix}-latency-p50-{i}").get_xdata()) == pytest.approx(
        [float(r["users"]) if closed else r["offered_rate"] for r in ok_rows])
    knee = data["knee"]["users"] if closed else data["knee"]["offered_rate"]
    for plot in (lat, rates):
        gid = f"{plot.id}-knee-{i}"
        if knee is None:
            assert not [ln for ln in plot.figure.axes[0].lines if ln.get_gid() == gid]
        else:
            assert list(_line(plot, gid).get_xdata()) == [knee, knee]
    assert list(_line(rates, f"{prefix}-rates-ok-{i}").get_ydata()) == pytest.approx([r["ok_rate"] for r in rows])
    assert list(_line(rates, f"{prefix}-rates-goodput-{i}").get_xdata()) == pytest.approx(xs)
    if not closed:
        assert list(_line(rates, f"{prefix}-rates-sent-{i}").get_ydata()) == pytest.approx(
            [r["sent_rate"] for r in rows])
        ident = _line(rates, f"{prefix}-rates-identity")
        assert list(ident.get_xdata()) == list(ident.get_ydata())  # y = x
    table: Table = found[f"load-rows-{i}"]
    p99_col = table.headers.index("p99 (ms)")
    assert [row[p99_col] for row in table.rows] == [
        f"{r['latency_from_arrival_s']['p99'] * 1e3:.4g}" if r["latency_from_arrival_s"]["n"] else "—" for r in rows]
    ok_col = table.headers.index("ok/s")
    assert [row[ok_col] for row in table.rows] == [f"{r['ok_rate']:.4g}" for r in rows]
    flags = table.headers.index("flags")
    assert ["KNEE" in row[flags] for row in table.rows] == [data["knee"]["index"] == j for j in range(len(rows))]


def test_simulate_report(sim_json: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(sim_json.read_text())
    # 2 devices, exp(1): capacity 2 req/s, so 2.2 and 3 req/s are past the knee and flagged unstable
    assert data["knee"]["offered_rate"] is not None and data["knee"]["offered_rate"] < 2
    assert [r["unstable"] for r in data["rates"]][-2:] == [True, True]
    doc = _doc(sim_json)
    _check_sweep_plots(doc, data)
    found = _by_id(doc)
    slo = _line(found["load-latency"], "load-latency-slo-0")
    assert list(slo.get_ydata()) == [SLO_SIM, SLO_SIM]
    half2 = _line(found["load-divergence"], "load-divergence-half2-0")
    assert list(half2.get_ydata()) == pytest.approx([r["divergence"]["second_half_p50_s"] for r in data["rates"]])
    unstable = _line(found["load-divergence"], "load-divergence-unstable-0")
    assert list(unstable.get_xdata()) == [r["offered_rate"] for r in data["rates"] if r["unstable"]]
    assert "load-lag" not in found and "never late" in found["load-lag-note"].text  # simulated lag is 0
    assert _bars(found["load-outcomes"], "load-outcomes-0-ok") == [r["outcomes"]["ok"] for r in data["rates"]]

    out = tmp_path / "simulate.html"
    assert main(["report", str(sim_json), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    plots = blocks(chrome, "plot")
    assert {"load-latency", "load-rates", "load-outcomes", "load-divergence"} <= set(plots)
    svg = plots["load-latency"].find_element("css selector", "svg")
    assert svg.size["width"] > 300
    assert svg.find_elements("css selector", "#load-latency-knee-0") and \
        svg.find_elements("css selector", "#load-latency-slo-0")
    assert "load-rows-0" in blocks(chrome, "table") and {"load-conditions-0", "load-result-0"} <= set(blocks(chrome, "facts"))
    screenshot_nonblank(chrome, "report-simulate")


@pytest.mark.e2e  # runs a subprocess
def test_load_report(load_json: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(load_json.read_text())
    rows = data["rates"]
    assert [r["offered_rate"] for r in rows] == [4, 16, 80] and all(r["n_ok"] > 0 for r in rows)
    # 80 req/s is past the sim service's capacity: its ok rate stays below the offered rate
    assert rows[-1]["ok_rate"] < 0.8 * rows[-1]["offered_rate"]
    doc = _doc(load_json)
    _check_sweep_plots(doc, data)
    found = _by_id(doc)
    assert list(_line(found["load-latency"], "load-latency-slo-0").get_ydata()) == [1.0, 1.0]
    for kind in [k for k in ("ok", "rejected", "timeout") if any(r["outcomes"][k] for r in rows)]:
        assert _bars(found["load-outcomes"], f"load-outcomes-0-{kind}") == [r["outcomes"][kind] for r in rows]
    lag = _line(found["load-lag"], "load-lag-lagp99-0")
    assert list(lag.get_ydata()) == pytest.approx([r["lag_s"]["p99"] * 1e3 for r in rows])

    out = tmp_path / "load.html"
    assert main(["report", str(load_json), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    plots = blocks(chrome, "plot")
    assert {"load-latency", "load-rates", "load-outcomes", "load-lag"} <= set(plots)
    assert plots["load-rates"].find_elements("css selector", "svg #load-rates-identity")
    screenshot_nonblank(chrome, "report-load")


def test_two_sweeps_overlay_each_with_its_knee(tmp_path: Path, sim_json: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    three = tmp_path / "three-devices.json"
    d3 = _simulate(three, "--devices", "3", "--rates", "0.5,1,1.5,2.2,3", "--slo", str(SLO_SIM), "--seed", "1")
    d2 = json.loads(sim_json.read_text())
    assert d3["knee"]["offered_rate"] > d2["knee"]["offered_rate"]  # one more device: a later knee
    doc = _doc(sim_json, three)
    _check_sweep_plots(doc, d2, 0)
    _check_sweep_plots(doc, d3, 1)
    found = _by_id(doc)
    labels = [t.get_text() for t in found["load-latency"].figure.axes[0].get_legend().get_texts()]
    assert "simulate p99" in labels and "three-devices p99" in labels
    assert {"load-rows-0", "load-rows-1", "load-conditions-0", "load-conditions-1"} <= set(found)
    out = tmp_path / "overlay.html"
    assert main(["report", str(sim_json), str(three), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    svg = blocks(chrome, "plot")["load-latency"].find_element("css selector", "svg")
    assert svg.find_elements("css selector", "#load-latency-knee-0") and \
        svg.find_elements("css selector", "#load-latency-knee-1")
    screenshot_nonblank(chrome)


def test_closed_loop_plots_against_users(tmp_path: Path) -> None:
    out = tmp_path / "closed.json"
    data = _simulate(out, "--devices", "2", "--mode", "closed", "--users", "1,2,4,8")
    doc = _doc(out)
    _check_sweep_plots(doc, data)
    found = _by_id(doc)
    for bid in ("load-latency", "load-rates"):
        assert found[bid].figure.axes[0].get_xlabel() == "users (closed loop)"
    assert data["knee"]["users"] in (2, 4, 8)  # saturation: 2 devices need >= 2 users
    assert "load-divergence-note" in found and "closed loop" in found["load-divergence-note"].text
    assert not [ln for ln in found["load-rates"].figure.axes[0].lines if ln.get_gid() == "load-rates-identity"]


def test_open_and_closed_results_get_their_own_axes(tmp_path: Path, sim_json: Path) -> None:
    closed = tmp_path / "closed.json"
    _simulate(closed, "--devices", "2", "--mode", "closed", "--users", "1,2,4")
    found = _by_id(_doc(sim_json, closed))
    assert found["load-open-latency"].figure.axes[0].get_xlabel() == "offered rate (req/s)"
    assert found["load-closed-latency"].figure.axes[0].get_xlabel() == "users (closed loop)"


def test_a_run_that_measured_nothing_renders_a_note(tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    dead = tmp_path / "dead.json"
    # nothing listens on the discard port: every warm-up request fails, the result has no rows
    assert main(["load", "--url", f"http://127.0.0.1:{_free_port()}", "--rates", "1", "--duration", "1",
                 "--warmup", "1", "--quiet", "--json", str(dead)]) == 1
    data = json.loads(dead.read_text())
    assert data["rates"] == [] and data["error"]
    doc = _doc(dead)
    found = _by_id(doc)
    note: Note = found["load-empty-0"]
    assert note.level == "warn" and "nothing was measured" in note.text and data["error"] in note.text
    assert not [b for b in found.values() if isinstance(b, Plot)]
    out = tmp_path / "dead.html"
    assert main(["report", str(dead), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    assert "load-empty-0" in blocks(chrome, "note") and not blocks(chrome, "plot")


@pytest.mark.e2e
def test_markdown_has_the_tables_and_pngs(load_json: Path, tmp_path: Path) -> None:
    data = json.loads(load_json.read_text())
    out = tmp_path / "load.md"
    written = render_markdown(_doc(load_json), out)
    text = out.read_text()
    pngs = sorted(p.name for p in written if p.suffix == ".png")
    assert pngs == ["load-lag.png", "load-latency.png", "load-outcomes.png", "load-rates.png"] or \
        pngs == ["load-divergence.png", "load-lag.png", "load-latency.png", "load-outcomes.png", "load-rates.png"]
    for p in written:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({p.parent.name}/{p.name})" in text
    assert "| offered (req/s) | n | n ok |" in text
    for r in data["rates"]:
        assert f"| {r['offered_rate']:g} req/s | {r['n']} | {r['n_ok']} |" in text
    assert data["knee"]["reason"] in text


def test_an_interrupted_result_says_so(sim_json: Path, tmp_path: Path) -> None:
    from diffbench.load.knee import LoadResult

    res = LoadResult.model_validate_json(sim_json.read_text())
    cut = tmp_path / "cut.json"
    cut.write_text(res.model_copy(update={"partial": True, "interrupted": True}).model_dump_json())
    found = _by_id(_doc(cut))
    assert "stopped early" in found["load-partial-0"].text and found["load-partial-0"].level == "warn"
    assert ("partial", "yes (interrupted)") in found["load-result-0"].items
    assert "load-latency" in found  # the rows it has are still plotted


@pytest.mark.slow  # a scraped load run against serve: ~10 s on 2 busy cores
def test_the_scraped_server_side_is_on_the_page(serve_url: str, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    """Issue 24 item 10: ``load --scrape`` put the server's view in the console and the JSON but not on the
    page. Every scraped number of each row is in the page's server table (ms, read back as numbers)."""
    res = tmp_path / "scraped.json"
    assert main(["load", "--url", serve_url, "--rates", "4,16", "--duration", "1", "--warmup", "1",
                 "--size", "64x64", "--steps", "2", "--timeout", "20", "--quiet", "--scrape", serve_url,
                 "--scrape-interval", "0.2", "--json", str(res)]) == 0
    rows = json.loads(res.read_text())["rates"]
    servers = [r["server"] for r in rows]
    assert all(s is not None and s["n"] > 0 and s["request_mean_s"] for s in servers)
    table = _by_id(_doc(res))["load-server-0"]
    assert isinstance(table, Table) and len(table.rows) == len(rows)
    col = {h: k for k, h in enumerate(table.headers)}

    def close(cell: str, seconds: float | None) -> None:
        if seconds is None:
            assert cell == "—"
        else:
            assert float(cell) == pytest.approx(seconds * 1e3, rel=1e-3)

    for cells, s in zip(table.rows, servers, strict=True):
        close(cells[col["queue wait mean (ms)"]], s["queue_wait_mean_s"])
        close(cells[col["request mean (ms)"]], s["request_mean_s"])
        close(cells[col["service mean (ms)"]], s["service_mean_s"])
        for stage, v in s["stages_mean_s"].items():
            close(cells[col[f"{stage} mean (ms)"]], v)
        assert int(cells[col["server n"]]) == sum(s["outcomes"].values())
        if s["queue_depth_mean"] is not None:
            mean, peak = (float(x) for x in cells[col["queue depth mean / max"]].split(" / "))
            assert mean == pytest.approx(s["queue_depth_mean"], rel=1e-2)
            assert peak == pytest.approx(s["queue_depth_max"], rel=1e-2)
    out = tmp_path / "scraped.html"
    assert main(["report", str(res), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    shown = blocks(chrome, "table")["load-server-0"].text
    assert "server side (scraped from" in shown and "queue wait mean (ms)" in shown


def test_work_and_cost_columns_when_the_rows_have_them(tmp_path: Path, sim_json: Path) -> None:
    assert "load-work-0" not in _by_id(_doc(sim_json))  # a simulation has neither start nor work
    data = json.loads(sim_json.read_text())
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    for k, row in enumerate(data["rates"]):
        row.update(started_unix_s=start + 10 * k + 0.25, ok_outputs=row["n_ok"], mpx_steps_per_s=1.5 * (k + 1),
                   gpus=2, mpx_steps_per_s_per_gpu=0.75 * (k + 1), gpu_s_per_output=4.0, gpu_hour_price=1.8,
                   cost_per_1000=2.0)
    path = tmp_path / "with-work.json"
    path.write_text(json.dumps(data))
    table = _by_id(_doc(path))["load-work-0"]
    assert isinstance(table, Table)
    assert table.headers[1:] == ["started (UTC)", "ok outputs", "Mpx·steps/s", "Mpx·steps/s per GPU", "GPUs",
                                 "GPU·s per output", "cost / 1,000 outputs"]
    assert [r[1] for r in table.rows] == [f"2026-01-01T00:00:{10 * k:02d}.250Z" for k in range(len(data["rates"]))]
    assert [float(r[3]) for r in table.rows] == [1.5 * (k + 1) for k in range(len(data["rates"]))]
    assert all(r[5] == "2" and float(r[7]) == 2.0 for r in table.rows)
    assert "1.8 per GPU-hour" in (table.caption or "")


def test_quality_and_energy_tables_when_the_rows_have_them(tmp_path: Path, sim_json: Path) -> None:
    ids = _by_id(_doc(sim_json))
    assert "load-quality-0" not in ids and "load-energy-0" not in ids  # a simulation has neither
    data = json.loads(sim_json.read_text())
    rows = data["rates"]
    for k, row in enumerate(rows):
        row["n_good"] = row["n"] - k  # the latency-only goodput over every request of the row
        row["quality"] = {"n_reference": 10, "n_scored": 10 - k, "psnr_p50_db": 48.0 - k, "psnr_p10_db": 44.5 - k,
                          "psnr_worst_db": 41.25 - k, "ssim_p50": 0.99, "ssim_worst": 0.95, "gate_psnr_db": 45.0,
                          "fraction_under_gate": 0.1 * k,
                          "goodput": {"n": 10 - k, "n_good": 8 - k, "fraction": (8 - k) / (10 - k),
                                      "ci_low": 0.4, "ci_high": 0.97}}
        row["server"] = {"url": "http://x/metrics", "scrapes": 3, "energy_j": 100.0 * (k + 1),
                         "energy_source": "diffusion_energy_joules_total", "energy_per_ok_output_j": 2.5 * (k + 1)}
    path = tmp_path / "with-quality.json"
    path.write_text(json.dumps(data))
    ids = _by_id(_doc(path))
    quality, energy = ids["load-quality-0"], ids["load-energy-0"]
    assert isinstance(quality, Table) and isinstance(energy, Table)
    for k, (row, cells) in enumerate(zip(rows, quality.rows, strict=True)):
        assert cells[1] == f"{10 - k}/10"
        assert [float(c) for c in cells[2:5]] == [48.0 - k, 44.5 - k, 41.25 - k]
        assert cells[7] == f"{0.1 * k:.1%} < 45 dB"
        assert cells[8] == f"{8 - k}/{10 - k} = {(8 - k) / (10 - k):.1%} (40.0%–97.0%)"
        assert cells[9] == f"{row['n'] - k}/{row['n']} = {(row['n'] - k) / row['n']:.1%}"
    assert [float(c[1]) for c in energy.rows] == [100.0 * (k + 1) for k in range(len(rows))]
    assert [float(c[2]) for c in energy.rows] == [2.5 * (k + 1) for k in range(len(rows))]
    assert {c[3] for c in energy.rows} == {"diffusion_energy_joules_total"}
