"""Typed, versioned results of ``diffbench bench`` (JSON schema version :data:`SCHEMA_VERSION`).

Durations are seconds, memory is bytes. The top-level ``latency_s``/``stages_s``/... fields describe the
first shape that ran; ``shapes`` holds every shape (including ones that failed, with their error).
"""

from __future__ import annotations

from pydantic import BaseModel

from diffbench.core.env import EnvInfo
from diffbench.core.stats import Summary

SCHEMA_VERSION = 1
REPRO_THRESHOLD_DB = 40.0


class Note(BaseModel):
    """A warning with a stable code (``no_warmup``, ``first_run_outlier``, ``percentile_unsupported``,
    ``unsynchronized``, ``not_reproducible``, ``shape_failed``, ``interrupted``)."""

    code: str
    message: str


class StagesSummary(BaseModel):
    """Mean seconds per stage over the timed runs; ``other`` = end-to-end − the three stages per run, so
    the four means add up exactly to the mean end-to-end time (means are additive, medians are not).
    ``median`` holds each stage's median for robustness against outliers."""

    text_encode: float
    denoise: float
    vae_decode: float
    other: float
    end_to_end: float
    median: dict[str, float] = {}


class StepSummary(BaseModel):
    """Per-step statistics over every step of every timed run (seconds).

    ``per_step_median`` has one entry per step index; ``denoiser_calls_per_step`` is 2 when CFG runs as
    two forwards; ``denoiser_batch`` is 2 × batch when CFG is batched into one forward.
    """

    median: float
    mean: float
    p90: float
    n: int
    steps_per_run: int
    per_step_median: list[float]
    denoiser_calls_per_step: float
    denoiser_batch: int | None = None


class MemoryResult(BaseModel):
    """Peak memory (bytes) over the timed runs: CUDA allocated/reserved, or CPU resident-set growth."""

    kind: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    peak_stage: str | None


class ReproResult(BaseModel):
    """Same request generated twice: PSNR (dB, inf when bitwise identical) and the settings that matter."""

    psnr_db: float | None
    reproducible: bool | None
    threshold_db: float = REPRO_THRESHOLD_DB
    prompt_id: str | None = None
    seed: int | None = None
    generator_device: str = "cpu"
    threads: int | None = None
    deterministic_algorithms: bool | None = None
    attention_backend: str | None = None


class ShapeResult(BaseModel):
    """Everything measured at one shape (height, width, frames, steps, batch)."""

    shape: str
    height: int
    width: int
    frames: int | None
    steps: int
    batch: int
    guidance: float | None
    error: str | None = None
    latency_s: Summary | None = None
    samples_s: list[float] = []
    warmup_s: list[float] = []
    stages_s: StagesSummary | None = None
    step_s: StepSummary | None = None
    memory: MemoryResult | None = None
    throughput_images_per_s: float | None = None
    repro: ReproResult | None = None
    sync_pending_s: float = 0.0
    warnings: list[Note] = []


class Conditions(BaseModel):
    """The field's minimal report conditions block."""

    model: str
    model_hash: str | None
    pipeline: str | None
    shape: str
    steps: int
    cfg: str
    guidance: float | None
    batch: int
    engine: str
    engine_version: str
    attention_backend: str
    parallelism: str
    precision: str
    cache: str
    compile: bool
    device: str
    hardware: str
    driver: str | None
    cuda: str | None


class Protocol(BaseModel):
    """How the numbers were taken."""

    warmup_per_shape: int
    runs_per_shape: int
    synchronized: bool
    percentile_method: str
    clock: str = "time.perf_counter_ns (monotonic); device synchronized before every read"


class BenchResult(BaseModel):
    """The bench report. ``partial`` is true while the run is going or after an interruption;
    ``valid`` is false when the protocol was violated (e.g. unsynchronized timing)."""

    schema_version: int = SCHEMA_VERSION
    kind: str = "diffbench.bench"
    partial: bool = True
    interrupted: bool = False
    valid: bool = True
    created_unix: float
    conditions: Conditions
    env: EnvInfo
    protocol: Protocol
    latency_s: Summary | None = None
    warmup_s: list[float] = []
    stages_s: StagesSummary | None = None
    step_s: StepSummary | None = None
    memory: MemoryResult | None = None
    throughput_images_per_s: float | None = None
    repro: ReproResult | None = None
    shapes: list[ShapeResult] = []
    warnings: list[Note] = []
    outputs_dir: str | None = None

    def with_primary(self) -> BenchResult:
        """Copy with the top-level result fields taken from the first shape that produced samples."""
        primary = next((s for s in self.shapes if s.latency_s is not None), None)
        notes = [w for s in self.shapes for w in s.warnings]
        if primary is None:
            return self.model_copy(update={"warnings": notes})
        return self.model_copy(
            update=dict(
                latency_s=primary.latency_s,
                warmup_s=primary.warmup_s,
                stages_s=primary.stages_s,
                step_s=primary.step_s,
                memory=primary.memory,
                throughput_images_per_s=primary.throughput_images_per_s,
                repro=primary.repro,
                warnings=notes,
            )
        )
