"""``plan --max-batch``: batch limits tried one by one, the one with the most throughput per GPU under the p99
SLO with queueing chosen; held against a published batched serving result.

The published scenario: MLPerf Inference v4.0, closed division, NVIDIA DGX-H100 with one H100-SXM-80GB
(TensorRT), Stable Diffusion XL 1024×1024, 20 steps, guidance 8
(https://mlcommons.org/2024/08/sdxl-mlperf-text-to-image-generation-benchmark/), Server scenario with a
20 s p99 latency constraint: 1.58 samples/s (p99 18.97 s), Offline: 1.64 samples/s — the result summaries
https://github.com/mlcommons/inference_results_v4.0/blob/main/closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx1_TRT/stable-diffusion-xl/Server/performance/run_1/mlperf_log_summary.txt
and .../Offline/performance/run_1/mlperf_log_summary.txt ("Scheduled samples per second", "Samples per
second"). NVIDIA's submission config for that system (closed/NVIDIA/configs/stable-diffusion-xl/Server/
__init__.py, H100_SXM_80GBx1) serves batches of 8 with an INT8 UNet and a 3 s batcher time limit.
"""

from __future__ import annotations

import json
import math

import pytest

from diffbench.cli.main import main
from diffbench.ledger import LedgerConfig, evaluate, load_catalog
from diffbench.plan import PlanConfig, plan

CAT = load_catalog()
MLPERF_SERVER_QPS = 1.58   # samples/s per H100 under the 20 s p99 constraint
MLPERF_OFFLINE_QPS = 1.64  # samples/s per H100, batch 8, no latency constraint


@pytest.mark.slow
def test_mlperf_sdxl_server_on_one_h100_within_25_percent():
    cfg = PlanConfig(model="sdxl-base", width=1024, height=1024, steps=20, cfg=8.0, gpu="h100-sxm",
                     gpus_per_node=1, slo_p99_s=20.0, qps=MLPERF_SERVER_QPS, headroom=1.0, max_batch=8)
    r = plan(CAT, cfg)
    bp = r.batching
    assert bp is not None and len(bp.rows) == 8 and all(row.fits for row in bp.rows)
    # the ledger's batch times, recomputed for the plan's one-GPU configuration (compiled, fastest lossless
    # attention, bf16: the catalog has no INT8 UNet option)
    lc = LedgerConfig(model="sdxl-base", width=1024, height=1024, steps=20, cfg=8.0, gpu="h100-sxm",
                      attention="fa3", compile=True)
    for row in bp.rows:
        assert row.batch_s == pytest.approx(evaluate(CAT, lc.model_copy(update={"batch": row.batch})).total_time_s,
                                            rel=1e-12)
    offline = max(row.saturation_per_gpu for row in bp.rows)
    assert offline == pytest.approx(MLPERF_OFFLINE_QPS, rel=0.25)
    assert bp.max_qps_per_gpu == pytest.approx(MLPERF_SERVER_QPS, rel=0.25)
    assert bp.max_qps_per_gpu < offline  # the SLO costs throughput: below back-to-back full batches


def test_batching_chosen_where_it_saves_gpus():
    """SDXL at 256² reads its weights slower than it multiplies them: batches of 2 run almost as fast as 1."""
    cfg = PlanConfig(model="sdxl-base", width=256, height=256, steps=30, gpu="h100-sxm", slo_p99_s=2.0,
                     qps=200.0, max_batch=4)
    r = plan(CAT, cfg)
    bp = r.batching
    assert bp is not None and bp.chosen_batch > 1
    rows = {row.batch: row for row in bp.rows}
    # every row here is set by the formula with headroom: ⌈QPS × S(b)/b × 1.3⌉ from the ledger's batch time
    for b, row in rows.items():
        assert row.total_gpus == max(1, math.ceil(200.0 * row.batch_s / b * 1.3 - 1e-9))
        assert row.saturation_per_gpu == pytest.approx(b / row.batch_s, rel=1e-12)
    best = min((row.total_gpus, b) for b, row in rows.items() if row.meets_slo)
    assert (r.total_gpus, bp.chosen_batch) == best
    assert r.total_gpus < rows[1].total_gpus
    step = next(s for s in r.steps if s.name == "batching")
    assert step.applied and f"batches of up to {bp.chosen_batch}" in step.reason
    assert step.command.endswith(f"--batch {bp.chosen_batch}")
    assert r.sizing is not None and r.sizing.total_gpus == r.total_gpus


def test_default_plans_without_batching():
    cfg = PlanConfig(model="sdxl-base", width=256, height=256, steps=30, gpu="h100-sxm", slo_p99_s=2.0, qps=20.0)
    r = plan(CAT, cfg)
    assert r.batching is None and all(s.name != "batching" for s in r.steps)


def test_cli_max_batch(tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = ["plan", "--model", "sdxl-base", "--size", "256x256", "--gpu", "h100-sxm", "--steps", "30",
            "--slo-p99", "2", "--qps", "50"]
    assert main([*argv, "--max-batch", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "batch limits (up to 2)" in text and "greedy batching" in text
    data = json.loads(out.read_text())
    assert data["config"]["max_batch"] == 2 and [row["batch"] for row in data["batching"]["rows"]] == [1, 2]
    assert main([*argv, "--max-batch", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --max-batch")
