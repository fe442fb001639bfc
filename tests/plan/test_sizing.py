"""Queueing-aware capacity. The count meeting the p99 SLO with queueing (M/G/c simulation) is
reported next to the planning formula ⌈QPS × latency × headroom⌉; the headline is the larger; layouts are
chosen on the p99 with queueing. Closed forms: Erlang C / the M/M/c response-time quantile."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from diffbench.ledger import load_catalog
from diffbench.plan import PlanConfig, plan
from diffbench.plan.sizing import service_for, size_layout
from diffbench.queueing.sizing import erlang_c, mmc_latency_quantile, size_pool


def _mmc_count(qps: float, mean: float, slo: float) -> int:
    c = int(qps * mean) + 1
    while mmc_latency_quantile(0.99, c, qps, mean) > slo:
        c += 1
    return c


@pytest.mark.parametrize(("qps", "mean", "slo"), [(5.0, 1.0, 6.0), (20.0, 0.5, 3.0), (2.0, 1.0, 5.5)])
def test_mmc_case_against_erlang_c(qps, mean, slo):
    """Exponential service (an exponential sample rescaled to the mean): the queue count is the closed form's."""
    ex = np.random.default_rng(1).exponential(1.0, 200_000)
    z = size_layout("x", qps, mean, 1, slo, 1.0, 8, samples=ex)
    c = _mmc_count(qps, mean, slo)
    assert z.queue_instances is not None and abs(z.queue_instances - c) <= 1
    # the tail at that count follows the Erlang C mixture: P(wait) = C(c, a), then Exp(cμ − λ)
    assert z.p99_s == pytest.approx(mmc_latency_quantile(0.99, z.queue_instances, qps, mean), rel=0.06)
    assert 0 < erlang_c(c, qps * mean) < 1


def test_near_the_slo_the_queue_needs_more_than_the_formula():
    """4.3 s of service against a 5 s p99 leaves no room to wait: the formula's count misses the SLO."""
    qps, mean, slo, headroom = 2.0, 4.3, 5.0, 1.3
    z = size_layout("x", qps, mean, 1, slo, headroom, 8)
    assert z.formula_instances == math.ceil(qps * mean * headroom)
    assert z.queue_instances is not None and z.queue_instances > z.formula_instances
    assert z.instances == z.queue_instances and z.meets_slo and z.p99_s <= slo
    svc, _ = service_for(mean, 0.05, None)
    at_formula = size_pool(qps, svc, slo, headroom).p99_at_formula_s
    assert at_formula > slo  # the formula's count alone would miss the p99


def test_far_below_the_slo_queue_and_formula_agree():
    qps, mean, slo = 20.0, 0.5, 5.0
    bare = size_layout("x", qps, mean, 1, slo, 1.0, 8)
    assert bare.queue_instances is not None
    assert abs(bare.queue_instances - math.ceil(qps * mean)) <= 1  # only stability binds
    z = size_layout("x", qps, mean, 1, slo, 1.3, 8)
    assert z.instances == z.formula_instances == math.ceil(qps * mean * 1.3)  # the headroom keeps its margin


def test_plan_headline_is_the_larger_count():
    cat = load_catalog()
    p = plan(cat, PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="h100-sxm",
                             slo_p99_s=2.3, qps=1.0, quality_budget_db=30.0))
    z = p.sizing
    assert z is not None and z.queue_instances is not None
    assert z.formula_instances == math.ceil(1.0 * p.latency_s * 1.3 - 1e-9)
    assert p.instances == max(z.formula_instances, z.queue_instances) and p.total_gpus == p.instances
    assert p.gpus_per_instance == 1
    assert z.queue_instances > z.formula_instances  # ≈1.9 s (p99 ≈2.1 s) against 2.3 s: the queue binds


def test_layout_meeting_bare_latency_but_not_queueing_is_not_chosen():
    """SLO 1.25 s: USP-2 serves in ≈1.19 s (under the SLO) but its p99 with queueing is over it; the fewest-GPU
    rule on bare latency would pick it, the queueing-aware rule takes USP-4."""
    cat = load_catalog()
    p = plan(cat, PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="h100-sxm",
                             slo_p99_s=1.25, qps=100, quality_budget_db=30.0))
    rows = {r.gpus_per_instance: r for r in p.layouts if r.strategy == "usp"}
    assert rows[2].latency_s <= 1.25 and not rows[2].meets_slo and rows[2].p99_s > 1.25
    assert p.parallel is not None and p.parallel.gpus == 4 and rows[4].chosen
    assert p.slo_met and p.sizing is not None and p.sizing.p99_s <= 1.25
    # GPUs of every row count the occupied time: ⌈QPS × latency × headroom⌉ × GPUs per instance at least
    for r in p.layouts:
        assert r.total_gpus >= math.ceil(100 * r.latency_s * 1.3 - 1e-9) * r.gpus_per_instance


def test_cfg_model_reports_cfg_times_ulysses_next_to_ulysses():
    cat = load_catalog()
    p = plan(cat, PlanConfig(model="wan2.1-14b", width=1280, height=720, gpu="h100-sxm", slo_p99_s=60,
                             qps=0.1, quality_budget_db=25.0))
    labels = {r.label.split(" (")[0]: r for r in p.layouts}
    for k in (2, 4):
        both = labels[f"CFG-2 × USP-{k}"], labels[f"USP-{2 * k}"]
        assert both[0].gpus_per_instance == both[1].gpus_per_instance == 2 * k
        for r in both:
            assert r.p99_s >= r.latency_s and r.total_gpus == r.instances * r.gpus_per_instance


def test_service_spread_from_a_bench_run(tmp_path):
    """A measured spread (CV 0.3) is rescaled to the plan's latency; its p99 sets the service p99."""
    rng = np.random.default_rng(3)
    samples = rng.lognormal(0.0, 0.3, 4000) * 7.0
    z = size_layout("x", 1.0, 2.0, 1, 10.0, 1.3, 8, samples=samples)
    scaled = samples * 2.0 / samples.mean()
    assert z.service_p99_s == pytest.approx(float(np.quantile(scaled, 0.99)), rel=0.05)
    assert "measured" in z.spread
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"kind": "diffbench.bench", "shapes": [{"samples_s": samples.tolist()}]}))
    from diffbench.plan.sizing import load_bench_samples

    assert load_bench_samples(bench).mean() == pytest.approx(samples.mean())


def test_multi_gpu_reason_counts_the_layouts_meeting_the_slo():
    cat = load_catalog()
    p = plan(cat, PlanConfig(model="wan2.1-14b", width=1280, height=720, gpu="h100-sxm", slo_p99_s=60,
                             qps=0.1, quality_budget_db=25.0))
    step = next(s for s in p.steps if s.name == "multi-GPU")
    rows = [r for r in p.layouts if r.strategy != "single"]
    assert f"{sum(r.meets_slo for r in rows)} of {len(rows)} layouts meeting the SLO" in step.reason


def test_a_doubtful_service_from_run_is_named(tmp_path, capsys):
    """Fresh-user trial: 8 latencies of a mixed-shape load run (CV 1.24) and a tiny-flux CPU bench were taken as
    the service spread of flux.1-dev on an H100 without a word, and the GPU count followed them."""
    from diffbench.cli.main import main

    few = tmp_path / "few.txt"
    few.write_text("\n".join(str(v) for v in (0.2, 0.3, 2.5, 0.25, 3.1, 0.2, 0.4, 2.9)) + "\n")
    base = ["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm",
            "--slo-p99", "3", "--qps", "10", "--quality-budget", "30"]
    assert main([*base, "--service-from", str(few), "--json", str(tmp_path / "p.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    warns = json.loads((tmp_path / "p.json").read_text())["warnings"]
    assert any("8 latencies" in w for w in warns) and any("coefficient of variation" in w for w in warns)
    assert "warning: --service-from: 8 latencies" in out
    tiny = tmp_path / "bench.json"
    tiny.write_text(json.dumps({"kind": "diffbench.bench", "conditions": {"model": "tiny-flux", "device": "cpu",
                                                                          "hardware": "x86_64"},
                                "shapes": [{"samples_s": [1.0 + 0.01 * i for i in range(40)]}]}))
    assert main([*base, "--service-from", str(tiny), "--json", str(tmp_path / "q.json")]) == 0
    warns = json.loads((tmp_path / "q.json").read_text())["warnings"]
    assert any("measured 'tiny-flux', not FLUX.1-dev" in w for w in warns)
    assert any("not on h100-sxm" in w for w in warns)
    assert not any("latencies:" in w or "coefficient" in w for w in warns)  # 40 runs, CV 0.01: the spread is fine


def test_a_model_that_fits_only_with_offload_gets_split_layouts_without_it():
    """Fresh-user trial: FLUX.1-dev on a 24 GB card fits one GPU only with group offload, and tensor parallel was
    never a candidate (the planner treated the offloaded request as fitting). The split layouts are costed on the
    request without offload: no transfer time, weights held across the instance's GPUs."""
    cat = load_catalog()
    p = plan(cat, PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="rtx-4090",
                             slo_p99_s=10, qps=1, quality_budget_db=30.0))
    assert next(s for s in p.steps if s.name == "memory").applied  # one 4090 holds it only with offload
    strategies = {r.strategy for r in p.layouts}
    assert "tp" in strategies and "pipefusion" in strategies
    assert p.parallel is not None and p.latency_s < 10
