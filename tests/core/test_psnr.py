from __future__ import annotations

import math

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio

from diffbench.core.psnr import psnr_uint8


def test_matches_scikit_image_and_has_no_uint8_wraparound() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-20, 21, a.shape), 0, 255).astype(np.uint8)
    assert psnr_uint8(a, b) == pytest.approx(peak_signal_noise_ratio(a, b, data_range=255), abs=1e-9)
    assert psnr_uint8(a, a) == math.inf
    with pytest.raises(ValueError, match="shapes differ"):
        psnr_uint8(a, a[:10])


def test_quality_psnr_is_the_core_psnr() -> None:
    from diffbench.quality.kernels import psnr

    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-9, 10, a.shape), 0, 255).astype(np.uint8)
    assert psnr(a, b) == psnr_uint8(a, b)
    f = a.astype(np.float64) / 255.0
    g = b.astype(np.float64) / 255.0
    assert psnr(f, g, data_range=1.0) == pytest.approx(peak_signal_noise_ratio(f, g, data_range=1.0), abs=1e-9)
