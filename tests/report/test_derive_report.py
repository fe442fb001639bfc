"""The derive report (``diffbench report derive.json``), from a derive result built by hand: every step in the
table, the two figures, predicted sizing marked as such, partial and empty results, the console rendering."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from html import escape, unescape
from pathlib import Path

import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank

from diffbench.cli.main import main
from diffbench.core.jsonio import write_json_atomic
from diffbench.derive.models import (
    SCHEMA_VERSION,
    DeriveConfig,
    DeriveResult,
    Final,
    Measured,
    Sizing,
    StepRecord,
)
from diffbench.engines.config import EngineConfig
from diffbench.errors import InputError
from diffbench.report.derive_table import print_console, step_rows
from diffbench.report.kinds.derive_plots import spent_points, waterfall
from diffbench.report.loader import load_result

START = EngineConfig(engine="diffusers", model="tiny-flux", device="cpu", threads=2)
SERVE = "diffbench serve --model tiny-flux --device cpu --compile --precision int8 --cache first-block=0.1"


def _m(speedup: float, ci: tuple[float, float], before: float, *, p10: float | None = None,
       p50: float | None = None, worst: float | None = None, faster: bool = True) -> Measured:
    identical = p10 is None
    inf = float("inf")
    return Measured(sweep_id="sw-1", run_id=f"run-{speedup}", baseline_run_id="run-base", speedup=speedup, ci=ci,
                    noise_floor=(0.97, 1.03), measurably_faster=faster,
                    verdict="measurably faster" if faster else "not measurably faster: CI overlaps the noise floor",
                    latency_s=before / speedup, baseline_latency_s=before,
                    psnr_p50=inf if identical else p50 or p10 + 2, psnr_p10=inf if identical else p10,
                    psnr_worst=inf if identical else worst or p10 - 1, identical=identical)


def _steps() -> list[StepRecord]:
    def st(stage: int, candidate: str, decision: str, reason: str, **kw: object) -> StepRecord:
        from diffbench.derive.models import STAGES
        return StepRecord(stage=stage, stage_name=STAGES[stage], candidate=candidate, decision=decision,  # type: ignore[arg-type]
                          reason=reason, **kw)  # type: ignore[arg-type]

    return [
        st(1, "ledger prediction", "info", "ledger predicts 2.31 s per request; calibrated from the baseline's "
           "0.29 s per step", latency_s=2.40, gpu_s=2.40),
        st(2, "compile", "kept", "measurably faster and identical", predicted_speedup=1.25,
           measured=_m(1.18, (1.12, 1.24), 2.40), latency_s=2.034, gpu_s=2.034),
        st(2, "vae-tiling", "skipped", "the peak fits in memory: no memory measure needed", latency_s=2.034,
           gpu_s=2.034),
        st(2, "fuse-projections", "rejected", "CI 0.98–1.04 overlaps the noise floor 0.97–1.03",
           predicted_speedup=1.04, measured=_m(1.01, (0.98, 1.04), 2.034, faster=False), latency_s=2.034,
           gpu_s=2.034),
        st(2, "attention=sage", "reclassified", "changed pixels: PSNR p10 31.50 dB < 40 dB; moved to the lossy "
           "steps", measured=_m(1.09, (1.05, 1.13), 2.034, p10=31.5), latency_s=2.034, gpu_s=2.034),
        st(3, "fp8-linear", "skipped", "FP8 linear layers need CUDA compute capability >= 8.9; device cpu",
           latency_s=2.034, gpu_s=2.034),
        st(3, "int8-linear", "kept", "PSNR p10 36.40 dB > 35 dB and measurably faster", predicted_speedup=1.30,
           measured=_m(1.22, (1.15, 1.29), 2.034, p10=36.4, p50=38.2, worst=35.1), latency_s=1.667,
           gpu_s=1.667, psnr_spent_db=36.4),
        st(4, "first-block=0.2", "not combined", "passes its gate alone (33.00 dB) but with int8-linear the "
           "combined PSNR p10 is 29.10 dB < the 30 dB budget", predicted_speedup=1.6,
           measured=_m(1.45, (1.38, 1.52), 1.667, p10=33.0), latency_s=1.667, gpu_s=1.667, psnr_spent_db=36.4),
        st(4, "first-block=0.1", "kept", "within the remaining budget: combined PSNR p10 31.20 dB",
           measured=_m(1.31, (1.25, 1.37), 1.667, p10=34.0), latency_s=1.273, gpu_s=1.273, psnr_spent_db=31.2),
        st(5, "SLO check", "predicted", "p99 1.41 s with queueing meets the 2 s SLO at 3 instances",
           latency_s=1.273, gpu_s=1.273, psnr_spent_db=31.2),
    ]


def _result(**over: object) -> DeriveResult:
    cfg = DeriveConfig(engine=START, width=256, height=256, steps=8, slo_p99_s=2.0, qps=1.5, budget_db=30.0,
                       gpu="h100-sxm", out=Path("derive-out"))
    final = Final(engine=START.model_copy(update={"compile": True, "cache": "first-block=0.1"}),
                  measured=_m(1.88, (1.80, 1.96), 2.40, p10=31.2, p50=33.0, worst=29.9), psnr_spent_db=31.2,
                  message="1.88x faster than the start (95 % CI 1.80-1.96), combined PSNR p10 31.20 dB within "
                          "the 30 dB budget")
    sizing = [
        Sizing(layout="1 GPU", gpus_per_instance=1, latency_s=1.273, p99_s=1.41, meets_slo=True, instances=3,
               total_gpus=3, nodes=1, gpu_s=1.273, spread="measured, 20 samples"),
        Sizing(layout="xDiT ring usp=2", gpus_per_instance=2, latency_s=0.71, p99_s=0.83, meets_slo=True,
               instances=2, total_gpus=4, nodes=1, gpu_s=1.42, spread="ledger", predicted=True),
    ]
    data: dict[str, object] = dict(
        created_unix=1_765_000_000.0, partial=False, config=cfg, store="derive-out/store.sqlite",
        steps=_steps(), final=final, sizing=sizing, serve_command=SERVE,
        outputs={"serving config": "derive-out/serve.json", "calibration": "derive-out/calibration.json",
                 "probe references": "derive-out/probe-refs", "review page": "derive-out/review.html"},
        warnings=["the machine was busy: the timing noise floor is wide (0.97-1.03)"], elapsed_s=612.4)
    data.update(over)
    return DeriveResult(**data)  # type: ignore[arg-type]


def _write(tmp_path: Path, res: DeriveResult, name: str = "derive.json") -> Path:
    """As a command writes its result: strict JSON, identical images' infinite PSNR as the string "inf"."""
    return write_json_atomic(tmp_path / name, res.model_dump(mode="json"))


def _html(tmp_path: Path, src: Path) -> str:
    out = tmp_path / "r.html"
    assert main(["report", str(src), "-o", str(out), "--quiet"]) == 0
    return out.read_text(encoding="utf-8")


def _table_rows(html: str, block: str) -> list[list[str]]:
    m = re.search(rf'data-block="{block}">.*?<tbody>(.*?)</tbody>', html, flags=re.DOTALL)
    assert m, f"no table {block}"
    return [[unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", m.group(1))]


def test_loader_recognises_derive(tmp_path: Path) -> None:
    loaded = load_result(_write(tmp_path, _result()))
    assert loaded.kind == "derive" and isinstance(loaded.model, DeriveResult)
    assert len(loaded.model.steps) == 10


def test_newer_schema_version_is_refused_clearly(tmp_path: Path) -> None:
    data = json.loads(_write(tmp_path, _result()).read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    p = tmp_path / "new.json"
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match=f"derive result schema_version {SCHEMA_VERSION + 1} is newer"):
        load_result(p)
    data["schema_version"] = SCHEMA_VERSION
    del data["config"]
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match="not a valid derive result: config"):
        load_result(p)


def test_html_has_every_step_two_figures_and_the_serving(tmp_path: Path) -> None:
    res = _result()
    html = _html(tmp_path, _write(tmp_path, res))
    rows = _table_rows(html, "derive-0-steps")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("① account", "ledger prediction", "info"), ("② lossless", "compile", "kept"),
        ("② lossless", "vae-tiling", "skipped"), ("② lossless", "fuse-projections", "rejected"),
        ("② lossless", "attention=sage", "reclassified"), ("③ lossy I", "fp8-linear", "skipped"),
        ("③ lossy I", "int8-linear", "kept"), ("④ lossy II", "first-block=0.2", "not combined"),
        ("④ lossy II", "first-block=0.1", "kept"), ("⑤ SLO check", "SLO check", "predicted")]
    compile_row, int8_row, skipped_row = rows[1], rows[6], rows[2]
    assert compile_row[3] == "measurably faster and identical"
    assert compile_row[4:8] == ["1.250", "1.180 (1.120–1.240)", "0.970–1.030", "identical"]
    assert compile_row[8:] == ["2.034", "2.034", "lossless"]
    assert int8_row[7] == "38.20 / 36.40 / 35.10" and int8_row[10] == "36.40"
    assert skipped_row[4:8] == ["—", "—", "—", "—"]
    assert "FP8 linear layers need CUDA compute capability" in rows[5][3]
    assert html.count('data-kind="plot"') == 2
    for gid in ("derive-0-start", "derive-0-measured-1", "derive-0-predicted-1", "derive-0-measured-6",
                "derive-0-predicted-6", "derive-0-measured-8", "derive-0-final", "derive-0-budget",
                "derive-0-spent-6", "derive-0-spent-8", "derive-0-spent-final"):
        assert f'id="{gid}"' in html, gid
    # no prediction for first-block=0.1: no predicted bar; steps not kept have no bar at all
    for gid in ("derive-0-predicted-8", "derive-0-measured-3", "derive-0-measured-7"):
        assert f'id="{gid}"' not in html, gid
    assert "higher = less quality spent" in html
    sizing = _table_rows(html, "derive-0-sizing")
    assert [r[0] for r in sizing] == ["1 GPU", "xDiT ring usp=2"]
    assert sizing[0][-1] == "measured" and sizing[1][-1] == "predicted, not measured"
    assert escape(SERVE) in html
    assert _table_rows(html, "derive-0-outputs")[0] == ["serving config", "derive-out/serve.json"]
    final = re.search(r'data-block="derive-0-final">(.*?)</div>', html, flags=re.DOTALL)
    assert final and "1.880× (95 % CI 1.800–1.960; noise floor 0.970–1.030)" in final.group(1)
    assert "31.20 dB, within the budget ≥ 30 dB" in final.group(1)
    assert "the machine was busy" in html and "partial" not in html.lower()
    conditions = re.search(r'data-block="derive-0-conditions">(.*?)</div>', html, flags=re.DOTALL)
    assert conditions
    for text in ("tiny-flux", "256x256", "<dd>8</dd>", "2 s", "1.5 (headroom 1.3)", "≥ 30 dB", "complete"):
        assert text in conditions.group(1), text


def test_waterfall_numbers_follow_the_records() -> None:
    res = _result()
    wf = waterfall(res)
    assert wf is not None and wf.final_measured
    assert wf.start_s == pytest.approx(2.40)
    assert [b.index for b in wf.bars] == [1, 6, 8]
    assert [(b.before_s, b.after_s) for b in wf.bars] == [(2.40, 2.034), (2.034, 1.667), (1.667, 1.273)]
    assert wf.bars[0].predicted_s == pytest.approx(2.40 / 1.25)
    assert wf.bars[1].predicted_s == pytest.approx(2.034 / 1.30)
    assert wf.bars[2].predicted_s is None
    assert wf.final_s == pytest.approx(2.40 / 1.88)
    assert [(p.index, p.psnr_db) for p in spent_points(res)] == [(6, 36.4), (8, 31.2), (None, 31.2)]


def test_markdown_has_the_table_and_two_pngs(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    assert main(["report", str(_write(tmp_path, _result())), "-o", str(out), "--format", "markdown",
                 "--quiet"]) == 0
    text = out.read_text(encoding="utf-8")
    pngs = sorted(p.name for p in (tmp_path / "r_files").iterdir())
    assert pngs == ["derive-0-budget.png", "derive-0-waterfall.png"]
    assert "| ④ lossy II | first-block=0.2 | not combined |" in text
    assert "| xDiT ring usp=2 |" in text and "predicted, not measured |" in text
    assert SERVE in text


def test_partial_result_without_measurement_renders(tmp_path: Path) -> None:
    """A dry run / an interrupt before the first measurement: no waterfall, the budget figure still draws."""
    res = _result(partial=True, interrupted=True, steps=_steps()[:1], final=None, sizing=[], serve_command=None,
                  outputs={}, warnings=[])
    res.steps[0].latency_s = None
    res.steps[0].gpu_s = None
    assert waterfall(res) is None
    html = _html(tmp_path, _write(tmp_path, res))
    assert 'data-block="derive-0-partial"' in html and "partial (interrupted" in html
    assert "no final configuration" in html and "no waterfall" in html
    assert html.count('data-kind="plot"') == 1 and "no lossy step kept" in html
    assert len(_table_rows(html, "derive-0-steps")) == 1


def test_no_kept_step_draws_start_and_final_only(tmp_path: Path) -> None:
    steps = [s for s in _steps() if s.decision != "kept"]
    for s in steps:
        s.psnr_spent_db, s.latency_s, s.gpu_s = None, 2.40, 2.40
    res = _result(steps=steps, final=Final(engine=START, message="nothing was measurably faster: the start is "
                                           "the configuration"), partial=True)
    wf = waterfall(res)
    assert wf is not None and wf.bars == [] and wf.start_s == wf.final_s == pytest.approx(2.40)
    assert not wf.final_measured and spent_points(res) == []
    html = _html(tmp_path, _write(tmp_path, res))
    assert html.count('data-kind="plot"') == 2 and 'id="derive-0-final"' in html
    assert "nothing was measurably faster" in html and "not measured" in html
    assert "partial (not finished)" in html


def test_console_prints_every_step(tmp_path: Path) -> None:
    from rich.console import Console

    buf = io.StringIO()
    res = _result()
    print_console(res, Console(file=buf, width=400, color_system=None))
    text = buf.getvalue()
    for row in step_rows(res):
        assert row[1] in text and row[2] in text
    assert "predicted, not measured" in text and SERVE in text and "1.880×" in text
    assert "PARTIAL" not in text
    buf = io.StringIO()
    print_console(_result(partial=True, final=None), Console(file=buf, width=400, color_system=None))
    assert "PARTIAL result" in buf.getvalue() and "no final configuration" in buf.getvalue()


@pytest.mark.e2e  # runs a subprocess
def test_cli_report_derive_exits_zero(tmp_path: Path) -> None:
    src = _write(tmp_path, _result())
    out = tmp_path / "out.html"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    cp = subprocess.run([sys.executable, "-m", "diffbench.cli.main", "report", str(src), "-o", str(out), "-q"],
                        capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert "wrote" in cp.stdout and out.stat().st_size > 0
    assert 'data-block="derive-0-waterfall"' in out.read_text(encoding="utf-8")


def test_page_in_the_browser(tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    """Self-contained and error-free in Chromium; the two figures and the steps table are on the page."""
    out = tmp_path / "derive.html"
    assert main(["report", str(_write(tmp_path, _result())), "-o", str(out), "--quiet"]) == 0
    open_page(chrome, out)
    assert set(blocks(chrome, "plot")) == {"derive-0-waterfall", "derive-0-budget"}
    rows = blocks(chrome, "table")["derive-0-steps"].find_elements("css selector", "tbody tr")
    assert len(rows) == len(_steps())
    screenshot_nonblank(chrome, "report-derive")
