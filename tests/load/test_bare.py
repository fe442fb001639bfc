"""The bare reference client (diffbench.load.client.bare) against the in-test fake server: bookkeeping only,
never timed."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from diffbench.load.client.bare import BareResult, run_bare
from diffbench.load.client.dialects import IMAGES_PATH
from diffbench.load.client.runners import FULL_GC_THRESHOLD, quiet_gc
from diffbench.load.summary import summarize_rate
from diffbench.queueing.schedules import constant

from .conftest import MIX_CYCLE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
BODY = json.dumps({"prompt": "p", "n": 1, "size": "16x16", "response_format": "b64_json"}).encode()


def _run(url: str, schedule: np.ndarray, timeout_s: float = 5.0, **kw) -> BareResult:
    return asyncio.run(run_bare(url + IMAGES_PATH, schedule, BODY, timeout_s, **kw))


def test_one_record_per_arrival_sorted_with_ordered_timestamps(fake):
    schedule = constant(50.0, 1.0)
    res = _run(fake.url("ok"), schedule, warmup_s=constant(20.0, 0.1))
    assert fake.requests == 50 + 2  # the warm-up's two requests reached the server, and are not returned
    assert [r.id for r in res.records] == list(range(50))
    assert [r.intended_s for r in res.records] == schedule.tolist()
    assert res.n_ok == 50 and res.n_failed == 0
    for r in res.records:
        assert r.status == 200
        assert r.intended_s <= r.sent_s <= r.first_byte_s <= r.done_s <= res.elapsed_s
    assert (res.lag_s() >= 0).all() and res.lag_s().size == 50
    assert res.latency_from_send_s().size == 50


def test_failures_are_counted_and_payloads_never_checked(fake):
    # One request per mode of the cycle: the fake serves the modes in arrival order, so each appears once.
    cycle = list(MIX_CYCLE)
    res = _run(fake.url("mix"), constant(40.0, len(cycle) / 40.0), timeout_s=1.0)
    assert len(res.records) == len(cycle)
    outcomes = sorted(r.outcome for r in res.records)
    # 2xx bodies are success for the bare client, even a truncated JSON, a non-image or a wrong size
    two_xx = sum(m in ("ok", "badjson", "badimg", "wrongsize") for m in cycle)
    expected = (["ok"] * two_xx + ["http_error"] * sum(m in ("r429", "r500") for m in cycle)
                + ["timeout"] * cycle.count("stall") + ["connection_error"] * cycle.count("reset"))
    assert outcomes == sorted(expected)
    assert sorted(r.status for r in res.records if r.status is not None) == sorted(
        [200] * two_xx + [429] * cycle.count("r429") + [500] * cycle.count("r500"))
    assert res.n_failed == len(cycle) - two_xx
    # the same records through the shared summary: the one definition both clients are judged by
    s = summarize_rate(res.to_request_records(rate=40.0), offered_rate=40.0, duration_s=len(cycle) / 40.0)
    assert s.n_ok == two_xx and s.outcomes["timeout"] == 1 and s.outcomes["connection_error"] == 1
    assert s.n_sent == len(cycle)


def test_connection_refused_is_data_not_an_exception():
    import socket

    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        res = _run(f"http://127.0.0.1:{port}", constant(10.0, 0.3))
    assert len(res.records) == 3 and res.n_ok == 0
    assert all(r.outcome == "connection_error" and r.error for r in res.records)


def test_full_collections_are_kept_out_of_the_window_and_restored(fake):
    import gc

    before, seen = gc.get_threshold(), []
    with quiet_gc():  # the runners' window, which the bare peer uses too
        seen.append((gc.get_threshold(), gc.get_freeze_count() > 0))
    assert seen == [((before[0], before[1], FULL_GC_THRESHOLD), True)]
    _run(fake.url("ok"), constant(20.0, 0.2))
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_bad_timeout_is_refused():
    with pytest.raises(ValueError, match="timeout_s"):
        _run("http://127.0.0.1:9", constant(1.0, 1.0), timeout_s=0)


def test_never_sends_early_on_uvloop(fake):
    """uvloop's timers are whole milliseconds rounded to nearest, so one sleep can wake before the due time;
    the peer must re-sleep, or its lag (and every ratio against it) would look better than on schedule."""
    uvloop = pytest.importorskip("uvloop")
    # offsets 0.4 ms past whole milliseconds: the sleep that rounds to nearest wakes ~0.4 ms early
    schedule = np.arange(150) * 0.0034 + 0.0004
    res = uvloop.run(run_bare(fake.url("ok"), schedule, BODY, 5.0))
    lag = res.lag_s()
    assert lag.size == 150 and lag.min() >= 0.0, f"{int((lag < 0).sum())} requests sent early"
