"""Scoring answers against references (``load --reference DIR``), in the payload-check worker processes.

:func:`score_images` is what :class:`~diffbench.load.client.http.HttpBackend` hands to the
:class:`~diffbench.load.client.checker.PayloadChecker` for a request that replays a reference: it runs the
ordinary check (:func:`~diffbench.load.client.payload.check_images` or
:func:`~diffbench.load.client.payload.check_chat`), then decodes each answer image to uint8 RGB and compares
it with the reference PNG of the same batch index:

- PSNR with the project's one implementation (:func:`diffbench.core.psnr.psnr_of`, R = 255); identical
  images (PSNR = +inf) are recorded as :data:`PSNR_IDENTICAL_DB`;
- SSIM with :func:`diffbench.quality.kernels.ssim` (Gaussian window, scikit-image's defaults).

A batch is scored by its worst image (lowest PSNR, lowest SSIM). Reference files are read once per worker
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
from diffbench.quality.kernels import ssim

PSNR_IDENTICAL_DB = 200.0
"""PSNR recorded for an answer identical to its reference (dB). The largest finite uint8 PSNR is
48.1 + 10·log10(values) dB: 138 dB for a billion values, so no real difference reaches 200."""


@functools.lru_cache(maxsize=256)
def reference_array(path: str) -> np.ndarray:
    """The reference image at ``path`` as uint8 ``(H, W, 3)`` (cached per process).

    Raises:
        OSError: the file is missing or does not decode.
    """
    from PIL import Image

    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


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


def compare(answer: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(PSNR dB, SSIM) of two uint8 ``(H, W, 3)`` images of one shape; identical: PSNR_IDENTICAL_DB.

    Raises:
        ValueError: the shapes differ.
    """
    if answer.shape != reference.shape:
        raise ValueError(f"answer {answer.shape} and reference {reference.shape} differ in shape")
    p = psnr_of(answer, reference, 255.0)
    return (PSNR_IDENTICAL_DB if math.isinf(p) else p), float(ssim(answer, reference, 255.0))


def score_images(body: bytes, width: int, height: int, n: int, chat: bool, encoding: str | None,
                 references: Sequence[str], sanity: bool = False) -> Verdict:
    """Check an images (``chat`` False) or chat answer (with the answer-sanity checks when ``sanity``), then
    score it against ``references`` (one PNG path per batch index). The verdict's ``quality`` holds ``psnr_db`` and ``ssim`` of the worst image; a
    verdict that is not ok has no score.

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
    psnrs, ssims = [], []
    for b64, ref in zip(images, references, strict=True):
        p, s = compare(_decode(b64), reference_array(ref))
        psnrs.append(p)
        ssims.append(s)
    verdict.quality = {"psnr_db": min(psnrs), "ssim": min(ssims)}
    return verdict


__all__ = ["PSNR_IDENTICAL_DB", "answer_images", "compare", "reference_array", "score_images"]
