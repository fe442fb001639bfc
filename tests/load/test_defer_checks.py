"""``--defer-checks``: payload checks held until a run's last timed answer (checker.py hold/release and the
runners' hold), the verdicts unchanged, released at once on a stop."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from diffbench.load.client import (
    HttpBackend,
    RequestPlanner,
    RunControl,
    Target,
    default_workload,
    run_closed_loop,
    run_open_loop,
)
from diffbench.load.client import checker as checker_mod
from diffbench.load.client.base import Attempt
from diffbench.load.client.checker import MAX_TASK_JOBS, PayloadChecker
from diffbench.load.client.payload import check_images
from diffbench.queueing.schedules import constant

from .test_client_checker import _bodies

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_held_checks_wait_for_release_and_keep_the_one_by_one_verdicts():
    bodies = _bodies() * 10  # 400 checks: more than one task of a released hold
    expected = [check_images(*b) for b in bodies]

    async def go():
        checker = PayloadChecker(2)
        await checker.start()
        try:
            checker.hold()
            tasks = [asyncio.ensure_future(checker.run(check_images, *b, size=len(b[0]))) for b in bodies]
            await asyncio.sleep(0.3)  # far above the 20 ms window: nothing may have gone out
            held = (checker.batches, sum(t.done() for t in tasks), checker.held_max)
            checker.release()
            got = await asyncio.gather(*tasks)
            return held, got, checker.batches, checker.pids
        finally:
            await checker.close()

    (batches_held, done_held, held_max), got, batches, pids = asyncio.run(go())
    assert (batches_held, done_held, held_max) == (0, 0, len(bodies))
    assert [(v.ok, v.error) for v in got] == [(v.ok, v.error) for v in expected]
    assert batches >= -(-len(bodies) // MAX_TASK_JOBS)  # split so that every worker gets a share
    assert {v.checked_pid for v in got} <= set(pids)


def test_a_hold_over_its_byte_budget_goes_out_and_holding_goes_on():
    bodies = _bodies()[:6]
    sizes = [len(b[0]) for b in bodies]
    budget = sizes[0] + sizes[1]  # reached by the second body

    async def go():
        checker = PayloadChecker(1, hold_bytes=budget)
        await checker.start()
        try:
            checker.hold()
            first = [asyncio.ensure_future(checker.run(check_images, *b, size=len(b[0]))) for b in bodies[:2]]
            await asyncio.gather(*first)  # the budget sent them while holding
            rest = [asyncio.ensure_future(checker.run(check_images, *b, size=len(b[0]))) for b in bodies[2:3]]
            await asyncio.sleep(0.2)
            still = (checker.holding, rest[0].done())
            checker.release()
            return still, await asyncio.gather(*first, *rest)
        finally:
            await checker.close()

    still, got = asyncio.run(go())
    assert still == (True, False)
    assert [v.error for v in got] == [check_images(*b).error for b in bodies[:3]]


def _hand_overs(monkeypatch) -> list[float]:
    """Record the ``time.perf_counter`` of every task handed to the check workers."""
    seen: list[float] = []
    real = PayloadChecker._send

    def spy(self, batch):
        seen.append(time.perf_counter())
        return real(self, batch)

    monkeypatch.setattr(checker_mod.PayloadChecker, "_send", spy)
    return seen


def _last_answer(run) -> float:
    """The last timed answer of ``run`` on ``time.perf_counter`` (seconds)."""
    return run.t0_ns * 1e-9 + max(r.done_s for r in run.records if r.done_s is not None)


@pytest.mark.parametrize("defer", [True, False])
def test_open_loop_hands_no_check_over_before_its_last_answer(fake, monkeypatch, defer):
    seen = _hand_overs(monkeypatch)

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("mix"), timeout_s=0.5, defer_checks=defer))
        await backend.start()
        try:
            times = constant(40.0, 1.0)
            planner = RequestPlanner(default_workload(64, 48, 2), ["a cat"], seed=1)
            return await run_open_loop(times, planner.take(len(times)), backend, offered_rate=40.0,
                                       duration_s=1.0)
        finally:
            await backend.close()

    run = asyncio.run(go())
    kinds = {r.outcome for r in run.records}
    assert {"ok", "invalid_payload"} <= kinds  # decoded answers, good and bad, were checked
    assert not any("not checked" in (r.error or "") for r in run.records)
    assert seen
    if defer:
        assert min(seen) >= _last_answer(run)
    else:  # without the hold the checks run beside the measurement (the test fails if it never did)
        assert min(seen) < _last_answer(run)


def test_closed_loop_holds_its_checks_until_the_users_stop(fake, monkeypatch):
    seen = _hand_overs(monkeypatch)

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("ok"), timeout_s=5.0, defer_checks=True))
        await backend.start()
        try:
            planner = RequestPlanner(default_workload(64, 48, 2), ["a cat"], seed=1)
            return await run_closed_loop(2, planner.next, backend, duration_s=0.6)
        finally:
            await backend.close()

    run = asyncio.run(go())
    assert run.records and all(r.outcome == "ok" for r in run.records)
    assert min(seen) >= _last_answer(run)


def test_a_stop_releases_the_held_checks_and_the_drain_checks_them(fake, monkeypatch):
    seen = _hand_overs(monkeypatch)
    fake.delay_s = 0.0
    stopped: list[float] = []

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("ok"), timeout_s=30.0, defer_checks=True))
        await backend.start()
        control = RunControl()
        loop = asyncio.get_running_loop()
        sent = 0

        def stop() -> None:
            stopped.append(time.perf_counter())
            control.request_stop()

        def on_sent(_lag: float) -> None:  # stop once 6 requests went out and had time to be answered
            nonlocal sent
            sent += 1
            if sent == 6:
                loop.call_later(0.3, stop)

        try:
            times = constant(20.0, 30.0)
            planner = RequestPlanner(default_workload(64, 48, 2), ["a cat"], seed=1)
            return await run_open_loop(times, planner.take(len(times)), backend, offered_rate=20.0,
                                       duration_s=30.0, control=control, on_sent=on_sent, drain_s=30.0)
        finally:
            await backend.close()

    run = asyncio.run(go())
    assert run.interrupted and stopped
    done = [r for r in run.records if r.outcome != "cancelled"]
    assert len(done) >= 6 and all(r.outcome == "ok" for r in done)  # checked in the drain, not lost
    assert not any("not checked" in (r.error or "") for r in run.records)
    assert stopped[0] <= min(seen) < stopped[0] + 20.0  # held until the stop, released by it (not by the schedule's end)


def test_the_flag_reaches_the_target_and_the_reported_check_mode():
    from typer.testing import CliRunner

    from diffbench.cli.main import app
    from diffbench.load.spec import LoadSpec

    target = LoadSpec(defer_checks=True).target("http://127.0.0.1:1")
    assert target.defer_checks and not LoadSpec().target("http://127.0.0.1:1").defer_checks
    assert "held until each run's last timed answer" in HttpBackend(target).check_mode
    assert "held until" not in HttpBackend(LoadSpec().target("http://127.0.0.1:1")).check_mode
    assert "--defer-checks" in CliRunner().invoke(app, ["load", "--help"], terminal_width=200).output


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc")
def test_a_large_answer_waiting_for_its_check_is_not_kept_in_memory(tmp_path):
    # a body kept alive while its check waits is memory the next answer cannot reuse: each later multi-MB
    # answer is then read into fresh pages, page faults inside the timed region
    mb = 1 << 20

    async def go():
        backend = HttpBackend(Target(base_url="http://127.0.0.1:1", timeout_s=1.0, defer_checks=True))
        await backend.start()
        try:
            assert backend.checker is not None
            backend.checker._dir = str(tmp_path)
            backend.hold_checks()
            spec = RequestPlanner(default_workload(64, 48, 1), ["a cat"], seed=1).next()
            base = _rss_bytes()
            a = Attempt(body=os.urandom(96 * mb))  # written to memory: resident
            grown = _rss_bytes() - base
            task = asyncio.ensure_future(backend.check(spec, a))
            for _ in range(200):  # until the body is in its file (the checks are held)
                await asyncio.sleep(0.01)
                if any(p.stat().st_size == 96 * mb for p in tmp_path.iterdir()):
                    break
            held = _rss_bytes() - base
            backend.release_checks()
            await task
            return grown, held, a
        finally:
            await backend.close()

    grown, held, a = asyncio.run(go())
    assert grown >= 90 * mb
    assert held < 32 * mb  # freed once written (before: the caller's reference kept all 96 MB)
    assert a.outcome == "invalid_payload"  # random bytes are no answer: the check still ran


def test_a_body_that_cannot_go_to_a_file_is_pickled_and_still_checked(monkeypatch):
    # a full /dev/shm (ENOSPC) used to fail the check; the body now goes pickled and gets its real verdict
    def full(body, directory):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checker_mod, "_write_body", full)
    bodies = _bodies()[:5]

    async def go():
        checker = PayloadChecker(1, file_bytes=1)  # every body would go through a file
        await checker.start()
        try:
            got = await asyncio.gather(*(checker.run(check_images, *b, size=len(b[0])) for b in bodies))
            return got, checker.files_written
        finally:
            await checker.close()

    got, written = asyncio.run(go())
    assert written == 0
    assert [(v.ok, v.error) for v in got] == [(check_images(*b).ok, check_images(*b).error) for b in bodies]
