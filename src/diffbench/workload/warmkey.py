"""The warm-up key: what a request must share with a warm-up for the warm-up to cover it.

``bench``, ``load`` and ``serve`` warm up by this one key, and ``load`` keeps one statistics row per key.
Two requests with the same key run the same compiled graph (``torch.compile`` specialises on tensor
shapes, autotuning on the batch) and the same pipeline path; a request with a key no warm-up sent pays a
first-call compile inside the measurement.

The key holds (:class:`WarmupKey`):

- ``width``, ``height`` (pixels), ``frames`` (None for images), ``steps`` (the steps asked for: the
  scheduler's tables and a step-count-specialised graph), ``batch`` (images per request, ``n``);
- ``cfg``: classifier-free guidance on (``guidance > 1``, the diffusers rule ``do_classifier_free_guidance``:
  the denoiser then runs on a doubled batch), off (``guidance <= 1``), or None (not given: the service's
  default applies);
- ``negative``: a negative prompt is given (true-CFG pipelines such as FLUX run a second denoiser pass only
  then; every CFG pipeline encodes one more prompt);
- ``edit``, ``mask``, ``strength``: an image-to-image request (another pipeline, an image encode), an
  inpainting mask, and the strength that sets how many steps run (None for text-to-image, or an edit that
  leaves the strength to the service);
- ``adapter``, ``adapter_scale``: the active LoRA adapter and its scale (switching one can recompile a
  compiled denoiser); both None for the base model.
"""

from __future__ import annotations

from dataclasses import dataclass


def cfg_state(guidance: float | None) -> bool | None:
    """Classifier-free guidance on (True: ``guidance > 1``), off (False) or not given (None: ``guidance`` None)."""
    return None if guidance is None else guidance > 1.0


@dataclass(frozen=True)
class WarmupKey:
    """One warm-up key (see the module docstring); hashable, ordered by field."""

    width: int
    height: int
    frames: int | None
    steps: int
    batch: int = 1
    cfg: bool | None = None
    negative: bool = False
    edit: bool = False
    mask: bool = False
    strength: float | None = None
    adapter: str | None = None
    adapter_scale: float | None = None

    def suffix(self) -> str:
        """The label parts beyond size, frames and steps that differ from a plain text-to-image request at
        ``n`` 1 with the service's default guidance: `` n4`` (batch), `` cfg`` / `` nocfg`` (guidance given,
        above / at most 1), `` neg`` (a negative prompt), `` edit@0.6`` / `` inpaint@0.6`` (an edit at
        strength 0.6; `` edit`` when the strength is the service's), `` lora=NAME`` (``@SCALE`` when not 1).
        Empty for a plain text-to-image key."""
        parts = []
        if self.batch != 1:
            parts.append(f"n{self.batch}")
        if self.cfg is not None:
            parts.append("cfg" if self.cfg else "nocfg")
        if self.negative:
            parts.append("neg")
        if self.edit:
            what = "inpaint" if self.mask else "edit"
            parts.append(what if self.strength is None else f"{what}@{self.strength:g}")
        if self.adapter is not None:
            scale = self.adapter_scale if self.adapter_scale is not None else 1.0
            parts.append(f"lora={self.adapter}" + ("" if scale == 1.0 else f"@{scale:g}"))
        return "".join(f" {p}" for p in parts)

    def label(self) -> str:
        """``WIDTHxHEIGHT[ fF] sS`` plus :meth:`suffix`, e.g. ``64x64 s2 n4``, ``512x512 s8 cfg neg``."""
        f = f" f{self.frames}" if self.frames else ""
        return f"{self.width}x{self.height}{f} s{self.steps}{self.suffix()}"


__all__ = ["WarmupKey", "cfg_state"]
