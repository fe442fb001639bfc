"""Reading images, arrays and videos for quality comparison, with explicit policies.

Every problem raises :class:`~diffbench.errors.InputError` naming the file and the problem; callers
turn it into a per-pair error. Nothing is resized, truncated or silently re-quantized.

Policies (reported in :attr:`Loaded.notes` and in the report settings):

- **Alpha** (``alpha``): ``reject`` (default: an RGBA/LA file is an error), ``drop`` (ignore the alpha
  channel), ``composite-white`` (composite over white in float64, then round to uint8).
- **Palette** PNGs are expanded to RGB (or RGBA when they carry transparency, then the alpha policy).
- **16-bit** PNG/TIFF images are rejected: diffusion outputs are 8-bit; convert explicitly.
- **EXIF orientation** is applied (``ImageOps.exif_transpose``) and noted.
- **Grayscale** stays single-channel; a grayscale/RGB pair is a per-pair error (no silent conversion).
- ``.npy`` arrays: uint8 ``(H, W[, C])`` (range 255) or float in [0, 1] (range 1.0); NaN/Inf rejected.
- **Animated images** (GIF, APNG, animated WebP; any image whose Pillow ``n_frames`` > 1, so a
  multi-page TIFF or a multi-picture MPO JPEG too) are read as
  video: every frame, composited by Pillow's ``seek`` (GIF disposal, APNG dispose/blend ops), as
  ``(T, H, W, C)`` uint8 with ``is_video`` and ``animated`` set; never truncated to the first frame.
  Palette frames are expanded; an alpha channel that is fully opaque in every frame (animated WebP
  always decodes to RGBA) is dropped and noted, otherwise the alpha policy applies. A one-frame GIF is
  a still image.
- Videos: ``.mp4``, ``.webm``, ``.mov``, ``.mkv`` decoded with PyAV to RGB uint8 frames, with the stream's
  average frame rate and a variable-frame-rate flag (presentation-time deltas not constant); or a
  *frame folder*: a directory whose entries are all image files with numeric names (``00000.png``,
  ``frame_0003.png``), each frame keeping its number (two files with one number are an error).
- Decoded size is bounded by :data:`MAX_DECODED_BYTES` (an InputError, never an out-of-memory kill).
"""

from __future__ import annotations

import contextlib
import re
import struct
import threading
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from diffbench.errors import InputError, UsageError

AlphaPolicy = Literal["reject", "drop", "composite-white"]
ALPHA_POLICIES: tuple[str, ...] = ("reject", "drop", "composite-white")
IMAGE_EXTS = frozenset({".png", ".apng", ".gif", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff"})
ARRAY_EXTS = frozenset({".npy"})
VIDEO_EXTS = frozenset({".mp4", ".webm", ".mov", ".mkv"})
MAX_DECODED_BYTES = 8 << 30  # one decoded file (all frames); beyond this a file is refused, not swapped
_FRAME_NAME = re.compile(r"^(?:frame[_-]?)?(\d+)$")
# Frame intervals of a constant-rate video may differ by one tick of the stream's time base (30 fps in 1/1000 s
# ticks: 33, 33, 34 ms) or by rounding; a wider spread than this (relative to the median interval) is VFR.
VFR_TOLERANCE = 0.01


@dataclass
class Loaded:
    """A decoded image ``(H, W, C)`` or video ``(T, H, W, C)``; uint8 (range 255) or float32 (range 1)."""

    path: Path
    array: np.ndarray
    data_range: float
    is_video: bool = False
    notes: list[str] = field(default_factory=list)
    animated: bool = False  # an animated image (GIF/APNG/WebP) read as video
    frame_numbers: list[int] | None = None  # a frame folder: each frame's number, from its file name (sorted)
    fps: float | None = None  # a video file: the stream's average frame rate (frames/s), when the container has one
    vfr: bool = False  # a video file whose frame intervals (pts deltas) are not constant

    @property
    def frames(self) -> int | None:
        return int(self.array.shape[0]) if self.is_video else None

    def describe(self) -> str:
        """'a still image', 'an animated image (4 frames)', 'a video (9 frames)'."""
        if not self.is_video:
            return "a still image"
        return f"{'an animated image' if self.animated else 'a video'} ({self.frames} frames)"

    @property
    def channels(self) -> int:
        return int(self.array.shape[-1])


def kind_of(path: Path) -> Literal["image", "array", "video", "frames", "unsupported"]:
    """Classify a path by extension (or frame-folder layout for directories)."""
    if path.is_dir():
        return "frames" if is_frame_folder(path) else "unsupported"
    ext = path.suffix.lower()
    if ext in IMAGE_EXTS:
        return "image"
    if ext in ARRAY_EXTS:
        return "array"
    if ext in VIDEO_EXTS:
        return "video"
    return "unsupported"


def is_frame_folder(path: Path) -> bool:
    """True for a non-empty directory holding only image files with numeric stems (``00012.png``)."""
    entries = [p for p in path.iterdir() if not p.name.startswith(".")]
    return bool(entries) and all(
        p.is_file() and p.suffix.lower() in IMAGE_EXTS and _FRAME_NAME.match(p.stem) is not None for p in entries
    )


def _png_bit_depth(path: Path) -> int | None:
    with path.open("rb") as fh:
        head = fh.read(26)
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 25:
        return head[24]
    return None


_PNG_SIG = b"\x89PNG\r\n\x1a\n"


def check_png_integrity(path: Path) -> None:
    """Walk a PNG's chunks: every chunk complete, every CRC right, and an ``IEND`` chunk present.

    Pillow decodes a PNG whose IEND, last IDAT CRC or last bytes of zlib data are missing to the
    right pixels without complaint, so a truncated file would score as identical; this check makes
    any truncation an error. Bytes after IEND are ignored (not a truncation). Chunk layout and CRC-32
    from the PNG specification (W3C PNG 3rd ed., section 5.3). Files that do not start with the PNG
    signature are left to the decoder.

    Raises:
        InputError: a chunk is cut short, a CRC does not match, or there is no IEND chunk.
    """
    data = Path(path).read_bytes()
    if not data.startswith(_PNG_SIG):
        return
    pos = len(_PNG_SIG)
    while True:
        if pos + 8 > len(data):
            raise InputError(f"{path}: cannot decode image: truncated PNG: ends at byte {len(data)} without an IEND chunk")
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 8 + length + 4
        name = ctype.decode("latin-1")
        if end > len(data):
            raise InputError(f"{path}: cannot decode image: truncated PNG: chunk {name!r} at byte {pos} needs {end - pos} bytes, "
                             f"file ends after {len(data) - pos}")
        (crc,) = struct.unpack(">I", data[end - 4:end])
        if zlib.crc32(data[pos + 4:end - 4]) != crc:
            raise InputError(f"{path}: cannot decode image: corrupt PNG: CRC mismatch in chunk {name!r} at byte {pos}")
        if ctype == b"IEND":
            return
        pos = end


def _apply_alpha(rgba: np.ndarray, policy: str, path: Path, notes: list[str]) -> np.ndarray:
    if policy == "reject":
        raise InputError(
            f"{path}: image has an alpha channel; choose --alpha drop or --alpha composite-white"
        )
    if policy == "drop":
        notes.append("alpha dropped")
        return np.ascontiguousarray(rgba[..., :-1])
    if policy == "composite-white":
        color = rgba[..., :-1].astype(np.float64)
        a = rgba[..., -1:].astype(np.float64) / 255.0
        notes.append("alpha composited over white")
        return np.clip(np.rint(color * a + 255.0 * (1.0 - a)), 0, 255).astype(np.uint8)
    raise UsageError(f"unknown alpha policy {policy!r}; choose one of {', '.join(ALPHA_POLICIES)}")


_BOMB_LOCK = threading.Lock()
_BOMB_USERS = 0
_BOMB_SAVED: int | None = None


@contextlib.contextmanager
def unbounded_pillow() -> Iterator[None]:
    """Pillow's decompression-bomb check (``Image.MAX_IMAGE_PIXELS``) off inside the block.

    Reference-counted, so threads that overlap restore the limit only when the last one leaves. Callers check
    the size themselves first (:func:`diffbench.quality.memory.check_pair`: our refusal names the file, its
    size and ``--allow-large``).
    """
    global _BOMB_USERS, _BOMB_SAVED
    from PIL import Image

    with _BOMB_LOCK:
        if _BOMB_USERS == 0:
            _BOMB_SAVED = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None
        _BOMB_USERS += 1
    try:
        yield
    finally:
        with _BOMB_LOCK:
            _BOMB_USERS -= 1
            if _BOMB_USERS == 0:
                Image.MAX_IMAGE_PIXELS = _BOMB_SAVED


def load_image(path: Path, alpha: str = "reject", allow_large: bool = False) -> Loaded:
    """Decode one image file to uint8 ``(H, W, C)`` with C in {1, 3}; an animated one to ``(T, H, W, C)``.

    An image with more than one frame (animated GIF / APNG / WebP) is returned as a video
    (``is_video=True, animated=True``) holding every frame; see :func:`_load_animated`.

    A PNG (or APNG) must be intact: complete chunks, matching CRCs, an IEND chunk
    (:func:`check_png_integrity`); other formats pass Pillow's ``Image.verify()`` first.

    ``allow_large`` lifts Pillow's decompression-bomb limit (without it, an image above the limit is an
    InputError naming ``--allow-large``, never Pillow's text).

    Raises:
        InputError: unreadable, truncated or corrupt file; 16-bit; alpha under ``reject``; odd modes;
            decoded size above :data:`MAX_DECODED_BYTES`; above Pillow's bomb limit without ``allow_large``.
    """
    from PIL import Image

    # the memory bound is checked from the header before decoding (quality.memory); Pillow's warning between
    # its limit and twice the limit would print its own text
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    with unbounded_pillow() if allow_large else contextlib.nullcontext():
        return _load_image(Path(path), alpha)


def _load_image(path: Path, alpha: str) -> Loaded:
    from PIL import Image, ImageOps, UnidentifiedImageError

    notes: list[str] = []
    if path.suffix.lower() == ".png" and _png_bit_depth(path) == 16:
        raise InputError(f"{path}: 16-bit PNG is not supported (8-bit expected); convert it to 8-bit explicitly")
    try:
        check_png_integrity(path)
        with Image.open(path) as im:  # a fresh open: verify() checks what the format allows, then is spent
            im.verify()
        with Image.open(path) as im:
            if getattr(im, "n_frames", 1) > 1:
                return _load_animated(path, im, alpha)
            im.load()
            orientation = im.getexif().get(0x0112, 1)
            if orientation not in (None, 1):
                im = ImageOps.exif_transpose(im)
                notes.append(f"EXIF orientation {orientation} applied")
            mode = im.mode
            if mode == "P" or mode == "PA":
                notes.append("palette expanded")
                has_t = "transparency" in im.info or mode == "PA"
                im = im.convert("RGBA" if has_t else "RGB")
                mode = im.mode
            if mode in ("I;16", "I;16B", "I;16L", "I", "F", "I;16N"):
                raise InputError(
                    f"{path}: {mode} (16/32-bit) image is not supported (8-bit expected); convert it explicitly"
                )
            if mode == "1":
                im = im.convert("L")
                mode = "L"
            if mode == "CMYK" or mode == "YCbCr":
                raise InputError(f"{path}: {mode} image; save it as RGB")
            arr = np.asarray(im)
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise InputError(f"{path}: above Pillow's decompression-bomb limit of {2 * (Image.MAX_IMAGE_PIXELS or 0)} "
                         f"pixels ({exc}); pass --allow-large if the file is trusted") from exc
    except (UnidentifiedImageError, OSError, EOFError, SyntaxError, ValueError) as exc:
        raise InputError(f"{path}: cannot decode image (truncated, corrupt or not an image: {exc})") from exc
    if arr.dtype != np.uint8:
        raise InputError(f"{path}: decoded to {arr.dtype} (mode {mode}); 8-bit images expected")
    if mode in ("RGBA", "LA"):
        arr = _apply_alpha(arr if arr.ndim == 3 else arr[..., None], alpha, path, notes)
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.shape[-1] not in (1, 3):
        raise InputError(f"{path}: unsupported channel count {arr.shape[-1]} (mode {mode})")
    return Loaded(path=path, array=np.ascontiguousarray(arr), data_range=255.0, notes=notes)


_TRANSPOSE = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
              7: "TRANSVERSE", 8: "ROTATE_90"}  # EXIF orientation -> PIL.Image.Transpose (as exif_transpose)


def _too_large(path: Path, nbytes: int, what: str) -> InputError:
    return InputError(f"{path}: {what} decode to {nbytes / 2**30:.1f} GiB, above the {MAX_DECODED_BYTES >> 30} GiB "
                      "limit of one file; split it or compare fewer frames")


def _load_animated(path: Path, im: object, alpha: str) -> Loaded:
    """Every frame of an open multi-frame Pillow image as uint8 ``(T, H, W, C)``.

    Frames come from ``PIL.ImageSequence`` (``seek`` composites each frame onto the canvas with the
    format's disposal/blend rules), so every frame has the canvas size. The whole sequence is converted
    to one mode: L when every frame is L, RGBA when any frame carries alpha, else RGB.
    """
    from PIL import Image, ImageSequence

    assert isinstance(im, Image.Image)
    n = int(getattr(im, "n_frames", 1))
    w, h = im.size
    if n * h * w * 4 > MAX_DECODED_BYTES:
        raise _too_large(path, n * h * w * 4, f"{n} frames of {w}x{h}")
    notes = [f"animated {im.format or 'image'}: {n} frames read as video"]
    frames: list[Image.Image] = []
    modes: set[str] = set()
    has_alpha = False
    for fr in ImageSequence.Iterator(im):
        fr.load()
        m = fr.mode
        if m in ("I;16", "I;16B", "I;16L", "I", "F", "I;16N"):
            raise InputError(f"{path}: {m} (16/32-bit) frames are not supported (8-bit expected)")
        if m in ("CMYK", "YCbCr"):
            raise InputError(f"{path}: {m} frames; save them as RGB")
        has_alpha |= m in ("RGBA", "LA", "PA") or (m == "P" and "transparency" in fr.info)
        modes.add(m)
        frames.append(fr.copy())
    if len(frames) != n:
        raise InputError(f"{path}: {len(frames)} of {n} frames decodable (truncated or corrupt)")
    target = "L" if modes <= {"L", "1"} else ("RGBA" if has_alpha else "RGB")
    if "P" in modes or "PA" in modes:
        notes.append("palette expanded")
    orientation = im.getexif().get(0x0112, 1)
    arrs = []
    for fr in frames:
        fr = fr.convert(target) if fr.mode != target else fr
        if orientation in _TRANSPOSE:
            fr = fr.transpose(getattr(Image.Transpose, _TRANSPOSE[orientation]))
        arrs.append(np.asarray(fr))
    if orientation in _TRANSPOSE:
        notes.append(f"EXIF orientation {orientation} applied")
    arr = np.stack(arrs)
    if arr.ndim == 3:
        arr = arr[..., None]
    if target == "RGBA":
        if bool((arr[..., -1] == 255).all()):
            notes.append("alpha fully opaque in every frame: dropped")
            arr = np.ascontiguousarray(arr[..., :-1])
        else:
            arr = _apply_alpha(arr, alpha, path, notes)
    return Loaded(path=path, array=np.ascontiguousarray(arr), data_range=255.0, is_video=True, notes=notes,
                  animated=True)


def load_array(path: Path) -> Loaded:
    """Load a ``.npy`` image: uint8 (range 255) or float in [0, 1] (range 1.0), ``(H, W[, C])``.

    Raises:
        InputError: unreadable file, NaN/Inf, values outside [0, 1] for floats, bad shape or dtype.
    """
    path = Path(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{path}: cannot read .npy array ({exc})") from exc
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.ndim != 3 or arr.shape[-1] not in (1, 3):
        raise InputError(f"{path}: expected an (H, W), (H, W, 1) or (H, W, 3) array, got shape {arr.shape}")
    if arr.dtype == np.uint8:
        return Loaded(path=path, array=arr, data_range=255.0)
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise InputError(f"{path}: array holds {int(bad.sum())} NaN/Inf values; fix the producer")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0.0 or hi > 1.0:
            raise InputError(f"{path}: float array values span [{lo:g}, {hi:g}]; expected [0, 1]")
        return Loaded(path=path, array=arr.astype(np.float32), data_range=1.0)
    raise InputError(f"{path}: unsupported array dtype {arr.dtype}; use uint8 or float in [0, 1]")


def load_video(path: Path) -> Loaded:
    """Decode every frame of a video file (PyAV) to uint8 RGB ``(T, H, W, 3)``.

    Raises:
        InputError: unreadable/corrupt file, no video stream, or no decodable frame.
    """
    from diffbench.errors import require

    av = require("av", "quality")
    path = Path(path)
    frames: list[np.ndarray] = []
    pts_s: list[float] = []
    fps: float | None = None
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"{path}: no video stream")
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            fps = float(rate) if rate else None
            nbytes = 0
            for frame in container.decode(video=0):
                if frame.pts is not None and frame.time_base is not None:
                    pts_s.append(float(frame.pts * frame.time_base))
                frames.append(frame.to_ndarray(format="rgb24"))
                nbytes += frames[-1].nbytes
                if nbytes > MAX_DECODED_BYTES:
                    raise _too_large(path, nbytes, f"the first {len(frames)} frames")
    except InputError:
        raise
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot decode video (truncated, corrupt or unsupported: {exc})") from exc
    if not frames:
        raise InputError(f"{path}: video has no decodable frames")
    shapes = {f.shape for f in frames}
    if len(shapes) != 1:
        raise InputError(f"{path}: frames change size within the video ({sorted(shapes)})")
    vfr, note = frame_timing(pts_s, fps) if len(pts_s) == len(frames) else (False, None)
    return Loaded(path=path, array=np.stack(frames), data_range=255.0, is_video=True, fps=fps, vfr=vfr,
                  notes=[note] if note else [])


def frame_number(path: Path) -> int | None:
    """The frame number in a frame file's name (``0003.png``, ``frame_0003.png``, ``frame-3.jpg`` → 3), else None."""
    m = _FRAME_NAME.match(path.stem)
    return int(m.group(1)) if m else None


def load_frame_folder(path: Path, alpha: str = "reject", allow_large: bool = False) -> Loaded:
    """Load a frame folder as ``(T, H, W, C)`` uint8, frames in the order of their numbers.

    ``frame_numbers`` holds each frame's number (callers pair two folders by number, not by position).

    Raises:
        InputError: no image file, two files with one number, a frame that is not a still, or frames that
            differ in size or channels.
    """
    path = Path(path)
    numbered: dict[int, Path] = {}
    for p in sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_EXTS):
        n = frame_number(p)
        if n is None:
            n = int(re.sub(r"\D", "", p.stem) or 0)  # a manifest may name a folder with other names
        if n in numbered:
            raise InputError(f"{path}: two files for frame {n} ({numbered[n].name}, {p.name}); keep one")
        numbered[n] = p
    if not numbered:
        raise InputError(f"{path}: frame folder holds no image files")
    numbers = sorted(numbered)
    imgs = [load_image(numbered[n], alpha, allow_large) for n in numbers]
    for im in imgs:
        if im.is_video:
            raise InputError(f"{path}: frame {im.path.name} is itself {im.describe()}; a frame folder holds stills")
    shapes = {im.array.shape for im in imgs}
    if len(shapes) != 1:
        raise InputError(f"{path}: frames differ in size or channels ({sorted(shapes)})")
    notes = sorted({n for im in imgs for n in im.notes})
    return Loaded(path=path, array=np.stack([im.array for im in imgs]), data_range=255.0, is_video=True,
                  notes=notes, frame_numbers=numbers)


def frame_timing(pts_s: list[float], fps: float | None) -> tuple[bool, str | None]:
    """Whether presentation times (seconds, decode order) show a variable frame rate, and the note saying so.

    VFR when the spread of consecutive intervals exceeds :data:`VFR_TOLERANCE` of the median interval plus
    one millisecond (a time-base tick of rounding).
    """
    ts = sorted(pts_s)
    d = np.diff(np.asarray(ts, dtype=np.float64))
    if d.size < 2:
        return False, None
    med = float(np.median(d))
    lo, hi = float(d.min()), float(d.max())
    if hi - lo <= VFR_TOLERANCE * med + 1e-3:
        return False, None
    rate = f" (average {fps:.4g} fps)" if fps else ""
    return True, (f"variable frame rate: frame intervals {lo * 1e3:.1f}-{hi * 1e3:.1f} ms{rate}; frames are "
                  "paired by index, not by time")


def load_any(path: Path, alpha: str = "reject", allow_large: bool = False) -> Loaded:
    """Load an image, ``.npy`` array, video file or frame folder by kind.

    Raises:
        InputError: missing path, unsupported format, or any decoding problem (names the file).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    if path.is_dir():  # a manifest may name any folder of frames; path pairing only offers frame folders
        return load_frame_folder(path, alpha, allow_large)
    kind = kind_of(path)
    if kind == "image":
        return load_image(path, alpha, allow_large)
    if kind == "array":
        return load_array(path)
    if kind == "video":
        return load_video(path)
    if kind == "frames":
        return load_frame_folder(path, alpha, allow_large)
    supported = sorted(IMAGE_EXTS | ARRAY_EXTS | VIDEO_EXTS)
    raise InputError(f"{path}: unsupported format; supported: {', '.join(supported)} or a frame folder")
