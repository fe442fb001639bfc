"""Knee, capacity and divergence on simulator output with known capacity c / E[S]."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.load.knee import analyze_sweep, find_knee
from diffbench.load.simulator import SimConfig, simulate_open, simulate_sweep, summarize_run
from diffbench.queueing.schedules import ScheduleSpec, constant
from diffbench.queueing.service_time import parse_service

SERVICE = "3.0*N(1,0.02)+0.8*B(0.1)"
CAPACITY = 4 / (3.0 + 0.8 * 0.1)  # c / E[S] = 1.2987 req/s


def _open(rates: list[float], seed: int, duration: float = 1800.0, slo: float | None = None):
    return simulate_sweep(SimConfig(devices=4, service=SERVICE, mode="open", rates=rates, duration_s=duration,
                                    seed=seed, slo_s=slo))


@pytest.mark.parametrize("seed", range(6))
def test_open_loop_flags_only_rates_above_capacity(seed: int) -> None:
    res = _open([0.6, 1.0, 1.2, 1.4, 1.6], seed)
    flags = {r.offered_rate: r.unstable for r in res.rates}
    assert flags == {0.6: False, 1.0: False, 1.2: False, 1.4: True, 1.6: True}
    assert res.knee.index is not None and res.rates[res.knee.index].offered_rate <= 1.2
    # over capacity the completion rate is the capacity
    assert res.capacity_saturated
    assert res.capacity_rps == pytest.approx(CAPACITY, rel=0.03)
    # below capacity the queue is real but bounded: latency above the service time, throughput = offered
    r12 = res.rates[2]
    assert r12.latency_from_arrival_s.p99 > 3.88
    assert r12.ok_rate == pytest.approx(r12.scheduled_rate, rel=0.02)


def test_over_capacity_p99_grows_with_test_duration() -> None:
    short = _open([1.5], seed=1, duration=600.0).rates[0]
    long = _open([1.5], seed=1, duration=2400.0).rates[0]
    assert long.latency_from_arrival_s.p99 > 2.5 * short.latency_from_arrival_s.p99
    assert long.unstable and short.unstable


def test_closed_loop_p99_does_not_depend_on_duration() -> None:
    def p99(duration: float) -> float:
        res = simulate_sweep(SimConfig(devices=4, service=SERVICE, mode="closed", users=[16], duration_s=duration,
                                       seed=2))
        return res.rates[0].latency_from_arrival_s.p99

    assert p99(2400.0) == pytest.approx(p99(600.0), rel=0.1)


def test_closed_loop_saturates_with_bounded_p99() -> None:
    res = simulate_sweep(SimConfig(devices=4, service=SERVICE, mode="closed", users=[2, 4, 8, 16],
                                   duration_s=1800.0, seed=0))
    thr = {r.users: r.ok_rate for r in res.rates}
    assert thr[2] == pytest.approx(2 / 3.08, rel=0.03)  # below saturation: users / E[S]
    for users in (4, 8, 16):
        assert thr[users] == pytest.approx(CAPACITY, rel=0.02)
    for r in res.rates:
        assert not r.unstable and not r.divergence.checked  # a closed loop is bounded by construction
        # Bounded: with FCFS and N users on c devices a request waits for at most ceil(N/c) - 1 rounds of
        # service, each at most 3.0*(1 + 5 sd) + 0.8 s, so latency <= ceil(N/c) * 3.9 s
        assert r.latency_from_arrival_s.p99 <= -(-r.users // 4) * 3.9
        assert r.latency_from_arrival_s.p99 / r.latency_from_arrival_s.p50 < 1.35
    assert res.knee.method == "saturation" and res.knee.users == 4
    assert res.capacity_saturated and res.capacity_rps == pytest.approx(CAPACITY, rel=0.02)


def test_knee_with_slo_on_deterministic_queue() -> None:
    # D/D/1 with service 1 s: below rate 1 every latency is exactly 1 s, above it the queue grows.
    svc = parse_service("const(1)")
    rows = []
    for rate in (0.5, 0.9, 1.5):
        arrivals = constant(rate, 600.0)
        rows.append(summarize_run(simulate_open(arrivals, svc, 1, np.random.default_rng(0), duration_s=600.0,
                                               offered_rate=rate), slo_s=1.5))
    res = analyze_sweep(rows[::-1], slo_s=1.5, source="simulate")
    assert [r.offered_rate for r in res.rates] == [0.5, 0.9, 1.5]
    assert res.rates[0].latency_from_arrival_s.p99 == pytest.approx(1.0)
    assert res.knee.method == "slo" and res.knee.offered_rate == 0.9 and res.knee.index == 1
    assert res.rates[2].unstable and res.rates[2].goodput < res.rates[2].ok_rate
    # without an SLO the unstable row ends the run of good rows as well
    assert find_knee(res.rates).offered_rate == 0.9
    # an SLO the lowest rate misses: no knee
    assert find_knee(res.rates, slo_s=0.5).index is None


def test_tail_ratio_knee_and_errors() -> None:
    res = _open([0.3, 0.6, 1.0, 1.2], seed=3)
    base = res.rates[0].latency_from_arrival_s
    ratios = [r.latency_from_arrival_s.p99 / r.latency_from_arrival_s.p50 for r in res.rates]
    first_bad = next((i for i, q in enumerate(ratios) if q > 2 * base.p99 / base.p50), None)
    expected = (len(ratios) - 1) if first_bad is None else first_bad - 1
    assert res.knee.method == "tail_ratio" and res.knee.index == expected
    with pytest.raises(ValueError):
        find_knee([])
    closed = simulate_sweep(SimConfig(devices=1, service="1", mode="closed", users=[1], duration_s=10.0))
    with pytest.raises(ValueError, match="both open- and closed"):
        find_knee([res.rates[0], closed.rates[0]])


def test_sweep_json_roundtrip() -> None:
    res = _open([0.6], seed=0, duration=300.0)
    again = type(res).model_validate_json(res.model_dump_json())
    assert again.rates[0].latency_from_arrival_s.p99 == res.rates[0].latency_from_arrival_s.p99
    assert again.conditions["devices"] == "4"
    assert ScheduleSpec().kind == "poisson"


def test_table_renders_knee_flags_shapes_and_stages() -> None:
    from rich.console import Console

    from diffbench.core.records import RequestRecord
    from diffbench.load.summary import summarize_rate
    from diffbench.report.load_table import fmt_seconds, print_sweep

    recs = [RequestRecord(id=i, shape="512x512" if i % 2 else "1024x1024", intended_s=float(i), sent_s=float(i),
                          done_s=i + 0.25 * (1 + i % 3), server_stages_s={"denoise": 0.2}) for i in range(60)]
    row = summarize_rate(recs, offered_rate=1.0, duration_s=60.0)
    res = analyze_sweep([row, _open([1.6], seed=0, duration=600.0).rates[0]], source="load")
    console = Console(width=200, record=True)
    print_sweep(res, console)
    text = console.export_text()
    assert "KNEE" in text and "UNSTABLE" in text and "1024x1024" in text and "denoise 200ms" in text
    assert fmt_seconds(0.0123) == "12.3ms" and fmt_seconds(12.34) == "12.3s" and fmt_seconds(None) == "—"


def _label_of(row) -> str:
    return f"{row.users} users" if row.mode == "closed" else f"{row.offered_rate:g} req/s"


@pytest.mark.parametrize("rates, slo", [([0.6, 1.0, 1.4], None), ([0.6, 1.0, 1.4], 8.0), ([1.4, 1.6], 8.0)])
def test_knee_flag_and_knee_sentence_name_the_same_row(rates, slo) -> None:
    from rich.console import Console

    from diffbench.report.load_table import print_sweep

    res = _open(rates, seed=4, duration=600.0, slo=slo)
    console = Console(width=220, record=True)
    print_sweep(res, console)
    text = console.export_text()
    knee_line = next(ln for ln in text.splitlines() if ln.startswith("knee:"))
    flagged = [ln for ln in text.splitlines() if "KNEE" in ln]
    if res.knee.index is None:
        assert not flagged and knee_line.startswith("knee: none:")
    else:
        row = res.rates[res.knee.index]
        assert knee_line.startswith(f"knee: {_label_of(row)}:")
        assert len(flagged) == 1 and flagged[0].split()[0] == f"{row.offered_rate:.3g}"


def test_capacity_never_contradicts_the_closed_loop_probe() -> None:
    from diffbench.load.knee import merge_probe_capacity

    probe = simulate_sweep(SimConfig(devices=4, service=SERVICE, mode="closed", users=[2, 4, 8],
                                     duration_s=900.0, seed=1))
    assert probe.capacity_saturated and probe.capacity_rps == pytest.approx(CAPACITY, rel=0.03)
    low = _open([0.3, 0.6], seed=1, duration=600.0)  # open rows far below capacity: a lower bound alone
    assert not low.capacity_saturated and low.capacity_rps < 0.7
    merged = merge_probe_capacity(low, probe)
    assert merged.capacity_rps == probe.capacity_rps and merged.capacity_saturated
    assert "closed-loop capacity probe" in merged.capacity_source
    assert not any("lower bound" in w for w in merged.warnings)
    high = _open([1.0, 1.6], seed=1, duration=600.0)  # the open loop saturated too: the higher one wins
    merged = merge_probe_capacity(high, probe)
    assert merged.capacity_rps == max(high.capacity_rps, probe.capacity_rps) and merged.capacity_saturated


def _rates_named(sentence: str) -> list[float]:
    head = sentence.split(": ")[0]
    return [float(part.split()[0]) for part in head.split(", ")]


def test_unstable_sentence_agrees_with_the_capacity_line() -> None:
    # fresh-user trial (--rates auto): "18.1 req/s ... offered load above capacity" printed under
    # "capacity: 24.18 ok/s" (from the closed-loop probe). One device, 1/16 s per request: capacity 16 req/s.
    from diffbench.load.knee import merge_probe_capacity

    mark = "unstable: p99 depends on test duration"

    res = simulate_sweep(SimConfig(devices=1, service="0.0625", mode="open", rates=[8.0, 18.1], duration_s=60.0,
                                   seed=3))
    assert [r.unstable for r in res.rates] == [False, True]  # 18.1 > 16: the queue grows
    assert res.capacity_rps == pytest.approx(16.0, rel=0.03)  # the drain runs at 1/S
    (own,) = [w for w in res.warnings if mark in w]
    assert "above" in own and _rates_named(own) == [18.1] and res.capacity_rps < 18.1
    # a closed-loop probe of the same run measured more (24.18 ok/s): the capacity line says 24.18, so the
    # sentence must not call 18.1 req/s "above capacity"
    probe = res.model_copy(update={"mode": "closed", "capacity_rps": 24.18, "capacity_saturated": True})
    merged = merge_probe_capacity(res, probe)
    assert merged.capacity_rps == 24.18
    sentences = [w for w in merged.warnings if mark in w]
    assert len(sentences) == 1 and "above" not in sentences[0]
    assert "although offered below the capacity 24.18 ok/s" in sentences[0]
    for w in sentences:  # the one rule: "above" names only rates above the reported capacity
        if "above" in w:
            assert all(r > merged.capacity_rps for r in _rates_named(w))
