"""Quantized linear layers: where each mode can run (refused with its reason elsewhere), int8-dynamic on
tiny-flux on the CPU (it runs, changes the pixels, and enters the fingerprint)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from diffbench.core.env import capture_env
from diffbench.core.psnr import psnr_uint8
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig
from diffbench.engines.fingerprint import FINGERPRINT_FIELDS, deployment_fingerprint
from diffbench.engines.quantize import QUANTIZATIONS, quantization_unavailable
from diffbench.errors import UsageError

FP8_ON_CPU = ("--quantization fp8 needs an NVIDIA GPU with FP8 tensor cores (compute capability 8.9+: Ada, "
              "Hopper, Blackwell); cpu has none")


def test_fp8_on_a_cpu_is_unavailable_with_the_reason():
    assert quantization_unavailable("fp8", "cpu", "float32") == FP8_ON_CPU
    assert "mps has none" in str(quantization_unavailable("fp8", "mps", "bfloat16"))


@pytest.mark.parametrize(
    ("device", "dtype", "fragment"),
    [("cuda", "float32", "CPU only; cuda is not the CPU: use --device cpu"),
     ("cuda:1", "bfloat16", "cuda:1 is not the CPU"),
     ("cpu", "bfloat16", "--dtype bfloat16 is not float32: use --dtype float32")],
)
def test_int8_dynamic_runs_on_the_cpu_in_float32_only(device, dtype, fragment):
    reason = quantization_unavailable("int8-dynamic", device, dtype)
    assert reason is not None and reason.startswith("--quantization int8-dynamic") and fragment in reason
    assert quantization_unavailable("int8-dynamic", "cpu", "float32") is None
    assert quantization_unavailable("none", device, dtype) is None


def test_an_unknown_mode_is_a_usage_error():
    with pytest.raises(UsageError, match="choose one of none, int8-dynamic, fp8"):
        quantization_unavailable("int4", "cpu", "float32")
    assert QUANTIZATIONS == ("none", "int8-dynamic", "fp8")


@pytest.mark.e2e  # runs a subprocess
def test_the_reason_is_known_without_importing_torch_off_cuda():
    code = ("import sys; from diffbench.engines.quantize import quantization_unavailable as q; "
            "r = [q('fp8', 'cpu', 'float32'), q('int8-dynamic', 'cuda:0', 'float32'), q('none', 'cuda', 'x')]; "
            "assert all(r[:2]) and r[2] is None; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize(
    ("config", "message"),
    [(EngineConfig(model="tiny-flux", quantization="fp8"), FP8_ON_CPU),
     (EngineConfig(model="tiny-flux", quantization="int8-dynamic", dtype="bfloat16"), "is not float32")],
)
def test_the_engine_refuses_at_start(config, message):
    from diffbench.engines.diffusers_engine import DiffusersEngine

    engine = DiffusersEngine(config)
    with pytest.raises(UsageError, match="^--quantization") as exc:
        engine.start()
    assert message in str(exc.value)
    assert engine.pipe is None  # refused before the model was loaded


REQ = GenerationRequest(prompt="a red barn at dusk", height=64, width=64, steps=3, seed=5)


def _dynamic_linears(module) -> int:
    """Linear layers of ``module`` replaced by PyTorch's dynamic quantized Linear."""
    return sum(type(m).__module__.startswith("torch.ao.nn.quantized.dynamic") for m in module.modules())


@pytest.fixture(scope="module")
def outputs():
    """(info, pixels) of tiny-flux as loaded and with int8-dynamic linear layers, same request."""
    from diffbench.engines.diffusers_engine import DiffusersEngine

    out = {}
    for mode in ("none", "int8-dynamic"):
        engine = DiffusersEngine(EngineConfig(model="tiny-flux", quantization=mode))  # type: ignore[arg-type]
        info = engine.start()
        quantized = {name: _dynamic_linears(getattr(engine.pipe, name)) for name in ("transformer", "text_encoder")}
        out[mode] = (info, engine.generate(REQ).images, quantized)
        engine.stop()
    return out


def test_int8_dynamic_runs_on_tiny_flux_and_changes_the_output(outputs):
    base_info, base, base_mods = outputs["none"]
    info, quant, mods = outputs["int8-dynamic"]
    assert mods["transformer"] > 0 and base_mods["transformer"] == 0
    assert mods["text_encoder"] == 0  # the denoiser only
    db = psnr_uint8(base, quant)
    assert math.isfinite(db) and 10 < db < 60, db  # lossy, yet a picture of the same request
    assert info.quantization == "int8-dynamic" and base_info.quantization == "none"


def test_the_fingerprint_has_quantization_only_when_set(outputs):
    env = capture_env()
    base = deployment_fingerprint(outputs["none"][0], env)
    quant = deployment_fingerprint(outputs["int8-dynamic"][0], env)
    assert tuple(base) == FINGERPRINT_FIELDS
    assert quant["quantization"] == "int8-dynamic"
    assert {k: v for k, v in quant.items() if k != "quantization"} == base
