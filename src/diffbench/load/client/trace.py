"""Request traces for ``diffbench load --trace FILE``: arrival times *and* each request's own shape.

vLLM-Omni's trace dataset (``benchmarks/diffusion/diffusion_benchmark_serving.py``, ``TraceDataset``) varies
the shapes row by row but sends at its own rate, ignoring the timestamps; here request ``i`` is sent at
``timestamp[i] / speed`` after the first row's timestamp, with row ``i``'s shape.

Formats (chosen by the suffix, else by the first non-blank, non-``#`` line):

- **plain** (``.txt``, a number on the first line): one timestamp per line, in seconds; the shapes come from
  ``--workload`` / ``--size --steps`` as without a trace (the first workload shape).
- **CSV** (``.csv``, or a header line): a header naming the columns, one request per row.
- **JSONL** (``.jsonl``, or a line starting with ``{``): one JSON object per line with the same keys.

Columns (keys), all in the units named:

============================  =========================================================================
``timestamp`` (or ``t``)      arrival, seconds (required; >= 0, non-decreasing; shifted so the first is 0)
``width``, ``height``         pixels (both, or neither)
``size``                      ``WIDTHxHEIGHT`` instead of ``width``/``height``
``steps``                     denoising steps (alias ``num_inference_steps``)
``frames``                    video frames (alias ``num_frames``); a trace with frames is a video trace
``fps``                       frames per second (video)
``prompt``                    the prompt (alias ``text``; default: ``--prompts`` in order)
``seed``                      the request seed (default: as without a trace)
``slo_s`` / ``slo_ms``        the request's latency objective, seconds / milliseconds (> 0)
============================  =========================================================================

A missing shape column (or an empty CSV cell) takes the ``--size``/``--steps``/``--frames`` (or first
workload shape) value. Any other column is an error naming it, so a misspelt ``widht`` never silently
sends the default size.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from diffbench.errors import InputError, UsageError
from diffbench.load.client.workload import RequestSpec, ShapeMix, Workload, size_field

ALIASES = {"t": "timestamp", "num_inference_steps": "steps", "num_frames": "frames", "text": "prompt"}
COLUMNS = ("timestamp", "width", "height", "size", "steps", "frames", "fps", "prompt", "seed", "slo_s", "slo_ms")
MAX_SEED = 2**31


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: arrival ``t_s`` (seconds after the first row, before ``--trace-speed``),
    its shape, and the optional prompt, seed and latency objective ``slo_s`` (seconds)."""

    t_s: float
    shape: ShapeMix
    prompt: str | None = None
    seed: int | None = None
    slo_s: float | None = None


@dataclass(frozen=True)
class Trace:
    """A read trace: ``rows`` in file order, the format, the columns it named (canonical names)."""

    path: str
    rows: list[TraceRow]
    format: str
    columns: tuple[str, ...]

    @property
    def kind(self) -> str:
        """``video`` when the rows have frames, else ``image``."""
        return "video" if self.rows[0].shape.frames is not None else "image"

    def times(self, speed: float = 1.0) -> np.ndarray:
        """Arrival times (float64 seconds from 0) replayed ``speed`` times faster."""
        return np.asarray([r.t_s for r in self.rows], dtype=np.float64) / speed

    def shapes(self) -> list[ShapeMix]:
        """The distinct shapes, in order of first appearance (what the warm-up covers)."""
        seen: dict[str, ShapeMix] = {}
        for r in self.rows:
            seen.setdefault(r.shape.label(), r.shape)
        return list(seen.values())

    def slo_count(self) -> int:
        """Rows that carry their own latency objective."""
        return sum(r.slo_s is not None for r in self.rows)


def _format(p: Path, lines: list[str]) -> str:
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix == ".jsonl":
        return "jsonl"
    first = next((ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")), "")
    if first.startswith("{"):
        return "jsonl"
    try:
        float(first)
    except ValueError:
        return "csv"
    return "plain"


def _number(value: object, name: str, where: str, *, integer: bool = False) -> float | int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise InputError(f"{where}: {name} must be a number, got {value!r}")
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(f):
        raise InputError(f"{where}: {name} {value!r} is not finite")
    if integer:
        if f != int(f):
            raise InputError(f"{where}: {name} must be a whole number, got {value!r}")
        return int(f)
    return f


def _canonical(keys: list[str], where: str) -> list[str]:
    out = []
    for k in keys:
        key = k.strip().lstrip("\ufeff")  # a spreadsheet's UTF-8 byte-order mark
        name = ALIASES.get(key, key)
        if name not in COLUMNS:
            raise InputError(f"{where}: unknown column {k!r}; a trace has {', '.join(COLUMNS)} "
                             f"(aliases {', '.join(f'{a}={c}' for a, c in ALIASES.items())})")
        if name in out:
            raise InputError(f"{where}: column {name!r} is given twice")
        out.append(name)
    if "timestamp" not in out:
        raise InputError(f"{where}: no timestamp column; every row needs its arrival time in seconds "
                         "(timestamp or t)")
    if ("width" in out) != ("height" in out):
        raise InputError(f"{where}: column {'height' if 'width' in out else 'width'} is missing; give width and "
                         "height together, or size as WIDTHxHEIGHT")
    if "size" in out and "width" in out:
        raise InputError(f"{where}: give size or width/height, not both")
    if "slo_s" in out and "slo_ms" in out:
        raise InputError(f"{where}: give slo_s or slo_ms, not both")
    return out


def _row(values: dict[str, object], where: str, default: ShapeMix) -> TraceRow:
    t = _number(values.get("timestamp"), "timestamp", where)
    if t is None:
        raise InputError(f"{where}: timestamp is empty; every row needs its arrival time in seconds")
    if t < 0:
        raise InputError(f"{where}: timestamp {t:g} is negative; timestamps are seconds >= 0")
    shape: dict[str, object] = default.model_dump(exclude={"weight"})
    size = values.get("size")
    if isinstance(size, str) and size.strip():
        try:
            shape["width"], shape["height"] = size_field(size)
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
    for name in ("width", "height", "steps", "frames", "fps"):
        v = _number(values.get(name), name, where, integer=True)
        if v is not None:
            shape[name] = v
    try:
        mix = ShapeMix.model_validate(shape)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "shape"
        raise InputError(f"{where}: {field} {err['msg'].lower()} (got {err.get('input')!r})") from None
    prompt = values.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise InputError(f"{where}: prompt must be a string, got {prompt!r}")
    seed = _number(values.get("seed"), "seed", where, integer=True)
    if seed is not None and not 0 <= seed < MAX_SEED:
        raise InputError(f"{where}: seed {seed} is outside 0..2**31-1")
    slo = _number(values.get("slo_s"), "slo_s", where)
    slo_ms = _number(values.get("slo_ms"), "slo_ms", where)
    if slo_ms is not None:
        slo = slo_ms / 1e3
    if slo is not None and slo <= 0:
        raise InputError(f"{where}: {'slo_ms' if slo_ms is not None else 'slo_s'} must be > 0")
    return TraceRow(t_s=float(t), shape=mix, prompt=prompt.strip() if isinstance(prompt, str) and prompt.strip()
                    else None, seed=int(seed) if seed is not None else None, slo_s=slo)


def read_trace(path: str | Path, default: ShapeMix) -> Trace:
    """Read and validate a trace file (formats and columns in the module docstring).

    Args:
        path: the trace file.
        default: the shape of rows (or columns) that give none (``--size``/``--steps``/``--frames``).

    Returns:
        The trace, timestamps shifted so the first row is at 0.

    Raises:
        InputError: an unreadable or empty file, an unknown or missing column, a bad value, a negative or
            decreasing timestamp, rows with and without frames (the file and line are named).
    """
    from diffbench.core.textfile import read_text_input

    p = Path(path)
    text = read_text_input(p, "--trace", "a CSV/JSONL trace (timestamp, width, height, steps, ...) or one "
                           "timestamp per line")
    lines = text.splitlines()
    fmt = _format(p, lines)
    rows: list[TraceRow] = []
    columns: list[str] = []
    if fmt == "plain":
        columns = ["timestamp"]
        for i, ln in enumerate(lines, start=1):
            s = ln.strip()
            if s and not s.startswith("#"):
                rows.append(_row({"timestamp": s}, f"{p}:{i}", default))
    elif fmt == "jsonl":
        for i, ln in enumerate(lines, start=1):
            s = ln.strip()
            if not s or s.startswith("#"):
                continue
            where = f"{p}:{i}"
            try:
                obj = json.loads(s)
            except ValueError as exc:
                raise InputError(f"{where}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise InputError(f"{where}: a JSONL trace row must be an object, got {type(obj).__name__}")
            names = _canonical(list(obj), where)
            columns.extend(n for n in names if n not in columns)
            rows.append(_row(dict(zip(names, obj.values(), strict=True)), where, default))
    else:
        body = "\n".join(ln for ln in lines if not ln.strip().startswith("#"))
        reader = csv.reader(io.StringIO(body))
        header = next(reader, None)
        if not header:
            raise InputError(f"--trace {p} is empty")
        columns = _canonical(header, f"{p}:1 (header)")
        for i, cells in enumerate(reader, start=2):
            if not cells or not any(c.strip() for c in cells):
                continue
            where = f"{p}:{i}"
            if len(cells) != len(columns):
                raise InputError(f"{where}: {len(cells)} cells, the header has {len(columns)} columns")
            rows.append(_row(dict(zip(columns, cells, strict=True)), where, default))
    if not rows:
        raise InputError(f"--trace {p} holds no rows")
    for k in range(1, len(rows)):
        if rows[k].t_s < rows[k - 1].t_s:
            raise InputError(f"--trace {p}: timestamps must not decrease: row {k + 1} is at {rows[k].t_s:g} s, "
                             f"after row {k} at {rows[k - 1].t_s:g} s (sort the file by timestamp)")
    if len({r.shape.frames is None for r in rows}) > 1:
        raise InputError(f"--trace {p}: some rows have frames and some do not; a trace is all images or all "
                         "videos (give frames on every row, or --frames for the rows without)")
    t0 = rows[0].t_s
    rows = [TraceRow(t_s=r.t_s - t0, shape=r.shape, prompt=r.prompt, seed=r.seed, slo_s=r.slo_s) for r in rows]
    return Trace(path=str(p), rows=rows, format=fmt, columns=tuple(columns))


MAX_REPLAY_S = 7 * 86400.0
"""Longest replay (last timestamp ÷ ``--trace-speed``) a trace may ask for: seven days; beyond it the run could
never finish and nanosecond send times would overflow."""


def check_span(trace: Trace, speed: float) -> None:
    """Refuse a trace whose replay (last timestamp ÷ speed) exceeds :data:`MAX_REPLAY_S` seconds.

    Raises:
        UsageError: names the file, the span and the two ways out.
    """
    span = trace.rows[-1].t_s / speed
    if not math.isfinite(span) or span > MAX_REPLAY_S:
        raise UsageError(f"--trace {trace.path}: the replay would last {span:.3g} s (last timestamp "
                         f"{trace.rows[-1].t_s:.6g} s ÷ --trace-speed {speed:g}); at most {MAX_REPLAY_S:,.0f} s "
                         "(7 days): check the timestamps' unit (seconds), cut the file or raise --trace-speed")


def with_mix(trace: Trace, workload: Workload, seed: int) -> Trace:
    """A trace of timestamps only (no shape column) takes its shapes from the workload's mix, drawn by weight
    with a generator seeded by ``seed`` (as the Poisson schedules draw theirs); other traces are unchanged."""
    if any(c in trace.columns for c in ("width", "height", "size", "steps", "frames")) or len(workload.shapes) < 2:
        return trace
    rng = np.random.default_rng(seed)
    w = np.array([s.weight for s in workload.shapes], dtype=np.float64)
    picks = rng.choice(len(w), size=len(trace.rows), p=w / w.sum())
    rows = [TraceRow(t_s=r.t_s, shape=workload.shapes[int(k)], prompt=r.prompt, seed=r.seed, slo_s=r.slo_s)
            for r, k in zip(trace.rows, picks, strict=True)]
    return Trace(path=trace.path, rows=rows, format=trace.format, columns=trace.columns)


def check_speed(speed: float) -> float:
    """``--trace-speed`` (> 0, finite). Raises UsageError otherwise."""
    if not math.isfinite(speed) or speed <= 0:
        raise UsageError(f"--trace-speed must be a finite number > 0 (2 replays twice as fast), got {speed:g}")
    return speed


def trace_specs(trace: Trace, workload: Workload, prompts: list[str], seed: int) -> list[RequestSpec]:
    """One request spec per row: the row's shape, its prompt (else ``prompts`` in order) and its seed (else
    the seed a :class:`~diffbench.load.client.workload.RequestPlanner` of ``seed`` gives request ``i``)."""
    base = int(seed) * 1_000_003
    kind = "video" if trace.kind == "video" else "image"
    return [RequestSpec(index=i, kind=kind, prompt=r.prompt or prompts[i % len(prompts)], shape=r.shape,
                        seed=r.seed if r.seed is not None else (base + i) % MAX_SEED, model=workload.model,
                        extra=workload.extra)
            for i, r in enumerate(trace.rows)]
