"""Work-normalized throughput, cost per 1,000 outputs and the wall-clock times of ``diffbench load`` rows and
``--jsonl`` records, recomputed from the records of a short run against the fake server."""

from __future__ import annotations

import json
import time

import pytest

from diffbench.cli.main import main
from diffbench.load.client import read_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

WORKLOAD = """
kind: image
shapes:
  - {size: 64x32, steps: 2, weight: 1}
  - {size: 48x48, steps: 3, n: 2, weight: 1}
"""


def _ok_window(recs, duration_s: float) -> float:
    t0 = min(0.0, min(r.intended_s for r in recs))
    return max(duration_s, max(r.done_s for r in recs if r.outcome == "ok") - t0)


def test_work_cost_and_timestamps_recomputed_from_the_records(fake, tmp_path, capsys):
    fake.delay_s = 0.01
    wl, out, jl = tmp_path / "w.yaml", tmp_path / "r.json", tmp_path / "r.jsonl"
    wl.write_text(WORKLOAD)
    before = time.time()
    assert main(["load", "--url", fake.url("ok"), "--workload", str(wl), "--rates", "10,20", "--duration", "1",
                 "--arrival", "constant", "--gpus", "2", "--gpu-hour-price", "3.6", "--json", str(out),
                 "--jsonl", str(jl), "--timeout", "5"]) == 0
    after = time.time()
    res = json.loads(out.read_text())
    lines = [json.loads(x) for x in jl.read_text().splitlines()]
    recs = read_jsonl(jl)
    for row in res["rates"]:
        run = f"rate={row['offered_rate']:g}"
        mine = [r for r, line in zip(recs, lines, strict=True) if line["run"] == run]
        ok = [r for r in mine if r.outcome == "ok"]
        assert len(mine) == row["n"] and len(ok) == row["n_ok"] > 0
        # pixels x frames x steps x outputs of every ok request, from the record's own fields
        work = sum(r.width * r.height * (r.frames or 1) * r.steps * r.outputs for r in ok) / 1e6
        window = _ok_window(mine, row["duration_s"])
        assert row["mpx_steps_per_s"] == pytest.approx(work / window, rel=1e-9)
        assert row["ok_outputs"] == sum(r.outputs for r in ok) > len(ok)  # the n: 2 shape counts twice
        assert row["gpus"] == 2 and row["mpx_steps_per_s_per_gpu"] == pytest.approx(work / window / 2, rel=1e-9)
        # the same window as ok/s: work per ok request = work rate / ok rate
        assert row["mpx_steps_per_s"] / row["ok_rate"] == pytest.approx(work / len(ok), rel=1e-9)
        gpu_s = 2 * window / row["ok_outputs"]
        assert row["gpu_s_per_output"] == pytest.approx(gpu_s, rel=1e-9)
        assert row["cost_per_1000"] == pytest.approx(3.6 * gpu_s * 1000 / 3600, rel=1e-9)
        # wall clock: one start per row, inside the run; each arrival = start + its offset (within 1 ms)
        start = row["started_unix_s"]
        assert before < start < after
        for r in mine:
            assert r.row_started_unix_s == pytest.approx(start, abs=1e-6)
            assert r.intended_unix_s - start == pytest.approx(r.intended_s, abs=1e-3)
    first, second = res["rates"]
    # the second row starts after the first one's requests finished: its wall-clock start is at least the
    # first row's last done time later (not its nominal window: the next row starts once the last answer is
    # in, which at 10 req/s can be before t = 1 s)
    last_done = max(r.done_s for r, line in zip(recs, lines, strict=True)
                    if line["run"] == "rate=10" and r.done_s is not None)
    assert second["started_unix_s"] - first["started_unix_s"] >= last_done
    text = capsys.readouterr().out
    assert "work and cost" in text and "Mpx·steps/s" in text and "Z" in text


def test_without_gpus_no_per_gpu_figure_and_no_cost(fake, tmp_path):
    fake.delay_s = 0.0
    out = tmp_path / "r.json"
    assert main(["load", "--url", fake.url("ok"), "--rates", "10", "--duration", "0.5", "--arrival", "constant",
                 "--size", "64x32", "--steps", "2", "--warmup", "0", "--json", str(out), "--timeout", "5"]) == 0
    (row,) = json.loads(out.read_text())["rates"]
    assert row["mpx_steps_per_s"] == pytest.approx(64 * 32 * 2 / 1e6 * row["ok_rate"], rel=1e-9)
    assert row["gpus"] is None and row["mpx_steps_per_s_per_gpu"] is None and row["cost_per_1000"] is None


def test_openai_dialect_sends_no_steps_so_the_work_is_unknown(fake, tmp_path):
    out = tmp_path / "r.json"
    assert main(["load", "--url", fake.url("ok"), "--dialect", "openai", "--rates", "10", "--duration", "0.5",
                 "--arrival", "constant", "--warmup", "0", "--gpus", "1", "--json", str(out),
                 "--timeout", "5"]) == 0
    (row,) = json.loads(out.read_text())["rates"]
    assert row["mpx_steps_per_s"] is None and row["gpu_s_per_output"] is not None


@pytest.mark.parametrize(("args", "fragment"), [
    (["--gpus", "0"], "--gpus must be >= 1 GPUs, got 0"),
    (["--gpus", "-2"], "--gpus must be >= 1 GPUs, got -2"),
    (["--gpus", "1", "--gpu-hour-price", "-1"], "--gpu-hour-price must be >= 0"),
    (["--gpus", "1", "--gpu-hour-price", "nan"], "--gpu-hour-price must be a finite price per GPU-hour"),
    (["--gpus", "1", "--gpu-hour-price", "inf"], "--gpu-hour-price must be a finite price per GPU-hour"),
    (["--gpu-hour-price", "2"], "--gpu-hour-price prices GPU time and needs --gpus"),
])
def test_bad_gpus_and_price_name_the_option(args, fragment, capsys):
    assert main(["load", "--url", "http://127.0.0.1:9", "--rates", "1", *args]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.slow
def test_worker_pool_records_carry_the_rows_wall_clock_start(fake, tmp_path):
    fake.delay_s = 0.01
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    assert main(["load", "--url", fake.url("ok"), "--workers", "2", "--request-rate", "20", "--arrival",
                 "constant", "--num-requests", "10", "--duration", "30", "--size", "64x32", "--steps", "2",
                 "--json", str(out), "--jsonl", str(jl), "--timeout", "5"]) == 0
    (row,) = json.loads(out.read_text())["rates"]
    recs = read_jsonl(jl)
    assert len(recs) == 10
    for r in recs:
        assert r.row_started_unix_s == pytest.approx(row["started_unix_s"], abs=1e-6)
        assert r.intended_unix_s - row["started_unix_s"] == pytest.approx(r.intended_s, abs=1e-3)
    work = sum(r.width * r.height * r.steps * r.outputs for r in recs if r.outcome == "ok") / 1e6
    assert row["mpx_steps_per_s"] == pytest.approx(work / _ok_window(recs, row["duration_s"]), rel=1e-9)


def test_the_services_gpu_count_gives_the_per_gpu_figure_unless_gpus_overrides(fake, tmp_path, capsys):
    """A service stating ``gpus`` on ``/v1/models`` (as ``serve`` does on a GPU) sets the per-GPU work; an
    explicit --gpus wins; a count that is not an int >= 1 is ignored (no per-GPU figure)."""
    fake.delay_s = 0.0

    def row(mode: str, *extra: str) -> dict:
        out = tmp_path / f"{mode}.json"
        assert main(["load", "--url", fake.url(mode), "--rates", "10", "--duration", "0.5", "--arrival", "constant",
                     "--size", "64x32", "--steps", "2", "--warmup", "0", "--json", str(out), "--timeout", "5",
                     *extra]) == 0
        (r,) = json.loads(out.read_text())["rates"]
        return r

    stated = row("gpus4")
    assert "GPUs: 4 (the service's /v1/models" in capsys.readouterr().out
    assert stated["gpus"] == 4
    assert stated["mpx_steps_per_s_per_gpu"] == pytest.approx(stated["mpx_steps_per_s"] / 4, rel=1e-9)
    assert row("gpus4", "--gpus", "2")["gpus"] == 2
    for bad in ("gpus0", "gpus2.5", "gpustrue", "ok"):
        r = row(bad)
        assert r.get("gpus") is None and r.get("mpx_steps_per_s_per_gpu") is None
