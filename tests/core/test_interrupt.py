"""SIGTERM is handled like the first Ctrl-C by every long-running command (diffbench.core.interrupt).

Reproduction (issue 24, item 6): ``timeout``, ``docker stop``, CI cancellation and Kubernetes send SIGTERM;
``sweep`` then died with exit 143, no output, no partial JSON and its sweep and points ``running`` in the
store forever, and ``quality`` died silently. Each command runs here in a subprocess; the signal is sent
once its progress line (or streamed file) shows the run has started, never after a fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

# `diffbench sweep` with the simulated engine (realtime) instead of a pipeline: argv as the CLI's
SIM_SWEEP = """
import sys
import diffbench.sweep.runner as runner
from diffbench.engines.config import SimParams
from diffbench.engines.registry import create_engine

_orig = runner.run_sweep

def _run(opts, store, **kw):
    def factory(cfg):
        return create_engine(cfg.model_copy(update={"engine": "sim", "sim": SimParams(
            realtime=True, compile_s=0.0, step_s=0.02, vae_decode_s=0.01, tail_prob=0.0)}))
    return _orig(opts, store, engine_factory=factory, **kw)

runner.run_sweep = _run
from diffbench.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


class Proc:
    """A diffbench subprocess whose stderr is collected by a thread (so the test can wait on its content)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                  env={**os.environ, "DIFFBENCH_PROGRESS": "always", "COLUMNS": "200",
                                       **(env or {})})
        self.err = b""
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        while chunk := self.p.stderr.read1(4096):  # type: ignore[attr-defined]
            with self.changed:
                self.err += chunk
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, ready: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not ready():
                left = deadline - time.monotonic()
                assert self.p.poll() is None, f"ended before {what}: {self.err.decode(errors='replace')}"
                assert left > 0, f"no {what} within {timeout_s:g} s: {self.err.decode(errors='replace')}"
                self.changed.wait(min(left, 0.2))

    def term(self, timeout_s: float = 120.0) -> tuple[int, str, str]:
        self.p.send_signal(signal.SIGTERM)
        assert self.p.stdout is not None
        out = self.p.stdout.read()  # stderr is the reader thread's (communicate() would race it)
        rc = self.p.wait(timeout_s)
        self.reader.join(timeout_s)
        return rc, out.decode(errors="replace"), self.err.decode(errors="replace")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "diffbench.cli.main", *args]


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err, err


@pytest.mark.e2e
def test_sweep_sigterm_writes_partial_json_and_stores_interrupted(tmp_path: Path) -> None:
    from diffbench.store.runs import RunStore

    store, out = tmp_path / "s.sqlite", tmp_path / "c.json"
    proc = Proc([sys.executable, "-c", SIM_SWEEP, "sweep", "--option", "precision", "--values", "bfloat16,float16",
                 "--height", "64", "--width", "64", "--steps", "4", "--num-prompts", "2", "--runs", "400",
                 "--warmup", "0", "--store", str(store), "--json", str(out)])
    proc.wait_for(lambda: b"timed run" in proc.err, "timed run on the progress line")
    rc, _, err = proc.term()
    assert rc == 143, err
    _no_traceback(err)
    assert "SIGTERM" in err and "interrupted" in err and "rerun the same command to resume" in err
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted"] is True
    with RunStore.open(store) as st:
        sweep = st.get_sweep(doc["sweep_id"])
        runs = st.list_runs()
    assert sweep is not None and sweep.status == "interrupted"
    assert runs and not [r.id for r in runs if r.status == "running"]
    # the runs SIGTERM stopped are stored interrupted, like their sweep (was: 'failed')
    assert not [r.id for r in runs if r.status == "failed"]
    assert any(r.status == "interrupted" and r.status_note == "stopped by SIGTERM" for r in runs)


@pytest.mark.e2e
def test_bench_sigterm_writes_partial_json(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    proc = Proc(_cli("bench", "--engine", "sim", "--sim-realtime", "--sim-compile-s", "0", "--sim-step-s", "0.01",
                     "--warmup", "1", "--runs", "500", "--json", str(out)))
    proc.wait_for(lambda: out.exists() and bool(json.loads(out.read_text())["shapes"][0]["samples_s"]),
                  "a timed run in --json")
    rc, _, err = proc.term()
    assert rc == 143, err
    _no_traceback(err)
    assert "SIGTERM" in err and "interrupted" in err
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted"] is True
    assert 1 <= len(doc["shapes"][0]["samples_s"]) < 500


@pytest.mark.e2e
def test_simulate_sigterm_writes_the_finished_rows(tmp_path: Path) -> None:
    out, jl = tmp_path / "s.json", tmp_path / "s.jsonl"
    rates = ",".join(["0.9"] * 40)  # 40 rows of ~180,000 requests each: far longer than the test waits
    proc = Proc(_cli("simulate", "--service", "exp(1.0)", "--rates", rates, "--duration", "200000", "--json",
                     str(out), "--jsonl", str(jl)))
    proc.wait_for(lambda: b"rate 2/40" in proc.err, "the second row on the progress line")
    rc, stdout, err = proc.term()
    assert rc == 143, err
    _no_traceback(err)
    assert "SIGTERM" in err and "interrupted" in err
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted"] is True
    assert 1 <= len(doc["rates"]) < 40
    n_lines = sum(1 for _ in jl.open())
    assert n_lines == sum(r["n"] for r in doc["rates"])  # the JSONL holds exactly the finished rows


@pytest.mark.e2e
def test_quality_sigterm_exits_143_with_a_message(tmp_path: Path) -> None:
    from PIL import Image

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    rng = np.random.default_rng(0)
    for i in range(200):
        img = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
        Image.fromarray(img).save(a / f"{i:04d}.png", compress_level=0)
        Image.fromarray(255 - img).save(b / f"{i:04d}.png", compress_level=0)
    out = tmp_path / "q.json"
    proc = Proc(_cli("quality", str(a), str(b), "--json", str(out), "--workers", "1"))
    proc.wait_for(lambda: b"pairs/s" in proc.err, "pairs scored on the progress line")
    rc, _, err = proc.term()
    assert rc == 143, err
    _no_traceback(err)
    assert "SIGTERM" in err and "interrupted" in err
    assert not out.exists()  # quality keeps no partial report (and says so)


def test_exit_code_and_name_follow_the_first_interrupt() -> None:
    from diffbench.core import interrupt

    interrupt.reset()
    assert (interrupt.exit_code(), interrupt.interrupt_name()) == (130, "Ctrl-C")
    interrupt.note("SIGTERM")
    assert (interrupt.exit_code(), interrupt.interrupt_name()) == (143, "SIGTERM")
    interrupt.reset()
