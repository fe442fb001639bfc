"""Atomic JSON writing, so an interrupted run never leaves a half-written file."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def strict_json_value(obj: Any) -> Any:
    """Replace non-finite floats by strings ("inf", "-inf", "nan") so the output is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: strict_json_value(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json_value(v) for v in obj]
    return obj


def write_text_atomic(path: str | os.PathLike[str], text: str, *, newline: str | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` so a reader never sees half a file: a temporary file beside the
    target, then a rename over it.

    A symlink is followed (its target is replaced, the link stays); an existing path that is not a regular
    file (``/dev/null``, a FIFO, a device) is written in place, never replaced by a regular file.

    On failure (a full disk, a read-only directory) the temporary file is removed and the target is left as
    it was.

    Raises:
        OutputError: the file cannot be written (exit 6; the message names the path and the OS error).
    """
    from diffbench.errors import OutputError

    p = Path(path)
    real = Path(os.path.realpath(p))
    tmp: Path | None = None
    try:
        if real.exists() and not real.is_file():
            with open(real, "w", encoding="utf-8", newline=newline) as fh:
                fh.write(text)
            return p
        tmp = real.with_name(real.name + ".tmp")
        tmp.write_text(text, encoding="utf-8", newline=newline)
        tmp.replace(real)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        hint = "free some space" if exc.errno == errno.ENOSPC else "choose a writable path"
        raise OutputError(f"{p}: cannot write ({exc.strerror or exc}); {hint}") from exc
    return p


def write_each(*writes: Callable[[], object]) -> None:
    """Call every writer in order, even after one fails, so one unwritable output never costs the others.

    Raises:
        OutputError: the first failure (exit 6), once every writer was tried; the others are named with it.
    """
    from diffbench.errors import OutputError

    failed: list[OutputError] = []
    for write in writes:
        try:
            write()
        except OutputError as exc:
            failed.append(exc)
    if failed:
        more = "".join(f"; also {e}" for e in failed[1:])
        raise OutputError(f"{failed[0]}{more}") from failed[0]


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as strict JSON (non-finite floats as strings) with :func:`write_text_atomic`.

    The parent directory must exist (see :mod:`diffbench.core.outpath`: commands check their output paths
    before running and create parents only with ``--mkdir``).

    Raises:
        OutputError: the file cannot be written.
    """
    return write_text_atomic(path, json.dumps(strict_json_value(data), indent=2, sort_keys=False))
