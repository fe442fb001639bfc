"""PSNR / SSIM kernels against scikit-image (reference) and closed forms."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from PIL import Image, ImageFilter
from skimage import data
from skimage.metrics import peak_signal_noise_ratio as sk_psnr
from skimage.metrics import structural_similarity as sk_ssim

from diffbench.errors import ShapeError, UsageError
from diffbench.quality.kernels import ms_ssim, psnr, ssim


def _sk_ssim(a: np.ndarray, b: np.ndarray, r: float) -> float:
    kw = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=r)
    if a.ndim == 3:
        kw["channel_axis"] = -1
    return float(sk_ssim(a, b, **kw))


def _jpeg(img: np.ndarray, q: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=q)
    buf.seek(0)
    return np.asarray(Image.open(buf).convert(Image.fromarray(img).mode))


def _blur(img: np.ndarray, radius: float) -> np.ndarray:
    return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius)))


def _noise(img: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(img + rng.normal(0, sigma, img.shape)), 0, 255).astype(np.uint8)


PHOTOS = {"astronaut": data.astronaut, "coffee": data.coffee, "chelsea": data.chelsea, "camera": data.camera}
DEGRADE = {
    "jpeg10": lambda x: _jpeg(x, 10),
    "jpeg50": lambda x: _jpeg(x, 50),
    "jpeg90": lambda x: _jpeg(x, 90),
    "blur1": lambda x: _blur(x, 1.0),
    "blur3": lambda x: _blur(x, 3.0),
    "noise5": lambda x: _noise(x, 5, 1),
    "noise25": lambda x: _noise(x, 25, 2),
}


@pytest.mark.parametrize("photo", sorted(PHOTOS))
@pytest.mark.parametrize("deg", sorted(DEGRADE))
def test_psnr_ssim_equal_scikit_image(photo: str, deg: str) -> None:
    a = PHOTOS[photo]()
    b = DEGRADE[deg](a)
    assert b.shape == a.shape and b.dtype == np.uint8
    assert abs(psnr(a, b, 255) - sk_psnr(a, b, data_range=255)) < 1e-4
    assert abs(ssim(a, b, 255) - _sk_ssim(a, b, 255)) < 1e-4


def test_float_input_equals_scikit_image() -> None:
    a = data.astronaut() / 255.0
    b = DEGRADE["jpeg50"](data.astronaut()) / 255.0
    assert abs(ssim(a, b, 1.0) - _sk_ssim(a, b, 1.0)) < 1e-4
    assert abs(psnr(a, b, 1.0) - sk_psnr(a, b, data_range=1.0)) < 1e-4


def test_psnr_gaussian_noise_closed_form() -> None:
    rng = np.random.default_rng(7)
    a = rng.random((1024, 1024, 3))
    for sigma in (0.01, 0.05, 0.1):
        b = a + rng.normal(0, sigma, a.shape)  # no clipping: MSE = sigma^2 exactly in expectation
        assert abs(psnr(a, b, 1.0) - (-20 * math.log10(sigma))) < 0.1


def test_uint8_and_float_same_pixels_same_psnr() -> None:
    a = np.array([[10, 200, 0]], dtype=np.uint8).reshape(1, 3, 1)
    b = np.array([[12, 100, 255]], dtype=np.uint8).reshape(1, 3, 1)
    expected = 10 * math.log10(255**2 / np.mean((a.astype(float) - b.astype(float)) ** 2))  # 25009.67 MSE
    assert abs(psnr(a, b) - expected) < 1e-9
    assert abs(psnr(a / 255.0, b / 255.0, 1.0) - expected) < 1e-9
    img = data.coffee()
    deg = DEGRADE["noise25"](img)
    assert abs(psnr(img, deg) - psnr(img / 255.0, deg / 255.0, 1.0)) < 1e-9


def test_identical_is_inf_and_ssim_one() -> None:
    a = data.chelsea()
    assert psnr(a, a.copy()) == math.inf
    assert ssim(a, a.copy()) == pytest.approx(1.0, abs=1e-6)


def test_green_blue_only_difference_lowers_ssim() -> None:
    a = data.astronaut()
    b = a.copy()
    b[..., 1:] = DEGRADE["noise25"](a)[..., 1:]
    assert (b[..., 0] == a[..., 0]).all()
    assert ssim(a, b) < 0.95
    assert abs(ssim(a, b) - _sk_ssim(a, b, 255)) < 1e-4


def test_border_change_lowers_ssim() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    b = a.copy()
    b[0, :] = b[-1, :] = 0
    b[:, 0] = b[:, -1] = 0
    s = ssim(a, b)
    # The scikit-image convention averages the 5-px-cropped map: a 1-px border enters only through the
    # Gaussian window tails, so the drop is small but real (torchmetrics #2718 scored it exactly 1.0).
    assert s < 1.0 - 1e-5
    assert abs(s - _sk_ssim(a, b, 255)) < 1e-6
    c = a.copy()
    c[:4], c[-4:], c[:, :4], c[:, -4:] = 0, 0, 0, 0
    assert ssim(a, c) < 0.995
    assert abs(ssim(a, c) - _sk_ssim(a, c, 255)) < 1e-4


def test_errors() -> None:
    a = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(ShapeError):
        psnr(a, np.zeros((32, 31, 3), np.uint8))
    with pytest.raises(UsageError):
        psnr(a.astype(float), a.astype(float))  # float needs an explicit data_range
    with pytest.raises(ShapeError):
        ssim(np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8))


@pytest.mark.slow
def test_ms_ssim_size_limit_and_reference() -> None:
    import torch
    from torchmetrics.functional.image import multiscale_structural_similarity_index_measure as tm

    small = data.chelsea()[:150, :150]
    assert ms_ssim(small, DEGRADE["blur1"](small)) is None
    a = data.astronaut()
    b = DEGRADE["jpeg50"](a)
    t = lambda x: torch.from_numpy(np.array(x)).permute(2, 0, 1)[None].float()  # noqa: E731
    ref = float(tm(t(b), t(a), data_range=255.0))
    assert abs(ms_ssim(a, b, 255) - ref) < 1e-6


def test_batch_of_grayscale_images_is_refused_not_read_as_channels() -> None:
    # Reproduction: (B, H, W) uint8 with B = 5 returned 0.888 (W read as channels) where the per-image
    # mean SSIM is 0.328. Every kernel now refuses the ambiguous shape and names the accepted ones.
    cam = data.camera()
    a = np.stack([cam[32 * i : 32 * i + 64, 32 * i : 32 * i + 64] for i in range(12)])  # (12, 64, 64)
    b = np.clip(a + np.random.default_rng(0).normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    per_image = np.mean([_sk_ssim(a[i], b[i], 255) for i in range(12)])
    as_channels = _sk_ssim(a, b, 255)  # what reading W as the channel axis computes
    assert per_image < 0.5 and as_channels > 0.9  # the silent answer was far from the per-image mean
    for fn in (ssim, psnr, ms_ssim):
        with pytest.raises(ShapeError, match=r"ambiguous image shape \(12, 64, 64\).*\(H, W, C\) with C in \{1, 3\}"):
            fn(a, b, 255)
    with pytest.raises(ShapeError, match="channel-last"):
        ssim(np.moveaxis(data.astronaut(), -1, 0), np.moveaxis(data.astronaut(), -1, 0))  # (3, H, W)
    with pytest.raises(ShapeError, match="one image"):
        psnr(a[None], b[None])  # 4-D
    # the accepted forms still equal the reference, image by image
    assert np.mean([ssim(a[i], b[i]) for i in range(12)]) == pytest.approx(per_image, abs=1e-4)
    assert ssim(a[0][..., None], b[0][..., None]) == pytest.approx(_sk_ssim(a[0], b[0], 255), abs=1e-4)
    assert psnr(a[0][..., None], b[0][..., None]) == pytest.approx(sk_psnr(a[0], b[0], data_range=255))


def test_ssim_border_difference_counts_the_cropped_ring() -> None:
    from diffbench.quality.kernels import SSIM_RADIUS, ssim_border_difference

    a = np.zeros((32, 40, 3), np.uint8)
    b = a.copy()
    b[SSIM_RADIUS - 1, 20, 0] = 9  # row 4: inside the 5-px ring SSIM crops
    b[20, 40 - SSIM_RADIUS, 2] = 9  # column 35 = W - 5: in the ring too
    assert ssim_border_difference(a, b) == (2, 0)
    b[SSIM_RADIUS, 20, 1] = 9  # row 5 is the first window centre SSIM averages
    assert ssim_border_difference(a, b) == (2, 1)
    assert ssim_border_difference(a[..., 0], b[..., 0]) == (1, 0)  # (H, W): only channel 0 counted
