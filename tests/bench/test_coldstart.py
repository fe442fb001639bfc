"""The cold start a bench reports apart from its warm statistics (bench/coldstart.py, ColdStart)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from diffbench.bench.render import cold_start_text, to_markdown
from diffbench.bench.result import BenchResult
from diffbench.cli.main import main
from diffbench.core import clock
from diffbench.engines.sim import SimEngine

# the sim without jitter or tail events: a run is exactly its work, the first call at a shape adds compile_s
EXACT = ["--engine", "sim", "--steps", "4", "--shapes", "256x256", "--sim-jitter", "0", "--sim-tail-prob", "0",
         "--sim-compile-s", "5", "-q"]


def _bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "b.json"
    assert main(["bench", *EXACT, *args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_first_call_is_the_first_warmup_and_pays_the_compile(tmp_path: Path) -> None:
    r = _bench(tmp_path, "--warmup", "2", "--runs", "5")
    cold, shape = r["cold_start"], r["shapes"][0]
    assert cold["first_call_phase"] == "warmup" and cold["first_shape"] == shape["shape"]
    assert cold["first_call_s"] == shape["warmup_s"][0]
    assert cold["first_shape_warmup_s"] == pytest.approx(sum(shape["warmup_s"]))
    assert cold["warm_p50_s"] == shape["latency_s"]["p50"]
    # no jitter: every warm run takes the same work; the first call adds exactly --sim-compile-s
    assert cold["first_call_s"] - shape["latency_s"]["p50"] == pytest.approx(5.0, abs=1e-6)
    assert cold["to_first_output_s"] == pytest.approx(cold["process_to_ready_s"] + cold["first_call_s"])


def test_without_warmup_the_first_call_is_the_first_timed_run(tmp_path: Path) -> None:
    r = _bench(tmp_path, "--warmup", "0", "--runs", "4")
    cold, shape = r["cold_start"], r["shapes"][0]
    assert cold["first_call_phase"] == "timed" and cold["first_call_s"] == shape["samples_s"][0]
    assert cold["first_shape_warmup_s"] is None


def test_engine_start_and_process_start_are_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = SimEngine.start

    def slow_start(self):  # type: ignore[no-untyped-def]
        time.sleep(0.2)  # a weight load of at least 0.2 s
        return real(self)

    monkeypatch.setattr(SimEngine, "start", slow_start)
    before = time.time()
    r = _bench(tmp_path, "--warmup", "1", "--runs", "3")
    cold = r["cold_start"]
    assert cold["engine_start_s"] >= 0.2
    # process start → ready covers the engine start and at least the time this test process had run before
    started = psutil.Process().create_time()
    assert cold["process_to_ready_s"] >= max(cold["engine_start_s"], before - started - 0.02)
    assert cold["process_to_ready_s"] <= time.time() - started + 0.02


def test_an_unreadable_process_start_is_said_not_guessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "process_start_unix", lambda: None)
    r = _bench(tmp_path, "--warmup", "1", "--runs", "3")
    cold = r["cold_start"]
    assert cold["process_to_ready_s"] is None and cold["to_first_output_s"] is None
    assert cold["first_call_s"] is not None
    text = cold_start_text(BenchResult.model_validate(r))
    assert text is not None and "process start not readable" in text


def test_console_and_markdown_name_the_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    assert main(["bench", *EXACT[:-1], "--warmup", "1", "--runs", "3", "--json", str(out)]) == 0
    r = BenchResult.model_validate_json(out.read_text())
    c = r.cold_start
    assert c is not None and c.first_call_s is not None and c.warm_p50_s is not None
    line = capsys.readouterr().out
    assert "cold start (not in stats):" in line
    assert f"{c.first_call_s / c.warm_p50_s:.3g}× the warm p50" in line
    assert f"**Cold start (not in stats):** {cold_start_text(r)}" in to_markdown(r)


def test_an_older_result_without_a_cold_start_still_loads_and_renders(tmp_path: Path) -> None:
    r = _bench(tmp_path, "--warmup", "1", "--runs", "3")
    del r["cold_start"]
    old = BenchResult.model_validate(r)
    assert old.cold_start is None and cold_start_text(old) is None
    assert "Cold start" not in to_markdown(old)
