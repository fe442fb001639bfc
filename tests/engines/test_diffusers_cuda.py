"""GPU-only checks (skipped without CUDA): CUDA peak memory after a reset, attributed to a stage."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_memory_and_sync() -> None:
    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.config import EngineConfig
    from diffbench.engines.registry import create_engine

    e = create_engine(EngineConfig(model="tiny-flux", device="cuda"))
    info = e.start()
    assert info.asynchronous
    res = e.generate(GenerationRequest(prompt="a", height=256, width=256, steps=4))
    e.sync()
    assert res.memory.kind == "cuda"
    assert res.memory.peak_allocated_bytes >= torch.cuda.memory_allocated() * 0.5
    assert res.memory.peak_reserved_bytes >= res.memory.peak_allocated_bytes
    assert res.memory.peak_stage in {"text_encode", "denoise", "vae_decode", "other"}


def test_cuda_events_no_sync_on_the_hot_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step and stage times come from CUDA events read after one final wait: torch.cuda.synchronize is never
    called during the request; the device total is mem_get_info's."""
    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.config import EngineConfig
    from diffbench.engines.registry import create_engine

    e = create_engine(EngineConfig(model="tiny-flux", device="cuda"))
    e.start()
    req = GenerationRequest(prompt="a", height=256, width=256, steps=6)
    e.generate(req)  # warm
    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    res = e.generate(req)
    assert calls == []
    st = res.stages
    assert len(st.step_s) == 6 and all(s > 0 for s in st.step_s)
    assert st.text_encode_s + st.denoise_s + st.vae_decode_s <= st.total_s * 1.01
    assert res.signals.device == "0"
    assert res.signals.device_total_bytes == torch.cuda.mem_get_info(0)[1]
