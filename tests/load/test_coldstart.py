"""``cold_start_in_measurement``: leading outliers per warm-up key (service time where the server reports
it, else latency from arrival) and the server's recompile counter, on records built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.core.records import RequestRecord
from diffbench.load.coldstart import COLD_START, SERVER, leading_cold_starts, recompile_cold_start
from diffbench.load.summary import summarize_rate


def _rec(i: int, shape: str, t: float, lat: float, service: float | None = None, outcome: str = "ok") -> RequestRecord:
    stages = {} if service is None else {"service_time": service}
    return RequestRecord(id=i, shape=shape, intended_s=t, sent_s=t, done_s=t + lat, outcome=outcome,  # type: ignore[arg-type]
                         server_stages_s=stages)


def test_a_compile_on_one_key_is_named_with_its_samples() -> None:
    warm = [0.030, 0.028, 0.031, 0.029]
    recs = [_rec(0, "64x64 s2", 0.0, 0.03)] + [_rec(i + 1, "64x64 s2", 0.5 * (i + 1), x) for i, x in enumerate(warm)]
    recs += [_rec(10, "64x64 s2 n4", 0.2, 5.03)] + [_rec(11 + i, "64x64 s2 n4", 0.7 + 0.5 * i, x)
                                                     for i, x in enumerate(warm)]
    found = leading_cold_starts(recs)
    assert [(c.shape, c.leading) for c in found] == [("64x64 s2 n4", 1)]
    assert found[0].latency_s == [pytest.approx(5.03)]
    assert found[0].rest_median_s == pytest.approx(float(np.median(warm)))
    assert found[0].measure == "latency_from_arrival"
    assert found[0].message().startswith(f"{COLD_START}: 64x64 s2 n4: the first 1 measured request(s) took 5.03 s")


def test_arrival_order_not_record_order_decides_what_leads() -> None:
    recs = [_rec(0, "k", 1.0, 0.03), _rec(1, "k", 2.0, 0.03), _rec(2, "k", 3.0, 0.03), _rec(3, "k", 0.0, 2.0)]
    assert [c.leading for c in leading_cold_starts(recs)] == [1]
    recs[3] = _rec(3, "k", 4.0, 2.0)  # the slow one arrived last: a tail, not a cold start
    assert leading_cold_starts(recs) == []


def test_failed_requests_are_left_out() -> None:
    recs = [_rec(0, "k", 0.0, 9.0, outcome="timeout")] + [_rec(i, "k", float(i), 0.03) for i in range(1, 5)]
    assert leading_cold_starts(recs) == []


def test_the_service_time_finds_a_compile_that_a_queue_hides_in_the_latency() -> None:
    # a 5 s compile blocks the device: every request behind it queues, so latencies from arrival fall
    # smoothly from 5 s (no request stands out), while the service time shows the one compile
    lat = [5.0, 4.9, 4.8, 4.7, 4.6]
    service = [5.0, 0.025, 0.024, 0.026, 0.025]
    recs = [_rec(i, "k", 0.1 * i, x, s) for i, (x, s) in enumerate(zip(lat, service, strict=True))]
    assert leading_cold_starts([_rec(i, "k", 0.1 * i, x) for i, x in enumerate(lat)]) == []
    (found,) = leading_cold_starts(recs)
    assert (found.leading, found.latency_s, found.measure) == (1, [5.0], "service_time")
    assert found.rest_median_s == pytest.approx(float(np.median(service[1:])))


def test_the_row_carries_the_finding_and_the_warning() -> None:
    recs = [_rec(0, "k", 0.0, 5.0)] + [_rec(i, "k", 0.5 * i, 0.03 + 0.001 * i) for i in range(1, 8)]
    row = summarize_rate(recs, offered_rate=2.0, duration_s=4.0)
    assert [c.shape for c in row.cold_start] == ["k"]
    assert [w for w in row.warnings if w.startswith(COLD_START)] == [row.cold_start[0].message()]
    warm = summarize_rate(recs[1:], offered_rate=2.0, duration_s=4.0)
    assert warm.cold_start == [] and not [w for w in warm.warnings if w.startswith(COLD_START)]


def test_the_recompile_counter_is_a_finding_only_when_it_rose() -> None:
    assert recompile_cold_start(None) is None and recompile_cold_start(0) is None
    c = recompile_cold_start(2)
    assert c is not None and (c.shape, c.recompiles) == (SERVER, 2)
    assert c.message().startswith(f"{COLD_START}: the server counted 2 recompile(s) during the row")
