"""``--save-outputs DIR``: lossless outputs plus ``DIR/manifest.json`` for pairing in ``diffbench quality``.

Images are PNG (``<prompt_id>_s<seed>_i<index>.png``); videos are folders of PNG frames
(``<prompt_id>_s<seed>_i<index>/frame_00000.png``), lossless so that quality comparisons measure the
model, not a codec. The manifest records prompt id, prompt, seed, index, shape, file and sha256.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest
from diffbench.engines.base import GenerationRequest
from diffbench.errors import InputError, require


def _sha256_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def save_images(directory: Path, request: GenerationRequest, images: np.ndarray,
                inputs: dict[str, str] | None = None) -> list[ManifestEntry]:
    """Write ``images`` ((B,H,W,3) or (B,F,H,W,3) uint8) of ``request`` under ``directory`` and return their
    manifest entries (one per batch index). ``inputs`` maps an edit input's sha256 to its file name.

    The file names depend only on (prompt_id, seed, index), and PNG encoding is deterministic: the same pixels
    give the same bytes in any process (the distributed bench relies on it)."""
    pil = require("PIL.Image", "diffusers")
    edit: dict[str, object] = {}
    if request.image is not None:
        sha = hashlib.sha256(request.image).hexdigest()
        edit = dict(input_image=(inputs or {}).get(sha), input_sha256=sha, strength=request.strength)
    entries = []
    for i in range(images.shape[0]):
        stem = f"{request.prompt_id}_s{request.seed}_i{i}"
        arr = images[i]
        if arr.ndim == 4:  # video: frames folder
            folder = directory / stem
            folder.mkdir(exist_ok=True)
            files = []
            for f in range(arr.shape[0]):
                p = folder / f"frame_{f:05d}.png"
                pil.fromarray(arr[f]).save(p)
                files.append(p)
            rel, sha, frames = stem, _sha256_files(files), int(arr.shape[0])
            h, w = int(arr.shape[1]), int(arr.shape[2])
        else:
            p = directory / f"{stem}.png"
            pil.fromarray(arr).save(p)
            rel, sha, frames = p.name, _sha256_files([p]), None
            h, w = int(arr.shape[0]), int(arr.shape[1])
        entries.append(ManifestEntry(prompt_id=request.prompt_id, prompt=request.prompt, seed=request.seed, index=i,
                                     height=h, width=w, frames=frames, steps=request.steps, file=rel, sha256=sha,
                                     **edit))  # type: ignore[arg-type]
    return entries


class OutputWriter:
    """Writes each distinct (prompt_id, seed, index) output once and keeps the manifest current."""

    def __init__(
        self, directory: str | Path, conditions: dict[str, object], fingerprint: dict[str, object] | None,
        inputs: dict[str, str] | None = None,
    ):
        """``inputs`` maps an edit input's sha256 (hex) to its file name, recorded in the manifest."""
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--save-outputs {self.dir}: cannot create the directory ({exc})") from exc
        self.manifest = Manifest(conditions=conditions, fingerprint=fingerprint)
        self._keys: set[tuple[str, int]] = set()
        self._inputs = inputs or {}

    def __call__(self, request: GenerationRequest, images: np.ndarray) -> None:
        """Save ``images`` ((B,H,W,3) or (B,F,H,W,3) uint8) for ``request``; update the manifest."""
        key = (request.prompt_id, request.seed)
        if key in self._keys:
            return
        self._keys.add(key)
        self.manifest.entries.extend(save_images(self.dir, request, images, self._inputs))
        write_manifest(self.dir, self.manifest)
