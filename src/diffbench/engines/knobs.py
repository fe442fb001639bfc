"""Step-cache and option knobs of a diffusers pipeline: which knobs exist, how a value is parsed and checked,
which pipelines take a cache, and the diffusers config that switches it on.

Cache axes (diffusers ``diffusers.hooks`` configs, enabled on the denoiser with ``enable_cache``; knobs and
defaults in huggingface/diffusers ``src/diffusers/hooks/``, e.g. ``first_block_cache.py``):

==============  ===========================================  ==================  =====================
axis            config and swept knob                        value range         other knobs (fixed)
==============  ===========================================  ==================  =====================
first-block     ``FirstBlockCacheConfig.threshold``          float >= 0          —
taylorseer      ``TaylorSeerCacheConfig.cache_interval``     int >= 1            cache from step 3 on,
                                                                                 factors in pipe dtype
magcache        ``MagCacheConfig.threshold``                 float >= 0          FLUX ratios (Flux only)
fastercache     ``FasterCacheConfig.spatial_attention_       int >= 1            timestep range
                block_skip_range``                                               (-1, 681)
pab             ``PyramidAttentionBroadcastConfig.spatial_   int >= 1            timestep range
                attention_block_skip_range``                                     (100, 800)
==============  ===========================================  ==================  =====================

Option axes (a fresh engine per value): ``precision`` (float32 | bfloat16 | float16), ``attention-backend``
(a diffusers backend name, checked when the engine starts), ``compile`` (off | on), ``quantization`` (none |
int8-dynamic | fp8; where each can run: :mod:`diffbench.engines.quantize`), ``fuse-projections`` (off | on;
which pipelines: :mod:`diffbench.engines.fusion`).

The engines, ``serve``/``bench --cache``, the service's fault injection and ``sweep`` (through
:mod:`diffbench.sweep.axes`, which adds the sweep's choice of one axis) all read the knobs here.
"""

from __future__ import annotations

import math
from typing import Any

from diffbench.engines.quantize import QUANTIZATIONS
from diffbench.errors import UsageError

CACHE_AXES = ("first-block", "taylorseer", "magcache", "fastercache", "pab")
OPTION_AXES = ("precision", "attention-backend", "compile", "quantization", "fuse-projections")
_KNOB = {
    "first-block": "threshold",
    "taylorseer": "cache_interval",
    "magcache": "threshold",
    "fastercache": "spatial_attention_block_skip_range",
    "pab": "spatial_attention_block_skip_range",
}
_INT_AXES = ("taylorseer", "fastercache", "pab")
PRECISIONS = ("float32", "bfloat16", "float16")
_BOOL = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False, "no": False}


def cache_knob(axis: str) -> str:
    """The attribute of the diffusers cache config (and of its hooks) that ``axis`` sets, e.g. ``threshold``
    for ``first-block``, ``cache_interval`` for ``taylorseer``.

    Raises:
        UsageError: ``axis`` is not one of :data:`CACHE_AXES`.
    """
    if axis not in _KNOB:
        raise UsageError(f"unknown cache axis {axis!r}; choose one of {', '.join(CACHE_AXES)}")
    return _KNOB[axis]


def parse_values(axis: str, text: str) -> list[str]:
    """Parse and check ``--values`` for ``axis``; returns canonical value labels, in the given order.

    Raises:
        UsageError: empty list, duplicates, a non-number, a threshold < 0, an interval or skip range < 1,
            an unknown precision, quantization, or compile or fuse-projections flag.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"--values is empty; give comma-separated values for {axis}, e.g. 0.05,0.1,0.2")
    out = [_canonical(axis, p) for p in parts]
    dupes = sorted({v for v in out if out.count(v) > 1})
    if dupes:
        raise UsageError(f"--values {text!r}: duplicate values {', '.join(dupes)}")
    return out


def _canonical(axis: str, raw: str) -> str:
    if axis in ("first-block", "magcache"):
        try:
            v = float(raw)
        except ValueError as exc:
            raise UsageError(f"--values {raw!r}: the {axis} threshold must be a number >= 0") from exc
        if not math.isfinite(v) or v < 0:
            raise UsageError(f"--values {raw}: the {axis} threshold must be a finite number >= 0")
        return format(v, ".10g")
    if axis in _INT_AXES:
        try:
            n = int(raw)
        except ValueError as exc:
            raise UsageError(f"--values {raw!r}: the {axis} {_KNOB[axis]} must be an integer >= 1") from exc
        if n < 1:
            raise UsageError(f"--values {raw}: the {axis} {_KNOB[axis]} must be an integer >= 1")
        return str(n)
    if axis == "precision":
        if raw not in PRECISIONS:
            raise UsageError(f"--values {raw!r}: precision must be one of {', '.join(PRECISIONS)}")
        return raw
    if axis in ("compile", "fuse-projections"):
        if raw.lower() not in _BOOL:
            raise UsageError(f"--values {raw!r}: {axis} takes on or off")
        return "on" if _BOOL[raw.lower()] else "off"
    if axis == "quantization":
        if raw.lower() not in QUANTIZATIONS:
            raise UsageError(f"--values {raw!r}: quantization must be one of {', '.join(QUANTIZATIONS)}")
        return raw.lower()
    return raw  # attention backend: checked by the engine when it starts


def describe_cache(axis: str, value: str) -> str:
    """The cache configuration as it enters the fingerprint, e.g. ``first-block(threshold=0.1)``."""
    return f"{axis}({_KNOB[axis]}={value})"


def check_cache_supported(pipe: Any, axis: str, model: str) -> None:
    """Raise when ``pipe``'s denoiser cannot take the cache ``axis``.

    Raises:
        UsageError: the denoiser has no ``enable_cache`` (e.g. UNet2DConditionModel in SD/SDXL), or
            MagCache on a pipeline without shipped magnitude ratios (only FLUX ratios ship with diffusers).
    """
    cls = type(pipe).__name__
    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    dcls = type(denoiser).__name__
    if denoiser is None or not hasattr(denoiser, "enable_cache"):
        raise UsageError(
            f"--cache {axis}: {model} ({cls}, denoiser {dcls}) does not support diffusers caches (its denoiser "
            f"has no enable_cache). Supported for this pipeline: --option {' | --option '.join(OPTION_AXES)}. "
            f"Caches ({', '.join(CACHE_AXES)}) work on transformer pipelines such as FluxPipeline or WanPipeline"
        )
    if axis == "magcache" and cls != "FluxPipeline":
        supported = ", ".join(a for a in CACHE_AXES if a != "magcache")
        raise UsageError(
            f"--cache magcache: {model} ({cls}) has no magnitude ratios (diffusers ships FLUX_MAG_RATIOS only; "
            f"other models need a calibration run). Supported caches for this pipeline: {supported}"
        )


def build_cache_config(axis: str, value: str, pipe: Any, steps: int) -> Any:
    """The diffusers cache config for ``axis`` = ``value`` on ``pipe`` at ``steps`` denoising steps."""
    import diffusers.hooks as h

    cls = type(pipe).__name__

    def timestep() -> Any:
        return pipe.current_timestep

    if axis == "first-block":
        return h.FirstBlockCacheConfig(threshold=float(value))
    if axis == "taylorseer":
        denoiser = getattr(pipe, "transformer", None)
        dtype = next(denoiser.parameters()).dtype if denoiser is not None else None
        return h.TaylorSeerCacheConfig(
            cache_interval=int(value), disable_cache_before_step=min(3, steps - 1), taylor_factors_dtype=dtype
        )
    if axis == "magcache":
        from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

        return h.MagCacheConfig(threshold=float(value), mag_ratios=FLUX_MAG_RATIOS, num_inference_steps=steps)
    if axis == "fastercache":
        return h.FasterCacheConfig(
            spatial_attention_block_skip_range=int(value),
            current_timestep_callback=timestep,
            is_guidance_distilled=cls == "FluxPipeline",
        )
    if axis == "pab":
        return h.PyramidAttentionBroadcastConfig(
            spatial_attention_block_skip_range=int(value), current_timestep_callback=timestep
        )
    raise UsageError(f"unknown cache axis {axis!r}; choose one of {', '.join(CACHE_AXES)}")


def parse_cache_spec(text: str, engine: str) -> str:
    """``--cache AXIS=VALUE`` of ``serve`` and ``bench`` (the cache axes as ``sweep`` takes them) → canonical ``axis=value``.

    Raises:
        UsageError: not AXIS=VALUE, an unknown axis, a bad value, or the sim engine (it has no step cache).
    """
    axis, sep, value = text.partition("=")
    axis = axis.strip()
    if not sep or not value.strip():
        raise UsageError(f"--cache {text!r}: give AXIS=VALUE, e.g. first-block=0.1 ({', '.join(CACHE_AXES)})")
    if axis not in CACHE_AXES:
        raise UsageError(f"--cache {text!r}: unknown cache {axis!r}; choose one of {', '.join(CACHE_AXES)}")
    try:
        (canonical,) = parse_values(axis, value)
    except UsageError as exc:
        raise UsageError(f"--cache {text!r}: {exc}".replace("--values ", "")) from None
    if engine == "sim":
        raise UsageError(f"--cache {text!r}: the sim engine has no step cache; use --engine diffusers")
    return f"{axis}={canonical}"
