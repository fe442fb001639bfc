"""Scoring answers against references (``load --reference DIR``), in the payload-check worker processes.

:func:`score_images` is what :class:`~diffbench.load.client.http.HttpBackend` hands to the
:class:`~diffbench.load.client.checker.PayloadChecker` for a request that replays a reference: it runs the
ordinary check (:func:`~diffbench.load.client.payload.check_images` or
:func:`~diffbench.load.client.payload.check_chat`), then decodes each answer image to uint8 RGB and compares
it with the reference PNG of the same batch index:

- PSNR with the project's one implementation (:func:`diffbench.core.psnr.psnr_of`, R = 255); identical
  images (PSNR = +inf) are recorded as :data:`PSNR_IDENTICAL_DB`;
- SSIM with :func:`diffbench.quality.kernels.ssim` (Gaussian window, scikit-image's defaults). SSIM is
  undefined for an image narrower or shorter than the window (:data:`SSIM_MIN_SIDE`, 11 px): such an answer
  is scored by PSNR alone (``ssim`` None), never failed for it — its PSNR is as valid as any other.

A batch is scored by its worst image (lowest PSNR, lowest SSIM). A video answer (:func:`score_video`) is
decoded with PyAV, sanity-checked frame by frame, and scored by its worst frame: frame ``i`` of the answer
against frame ``i`` of the reference (an MP4 or a folder of PNG frames, read with
:func:`diffbench.quality.io.load_any`), the lowest PSNR and the lowest SSIM over the frames; a clip whose
frame count or frame size differs from the reference's is an ``invalid_payload``, never scored. Reference files are read once per worker
process (cached). Everything here is pure CPU work, never run on the measuring event loop.
"""

from __future__ import annotations

import base64
import functools
import io
import math
from collections.abc import Sequence

import numpy as np

from diffbench.core.psnr import psnr_of
from diffbench.load.client.payload import Verdict, check_chat, check_images, decode_body, parse_json
from diffbench.quality.kernels import SSIM_RADIUS, ssim

PSNR_IDENTICAL_DB = 200.0
"""PSNR recorded for an answer identical to its reference (dB). The largest finite uint8 PSNR is
48.1 + 10·log10(values) dB: 138 dB for a billion values, so no real difference reaches 200."""


SSIM_MIN_SIDE = 2 * SSIM_RADIUS + 1
"""The smallest height and width (px) SSIM is defined for: its Gaussian window's 11 taps (σ 1.5, 3.5σ)."""


@functools.lru_cache(maxsize=256)
def reference_array(path: str) -> np.ndarray:
    """The reference image at ``path`` as uint8 ``(H, W, 3)`` (cached per process).

    Raises:
        OSError: the file is missing or does not decode.
    """
    from PIL import Image

    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


@functools.lru_cache(maxsize=32)
def reference_video(path: str) -> np.ndarray:
    """The reference video at ``path`` (an MP4 or a folder of PNG frames) as uint8 ``(T, H, W, 3)`` (cached
    per process).

    Raises:
        InputError: the file is missing, unreadable or not a video (names the file).
    """
    from pathlib import Path

    from diffbench.quality.io import load_any

    arr = load_any(Path(path)).array
    if arr.ndim != 4 or arr.dtype != np.uint8:
        raise ValueError(f"{path}: a video reference must be 8-bit frames (T, H, W, 3), got {arr.dtype} "
                         f"{arr.shape}")
    return arr


def _decode(b64: str) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(b64, validate=True))) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


def answer_images(body: bytes, chat: bool) -> list[str]:
    """The base64 images of a checked answer (identity-encoded body), in batch order."""
    obj, _ = parse_json(body)
    assert obj is not None
    if not chat:
        return [str(item["b64_json"]) for item in obj["data"]]  # type: ignore[index, union-attr]
    content = obj["choices"][0]["message"]["content"]  # type: ignore[index]
    parts = [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]  # type: ignore[union-attr]
    return [str(p["image_url"]["url"]).partition(",")[2] for p in parts]


def compare(answer: np.ndarray, reference: np.ndarray) -> tuple[float, float | None]:
    """(PSNR dB, SSIM) of two uint8 ``(H, W, 3)`` images of one shape; identical: PSNR_IDENTICAL_DB; SSIM
    None when H or W is below :data:`SSIM_MIN_SIDE`.

    Raises:
        ValueError: the shapes differ.
    """
    if answer.shape != reference.shape:
        raise ValueError(f"answer {answer.shape} and reference {reference.shape} differ in shape")
    p = psnr_of(answer, reference, 255.0)
    s = float(ssim(answer, reference, 255.0)) if min(answer.shape[:2]) >= SSIM_MIN_SIDE else None
    return (PSNR_IDENTICAL_DB if math.isinf(p) else p), s


def score_images(body: bytes, width: int, height: int, n: int, chat: bool, encoding: str | None,
                 references: Sequence[str], sanity: bool = False) -> Verdict:
    """Check an images (``chat`` False) or chat answer (with the answer-sanity checks when ``sanity``), then
    score it against ``references`` (one PNG path per batch index). The verdict's ``quality`` holds
    ``psnr_db`` and ``ssim`` of the worst image (``ssim`` None below :data:`SSIM_MIN_SIDE`); a verdict that
    is not ok has no score.

    Raises:
        OSError: a reference file cannot be read (the checker turns it into a failed verdict).
    """
    check = check_chat if chat else check_images
    verdict = check(body, width, height, n, True, encoding, sanity)
    if not verdict.ok:
        return verdict
    images = answer_images(decode_body(body, encoding), chat)
    if len(images) != len(references):
        return Verdict(False, f"answer holds {len(images)} images, the reference {len(references)}",
                       verdict.stages_s, verdict.peak_memory_bytes)
    psnrs: list[float] = []
    ssims: list[float | None] = []
    for b64, ref in zip(images, references, strict=True):
        p, s = compare(_decode(b64), reference_array(ref))
        psnrs.append(p)
        ssims.append(s)
    defined = [x for x in ssims if x is not None]
    verdict.quality = {"psnr_db": min(psnrs), "ssim": min(defined) if len(defined) == len(ssims) else None}
    return verdict


def score_video(content: bytes, encoding: str | None, reference: str, sanity: bool = False) -> Verdict:
    """Decode a downloaded clip (after the structural check passed), check each frame (``black_frame``, with
    ``sanity``; one pixel hash of the clip) and score it frame by frame against the reference video at
    ``reference``: the verdict's ``quality`` holds the worst frame's ``psnr_db`` and ``ssim`` (SSIM None
    below :data:`SSIM_MIN_SIDE`). A clip that does not decode, or whose frame count or size differs from the
    reference's, fails with the reason.

    Raises:
        MissingDependencyError: PyAV is not installed.
        OSError, ValueError: the reference cannot be read (the checker turns it into a failed verdict).
    """
    from diffbench.load.client.sanity import decode_video, frames_sanity

    frames = decode_video(decode_body(content, encoding))
    if frames is None:
        return Verdict(False, "video content does not decode (PyAV)")
    kind, why, digest = frames_sanity(frames)
    if sanity and kind is not None:
        return Verdict(False, why, invalid_kind=kind)
    ref = reference_video(reference)
    got = np.stack([np.asarray(f.convert("RGB"), dtype=np.uint8) for f in frames]) if frames else None
    if got is None or got.shape != ref.shape:
        shape = "no frames" if got is None else "x".join(map(str, got.shape[:3]))
        return Verdict(False, f"video answer is {shape} (frames x height x width), the reference "
                              f"{'x'.join(map(str, ref.shape[:3]))}")
    scores = [compare(a, r) for a, r in zip(got, ref, strict=True)]
    ssims = [s for _p, s in scores]
    worst_ssim = None if any(s is None for s in ssims) else min(s for s in ssims if s is not None)
    return Verdict(True, hashes=[digest] if sanity else None,
                   quality={"psnr_db": min(p for p, _s in scores), "ssim": worst_ssim})


__all__ = ["PSNR_IDENTICAL_DB", "SSIM_MIN_SIDE", "answer_images", "compare", "reference_array", "reference_video", "score_images",
           "score_video"]
