"""From a request shape to token counts.

Images (DiT): N_img = (H/16)·(W/16) for an 8× VAE with 2×2 patches (FLUX: autoencoder ``ch_mult`` [1,2,4,4]
and 64 = 16·2·2 packed input channels, black-forest-labs/flux@802fb47:src/flux/util.py); joint-attention
models add their text tokens to the attention sequence. Video: N_vid = (1 + (F−1)/4)·(H/16)·(W/16) for a 4×
temporal VAE (Wan's ``seq_len``, Wan-Video/Wan2.1@9737cba:wan/text2video.py L160-166).

Models whose VAE compresses more or whose patch differs state it in the catalog (``vae.spatial_compression``,
``denoiser.patch_size``, ``denoiser.patch_t``, ``temporal_compression``): tokens per latent frame =
(H/(c·p))·(W/(c·p)), latent frames = 1 + (F−1)/t grouped by ``patch_t``. An image-to-video variant adds its
``conditioning.latent_frames`` to the sequence and its ``conditioning.cross_tokens`` to the cross-attention.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from diffbench.core import shapes as core_shapes
from diffbench.errors import ShapeError, UsageError
from diffbench.ledger.schema import ModelSpec

PATCH_PX = 16  # 8× VAE × 2×2 patch, the default of ModelSpec.patch_px (see the module docstring)


class Tokens(BaseModel):
    """Token counts of one request (batch 1). ``seq`` is the self-attention sequence length N."""

    model_config = ConfigDict(frozen=True)

    visual: int          # image or video tokens (N_img / N_vid)
    text_joint: int      # text tokens inside the joint sequence
    text_cross: int      # text tokens seen only through cross-attention
    latent_frames: int   # 1 for images
    seq: int             # visual + text_joint


def size_option(size: str) -> tuple[int, int]:
    """Parse ``WIDTHxHEIGHT`` (OpenAI ``size`` syntax) into ``(width, height)`` pixels.

    Raises:
        UsageError: not of the form ``1024x768`` with positive integers.
    """
    try:
        return core_shapes.parse_size(size, minimum=1)
    except core_shapes.SizeSyntaxError:
        raise UsageError(f"--size {size!r}: expected WIDTHxHEIGHT in pixels, e.g. 1024x1024") from None


def check_shape(model: ModelSpec, width: int, height: int, frames: int | None) -> int:
    """Validate a shape for ``model``; return the frame count to use (1 for images).

    Messages are neutral ("width 1000 is not a multiple of 16 for FLUX.1-dev; nearest valid 992 or
    1008"): the caller prefixes the input it took them from (``--size``, ``--frames``).

    Raises:
        ShapeError: a side is not a multiple of the model's ``size_multiple``; frames given for an image
            model; frames not 4k+1 for a 4× temporal VAE.
    """
    m = model.size_multiple
    for name, value in (("width", width), ("height", height)):
        if value % m:
            lo, hi = value // m * m, (value // m + 1) * m
            fix = f"nearest valid {lo} or {hi}" if lo > 0 else f"nearest valid {hi}"
            raise ShapeError(f"{name} {value} is not a multiple of {m} for {model.display_name}; {fix}")
    if model.kind == "image":
        if frames not in (None, 1):
            raise ShapeError(f"frames {frames}: {model.display_name} is an image model and takes no frames")
        return 1
    f = frames if frames is not None else (model.default_frames or 1)
    t = model.temporal_compression
    if f < 1 or (f - 1) % t:
        k = max((f - 1) // t, 0)
        raise ShapeError(
            f"frames {f}: {model.display_name} needs {t}k+1 frames (its VAE compresses time {t}×); "
            f"nearest valid {k * t + 1} or {(k + 1) * t + 1}"
        )
    return f


def max_text_tokens(model: ModelSpec) -> int:
    """The most text tokens ``model``'s pipeline takes: its ``max_text_tokens``, else its default text length."""
    return model.max_text_tokens or max(model.text_tokens_joint, model.text_tokens_cross)


def check_text_tokens(model_id: str, model: ModelSpec, text_tokens: int | None) -> None:
    """Refuse ``--text-tokens`` above what the model's pipeline takes (its text encoder truncates or raises).

    Raises:
        UsageError: naming the flag, the cap and the catalog key that states it.
    """
    cap = max_text_tokens(model)
    if text_tokens is not None and text_tokens > cap:
        key = "max_text_tokens" if model.max_text_tokens else (
            "text_tokens_joint" if model.text_tokens_joint >= model.text_tokens_cross else "text_tokens_cross")
        raise UsageError(f"--text-tokens {text_tokens}: {model.display_name} takes at most {cap} text tokens "
                         f"(catalog models.{model_id}.{key}); pass --text-tokens {cap} or fewer")


def shape_option(message: str, size: str) -> str:
    """The ledger/plan option a neutral shape message is about: ``--frames`` or ``--size SIZE``."""
    return "--frames" if message.startswith("frames") else f"--size {size}"


def count_tokens(model: ModelSpec, width: int, height: int, frames: int = 1,
                 text_tokens: int | None = None) -> Tokens:
    """Token counts for a validated shape. ``text_tokens`` overrides the joint text length (e.g. Qwen-Image).

    For a UNet (SDXL) ``visual`` is the latent grid of the first attention level, (H/16)·(W/16).
    """
    latent_frames = 1 if model.kind == "image" else 1 + (frames - 1) // model.temporal_compression
    cond = model.conditioning
    patch_t = model.denoiser.patch_t
    token_frames = -(-(latent_frames + (cond.latent_frames if cond else 0)) // patch_t)
    px = model.patch_px
    visual = token_frames * (height // px) * (width // px)
    joint = model.text_tokens_joint
    if text_tokens is not None and joint:
        joint = text_tokens
    cross = model.text_tokens_cross
    if text_tokens is not None and cross:
        cross = text_tokens
    if cond is not None:
        cross += cond.cross_tokens
    return Tokens(visual=visual, text_joint=joint, text_cross=cross, latent_frames=latent_frames,
                  seq=visual + joint)
