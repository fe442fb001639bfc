"""Gates per point and the working point on hand-made points (values computed by hand)."""

from __future__ import annotations

import math

from diffbench.bench.result import Conditions
from diffbench.core.stats import summarize
from diffbench.store.models import MetricStats, RunQuality
from diffbench.sweep.bootstrap import speedup_ci
from diffbench.sweep.models import PointResult
from diffbench.sweep.working_point import choose, default_gates, gate_rows

COND = Conditions(model="m", model_hash=None, pipeline="FluxPipeline", shape="64x64 s8 b1", steps=8, cfg="none",
                  guidance=None, batch=1, engine="diffusers", engine_version="x", attention_backend="default",
                  parallelism="none", precision="float32", cache="none", compile=False, device="cpu", hardware="cpu",
                  driver=None, cuda=None)


def _q(p10: float, worst: float) -> RunQuality:
    s = MetricStats(n=10, n_inf=0, mean=p10 + 2, p10=p10, p50=p10 + 2, p90=p10 + 4, min=worst, max=p10 + 5,
                    worst=worst)
    return RunQuality(against_run="b", psnr=s)


def _point(value: str, cand_s: float, p10: float, worst: float, gates: list[str]) -> PointResult:
    base = [0.1, 0.1, 0.1]
    sp = speedup_ci(base, [cand_s] * 3)
    q = _q(p10, worst)
    rows = gate_rows(q, gates, None)
    return PointResult(value=value, run_id=value, conditions=COND, latency_s=summarize([cand_s] * 3, check=()),
                       speedup=sp.speedup, speedup_ci=(sp.low, sp.high), speedup_detail=sp, quality=q,
                       gates=rows, passed=all(r.gate.passed for r in rows))


def test_default_gates():
    assert default_gates(30) == ["psnr.p10>=30", "psnr.worst>=27"]


def test_fastest_passing_value_is_chosen():
    g = default_gates(30)
    pts = [_point("0.05", 0.09, 45, 44, g), _point("0.1", 0.08, 33, 28, g),   # passes: 1.25x
           _point("0.2", 0.05, 31, 26, g),   # worst 26 < 27: fails although faster (2x)
           _point("0.4", 0.04, 25, 20, g)]   # fails
    assert [p.passed for p in pts] == [True, True, False, False]
    wp = choose(pts, g)
    assert wp.value == "0.1"
    assert wp.speedup == 0.1 / 0.08


def test_nothing_meets_the_budget_is_stated():
    g = default_gates(60)
    pts = [_point("0.05", 0.09, 45, 44, g), _point("0.1", 0.08, 33, 28, g)]
    wp = choose(pts, g)
    assert wp.value is None and wp.speedup is None
    assert wp.message.startswith("no value meets the quality budget")
    assert "0.05" in wp.message  # the closest one is named


def test_noise_floor_beside_every_gate_and_custom_gates():
    g = ["psnr.p50>=40"]
    noise = _q(50, 49)
    rows = gate_rows(_q(37, 30), g, noise)
    assert rows[0].gate.value == 39 and not rows[0].gate.passed
    assert rows[0].noise_floor == 52
    inf_noise = RunQuality(against_run="b", psnr=MetricStats(n=2, n_inf=2, mean=None, p10=math.inf, p50=math.inf,
                                                             p90=math.inf, min=math.inf, max=math.inf,
                                                             worst=math.inf))
    assert math.isinf(gate_rows(_q(37, 30), g, inf_noise)[0].noise_floor)
