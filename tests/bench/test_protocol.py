"""Properties of the measurement protocol, checked on the simulated device (not fixed numbers)."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.bench.protocol import BenchConfig, run_bench
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine

REQ = GenerationRequest(prompt="a", height=1024, width=1024, steps=28)


def _run(cfg: BenchConfig, reqs=(REQ,), **sim):
    e = create_engine(EngineConfig(engine="sim", sim=SimParams(**sim)))
    e.start()
    return run_bench(e, list(reqs), cfg), e


def test_without_sync_times_the_launch_and_is_flagged() -> None:
    (synced,), e = _run(BenchConfig(warmup=1, runs=20))
    (unsynced,), _ = _run(BenchConfig(warmup=1, runs=20, sync=False))
    real = synced.latency_s.p50
    # unsynchronized timing sees launch-scale times (milliseconds), not the work (~1 s)
    assert unsynced.latency_s.p50 < 0.01 * real
    assert unsynced.latency_s.p50 == pytest.approx(e.p.launch_s, rel=0.5)
    assert any(w.code == "unsynchronized" for w in unsynced.warnings)
    assert not any(w.code == "unsynchronized" for w in synced.warnings)


def test_zero_warmup_inflates_mean_and_p99_with_compile() -> None:
    compile_s = 5.0
    (cold,), _ = _run(BenchConfig(warmup=0, runs=10), compile_s=compile_s, tail_prob=0)
    (warm,), _ = _run(BenchConfig(warmup=2, runs=10), compile_s=compile_s, tail_prob=0)
    base = warm.latency_s.p50
    # the compile lands in the statistics: mean rises by about compile_s / n, p99 is dominated by it
    assert cold.latency_s.mean - warm.latency_s.mean == pytest.approx(compile_s / 10, rel=0.1)
    assert cold.latency_s.p99 > base + 0.8 * compile_s
    assert warm.latency_s.p99 < base * 1.2
    assert len(warm.warmup_s) == 2 and warm.warmup_s[0] > compile_s  # warmup reported apart
    codes_cold = {w.code for w in cold.warnings}
    codes_warm = {w.code for w in warm.warnings}
    assert {"no_warmup", "first_run_outlier"} <= codes_cold
    assert not {"no_warmup", "first_run_outlier"} & codes_warm


@pytest.mark.slow
def test_p99_of_10_runs_misses_a_10_percent_tail_that_100_runs_catch() -> None:
    tail_prob, tail_s = 0.10, 2.0
    caught = {10: 0, 100: 0}
    trials = 40
    for seed in range(trials):
        for n in caught:
            (r,), _ = _run(
                BenchConfig(warmup=1, runs=n, repro=False), tail_prob=tail_prob, tail_s=tail_s, seed=seed
            )
            if r.latency_s.p99 > r.latency_s.p50 + tail_s / 2:
                caught[n] += 1
    # closed form: the 10-run p99 sits near the maximum, so it shows the tail iff >= 1 tail event
    expected_10 = 1 - (1 - tail_prob) ** 10
    assert caught[10] / trials == pytest.approx(expected_10, abs=0.2)
    assert caught[100] / trials >= 0.95


def test_every_shape_is_warmed_up_and_failures_are_recorded() -> None:
    small = REQ.model_copy(update={"height": 512, "width": 512})
    big = REQ.model_copy(update={"height": 2048, "width": 2048})
    results, _ = _run(BenchConfig(warmup=1, runs=5), reqs=(small, big, REQ), fail_above_pixels=1024 * 1024)
    assert [r.shape for r in results] == [small.shape_label(), big.shape_label(), REQ.shape_label()]
    assert results[1].error and "out of memory" in results[1].error
    for ok in (results[0], results[2]):
        assert ok.error is None and ok.latency_s.n == 5
        assert ok.warmup_s[0] > 4.0  # each shape's first call (compile) was in its warmup
        assert ok.latency_s.max < 2.0


def test_reproducibility_flag() -> None:
    (r,), _ = _run(BenchConfig(warmup=0, runs=3), nondeterminism=20.0)
    assert r.repro.reproducible is False and r.repro.psnr_db < 40
    assert any(w.code == "not_reproducible" for w in r.warnings)
    (ok,), _ = _run(BenchConfig(warmup=0, runs=3))
    assert ok.repro.reproducible is True and np.isinf(ok.repro.psnr_db)


def test_work_and_cost_follow_the_outputs_per_second() -> None:
    cfg = BenchConfig(warmup=1, runs=5, repro=False, gpus=2, gpu_hour_price=3.6)
    video = GenerationRequest(prompt="a", height=128, width=96, frames=9, steps=6, batch=1)
    batch = GenerationRequest(prompt="a", height=256, width=512, steps=4, batch=3)
    for req in (video, batch):
        (r,), _ = _run(cfg, reqs=(req,), tail_prob=0)
        per_s = req.batch / float(np.mean(r.samples_s))  # outputs per second, from the timed samples
        work = req.width * req.height * (req.frames or 1) * req.steps / 1e6
        assert r.mpx_steps_per_s == pytest.approx(per_s * work, rel=1e-9)
        assert r.mpx_steps_per_s_per_gpu == pytest.approx(per_s * work / 2, rel=1e-9)
        assert r.gpu_s_per_output == pytest.approx(2 / per_s, rel=1e-9)
        assert r.cost_per_1000 == pytest.approx(3.6 * (2 / per_s) * 1000 / 3600, rel=1e-9)
    (plain,), _ = _run(BenchConfig(warmup=1, runs=3, repro=False))
    assert plain.mpx_steps_per_s is not None and plain.cost_per_1000 is None and plain.gpus is None
