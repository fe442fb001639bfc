"""Live progress of `diffbench bench`: the events, their text, and that the line never reaches stdout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffbench.bench.progress import RunEvent, fmt_latency, progress_text
from diffbench.bench.protocol import BenchConfig, run_bench
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine

A = GenerationRequest(prompt="a", height=64, width=64, steps=2)
B = GenerationRequest(prompt="a", height=128, width=128, steps=2)


def _engine(**sim):  # type: ignore[no-untyped-def]
    e = create_engine(EngineConfig(engine="sim", sim=SimParams(**sim)))
    e.start()
    return e


def test_events_count_the_runs_and_carry_the_running_median() -> None:
    seen: list[tuple[str, int, str, int, int | None, list[float], str]] = []

    def on_run(ev: RunEvent) -> None:
        seen.append((ev.shape, ev.shape_index, ev.phase, ev.done, ev.total, list(ev.samples_s), progress_text(ev)))

    shapes = run_bench(_engine(), [A, B], BenchConfig(warmup=2, runs=5), on_run=on_run)
    assert [(s, i, p, d, t) for s, i, p, d, t, _, _ in seen] == [
        (sh.shape, k, phase, d, total)
        for k, sh in enumerate(shapes)
        for phase, total in (("warmup", 2), ("timed", 5))
        for d in range(1, total + 1)
    ]
    for k, sh in enumerate(shapes):
        timed = [row for row in seen if row[1] == k and row[2] == "timed"]
        warm = [row for row in seen if row[1] == k and row[2] == "warmup"]
        # the running median is numpy's median of the timed samples so far; warmups never enter it
        for j, row in enumerate(timed, start=1):
            assert row[5] == sh.samples_s[:j]
            assert f"p50 {fmt_latency(float(np.median(sh.samples_s[:j])))} (n={j})" in row[6]
        assert all(row[5] == [] and "p50" not in row[6] and "not in the statistics" in row[6] for row in warm)
        assert f"shape {k + 1}/2 {sh.shape} · timed run 5/5" in timed[-1][6]
        assert f"p50 {fmt_latency(sh.latency_s.p50)} (n=5)" in timed[-1][6]
        assert f"last {fmt_latency(sh.warmup_s[0])}" in warm[0][6]


def test_the_callback_runs_outside_the_timed_region() -> None:
    """A callback that takes 100 s of (virtual) host time changes no sample: it never sits in a timed window."""
    quiet = run_bench(_engine(), [A], BenchConfig(warmup=1, runs=6))
    e = _engine()
    slow = run_bench(e, [A], BenchConfig(warmup=1, runs=6), on_run=lambda ev: e._host_advance(100.0))
    assert slow[0].samples_s == quiet[0].samples_s and slow[0].warmup_s == quiet[0].warmup_s
    assert max(slow[0].samples_s) < 100.0


def test_auto_warmup_text_states_the_cap() -> None:
    ev = RunEvent(shape="64x64 s2 b1", shape_index=0, shapes=1, phase="warmup", done=3, total=None,
                  last_s=1.5, max_total=20)
    assert progress_text(ev) == ("shape 1/1 64x64 s2 b1 · warmup run 3 (auto: until warm, max 20) · last 1.5 s "
                                 "(not in the statistics)")


def _cli(tmp_path: Path, progress: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DIFFBENCH_PROGRESS=progress, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "diffbench.cli.main", "bench", "--engine", "sim", "--steps", "2",
           "--warmup", "1", "--runs", "6", "--shapes", "64x64,128x128", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def _without_load_note(text: str) -> str:
    """The stdout minus the machine_busy paragraph (it quotes the load average, which moves between runs) and
    the cold-start line (it times the process's start on the wall clock)."""
    text = re.sub(r"^cold start \(not in stats\): .*$", "", text, flags=re.M)
    return re.sub(r"warning  the machine was busy.*?(?=^warning|\Z)", "", text, flags=re.S | re.M)


@pytest.mark.e2e
def test_progress_goes_to_stderr_and_stdout_is_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    drawn = _cli(tmp_path, "always", "--json", str(out))
    plain = _cli(tmp_path, "never")
    assert drawn.returncode == 0 and plain.returncode == 0, drawn.stderr + plain.stderr
    assert _without_load_note(drawn.stdout) == _without_load_note(plain.stdout)
    assert not re.search(r"timed run \d", drawn.stdout) and "\x1b" not in drawn.stdout
    r = json.loads(out.read_text())
    last = r["shapes"][-1]
    # the line drawn last is the last timed run of the last shape, with the result's own p50
    assert f"shape 2/2 {last['shape']} · timed run 6/6" in drawn.stderr
    assert f"p50 {fmt_latency(last['latency_s']['p50'])} (n=6)" in drawn.stderr
    assert not re.search(r"timed run \d", plain.stderr)


def _cli_on_a_terminal(*extra: str) -> str:
    """Run bench with stderr on a pseudo-terminal (DIFFBENCH_PROGRESS unset) and return what it drew there."""
    import pty
    import threading

    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    env = {k: v for k, v in os.environ.items() if k != "DIFFBENCH_PROGRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                         os.environ.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "diffbench.cli.main", "bench", "--engine", "sim", "--steps", "2",
           "--warmup", "1", "--runs", "6", *extra]
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120, check=False)
    finally:
        os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert res.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.e2e
@pytest.mark.parametrize("flag", ["--quiet", "-q"])
def test_quiet_turns_the_line_off_on_a_terminal(flag: str) -> None:
    assert "timed run 6/6" in _cli_on_a_terminal()
    assert not re.search(r"timed run \d", _cli_on_a_terminal(flag))
