"""Cheap sanity checks of decoded answer pixels, run in the payload-check worker processes.

An answer that decodes at the requested size can still be no image at all. These checks name what is
wrong; each failure is an ``invalid_payload`` of a named kind (:data:`KINDS`), never ok:

- ``black_image`` / ``black_frame`` (a video download, decoded with PyAV in the checker processes when
  PyAV is installed; without it frames are not checked and the report's conditions say so): every channel of every pixel is at most :data:`BLACK_MAX_LEVEL`
  (8 of 255, about 3 % of the range: indistinguishable from black on a screen, and above the few levels of
  ringing a lossy codec adds to a black picture; H.264's limited-range black decodes to RGB 0).
- ``constant_image``: the pixel standard deviation is below :data:`CONSTANT_STD_FLOOR` (2 8-bit levels) in
  every channel, over the whole image: a blank or flat-colour picture (std 0 when lossless; a few tenths of
  a level after JPEG), while a generated picture, even a flat sky with a horizon, has a std of tens of
  levels. A black image is reported as ``black_image`` (the more specific kind).
- ``duplicate_across_seeds``: not decided here. :func:`pixel_hash` gives each answer image a content hash
  (BLAKE2b, 128 bits, of its mode, size and decoded pixels); :func:`mark_duplicates` compares the hashes
  of the requests of one row when the row is summarized: every ok answer whose picture equals one answered
  to a request with another :func:`request_key` (another seed or prompt) is counted, all of them, the
  first included. Equal seed and prompt giving equal pictures is legitimate and never flagged; a dialect
  that sends no seed (``openai``) leaves the seed out of the key, so only different prompts count.
  Because the row is decided at its end, the records streamed to ``--jsonl`` while it ran still read
  ``ok`` with their ``answer_hashes``: :func:`mark_duplicates` on those records gives the row's verdict.

NaN: a PNG cannot hold NaN. A diffusers pipeline whose latents turn NaN decodes NaN pixels; its image
processor clamps them (NaN stays NaN) and casts ``(x * 255).round().astype("uint8")``, and NumPy casts NaN
to 0 on x86-64 and AArch64 (with a RuntimeWarning). An all-NaN output therefore arrives as an all-black
image and is counted as ``black_image`` (``black_frame`` for a video). A NaN patch in an otherwise fine
image arrives as a black patch, which no check here can tell from a dark region: it passes.

Cost: one pass of Pillow's C histogram (stddev), one of its extrema, and one copy plus hash of the pixel
bytes (~3 MB for 1024x1024 RGB, a few ms), all in the worker that already decoded the image.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from PIL import Image

    from diffbench.core.records import RequestRecord

InvalidKind = Literal["black_image", "constant_image", "black_frame", "duplicate_across_seeds"]
KINDS: tuple[str, ...] = ("black_image", "constant_image", "black_frame", "duplicate_across_seeds")
BLACK_MAX_LEVEL = 8
"""An image or frame is black when no channel of any pixel exceeds this 8-bit level."""
CONSTANT_STD_FLOOR = 2.0
"""An image is constant when the standard deviation of every channel is below this many 8-bit levels."""
HASH_BYTES = 16


def _rgb(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB or L (alpha and palettes dropped: what a viewer shows)."""
    return img if img.mode in ("RGB", "L") else img.convert("RGB")


def pixel_hash(img: Image.Image) -> str:
    """Hex BLAKE2b-128 of ``img``'s mode, size and decoded pixel bytes: equal for equal pictures whatever
    the PNG encoder, compression level or metadata."""
    h = hashlib.blake2b(digest_size=HASH_BYTES)
    h.update(f"{img.mode} {img.size[0]}x{img.size[1]}\n".encode())
    h.update(img.tobytes())
    return h.hexdigest()


def is_black(img: Image.Image) -> bool:
    """Whether no channel of any pixel of ``img`` exceeds :data:`BLACK_MAX_LEVEL`."""
    ext = _rgb(img).getextrema()
    bands = [ext] if isinstance(ext[0], (int, float)) else ext
    return all(hi <= BLACK_MAX_LEVEL for _lo, hi in bands)  # type: ignore[misc]


def max_std(img: Image.Image) -> float:
    """The largest per-channel pixel standard deviation of ``img`` (8-bit levels, population std).

    From Pillow's per-channel histogram (one C pass) with NumPy: sqrt(E[x²] − E[x]²) over the 256 levels of
    each channel. (``PIL.ImageStat`` gives the same figure from the same histogram but loops over its bins in
    Python: ~0.5 ms per image whatever its size, which at 1,000 small answers/s costs half a core.)
    """
    import numpy as np

    rgb = _rgb(img)
    hist = np.asarray(rgb.histogram(), dtype=np.float64).reshape(len(rgb.getbands()), 256)
    levels = np.arange(256, dtype=np.float64)
    n = hist.sum(axis=1)
    mean = hist @ levels / n
    var = np.maximum(hist @ (levels * levels) / n - mean * mean, 0.0)
    return float(np.sqrt(var).max())


def image_kind(img: Image.Image, frame: bool = False) -> tuple[InvalidKind | None, str | None]:
    """(kind, reason) of a decoded image that is no picture, else (None, None).

    ``frame``: ``img`` is a video frame (``black_frame``; a constant frame is not flagged: fades and title
    cards are legitimate in a clip).
    """
    if is_black(img):
        kind: InvalidKind = "black_frame" if frame else "black_image"
        return kind, f"{kind}: all black (no channel above {BLACK_MAX_LEVEL} of 255)"
    if not frame:
        std = max_std(img)
        if std < CONSTANT_STD_FLOOR:
            return "constant_image", f"constant_image: pixel std {std:.2f} < {CONSTANT_STD_FLOOR:g} levels in every channel"
    return None, None


def av_available() -> bool:
    """Whether PyAV (``av``, the ``serve`` extra) is installed, so video frames can be decoded and checked
    (looked up without importing it)."""
    import importlib.util

    return importlib.util.find_spec("av") is not None


def decode_video(content: bytes) -> list[Image.Image] | None:
    """The video frames of an MP4 (bytes) decoded with PyAV as PIL images, in order; None when the file does
    not decode (the structural check, :func:`~diffbench.load.client.payload.check_video`, has judged the
    container already). For the checker processes: a clip takes tens to hundreds of ms.

    Raises:
        MissingDependencyError: PyAV is not installed.
    """
    from diffbench.errors import require

    av = require("av", "serve")
    import io

    try:
        with av.open(io.BytesIO(content)) as container:  # type: ignore[attr-defined]
            return [frame.to_image() for frame in container.decode(video=0)]
    except (av.error.FFmpegError, ValueError, IndexError):  # type: ignore[attr-defined]
        return None


def frames_sanity(frames: Sequence[Image.Image]) -> tuple[InvalidKind | None, str | None, str]:
    """(kind, reason, pixel hash) of decoded video frames: ``black_frame`` for the first all-black frame
    (:func:`image_kind`), and one hash over every frame's RGB pixels (mode and size included)."""
    h = hashlib.blake2b(digest_size=HASH_BYTES)
    for i, img in enumerate(frames):
        kind, why = image_kind(img, frame=True)
        if kind is not None:
            return kind, f"frame {i}: {why}", h.hexdigest()
        h.update(f"{img.mode} {img.size[0]}x{img.size[1]}\n".encode())
        h.update(img.tobytes())
    return None, None, h.hexdigest()


def video_sanity(content: bytes) -> tuple[InvalidKind | None, str | None, str | None]:
    """(kind, reason, pixel hash) of an MP4's video frames (:func:`decode_video`, :func:`frames_sanity`);
    (None, None, None) when the file does not decode.

    Raises:
        MissingDependencyError: PyAV is not installed.
    """
    frames = decode_video(content)
    if frames is None:
        return None, None, None
    kind, why, digest = frames_sanity(frames)
    return (kind, why, None) if kind is not None else (None, None, digest)


def request_key(prompt: str, seed: int | None, *inputs: str | None) -> str:
    """Hex BLAKE2b-64 of what decides a picture besides its shape: ``prompt``, the ``seed`` sent (None:
    the dialect sends none) and edit ``inputs`` (file paths)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (prompt, "" if seed is None else str(seed), *(p or "" for p in inputs)):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


def mark_duplicates(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """``records`` with every ok answer that repeats a picture of another request key turned into an
    ``invalid_payload`` of kind ``duplicate_across_seeds`` (the others unchanged, same order).

    Two answers repeat when one image hash of one equals one of the other; a request is flagged when some
    other request with that image has a different ``request_key``. Records without ``answer_hashes`` (not
    checked, failed, or sanity off) take no part. Cost: one dict entry per answer image.
    """
    by_hash: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        if r.outcome == "ok" and r.answer_hashes and r.request_key is not None:
            for h in set(r.answer_hashes):
                by_hash.setdefault(h, []).append(i)
    flagged: dict[int, int] = {}  # index -> id of one other request with the same picture
    for idx in by_hash.values():
        if len(idx) < 2 or len({records[i].request_key for i in idx}) < 2:
            continue
        first = idx[0]
        differs = next(j for j in idx if records[j].request_key != records[first].request_key)
        for i in idx:  # linear: the partner is the group's first answer, or the first of another key
            other = differs if records[i].request_key == records[first].request_key else first
            flagged.setdefault(i, records[other].id)
    if not flagged:
        return list(records)
    out = list(records)
    for i, other in flagged.items():
        out[i] = records[i].model_copy(update={
            "outcome": "invalid_payload", "invalid_kind": "duplicate_across_seeds",
            "error": f"duplicate_across_seeds: the same pixels as request {other}, which sent another seed or prompt"})
    return out


__all__ = ["BLACK_MAX_LEVEL", "CONSTANT_STD_FLOOR", "KINDS", "InvalidKind", "av_available", "decode_video",
           "frames_sanity", "image_kind", "is_black", "mark_duplicates", "max_std", "pixel_hash", "request_key",
           "video_sanity"]
