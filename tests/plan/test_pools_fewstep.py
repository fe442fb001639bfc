"""Shape pools (``--workload``) and the few-step swap that re-does ② and ③ without the step cache
or PipeFusion."""

from __future__ import annotations

import math

import pytest

from diffbench.ledger import load_catalog
from diffbench.ledger.account import LedgerConfig, evaluate
from diffbench.plan import PlanConfig, combine_psnr, plan
from diffbench.plan.pools import plan_pools


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _cfg(**kw):
    base = {"model": "flux.1-dev", "width": 1024, "height": 1024, "steps": 28, "gpu": "h100-sxm",
            "slo_p99_s": 3.0, "qps": 100, "quality_budget_db": 30.0}
    return PlanConfig(**{**base, **kw})


def _shapes(path):
    """The workload's shapes as the CLI hands them to the planner (plan/ does not import the load tester)."""
    from diffbench.load.client.workload import load_workload

    return [(s.width, s.height, s.steps, s.frames, s.weight) for s in load_workload(path).shapes]


def test_pools_sum_to_the_total(cat, tmp_path):
    wl = tmp_path / "mix.yaml"
    wl.write_text("kind: image\nshapes:\n"
                  "  - {width: 1024, height: 1024, steps: 28, weight: 6}\n"
                  "  - {size: 512x512, steps: 28, weight: 3}\n"
                  "  - {width: 1024, height: 1024, steps: 28, weight: 2}\n"   # same class as the first
                  "  - {size: 768x1344, steps: 20, weight: 1}\n")
    p = plan_pools(cat, _cfg(), _shapes(wl), wl)
    pp = p.pool_plan
    assert pp is not None and len(pp.rows) == 3
    assert [r.weight_share for r in pp.rows] == pytest.approx([8 / 12, 3 / 12, 1 / 12])
    assert sum(r.qps for r in pp.rows) == pytest.approx(100)
    assert pp.total_gpus == sum(r.total_gpus for r in pp.rows)
    assert pp.nodes == math.ceil(pp.total_gpus / 8)
    for r in pp.rows:  # each pool is the plain plan at its shape and share of the rate
        alone = plan(cat, _cfg(width=r.width, height=r.height, steps=r.steps, qps=100 * r.weight_share))
        assert (r.total_gpus, r.latency_s) == (alone.total_gpus, pytest.approx(alone.latency_s))
    assert p.config.width == 1024 and p.total_gpus == pp.rows[0].total_gpus  # the main pool's details


def test_single_shape_workload_equals_the_plain_plan(cat, tmp_path):
    wl = tmp_path / "one.yaml"
    wl.write_text("shapes:\n  - {width: 1024, height: 1024, steps: 28}\n")
    p = plan_pools(cat, _cfg(), _shapes(wl), wl)
    plain = plan(cat, _cfg())
    assert p.pool_plan is not None and p.pool_plan.total_gpus == plain.total_gpus
    assert p.model_dump(exclude={"pool_plan"}) == plain.model_dump(exclude={"pool_plan"})


def test_few_step_swap_redoes_lossless_and_lossy_i_without_cache(cat):
    p = plan(cat, _cfg(slo_p99_s=0.4, allow_model_swap=True, gpus_per_node=1))
    step = next(s for s in p.steps if s.name == "few-step model")
    assert step.applied and "step cache and PipeFusion dropped" in step.reason
    fs = cat.models["flux.1-dev"].few_step
    # ② (fa3, compile) and ③ (fp8 + 8-bit attention fit 30 dB together) on the 8-step model, no cache
    expect = evaluate(cat, LedgerConfig(model="flux.1-dev", width=1024, height=1024, steps=fs.steps, cfg=1.0,
                                        gpu="h100-sxm", attention="sage8", compile=True, precision="fp8"))
    assert p.latency_s == pytest.approx(expect.total_time_s, rel=1e-9)
    with_cache = evaluate(cat, expect.config.model_copy(update={"cache_speedup": 1.55}))
    assert with_cache.total_time_s < p.latency_s  # the cache was dropped, not silently kept
    assert p.psnr_db == pytest.approx(combine_psnr([35.0, 40.0]))


def test_few_step_drops_pipefusion_on_pcie(cat):
    full = plan(cat, _cfg(gpu="l40s", slo_p99_s=2.0, qps=1))
    assert any(r.strategy == "pipefusion" for r in full.layouts)  # PCIe: PipeFusion is a candidate
    few = plan(cat, _cfg(gpu="l40s", slo_p99_s=0.5, qps=1, allow_model_swap=True))
    assert next(s for s in few.steps if s.name == "few-step model").applied
    assert few.layouts and not any(r.strategy == "pipefusion" for r in few.layouts)
    assert "PipeFusion" in next(s for s in few.steps if s.name == "few-step model").assumption
