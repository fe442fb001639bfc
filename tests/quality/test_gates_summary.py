"""Gates (parse, evaluate, presets) and +inf-aware summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diffbench.errors import UsageError
from diffbench.quality.gates import PRESETS, evaluate_gates, parse_gate, preset_gates
from diffbench.quality.summary import Sample, percentile_with_inf, summarize_metric


def _samples(vals: list[float]) -> list[Sample]:
    return [Sample(v, f"k{i}", f"a/{i}", f"b/{i}") for i, v in enumerate(vals)]


def test_percentile_matches_numpy_on_finite() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(30, 3, 37)
    for q in (10, 50, 90):
        assert percentile_with_inf(x, q) == pytest.approx(np.percentile(x, q))


def test_inf_sorts_last_and_no_nan() -> None:
    vals = [30.0, 35.0, math.inf, math.inf]
    # numpy's lerp would return NaN between two infs; ours stays +inf and finite below it
    assert percentile_with_inf(vals, 100) == math.inf
    assert percentile_with_inf(vals, 90) == math.inf
    assert percentile_with_inf(vals, 10) == pytest.approx(np.percentile([30, 35, 1e300, 1e300], 10))
    s = summarize_metric("psnr", _samples(vals))
    assert s is not None and s.n == 4 and s.n_inf == 2 and s.mean == pytest.approx(32.5) and s.worst == 30.0
    with pytest.raises(ValueError):
        percentile_with_inf([1.0, math.nan], 50)


def test_lpips_direction() -> None:
    s = summarize_metric("lpips", _samples([0.1, 0.3, 0.2]), worst_n=2)
    assert s is not None and not s.higher_is_better and s.worst == 0.3
    assert [w.value for w in s.worst_pairs] == [0.3, 0.2]
    assert s.p90 == pytest.approx(np.percentile([0.1, 0.3, 0.2], 90))


def test_gates_margins_and_missing_metric() -> None:
    summ = {"psnr": summarize_metric("psnr", _samples([25.0, 31.0, 33.0, 40.0]))}
    lp = summarize_metric("lpips", _samples([0.05, 0.25]))
    summ["lpips"] = lp
    r = evaluate_gates(summ, ["psnr.p10>=20", "psnr.worst>=28", "lpips.max<=0.2", "ssim.min>=0.9", "psnr.n>3"])
    assert [g.passed for g in r] == [True, False, False, False, True]
    assert r[0].value == pytest.approx(np.percentile([25, 31, 33, 40], 10))
    assert r[1].margin == pytest.approx(-3.0) and "short by 3" in r[1].message
    assert r[2].margin == pytest.approx(-0.05)
    assert r[3].value is None and "not computed" in r[3].message


def test_parse_errors_and_presets() -> None:
    g = parse_gate(" lpips.p90 < 0.3 ")
    assert (g.metric, g.stat, g.op, g.threshold) == ("lpips", "p90", "<", 0.3)
    for bad in ("psnr>=30", "psnr.p11>=30", "psnr.p10=>30", "psnr.p10>=x"):
        with pytest.raises(UsageError):
            parse_gate(bad)
    assert [x.expr for x in preset_gates("sglang-ci-image")] == list(PRESETS["sglang-ci-image"])
    with pytest.raises(UsageError, match="unknown preset"):
        preset_gates("nope")
    inf = {"psnr": summarize_metric("psnr", _samples([math.inf]))}
    assert evaluate_gates(inf, preset_gates("equivalent"))[0].passed


def test_mean_gate_on_all_identical_pairs_uses_the_identical_value() -> None:
    # identical pairs stay out of every mean, so an all-identical run has mean None in each row; a mean
    # gate must then judge the identical value (PSNR +inf, SSIM 1, LPIPS 0), not fail as "not computed"
    def same(metric: str, v: float) -> object:
        return summarize_metric(metric, [Sample(v, f"k{i}", "a", "b", None, True) for i in range(3)])

    summ = {"psnr": same("psnr", math.inf), "ssim": same("ssim", 1.0), "lpips": same("lpips", 0.0)}
    assert all(s.mean is None and s.n_identical == 3 for s in summ.values())
    r = evaluate_gates(summ, ["psnr.mean>=40", "ssim.mean>=0.99", "lpips.mean<=0.01", "ssim.mean>1"])
    assert [g.passed for g in r] == [True, True, True, False]
    assert r[1].value == 1.0 and "all 3 pairs identical" in r[1].message


def test_mean_excludes_identical_pairs_in_every_metric() -> None:
    vals = [0.9, 0.8, 1.0, 1.0]
    s = summarize_metric("ssim", [Sample(v, f"k{i}", "a", "b", None, v == 1.0) for i, v in enumerate(vals)])
    assert s is not None and s.n == 4 and s.n_identical == 2 and s.n_inf == 0
    assert s.mean == pytest.approx(0.85) and s.p50 == pytest.approx(np.percentile(vals, 50))
