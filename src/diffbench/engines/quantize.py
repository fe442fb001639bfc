"""Quantized linear layers of the denoiser: which modes exist, where each can run, and applying one.

==============  =============================================================  ===============================
mode            what runs                                                       where it can run
==============  =============================================================  ===============================
none            the denoiser as loaded                                          anywhere
int8-dynamic    ``torch.ao.quantization.quantize_dynamic(denoiser,              CPU, float32 (PyTorch's dynamic
                {torch.nn.Linear}, dtype=torch.qint8)``: int8 weights,          quantized Linear kernels are
                activations quantized per call                                  fbgemm/qnnpack, CPU only)
fp8             torchao ``quantize_(denoiser,                                   an NVIDIA GPU with FP8 tensor
                Float8DynamicActivationFloat8WeightConfig())``: float8 e4m3     cores (compute capability 8.9+:
                weights and activations, scaled matmul                          Ada, Hopper, Blackwell) and the
                                                                                ``torchao`` package
==============  =============================================================  ===============================

Only the denoiser (``transformer`` or ``unet``) is quantized; the text encoders and the VAE keep their dtype.
Sources: https://docs.pytorch.org/docs/stable/generated/torch.ao.quantization.quantize_dynamic.html and
https://docs.pytorch.org/ao/stable/generated/torchao.quantization.Float8DynamicActivationFloat8WeightConfig.html

:func:`quantization_unavailable` says why a mode cannot run on a device before anything is loaded (it imports
torch only for a CUDA device, to read the GPU's compute capability); :func:`apply_quantization` applies a mode
to a loaded pipeline.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from diffbench.errors import UsageError

QUANTIZATIONS = ("none", "int8-dynamic", "fp8")
FP8_MIN_CAPABILITY = (8, 9)
"""CUDA compute capability of the first GPUs with FP8 tensor cores (Ada Lovelace; Hopper is 9.0)."""
_FP8_NEED = ("--quantization fp8 needs an NVIDIA GPU with FP8 tensor cores (compute capability 8.9+: Ada, Hopper, "
             "Blackwell)")
# torch.ao.quantization warns that it is deprecated (in favour of torchao) when quantize_dynamic runs, and the
# quantized tensor constructors it calls warn the same; the API still works in the installed torch.
_DEPRECATION_MESSAGES = (r"torch\.ao\.quantization is deprecated", r"torch\.quantize_per_tensor.*deprecated")


def check_quantization(mode: str) -> str:
    """Check the syntax of a ``--quantization`` value.

    Raises:
        UsageError: not one of :data:`QUANTIZATIONS`.
    """
    if mode not in QUANTIZATIONS:
        raise UsageError(f"--quantization {mode!r}: choose one of {', '.join(QUANTIZATIONS)}")
    return mode


def quantization_unavailable(mode: str, device: str, dtype: str) -> str | None:
    """Why quantization ``mode`` cannot run on ``device`` at ``dtype`` here; None when it can.

    Pure for every device but CUDA: torch is imported only for ``cuda``/``cuda:N`` (to read
    ``torch.cuda.get_device_capability``); whether ``torchao`` is installed is read with
    ``importlib.util.find_spec`` (nothing is imported).

    Args:
        mode: one of :data:`QUANTIZATIONS`.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (as :func:`~diffbench.engines.config.check_device`
            returns it).
        dtype: the pipeline's dtype, ``float32``, ``bfloat16`` or ``float16``.

    Returns:
        One sentence naming ``--quantization MODE``, the reason and the fix, or None.

    Raises:
        UsageError: ``mode`` is not one of :data:`QUANTIZATIONS`.
    """
    check_quantization(mode)
    if mode == "none":
        return None
    if mode == "int8-dynamic":
        if device != "cpu":
            return (f"--quantization int8-dynamic runs PyTorch's dynamic int8 Linear kernels (fbgemm/qnnpack), "
                    f"which are CPU only; {device} is not the CPU: use --device cpu, or --quantization fp8 on a GPU "
                    f"with FP8 tensor cores")
        if dtype != "float32":
            return (f"--quantization int8-dynamic quantizes float32 Linear layers (its kernels take float32 "
                    f"activations); --dtype {dtype} is not float32: use --dtype float32")
        return None
    if not device.startswith("cuda"):
        return f"{_FP8_NEED}; {device} has none"
    import torch

    if not torch.cuda.is_available():
        return f"{_FP8_NEED}; CUDA is not available here (no CUDA GPU or a CPU-only torch)"
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        return f"{_FP8_NEED}; {device} does not exist here ({torch.cuda.device_count()} CUDA device(s))"
    major, minor = torch.cuda.get_device_capability(index)
    if (major, minor) < FP8_MIN_CAPABILITY:
        name = torch.cuda.get_device_name(index)
        return f"{_FP8_NEED}; {device} ({name}) has compute capability {major}.{minor}"
    if importlib.util.find_spec("torchao") is None:
        return ("--quantization fp8 needs the torchao package (torchao.quantization.quantize_ with "
                "Float8DynamicActivationFloat8WeightConfig), which is not installed: pip install torchao")
    return None


def apply_quantization(pipe: Any, mode: str, device: str, dtype: str) -> str:
    """Quantize the linear layers of ``pipe``'s denoiser in place; returns ``mode`` (as the fingerprint holds it).

    Call it after the pipeline is on its device and dtype (and after fusing projections: fusion reads the
    float weights).

    Raises:
        UsageError: :func:`quantization_unavailable` gives a reason, or the pipeline has no denoiser.
    """
    reason = quantization_unavailable(mode, device, dtype)
    if reason is not None:
        raise UsageError(reason)
    if mode == "none":
        return mode
    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    if denoiser is None:
        raise UsageError(f"--quantization {mode}: {type(pipe).__name__} has no transformer or unet to quantize")
    if mode == "int8-dynamic":
        import torch

        with warnings.catch_warnings():
            for message in _DEPRECATION_MESSAGES:
                warnings.filterwarnings("ignore", message=message)
            torch.ao.quantization.quantize_dynamic(denoiser, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
        return mode
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_

    quantize_(denoiser, Float8DynamicActivationFloat8WeightConfig())
    return mode
