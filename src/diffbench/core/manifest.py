"""The outputs manifest: which file holds which (prompt, seed, shape), with its sha256.

Written by ``diffbench bench --save-outputs DIR`` (and ``sweep``) as ``DIR/manifest.json``; read by
``diffbench quality`` to pair a candidate with its baseline by (prompt_id, seed, index).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from diffbench.errors import InputError

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA_VERSION = 1


class ManifestEntry(BaseModel):
    """One output: an image file, or a video as a file (mp4/webm/gif) or a folder of frames.

    ``index`` is the position inside the batch. ``file`` is relative to the manifest's directory.
    ``sha256`` is of the file (for a frame folder: of the concatenated frame files in name order).
    An edit's output also records its input picture (``input_image``, ``input_sha256``) and ``strength``.
    """

    model_config = ConfigDict(frozen=True)

    prompt_id: str
    prompt: str = ""
    seed: int
    index: int = 0
    height: int
    width: int
    frames: int | None = None
    steps: int | None = None
    file: str
    sha256: str
    input_image: str | None = None  # an edit's input picture: its file name ...
    input_sha256: str | None = None  # ... and the sha256 of its bytes (None for text-to-image)
    strength: float | None = None  # an edit's strength

    @property
    def key(self) -> tuple[str, int, int]:
        """Pairing key: (prompt_id, seed, index)."""
        return (self.prompt_id, self.seed, self.index)


class Manifest(BaseModel):
    """``manifest.json``: versioned; ``fingerprint`` is the deployment fingerprint when known."""

    schema_version: int = MANIFEST_SCHEMA_VERSION
    kind: str = "diffbench-outputs"
    conditions: dict[str, object] = {}
    fingerprint: dict[str, object] | None = None
    entries: list[ManifestEntry] = []


def read_manifest(directory: Path) -> Manifest | None:
    """Read ``directory/manifest.json``; None when absent.

    Raises:
        InputError: unreadable JSON, a newer schema, or invalid fields (names the file).
    """
    path = Path(directory) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read manifest ({exc}); regenerate it with --save-outputs") from exc
    if isinstance(data, dict) and data.get("schema_version", 1) > MANIFEST_SCHEMA_VERSION:
        raise InputError(
            f"{path}: manifest schema {data.get('schema_version')} is newer than this diffbench "
            f"({MANIFEST_SCHEMA_VERSION}); upgrade diffbench"
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise InputError(
            f"{path}: invalid manifest: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"
        ) from exc


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    """Write ``directory/manifest.json`` atomically (temp file + rename)."""
    path = Path(directory) / MANIFEST_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2))
    tmp.replace(path)
    return path
