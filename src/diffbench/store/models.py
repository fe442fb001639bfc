"""Typed records kept in the run store (pydantic; JSON columns in SQLite).

Durations are seconds, PSNR is dB; ``inf`` PSNR (bitwise-identical images) is stored as the JSON string
``"inf"`` and read back as ``math.inf``.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from diffbench.core.manifest import Manifest
from diffbench.core.stats import Summary

RunKind = Literal["baseline", "noise-floor", "point"]
RunStatus = Literal["running", "done", "failed", "interrupted"]
SweepStatus = Literal["running", "done", "failed", "interrupted"]


class RunTiming(BaseModel):
    """End-to-end latency of the timed runs plus medians of the stage split.

    ``samples_s``: every timed run, seconds, in block order. ``latency_s``: their summary (with n).
    ``warmup_s``: the warmup runs (until stable, see diffbench.core.warmth), never in a ratio.
    Interleaved runs (diffbench.sweep.interleave) also carry ``session_id`` (one per interleaved timing
    session; sample *i* of every run of a session comes from block *i*), ``baseline_samples_s`` (the
    baseline's samples from the same blocks, for a point), ``stable`` (the warmup ended on a stable window)
    and ``measured_unix`` (start and end of the session, wall clock).
    """

    samples_s: list[float]
    warmup_s: list[float] = []
    latency_s: Summary
    denoise_median_s: float | None = None
    vae_decode_median_s: float | None = None
    step_median_s: float | None = None
    runs: int
    warmup: int
    session_id: str | None = None
    baseline_samples_s: list[float] | None = None
    stable: bool | None = None
    measured_unix: tuple[float, float] | None = None


class MetricStats(BaseModel):
    """Per-image metric over the paired outputs: percentiles by numpy 'linear' (+inf sorts last)."""

    n: int
    n_inf: int = 0
    mean: float | None = None
    p10: float
    p50: float
    p90: float
    min: float
    max: float
    worst: float


class RunQuality(BaseModel):
    """Quality of this run's outputs against ``against_run`` paired by (prompt_id, seed, index)."""

    against_run: str
    psnr: MetricStats
    ssim: MetricStats | None = None
    worst_key: str | None = None


class SkipStats(BaseModel):
    """Fraction of cache-hooked computations that were skipped (see diffbench.engines.instrument.skips for the method)."""

    fraction: float = Field(ge=0, le=1)
    computed: int
    total: int
    unit: str
    method: str


class _Owned(BaseModel):
    """The process that wrote a stored row: ``pid``, ``host``, ``pid_started`` (its start, Unix s), and the
    ``status_note`` that says why a status is what it is (``"pid N ended"``, ``"stopped by SIGTERM"``)."""

    pid: int | None = None
    host: str | None = None
    pid_started: float | None = None
    status_note: str | None = None
    if TYPE_CHECKING:
        status: str  # declared by each row kind

    @property
    def status_text(self) -> str:
        """The status with its note, e.g. ``"interrupted (pid 1234 ended)"``."""
        return f"{self.status} ({self.status_note})" if self.status_note else self.status


class RunRecord(_Owned):
    """One generation set: a baseline, its noise-floor repeat, or a sweep point.

    ``pid``, ``host`` and ``pid_started`` (Unix s) name the process that wrote the row; a ``running`` row
    whose process has ended reads as ``interrupted`` with ``status_note`` ``"pid N ended"``."""

    id: str
    created_unix: float
    kind: RunKind
    status: RunStatus = "running"
    sweep_id: str | None = None
    axis: str | None = None
    value: str | None = None
    model: str
    fingerprint: dict[str, object]
    fingerprint_hash: str
    conditions: dict[str, object] = {}
    manifest: Manifest | None = None
    outputs_dir: str | None = None
    timing: RunTiming | None = None
    quality: RunQuality | None = None
    skipped: SkipStats | None = None
    error: str | None = None


class SweepRecord(_Owned):
    """One sweep: its identity, options (JSON) and last assembled result (JSON)."""

    id: str
    created_unix: float
    updated_unix: float
    axis: str
    model: str
    status: SweepStatus
    options_json: str
    result_json: str | None = None


def fingerprint_hash(fp: dict[str, object], ignore: tuple[str, ...] = ()) -> str:
    """sha256 (first 16 hex) of the sorted-JSON fingerprint without the ``ignore`` fields."""
    data = {k: v for k, v in fp.items() if k not in ignore}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
