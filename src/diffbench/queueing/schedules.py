"""Arrival schedules: pure, seeded, precomputed absolute arrival times.

Every schedule is a 1-D ``numpy.ndarray`` of ``float64`` seconds, sorted non-decreasing, with every value in
``[0, duration)``. Runners send request ``i`` at ``t0 + times[i]`` on an absolute clock, so client overhead
never accumulates (the relative-sleep drift of vllm-project/vllm #21104).

Kinds:

- ``constant(rate, duration)``: ``t_i = i / rate`` (exact; the first arrival is at 0).
- ``poisson(rate, duration, seed)``: exponential inter-arrivals with mean ``1 / rate``.
- ``gamma(rate, duration, shape, seed)``: gamma inter-arrivals with shape ``k`` and scale ``1 / (rate * k)``
  (mean ``1 / rate``, coefficient of variation ``1 / sqrt(k)``); ``k = 1`` is Poisson, ``k < 1`` is
  burstier, ``k > 1`` is smoother. The same parametrisation as vLLM's ``--burstiness``.
- ``ramp(start_rate, end_rate, duration, seed=None)``: rate moving linearly from ``start_rate`` to
  ``end_rate``. With a seed: a non-homogeneous Poisson process (time-transformed unit Poisson process);
  without: deterministic arrivals at the times where the cumulative rate reaches 0, 1, 2, ...
- ``trace(path)``: replay of a timestamps file, normalised to start at 0.

The CLI syntax shared by ``diffbench load`` and ``diffbench simulate`` (``--arrival``, ``--burstiness``,
``--ramp A:B``, ``--trace FILE``, ``--seed``) is parsed by :func:`spec_from_cli` into a :class:`ScheduleSpec`,
and :func:`build_schedule` turns a spec into times. Errors: :class:`~diffbench.errors.UsageError` for a bad
option value (rate or duration <= 0, malformed ``--ramp``), :class:`~diffbench.errors.InputError` for an
unreadable or malformed trace file (names the file and the line).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from diffbench.errors import InputError, UsageError

ArrivalKind = Literal["constant", "poisson", "gamma", "ramp", "trace"]
ARRIVAL_KINDS: tuple[str, ...] = ("constant", "poisson", "gamma", "ramp", "trace")
SeedLike = int | np.random.Generator | Sequence[int] | None


def _rng(seed: SeedLike) -> np.random.Generator:
    """A Generator from an int / int sequence / Generator; None is refused (no hidden global state)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise UsageError("a random schedule needs an explicit seed (e.g. --seed 0)")
    return np.random.default_rng(seed)


def _check_positive(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name} must be a positive finite number, got {value:g}")
    return value


def constant(rate: float, duration: float) -> np.ndarray:
    """Evenly spaced arrivals ``t_i = i / rate`` for every ``t_i < duration``.

    Args:
        rate: requests per second, > 0.
        duration: window length in seconds, > 0.

    Returns:
        float64 array of ``ceil(rate * duration)`` times (seconds), starting at 0.

    Raises:
        UsageError: rate or duration not positive.
    """
    rate = _check_positive("rate", rate)
    duration = _check_positive("duration", duration)
    n = math.ceil(rate * duration - 1e-9)
    times = np.arange(n, dtype=np.float64) / rate
    return times[times < duration]


def gamma(rate: float, duration: float, shape: float, seed: SeedLike) -> np.ndarray:
    """Arrivals with i.i.d. gamma inter-arrival times (shape ``k``, scale ``1 / (rate * k)``).

    The first arrival is one inter-arrival after 0; times beyond ``duration`` are dropped.

    Args:
        rate: mean requests per second, > 0.
        duration: window length in seconds, > 0.
        shape: gamma shape ``k`` (burstiness), > 0; 1 gives a Poisson process; inter-arrival CV is
            ``1 / sqrt(k)``.
        seed: int, int sequence or ``numpy.random.Generator``.

    Returns:
        Sorted float64 array of times in ``[0, duration)`` seconds (about ``rate * duration`` of them).

    Raises:
        UsageError: rate, duration or shape not positive, or no seed.
    """
    rate = _check_positive("rate", rate)
    duration = _check_positive("duration", duration)
    shape = _check_positive("burstiness (gamma shape)", shape)
    rng = _rng(seed)
    scale = 1.0 / (rate * shape)
    expected = rate * duration
    chunk = int(expected + 8.0 * math.sqrt(expected / shape + 1.0) + 16)
    parts: list[np.ndarray] = []
    last = 0.0
    while last < duration:
        gaps = rng.gamma(shape, scale, size=chunk)
        times = last + np.cumsum(gaps)
        parts.append(times)
        last = float(times[-1])
        chunk = max(16, chunk // 4)
    out = np.concatenate(parts)
    return out[out < duration]


def poisson(rate: float, duration: float, seed: SeedLike) -> np.ndarray:
    """Poisson arrivals (exponential inter-arrivals, mean ``1 / rate``); :func:`gamma` with shape 1.

    Args:
        rate: mean requests per second, > 0.
        duration: window length in seconds, > 0.
        seed: int, int sequence or ``numpy.random.Generator``.

    Returns:
        Sorted float64 array of times in ``[0, duration)`` seconds.

    Raises:
        UsageError: rate or duration not positive, or no seed.
    """
    return gamma(rate, duration, 1.0, seed)


def _ramp_inverse(s: np.ndarray, r0: float, r1: float, duration: float) -> np.ndarray:
    """Solve ``r0 t + (r1 - r0) t^2 / (2 D) = s`` for t >= 0 (stable form of the quadratic root)."""
    a = (r1 - r0) / (2.0 * duration)
    if a == 0.0:
        return s / r0
    disc = np.maximum(r0 * r0 + 4.0 * a * s, 0.0)
    return 2.0 * s / (r0 + np.sqrt(disc))


def ramp(start_rate: float, end_rate: float, duration: float, seed: SeedLike = None) -> np.ndarray:
    """Arrivals whose rate moves linearly from ``start_rate`` to ``end_rate`` over ``duration``.

    The cumulative rate is ``Λ(t) = r0 t + (r1 - r0) t² / (2 D)``. With ``seed=None`` arrival ``k`` is at
    ``Λ⁻¹(k)`` (deterministic, first at 0); with a seed the times are ``Λ⁻¹(E_k)`` for a unit-rate Poisson
    process ``E`` (a non-homogeneous Poisson process, by the time-transformation theorem).

    Args:
        start_rate: requests per second at t = 0, > 0.
        end_rate: requests per second at t = duration, > 0.
        duration: window length in seconds, > 0.
        seed: None for the deterministic ramp, else an int, int sequence or Generator.

    Returns:
        Sorted float64 array of times in ``[0, duration)`` seconds (about ``(r0 + r1) D / 2`` of them).

    Raises:
        UsageError: a rate or the duration not positive.
    """
    r0 = _check_positive("ramp start rate", start_rate)
    r1 = _check_positive("ramp end rate", end_rate)
    duration = _check_positive("duration", duration)
    total = (r0 + r1) * duration / 2.0
    if seed is None:
        s = np.arange(math.ceil(total - 1e-9), dtype=np.float64)
    else:
        unit = poisson(1.0, total, seed)
        s = unit
    times = _ramp_inverse(s, r0, r1, duration)
    return np.sort(times[times < duration])


def _parse_trace_line(text: str, path: Path, lineno: int) -> float:
    where = f"{path}:{lineno}"
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg}); expected a number or {{\"t\": seconds}}") from exc
        if not isinstance(obj, dict) or "t" not in obj:
            raise InputError(f"{where}: JSON line has no \"t\" field; expected {{\"t\": seconds, ...}}")
        value = obj["t"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}: \"t\" must be a number of seconds, got {value!r}")
        t = float(value)
    else:
        try:
            t = float(text)
        except ValueError as exc:
            raise InputError(
                f"{where}: cannot read {text[:40]!r} as a timestamp; expected one number (seconds) per line "
                "or a JSON object with \"t\""
            ) from exc
    if not math.isfinite(t):
        raise InputError(f"{where}: timestamp {text[:40]!r} is not finite")
    return t


def trace(path: str | Path, duration: float | None = None, speed: float = 1.0) -> np.ndarray:
    """Arrival times replayed from a timestamps file.

    The file holds one timestamp per line, either a plain number (seconds) or a JSON object with a ``"t"``
    field in seconds (other fields ignored); blank lines and lines starting with ``#`` are skipped.
    Timestamps may be relative or absolute (e.g. Unix epoch); they are sorted and shifted so the first is 0.

    Args:
        path: the trace file.
        duration: keep only times ``< duration`` seconds after the first (None keeps all).
        speed: replay speed factor, > 0 (2 replays twice as fast: times are divided by 2).

    Returns:
        Sorted float64 array of seconds starting at 0.

    Raises:
        InputError: missing/unreadable file, a malformed line (message names file and line), or no
            timestamps at all.
        UsageError: duration or speed not positive.
    """
    speed = _check_positive("trace speed", speed)
    if duration is not None:
        duration = _check_positive("duration", duration)
    from diffbench.core.textfile import read_text_input

    p = Path(path)
    lines = read_text_input(p, "--trace", "one timestamp per line (seconds, or JSONL with \"t\")").splitlines()
    values = []
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        values.append(_parse_trace_line(text, p, lineno))
    if not values:
        raise InputError(f"trace file {p} holds no timestamps; expected one number per line or JSONL with \"t\"")
    times = np.sort(np.asarray(values, dtype=np.float64))
    times = (times - times[0]) / speed
    if duration is not None:
        times = times[times < duration]
    return times


class ScheduleSpec(BaseModel):
    """A validated description of an arrival schedule (what the CLI options mean).

    Fields: ``kind``; ``rate`` (req/s; constant/poisson/gamma); ``duration_s`` (seconds; optional only for
    a trace); ``burstiness`` (gamma shape); ``ramp_start`` / ``ramp_end`` (req/s); ``ramp_random`` (Poisson
    ramp when True, deterministic otherwise); ``trace_path``; ``trace_speed``; ``seed``.
    """

    model_config = ConfigDict(frozen=True)

    kind: ArrivalKind = "poisson"
    rate: float | None = None
    duration_s: float | None = None
    burstiness: float = 1.0
    ramp_start: float | None = None
    ramp_end: float | None = None
    ramp_random: bool = True
    trace_path: str | None = None
    trace_speed: float = 1.0
    seed: int = 0

    @property
    def offered_rate(self) -> float | None:
        """Mean requests per second the spec asks for (ramp: the average of both ends; trace: None)."""
        if self.kind == "ramp" and self.ramp_start is not None and self.ramp_end is not None:
            return (self.ramp_start + self.ramp_end) / 2.0
        if self.kind == "trace":
            return None
        return self.rate

    def with_rate(self, rate: float) -> ScheduleSpec:
        """A copy at another rate (for a sweep); UsageError for a ramp or trace, which have no single rate."""
        if self.kind in ("ramp", "trace"):
            raise UsageError(f"a {self.kind} schedule has no single rate; do not combine it with --rates")
        return self.model_copy(update={"rate": _check_positive("rate", rate)})


def build_schedule(spec: ScheduleSpec, seed: SeedLike = None) -> np.ndarray:
    """Arrival times (float64 seconds, sorted, in ``[0, duration)``) for ``spec``.

    Args:
        spec: the schedule description.
        seed: overrides ``spec.seed`` (e.g. a per-rate Generator in a sweep); None uses ``spec.seed``.

    Raises:
        UsageError: a missing rate/duration or a non-positive value (the message names it).
        InputError: a bad trace file.
    """
    rng_seed: SeedLike = spec.seed if seed is None else seed
    if spec.kind == "trace":
        if spec.trace_path is None:
            raise UsageError("a trace schedule needs a file: --trace FILE")
        return trace(spec.trace_path, spec.duration_s, spec.trace_speed)
    if spec.duration_s is None:
        raise UsageError("a duration is needed: --duration SECONDS")
    if spec.kind == "ramp":
        if spec.ramp_start is None or spec.ramp_end is None:
            raise UsageError("a ramp schedule needs --ramp START:END (requests per second)")
        return ramp(spec.ramp_start, spec.ramp_end, spec.duration_s, rng_seed if spec.ramp_random else None)
    if spec.rate is None:
        raise UsageError(f"a {spec.kind} schedule needs a rate (--rates R1,R2,...)")
    if spec.kind == "constant":
        return constant(spec.rate, spec.duration_s)
    if spec.kind == "poisson":
        return poisson(spec.rate, spec.duration_s, rng_seed)
    return gamma(spec.rate, spec.duration_s, spec.burstiness, rng_seed)


def parse_rate_list(text: str, option: str = "--rates") -> list[float]:
    """Parse ``"0.5,1,1.5"`` into positive floats (req/s, order kept).

    Raises:
        UsageError: empty list, a non-number, or a value <= 0 (names the option and value).
    """
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError as exc:
            raise UsageError(f"{option}: {part!r} is not a number; use e.g. {option} 0.5,1,2") from exc
        if not math.isfinite(value):
            hint = "; to send every request at once use --request-rate inf --num-requests N" \
                if value > 0 else ""
            raise UsageError(f"{option}: rate {part} is not a finite number of requests per second{hint}")
        if value <= 0:
            raise UsageError(f"{option}: rate must be > 0, got {part}")
        out.append(value)
    if not out:
        raise UsageError(f"{option} is empty; use e.g. {option} 0.5,1,2")
    return out


def parse_int_list(text: str, option: str = "--users") -> list[int]:
    """Parse ``"1,2,4"`` into positive ints (order kept).

    Raises:
        UsageError: empty list, a non-integer, or a value < 1 (names the option and value).
    """
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError as exc:
            raise UsageError(f"{option}: {part!r} is not an integer; use e.g. {option} 1,2,4") from exc
        if value < 1:
            raise UsageError(f"{option}: must be >= 1, got {part}")
        out.append(value)
    if not out:
        raise UsageError(f"{option} is empty; use e.g. {option} 1,2,4")
    return out


def parse_ramp(text: str) -> tuple[float, float]:
    """Parse ``--ramp START:END`` (req/s) into two positive floats.

    Raises:
        UsageError: not two numbers separated by ``:``, or a value <= 0.
    """
    parts = text.split(":")
    if len(parts) != 2:
        raise UsageError(f"--ramp {text!r}: expected START:END in requests per second, e.g. --ramp 0.5:2")
    try:
        a, b = float(parts[0]), float(parts[1])
    except ValueError as exc:
        raise UsageError(f"--ramp {text!r}: expected two numbers, e.g. --ramp 0.5:2") from exc
    _check_positive("--ramp start rate", a)
    _check_positive("--ramp end rate", b)
    return a, b


def spec_from_cli(
    *,
    arrival: str = "poisson",
    duration_s: float | None = None,
    rate: float | None = None,
    burstiness: float | None = None,
    ramp_text: str | None = None,
    trace_path: str | None = None,
    trace_speed: float = 1.0,
    seed: int = 0,
) -> ScheduleSpec:
    """Validate the shared CLI options into a :class:`ScheduleSpec`.

    Rules: ``--trace FILE`` selects trace replay and ``--ramp A:B`` a seeded Poisson ramp; each conflicts
    with an ``--arrival`` other than the default (``poisson``) or its own name. ``--burstiness K`` needs
    ``--arrival gamma`` (or ``K == 1`` with poisson): one flag never silently changes the process.

    Args:
        arrival: ``constant``, ``poisson``, ``gamma``, ``ramp`` or ``trace``.
        duration_s: window in seconds (> 0; optional for a trace).
        rate: req/s (> 0) when known; a sweep fills it with :meth:`ScheduleSpec.with_rate`.
        burstiness: gamma shape (> 0).
        ramp_text: ``"START:END"``.
        trace_path: timestamps file.
        trace_speed: replay speed factor for a trace.
        seed: integer seed.

    Raises:
        UsageError: an unknown arrival kind, a conflicting combination, or a non-positive value.
    """
    kind = arrival.strip().lower()
    if kind not in ARRIVAL_KINDS:
        raise UsageError(f"--arrival {arrival!r} is not one of {', '.join(ARRIVAL_KINDS)}")
    if trace_path is not None and ramp_text is not None:
        raise UsageError("--trace and --ramp cannot be combined; pick one arrival process")
    if trace_path is not None:
        if kind not in ("poisson", "trace"):
            raise UsageError(f"--trace replays a file; it cannot be combined with --arrival {kind}")
        kind = "trace"
    elif ramp_text is not None:
        if kind not in ("poisson", "ramp"):
            raise UsageError(f"--ramp defines the arrival process; it cannot be combined with --arrival {kind}")
        kind = "ramp"
    elif kind == "trace":
        raise UsageError("--arrival trace needs --trace FILE")
    elif kind == "ramp":
        raise UsageError("--arrival ramp needs --ramp START:END")
    shape = 1.0
    if burstiness is not None:
        shape = _check_positive("--burstiness", burstiness)
        if kind != "gamma" and not (kind == "poisson" and shape == 1.0):
            raise UsageError(
                f"--burstiness {burstiness:g} applies to gamma arrivals; add --arrival gamma "
                "(burstiness 1 is Poisson)"
            )
    if duration_s is not None:
        duration_s = _check_positive("--duration", duration_s)
    elif kind != "trace":
        raise UsageError("--duration SECONDS is required")
    if rate is not None:
        rate = _check_positive("rate", rate)
    r0 = r1 = None
    if ramp_text is not None:
        r0, r1 = parse_ramp(ramp_text)
    return ScheduleSpec(
        kind=kind,  # type: ignore[arg-type]
        rate=rate,
        duration_s=duration_s,
        burstiness=shape,
        ramp_start=r0,
        ramp_end=r1,
        trace_path=trace_path,
        trace_speed=_check_positive("--trace-speed", trace_speed),
        seed=seed,
    )


__all__ = [
    "ARRIVAL_KINDS",
    "ArrivalKind",
    "ScheduleSpec",
    "build_schedule",
    "constant",
    "gamma",
    "parse_int_list",
    "parse_ramp",
    "parse_rate_list",
    "poisson",
    "ramp",
    "spec_from_cli",
    "trace",
]
