"""Arrival schedules: statistics against closed forms, exactness, trace replay and errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from diffbench.errors import InputError, UsageError
from diffbench.queueing import schedules as sch


def _check_shape(t: np.ndarray, duration: float) -> None:
    assert t.dtype == np.float64 and t.ndim == 1
    assert np.all(np.diff(t) >= 0)
    assert t.size == 0 or (t[0] >= 0 and t[-1] < duration)


def test_constant_is_exact() -> None:
    t = sch.constant(2.0, 3.0)
    np.testing.assert_array_equal(t, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    t = sch.constant(7.0, 100.0)
    assert t.size == 700
    np.testing.assert_allclose(np.diff(t), 1 / 7.0, rtol=0, atol=1e-12)
    _check_shape(t, 100.0)


def test_poisson_interarrival_mean_cv_and_ks() -> None:
    rate, duration = 50.0, 2000.0
    t = sch.poisson(rate, duration, seed=1)
    _check_shape(t, duration)
    expected_n = rate * duration
    assert abs(t.size - expected_n) < 5 * math.sqrt(expected_n)  # Poisson count: sd = sqrt(mean)
    gaps = np.diff(t)
    # standard error of the mean gap is (1/rate)/sqrt(n) ~ 0.3 %; allow ~5 sigma
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.015)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)
    # independent check of the whole distribution against scipy's exponential
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 1e-3


@pytest.mark.parametrize("shape", [0.25, 4.0])
def test_gamma_cv_is_one_over_sqrt_shape(shape: float) -> None:
    rate = 20.0
    t = sch.gamma(rate, 5000.0, shape, seed=2)
    _check_shape(t, 5000.0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(shape), rel=0.04)
    assert stats.kstest(gaps, "gamma", args=(shape, 0, 1 / (rate * shape))).pvalue > 1e-3


def test_seeded_and_reproducible() -> None:
    a = sch.poisson(5.0, 100.0, seed=7)
    b = sch.poisson(5.0, 100.0, seed=7)
    c = sch.poisson(5.0, 100.0, seed=8)
    np.testing.assert_array_equal(a, b)
    assert a.size != c.size or not np.array_equal(a, c)


def test_deterministic_ramp_rates_at_ends() -> None:
    r0, r1, d = 1.0, 3.0, 100.0
    t = sch.ramp(r0, r1, d)
    _check_shape(t, d)
    assert t.size == round((r0 + r1) / 2 * d)  # integral of the rate
    assert t[0] == 0.0
    # local rate = 1 / gap; at the start ~ r0 and at the end ~ r1
    assert 1 / (t[1] - t[0]) == pytest.approx(r0, rel=0.02)
    assert 1 / (t[-1] - t[-2]) == pytest.approx(r1, rel=0.02)


def test_poisson_ramp_counts_match_cumulative_rate() -> None:
    r0, r1, d = 10.0, 30.0, 1000.0
    t = sch.ramp(r0, r1, d, seed=3)
    _check_shape(t, d)

    def cum(x: float) -> float:  # Λ(x) = r0 x + (r1 - r0) x² / (2 d)
        return r0 * x + (r1 - r0) * x * x / (2 * d)

    for lo, hi in [(0.0, 100.0), (900.0, 1000.0)]:
        expected = cum(hi) - cum(lo)
        got = np.count_nonzero((t >= lo) & (t < hi))
        assert abs(got - expected) < 5 * math.sqrt(expected)


def test_trace_replay_normalises_and_sorts(tmp_path) -> None:
    f = tmp_path / "arrivals.txt"
    f.write_text("# epoch seconds\n1700000010.5\n\n1700000010.0\n" + json.dumps({"t": 1700000012.0, "x": 1}) + "\n")
    t = sch.trace(f)
    np.testing.assert_allclose(t, [0.0, 0.5, 2.0])
    np.testing.assert_allclose(sch.trace(f, duration=1.0), [0.0, 0.5])
    np.testing.assert_allclose(sch.trace(f, speed=2.0), [0.0, 0.25, 1.0])
    spec = sch.spec_from_cli(trace_path=str(f))
    assert spec.kind == "trace"
    np.testing.assert_allclose(sch.build_schedule(spec), [0.0, 0.5, 2.0])


def test_trace_bad_line_names_file_and_line(tmp_path) -> None:
    f = tmp_path / "bad.txt"
    f.write_text("0.0\n1.0\nabc\n")
    with pytest.raises(InputError, match=r"bad\.txt:3"):
        sch.trace(f)
    g = tmp_path / "bad.jsonl"
    g.write_text('{"t": 0}\n{"time": 1}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2.*\"t\""):
        sch.trace(g)
    with pytest.raises(InputError, match="--trace .*missing.txt: file not found"):
        sch.trace(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(InputError, match="no timestamps"):
        sch.trace(empty)


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan])
def test_non_positive_rate_is_usage_error(rate: float) -> None:
    with pytest.raises(UsageError, match="rate must be a positive"):
        sch.poisson(rate, 10.0, seed=0)
    with pytest.raises(UsageError, match="rate"):
        sch.constant(rate, 10.0)


def test_non_positive_duration_and_missing_seed() -> None:
    with pytest.raises(UsageError, match="duration must be a positive finite number, got 0"):
        sch.constant(1.0, 0.0)
    with pytest.raises(UsageError, match="seed"):
        sch.poisson(1.0, 1.0, seed=None)


def test_cli_parsing_rules() -> None:
    assert sch.parse_rate_list("0.5, 1,2") == [0.5, 1.0, 2.0]
    with pytest.raises(UsageError, match="--rates: rate must be > 0, got 0"):
        sch.parse_rate_list("0.5,0")
    with pytest.raises(UsageError, match="not a number"):
        sch.parse_rate_list("a")
    assert sch.parse_int_list("1,2,4") == [1, 2, 4]
    with pytest.raises(UsageError, match=">= 1"):
        sch.parse_int_list("0")
    assert sch.parse_ramp("0.5:2") == (0.5, 2.0)
    with pytest.raises(UsageError, match="START:END"):
        sch.parse_ramp("0.5-2")

    spec = sch.spec_from_cli(arrival="gamma", burstiness=2.0, duration_s=10.0, seed=4)
    assert (spec.kind, spec.burstiness) == ("gamma", 2.0)
    np.testing.assert_array_equal(sch.build_schedule(spec.with_rate(3.0)), sch.gamma(3.0, 10.0, 2.0, 4))
    with pytest.raises(UsageError, match="--arrival gamma"):
        sch.spec_from_cli(arrival="poisson", burstiness=2.0, duration_s=10.0)
    ramp = sch.spec_from_cli(ramp_text="0.5:2", duration_s=10.0)
    assert ramp.kind == "ramp" and ramp.offered_rate == pytest.approx(1.25)
    with pytest.raises(UsageError, match="no single rate"):
        ramp.with_rate(1.0)
    with pytest.raises(UsageError, match="not one of"):
        sch.spec_from_cli(arrival="uniform", duration_s=1.0)
    with pytest.raises(UsageError, match="--duration"):
        sch.spec_from_cli(arrival="poisson", duration_s=-1.0)
    with pytest.raises(UsageError, match="needs a rate"):
        sch.build_schedule(sch.spec_from_cli(arrival="constant", duration_s=1.0))
