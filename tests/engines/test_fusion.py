"""Fused QKV projections: which pipelines offer them, a refusal where none is offered, and tiny-flux's fused
output equal to the unfused one up to float rounding."""

from __future__ import annotations

import math

import pytest

from diffbench.core.env import capture_env
from diffbench.core.psnr import psnr_uint8
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig
from diffbench.engines.diffusers_engine import PIPELINES
from diffbench.engines.fingerprint import FINGERPRINT_FIELDS, deployment_fingerprint
from diffbench.engines.fusion import FUSION, fuse_projections, fusion_supported, fusion_unavailable
from diffbench.errors import UsageError


def test_which_pipelines_fuse():
    assert {c for c in PIPELINES if fusion_supported(c)} == set(FUSION)
    assert fusion_supported("FluxPipeline") and fusion_supported("StableDiffusionXLPipeline")
    reason = fusion_unavailable("QwenImagePipeline")
    assert reason is not None and reason.startswith("--fuse-projections: QwenImagePipeline cannot fuse")
    assert "separate projections" in reason and "FluxPipeline" in reason
    assert "offers no fused QKV projections" in str(fusion_unavailable("LattePipeline"))


def _pipe(name: str, transformer: object | None = None) -> object:
    return type(name, (), {"transformer": transformer})()


def test_a_pipeline_without_fusion_is_refused():
    with pytest.raises(UsageError, match="QwenImagePipeline cannot fuse"):
        fuse_projections(_pipe("QwenImagePipeline"))
    with pytest.raises(UsageError, match="has no fuse_qkv_projections in the installed diffusers"):
        fuse_projections(_pipe("FluxPipeline", transformer=object()))


REQ = GenerationRequest(prompt="a lighthouse in fog", height=64, width=64, steps=3, seed=2)


def test_fused_tiny_flux_equals_unfused():
    from diffbench.engines.diffusers_engine import DiffusersEngine

    runs = {}
    for fused in (False, True):
        engine = DiffusersEngine(EngineConfig(model="tiny-flux", fuse_projections=fused))
        info = engine.start()
        n_fused = sum(bool(getattr(m, "fused_projections", False)) for m in engine.pipe.transformer.modules())
        runs[fused] = (info, engine.generate(REQ).images, n_fused)
        engine.stop()
    (base_info, base, none_fused), (info, fused, n_fused) = runs[False], runs[True]
    assert none_fused == 0 and n_fused > 0
    db = psnr_uint8(base, fused)
    assert db >= 60 or math.isinf(db), db
    assert info.fused_projections and not base_info.fused_projections
    env = capture_env()
    base_fp, fused_fp = deployment_fingerprint(base_info, env), deployment_fingerprint(info, env)
    assert tuple(base_fp) == FINGERPRINT_FIELDS and fused_fp["fused_projections"] is True
    assert {k: v for k, v in fused_fp.items() if k != "fused_projections"} == base_fp
