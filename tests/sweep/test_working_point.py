"""Gates per point and the working point on hand-made points (values computed by hand)."""

from __future__ import annotations

import math

import numpy as np

from diffbench.bench.result import Conditions
from diffbench.core.stats import summarize
from diffbench.store.models import MetricStats, RunQuality
from diffbench.sweep.bootstrap import SpeedupCI, speedup_ci
from diffbench.sweep.models import PointResult
from diffbench.sweep.working_point import choose, default_gates, gate_rows, speed_verdict

COND = Conditions(model="m", model_hash=None, pipeline="FluxPipeline", shape="64x64 s8 b1", steps=8, cfg="none",
                  guidance=None, batch=1, engine="diffusers", engine_version="x", attention_backend="default",
                  parallelism="none", precision="float32", cache="none", compile=False, device="cpu", hardware="cpu",
                  driver=None, cuda=None)


def _q(p10: float, worst: float) -> RunQuality:
    s = MetricStats(n=10, n_inf=0, mean=p10 + 2, p10=p10, p50=p10 + 2, p90=p10 + 4, min=worst, max=p10 + 5,
                    worst=worst)
    return RunQuality(against_run="b", psnr=s)


FLOOR = SpeedupCI(speedup=1.0, low=0.97, high=1.03, confidence=0.95, resamples=2000, n_baseline=8, n_candidate=8)


def _ci(sp: float, lo: float, hi: float) -> SpeedupCI:
    return SpeedupCI(speedup=sp, low=lo, high=hi, confidence=0.95, resamples=2000, n_baseline=16, n_candidate=16)


def _point(value: str, cand_s: float, p10: float, worst: float, gates: list[str], ci: SpeedupCI | None = None,
           floor: SpeedupCI | None = FLOOR, skipped: float | None = None) -> PointResult:
    base = [0.1, 0.1, 0.1]
    sp = ci or speedup_ci(base, [cand_s] * 3)
    q = _q(p10, worst)
    rows = gate_rows(q, gates, None)
    return PointResult(value=value, run_id=value, conditions=COND, latency_s=summarize([cand_s] * 3, check=()),
                       speedup=sp.speedup, speedup_ci=(sp.low, sp.high), speedup_detail=sp, noise_floor=floor,
                       quality=q, skipped_steps=skipped, gates=rows, passed=all(r.gate.passed for r in rows))


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


def test_a_slower_value_is_never_the_working_point():
    """Regression: choose() picked a 0.235x value because it was the fastest passing one."""
    g = default_gates(30)
    pts = [_point("0.05", 0.1 / 0.235, 45, 44, g, ci=_ci(0.235, 0.21, 0.26)),
           _point("0.1", 0.1 / 0.9, 40, 39, g, ci=_ci(0.9, 0.85, 0.95))]
    wp = choose(pts, g)
    assert wp.value is None and wp.speedup is None
    assert "no value is measurably faster" in wp.message and "0.1" in wp.message


def test_ci_including_one_or_overlapping_the_floor_is_not_faster():
    g = default_gates(30)
    includes_one = _point("a", 0.09, 45, 44, g, ci=_ci(1.10, 0.99, 1.22))
    overlaps_floor = _point("b", 0.09, 45, 44, g, ci=_ci(1.08, 1.02, 1.14))  # low 1.02 <= floor high 1.03
    skipped_nothing = _point("c", 0.05, 45, 44, g, ci=_ci(2.0, 1.8, 2.2), skipped=0.0)
    assert choose([includes_one, overlaps_floor, skipped_nothing], g).value is None
    assert "includes 1" in speed_verdict(includes_one.speedup_detail, FLOOR, None)[1]
    assert "noise floor" in speed_verdict(overlaps_floor.speedup_detail, FLOOR, None)[1]
    assert "skipped 0 %" in speed_verdict(skipped_nothing.speedup_detail, FLOOR, 0.0)[1]
    clear = _point("d", 0.08, 45, 44, g, ci=_ci(1.25, 1.15, 1.33), skipped=0.4)
    wp = choose([includes_one, overlaps_floor, skipped_nothing, clear], g)
    assert wp.value == "d" and wp.speedup == 1.25
    assert speed_verdict(_ci(0.8, 0.75, 0.85), FLOOR, None) == (False, "measurably slower: the 95 % CI "
                                                                      "(0.750-0.850) lies below 1")


def test_choose_never_picks_speedup_below_one_or_ci_low_at_most_one():
    rng = np.random.default_rng(3)
    g = default_gates(30)
    for _ in range(200):
        pts = []
        for i in range(4):
            sp = float(rng.uniform(0.2, 2.0))
            lo, hi = sp * float(rng.uniform(0.7, 1.0)), sp * float(rng.uniform(1.0, 1.3))
            floor = SpeedupCI(speedup=1.0, low=1 - float(rng.uniform(0, 0.2)), high=1 + float(rng.uniform(0, 0.2)),
                              confidence=0.95, resamples=2000, n_baseline=8, n_candidate=8)
            pts.append(_point(str(i), 0.1 / sp, float(rng.uniform(20, 50)), 40, g, ci=_ci(sp, lo, hi), floor=floor,
                              skipped=float(rng.choice([0.0, 0.5]))))
        wp = choose(pts, g)
        if wp.value is not None:
            p = next(p for p in pts if p.value == wp.value)
            assert p.speedup > 1 and p.speedup_ci[0] > 1 and p.speedup_ci[0] > p.noise_floor.high  # type: ignore[union-attr]
            assert p.passed and p.skipped_steps != 0.0


def _scipy_floor(samples: list[float]) -> tuple[float, float]:
    """The even-vs-odd floor's 95 % percentile-bootstrap CI, by scipy (paired by block, ratio of medians)."""
    from scipy.stats import bootstrap

    even, odd = np.asarray(samples[0::2]), np.asarray(samples[1::2])
    res = bootstrap((even, odd), lambda e, o, axis=-1: np.median(e, axis=axis) / np.median(o, axis=axis),
                    paired=True, vectorized=True, method="percentile", n_resamples=4000,
                    random_state=np.random.default_rng(7))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def test_a_noise_floor_too_wide_to_tell_2x_gets_a_note() -> None:
    """Issue 24 item 9: a timing noise floor like 0.22x (CI 0.04-4.9) got no comment. Samples: lognormal
    blocks with sigma 1.5 (noisy) and 0.01 (quiet); scipy's bootstrap decides independently which side of
    the rule (CI reaches 0.5x or 2x) each is on, far from the boundary."""
    from diffbench.sweep.interleave import noise_floor_ci
    from diffbench.sweep.working_point import noise_floor_note

    rng = np.random.default_rng(3)
    noisy = list(np.exp(rng.normal(0.0, 1.5, 20)))
    quiet = list(np.exp(rng.normal(0.0, 0.01, 20)))
    lo, hi = _scipy_floor(noisy)
    assert lo < 0.4 or hi > 2.5  # clearly too wide by the reference
    note = noise_floor_note(noise_floor_ci(noisy))
    assert note is not None and "run more" in note and "2× change" in note
    lo, hi = _scipy_floor(quiet)
    assert lo > 0.9 and hi < 1.1  # clearly narrow by the reference
    assert noise_floor_note(noise_floor_ci(quiet)) is None
    assert noise_floor_note(None) is None
