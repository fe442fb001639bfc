"""Stops: ``--num-requests`` truncates the seeded schedule and ends the window at the next arrival; a burst
puts every arrival at 0. Rates checked against closed forms of the constant schedule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from diffbench.core.records import RequestRecord
from diffbench.load.stops import plan_arrivals
from diffbench.load.summary import summarize_rate
from diffbench.queueing.schedules import ScheduleSpec, build_schedule


@pytest.mark.parametrize("kind, burstiness", [("poisson", 1.0), ("gamma", 0.3), ("gamma", 4.0), ("constant", 1.0)])
@pytest.mark.parametrize("n", [1, 7, 500])
def test_truncated_schedule_is_the_prefix_of_the_full_one(kind: str, burstiness: float, n: int) -> None:
    spec = ScheduleSpec(kind=kind, rate=50.0, burstiness=burstiness)  # type: ignore[arg-type]
    full = build_schedule(spec.model_copy(update={"duration_s": 60.0}), seed=np.random.default_rng([3, 1]))
    a = plan_arrivals(spec, duration_s=60.0, seed=[3, 1], num_requests=n)
    assert a.stop == "num_requests"
    np.testing.assert_array_equal(a.times, full[:n])
    assert a.window_s == full[n]


def test_duration_stops_first_when_the_schedule_is_shorter() -> None:
    spec = ScheduleSpec(kind="constant", rate=4.0)
    a = plan_arrivals(spec, duration_s=2.0, seed=[0, 0], num_requests=100)
    assert a.stop == "duration" and a.window_s == 2.0 and a.times.size == 8
    b = plan_arrivals(spec, duration_s=2.0, seed=[0, 0], num_requests=None)
    assert b.stop == "duration" and b.times.size == 8


@pytest.mark.parametrize("rate, n", [(10.0, 50), (3.0, 7), (29.0, 100)])
def test_constant_schedule_rates_are_closed_form(rate: float, n: int) -> None:
    # n arrivals at i / rate; the window ends at arrival n + 1, i.e. n / rate: sent/s = rate exactly.
    a = plan_arrivals(ScheduleSpec(kind="constant", rate=rate), duration_s=1000.0, seed=[0, 0], num_requests=n)
    assert a.window_s == pytest.approx(n / rate, rel=1e-12)
    service = 0.25 / rate  # done before the next arrival
    recs = [RequestRecord(id=i, intended_s=t, sent_s=t, done_s=t + service) for i, t in enumerate(a.times)]
    s = summarize_rate(recs, offered_rate=rate, duration_s=a.window_s)
    assert s.n == s.n_ok == n
    assert s.sent_rate == pytest.approx(rate, rel=1e-12)
    assert s.scheduled_rate == pytest.approx(rate, rel=1e-12)
    # the last ok ends at (n - 1) / rate + service < n / rate: inside the window, so ok/s = rate too
    assert s.ok_rate == pytest.approx(rate, rel=1e-12)


def test_burst_puts_every_arrival_at_zero() -> None:
    a = plan_arrivals(ScheduleSpec(kind="poisson", rate=math.inf), duration_s=30.0, seed=[0, 0], num_requests=6)
    assert a.window_s is None and a.stop == "num_requests"
    np.testing.assert_array_equal(a.times, np.zeros(6))
    with pytest.raises(ValueError, match="needs num_requests"):
        plan_arrivals(ScheduleSpec(kind="poisson", rate=math.inf), duration_s=30.0, seed=[0, 0])


def test_burst_row_is_json_safe() -> None:
    # 6 arrivals at 0, served one after another in 0.5 s each: the window is the last completion, 3 s
    recs = [RequestRecord(id=i, intended_s=0.0, sent_s=0.0, done_s=0.5 * (i + 1)) for i in range(6)]
    s = summarize_rate(recs, offered_rate=None, duration_s=3.0, schedule="burst")
    assert s.ok_rate == pytest.approx(6 / 3.0) and s.offered_rate is None and s.schedule == "burst"
    assert not s.divergence.checked and not s.saturation.checked
    text = json.dumps(s.model_dump(mode="json"), allow_nan=False)  # no bare Infinity / NaN
    assert '"schedule": "burst"' in text
