"""Atomic JSON writing, so an interrupted run never leaves a half-written file."""

from __future__ import annotations

import json
import math
import os
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


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as strict JSON (non-finite floats as strings) via temp file + rename.

    The parent directory must exist (see :mod:`diffbench.core.outpath`: commands check their output paths
    before running and create parents only with ``--mkdir``). Raises :class:`InputError` when the file
    cannot be written.
    """
    from diffbench.errors import InputError

    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text(json.dumps(strict_json_value(data), indent=2, sort_keys=False))
        tmp.replace(p)
    except OSError as exc:
        raise InputError(f"{p}: cannot write ({exc.strerror or exc}); choose a writable path") from exc
    return p
