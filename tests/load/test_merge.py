"""Merging the results of several load workers: exact (records) and HdrHistogram (stated error)."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.core.records import RequestRecord
from diffbench.errors import DiffbenchError
from diffbench.load.merge import (
    PERCENTILES,
    SIGNIFICANT_DIGITS,
    LatencyHistograms,
    merge_histograms,
    merge_records,
)
from diffbench.load.summary import summarize_rate


def _records(n: int, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    intended = np.sort(rng.uniform(0, 10, n))
    lag = rng.exponential(0.002, n)
    service = rng.lognormal(np.log(0.2), 0.8, n)
    outcome = rng.choice(["ok", "ok", "ok", "http_error", "timeout"], n)
    return [RequestRecord(id=i, rate=100.0, intended_s=float(t), sent_s=float(t + g), done_s=float(t + g + s),
                          outcome=str(o), status=200 if o == "ok" else 500)
            for i, (t, g, s, o) in enumerate(zip(intended, lag, service, outcome, strict=True))]


def _hdr_rank_value(values: np.ndarray, q: float) -> float:
    """The order statistic HdrHistogram reports at percentile q (rank max(1, floor(q n / 100 + 0.5)))."""
    k = max(1, int(q * values.size / 100 + 0.5))
    return float(np.partition(values, k - 1)[k - 1])


def test_exact_merge_gives_the_percentiles_of_the_one_list():
    one = _records(3000, seed=1)
    parts = [one[w::3] for w in range(3)]  # as WorkerPool partitions: request i on worker i % 3
    parts[1] = list(reversed(parts[1]))  # workers finish out of order
    merged = merge_records(parts)
    assert [r.id for r in merged] == list(range(3000))
    a = summarize_rate(one, offered_rate=100.0, duration_s=10.0)
    b = summarize_rate(merged, offered_rate=100.0, duration_s=10.0)
    for field in ("latency_from_arrival_s", "latency_from_send_s", "lag_s"):
        assert getattr(a, field) == getattr(b, field)
    ok = np.array([r.done_s - r.intended_s for r in one if r.outcome == "ok"])
    assert b.latency_from_arrival_s.p99 == pytest.approx(float(np.percentile(ok, 99)), rel=1e-12)


def test_exact_merge_refuses_a_request_measured_twice():
    recs = _records(10, seed=2)
    with pytest.raises(DiffbenchError, match="id 4 was recorded twice"):
        merge_records([recs[:5], recs[4:]])


def test_hdr_merge_is_within_the_stated_error_of_numpy():
    one = _records(20000, seed=3)
    parts = [LatencyHistograms.decode(LatencyHistograms().add_all(one[w::3]).encode()) for w in range(3)]
    merged = merge_histograms(parts)
    ok = [r for r in one if r.outcome == "ok"]
    assert merged.n == len(ok)
    summary = merged.summary()
    assert summary is not None and summary.unit == "us" and summary.significant_digits == SIGNIFICANT_DIGITS
    rel = 10.0 ** -SIGNIFICANT_DIGITS
    values = {"latency_from_arrival": np.array([r.done_s - r.intended_s for r in ok]),
              "latency_from_send": np.array([r.done_s - r.sent_s for r in ok]),
              "lag": np.array([r.sent_s - r.intended_s for r in ok])}
    for name, v in values.items():
        got = summary.quantities[name]
        for q, reported in zip(PERCENTILES, (got.p50, got.p90, got.p99, got.p999), strict=True):
            x = _hdr_rank_value(v, q)
            assert abs(reported - x) <= x * rel + summary.absolute_error_s, (name, q, reported, x)
        assert abs(got.max - v.max()) <= v.max() * rel + summary.absolute_error_s
    # merging adds bucket counts: identical to one histogram of every value
    whole = LatencyHistograms().add_all(one)
    for name in values:
        for q in PERCENTILES:
            assert whole.percentile_us(name, q) == merged.percentile_us(name, q)


def test_hdr_clamps_out_of_range_values_and_counts_them():
    r = RequestRecord(id=0, intended_s=0.0, sent_s=-1e-3, done_s=7200.0, outcome="ok")
    h = LatencyHistograms().add_all([r])
    assert h.clamped == 3  # lag < 0, and both latencies above one hour
    assert h.summary().clamped == 3
    assert LatencyHistograms().summary() is None
