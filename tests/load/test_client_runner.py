"""Open/closed-loop runners against the in-test fake server (tests/load/conftest.py) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from diffbench.core.stats import percentile
from diffbench.load.client import (
    HttpBackend,
    JsonlSink,
    RequestPlanner,
    RunControl,
    Target,
    default_workload,
    read_jsonl,
    run_closed_loop,
    run_open_loop,
)
from diffbench.load.summary import summarize_rate
from diffbench.queueing.schedules import constant

from .conftest import check_closed_loop_rate

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def _open(url: str, rate: float, duration: float, *, timeout: float = 5.0, size=(64, 48), **kw):
    async def go():
        backend = HttpBackend(Target(base_url=url, timeout_s=timeout, poll_interval_s=0.05,
                                     delete_abandoned=kw.pop("delete_abandoned", False)))
        await backend.start()
        try:
            times = constant(rate, duration)
            planner = RequestPlanner(default_workload(*size, 2), ["a cat"], seed=1)
            run = await run_open_loop(times, planner.take(len(times)), backend, offered_rate=rate,
                                      duration_s=duration, **kw)
        finally:
            await backend.close()
        return run, backend

    return asyncio.run(go())


def test_achieved_rate_within_2_percent_of_target(fake):
    run, _ = _open(fake.url("ok"), 100.0, 3.0)
    sent = np.array([r.sent_s for r in run.records])
    achieved = (sent.size - 1) / (sent.max() - sent.min())  # computed here from raw send times
    assert len(run.records) == 300
    assert abs(achieved / 100.0 - 1.0) < 0.02
    s = summarize_rate(run.records, offered_rate=100.0, duration_s=3.0)
    assert s.outcomes["ok"] == 300
    # the summary counts sends over [0, max(duration, last send)] (summary module docstring)
    assert s.achieved_rate == pytest.approx(sent.size / max(3.0, sent.max()), rel=1e-12)


def test_pause_shows_from_intended_arrival_and_a_cap_hides_it_from_send(fake):
    """Coordinated omission: the server stops for 2 s. Timed from the intended arrival the pause is in the
    tail; timed from the send with a concurrency cap of 1 it almost vanishes (only one request saw it)."""
    fake.delay_s = 0.002
    fake.pause(after_requests=25, length_s=2.0)
    open_run, _ = _open(fake.url("ok"), 50.0, 3.0)
    lat_arrival = [r.latency_from_arrival_s for r in open_run.records]
    assert max(lat_arrival) >= 1.8  # a request arriving at the start of the pause waited ~2 s
    assert percentile(lat_arrival, 99) >= 1.5

    fake.pause(after_requests=25, length_s=2.0)
    capped, _ = _open(fake.url("ok"), 50.0, 3.0, max_inflight=1)
    from_send = [r.latency_from_send_s for r in capped.records]
    from_arrival = [r.latency_from_arrival_s for r in capped.records]
    assert all(r.outcome == "ok" for r in capped.records)
    assert percentile(from_send, 99) < 0.3  # the hidden view: the stall is one sample in 150
    assert percentile(from_arrival, 99) >= 1.5  # the honest view keeps it
    assert max(r.client_queue_s for r in capped.records) >= 1.5  # and reports where the time went
    lag = [r.lag_s for r in capped.records]
    assert max(lag) >= 1.5


def test_outcomes_counted_by_kind_and_jsonl_keeps_every_request(fake, tmp_path):
    # 16 requests cycle twice through ok, 429, 500, bad JSON, bad image, wrong size, reset, stall.
    sink = JsonlSink(tmp_path / "r.jsonl")
    run, _ = _open(fake.url("mix"), 20.0, 0.8, timeout=0.5, sink=sink)
    sink.close()
    recs = run.records
    assert len(recs) == 16
    count = {k: sum(r.outcome == k for r in recs) for k in
             ("ok", "rejected", "http_error", "invalid_payload", "connection_error", "timeout")}
    assert count == {"ok": 2, "rejected": 2, "http_error": 2, "invalid_payload": 6,
                     "connection_error": 2, "timeout": 2}
    assert sorted(r.retry_after_s for r in recs if r.outcome == "rejected") == [3.0, 3.0]
    assert {r.status for r in recs if r.outcome == "http_error"} == {500}
    errors = " | ".join(r.error or "" for r in recs if r.outcome == "invalid_payload")
    assert "malformed JSON" in errors and "does not decode" in errors and "requested 64x48" in errors
    timeouts = [r for r in recs if r.outcome == "timeout"]
    assert all(0.45 <= r.done_s - r.sent_s <= 1.0 for r in timeouts)
    ok = [r for r in recs if r.outcome == "ok"]
    assert ok[0].server_stages_s["denoise"] == 0.25 and ok[0].server_stages_s["vae_decode"] == 0.05
    assert 0 <= ok[0].server_stages_s["service_time"] < 0.5  # the fake server's measured hold time
    assert ok[0].server_peak_memory_bytes == 512 * 2**20
    back = read_jsonl(tmp_path / "r.jsonl")
    assert sorted(r.id for r in back) == list(range(16))
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert all(json.loads(ln)["run"] == "rate=20" for ln in lines)


def test_503_is_rejected_without_retry_after(fake):
    run, _ = _open(fake.url("r503"), 20.0, 0.2)
    assert {r.outcome for r in run.records} == {"rejected"}
    assert all(r.retry_after_s is None and r.status == 503 for r in run.records)


def test_stop_drains_then_cancels_and_keeps_records(fake, tmp_path):
    """Ctrl-C simulated: stop after 10 finished requests; in-flight ones get a short drain, then cancelled."""
    fake.delay_s = 0.3
    control = RunControl()
    seen = []

    def on_record(rec):
        seen.append(rec)
        if len(seen) == 10:
            control.request_stop("test")

    sink = JsonlSink(tmp_path / "r.jsonl")
    run, _ = _open(fake.url("ok"), 50.0, 5.0, control=control, drain_s=0.05, on_record=on_record, sink=sink)
    sink.close()
    assert run.interrupted and run.dispatched < run.planned
    kinds = {r.outcome for r in run.records}
    assert kinds == {"ok", "cancelled"}
    n_cancelled = sum(r.outcome == "cancelled" for r in run.records)
    assert n_cancelled >= 5  # ~50 req/s x 0.3 s were in flight at the stop
    assert len(read_jsonl(tmp_path / "r.jsonl")) == len(run.records) == run.dispatched
    assert run.duration_s < 5.0
    s = summarize_rate(run.records, offered_rate=50.0, duration_s=run.duration_s)
    assert s.outcomes["cancelled"] == n_cancelled and s.n == run.dispatched


def test_closed_loop_throughput_is_users_over_service_time(fake):
    fake.delay_s = 0.1

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("ok"), timeout_s=5.0))
        await backend.start()
        try:
            planner = RequestPlanner(default_workload(64, 64, 2), ["x"], seed=0)
            return await run_closed_loop(2, planner.next, backend, duration_s=1.5)
        finally:
            await backend.close()

    run = asyncio.run(go())
    s = summarize_rate(run.records, offered_rate=None, duration_s=1.5, mode="closed", users=2)
    ok = [r for r in run.records if r.outcome == "ok"]
    assert len(ok) == len(run.records)
    # Against the times measured in this run: users / E[server service time] bounds it, and Little's law
    # (users / E[latency]) gives it within the sampling error (see check_closed_loop_rate).
    check_closed_loop_rate([r.done_s - r.intended_s for r in ok], [r.server_stages_s["service_time"] for r in ok],
                           2, 1.5, s.ok_rate)
    assert s.server_service_time_s is not None and s.server_service_time_s.mean >= 0.1  # it slept 0.1 s
    assert s.lag_s.p99 < s.latency_from_arrival_s.p50 / 10  # a closed-loop user sends when ready


@pytest.mark.parametrize("mode, outcome", [("noise", "ok"), ("noisewrong", "invalid_payload")])
def test_large_payloads_are_checked_in_worker_processes(fake, mode, outcome):
    # 400x400 incompressible PNG: ~640 kB of base64, checked in the worker processes as every image is.
    run, _ = _open(fake.url(mode), 5.0, 0.4, size=(400, 400), timeout=20.0)
    assert [r.outcome for r in run.records] == [outcome, outcome]
    if outcome != "ok":
        assert "image is 408x400, requested 400x400" in run.records[0].error


def test_stop_before_anything_is_measured_exits_130(fake):
    from diffbench.load.client.profile import ProfileConfig, StoppedBeforeMeasuring, run_profile

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("ok"), timeout_s=5.0))
        await backend.start()
        control = RunControl()
        control.request_stop("Ctrl-C")
        try:
            planner = RequestPlanner(default_workload(64, 64, 2), ["x"], seed=0)
            await run_profile(ProfileConfig(rates=[1.0], duration_s=1.0), backend, planner, control=control)
        finally:
            await backend.close()

    with pytest.raises(StoppedBeforeMeasuring, match="nothing was measured") as info:
        asyncio.run(go())
    assert info.value.exit_code == 130  # as bench: an interrupted run exits 130


class _NullBackend:
    """Answers at once without I/O; logs when each request reached ``execute``."""

    def __init__(self, log: list) -> None:
        self.log = log

    async def start(self) -> None: ...

    async def execute(self, spec, a, now) -> None:
        a.sent_s = now()
        self.log.append(("execute", spec.index))
        await asyncio.sleep(0)
        a.done_s = now()

    async def check(self, spec, a) -> None: ...

    async def close(self) -> None: ...


class _LoggedSpecs(list):
    def __init__(self, specs, log):
        super().__init__(specs)
        self.log = log

    def __getitem__(self, i):
        self.log.append(("read", i))
        return super().__getitem__(i)


def test_due_arrivals_go_out_in_one_pass_and_on_sent_reports_each_lag():
    """Ten arrivals due at once, then ten more 50 ms later: each group is dispatched without the loop
    running in between (every spec of a group read before its first execute); on_sent once per request
    with the lag of its record (taken a few statements earlier than the backend's sent_s)."""
    log: list = []
    times = np.array([0.0] * 10 + [0.05] * 10)
    specs = _LoggedSpecs(RequestPlanner(default_workload(8, 8, 1), ["x"]).take(20), log)
    lags: list[float] = []
    run = asyncio.run(run_open_loop(times, specs, _NullBackend(log), offered_rate=None, duration_s=0.1,
                                    on_sent=lags.append))
    first_exec = [log.index(("execute", i)) for i in (0, 10)]
    assert all(log.index(("read", i)) < first_exec[0] for i in range(10))
    # spec 10 is read before the wait (never on the send path), 11-19 after it, all before their group runs
    assert log.index(("read", 10)) < first_exec[0]
    assert all(first_exec[0] < log.index(("read", i)) < first_exec[1] for i in range(11, 20))
    assert len(lags) == 20 and all(lag >= 0 for lag in lags)
    rec_lag = [r.lag_s for r in run.records]
    assert all(0 <= a <= b for a, b in zip(lags, rec_lag, strict=True))
    assert [r.intended_s for r in run.records] == times.tolist()


def test_spin_tail_yields_to_the_loop_and_never_wakes_early():
    from diffbench.load.client.runners import start_time_ns, wait_until_ns

    async def go():
        ticks = 0

        async def other():  # another task that must keep running while the dispatcher spins
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        target = start_time_ns(0.02)
        spun = await wait_until_ns(target, spin_s=0.02)  # the whole wait in the tail
        after = time.perf_counter_ns()
        t.cancel()
        return target, after, spun, ticks

    import time

    target, after, spun, ticks = asyncio.run(go())
    assert after >= target  # the send time is never before the intended time
    assert spun > 0 and ticks > 10  # the loop ran other tasks during the tail


def test_shared_start_time_and_closed_loop_on_sent():
    """A given t0_ns (as WorkerPool shares one) is the clock's zero; the closed loop reports lag 0."""
    from diffbench.load.client.runners import start_time_ns

    log: list = []
    t0 = start_time_ns(0.05)
    times = constant(100.0, 0.05)
    specs = RequestPlanner(default_workload(8, 8, 1), ["x"]).take(len(times))
    run = asyncio.run(run_open_loop(times, specs, _NullBackend(log), offered_rate=100.0, duration_s=0.05,
                                    t0_ns=t0))
    assert all(r.sent_s >= r.intended_s for r in run.records)
    lags: list[float] = []
    closed = asyncio.run(run_closed_loop(2, RequestPlanner(default_workload(8, 8, 1), ["x"]).next,
                                         _NullBackend(log), duration_s=0.02, on_sent=lags.append))
    assert len(lags) == closed.dispatched > 0 and set(lags) == {0.0}


@pytest.mark.parametrize("spin_tail_s", [0.0, 0.001])
def test_never_sends_early_on_uvloop_with_or_without_the_tail(spin_tail_s):
    """uvloop's timers are whole milliseconds rounded to nearest: one plain sleep can wake up to 0.5 ms
    before the due time. With or without the busy-wait tail, no request may be sent before it is due."""
    uvloop = pytest.importorskip("uvloop")
    times = np.arange(150) * 0.0034 + 0.0004  # 0.4 ms past whole milliseconds: rounding wakes early
    specs = RequestPlanner(default_workload(8, 8, 1), ["x"]).take(len(times))
    run = uvloop.run(run_open_loop(times, specs, _NullBackend([]), offered_rate=None, duration_s=0.6,
                                   spin_tail_s=spin_tail_s))
    lags = [r.lag_s for r in run.records]
    assert len(lags) == 150 and min(lags) >= 0.0, f"{sum(lag < 0 for lag in lags)} requests sent early"


class _SlowCheckBackend(_NullBackend):
    """Answers at once; its payload check takes ``check_s`` (as a busy checker pool would)."""

    def __init__(self, check_s: float) -> None:
        super().__init__([])
        self.check_s = check_s

    async def check(self, spec, a) -> None:
        await asyncio.sleep(self.check_s)


def test_closed_loop_user_does_not_wait_for_the_payload_check():
    """The check is the tool's overhead, not the user's think time: a user sends its next request when the
    response is complete, and every record still arrives (checked) before the run returns."""
    check_s = 0.2
    run = asyncio.run(run_closed_loop(1, RequestPlanner(default_workload(8, 8, 1), ["x"]).next,
                                      _SlowCheckBackend(check_s), duration_s=0.5))
    recs = sorted(run.records, key=lambda r: r.sent_s)
    assert len(recs) == run.dispatched > 10  # waiting for 0.2 s checks would allow at most 3
    gaps = [b.sent_s - a.done_s for a, b in zip(recs, recs[1:], strict=False)]
    assert max(gaps) < check_s / 2, f"the user waited {max(gaps):.3f} s between a response and its next send"
    assert all(r.outcome == "ok" for r in recs)
