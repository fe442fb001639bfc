"""Typed, versioned results of ``diffbench bench`` (JSON schema version :data:`SCHEMA_VERSION`).

Durations are seconds, memory is bytes. ``summary`` has one headline row per shape (every shape of a
multi-shape run, failed ones with their error); the top-level ``latency_s``/``stages_s``/... fields
describe ``primary_shape``, the first shape that ran; ``shapes`` holds every shape in full.

Throughput is per device and counts what the model produces: ``throughput_images_per_s`` for image
models, ``throughput_videos_per_s`` and ``video_seconds_per_s`` (seconds of video generated per second
of wall time: videos/s × frames ÷ fps, with the fps and its source stated) for video models.

Energy (``shapes[].energy``, :class:`EnergyResult`): joules per output and average watts of the timed runs
where a counter is readable, else ``"not available"`` with the reason.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from diffbench.core.env import EnvInfo
from diffbench.core.stats import Summary

SCHEMA_VERSION = 1
REPRO_THRESHOLD_DB = 40.0


class Note(BaseModel):
    """A warning with a stable code (``no_warmup``, ``first_run_outlier``, ``percentile_unsupported``,
    ``unsynchronized``, ``not_reproducible``, ``shape_failed``, ``interrupted``, ``requests_failed``)."""

    code: str
    message: str


class StagesSummary(BaseModel):
    """Mean seconds per stage over the timed runs; ``other`` = end-to-end − the other stages per run, so
    the means add up exactly to the mean end-to-end time (means are additive, medians are not).
    ``image_encode`` is the VAE encode of an edit's input image (0 for text-to-image).
    ``median`` holds each stage's median for robustness against outliers."""

    text_encode: float
    image_encode: float = 0.0
    denoise: float
    vae_decode: float
    other: float
    end_to_end: float
    median: dict[str, float] = {}


class StepSummary(BaseModel):
    """Per-step statistics over every step of every timed run (seconds).

    ``per_step_median`` and ``per_step_p90`` have one entry per step index (over the timed runs; p90 by
    :func:`diffbench.core.stats.percentile`; empty in results written before it was recorded);
    ``denoiser_calls_per_step`` is 2 when CFG runs as two forwards; ``denoiser_batch`` is 2 × batch when CFG
    is batched into one forward.
    """

    median: float
    mean: float
    p90: float
    n: int
    steps_per_run: int
    per_step_median: list[float]
    per_step_p90: list[float] = []
    denoiser_calls_per_step: float
    denoiser_batch: int | None = None


class MemoryResult(BaseModel):
    """Peak memory (bytes) over the timed runs: CUDA allocated/reserved, or CPU resident-set growth.

    ``stage_peak_bytes``: the peak of each stage (``text_encode``, ``denoise``, ``vae_decode``, ``other``)
    over the timed runs, when the engine measures it per stage (the instrumented diffusers pipeline); empty
    otherwise (the simulator records only the overall peak and its stage).
    """

    kind: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    peak_stage: str | None
    stage_peak_bytes: dict[str, int] = {}


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


class CacheDecisions(BaseModel):
    """Step-cache decisions over the timed runs of one shape (``RequestSignals.cache`` summed): ``lookups``
    decisions taken, ``hits`` that skipped compute; ``hit_ratio`` = hits / lookups (0–1)."""

    cache: str
    lookups: int
    hits: int
    hit_ratio: float


class FailedRun(BaseModel):
    """One request of a remote engine that failed (``bench --engine http``): it is not in the samples.

    ``phase`` is ``warmup``, ``timed`` or ``output`` (an untimed request for ``--save-outputs`` or the
    reproducibility check); ``status`` the HTTP status (None for a transport error or a timeout);
    ``outcome`` the load client's name for what happened (``timeout``: no complete answer within the
    total deadline; ``connection_error``, ``rejected``, ``http_error``, ``invalid_payload``), None in records
    written before it was kept.
    """

    phase: str
    index: int
    status: int | None
    error: str
    outcome: str | None = None


class ServerStage(BaseModel):
    """A stage the server reported for every timed run (seconds): ``service_time``, ``queue_wait``,
    ``denoise``, ... as :func:`diffbench.load.client.dialects.server_timings` reads them."""

    median: float
    mean: float
    n: int


class EnergyResult(BaseModel):
    """Energy of a shape's timed runs, read from a counter around each run
    (:mod:`diffbench.engines.instrument.energy`): NVML on a CUDA device, RAPL package domains on the CPU.

    ``status`` is ``"not available"`` when no counter could be read, and ``reason`` says why; no figure is
    then given (never an estimate). ``joules`` and ``seconds`` sum the windows of the ``runs`` timed runs
    that were measured (each window from just before the run to just after its synchronization);
    ``joules_per_output`` = joules ÷ (runs × batch) (J per image or per video); ``average_watts`` = joules ÷
    seconds. ``scope`` says what the counter covers (a whole GPU board or CPU package: other processes on it
    count too)."""

    status: Literal["measured", "not available"]
    reason: str | None = None
    source: str | None = None
    scope: str | None = None
    joules: float | None = None
    seconds: float | None = None
    runs: int = 0
    outputs: int = 0
    joules_per_output: float | None = None
    average_watts: float | None = None

    def text(self, unit: str = "output") -> str:
        """One line for the console: ``12.3 J/image · 245 W average (nvml: GPU …)`` or ``not available: …``."""
        if self.status != "measured" or self.joules_per_output is None:
            return f"not available: {self.reason}"
        watts = f" · {self.average_watts:.3g} W average" if self.average_watts is not None else ""
        return f"{self.joules_per_output:.4g} J/{unit}{watts} over {self.runs} runs ({self.source}: {self.scope})"


class ShapeResult(BaseModel):
    """Everything measured at one shape (height, width, frames, steps, batch). ``cache`` holds the step-cache
    decisions when a cache is enabled and exposes them (``bench --cache``), else None.

    Remote engines (``--engine http``): ``failed_runs`` lists the requests that failed (only successes are
    samples); ``server_stages_s`` the stages the server reported on the timed runs; ``client_overhead_s`` the
    median of (client latency − the server's ``service_time``) per run: network, queueing, encoding and
    decoding outside the server's generation time (None when the server reports no ``service_time``).

    Edits (``bench --input-images``): ``edit`` is True, ``strength`` the share of the schedule re-noised,
    ``inpaint`` True with a mask, and ``steps_run`` the denoising steps that ran per run (counted by the
    engine's step hook: fewer than ``steps`` at strength < 1); ``steps_run`` is also set for text-to-image
    when the engine counts steps."""

    shape: str
    height: int
    width: int
    frames: int | None
    steps: int
    batch: int
    guidance: float | None
    edit: bool = False
    strength: float | None = None
    inpaint: bool = False
    steps_run: int | None = None
    error: str | None = None
    latency_s: Summary | None = None
    samples_s: list[float] = []
    warmup_s: list[float] = []
    stages_s: StagesSummary | None = None
    step_s: StepSummary | None = None
    memory: MemoryResult | None = None
    throughput_images_per_s: float | None = None
    throughput_videos_per_s: float | None = None
    video_seconds_per_s: float | None = None
    fps: float | None = None
    fps_source: str | None = None
    mpx_steps_per_s: float | None = None
    """Work-normalized throughput per device: outputs/s x width x height x (frames or 1) x steps / 1e6."""
    gpus: int | None = None
    """GPUs one run occupies (``bench --gpus``); None: not given."""
    mpx_steps_per_s_per_gpu: float | None = None
    """``mpx_steps_per_s / gpus``."""
    gpu_s_per_output: float | None = None
    """GPU·seconds per output: ``gpus / outputs per second`` (one GPU without ``--gpus``)."""
    gpu_hour_price: float | None = None
    """``bench --gpu-hour-price`` (per GPU-hour, currency-neutral)."""
    cost_per_1000: float | None = None
    """Cost of 1,000 outputs: ``gpu_hour_price x gpu_s_per_output x 1000 / 3600``."""
    repro: ReproResult | None = None
    sync_pending_s: float = 0.0
    cache: CacheDecisions | None = None
    failed_runs: list[FailedRun] = []
    server_stages_s: dict[str, ServerStage] = {}
    client_overhead_s: float | None = None
    energy: EnergyResult | None = None
    """Energy of the timed runs (None when the run did not read a counter, e.g. a Ray bench)."""
    warnings: list[Note] = []


class ShapeHeadline(BaseModel):
    """One row of the top-level summary: a shape's headline figures (seconds; throughput per device)."""

    shape: str
    n: int = 0
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None
    mean_s: float | None = None
    throughput: float | None = None
    throughput_unit: str = "images/s"
    video_seconds_per_s: float | None = None
    fps: float | None = None
    peak_memory_bytes: int | None = None
    error: str | None = None
    failed: int = 0

    @classmethod
    def of(cls, s: ShapeResult) -> ShapeHeadline:
        lat = s.latency_s
        video = s.frames is not None
        return cls(
            shape=s.shape,
            n=lat.n if lat else 0,
            p50_s=lat.p50 if lat else None,
            p90_s=lat.p90 if lat else None,
            p99_s=lat.p99 if lat else None,
            mean_s=lat.mean if lat else None,
            throughput=s.throughput_videos_per_s if video else s.throughput_images_per_s,
            throughput_unit="videos/s" if video else "images/s",
            video_seconds_per_s=s.video_seconds_per_s,
            fps=s.fps,
            peak_memory_bytes=s.memory.peak_allocated_bytes if s.memory else None,
            error=s.error,
            failed=len([f for f in s.failed_runs if f.phase == "timed"]),
        )


class Conditions(BaseModel):
    """The field's minimal report conditions block. ``shape`` is the first shape; ``shapes`` all of them."""

    model: str
    model_hash: str | None
    pipeline: str | None
    shape: str
    shapes: list[str] = []
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
    seeds: list[int] = []  # the workload's seeds (each prompt runs with each seed)
    prompts: int | None = None  # distinct prompts in the workload
    # Edits (bench --input-images); None for text-to-image, so older manifests compare equal in `quality`.
    strength: float | None = None  # share of the schedule an edit re-noises
    input_images: int | None = None  # distinct input pictures
    inpaint: bool | None = None  # True when masks were given
    # Deployment options outside the original fingerprint; None when not used (as in older results).
    quantization: str | None = None  # quantized linear layers: int8-dynamic | fp8
    fused_projections: bool | None = None  # True when the QKV projections are fused


class Protocol(BaseModel):
    """How the numbers were taken."""

    warmup_per_shape: int | None  # None with --warmup auto (each shape's count is len(warmup_s))
    warmup_auto: bool = False
    max_warmup: int | None = None  # the cap of --warmup auto
    runs_per_shape: int
    synchronized: bool
    percentile_method: str
    clock: str = "time.perf_counter_ns (monotonic); device synchronized before every read"


class WorkerInfo(BaseModel):
    """One actor of a distributed bench (``bench --ray``): where it ran and what it did.

    ``device_class`` is what its timings are pooled by (GPU name and driver, or the CPU model); ``tasks`` counts
    the tasks it finished in this run; ``warmup_s`` its warmup times per shape label (seconds); ``nice`` its
    process's nice value (Ray's default for workers is 15: see :mod:`diffbench.distributed.cluster`)."""

    index: int
    node_ip: str
    pid: int
    device: str
    device_class: str
    driver: str | None = None
    threads: int | None = None
    nice: int | None = None
    tasks: int = 0
    warmup_s: dict[str, list[float]] = {}


class ColdStart(BaseModel):
    """What the run paid before its first output, apart from the warm statistics (seconds). It is what an
    autoscaler pays for each new replica; warmups are excluded from every statistic, so this is the only
    place a run reports it.

    ``process_to_ready_s``: from the process's start (its kernel start time, read through psutil; resolution
    one clock tick, 10 ms on Linux) to the engine ready: interpreter start, imports (torch, diffusers) and
    ``engine_start_s``. ``engine_start_s``: the engine's ``start()`` alone, timed with ``perf_counter``:
    for ``diffusers`` loading the weights from disk and placing them on the device (and wrapping
    ``torch.compile``, which compiles later, at the first call); for ``http`` the service check (the service
    loaded its weights long before); for ``sim`` nothing to load. ``first_call_s``: the first generation
    after start, on the engine's clock (compile, autotuning, memory-pool growth, first-shape caches); it is
    the first warmup of ``first_shape``, or its first timed run with ``--warmup 0`` (``first_call_phase``).
    ``first_shape_warmup_s``: all warmups of the first shape summed (None without warmups); ``warm_p50_s``
    that shape's warm p50, for the ratio. ``to_first_output_s`` = ``process_to_ready_s`` + ``first_call_s``
    (the milliseconds between them — building the request list — are left out).
    """

    process_to_ready_s: float | None = None
    engine_start_s: float
    first_call_s: float | None = None
    first_call_phase: str | None = None
    first_shape: str | None = None
    first_shape_warmup_s: float | None = None
    warm_p50_s: float | None = None
    to_first_output_s: float | None = None


class DistributedRun(BaseModel):
    """How a distributed bench ran: the Ray cluster, the actors, and the tasks (one timed run or one untimed
    output each, with a deterministic id). ``resumed`` tasks were finished by an earlier run of the same command
    (their record and output files checked by sha256) and were not redone; their timings are in the statistics.
    ``repro_across_actors``: each shape's reproducibility check regenerated its first output on another actor
    than the one that made it."""

    address: str
    ray_version: str
    nodes: int
    actors: list[WorkerInfo] = []
    tasks: int = 0
    resumed: int = 0
    done_now: int = 0
    not_done: int = 0
    repro_across_actors: bool = False


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
    throughput_videos_per_s: float | None = None
    video_seconds_per_s: float | None = None
    fps: float | None = None
    repro: ReproResult | None = None
    primary_shape: str | None = None
    summary: list[ShapeHeadline] = []
    shapes: list[ShapeResult] = []
    warnings: list[Note] = []
    outputs_dir: str | None = None
    distributed: DistributedRun | None = None  # bench --ray: the cluster, actors and tasks
    cold_start: ColdStart | None = None  # None for a result written before cold starts were measured

    def with_primary(self) -> BenchResult:
        """Copy with the per-shape summary, and the top-level result fields taken from the first shape that
        produced samples (named in ``primary_shape``)."""
        primary = next((s for s in self.shapes if s.latency_s is not None), None)
        notes = [w for s in self.shapes for w in s.warnings]
        summary = [ShapeHeadline.of(s) for s in self.shapes]
        if primary is None:  # nothing timed yet (e.g. interrupted in warmup): show the warmups that ran
            warm = next((s for s in self.shapes if s.warmup_s), None)
            return self.model_copy(update={"warnings": notes, "summary": summary,
                                           "warmup_s": list(warm.warmup_s) if warm else [],
                                           "primary_shape": warm.shape if warm else None})
        return self.model_copy(
            update=dict(
                latency_s=primary.latency_s,
                warmup_s=primary.warmup_s,
                stages_s=primary.stages_s,
                step_s=primary.step_s,
                memory=primary.memory,
                throughput_images_per_s=primary.throughput_images_per_s,
                throughput_videos_per_s=primary.throughput_videos_per_s,
                video_seconds_per_s=primary.video_seconds_per_s,
                fps=primary.fps,
                repro=primary.repro,
                primary_shape=primary.shape,
                summary=summary,
                warnings=notes,
            )
        )
