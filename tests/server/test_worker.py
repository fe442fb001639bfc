"""One generation at a time per device, FIFO order, and the worker surviving failures (OOM included)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from diffbench.engines.base import GenerationRequest
from diffbench.errors import DeviceOutOfMemory
from diffbench.server.app import create_app
from diffbench.server.worker import as_out_of_memory

from .conftest import sim_config, sim_params

URL = "/v1/images/generations"


def _wait_queue(client: TestClient, length: int) -> None:
    deadline = time.perf_counter() + 10
    while client.get("/health").json()["queue_length"] < length:
        assert time.perf_counter() < deadline, "request never reached the queue"
        time.sleep(0.01)


def test_fifo_one_at_a_time_and_queue_cap(gated_engine):
    with (
        TestClient(create_app(sim_config(max_queue=3), engine=gated_engine)) as c,
        ThreadPoolExecutor(8) as pool,
    ):
        futures = [pool.submit(c.post, URL, json={"prompt": "p0", "size": "32x32"})]
        assert gated_engine.entered.wait(10)
        for i in range(1, 4):
            futures.append(pool.submit(c.post, URL, json={"prompt": f"p{i}", "size": "32x32"}))
            _wait_queue(c, i)
        full = c.post(URL, json={"prompt": "late", "size": "32x32"})
        assert full.status_code == 429 and "queue is full" in full.json()["error"]["message"]
        assert int(full.headers["Retry-After"]) >= 1
        gated_engine.gate.set()
        assert [f.result(timeout=10).status_code for f in futures] == [200] * 4
    assert gated_engine.prompts == ["p0", "p1", "p2", "p3"]
    assert gated_engine.max_active == 1


def test_injected_oom_fails_one_request_and_the_next_succeeds():
    cfg = sim_config(sim_params(fail_above_pixels=64 * 64))
    with TestClient(create_app(cfg)) as c:
        big = c.post(URL, json={"prompt": "a", "size": "128x64"})
        assert big.status_code == 507
        err = big.json()["error"]
        assert err["code"] == "out_of_memory"
        assert err["message"].startswith("out of memory at 128x64, 8 steps, n=1")
        small = c.post(URL, json={"prompt": "a", "size": "64x64"})
        assert small.status_code == 200
        also_oom = c.post(URL, json={"prompt": "a", "size": "64x64", "n": 2})  # 2 × 64² pixels > limit
        assert also_oom.status_code == 507
        health = c.get("/health")
        assert health.status_code == 200
        assert health.json()["failed"] == 2 and health.json()["completed"] == 1
        metrics = c.get("/metrics").text
        assert 'diffusion_requests_total{model="sim",outcome="oom",status="507",traffic="user"} 2.0' in metrics
        assert 'diffusion_requests_total{model="sim",outcome="ok",status="200",traffic="user"} 1.0' in metrics


def test_other_exception_is_500_with_reason_and_worker_lives(gated_engine):
    gated_engine.gate.set()
    with TestClient(create_app(sim_config(), engine=gated_engine)) as c:
        bad = c.post(URL, json={"prompt": "boom", "size": "32x32"})
        assert bad.status_code == 500
        assert bad.json()["error"]["message"] == "generation failed: RuntimeError: injected failure"
        assert c.post(URL, json={"prompt": "fine", "size": "32x32"}).status_code == 200
        assert c.get("/health").json()["status"] == "ok"


def test_torch_oom_maps_to_device_out_of_memory():
    torch = pytest.importorskip("torch")
    req = GenerationRequest(prompt="p", width=1024, height=768, steps=28, batch=2)
    mapped = as_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), req)
    assert isinstance(mapped, DeviceOutOfMemory)
    assert str(mapped).startswith("out of memory at 1024x768, 28 steps, n=2: CUDA out of memory.")
    assert as_out_of_memory(ValueError("bad value"), req) is None


def test_a_cancelled_generation_counts_the_energy_it_used():
    """The joules a cancelled generation used are reported like a finished one's (they were spent)."""
    from concurrent.futures import Future

    from diffbench.engines.cancel import Cancelled
    from diffbench.engines.registry import EngineConfig
    from diffbench.engines.sim import SimEngine
    from diffbench.server.worker import DeviceWorker, WorkItem

    class Meter:
        source, scope = "fake", "test device"
        joules = 0.0

        def read(self) -> float:
            return self.joules

    meter, reported = Meter(), []
    worker = DeviceWorker(SimEngine(EngineConfig(engine="sim", sim=sim_params())), energy=meter,
                          on_energy=reported.append)
    item = WorkItem(request=GenerationRequest(prompt="a", width=64, height=64, steps=4), future=Future(),
                    enqueued_ns=time.perf_counter_ns(), started_ns=time.perf_counter_ns())
    assert worker.energy is not None
    mark = worker.energy.begin()
    meter.joules = 12.5  # the device used 12.5 J before the cancel landed
    worker._cancelled(item, Cancelled("disconnect", 2, 4), mark)
    assert reported == [12.5]
    with pytest.raises(Cancelled):
        item.future.result(timeout=1)
