"""``diffbench load --abandon-after S --abandon-fraction F`` against ``diffbench serve --engine sim``.

One user sends requests back to back; the chosen share gives up S seconds after the send (images: the
connection is closed; videos: the job is DELETEd). Checked, per row, against independent counts:

- the abandoned requests are those the golden-ratio rule picks (recomputed from the records; the warm-up
  request is never abandoned), their own outcome, out of ok/s and out of the failed fraction;
- the server cancelled each of them while it ran (its cancel counter and 499 outcomes match the count) and
  released the worker within one measured denoising step (+ a stated slack of two steps);
- the GPU·s the server spent on them equal their time on the device as the client saw it: from the send to
  the give-up, plus the server's release time, per request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from diffbench.cli.main import main
from diffbench.engines.registry import EngineConfig, SimParams
from diffbench.load.client.http import GOLDEN
from diffbench.server.background import run_in_background
from diffbench.server.config import ServerConfig

pytestmark = pytest.mark.e2e

# 64x64: the sim's step is step_s x 0.05 (its floor) = 50 ms; 20 steps = 1 s for a request that is not abandoned
SIM = {"realtime": True, "compile_s": 0.0, "jitter": 0.0, "tail_prob": 0.0, "step_s": 1.0,
       "text_encode_s": 0.002, "vae_decode_s": 0.002, "other_s": 0.001, "launch_s": 0.0}
STEPS, AFTER, FRACTION, SLACK_STEPS = 20, 0.3, 0.5, 2


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    cfg = ServerConfig(engine=EngineConfig(engine="sim", sim=SimParams(**SIM)))  # type: ignore[arg-type]
    with run_in_background(cfg, mode="thread") as url:
        yield url


@pytest.mark.parametrize("kind", ["image", "video"])
def test_abandoned_requests_are_cancelled_by_the_server_and_their_gpu_seconds_counted(kind, sim_url, tmp_path,
                                                                                     capsys):
    out, records, csv = tmp_path / "r.json", tmp_path / "r.jsonl", tmp_path / "r.csv"
    argv = ["load", "--url", sim_url, "--scrape", sim_url, "--mode", "closed", "--users", "1", "--duration", "5",
            "--warmup", "1", "--size", "64x64", "--steps", str(STEPS), "--quiet", "--json", str(out), "--csv",
            str(csv), "--jsonl", str(records), "--abandon-after", str(AFTER), "--abandon-fraction", str(FRACTION)]
    if kind == "video":
        argv += ["--frames", "1", "--poll-interval", "0.05"]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    recs = sorted((json.loads(line) for line in records.read_text().splitlines()), key=lambda r: r["sent_s"])
    (row,) = doc["rates"]
    picked = [(k * GOLDEN) % 1.0 < FRACTION for k in range(len(recs))]
    abandoned = [r for r in recs if r["outcome"] == "abandoned"]
    # the rule's picks were abandoned (a picked request that finished within S would be ok: none here)
    assert [r["outcome"] == "abandoned" for r in recs] == picked
    assert len(abandoned) >= 2 and row["outcomes"]["abandoned"] == len(abandoned)
    assert row["n_ok"] == row["outcomes"]["ok"] == len(recs) - len(abandoned)
    assert row["failed_fraction"] == 0.0 == doc["failed_fraction"]  # given up on purpose: not a failure
    for r in abandoned:
        assert r["done_s"] - r["sent_s"] == pytest.approx(AFTER, abs=0.1)
    sv = row["server"]
    assert sv["cancelled_running"] == len(abandoned) and sv["outcomes"]["cancelled"] == len(abandoned)
    step = sv["stages_mean_s"]["denoise"] / STEPS  # the server's measured step (ok requests)
    assert sv["cancel_release_mean_s"] <= (1 + SLACK_STEPS) * step
    # GPU·s on abandoned requests = their time on the device: send -> give-up (the server started each at
    # once: one user, nothing queued) plus the release, within a step of slack each for the HTTP hops
    client_side = sum(r["done_s"] - r["sent_s"] for r in abandoned) + len(abandoned) * sv["cancel_release_mean_s"]
    assert sv["cancelled_s"] == pytest.approx(client_side, abs=len(abandoned) * step)
    assert sv["cancelled_s"] < len(abandoned) * STEPS * step / 2  # far less than running them to the end
    assert "abandoned requests" in capsys.readouterr().out
    header, line = csv.read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), line.split(","), strict=True))
    cols = header.split(",")
    start = cols.index("outcome_abandoned")  # the abandon block, after every column that came before it
    assert cols[start:start + 4] == ["outcome_abandoned", "server_cancelled_running",
                                     "server_cancel_release_mean_s", "server_cancelled_s"]
    assert cols.index("slo_attainment") < start
    assert int(cells["outcome_abandoned"]) == len(abandoned) and float(cells["server_cancelled_s"]) == sv["cancelled_s"]
