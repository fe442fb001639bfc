"""Video metrics: per-frame PSNR/SSIM (LPIPS optional), temporal flicker and motion magnitude.

- Temporal flicker (VBench ``temporal_flickering``): 1 − mean over consecutive pairs of
  mean|f_t − f_{t+1}| / 255, on 8-bit RGB. Higher is smoother. Undefined for a single frame.
- Motion magnitude: the mean absolute difference of consecutive frames in 8-bit levels (0-255). It is
  the same frame-difference statistic as flicker, read as motion; no optical flow (no OpenCV).
  ``motion_ratio`` = candidate / baseline (below 1: the candidate moves less, a typical caching effect).
"""

from __future__ import annotations

import math

import numpy as np

from diffbench.errors import ShapeError
from diffbench.quality.kernels import psnr, ssim


def mean_abs_frame_diff(video: np.ndarray, data_range: float = 255.0) -> float | None:
    """Mean over consecutive frame pairs of mean|f_t − f_{t+1}|, in 8-bit levels; None for T < 2.

    Args:
        video: ``(T, H, W, C)`` with C in {1, 3}, uint8, or float in [0, data_range] (rescaled to 8-bit
            levels). A 3-D array is refused: ``(H, W, 3)`` and ``(T, H, W)`` cannot be told apart.

    Raises:
        ShapeError: not ``(T, H, W, C)`` with C in {1, 3}.
    """
    if video.ndim != 4 or video.shape[-1] not in (1, 3):
        raise ShapeError(f"expected a (T, H, W, C) video with C in {{1, 3}}, got shape {video.shape}; "
                         "add a channel axis to a grayscale (T, H, W) video")
    if video.shape[0] < 2:
        return None
    scale = 255.0 / data_range
    total = 0.0
    for t in range(video.shape[0] - 1):
        d = np.abs(video[t + 1].astype(np.float32) - video[t].astype(np.float32))
        total += float(d.mean(dtype=np.float64)) * scale
    return total / (video.shape[0] - 1)


def temporal_flicker(video: np.ndarray, data_range: float = 255.0) -> float | None:
    """VBench temporal flickering score in [0, 1]: 1 − mean_abs_frame_diff / 255; None for T < 2."""
    m = mean_abs_frame_diff(video, data_range)
    return None if m is None else 1.0 - m / 255.0


def per_frame(a: np.ndarray, b: np.ndarray, data_range: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame PSNR (dB, +inf for identical frames) and SSIM of two ``(T, H, W, C)`` videos.

    Raises:
        ShapeError: frame count or frame size differs (never truncated or padded).
    """
    if a.ndim != 4 or b.ndim != 4:
        raise ShapeError(f"per_frame takes (T, H, W, C) videos, got {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"frame count mismatch: baseline {a.shape[0]}, candidate {b.shape[0]}")
    if a.shape != b.shape:
        raise ShapeError(f"frame size mismatch: baseline {a.shape[1:]}, candidate {b.shape[1:]}")
    p = np.array([psnr(a[t], b[t], data_range) for t in range(a.shape[0])], dtype=np.float64)
    s = np.array([ssim(a[t], b[t], data_range) for t in range(a.shape[0])], dtype=np.float64)
    return p, s


def worst_index(values: np.ndarray, higher_is_better: bool = True) -> int:
    """Index of the worst frame (first one on ties)."""
    return int(np.argmin(values) if higher_is_better else np.argmax(values))


def finite_mean(values: np.ndarray) -> float | None:
    f = values[np.isfinite(values)]
    return float(f.mean()) if f.size else None


def ratio_undefined(num: float | None, den: float | None) -> str | None:
    """Why :func:`ratio` of two motion magnitudes (candidate ``num``, baseline ``den``) is None, else None."""
    if num is None or den is None:
        return "fewer than 2 frames (no frame difference)"
    if den == 0.0:
        return "the baseline does not move (mean frame difference 0)"
    if not math.isfinite(num / den):
        return "not finite"
    return None


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0.0:
        return None
    r = num / den
    return r if math.isfinite(r) else None
