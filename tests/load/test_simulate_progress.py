"""Live progress of ``simulate`` (rate i of k, requests simulated) and of ``load``: on stderr only.

Each command runs in a subprocess with ``DIFFBENCH_PROGRESS=always`` (the line is drawn although stderr
is a pipe) and with ``never``; stdout must be the same (simulate is seeded, so byte for byte) and free of
terminal control codes, while stderr got the line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diffbench.load.simulator import SimConfig, SimProgress, simulate_sweep
from diffbench.queueing.schedules import spec_from_cli

SRC = str(Path(__file__).resolve().parents[2] / "src")
ESC = "\x1b"

ROW_NOTE = re.compile(r"^\s*[\d.]+ (req/s|users): ")  # "  20 req/s: latency from arrival: ..."


def _run(args: list[str], progress: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DIFFBENCH_PROGRESS": progress, "COLUMNS": "400",  # a row note never wraps onto a line of its own
           "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "diffbench.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_simulate_sweep_reports_each_row_and_the_requests_done() -> None:
    config = SimConfig(devices=2, service="exp(1)", rates=[0.5, 1.0, 1.5], duration_s=200,
                       schedule=spec_from_cli(arrival="poisson", duration_s=200, seed=0))
    seen: list[SimProgress] = []
    result = simulate_sweep(config, on_progress=seen.append)
    counts = [r.n for r in result.rates]
    # one call when each row starts, one when it ends, one at the end
    assert [(p.row, p.rows, p.label) for p in seen] == [
        (1, 3, "0.5 req/s"), (1, 3, "0.5 req/s"), (2, 3, "1 req/s"), (2, 3, "1 req/s"),
        (3, 3, "1.5 req/s"), (3, 3, "1.5 req/s"), (3, 3, "1.5 req/s")]
    assert [p.done for p in seen] == [0, counts[0], counts[0], counts[0] + counts[1], counts[0] + counts[1],
                                      sum(counts), sum(counts)]
    assert [p.finished for p in seen] == [False] * 6 + [True]
    assert seen[0].expected == (0.5 + 1.0 + 1.5) * 200  # rate x duration per row (expected_requests)


@pytest.mark.e2e
def test_simulate_progress_goes_to_stderr_and_stdout_is_unchanged(tmp_path: Path) -> None:
    args = ["simulate", "--devices", "2", "--service", "exp(1)", "--rates", "0.5,1,3", "--duration", "400",
            "--json", "sim.json"]
    drawn = _run(args, "always", tmp_path)
    result = json.loads((tmp_path / "sim.json").read_text())
    plain = _run(args, "never", tmp_path)
    assert drawn.returncode == plain.returncode == 0, drawn.stderr + plain.stderr
    assert drawn.stdout == plain.stdout and ESC not in drawn.stdout and "KNEE" in drawn.stdout
    assert "requests simulated" not in drawn.stdout
    total = sum(r["n"] for r in result["rates"])
    assert f"simulate: done, 3 rate(s)  {total:,} of ~{(0.5 + 1 + 3) * 400:,.0f} requests simulated" in drawn.stderr
    assert plain.stderr == ""
    quiet = _run([*args, "--quiet"], "", tmp_path)  # no TTY and --quiet: nothing on stderr either
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == plain.stdout


@pytest.mark.e2e
def test_load_progress_honours_the_env_and_keeps_stdout_clean(fake, tmp_path: Path) -> None:
    fake.delay_s = 0.01
    args = ["load", "--url", fake.url("ok"), "--request-rate", "20", "--arrival", "constant", "--num-requests",
            "20", "--duration", "5", "--warmup", "0", "--timeout", "5", "--size", "64x64", "--json", "load.json"]
    drawn = _run(args, "always", tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    row = json.loads((tmp_path / "load.json").read_text())["rates"][0]
    plain = _run(args, "never", tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "in flight" in drawn.stderr and "sent " in drawn.stderr  # the live line was drawn on stderr
    assert "in flight" not in plain.stderr
    for out in (drawn.stdout, plain.stdout):
        assert ESC not in out and "in flight" not in out
        assert "knee:" in out and "open loop, 20 req/s" in out
    assert row["n"] == 20 and row["outcomes"]["ok"] == 20
    # the same lines in the same order (numbers differ between two live runs; so may a row's own notes, such as
    # a client that fell behind on a busy machine)
    def shape(out: str) -> list[str]:
        return [line.split()[0][:6] for line in out.splitlines() if line.strip() and not ROW_NOTE.match(line)]

    assert shape(drawn.stdout) == shape(plain.stdout)
