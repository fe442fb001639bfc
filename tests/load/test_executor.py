"""Executors: the WorkerPool partition (exact union of the one-process schedule), end-to-end runs with two
worker processes against the fake server (tests/load/conftest.py), stop, and a killed worker."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from diffbench.load.client import (
    HttpBackend,
    JsonlSink,
    RequestPlanner,
    RunControl,
    Target,
    default_workload,
    read_jsonl,
)
from diffbench.load.client.executor import (
    InProcess,
    WorkerDied,
    WorkerPool,
    split_open,
    split_users,
)
from diffbench.load.client.worker import SpecShare
from diffbench.load.summary import summarize_rate
from diffbench.queueing.schedules import ScheduleSpec, build_schedule, constant

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def _planner(seed: int = 1) -> RequestPlanner:
    wl = default_workload(64, 48, 2)
    wl = wl.model_copy(update={"shapes": [*wl.shapes, wl.shapes[0].model_copy(update={"width": 32, "weight": 2})]})
    return RequestPlanner(wl, ["a cat", "a dog", "a fox"], seed=seed)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
def test_union_of_worker_schedules_is_the_one_process_schedule(kind, workers):
    spec = ScheduleSpec(kind=kind, rate=40.0, duration_s=3.0, burstiness=0.5)
    one_times = build_schedule(spec, seed=np.random.default_rng([7, 0]))
    one_specs = _planner().take(len(one_times))
    again = build_schedule(spec, seed=np.random.default_rng([7, 0]))  # what the parent builds, same seed
    shares = split_open(again, _planner().stream(len(again)), workers)
    assert len(shares) == workers
    union = sorted(((s.index, t, s) for times, specs in shares for t, s in zip(times, specs, strict=True)),
                   key=lambda x: x[0])
    assert [u[0] for u in union] == list(range(len(one_times)))  # every request once
    assert np.array_equal(np.array([u[1] for u in union]), one_times)  # bit-identical intended times
    assert [u[2] for u in union] == one_specs  # and the same request specs
    for w, (times, specs) in enumerate(shares):
        assert all(s.index % workers == w for s in specs)
        assert np.all(np.diff(times) >= 0)  # each worker's share stays sorted


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_closed_loop_id_spaces_are_disjoint_and_specs_are_the_one_process_ones(workers):
    reference = _planner(5).take(60)
    got = {}
    for w in range(workers):
        share = SpecShare(_planner(5), w, workers)
        for j in range(60 // workers):
            s = share()
            assert s.index == j * workers + w
            got[s.index] = s
        assert share.drawn == (60 // workers) * workers
    assert len(got) == (60 // workers) * workers
    assert all(got[i] == reference[i] for i in got)
    assert split_users(7, 3) == [3, 2, 2] and sum(split_users(5, 2)) == 5


def _target(url: str, timeout: float = 5.0) -> Target:
    return Target(base_url=url, timeout_s=timeout, poll_interval_s=0.05)


def test_two_workers_return_every_record_once_with_the_right_outcomes(fake, tmp_path):
    """16 requests cycle twice through ok, 429, 500, bad JSON, bad image, wrong size, reset, stall (as the
    in-process runner test); then a closed loop on the same pool."""
    times = constant(20.0, 0.8)
    planner = _planner()
    sink = JsonlSink(tmp_path / "r.jsonl")
    seen, lags = [], []

    async def go():
        async with WorkerPool(_target(fake.url("mix"), timeout=0.5), workers=2, merge="hdr") as pool:
            assert len(pool.processes) == 2 and set(pool.loop_names) <= {"uvloop", "asyncio"}
            run = await pool.open_loop(times, planner.stream(len(times)), offered_rate=20.0, duration_s=0.8,
                                       sink=sink, on_record=seen.append, on_sent=lags.append)
            fake.reset_state()
            closed = await pool.closed_loop(3, planner, duration_s=0.4)
            return run, closed

    run, closed = asyncio.run(go())
    sink.close()
    recs = run.records
    assert [r.id for r in recs] == list(range(16)) and run.planned == run.dispatched == 16
    assert not run.interrupted and run.duration_s == 0.8
    assert np.array_equal(np.array([r.intended_s for r in recs]), times)
    assert all(r.sent_s >= r.intended_s for r in recs)  # one shared t0: no worker sends early
    count = {k: sum(r.outcome == k for r in recs) for k in
             ("ok", "rejected", "http_error", "invalid_payload", "connection_error", "timeout")}
    assert count == {"ok": 2, "rejected": 2, "http_error": 2, "invalid_payload": 6,
                     "connection_error": 2, "timeout": 2}
    assert sorted(r.id for r in seen) == list(range(16)) and len(lags) == 16
    assert sorted(r.id for r in read_jsonl(tmp_path / "r.jsonl")) == list(range(16))
    assert run.hdr is not None and run.hdr.quantities["lag"].n == 2  # histograms of the ok requests
    s = summarize_rate(run.records, offered_rate=20.0, duration_s=run.duration_s)
    assert s.outcomes["ok"] == 2 and s.n == 16

    ids = [r.id for r in closed.records]
    assert len(set(ids)) == len(ids) == closed.dispatched and min(ids) >= 16
    assert closed.planned == len(closed.records) and closed.users == 3 and not closed.interrupted
    assert planner.next().index > max(ids)  # the parent's planner moved past every id the workers used


def test_stop_reaches_the_workers_and_the_partial_result_is_valid(fake, tmp_path):
    fake.delay_s = 0.3
    control = RunControl()
    seen = []

    def on_record(rec):
        seen.append(rec)
        if len(seen) == 10:
            control.request_stop("test")

    times = constant(50.0, 5.0)
    sink = JsonlSink(tmp_path / "r.jsonl")

    async def go():
        async with WorkerPool(_target(fake.url("ok")), workers=2) as pool:
            return await pool.open_loop(times, _planner().stream(len(times)), offered_rate=50.0, duration_s=5.0,
                                        drain_s=0.05, control=control, on_record=on_record, sink=sink)

    run = asyncio.run(go())
    sink.close()
    assert run.interrupted and run.dispatched < run.planned == len(times)
    assert {r.outcome for r in run.records} == {"ok", "cancelled"}
    assert sum(r.outcome == "cancelled" for r in run.records) >= 5  # ~50 req/s x 0.3 s in flight
    assert len(run.records) == run.dispatched == len(read_jsonl(tmp_path / "r.jsonl")) == len(seen)
    assert len({r.id for r in run.records}) == len(run.records)
    assert run.duration_s < 5.0
    s = summarize_rate(run.records, offered_rate=50.0, duration_s=run.duration_s)
    assert s.n == run.dispatched


def test_a_killed_worker_is_reported_not_hidden(fake, tmp_path):
    fake.delay_s = 0.05
    times = constant(20.0, 3.0)
    sink = JsonlSink(tmp_path / "r.jsonl")
    state = {}

    async def go():
        pool = WorkerPool(_target(fake.url("ok")), workers=2)
        await pool.start()
        state["pool"] = pool

        def on_record(rec):
            if not state.get("killed"):
                state["killed"] = True
                pool.processes[1].kill()

        try:
            await pool.open_loop(times, _planner().stream(len(times)), offered_rate=20.0, duration_s=3.0,
                                 on_record=on_record, sink=sink, drain_s=0.1)
        finally:
            state["after"] = None
            with pytest.raises(WorkerDied, match="before the run started|exit code"):
                await pool.open_loop(times[:2], _planner().take(2), offered_rate=20.0, duration_s=3.0)
            await pool.close()

    with pytest.raises(WorkerDied, match=r"load worker 1 exited with exit code -9 .* of 30 planned") as info:
        asyncio.run(go())
    sink.close()
    assert info.value.exit_code == 1
    assert len(read_jsonl(tmp_path / "r.jsonl")) >= 1  # what came back is kept


def test_in_process_executor_is_the_runner(fake):
    times = constant(20.0, 0.3)

    async def go():
        backend = HttpBackend(_target(fake.url("ok")))
        await backend.start()
        try:
            ex = InProcess(backend)
            run = await ex.open_loop(times, _planner().take(len(times)), offered_rate=20.0, duration_s=0.3)
            closed = await ex.closed_loop(1, _planner(), duration_s=0.2)
        finally:
            await backend.close()
        return run, closed

    run, closed = asyncio.run(go())
    assert [r.id for r in run.records] == list(range(6)) and {r.outcome for r in run.records} == {"ok"}
    assert closed.records and [r.id for r in closed.records] == list(range(len(closed.records)))


def test_pool_rejects_bad_arguments():
    from diffbench.errors import UsageError

    with pytest.raises(UsageError, match="--workers must be >= 1"):
        WorkerPool(_target("http://127.0.0.1:9"), workers=0)
    with pytest.raises(UsageError, match="merge must be"):
        WorkerPool(_target("http://127.0.0.1:9"), workers=2, merge="median")  # type: ignore[arg-type]
    pool = WorkerPool(_target("http://127.0.0.1:9"), workers=2)
    with pytest.raises(UsageError, match="--max-inflight 1 is below --workers 2"):
        asyncio.run(pool.open_loop(constant(1.0, 1.0), _planner().take(1), offered_rate=1.0, duration_s=1.0,
                                   max_inflight=1))


def test_eventloop_run_says_which_loop_ran(monkeypatch):
    import importlib.util

    from diffbench.errors import MissingDependencyError
    from diffbench.load.client import eventloop

    async def kind():
        return eventloop.running_loop_name()

    assert eventloop.run(kind(), use_uvloop=False) == "asyncio" and eventloop.loop_name() == "asyncio"
    expected = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    assert eventloop.run(kind()) == expected and eventloop.loop_name() == expected
    monkeypatch.setattr(eventloop, "uvloop_available", lambda: False)
    assert eventloop.run(kind()) == "asyncio"  # auto falls back
    with pytest.raises(MissingDependencyError, match="'fast' extra"):
        eventloop.run(kind(), use_uvloop=True)


def test_a_job_larger_than_the_pipe_buffer_reaches_the_workers(fake):
    """Regression: uvloop makes a watched fd non-blocking, and a multi-MB job then arrived in pieces (a
    partial read was taken for a closed pipe and the worker quit). 2,000 specs with 2 kB prompts (~4 MB)
    on a run stopped before it starts: the workers must take the job and return an empty, valid result."""
    from diffbench.load.client import eventloop

    wl = default_workload(8, 8, 1)
    specs = RequestPlanner(wl, ["x" * 2048]).take(2000)
    times = np.linspace(0.0, 20.0, 2000, endpoint=False)

    async def go():
        control = RunControl()
        control.request_stop("test")
        async with WorkerPool(_target(fake.url("ok")), workers=2) as pool:
            a = await pool.open_loop(times, specs, offered_rate=100.0, duration_s=20.0, control=control)
            b = await pool.open_loop(times, specs, offered_rate=100.0, duration_s=20.0, control=control)
        return a, b

    for run in eventloop.run(go()):  # the parent on uvloop too, where installed
        assert run.interrupted and run.planned == 2000 and run.dispatched == 0 and run.records == []


def test_sweep_runs_on_a_worker_pool_and_auto_merge_threshold(fake):
    from diffbench.load.client.executor import AUTO_HDR_THRESHOLD
    from diffbench.load.client.profile import ProfileConfig, run_profile

    auto = WorkerPool(_target(fake.url("ok")), workers=2)
    assert not auto.uses_hdr(AUTO_HDR_THRESHOLD) and auto.uses_hdr(AUTO_HDR_THRESHOLD + 1)
    assert not auto.uses_hdr(None)  # closed loop: the count is not known ahead
    assert WorkerPool(_target(fake.url("ok")), workers=2, merge="hdr").uses_hdr(1)
    assert not WorkerPool(_target(fake.url("ok")), workers=2, merge="exact").uses_hdr(10**9)

    async def go():
        backend = HttpBackend(_target(fake.url("ok")))
        await backend.start()
        try:
            async with WorkerPool(_target(fake.url("ok")), workers=2) as pool:
                cfg = ProfileConfig(rates=[10.0, 20.0], duration_s=0.5, seed=3)
                return await run_profile(cfg, backend, _planner(), executor=pool)
        finally:
            await backend.close()

    sweep = asyncio.run(go())
    rows = sweep.result.rates
    assert [r.offered_rate for r in rows] == [10.0, 20.0]
    assert all(r.outcomes.get("ok") == r.n and r.n > 0 for r in rows)
    assert sweep.warmup.n == 2  # in the parent, one per shape


def test_workers_may_start_their_own_payload_check_processes(fake):
    """Regression: daemonic processes may not have children, and the backend checks large payloads in a
    process pool; a 400x400 incompressible PNG (~640 kB of base64) is checked there inside each worker."""
    times = constant(5.0, 0.8)
    planner = RequestPlanner(default_workload(400, 400, 2), ["a cat"], seed=1)

    async def go():
        async with WorkerPool(_target(fake.url("noise"), timeout=20.0), workers=2) as pool:
            return await pool.open_loop(times, planner.take(len(times)), offered_rate=5.0, duration_s=0.8)

    run = asyncio.run(go())
    assert [r.outcome for r in run.records] == ["ok"] * 4, [r.error for r in run.records]


_EXIT_SCRIPT = """
import asyncio, sys
from diffbench.load.client import Target, RequestPlanner, default_workload
from diffbench.load.client.executor import WorkerPool
from diffbench.queueing.schedules import constant

async def main(mode):
    pool = WorkerPool(Target(base_url="http://127.0.0.1:9", timeout_s=1.0), workers=2)
    await pool.start()
    print(" ".join(str(p.pid) for p in pool.processes), flush=True)
    if mode == "run":  # a long run, killed from outside
        t = constant(5.0, 60.0)
        await pool.open_loop(t, RequestPlanner(default_workload(8, 8, 1), ["x"]).take(len(t)),
                             offered_rate=5.0, duration_s=60.0)

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))  # "forget": the pool is never closed
"""


def _gone(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie waiting for its (new) parent to reap it has exited too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("mode", ["forget", "run"])
def test_workers_never_outlive_their_parent(tmp_path, mode):
    """A pool never closed does not hang the interpreter's exit; a parent killed mid-run (SIGKILL, no
    clean-up at all) leaves no worker behind: each sees its pipe close and exits."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "pool_exit.py"
    script.write_text(_EXIT_SCRIPT)
    env = dict(os.environ)  # PYTHONPATH kept: the workers run this worktree's code
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    if mode == "forget":
        assert proc.wait(timeout=30) == 0
    else:
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids)


def test_a_worker_that_cannot_open_its_backend_is_named(fake):
    async def go():
        pool = WorkerPool(_target(fake.url("ok")), workers=2, backend_options={"no_such_option": 1})
        try:
            await pool.start()
        finally:
            await pool.close()

    with pytest.raises(WorkerDied, match=r"load worker 0 failed: TypeError.*no_such_option.*nothing was measured"):
        asyncio.run(go())
