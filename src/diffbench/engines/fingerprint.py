"""The deployment fingerprint: everything a fixed-seed baseline depends on.

A baseline is valid only for the configuration it was made with: model identity, precision,
parallelism, engine and version, compile, attention backend, cache configuration, torch / diffusers
versions and the device. Any difference other than the option under test invalidates a comparison.

The optional fields (:data:`OPTIONAL_FIELDS`) enter only when they differ from the default, so a deployment
without them keeps the fingerprint (and fingerprint hash) it had before they existed: ``quantization`` when it
is not ``none``, ``fused_projections`` when it is True, ``adapters`` (LoRA name -> content hash) when the
deployment loads any: a reference recorded without them, with others, or with other weights under the same
name is another deployment.
"""

from __future__ import annotations

from diffbench.core.env import EnvInfo
from diffbench.engines.base import EngineInfo

FINGERPRINT_FIELDS = (
    "model",
    "model_hash",
    "pipeline",
    "precision",
    "parallelism",
    "engine",
    "engine_version",
    "compile",
    "attention_backend",
    "cache",
    "torch",
    "diffusers",
    "device",
    "hardware",
)
OPTIONAL_FIELDS = ("quantization", "fused_projections", "adapters")
"""Fields present only when set: ``quantization`` (not ``none``), ``fused_projections`` (True), ``adapters``
(any LoRA adapter loaded)."""


def deployment_fingerprint(info: EngineInfo, env: EnvInfo) -> dict[str, object]:
    """The fingerprint as a flat dict of :data:`FINGERPRINT_FIELDS`, then the :data:`OPTIONAL_FIELDS` that are
    set."""
    gpus = ", ".join(g.name for g in env.gpus)
    fp: dict[str, object] = {
        "model": info.model,
        "model_hash": info.model_hash,
        "pipeline": info.pipeline_class,
        "precision": info.dtype,
        "parallelism": info.parallelism,
        "engine": info.engine,
        "engine_version": info.engine_version,
        "compile": info.compile,
        "attention_backend": info.attention_backend,
        "cache": info.cache,
        "torch": env.packages.get("torch"),
        "diffusers": env.packages.get("diffusers"),
        "device": info.device,
        "hardware": gpus if info.device.startswith("cuda") else env.cpu,
    }
    if info.quantization != "none":
        fp["quantization"] = info.quantization
    if info.fused_projections:
        fp["fused_projections"] = True
    if info.adapters:
        fp["adapters"] = dict(sorted(info.adapters.items()))
    return fp


def fingerprint_diff(a: dict[str, object], b: dict[str, object], ignore: tuple[str, ...] = ()) -> list[str]:
    """Fields whose values differ between two fingerprints (excluding ``ignore``), sorted."""
    keys = (set(a) | set(b)) - set(ignore)
    return sorted(k for k in keys if a.get(k) != b.get(k))
