"""What the served pipeline does with optional request parameters, read from the pipeline itself.

:func:`parameter_use` inspects the engine once at startup: the pipeline's ``__call__`` signature (which
parameters exist and their defaults) and its denoiser config (``guidance_embeds``,
``time_cond_proj_dim``). No model names are hard-coded. The rules (diffusers pipelines):

- **True-CFG pipelines** (``__call__`` takes ``true_cfg_scale``: FLUX, Qwen-Image): ``guidance_scale``
  only feeds the transformer's guidance embedding, so it is unused when ``guidance_embeds`` is false
  (e.g. FLUX.1-schnell, the tiny-flux test model); ``negative_prompt`` is used only with
  ``true_cfg_scale > 1``, and the service never passes ``true_cfg_scale``, so it is unused unless the
  pipeline's own default is above 1 (Qwen-Image: 4.0).
- **Classifier-free-guidance pipelines** (SD, SDXL, SD3, Wan): ``guidance_scale`` is used; CFG (and so
  ``negative_prompt``) is on only when the effective guidance is above 1 and the denoiser has no
  ``time_cond_proj_dim`` (an LCM-style guidance embedding).
- An engine without a pipeline to inspect (the simulated engine) reports ``EngineInfo.cfg``; ``"none"``
  means neither parameter is used.

``default_frames`` is the pipeline's own ``num_frames`` default (Wan: 81), None when it has none.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from diffbench.engines.base import Engine


@dataclass(frozen=True)
class ParameterUse:
    """How one pipeline uses ``guidance_scale`` and ``negative_prompt`` (see module docstring)."""

    guidance_used: bool
    negative_mode: str  # "never", "always" or "cfg" (only when the effective guidance is > 1)
    default_guidance: float | None = None
    default_frames: int | None = None

    def ignored(self, guidance: float | None, negative_prompt: str | None) -> list[str]:
        """The given parameters this pipeline will not act on (names as in the request body)."""
        out = []
        if guidance is not None and not self.guidance_used:
            out.append("guidance_scale")
        if negative_prompt is not None:
            effective = guidance if guidance is not None else self.default_guidance
            cfg_on = effective is not None and effective > 1
            if self.negative_mode == "never" or (self.negative_mode == "cfg" and not cfg_on):
                out.append("negative_prompt")
        return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def parameter_use(engine: Engine) -> ParameterUse:
    """Inspect ``engine`` (its ``pipe`` attribute when it has one). See the module docstring."""
    pipe = getattr(engine, "pipe", None)
    if pipe is None:
        info = engine.info()
        if info.cfg == "none":
            return ParameterUse(guidance_used=False, negative_mode="never")
        return ParameterUse(
            guidance_used=True, negative_mode="always", default_guidance=info.default_guidance
        )
    params = inspect.signature(type(pipe).__call__).parameters

    def default(name: str) -> Any:
        p = params.get(name)
        return None if p is None or p.default is inspect.Parameter.empty else p.default

    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    config = getattr(denoiser, "config", None)
    frames = default("num_frames")
    default_frames = int(frames) if isinstance(frames, int) and frames > 0 else None
    has_negative = "negative_prompt" in params
    if "true_cfg_scale" in params:
        true_cfg = _number(default("true_cfg_scale"))
        return ParameterUse(
            guidance_used=bool(getattr(config, "guidance_embeds", False)),
            negative_mode="always" if has_negative and true_cfg is not None and true_cfg > 1 else "never",
            default_guidance=_number(default("guidance_scale")),
            default_frames=default_frames,
        )
    guidance_used = "guidance_scale" in params
    embedded = getattr(config, "time_cond_proj_dim", None) is not None
    return ParameterUse(
        guidance_used=guidance_used,
        negative_mode="cfg" if has_negative and guidance_used and not embedded else "never",
        default_guidance=_number(default("guidance_scale")),
        default_frames=default_frames,
    )
