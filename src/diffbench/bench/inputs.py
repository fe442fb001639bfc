"""``bench --input-images DIR [--masks DIR] [--strength S]``: the input pictures of an image-to-image bench.

Every file of ``DIR`` (names starting with ``.`` skipped, sorted by name) must be a PNG, JPEG or WebP image;
each becomes one edit input, cycled with the prompts and seeds of the workload. ``--masks DIR`` gives one
inpainting mask per input image, matched by file stem (``cat.png`` ↔ ``cat.png`` / ``cat.webp``; white =
repaint). All files are read and decoded here, before any model is loaded, so a bad folder fails at once.

An edit's ``prompt_id`` is ``<prompt id>@<input stem>.<first 8 hex of its sha256>``: ``quality`` pairs
outputs by (prompt_id, seed, index), so two runs pair only edits of the same prompt and the same input bytes;
the manifest also records the input's file name and full sha256 (``input_image``, ``input_sha256``).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path

from diffbench.engines.images import decode_image
from diffbench.errors import InputError, UsageError


@dataclass(frozen=True)
class EditInput:
    """One input picture (and optional mask) as encoded bytes, with its name and sha256 (hex)."""

    name: str
    data: bytes
    sha256: str
    mask_name: str | None = None
    mask: bytes | None = None
    mask_sha256: str | None = None

    @property
    def tag(self) -> str:
        """``<stem>.<sha256[:8]>``, the stem reduced to ``[A-Za-z0-9_-]`` (part of file names)."""
        stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(self.name).stem)[:40] or "image"
        return f"{stem}.{self.sha256[:8]}"


def check_strength(strength: float) -> float:
    """Check ``--strength``: a finite share of the schedule in (0, 1].

    Raises:
        UsageError: outside (0, 1] or not finite.
    """
    if not math.isfinite(strength) or not (0 < strength <= 1):
        raise UsageError(
            f"--strength {strength:g}: must be in (0, 1], the share of the denoising schedule an edit re-noises "
            "(1 ignores the input picture's content, 0.6 is a common edit)"
        )
    return strength


def _files(folder: Path, option: str) -> list[Path]:
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a directory"
        raise UsageError(f"{option} {folder}: {what}; give a folder of PNG, JPEG or WebP images")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise UsageError(f"{option} {folder}: the folder holds no files; put the input images (PNG, JPEG or "
                         "WebP) in it")
    return files


def _read(path: Path, option: str) -> tuple[bytes, tuple[int, int]]:
    """The file's bytes and its (width, height) in pixels, after checking it decodes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{option}: {path}: cannot read ({exc.strerror or exc})") from None
    return data, decode_image(data, what=f"{option}: {path}").size


def load_inputs(images: Path, masks: Path | None = None) -> list[EditInput]:
    """Read and check every input image (and mask) of the folders.

    Raises:
        UsageError: a folder that is missing, not a folder or empty; masks whose count or names do not match
            the images.
        InputError: a file that is not a decodable PNG/JPEG/WebP image (named).
    """
    files = _files(images, "--input-images")
    mask_files: dict[str, Path] = {}
    if masks is not None:
        mfiles = _files(masks, "--masks")
        if len(mfiles) != len(files):
            raise UsageError(f"--masks {masks}: {len(mfiles)} mask(s) for {len(files)} input image(s) in {images}; "
                             "give exactly one mask per input image, with the same file stem")
        mask_files = {p.stem: p for p in mfiles}
        missing = [p.name for p in files if p.stem not in mask_files]
        if missing or len(mask_files) != len(mfiles):
            raise UsageError(f"--masks {masks}: no mask named like {missing[0] if missing else 'each image'} "
                             "(masks match input images by file stem, one each)")
    out = []
    for p in files:
        data, size = _read(p, "--input-images")
        mp = mask_files.get(p.stem)
        mdata = None
        if mp is not None:
            mdata, msize = _read(mp, "--masks")
            if msize != size:  # as serve and load refuse it: a mask covers its own picture, pixel for pixel
                raise UsageError(f"--masks {mp}: {msize[0]}x{msize[1]} but its input image {p.name} is "
                                 f"{size[0]}x{size[1]}; give each mask the size of its image")
        out.append(EditInput(
            name=p.name, data=data, sha256=hashlib.sha256(data).hexdigest(),
            mask_name=mp.name if mp is not None else None, mask=mdata,
            mask_sha256=hashlib.sha256(mdata).hexdigest() if mdata is not None else None,
        ))
    return out
