"""The diffusers engine through the monitor: signals on every result, the injected memory budget (the OOM
drill on a CPU), stage semantics bench relies on."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("diffusers")

from diffbench.engines.base import GenerationRequest  # noqa: E402
from diffbench.engines.config import EngineConfig  # noqa: E402
from diffbench.engines.instrument.memory import hwm_available  # noqa: E402
from diffbench.engines.registry import create_engine  # noqa: E402
from diffbench.errors import DeviceOutOfMemory  # noqa: E402

pytestmark = pytest.mark.slow

BUDGET = 64 * 2**20


def _req(size: int) -> GenerationRequest:
    return GenerationRequest(prompt="a lighthouse", height=size, width=size, steps=2)


@pytest.mark.skipif(not hwm_available(), reason="needs /proc/self/clear_refs (Linux, writable)")
def test_memory_budget_fails_a_big_decode_and_the_engine_keeps_serving() -> None:
    # VAE tiling off at 512x512: the tiny VAE's decode grows the resident set by ~190 MB (measured), far
    # above the budget; a 64x64 request grows it by ~25 MB cold, ~0 warm.
    engine = create_engine(EngineConfig(model="tiny-flux", memory_budget_bytes=BUDGET))
    info = engine.start()
    assert info.details["memory_budget_bytes"] == str(BUDGET)
    ok = engine.generate(_req(64))
    assert ok.signals is not None and ok.signals.device_total_bytes == BUDGET
    gc.collect()  # earlier tests' garbage freed during the request would lower the resident set
    with pytest.raises(DeviceOutOfMemory, match=f"budget of {BUDGET} bytes at stage vae_decode") as caught:
        engine.generate(_req(512))
    failed = engine.instrumentation.last_memory
    assert failed.peak_allocated_bytes > BUDGET and failed.peak_stage == "vae_decode"
    assert caught.value.memory is failed and caught.value.signals.device_total_bytes == BUDGET
    again = engine.generate(_req(64))
    assert again.images.shape == (1, 64, 64, 3) and len(again.stages.step_s) == 2
    assert again.memory.peak_allocated_bytes < BUDGET
    engine.stop()


def test_signals_on_every_result_and_warmup_not_exported() -> None:
    calls = []

    class Exp:
        def observe_generation(self, **kw) -> None:
            calls.append(kw)

        def shape_label(self, w: int, h: int, frames: int | None, batch: int) -> str:
            return f"{w}x{h}" if (w, h) == (64, 64) else "other"

    engine = create_engine(EngineConfig(model="tiny-flux"))
    engine.start()
    engine.instrumentation.exporter = Exp()
    engine.generate(_req(64), traffic="warmup")
    res = engine.generate(_req(64))
    engine.generate(_req(32), traffic="probe")
    assert [(c["shape"], c["traffic"]) for c in calls] == [("64x64", "user"), ("other", "probe")]
    assert res.signals is calls[0]["signals"] and res.signals.flops and res.signals.flops > 0
    assert res.stages.denoiser_calls == 2 and res.extra["denoiser_batch"] == 1.0
    engine.stop()
    assert engine.instrumentation is None
