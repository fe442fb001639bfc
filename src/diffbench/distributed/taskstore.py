"""Deterministic task ids and the resumable record of finished tasks in a shared directory.

A distributed run splits its workload into tasks whose id is a hash of everything that decides the task's
output (:func:`task_id`): the same command gives the same ids on every machine and every rerun. A worker that
finishes a task writes its output files first and then its record ``DIR/.diffbench-tasks/<id>.json`` (atomically:
temp file + rename), so a record exists only for a task whose files were completely written. On a rerun,
:meth:`TaskStore.done` accepts a record only when every file it lists exists with the sha256 it recorded: a task
killed mid-write, or whose output was changed or deleted since, is done again.

A record may carry a Python result (:func:`pack` / :func:`unpack`: base64 of a pickle). The shared directory is
not trusted: :func:`unpack` rebuilds only diffbench's dataclasses and pydantic models, NumPy arrays and plain
builtins, and refuses anything else (a planted ``os.system`` is an error, never a call), so a record someone else
wrote can at most be wrong data, which the caller treats as a task not done.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from diffbench.errors import InputError

TASKS_DIR = ".diffbench-tasks"
_SAFE_GLOBALS = {  # what a pickle of our results names besides diffbench's own models and dataclasses
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"), ("copyreg", "_reconstructor"), ("collections", "OrderedDict"),
    *{("builtins", n) for n in ("object", "set", "frozenset", "complex", "tuple", "list", "dict", "float", "int",
                                "str", "bytes", "bytearray", "bool")},
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "diffbench" or module.startswith("diffbench."):
            obj = super().find_class(module, name)
            if isinstance(obj, type) and (dataclasses.is_dataclass(obj) or issubclass(obj, BaseModel)):
                return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not a diffbench result type")


def pack(obj: object) -> str:
    """``obj`` (a diffbench dataclass or model, NumPy arrays, builtins) as base64 text for a record."""
    return base64.b64encode(pickle.dumps(obj)).decode()


def unpack(text: object) -> Any:
    """The object :func:`pack` wrote, rebuilt from diffbench result types, NumPy arrays and builtins only.

    Raises:
        ValueError: ``text`` is not base64 of such a pickle (names what it refused).
    """
    if not isinstance(text, str):
        raise ValueError(f"a packed result is base64 text, not {type(text).__name__}")
    try:
        return _SafeUnpickler(io.BytesIO(base64.b64decode(text, validate=True))).load()
    except (binascii.Error, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError,
            IndexError, KeyError) as exc:
        raise ValueError(f"not a packed diffbench result ({type(exc).__name__}: {exc})") from None


def decodes(rec: TaskRecord | None, key: str) -> TaskRecord | None:
    """``rec`` when its ``data[key]`` (if present) unpacks, else None: a record with a corrupt or foreign
    result is a task not done, done again on this run."""
    if rec is None or key not in rec.data:
        return rec
    try:
        unpack(rec.data[key])
    except ValueError:
        return None
    return rec
ID_CHARS = 20  # 80 bits of sha256: collisions are negligible for any workload size


def task_id(kind: str, fields: dict[str, Any]) -> str:
    """A deterministic id for a task: sha256 of the canonical JSON of ``kind`` and ``fields`` (sorted keys;
    bytes hashed by their own sha256), first :data:`ID_CHARS` hex digits.

    Raises:
        TypeError: a field that is not JSON-serializable (a bug in the caller).
    """

    def norm(v: Any) -> Any:
        if isinstance(v, bytes | bytearray):
            return {"sha256": hashlib.sha256(v).hexdigest()}
        if isinstance(v, dict):
            return {str(k): norm(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        return v

    text = json.dumps({"kind": kind, "fields": norm(fields)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:ID_CHARS]


def sha256_file(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class TaskRecord(BaseModel):
    """A finished task: ``files`` maps each output file (relative to the directory) to its sha256;
    ``data`` is the task's result (JSON); ``worker`` names who did it (actor index, node)."""

    id: str
    kind: str
    files: dict[str, str] = {}
    data: dict[str, Any] = {}
    worker: dict[str, Any] = {}


class TaskStore:
    """The records of finished tasks under ``directory/.diffbench-tasks`` (a path every node sees)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.tasks = self.dir / TASKS_DIR
        try:
            self.tasks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{self.dir}: cannot create {TASKS_DIR}/ ({exc}); choose a writable directory") from exc

    def path(self, tid: str) -> Path:
        """Where the record of task ``tid`` lives."""
        return self.tasks / f"{tid}.json"

    def done(self, tid: str) -> TaskRecord | None:
        """The record of ``tid`` when the task is finished and every file it lists still has its recorded
        sha256; None otherwise (no record, an unreadable record, a missing or changed file)."""
        p = self.path(tid)
        try:
            rec = TaskRecord.model_validate_json(p.read_text())
        except (OSError, ValueError):
            return None
        if rec.id != tid:
            return None
        for rel, sha in rec.files.items():
            f = self.dir / rel
            try:
                if (sha256_file(f) if f.is_file() else _sha256_folder(f)) != sha:
                    return None
            except OSError:
                return None
        return rec

    def write(self, record: TaskRecord) -> Path:
        """Write ``record`` atomically (temp file in the same directory + rename); call after its files."""
        p = self.path(record.id)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(record.model_dump_json())
        tmp.replace(p)
        return p


def _sha256_folder(folder: Path) -> str:
    """sha256 of a frame folder: the concatenated bytes of its files in name order (as the manifest)."""
    if not folder.is_dir():
        raise OSError(f"{folder}: missing")
    h = hashlib.sha256()
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        h.update(f.read_bytes())
    return h.hexdigest()
