"""RateSummary on hand-made records: every number recomputed here with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.core.records import OUTCOMES, RequestRecord
from diffbench.load.summary import detect_divergence, run_label, summarize_rate
from diffbench.queueing.schedules import constant


def _records(seed: int = 0, n: int = 400) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        intended = i * 0.25
        sent = intended + float(rng.uniform(0, 0.004))
        lat = float(rng.lognormal(0.0, 0.5))
        kind = "ok"
        kwargs: dict = {}
        if i % 50 == 7:
            kind, kwargs = "rejected", {"status": 429, "retry_after_s": float(1 + i % 3)}
        elif i % 50 == 9:
            kind, kwargs = "http_error", {"status": 500}
        elif i % 100 == 11:
            kind = "timeout"
        done: float | None = sent + lat
        if i == n - 1:
            kind, done = "cancelled", None
        shape = "512x512" if i % 2 else "1024x1024"
        stages = {"denoise": 0.5 + (i % 4) * 0.1, "vae_decode": 0.1} if kind == "ok" else {}
        out.append(RequestRecord(id=i, rate=4.0, shape=shape, intended_s=intended, sent_s=sent, done_s=done,
                                 outcome=kind, server_stages_s=stages, **kwargs))
    return out


def test_summary_matches_numpy() -> None:
    recs = _records()
    s = summarize_rate(recs, offered_rate=4.0, duration_s=100.0, slo_s=2.0)
    ok = [r for r in recs if r.outcome == "ok"]
    lat_a = np.array([r.done_s - r.intended_s for r in ok])
    lat_s = np.array([r.done_s - r.sent_s for r in ok])
    lag = np.array([r.sent_s - r.intended_s for r in recs])
    for got, ref in [(s.latency_from_arrival_s, lat_a), (s.latency_from_send_s, lat_s), (s.lag_s, lag)]:
        assert got.n == ref.size
        np.testing.assert_allclose([got.p50, got.p90, got.p99, got.p999],
                                   np.percentile(ref, [50, 90, 99, 99.9]), rtol=1e-12)
        assert got.mean == pytest.approx(ref.mean(), rel=1e-12)

    expected = {k: sum(r.outcome == k for r in recs) for k in OUTCOMES}
    assert s.outcomes == expected
    assert set(s.outcomes) == set(OUTCOMES)
    assert s.outcomes["rejected"] == 8 and s.outcomes["cancelled"] == 1

    sent = np.array([r.sent_s for r in recs])  # every rate: a count over [0, max(duration, last event)]
    assert s.achieved_rate == s.sent_rate == pytest.approx(sent.size / max(100.0, sent.max()), rel=1e-12)
    intended = np.array([r.intended_s for r in recs])
    assert s.scheduled_rate == pytest.approx(intended.size / max(100.0, intended.max()), rel=1e-12)
    completed = [r for r in recs if r.done_s is not None and r.outcome != "cancelled"]
    any_window = max(100.0, max(r.done_s for r in completed))  # [0, max(duration, last completion)]
    ok_window = max(100.0, max(r.done_s for r in ok))
    assert s.completed_rate == pytest.approx(len(completed) / any_window, rel=1e-12)
    assert s.ok_rate == pytest.approx(len(ok) / ok_window, rel=1e-12)
    assert s.goodput == pytest.approx(np.count_nonzero(lat_a <= 2.0) / ok_window, rel=1e-12)
    assert s.goodput < s.ok_rate < s.completed_rate
    ended = len(recs) - 1  # the cancelled one is left out
    assert s.failed_fraction == pytest.approx((ended - len(ok)) / ended, rel=1e-12)
    assert s.n_ok == len(ok) and s.first_error is not None and s.first_error.startswith("rejected")

    assert s.retry_after_s is not None and s.retry_after_s.n == 8
    assert s.retry_after_s.mean == pytest.approx(np.mean([r.retry_after_s for r in recs if r.retry_after_s]))
    assert s.statuses == {"429": 8, "500": 8}
    assert s.server_stages_s["denoise"] == pytest.approx(np.mean([r.server_stages_s["denoise"] for r in ok]))
    assert s.server_stages_s["vae_decode"] == pytest.approx(0.1)
    assert set(s.per_shape) == {"512x512", "1024x1024"}
    assert sum(p.n for p in s.per_shape.values()) == len(recs)
    big = [r.done_s - r.intended_s for r in ok if r.shape == "1024x1024"]
    assert s.per_shape["1024x1024"].latency_from_arrival_s.p50 == pytest.approx(np.percentile(big, 50))
    # n = 375 ok samples do not support p99.9: the summary says so instead of hiding it
    assert any("p99.9" in w for w in s.warnings)
    assert not any("lag" in w for w in s.warnings)  # lag < 4 ms


def test_goodput_without_slo_is_ok_throughput() -> None:
    recs = _records(1)
    s = summarize_rate(recs, offered_rate=4.0, duration_s=100.0)
    assert s.goodput == s.ok_rate


def test_lag_and_sent_rate_warnings() -> None:
    # the client sends 30 ms late and stretches its sends: both warnings fire
    recs = [RequestRecord(id=i, intended_s=i * 0.1, sent_s=i * 0.11 + 0.03, done_s=i * 0.11 + 0.5)
            for i in range(200)]
    s = summarize_rate(recs, offered_rate=10.0, duration_s=20.0)
    assert s.lag_s.p99 == pytest.approx(np.percentile([r.sent_s - r.intended_s for r in recs], 99))
    assert any("client send lag p99" in w and "did not send on time" in w for w in s.warnings)
    assert any("below 98%" in w for w in s.warnings)
    on_time = [RequestRecord(id=i, intended_s=i * 0.1, sent_s=i * 0.1 + 0.001, done_s=i * 0.1 + 0.5)
               for i in range(200)]
    s2 = summarize_rate(on_time, offered_rate=10.0, duration_s=20.0)
    assert not any("lag" in w or "below" in w for w in s2.warnings)


def test_a_max_inflight_wait_is_not_blamed_on_the_client() -> None:
    """Requests held 50-250 ms for a --max-inflight slot, then sent within 1 ms: the lag is the cap's."""
    rng = np.random.default_rng(3)
    queue = rng.uniform(0.05, 0.25, 200)
    recs = [RequestRecord(id=i, intended_s=i * 0.1, sent_s=i * 0.1 + q + 0.0005, done_s=i * 0.1 + q + 0.5,
                          client_queue_s=float(q)) for i, q in enumerate(queue)]
    s = summarize_rate(recs, offered_rate=10.0, duration_s=20.0)
    assert not any("did not send on time" in w for w in s.warnings)
    assert any("the cap, not the client" in w for w in s.warnings)


def test_sent_and_ok_rates_share_one_window() -> None:
    # fresh-user trial: --rates 1 --duration 8 drew 8 Poisson arrivals, all ok; sent/s was (n-1)/send span
    # = 1.51 next to ok/s 1.00, as if the client had sent faster than the schedule.
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0.5, 6.5, 8))  # 8 arrivals inside [0, 8 s), first well after 0
    recs = [RequestRecord(id=i, intended_s=t, sent_s=t + 1e-3, done_s=t + 0.3) for i, t in enumerate(times)]
    s = summarize_rate(recs, offered_rate=1.0, duration_s=8.0)
    assert s.sent_rate == pytest.approx(8 / 8.0) and s.ok_rate == pytest.approx(8 / 8.0)
    assert s.scheduled_rate == pytest.approx(8 / 8.0)
    # a constant schedule: n arrivals at i / r, all sent on time -> sent/s = n / duration = r exactly
    for rate, duration in ((1.0, 8.0), (4.0, 8.0), (29.0, 3.0)):
        t = constant(rate, duration)
        recs = [RequestRecord(id=i, intended_s=x, sent_s=x, done_s=x + 0.05) for i, x in enumerate(t)]
        s = summarize_rate(recs, offered_rate=rate, duration_s=duration)
        assert s.sent_rate == pytest.approx(t.size / duration, rel=1e-12) == pytest.approx(rate)
        assert s.sent_rate >= s.ok_rate  # ok window ends at the last ok done, after the last send
    # sends that spill past the window (client lag) stretch the sent window: 10 sends ending at 12.5 s
    late = [RequestRecord(id=i, intended_s=float(i), sent_s=i * 1.25 + 1.25, done_s=i * 1.25 + 1.5)
            for i in range(10)]
    s = summarize_rate(late, offered_rate=1.0, duration_s=10.0)
    assert s.sent_rate == pytest.approx(10 / 12.5) and s.ok_rate == pytest.approx(10 / 12.75)


def test_closed_mode_and_bad_duration() -> None:
    recs = [RequestRecord(id=i, intended_s=float(i), sent_s=float(i), done_s=i + 1.0) for i in range(10)]
    s = summarize_rate(recs, offered_rate=None, duration_s=10.0, mode="closed", users=1)
    assert s.mode == "closed" and s.users == 1 and s.scheduled_rate is None
    assert s.ok_rate == pytest.approx(10 / 10.0) == s.achieved_rate  # closed loop: achieved = ok/s
    with pytest.raises(ValueError, match="duration_s"):
        summarize_rate(recs, offered_rate=1.0, duration_s=0.0)


def test_divergence_rule_on_constructed_latencies() -> None:
    t = np.arange(1000, dtype=np.float64)  # 1 req/s over 1000 s
    codes = np.zeros(t.size, dtype=np.int64)
    growing = t + 1.0 + 0.1 * t  # latency rises 0.1 s per second: a queue growing without bound
    d = detect_divergence(t, growing, codes, 1000.0)
    assert d.checked and d.unstable
    assert d.first_half_p50_s == pytest.approx(np.percentile(1.0 + 0.1 * t[:500], 50))
    flat = t + 1.0 + 0.5 * (t % 2)
    d2 = detect_divergence(t, flat, codes, 1000.0)
    assert d2.checked and not d2.unstable
    few = detect_divergence(t[:10], growing[:10], codes[:10], 10.0)
    assert not few.checked and not few.unstable


def test_a_row_carries_the_label_its_run_was_named_by() -> None:
    """The profile driver names each run with run_label; the row it produced has that label and is matched
    back to the run (scrape windows) by it, bursts and trace replays by kind (planned vs measured count)."""
    recs = _records(n=40)
    rate = summarize_rate(recs, offered_rate=2.5, duration_s=10.0)
    assert rate.label == run_label(rate=2.5) == "2.5 req/s"
    assert rate.made_by("2.5 req/s") and not rate.made_by("25 req/s") and not rate.made_by("probe 2.5 req/s")
    closed = summarize_rate(recs, offered_rate=None, duration_s=10.0, mode="closed", users=4)
    assert closed.label == "4 users" and closed.made_by("4 users") and not closed.made_by("probe 4 users")
    assert closed.made_by(run_label(users=4, probe=True), probe=True) and not closed.made_by("4 users", probe=True)
    burst = summarize_rate(recs, offered_rate=None, duration_s=10.0, schedule="burst")
    assert burst.label == f"burst of {len(recs)}" and burst.made_by(run_label(burst=50))
    assert not burst.made_by(run_label(trace=40))
    trace = summarize_rate(recs, offered_rate=None, duration_s=10.0, schedule="trace")
    assert trace.label == f"{trace.achieved_rate:g} req/s" and trace.made_by(run_label(trace=40))
    assert not trace.made_by(trace.label)


def test_abandoned_requests_are_neither_ok_nor_failures() -> None:
    recs = _records(n=100)
    gave_up = {i for i in range(100) if i % 10 == 3}
    recs = [r.model_copy(update={"outcome": "abandoned", "status": None}) if r.id in gave_up else r for r in recs]
    s = summarize_rate(recs, offered_rate=4.0, duration_s=25.0)
    codes = np.array([r.outcome for r in recs])
    assert s.outcomes["abandoned"] == len(gave_up) == int(np.count_nonzero(codes == "abandoned"))
    assert s.n_ok == int(np.count_nonzero(codes == "ok"))
    ended = len(recs) - int(np.count_nonzero(np.isin(codes, ["cancelled", "abandoned"])))
    assert s.failed_fraction == pytest.approx((ended - s.n_ok) / ended)
    assert s.latency_from_arrival_s.n == s.n_ok
