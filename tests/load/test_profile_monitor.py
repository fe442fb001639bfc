"""run_profile feeds a RowMonitor (the live progress) and honours --num-requests, against the fake server."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from diffbench.load.client import HttpBackend, RequestPlanner, Target, default_workload
from diffbench.load.client.profile import ProfileConfig, run_profile
from diffbench.load.client.runners import run_open_loop
from diffbench.queueing.schedules import ScheduleSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


class _Monitor:
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.sent = 0
        self.records = 0

    def begin(self, label: str, planned: int | None, window_s: float) -> None:
        self.events.append(("begin", label, planned, window_s))

    def on_sent(self, lag_s: float) -> None:
        self.sent += 1

    def on_record(self, rec) -> None:
        self.records += 1

    def end(self) -> None:
        self.events.append(("end",))


def test_monitor_sees_every_row_and_record(fake):
    fake.delay_s = 0.01
    mon = _Monitor()

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("ok"), timeout_s=5.0))
        await backend.start()
        try:
            planner = RequestPlanner(default_workload(64, 64, 2), ["x"], seed=0)
            cfg = ProfileConfig(rates=[20.0, 40.0], duration_s=30.0, schedule=ScheduleSpec(kind="constant"),
                              num_requests=6, warmup_per_shape=0)
            return await run_profile(cfg, backend, planner, monitor=mon)
        finally:
            await backend.close()

    sweep = asyncio.run(go())
    # the count stop: 6 arrivals per rate, the window ends at the 7th (6 / rate seconds)
    assert [r.n for r in sweep.result.rates] == [6, 6]
    assert [r.duration_s for r in sweep.result.rates] == [pytest.approx(6 / 20), pytest.approx(6 / 40)]
    assert mon.events == [("begin", "20 req/s", 6, pytest.approx(6 / 20)), ("end",),
                          ("begin", "40 req/s", 6, pytest.approx(6 / 40)), ("end",)]
    assert mon.records == 12
    if "on_sent" in inspect.signature(run_open_loop).parameters:  # the runner hook (issue 10 dispatch branch)
        assert mon.sent == 12
