"""``serve``'s engine flags reach the EngineConfig it runs (built without starting a server)."""

from __future__ import annotations

import pytest

from diffbench.cli.serve import serve_engine_config
from diffbench.engines.config import SimParams
from diffbench.errors import UsageError

SIM = SimParams(realtime=True)


def test_every_pipeline_flag_reaches_the_engine_config():
    cfg = serve_engine_config(
        engine="diffusers", model="tiny-flux", device="cuda:0", dtype="bfloat16", sim=SIM, attention_backend="flash",
        offload="model", quantization="fp8", fuse_projections=True, cache="first-block=0.10", compile_=True,
        vae_tiling=True, memory_budget="2GiB",
    )
    assert (cfg.engine, cfg.model, cfg.device, cfg.dtype) == ("diffusers", "tiny-flux", "cuda:0", "bfloat16")
    assert cfg.attention_backend == "flash" and cfg.offload == "model"
    assert cfg.quantization == "fp8" and cfg.fuse_projections is True
    assert cfg.cache == "first-block=0.1" and cfg.compile and cfg.vae_tiling
    assert cfg.memory_budget_bytes == 2 * 2**30 and cfg.sim == SIM


def test_the_defaults_are_the_plain_pipeline():
    cfg = serve_engine_config(engine="diffusers", model="tiny-flux", device="cpu", dtype="float32", sim=SIM)
    assert cfg.attention_backend is None and cfg.offload == "none"
    assert cfg.quantization == "none" and cfg.fuse_projections is False and cfg.cache is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"quantization": "int4"}, "--quantization 'int4': choose one of none, int8-dynamic, fp8"),
     ({"offload": "disk"}, "--offload 'disk': choose none, model or sequential"),
     ({"engine": "sim", "quantization": "int8-dynamic"}, "--quantization: the sim engine has no pipeline"),
     ({"engine": "sim", "fuse_projections": True}, "--fuse-projections: the sim engine has no pipeline"),
     ({"engine": "sim", "offload": "model"}, "--offload: the sim engine has no pipeline"),
     ({"engine": "sim", "attention_backend": "flash"}, "--attention-backend: the sim engine has no denoiser"),
     ({"engine": "http"}, "--engine 'http' is not known")],
)
def test_bad_flags_are_refused(kwargs, message):
    args = {"engine": "diffusers", "model": "tiny-flux", "device": "cpu", "dtype": "float32", "sim": SIM, **kwargs}
    with pytest.raises(UsageError) as exc:
        serve_engine_config(**args)
    assert message in str(exc.value)
