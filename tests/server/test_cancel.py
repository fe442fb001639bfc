"""Abandoned work against the service: a client that disconnects, a deleted video job and a drain each stop
the running generation at its next denoising step; the worker is released within one step of the cancel
and the device seconds spent are exported as wasted (``diffusion_cancelled_seconds_total``).

Times are asserted in units of the step time the step log measured (never a constant), with a stated slack
of two steps for a loaded machine; the generations would run 150 steps when not cancelled."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from diffbench.server.app import create_app

from .conftest import sim_config, sim_params
from .test_monitoring import scrape, val

pytestmark = pytest.mark.slow

IMG = "/v1/images/generations"
STEP = 0.04  # sim seconds per step at 1024x1024
STEPS = 150  # 6 s when not cancelled
SLACK_STEPS = 2  # scheduling of the test's and the server's threads on a loaded machine
LINE = re.compile(
    r"cancelled \((?P<reason>\w+)\) 1024x1024, (?:1 frames, )?150 steps, n=1 at step (?P<step>\d+) of 150: "
    r"step (?P<step_s>[\d.e-]+) s, released (?P<released>[\d.e-]+) s after the cancel, "
    r"(?P<spent>[\d.e-]+) s of device time spent"
)


def _app(**cfg):
    return create_app(sim_config(sim_params(step_s=STEP, text_encode_s=0.0, vae_decode_s=0.0, other_s=0.0), **cfg))


def _step_log(caplog: pytest.LogCaptureFixture, reason: str) -> dict[str, float]:
    lines = [r.getMessage() for r in caplog.records if r.name == "diffbench.server"]
    found = [m for m in map(LINE.search, lines) if m and m["reason"] == reason]
    assert len(found) == 1, lines
    return {k: float(v) for k, v in found[0].groupdict().items() if k != "reason"}


def _wait_running(service, want: int, timeout_s: float = 20.0) -> float:
    deadline = time.perf_counter() + timeout_s
    while service.worker.snapshot()[1] != want:
        assert time.perf_counter() < deadline, f"running never became {want}"
        time.sleep(0.001)
    return time.perf_counter()


def _check_release_and_waste(log: dict[str, float], started: float, gone: float, freed: float, smp: dict,
                             reason: str, round_trip: float = 0.0) -> None:
    """``round_trip``: the time of the request that cancelled (a DELETE), measured by the test."""
    step = log["step_s"]
    assert step >= STEP * 0.5  # the measured step is the simulated one (sleeps to absolute deadlines)
    assert 1 <= log["step"] < STEPS - 100  # stopped early, where the step log says
    # the worker was released within one measured step of the disconnect (+ the stated slack)
    assert freed - gone <= round_trip + (1 + SLACK_STEPS) * step, (freed - gone, round_trip, step)
    assert log["released"] <= (1 + SLACK_STEPS) * step
    # wasted device seconds = the service time of the abandoned request: the steps it ran, measured
    # independently by the test from the worker's start to its release (polled every ms)
    wasted = val(smp, "diffusion_cancelled_seconds_total", model="sim", reason=reason)
    assert wasted == pytest.approx(log["spent"], rel=1e-3, abs=1e-3)
    assert wasted == pytest.approx(freed - started, abs=SLACK_STEPS * step)
    assert log["step"] * STEP <= wasted + 1e-3 <= (log["step"] + 1 + SLACK_STEPS) * step + 1e-3
    assert val(smp, "diffusion_cancel_release_seconds_count", model="sim") == 1
    assert val(smp, "diffusion_cancel_release_seconds_sum", model="sim") == pytest.approx(log["released"], abs=1e-3)
    for other in {"disconnect", "deleted", "drain"} - {reason}:
        assert val(smp, "diffusion_cancelled_seconds_total", model="sim", reason=other) == 0


def test_a_client_that_disconnects_mid_generation_is_cancelled_at_the_next_step(caplog):
    caplog.set_level(logging.INFO, logger="diffbench.server")
    app = _app()
    service = app.state.service
    sent: list[dict] = []
    times: dict[str, float] = {}
    with TestClient(app) as c:
        body = json.dumps({"prompt": "gone", "size": "1024x1024", "num_inference_steps": STEPS}).encode()
        gone = asyncio.Event()

        async def receive() -> dict:
            if not sent:
                sent.append({})
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        async def call() -> None:
            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                     "scheme": "http", "path": IMG, "raw_path": IMG.encode(), "query_string": b"",
                     "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
                     "client": ("127.0.0.1", 1), "server": ("test", 80), "state": {}}
            task = asyncio.ensure_future(app(scope, receive, send))
            times["started"] = await asyncio.to_thread(_wait_running, service, 1)
            await asyncio.sleep(5 * STEP)
            times["gone"] = time.perf_counter()
            gone.set()
            times["freed"] = await asyncio.to_thread(_wait_running, service, 0)
            await asyncio.wait_for(task, 10)

        asyncio.run(call())
        after = c.post(IMG, json={"prompt": "next", "size": "64x64", "num_inference_steps": 2})
        smp = scrape(c)
    starts = [m for m in sent if m.get("type") == "http.response.start"]
    assert starts and starts[0]["status"] == 499
    assert after.status_code == 200  # the worker is free and healthy
    log = _step_log(caplog, "disconnect")
    _check_release_and_waste(log, times["started"], times["gone"], times["freed"], smp, "disconnect")
    assert val(smp, "diffusion_requests_total", model="sim", outcome="cancelled", status="499", traffic="user") == 1


def test_deleting_a_running_video_job_cancels_it_at_the_next_step(caplog):
    caplog.set_level(logging.INFO, logger="diffbench.server")
    app = _app()
    service = app.state.service
    with TestClient(app) as c:
        job = c.post("/v1/videos", json={"prompt": "long", "size": "1024x1024", "num_frames": 1,
                                         "num_inference_steps": STEPS}).json()
        started = _wait_running(service, 1)
        time.sleep(5 * STEP)
        gone = time.perf_counter()
        deleted = c.delete(f"/v1/videos/{job['id']}")
        round_trip = time.perf_counter() - gone
        freed = _wait_running(service, 0)
        assert deleted.status_code == 200 and deleted.json()["status"] == "cancelled"
        assert c.get(f"/v1/videos/{job['id']}").status_code == 404
        done = c.post("/v1/videos", json={"prompt": "next", "size": "64x64", "num_frames": 1,
                                          "num_inference_steps": 2}).json()
        deadline = time.perf_counter() + 20
        while c.get(f"/v1/videos/{done['id']}").json()["status"] != "completed":
            assert time.perf_counter() < deadline
            time.sleep(0.02)
        smp = scrape(c)
    log = _step_log(caplog, "deleted")
    _check_release_and_waste(log, started, gone, freed, smp, "deleted", round_trip)
    assert val(smp, "diffusion_requests_total", model="sim", outcome="cancelled", status="499", traffic="user") == 1
    assert val(smp, "diffusion_requests_total", model="sim", outcome="ok", status="200", traffic="user") == 1


def test_a_drain_cancels_the_running_job_at_its_next_step_instead_of_abandoning_it(caplog):
    caplog.set_level(logging.INFO, logger="diffbench.server")
    drain_s = 0.3
    app = _app(drain_s=drain_s)
    service = app.state.service
    with TestClient(app) as c:
        job = c.post("/v1/videos", json={"prompt": "long", "size": "1024x1024", "num_frames": 1,
                                         "num_inference_steps": STEPS}).json()
        _wait_running(service, 1)
        stop = time.perf_counter()  # leaving the block runs the lifespan shutdown: Service.stop()
    stopped_s = time.perf_counter() - stop
    log = _step_log(caplog, "drain")
    assert not service.worker.running  # released, not left on a daemon thread
    # the drain time, then at most one step (+ slack) to the next step boundary
    assert drain_s <= stopped_s <= drain_s + (1 + SLACK_STEPS) * log["step_s"], stopped_s
    assert log["released"] <= (1 + SLACK_STEPS) * log["step_s"]
    rec = app.state.video_jobs.get(job["id"]).job
    assert rec.status == "failed" and rec.error is not None and rec.error.code == "unavailable"
    smp = {(s.name, frozenset(s.labels.items())): s.value
           for fam in text_string_to_metric_families(service.exporter.render()[0].decode()) for s in fam.samples}
    wasted = val(smp, "diffusion_cancelled_seconds_total", model="sim", reason="drain")
    assert wasted == pytest.approx(log["spent"], rel=1e-3, abs=1e-3)
    assert log["step"] * STEP <= wasted + 1e-3


def test_a_tiny_flux_job_deleted_mid_generation_stops_at_the_next_scheduler_step(caplog):
    """The diffusers path: the instrumentation's step hook stops the real pipeline at its next step."""
    pytest.importorskip("diffusers")
    from diffbench.engines.registry import EngineConfig
    from diffbench.server.config import ServerConfig

    caplog.set_level(logging.INFO, logger="diffbench.server")
    app = create_app(ServerConfig(engine=EngineConfig(model="tiny-flux"), warmup_sizes=("256x256",)))
    service = app.state.service
    steps = 200
    with TestClient(app) as c:
        job = c.post("/v1/videos", json={"prompt": "long", "size": "256x256", "num_frames": 1,
                                         "num_inference_steps": steps}).json()
        started = _wait_running(service, 1)
        time.sleep(1.0)  # inside the denoising loop (warm: the text encode takes milliseconds)
        gone = time.perf_counter()
        assert c.delete(f"/v1/videos/{job['id']}").json()["status"] == "cancelled"
        round_trip = time.perf_counter() - gone  # the DELETE's own time: the cancel lands inside it
        freed = _wait_running(service, 0)
        smp = scrape(c)
    line = re.compile(r"cancelled \(deleted\) 256x256, 200 steps, n=1 at step (\d+) of 200: step ([\d.e-]+) s, "
                      r"released ([\d.e-]+) s after the cancel, ([\d.e-]+) s of device time spent")
    found = [m for r in caplog.records if (m := line.search(r.getMessage()))]
    assert len(found) == 1, [r.getMessage() for r in caplog.records]
    at, step, spent = int(found[0][1]), float(found[0][2]), float(found[0][4])
    assert 1 <= at < steps - 20, at  # stopped in the loop, long before the end, at the step the log names
    assert freed - gone <= round_trip + (1 + SLACK_STEPS) * step, (freed - gone, round_trip, step)
    assert float(found[0][3]) <= (1 + SLACK_STEPS) * step  # the server's own cancel -> release
    wasted = val(smp, "diffusion_cancelled_seconds_total", model="tiny-flux", reason="deleted")
    assert wasted == pytest.approx(spent, rel=1e-3, abs=1e-3)
    assert wasted == pytest.approx(freed - started, abs=SLACK_STEPS * step + 0.1)
