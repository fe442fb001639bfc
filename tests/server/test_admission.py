"""Admission control: the work-weighted wait estimate (closed form) and 429 + Retry-After under overload."""

from __future__ import annotations

import asyncio
import itertools
import math
import time

import httpx
import numpy as np
import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.server.admission import ServiceTimeModel, decide, estimate_wait, fit_line, work_units
from diffbench.server.background import run_in_background

from .conftest import sim_config, sim_params


def _req(w: int, h: int, steps: int, n: int = 1, frames: int | None = None) -> GenerationRequest:
    return GenerationRequest(prompt="p", width=w, height=h, steps=steps, batch=n, frames=frames)


def test_exact_shape_uses_its_own_recent_mean():
    m = ServiceTimeModel()
    assert m.predict(_req(64, 64, 4)) is None
    a = _req(64, 64, 4)
    m.observe(a, 0.5)
    m.observe(a, 0.7)
    assert m.predict(a) == pytest.approx(0.6)


def test_fit_line_is_least_squares_with_nonnegative_coefficients():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 10, 20)
    y = 0.4 + 0.3 * x + rng.normal(0, 0.01, 20)
    b, a = np.polyfit(x, y, 1)  # reference: numpy's unconstrained least squares (both positive here)
    assert fit_line(list(x), list(y)) == pytest.approx((a, b), rel=1e-9)
    assert fit_line([1.0, 2.0], [3.0, 1.0]) == (2.0, 0.0)  # falling data: flat line at the mean
    xs, ys = [1.0, 2.0, 3.0], [0.5, 2.0, 3.5]  # unconstrained intercept −1: refit through the origin
    (slope,), *_ = np.linalg.lstsq(np.array(xs)[:, None], np.array(ys), rcond=None)
    assert fit_line(xs, ys) == pytest.approx((0.0, slope))
    assert fit_line([5.0, 5.0], [1.0, 2.0]) is None  # one distinct work size: no line


def _sim_truth(engine: SimEngine, req: GenerationRequest) -> tuple[float, object]:
    """The simulated device's own service time for ``req`` (its closed-form stage plan, no jitter)."""
    stages = engine.generate(req).stages
    return stages.total_s, stages


# Large fixed costs (text encode + other = 0.6 s) next to work-proportional ones, as on small shapes.
FIXED_HEAVY = dict(text_encode_s=0.5, other_s=0.1, step_s=0.04, vae_decode_s=0.06, jitter=0.0, tail_prob=0.0)


def test_unseen_shape_is_predicted_from_a_line_fitted_on_served_shapes():
    engine = SimEngine(
        EngineConfig(engine="sim", sim=sim_params(realtime=False, compile_s=0.0, **FIXED_HEAVY))
    )
    m = ServiceTimeModel()
    for w in (256, 512):
        req = _req(w, w, 8)
        seconds, stages = _sim_truth(engine, req)
        m.observe(req, seconds, stages)
    for unseen in (_req(1024, 1024, 8), _req(2048, 2048, 8)):
        truth, _ = _sim_truth(engine, unseen)
        assert m.predict(unseen) == pytest.approx(truth, rel=1e-6)
        # the old ratio of sums through the origin spread the 0.6 s fixed cost over the work: 4-8x too high
        assert m.seconds_per_unit * work_units(unseen) > 3 * truth


def test_one_served_shape_scales_its_stage_split():
    engine = SimEngine(
        EngineConfig(engine="sim", sim=sim_params(realtime=False, compile_s=0.0, **FIXED_HEAVY))
    )
    m = ServiceTimeModel()
    seen = _req(512, 512, 8)
    seconds, stages = _sim_truth(engine, seen)
    m.observe(seen, seconds, stages)
    for unseen in (_req(1024, 1024, 8), _req(512, 512, 16), _req(512, 512, 8, frames=5)):
        truth, _ = _sim_truth(engine, unseen)
        assert m.predict(unseen) == pytest.approx(truth, rel=1e-6)
    bare = ServiceTimeModel()
    bare.observe(seen, seconds)  # no stage split: the whole time scales with the work (an upper bound)
    assert bare.predict(_req(1024, 1024, 8)) == pytest.approx(seconds * 4)


def test_estimate_counts_queue_and_remaining_running_time():
    m = ServiceTimeModel()
    a = _req(64, 64, 4)
    m.observe(a, 2.0)
    assert estimate_wait(m, [a, a, a], a, running_elapsed_s=0.5) == pytest.approx(3 * 2.0 + 1.5)
    assert estimate_wait(m, [], a, running_elapsed_s=5.0) == 0.0  # overdue: no negative remainder
    assert estimate_wait(ServiceTimeModel(), [a], None, 0.0) is None


def test_decide_limits_and_retry_after():
    d = decide(7.3, queue_length=3, max_wait_s=5.0, max_queue=None)
    assert not d.admit and d.retry_after_s == math.ceil(7.3 - 5.0) == 3
    assert "7.30 s exceeds --max-wait 5 s" in d.reason
    assert decide(4.9, 3, 5.0, None).admit
    assert decide(None, 3, 5.0, None).admit  # no estimate before the first completion
    full = decide(6.0, queue_length=4, max_wait_s=None, max_queue=4)
    assert not full.admit and full.retry_after_s == 2 and "queue is full" in full.reason


async def _burst(base_url: str, k: int, body: dict) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        return list(
            await asyncio.gather(*(client.post("/v1/images/generations", json=body) for _ in range(k)))
        )


@pytest.mark.slow
def test_overload_gets_429_with_retry_after_while_accepted_complete():
    # 256x256, 4 steps: a service time s of ~0.25 s; --max-wait 2.5 s admits ~3 of a burst of 10
    # (predicted waits 0, s, 2s; 3s > 2.5 s is rejected).
    cfg = sim_config(
        sim_params(step_s=1.0, text_encode_s=0.0, vae_decode_s=0.0, other_s=0.0), max_wait_s=None
    )
    body = {"prompt": "a", "size": "256x256", "num_inference_steps": 4}
    with run_in_background(cfg, mode="thread") as url:
        first = httpx.post(f"{url}/v1/images/generations", json=body, timeout=10).json()  # calibrates
        service_s = first["service_time_s"]
        engine_s = sum(v for k, v in first["stage_durations"].items() if k != "queue_wait")
        assert service_s == pytest.approx(engine_s, abs=0.03)  # wall clock agrees with the sim's plan
        assert service_s > 0.1
    max_wait = 2.5 * service_s
    cfg = cfg.model_copy(update={"max_wait_s": max_wait})
    with run_in_background(cfg, mode="thread") as url:
        assert httpx.post(f"{url}/v1/images/generations", json=body, timeout=10).status_code == 200
        responses = asyncio.run(_burst(url, 10, body))
        ok = [r for r in responses if r.status_code == 200]
        rejected = [r for r in responses if r.status_code == 429]
        assert len(ok) + len(rejected) == 10
        assert 2 <= len(ok) <= 4, [r.status_code for r in responses]  # 3, with one of timing slack
        for r in rejected:
            assert r.json()["error"]["code"] == "overloaded"
            retry = int(r.headers["Retry-After"])
            assert 1 <= retry <= math.ceil(10 * service_s - max_wait)
        waits = sorted(r.json()["stage_durations"]["queue_wait"] for r in ok)
        assert waits[-1] <= max_wait + service_s  # accepted requests wait about --max-wait at most
        assert all(b > a for a, b in itertools.pairwise(waits))
        time.sleep(int(rejected[0].headers["Retry-After"]))
        assert httpx.post(f"{url}/v1/images/generations", json=body, timeout=10).status_code == 200
        health = httpx.get(f"{url}/health").json()
        assert health["rejected"] == len(rejected) and health["completed"] == len(ok) + 2
