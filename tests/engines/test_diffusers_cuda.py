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
    from diffbench.engines.registry import EngineConfig, create_engine

    e = create_engine(EngineConfig(model="tiny-flux", device="cuda"))
    info = e.start()
    assert info.asynchronous
    res = e.generate(GenerationRequest(prompt="a", height=256, width=256, steps=4))
    e.sync()
    assert res.memory.kind == "cuda"
    assert res.memory.peak_allocated_bytes >= torch.cuda.memory_allocated() * 0.5
    assert res.memory.peak_reserved_bytes >= res.memory.peak_allocated_bytes
    assert res.memory.peak_stage in {"text_encode", "denoise", "vae_decode", "other"}
