"""Options and results of ``diffbench sweep`` (pydantic; JSON schema version :data:`SCHEMA_VERSION`).

Durations in seconds, PSNR in dB, speed-up dimensionless (> 1 is faster than the baseline).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from diffbench.bench.result import Conditions
from diffbench.core.stats import Summary
from diffbench.core.warmth import DEFAULT_WINDOW
from diffbench.engines.config import EngineConfig
from diffbench.quality.models import GateResult
from diffbench.store.models import MetricStats, RunQuality, SkipStats
from diffbench.sweep.bootstrap import DEFAULT_RESAMPLES, SpeedupCI
from diffbench.sweep.interleave import DEFAULT_MAX_WARMUP, ScheduleInfo

SCHEMA_VERSION = 1

# Defaults for the embedded tiny models: (height, width, frames, steps). 20 steps so that step caches have
# room to act; 128 px so that a sweep of 4 values finishes in about a minute on 2 CPU cores.
TINY_PROMPTS, TINY_RUNS = 4, 24  # tiny models: a few prompts and modest runs (about a minute on 2 cores)
TINY_DEFAULTS: dict[str, tuple[int, int, int | None, int]] = {
    "tiny-flux": (128, 128, None, 20),
    "tiny-sdxl": (128, 128, None, 20),
    "tiny-wan": (64, 64, 9, 20),
}


class SweepOptions(BaseModel):
    """Everything ``diffbench sweep`` accepts, validated once."""

    engine: EngineConfig = EngineConfig()
    axis: str
    values: list[str]
    url_per_value: list[str] = Field(
        default=[], description="--engine http: the base URL of the service launched with each value, in the "
        "order of values (the baseline is engine.http.url)")
    height: int | None = Field(default=None, gt=0)
    width: int | None = Field(default=None, gt=0)
    frames: int | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    guidance: float | None = None
    prompts_file: Path | None = None
    num_prompts: int | None = Field(default=None, gt=0, description="None: 4 for tiny models, else all 20")
    seeds: list[int] = [0]
    warmup: int = Field(default=1, ge=0, description="minimum warmup runs per configuration")
    max_warmup: int = Field(default=DEFAULT_MAX_WARMUP, ge=1, description="warmup cap per configuration")
    stable_window: int = Field(default=DEFAULT_WINDOW, ge=4, le=20,
                               description="warm = no downward trend over this many last warmup runs")
    schedule_seed: int = 0
    runs: int | None = Field(default=None, ge=2, description="None: 24 for tiny models, else 2 per request")
    budget_db: float = Field(default=30.0, gt=0, le=100, allow_inf_nan=False, description="PSNR budget, dB")
    gates: list[str] = []
    ssim: bool = True
    baseline_run: str | None = None
    force: bool = False
    resume: bool = True
    outputs_dir: Path | None = None
    bootstrap_resamples: int = Field(default=DEFAULT_RESAMPLES, ge=100)
    bootstrap_seed: int = 0
    value_configs: dict[str, EngineConfig] = Field(
        default={}, description="axis 'deployment' (diffbench derive): the whole engine configuration of each "
        "value; each value may change several fields of the baseline configuration at once")
    shard: tuple[int, int] | None = Field(
        default=None, description="(index, count): only the prompts at positions i with i % count == index "
        "(a device's share of a distributed sweep, diffbench.distributed.sweep); None: every prompt")


class RunRef(BaseModel):
    """A stored run a result refers to, with the conditions it was measured under."""

    run_id: str
    conditions: Conditions
    latency_s: Summary | None = None
    outputs_dir: str | None = None
    resumed: bool = False


class GateRow(BaseModel):
    """One gate on one point, with the same statistic on the noise floor beside it."""

    gate: GateResult
    noise_floor: float | None = None


class PointResult(BaseModel):
    """One value of the swept knob."""

    value: str
    run_id: str
    conditions: Conditions
    latency_s: Summary
    speedup: float
    speedup_ci: tuple[float, float]
    speedup_detail: SpeedupCI
    noise_floor: SpeedupCI | None = None
    measurably_faster: bool = False
    verdict: str = ""
    session_id: str | None = None
    quality: RunQuality
    skipped_steps: float | None = None
    skipped_detail: SkipStats | None = None
    gates: list[GateRow] = []
    passed: bool
    resumed: bool = False


class WorkingPoint(BaseModel):
    """The fastest value that passes every quality gate *and* is measurably faster than the baseline
    (see :func:`diffbench.sweep.working_point.speed_verdict`); ``value`` None when none is."""

    value: str | None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    message: str


class SweepResult(BaseModel):
    """The curve (one point per value), the baseline and its noise floor, and the working point."""

    schema_version: int = SCHEMA_VERSION
    kind: str = "diffbench.sweep"
    sweep_id: str
    created_unix: float
    partial: bool = True
    interrupted: bool = False
    axis: str
    field: str
    store: str
    baseline: RunRef
    noise_floor: RunQuality | None = None
    noise_floor_psnr: MetricStats | None = None
    timing_floor: SpeedupCI | None = None
    schedule: ScheduleInfo | None = None
    warmup_s: dict[str, list[float]] = {}
    gates: list[str]
    budget_db: float | None = None
    points: list[PointResult] = []
    working_point: WorkingPoint | None = None
    forced: bool = False
    fingerprint_differences: list[str] = []
    warnings: list[str] = []
