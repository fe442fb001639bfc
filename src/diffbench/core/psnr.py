"""PSNR between two same-shape arrays: the one implementation (no torch, no scikit-image).

PSNR = 10·log10(R² / MSE), squared errors summed in float64 after a float cast (no uint8 wrap-around);
+inf when the arrays are identical. For uint8 with R = 255 this is scikit-image's
``peak_signal_noise_ratio(a, b, data_range=255)``. :func:`psnr_uint8` serves the reproducibility
checks; ``diffbench.quality.kernels.psnr`` adds the image-shape and data-range checks and calls
:func:`psnr_of`.
"""

from __future__ import annotations

import math

import numpy as np


def psnr_of(a: np.ndarray, b: np.ndarray, data_range: float, rows: int | None = None) -> float:
    """PSNR in dB of two same-shape arrays with peak value ``data_range``; ``inf`` when identical.

    Args:
        a, b: same shape, any real dtype (the caller checks shapes).
        data_range: R, positive and finite.
        rows: squared errors are summed over strips of ``rows`` entries of axis 0 (bounded working
            memory); None sums the whole array at once. The result does not depend on it for uint8
            (integer sums, exact in float64).
    """
    if a.ndim == 0:
        a, b = a.reshape(1), b.reshape(1)
    step = max(1, a.shape[0] if rows is None else rows)
    sse = 0.0
    for r0 in range(0, a.shape[0], step):
        sa, sb = a[r0 : r0 + step], b[r0 : r0 + step]
        if a.dtype == np.uint8 and b.dtype == np.uint8:
            d = sa.astype(np.float32) - sb.astype(np.float32)  # exact; d*d <= 65025 < 2**24, exact in float32
        else:
            d = sa.astype(np.float64) - sb.astype(np.float64)
        d *= d
        sse += float(np.sum(d, dtype=np.float64))
    mse = sse / a.size
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(data_range * data_range / mse)


def psnr_uint8(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays of the same shape; ``inf`` when identical.

    Raises:
        ValueError: different shapes or a dtype other than uint8.
    """
    if a.shape != b.shape:
        raise ValueError(f"psnr_uint8: shapes differ {a.shape} vs {b.shape}")
    if a.dtype != np.uint8 or b.dtype != np.uint8:
        raise ValueError(f"psnr_uint8: expected uint8 arrays, got {a.dtype} and {b.dtype}")
    return psnr_of(a, b, 255.0)
