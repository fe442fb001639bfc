"""``load --reference`` with ``--workers 2``: the references travel to each load process, each process's
checkers score its answers, and the parent's rows count every scored answer (sim service, on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_load_processes_score_every_reference_answer(tmp_path: Path) -> None:
    from diffbench.cli.main import main
    from diffbench.engines.config import EngineConfig, SimParams
    from diffbench.load.client import read_jsonl
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    sim = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, launch_s=0.001)
    cfg = ServerConfig(engine=EngineConfig(engine="sim", sim=sim))
    refs, out, jl = tmp_path / "refs", tmp_path / "load.json", tmp_path / "r.jsonl"
    with run_in_background(cfg) as url:
        assert main(["probe", "--url", url, "--record-reference", str(refs), "--once", "--size", "32x32",
                     "--steps", "2", "--seed", "4"]) == 0
        assert main(["load", "--url", url, "--reference", str(refs), "--quality-sample", "0.5", "--workers", "2",
                     "--rates", "8", "--duration", "2", "--arrival", "constant", "--size", "32x32", "--steps", "2",
                     "--warmup", "1", "--timeout", "30", "--json", str(out), "--jsonl", str(jl), "--quiet"]) == 0
    (row,) = json.loads(out.read_text())["rates"]
    recs = read_jsonl(jl)
    replayed = [r for r in recs if r.reference is not None]
    assert len(recs) == row["n"] == 16 and len(replayed) == 8  # floor(16 x 0.5), in both processes
    assert row["quality"]["n_reference"] == 8
    assert row["quality"]["n_scored"] == sum(r.outcome == "ok" and r.psnr_db is not None for r in replayed) == 8
    assert row["quality"]["psnr_worst_db"] == 200.0  # the sim answers a seed identically
