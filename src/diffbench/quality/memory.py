"""Memory bound of one pair: estimate the peak from the files' headers and refuse before decoding.

The peak of decoding and scoring a pair grows with its pixel count: both decoded arrays, Pillow's decode
buffer, the border-difference masks, and MS-SSIM / LPIPS (torch, whole image). PSNR and SSIM are computed in
row strips of at most :data:`~diffbench.quality.kernels.STRIP_BYTES` (exact, see kernels), so they add a
constant, not a per-pixel term. The per-pixel constants below were measured (``VmHWM``) on RGB pairs
(``tests/quality/test_memory.py`` checks the estimate against a fresh measurement).

The bound of one pair is ``max_memory`` when given, else :data:`AVAILABLE_FRACTION` of the memory available
to this process (the least of psutil's available memory, the cgroup v2 limit's headroom and the
``RLIMIT_AS`` headroom) divided by the scoring threads.
"""

from __future__ import annotations

import resource
from pathlib import Path

from diffbench.quality.io import ARRAY_EXTS, IMAGE_EXTS, frame_number, unbounded_pillow

# Peak bytes per pixel of one RGB uint8 pair (both sides), measured as the resident high-water mark over 1-10 Mpx
# pairs (the slope of peak against pixels): ~9 B/px base + ~70 MiB, 447-453 B/px in all with MS-SSIM, 130-160 more
# with LPIPS; the constants are rounded up.
BYTES_PER_PIXEL_BASE = 16.0  # decode of both sides (and Pillow's 4 B/px buffer), border masks
BYTES_PER_PIXEL_MS_SSIM = 460.0  # torchmetrics MS-SSIM on the whole image (float32 NCHW, 5 scales, conv stacks)
BYTES_PER_PIXEL_LPIPS = 170.0  # LPIPS(alex) activations of both sides
FIXED_BYTES = 96 << 20  # strips of PSNR/SSIM (kernels.STRIP_BYTES) and small buffers
AVAILABLE_FRACTION = 0.7


def available_bytes() -> int:
    """Bytes this process can still allocate: min(psutil available, cgroup v2 headroom, RLIMIT_AS headroom)."""
    import psutil

    avail = int(psutil.virtual_memory().available)
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            avail = min(avail, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        avail = min(avail, max(0, soft - int(psutil.Process().memory_info().vms)))
    return avail


def pair_budget(max_memory: int | None, workers: int) -> int:
    """The bytes one pair may take: ``max_memory``, else a share of :func:`available_bytes` per thread."""
    if max_memory is not None:
        return max_memory
    return int(AVAILABLE_FRACTION * available_bytes() / max(1, workers))


def estimate_pair_bytes(frames: int, height: int, width: int, ms_ssim: bool, lpips: bool) -> int:
    """Estimated peak bytes of decoding and scoring one pair of ``frames`` frames of ``width x height`` px.

    A video's frames are decoded whole (both sides: 6 bytes per pixel per frame) and scored frame by frame.
    """
    px = height * width
    per = BYTES_PER_PIXEL_BASE + (BYTES_PER_PIXEL_MS_SSIM if ms_ssim and frames == 1 else 0.0) \
        + (BYTES_PER_PIXEL_LPIPS if lpips else 0.0)
    return int(FIXED_BYTES + px * per + (frames - 1) * px * 6)


def header_size(path: Path) -> tuple[int, int, int] | None:
    """``(frames, height, width)`` from a file's header without decoding pixels; None when it cannot tell
    (videos, unreadable files: the decoder reports those)."""
    import numpy as np
    from PIL import Image

    path = Path(path)
    try:
        if path.is_dir():
            files = [p for p in path.iterdir() if p.suffix.lower() in IMAGE_EXTS]
            first = min(files, key=lambda p: (frame_number(p) is None, frame_number(p) or 0, p.name), default=None)
            if first is None:
                return None
            one = header_size(first)
            return None if one is None else (len(files), one[1], one[2])
        ext = path.suffix.lower()
        if ext in ARRAY_EXTS:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            return (1, int(arr.shape[0]), int(arr.shape[1])) if arr.ndim >= 2 else None
        if ext in IMAGE_EXTS:
            with unbounded_pillow(), Image.open(path) as im:  # the header only: size is known before decoding
                w, h = im.size
                return int(getattr(im, "n_frames", 1)), int(h), int(w)
    except (OSError, ValueError, SyntaxError, EOFError):
        return None
    return None


def check_pair(baseline: Path, candidate: Path, ms_ssim: bool, lpips: bool, budget: int | None,
               allow_large: bool) -> tuple[str | None, str | None]:
    """``(refusal, ms_ssim_note)`` of a pair, from the files' headers, before either file is decoded.

    ``refusal``: why the pair is not scored (above Pillow's bomb limit, or above ``budget`` even without
    MS-SSIM), else None. ``ms_ssim_note``: MS-SSIM alone would exceed ``budget`` (it is skipped and noted,
    PSNR/SSIM are still computed), else None.

    Args:
        budget: bytes one pair may take (:func:`pair_budget`); None: no memory bound.
        allow_large: lift both the memory bound and Pillow's decompression-bomb limit.
    """
    if allow_large:
        return None, None
    from PIL import Image

    bomb = 2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS else None
    note = None
    for path in (baseline, candidate):
        size = header_size(path)
        if size is None:
            continue
        frames, h, w = size
        est = estimate_pair_bytes(frames, h, w, False, lpips)
        what = f"{w}x{h} px" + (f" x {frames} frames" if frames > 1 else "")
        if bomb is not None and h * w > bomb:
            return (f"{path}: {what} ({h * w / 1e6:.0f} Mpx) is above Pillow's decompression-bomb limit of "
                    f"{bomb / 1e6:.0f} Mpx; scoring the pair needs about {est / 2**30:.1f} GiB; pass --allow-large "
                    "if the file is trusted (not decoded)"), None
        if budget is not None and est > budget:
            return (f"{path}: {what}: scoring the pair needs about {est / 2**30:.1f} GiB, above the "
                    f"{budget / 2**30:.1f} GiB one pair may take ({AVAILABLE_FRACTION:.0%} of available memory "
                    "per --workers thread); pass --allow-large to score it anyway, or --workers 1 (not decoded)"), None
        with_ms = estimate_pair_bytes(frames, h, w, ms_ssim, lpips)
        if budget is not None and with_ms > budget and note is None:
            note = (f"MS-SSIM not computed: {what} needs about {with_ms / 2**30:.1f} GiB with it, above the "
                    f"{budget / 2**30:.1f} GiB one pair may take; pass --allow-large to compute it")
    return None, note
