"""Which request parameters the served pipeline ignores, read from the pipeline, checked against pixels.

The independent check: a parameter reported as ignored leaves the same-seed output bit-identical; one
reported as used changes it.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from fastapi.testclient import TestClient

from diffbench.engines.base import GenerationRequest
from diffbench.server.app import create_app
from diffbench.server.capabilities import ParameterUse, parameter_use

from .conftest import sim_config


def test_sim_engine_reports_guidance_and_negative_prompt_as_ignored():
    with TestClient(create_app(sim_config())) as c:
        body = {"prompt": "a", "size": "32x32", "seed": 1}
        plain = c.post("/v1/images/generations", json=body).json()
        extra = c.post(
            "/v1/images/generations", json={**body, "guidance_scale": 7.0, "negative_prompt": "blurry"}
        ).json()
    assert extra["ignored_parameters"] == ["guidance_scale", "negative_prompt"]
    assert plain["ignored_parameters"] == []
    assert extra["data"] == plain["data"]  # the sim's pixels indeed do not depend on them


def test_cfg_rule_negative_prompt_needs_guidance_above_one():
    use = ParameterUse(guidance_used=True, negative_mode="cfg", default_guidance=5.0)
    assert use.ignored(None, "x") == [] and use.ignored(1.0, "x") == ["negative_prompt"]
    assert use.ignored(7.5, None) == []


def _pixels(engine, **kw) -> np.ndarray:
    req = GenerationRequest(prompt="a lighthouse", width=32, height=32, steps=2, seed=3, **kw)
    out = engine.generate(req).images
    engine.sync()
    return out


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers extra not installed")
def test_tiny_flux_guidance_distilled_pipeline_ignores_guidance_and_negative_prompt():
    from diffbench.engines.registry import EngineConfig, create_engine

    engine = create_engine(EngineConfig(model="tiny-flux"))
    engine.start()
    try:
        use = parameter_use(engine)
        assert use.ignored(7.0, "blurry") == ["guidance_scale", "negative_prompt"]
        base = _pixels(engine, guidance=1.0)
        np.testing.assert_array_equal(_pixels(engine, guidance=7.0), base)
        np.testing.assert_array_equal(_pixels(engine, guidance=1.0, negative_prompt="blurry"), base)

        # The same pipeline with a guidance embedding (as FLUX.1-dev has): guidance_scale is now used.
        from diffusers import FluxTransformer2DModel

        cfg = dict(engine.pipe.transformer.config)
        cfg["guidance_embeds"] = True
        engine.pipe.transformer = FluxTransformer2DModel.from_config(cfg).eval()
        engine.pipe.transformer.requires_grad_(False)
        embedded = parameter_use(engine)
        assert embedded.ignored(7.0, "blurry") == ["negative_prompt"]
        assert not np.array_equal(_pixels(engine, guidance=7.0), _pixels(engine, guidance=1.0))
    finally:
        engine.stop()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers extra not installed")
def test_tiny_sdxl_cfg_pipeline_uses_negative_prompt_only_with_guidance_above_one():
    from diffbench.engines.registry import EngineConfig, create_engine

    engine = create_engine(EngineConfig(model="tiny-sdxl"))
    engine.start()
    try:
        use = parameter_use(engine)
        assert use.ignored(7.0, "blurry") == [] and use.ignored(1.0, "blurry") == ["negative_prompt"]
        assert not np.array_equal(_pixels(engine, guidance=7.0), _pixels(engine, guidance=1.0))
        strong = _pixels(engine, guidance=7.0)
        assert not np.array_equal(_pixels(engine, guidance=7.0, negative_prompt="blurry"), strong)
        weak = _pixels(engine, guidance=1.0)
        np.testing.assert_array_equal(_pixels(engine, guidance=1.0, negative_prompt="blurry"), weak)
    finally:
        engine.stop()
