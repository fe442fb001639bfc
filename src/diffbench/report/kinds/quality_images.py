"""Images of the quality report: find a pair's files again, decode them, the amplified difference heat map.

Files are decoded with the quality command's own reader (:func:`diffbench.quality.io.load_any`: PNG/JPEG/
WebP, animated GIF/APNG/WebP and frame folders as video, ``.npy`` arrays, videos through PyAV), so the
report shows exactly the pixels that were scored. A video (or animated image) shows one frame: the one
the caller picks (its worst frame by PSNR).

Heat map: ``m = clip(round(mean_c |candidate − baseline| × gain), 0, 255)`` per pixel, in 8-bit levels
(float ``.npy`` images are scaled by 255 first), coloured with matplotlib's ``inferno`` colormap (black =
no difference; full yellow = a mean difference of ``255 / gain`` levels or more).

Thumbnails: images larger than ``thumb_px`` (longest side) are reduced by an integer factor ``k``; the
baseline and candidate by a box average of each ``k × k`` block (Pillow ``reduce``), the heat map by the
block **maximum** (numpy), so a single hot pixel never vanishes from the thumbnail. Images smaller than
half of ``thumb_px`` are enlarged by an integer factor with nearest-neighbour (each source pixel becomes a
square; nothing interpolated). Thumbnails are PNG-encoded (lossless).
"""

from __future__ import annotations

import io
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from diffbench.errors import InputError


def resolve_pair_path(stored: str, result_path: Path, side: str) -> Path:
    """The file a quality result names for one side of a pair, found again for the report.

    ``quality`` stores each pair's paths as given on its command line (``a/p00_s0_i0.png``, relative to the
    directory it ran in, or absolute). They are looked up as stored (relative to the current directory),
    then relative to the result file's directory.

    Raises:
        InputError: the file is in neither place; the message names the path and what to do.
    """
    p = Path(stored)
    tried = [p] if p.is_absolute() else [p, result_path.resolve().parent / p]
    for cand in tried:
        if cand.exists():
            return cand
    where = " or ".join(str(t) for t in tried)
    raise InputError(
        f"{result_path}: the {side} output {stored!r} of this quality result is gone (looked for {where}); "
        "run diffbench report from the directory where diffbench quality ran, or keep (or move back) the "
        "baseline and candidate output directories next to the result")


def to_rgb8(arr: np.ndarray, data_range: float) -> np.ndarray:
    """An ``(H, W, C)`` image (uint8 range 255 or float range 1) as uint8 RGB ``(H, W, 3)`` for display."""
    if data_range != 255.0 or arr.dtype != np.uint8:
        arr = np.clip(np.rint(arr.astype(np.float64) * (255.0 / data_range)), 0, 255).astype(np.uint8)
    if arr.shape[-1] == 1:
        arr = np.repeat(arr, 3, axis=-1)
    return np.ascontiguousarray(arr)


def load_frame(path: Path, alpha: str, frame: int | None) -> np.ndarray:
    """Decode ``path`` with the quality reader and return one uint8 RGB ``(H, W, 3)`` image.

    For a video or animated image, ``frame`` picks the frame (default 0).

    Raises:
        InputError: the file cannot be decoded (names the file), or ``frame`` is out of range.
    """
    from diffbench.quality.io import load_any

    loaded = load_any(path, alpha)  # type: ignore[arg-type]
    arr = loaded.array
    if loaded.is_video:
        i = 0 if frame is None else frame
        if not 0 <= i < arr.shape[0]:
            raise InputError(f"{path}: frame {i} asked for, the file has {arr.shape[0]} frames")
        arr = arr[i]
    return to_rgb8(arr, loaded.data_range)


def diff_magnitude(baseline: np.ndarray, candidate: np.ndarray, gain: float) -> np.ndarray:
    """``clip(round(mean_c |candidate − baseline| × gain), 0, 255)`` as uint8 ``(H, W)``.

    Args:
        baseline, candidate: uint8 ``(H, W, C)`` of one shape (8-bit levels).
        gain: the amplification (``report --amplify``), > 0.

    Raises:
        ValueError: shapes differ.
    """
    if baseline.shape != candidate.shape:
        raise ValueError(f"shapes differ: {baseline.shape} vs {candidate.shape}")
    d = np.abs(candidate.astype(np.int16) - baseline.astype(np.int16)).mean(axis=-1)
    return np.clip(np.rint(d * gain), 0, 255).astype(np.uint8)


@lru_cache(maxsize=4)
def colormap_lut(name: str = "inferno") -> np.ndarray:
    """A 256-entry uint8 RGB lookup table ``(256, 3)`` of a matplotlib colormap."""
    from matplotlib import colormaps

    rgba = colormaps[name](np.linspace(0.0, 1.0, 256))
    return np.clip(np.rint(rgba[:, :3] * 255.0), 0, 255).astype(np.uint8)


def heat_map(baseline: np.ndarray, candidate: np.ndarray, gain: float) -> tuple[np.ndarray, np.ndarray]:
    """The amplified difference: ``(magnitude (H, W) uint8, colour image (H, W, 3) uint8 = LUT[magnitude])``."""
    m = diff_magnitude(baseline, candidate, gain)
    return m, colormap_lut()[m]


def scale_factor(h: int, w: int, thumb_px: int) -> tuple[int, int]:
    """``(down, up)`` integer factors for a thumbnail: one of them is 1."""
    longest = max(h, w)
    if longest > thumb_px:
        return math.ceil(longest / thumb_px), 1
    return 1, (thumb_px // longest if longest * 2 <= thumb_px else 1)


def thumbnail(img: np.ndarray, thumb_px: int, *, block_max: bool = False) -> np.ndarray:
    """Scale an ``(H, W)`` or ``(H, W, 3)`` uint8 image for the grid (see the module docstring).

    ``block_max`` reduces by the maximum of each block (heat maps) instead of the box average.
    """
    from PIL import Image

    down, up = scale_factor(img.shape[0], img.shape[1], thumb_px)
    if down > 1:
        if block_max:
            h, w = img.shape[:2]
            ph, pw = -h % down, -w % down
            pad = ((0, ph), (0, pw)) + ((0, 0),) * (img.ndim - 2)
            x = np.pad(img, pad, mode="edge")
            x = x.reshape(x.shape[0] // down, down, x.shape[1] // down, down, *img.shape[2:])
            return np.ascontiguousarray(x.max(axis=(1, 3)))
        return np.asarray(Image.fromarray(img).reduce(down))
    if up > 1:
        return np.ascontiguousarray(np.repeat(np.repeat(img, up, axis=0), up, axis=1))
    return img


def png(img: np.ndarray) -> bytes:
    """uint8 ``(H, W)`` / ``(H, W, 3)`` as PNG bytes (lossless, no metadata)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()
