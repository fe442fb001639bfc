"""Per-image PSNR, SSIM and MS-SSIM kernels (numpy/scipy; MS-SSIM via torchmetrics, imported lazily).

Conventions (how they differ from torchmetrics and scikit-image: docs/concepts/quality-metrics.md):

- Images are ``(H, W)`` or ``(H, W, C)`` arrays, channel-last, ``C`` in {1, 3}; any other shape
  (a ``(B, H, W)`` batch, a channel-first ``(3, H, W)`` image, 4-D input) raises ShapeError rather than
  being read with the wrong axis as channels. uint8 images use ``data_range=255``;
  float images must pass an explicit ``data_range`` (1.0 for [0, 1], 2.0 for [-1, 1]).
- PSNR = 10·log10(R² / MSE), MSE accumulated in float64 after a float cast (no uint8 wrap-around).
  Identical images give ``+inf`` (never a capped value); callers count them separately.
- SSIM follows Wang et al. 2004 with a Gaussian window (σ = 1.5, truncated at 3.5σ → 11 taps),
  K1 = 0.01, K2 = 0.03, population covariance, per channel, mean over the interior map (5 px border
  cropped) and over channels. It reproduces scikit-image's
  ``structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
  data_range=R, channel_axis=-1)`` (tested within 1e-4; observed ~1e-7).

Memory: PSNR and SSIM run over row strips of at most :data:`STRIP_BYTES` of working memory; both are exact
(PSNR sums squared errors; an SSIM strip carries the 10 rows its 11-row windows need, so the map is the same).

Speed: the four local statistics (μx, μy, E[x²+y²], E[xy]) of every channel are filtered in one
stacked float32 array, separably and block by block (cache-resident), valid region only; values are
centered on the pair mean first so float32 variances keep ~1e-7 relative precision.
"""

from __future__ import annotations

import math

import numpy as np

from diffbench.core.psnr import psnr_of
from diffbench.errors import ShapeError, UsageError

SSIM_SIGMA = 1.5
SSIM_TRUNCATE = 3.5
SSIM_K1 = 0.01
SSIM_K2 = 0.03
SSIM_RADIUS = int(SSIM_TRUNCATE * SSIM_SIGMA + 0.5)  # 5 -> 11 taps
SSIM_WIN = 2 * SSIM_RADIUS + 1
SKIMAGE_SSIM_ARGS = (
    "skimage.metrics.structural_similarity(baseline, candidate, gaussian_weights=True, sigma=1.5, "
    "use_sample_covariance=False, data_range=R, channel_axis=-1)"
)
MS_SSIM_MIN_SIDE = 176  # torchmetrics: H // 16 > kernel_size - 1 with 5 scales and 11 taps


def _gaussian_taps() -> np.ndarray:
    x = np.arange(-SSIM_RADIUS, SSIM_RADIUS + 1, dtype=np.float64)
    w = np.exp(-0.5 * (x / SSIM_SIGMA) ** 2)
    return w / w.sum()


_TAPS64 = _gaussian_taps()
_TAPS32 = _TAPS64.astype(np.float32)


CHANNELS = (1, 3)  # accepted channel counts, channel-last


def check_image_shape(shape: tuple[int, ...], what: str = "image") -> None:
    """Refuse anything but one image: ``(H, W)`` or ``(H, W, C)`` with C in {1, 3}, channel-last.

    A 3-D array whose last axis is not 1 or 3 is ambiguous (a ``(B, H, W)`` batch of grayscale images,
    or a channel-first ``(C, H, W)`` image) and would otherwise be read as ``H=B, W=H, C=W``: the
    result is neither the per-image mean nor any image's value. Callers loop over a batch themselves.

    Raises:
        ShapeError: wrong rank, or an ambiguous channel axis (the message names the accepted shapes).
    """
    if len(shape) == 2:
        return
    if len(shape) == 3 and shape[-1] in CHANNELS:
        return
    if len(shape) == 3:
        raise ShapeError(
            f"ambiguous {what} shape {tuple(shape)}: expected (H, W) or (H, W, C) with C in {{1, 3}} "
            f"channel-last; a (B, H, W) batch or a channel-first (C, H, W) array is refused: "
            f"score each image separately (or move the channel axis last)"
        )
    raise ShapeError(
        f"expected one {what}: (H, W) or (H, W, C) with C in {{1, 3}} channel-last, got shape {tuple(shape)}; "
        f"score a batch or video image by image (diffbench.quality.video.per_frame for (T, H, W, C))"
    )


def _check_pair(a: np.ndarray, b: np.ndarray, data_range: float | None) -> float:
    if a.shape != b.shape:
        raise ShapeError(f"shape mismatch: {a.shape} vs {b.shape}; pairs must have identical shapes")
    check_image_shape(a.shape)
    if data_range is None:
        if a.dtype == np.uint8 and b.dtype == np.uint8:
            return 255.0
        raise UsageError(
            f"data_range is required for {a.dtype}/{b.dtype} input (1.0 for [0, 1] floats, 255 for uint8)"
        )
    if not data_range > 0 or not math.isfinite(data_range):
        raise UsageError(f"data_range must be a positive finite number, got {data_range}")
    return float(data_range)


def psnr(a: np.ndarray, b: np.ndarray, data_range: float | None = None) -> float:
    """PSNR in dB between two same-shape images.

    Args:
        a, b: baseline and candidate, same shape ``(H, W)`` or ``(H, W, C)`` with C in {1, 3}
            (channel-last), any real dtype.
        data_range: R in PSNR = 10·log10(R²/MSE); defaults to 255 only when both are uint8.

    Returns:
        PSNR in dB; ``math.inf`` for identical images.

    Raises:
        ShapeError: shapes differ, or a shape other than one image (e.g. a ``(B, H, W)`` batch, whose
        pooled PSNR is not the per-image mean). UsageError: missing data_range for non-uint8 input.
    """
    r = _check_pair(a, b, data_range)
    # summed over row strips of at most STRIP_BYTES of working memory: exact for uint8 (integer sums)
    return psnr_of(a, b, r, rows=_strip_rows(a.shape, 8))


def ssim_border_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """Differing pixel positions outside and inside SSIM's valid region, as ``(border, interior)``.

    SSIM's map is averaged only over window centres at least :data:`SSIM_RADIUS` (5) px from every
    edge (the scikit-image crop of (win − 1)/2 px, σ = 1.5); a pixel in that 5-px ring enters only
    through the tails of the nearest windows, so a pair that differs only there scores SSIM ≈ 1.
    Callers note such a pair (``border_only_difference``) so it is never read as "identical".

    Args:
        a, b: same shape, ``(H, W)``, ``(H, W, C)`` or ``(T, H, W, C)``; a position differs when any
            channel differs.

    Returns:
        ``(border, interior)`` counts of differing (frame, row, column) positions.
    """
    if a.shape != b.shape:
        raise ShapeError(f"shape mismatch: {a.shape} vs {b.shape}; pairs must have identical shapes")
    if a.ndim >= 3:  # OR over channels slice by slice (cheaper than .any(axis=-1) over a 3-long axis)
        diff = np.not_equal(a[..., 0], b[..., 0])
        for c in range(1, a.shape[-1]):
            diff |= np.not_equal(a[..., c], b[..., c])
    else:
        diff = np.not_equal(a, b)
    h, w = diff.shape[-2:]
    r = SSIM_RADIUS
    total = int(np.count_nonzero(diff))
    interior = int(np.count_nonzero(diff[..., r : max(r, h - r), r : max(r, w - r)]))
    return total - interior, interior


STRIP_BYTES = 64 << 20  # working memory of one row strip of PSNR / SSIM (bytes); images are scored strip by strip
_SSIM_BYTES_PER_VALUE = 4 * 4 * 3  # float32 stack of 4 statistics, its filtered copy and the temporaries, per value


def _strip_rows(shape: tuple[int, ...], bytes_per_value: int, minimum: int = 1) -> int:
    """Rows per strip so that a strip's working memory stays near :data:`STRIP_BYTES` (at least ``minimum``)."""
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64))) * bytes_per_value
    return max(minimum, STRIP_BYTES // per_row)


_ROWS = 16  # output rows per block: the block's inputs stay in cache for both passes


def _filter_valid(z: np.ndarray) -> np.ndarray:
    """Separable 11-tap Gaussian of an (H, P, W) float32 stack; 'valid' region (H-10, P, W-10).

    Both passes run block by block (16 output rows) as symmetric shifted adds, so a block's data stays
    in cache and no BLAS/OpenMP threads are involved. Only the valid region is computed, which is
    exactly scikit-image's 5-px-cropped map (the crop equals the window radius, so the boundary mode
    never reaches it).
    """
    r = SSIM_RADIUS
    w = _TAPS32
    h, p, wd = z.shape
    n, nw = h - 2 * r, wd - 2 * r
    flat = z.reshape(h, p * wd)
    out = np.empty((n, p, nw), dtype=np.float32)
    vbuf = np.empty((_ROWS, p * wd), dtype=np.float32)
    vtmp = np.empty((_ROWS, p * wd), dtype=np.float32)
    htmp = np.empty((_ROWS, p, nw), dtype=np.float32)
    for r0 in range(0, n, _ROWS):
        m = min(_ROWS, n - r0)
        v, t = vbuf[:m], vtmp[:m]
        np.multiply(flat[r0 + r : r0 + r + m], w[r], out=v)
        for k in range(r):
            np.add(flat[r0 + k : r0 + k + m], flat[r0 + 2 * r - k : r0 + 2 * r - k + m], out=t)
            t *= w[k]
            v += t
        v3 = v.reshape(m, p, wd)
        dst, t3 = out[r0 : r0 + m], htmp[:m]
        np.multiply(v3[..., r : r + nw], w[r], out=dst)
        for k in range(r):
            np.add(v3[..., k : k + nw], v3[..., 2 * r - k : 2 * r - k + nw], out=t3)
            t3 *= w[k]
            dst += t3
    return out


def ssim(a: np.ndarray, b: np.ndarray, data_range: float | None = None) -> float:
    """Mean SSIM (Gaussian σ = 1.5, K1 = 0.01, K2 = 0.03, population covariance) over channels.

    Args:
        a, b: ``(H, W)`` or ``(H, W, C)`` with C in {1, 3} (channel-last), same shape, H and W >= 11.
            A ``(B, H, W)`` batch with B not in {1, 3} is refused (it would be read as W channels).
        data_range: R for C1 = (K1·R)², C2 = (K2·R)²; defaults to 255 only when both are uint8.

    Returns:
        SSIM in [-1, 1] (1 for identical images). Equals scikit-image called with
        :data:`SKIMAGE_SSIM_ARGS` within 1e-4.

    Raises:
        ShapeError: shapes differ, an ambiguous or non-image shape, or a side is below 11 px.
        UsageError: missing data_range.
    """
    return float(ssim_channels(a, b, data_range).mean())


def ssim_channels(a: np.ndarray, b: np.ndarray, data_range: float | None = None) -> np.ndarray:
    """Per-channel mean SSIM as a float64 array of shape (C,) (see :func:`ssim`)."""
    r = _check_pair(a, b, data_range)
    if a.ndim == 2:
        a, b = a[..., None], b[..., None]
    h, w, c = a.shape
    if min(h, w) < SSIM_WIN:
        raise ShapeError(f"SSIM needs H and W >= {SSIM_WIN} px (Gaussian window), got {h}x{w}")
    # the map's rows depend only on their 11-row windows: strips of output rows that overlap by the window's
    # 10 rows give the exact map, with memory bounded by the strip instead of the image
    center = np.float32(0.5 * (float(a.mean(dtype=np.float64)) + float(b.mean(dtype=np.float64))))
    n = h - 2 * SSIM_RADIUS
    rows = _strip_rows(a.shape, _SSIM_BYTES_PER_VALUE, minimum=4 * SSIM_WIN)
    sums = np.zeros(c, dtype=np.float64)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        m = _ssim_map(a[r0 : r1 + 2 * SSIM_RADIUS], b[r0 : r1 + 2 * SSIM_RADIUS], center, r)
        sums += m.transpose(1, 0, 2).reshape(c, -1).sum(axis=1, dtype=np.float64)
    return sums / (n * (w - 2 * SSIM_RADIUS))


def _ssim_map(a: np.ndarray, b: np.ndarray, center: np.float32, r: float) -> np.ndarray:
    """The valid SSIM map ``(H-10, C, W-10)`` (float32) of an ``(H, W, C)`` pair, values centred on ``center``."""
    h, w, c = a.shape
    x = np.array(a.transpose(0, 2, 1), dtype=np.float32, order="C")  # (H, C, W)
    y = np.array(b.transpose(0, 2, 1), dtype=np.float32, order="C")
    x -= center
    y -= center
    stack = np.empty((h, 4 * c, w), dtype=np.float32)
    stack[:, 0:c] = x
    stack[:, c : 2 * c] = y
    sq = stack[:, 2 * c : 3 * c]
    np.multiply(x, x, out=sq)
    np.multiply(y, y, out=x)
    sq += x
    np.multiply(stack[:, 0:c], y, out=stack[:, 3 * c : 4 * c])
    del x, y
    f = _filter_valid(stack)
    mx, my, s2, sxy = f[:, 0:c], f[:, c : 2 * c], f[:, 2 * c : 3 * c], f[:, 3 * c : 4 * c]
    c1 = np.float32((SSIM_K1 * r) ** 2)
    c2 = np.float32((SSIM_K2 * r) ** 2)
    # sigma terms are shift-invariant: compute from centered moments
    cov = mx * my
    np.subtract(sxy, cov, out=cov)  # σxy
    m2 = mx * mx
    m2 += my * my
    np.subtract(s2, m2, out=m2)  # σx² + σy²
    mx += center  # μx, μy (uncentered) for the luminance term
    my += center
    num = mx * my
    num *= 2
    num += c1
    cov *= 2
    cov += c2
    num *= cov
    den = mx * mx
    den += my * my
    den += c1
    m2 += c2
    den *= m2
    num /= den
    return num


def ms_ssim(a: np.ndarray, b: np.ndarray, data_range: float | None = None) -> float | None:
    """MS-SSIM (torchmetrics functional, 5 scales, Gaussian σ = 1.5, explicit data_range).

    Returns None when a side is below :data:`MS_SSIM_MIN_SIDE` (176 px), where torchmetrics cannot
    compute 5 scales. Inputs: ``(H, W)`` or ``(H, W, C)`` with C in {1, 3} (channel-last; other
    shapes raise ShapeError as in :func:`ssim`); converted once to float32 NCHW in the input's range.
    """
    r = _check_pair(a, b, data_range)
    if min(a.shape[0], a.shape[1]) < MS_SSIM_MIN_SIDE:
        return None
    import torch
    from torchmetrics.functional.image import multiscale_structural_similarity_index_measure as f

    def t(x: np.ndarray) -> torch.Tensor:
        x3 = x[..., None] if x.ndim == 2 else x
        return torch.from_numpy(np.array(np.moveaxis(x3, -1, 0), dtype=np.float32, order="C"))[None]

    with torch.no_grad():
        v = f(t(b), t(a), data_range=r, gaussian_kernel=True, sigma=1.5, kernel_size=11)
    return float(v)
