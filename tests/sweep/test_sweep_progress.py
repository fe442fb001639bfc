"""The sweep's live progress line: value i of k, run j of n and an ETA on stderr; stdout untouched."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diffbench.sweep.interleave import Tick
from diffbench.sweep.progress import SweepProgress

CLI = "import sys; from diffbench.cli.main import main; sys.exit(main(sys.argv[1:]))"
TINY = ["--model", "tiny-flux", "--height", "64", "--width", "64", "--steps", "2", "--num-prompts", "2",
        "--runs", "16", "--warmup", "0", "--stable-window", "4", "--max-warmup", "4", "--threads", "1"]


def _cli(args: list[str], progress: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DIFFBENCH_PROGRESS=progress, COLUMNS="160")  # PYTHONPATH kept: this worktree's code
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp)


def test_eta_is_the_linear_extrapolation_of_the_timed_runs() -> None:
    now = [0.0]
    lines: list[str] = []
    p = SweepProgress("first-block", lines.append, clock=lambda: now[0])
    now[0] = 5.0
    p.tick(Tick("warmup", "baseline", 1, 2, 1, 20))  # warmup: no ETA, the round and the cap
    assert "warmup round 1 (cap 20)" in lines[-1] and "ETA" not in lines[-1]
    # 3 blocks x 2 configurations = 6 timed runs; the first 2 took 4 s from the end of the warmup (t=5)
    now[0] = 7.0
    p.tick(Tick("timed", "0.1", 1, 2, 1, 3))
    now[0] = 9.0
    p.tick(Tick("timed", "baseline", 2, 2, 1, 3))
    assert "timed run 1/3" in lines[-1] and "value 2/2 (baseline)" in lines[-1]
    assert lines[-1].endswith("ETA 8.0s")  # 4 s for 2 runs -> 4 runs left take 8 s
    p.event("timed block 1/3")  # the session's per-block message: the run counter stays on the line
    assert p.text.endswith("ETA 8.0s") and len(lines) == 3


@pytest.mark.e2e
def test_progress_goes_to_stderr_and_stdout_is_the_plain_table(tmp_path: Path) -> None:
    store = str(tmp_path / "s.sqlite")
    run = _cli(["sweep", "--cache", "first-block", "--values", "1000000", "--store", store, *TINY], "always",
               tmp_path)
    assert run.returncode == 0, run.stderr
    # the line: value i of k (2 configurations: the baseline and the value), run j of n (16 timed blocks),
    # ETA; rich redraws it 4 times a second, so which runs are drawn depends on their speed (32 timed runs
    # take well over a second here)
    drawn = re.findall(r"timed run (\d+)/16 · value ([12])/2 \((?:baseline|1000000)\) · ETA \d", run.stderr)
    assert drawn, run.stderr[-2000:]
    # stdout is exactly what the sweep prints without a progress line: the stored result re-rendered
    # (`runs show`, which draws no progress) plus the sweep's two closing lines
    sweep_id = re.search(r"^sweep (\w+) ", run.stdout).group(1)  # type: ignore[union-attr]
    shown = _cli(["runs", "show", sweep_id, "--store", store], "never", tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert run.stdout == shown.stdout + (f"stored in {store} as sweep {sweep_id}; see `diffbench runs show "
                                         f"{sweep_id}`\n")
    assert "\x1b" not in run.stdout and "ETA" not in run.stdout

