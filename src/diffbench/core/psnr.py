"""PSNR between two uint8 arrays, used by the reproducibility check (no torch, no scikit-image).

PSNR = 10·log10(MAX² / MSE) with MAX = 255 for uint8 (differences taken in float64, so no uint8
wrap-around); +inf when the arrays are identical. Same definition as scikit-image's
``peak_signal_noise_ratio(a, b, data_range=255)``.
"""

from __future__ import annotations

import math

import numpy as np


def psnr_uint8(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays of the same shape; ``inf`` when identical.

    Raises:
        ValueError: different shapes or a dtype other than uint8.
    """
    if a.shape != b.shape:
        raise ValueError(f"psnr_uint8: shapes differ {a.shape} vs {b.shape}")
    if a.dtype != np.uint8 or b.dtype != np.uint8:
        raise ValueError(f"psnr_uint8: expected uint8 arrays, got {a.dtype} and {b.dtype}")
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(255.0**2 / mse)
