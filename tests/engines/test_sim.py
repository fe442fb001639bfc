"""The simulated device behaves like a GPU for the measurement protocol."""

from __future__ import annotations

import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine
from diffbench.errors import DeviceOutOfMemory

REQ = GenerationRequest(prompt="a", height=1024, width=1024, steps=28)


def _engine(**kw):
    e = create_engine(EngineConfig(engine="sim", sim=SimParams(**kw)))
    e.start()
    return e


def test_launch_is_asynchronous_and_sync_waits() -> None:
    e = _engine(jitter=0, tail_prob=0, compile_s=0)
    t0 = e.clock()
    res = e.generate(REQ)
    t_launch = (e.clock() - t0) / 1e9
    e.sync()
    t_done = (e.clock() - t0) / 1e9
    assert t_launch == pytest.approx(e.p.launch_s)
    assert t_done == pytest.approx(e.p.launch_s + res.stages.total_s)
    assert res.stages.total_s == pytest.approx(
        e.p.text_encode_s + 28 * e.p.step_s + e.p.vae_decode_s + e.p.other_s
    )


def test_first_call_per_shape_pays_compile() -> None:
    e = _engine(jitter=0, tail_prob=0, compile_s=3.0)
    t0 = e.clock()
    e.generate(REQ)
    first = (e.clock() - t0) / 1e9
    e.sync()
    t1 = e.clock()
    e.generate(REQ)
    second = (e.clock() - t1) / 1e9
    assert first == pytest.approx(3.0 + e.p.launch_s)
    assert second == pytest.approx(e.p.launch_s)
    other = REQ.model_copy(update={"height": 512})
    t2 = e.clock()
    e.generate(other)
    assert (e.clock() - t2) / 1e9 == pytest.approx(3.0 + e.p.launch_s)


def test_deterministic_for_a_seed() -> None:
    a, b = _engine(seed=3), _engine(seed=3)
    ra, rb = a.generate(REQ), b.generate(REQ)
    assert ra.stages.step_s == rb.stages.step_s
    assert (ra.images == rb.images).all()


def test_simulated_oom() -> None:
    e = _engine(fail_above_pixels=512 * 512)
    with pytest.raises(DeviceOutOfMemory, match="1024x1024"):
        e.generate(REQ)
