"""Input pictures of image-to-image requests (edits): decoding, resizing, and the steps an edit runs.

Engines and callers (``bench --input-images``, the server's edits route) share these so that a bad input
image is refused with the same message everywhere. PIL is imported lazily (it comes with the diffusers
extra).
"""

from __future__ import annotations

import io
from typing import Any, Literal

from diffbench.errors import InputError, require

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP")
"""Encodings accepted for an edit's input image and mask (PIL format names)."""

StepsRule = Literal["floor", "flow"]


def decode_image(data: bytes, what: str = "input image") -> Any:
    """Decode encoded bytes (PNG/JPEG/WebP) into a PIL image (not yet converted or resized).

    Raises:
        InputError: not an image, or an encoding outside :data:`IMAGE_FORMATS` (``what`` names the input).
    """
    pil = require("PIL.Image", "diffusers")
    try:
        img = pil.open(io.BytesIO(data))
        img.load()
    except pil.DecompressionBombError as exc:
        raise InputError(f"{what}: too large a picture to decode ({' '.join(str(exc).split())[:90]}); resize it "
                         "(an edit input is resized to the shape anyway)") from None
    except Exception as exc:  # PIL raises UnidentifiedImageError, OSError, SyntaxError ...
        raise InputError(f"{what}: not a decodable image ({type(exc).__name__}); give a PNG, JPEG or WebP "
                         "file") from None
    if img.format not in IMAGE_FORMATS:
        raise InputError(f"{what}: {img.format} images are not accepted; give a PNG, JPEG or WebP file")
    return img


def prepare_image(data: bytes, width: int, height: int, *, mask: bool = False, what: str = "input image") -> Any:
    """The PIL image an img2img pipeline takes: decoded, converted (RGB, or L for a mask) and resized to
    ``width`` x ``height`` pixels (Lanczos; a mask with nearest-neighbour, so it stays binary).

    Raises:
        InputError: see :func:`decode_image`.
    """
    pil = require("PIL.Image", "diffusers")
    img = decode_image(data, what).convert("L" if mask else "RGB")
    if img.size != (width, height):
        img = img.resize((width, height), pil.Resampling.NEAREST if mask else pil.Resampling.LANCZOS)
    return img


def edit_steps(steps: int, strength: float, rule: StepsRule = "floor") -> int:
    """Denoising steps an img2img call runs for ``steps`` requested at ``strength`` (diffusers 0.42
    ``get_timesteps``).

    - ``floor`` (StableDiffusion / SDXL img2img and inpaint): ``int(steps × strength)``.
    - ``flow`` (Flux, SD3, QwenImage img2img and inpaint): ``steps − int(steps − steps × strength)``, which
      is ``ceil(steps × strength)`` up to float rounding (8 steps at 0.6 run 5, not 4).

    The result may be 0 for ``floor`` (the pipeline then refuses the call).
    """
    if rule == "floor":
        return min(int(steps * strength), steps)
    return steps - int(max(steps - min(steps * strength, steps), 0))
