"""The measurement protocol of ``diffbench bench``.

For each distinct shape (height, width, frames, steps, batch) of the workload:

1. **Warmup**: ``warmup`` untimed-for-statistics runs with the real prompts at that shape (the first call
   compiles, autotunes and grows the memory pool); their times are kept apart in ``warmup_s``. With
   ``warmup_auto``, warmup runs until the warm-until-stable test (diffbench.core.warmth) passes
   (:func:`diffbench.core.warmth.is_warm`: the last 5 show no significant downward trend), at most
   ``max_warmup`` runs (a ``warmup_not_stable`` note when the cap is hit).
2. **Timed runs**: ``runs`` generations cycling through the workload's prompts × seeds. The device is
   synchronized before every clock read (:class:`~diffbench.core.clock.Timer`). After each run the
   protocol checks that no device work was still pending at the end-time read; pending work means the
   launch was timed, not the work, and the result is marked invalid.
   Energy: a counter (NVML on a CUDA device, RAPL on the CPU; :mod:`diffbench.engines.instrument.energy`) is
   read just before each timed run and just after its final synchronization, outside the clock reads; the shape
   reports joules per output and average watts, or "not available" with the reason.
3. **Reproducibility**: the first request is generated once more and compared with its first output
   (PSNR, dB); below 40 dB the shape is flagged "not reproducible".

A failure (out of memory, an exception) at one shape is recorded with the shape and the run goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from diffbench.bench.progress import RunEvent
from diffbench.bench.result import (
    REPRO_THRESHOLD_DB,
    CacheDecisions,
    EnergyResult,
    FailedRun,
    MemoryResult,
    Note,
    ReproResult,
    ServerStage,
    ShapeResult,
    StagesSummary,
    StepSummary,
)
from diffbench.bench.stability import timing_notes
from diffbench.core.clock import Timer, no_sync
from diffbench.core.psnr import psnr_uint8
from diffbench.core.stats import percentile, percentile_warnings, summarize
from diffbench.core.warmth import DEFAULT_WINDOW, FIRST_RUN_OUTLIER, is_warm
from diffbench.engines.base import CLIENT_LATENCY, Engine, GenerationRequest, GenerationResult, RequestFailed
from diffbench.engines.instrument.energy import EnergyMeter, EnergyTally, meter_for
from diffbench.errors import GenerationError

UNSYNC_TOLERANCE = 0.05  # pending work > 5 % of the measured time at the end read -> unsynchronized
MAX_CONSECUTIVE_FAILURES = 3
"""A remote engine's shape is abandoned after this many failed requests in a row (a dead service fails fast
instead of once per planned run); isolated failures are recorded and the runs go on."""


class BenchConfig(BaseModel):
    """Protocol settings.

    ``warmup`` and ``runs`` are per shape. ``sync=False`` exists only to demonstrate the mistake: the
    protocol then detects pending device work and marks the result invalid.
    """

    warmup: int = Field(default=2, ge=0)
    warmup_auto: bool = False  # warm until core.warmth.is_warm (last 5 runs, no downward trend), <= max_warmup
    max_warmup: int = Field(default=20, ge=1)
    runs: int = Field(default=100, ge=1)
    sync: bool = True
    repro: bool = True
    percentiles: tuple[float, ...] = (90, 99)
    generator_device: Literal["cpu", "cuda"] = "cpu"
    fps: float | None = Field(default=None, gt=0, description="video playback fps; None: the engine's")
    gpus: int | None = Field(default=None, ge=1, description="GPUs one run occupies (bench --gpus); None: "
                             "unknown, no per-GPU figure")
    gpu_hour_price: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                         description="price per GPU-hour (bench --gpu-hour-price)")


OutputSink = Callable[[GenerationRequest, np.ndarray], None]
Progress = Callable[[list[ShapeResult]], None]
RunProgress = Callable[[RunEvent], None]


def work_cost(r: ShapeResult, outputs_per_s: float, cfg: BenchConfig) -> None:
    """Set ``r``'s work-normalized throughput and cost from its outputs per second (per device, the mean of
    the timed runs): ``mpx_steps_per_s`` = outputs/s x width x height x (frames or 1) x steps / 1e6 (the
    steps asked for); with ``cfg.gpus``, ``mpx_steps_per_s_per_gpu`` = that / gpus and ``gpu_s_per_output``
    = gpus / outputs/s (the GPUs one run occupies, paid for the whole run); with ``cfg.gpu_hour_price``,
    ``cost_per_1000`` = price x gpu_s_per_output x 1000 / 3600 (one GPU when ``gpus`` is not given: the
    bench measures one device)."""
    from diffbench.core.workcost import cost_per_1000, mpx_steps

    r.mpx_steps_per_s = outputs_per_s * mpx_steps(r.width, r.height, r.steps, r.frames)
    if cfg.gpus is not None:
        r.gpus = cfg.gpus
        r.mpx_steps_per_s_per_gpu = r.mpx_steps_per_s / cfg.gpus
    if cfg.gpus is not None or cfg.gpu_hour_price is not None:
        r.gpu_s_per_output = (cfg.gpus or 1) / outputs_per_s
    if cfg.gpu_hour_price is not None and r.gpu_s_per_output is not None:
        r.gpu_hour_price = cfg.gpu_hour_price
        r.cost_per_1000 = cost_per_1000(cfg.gpu_hour_price, r.gpu_s_per_output)


def group_by_shape(requests: Sequence[GenerationRequest]) -> list[list[GenerationRequest]]:
    """Group requests by :attr:`~GenerationRequest.warmup_key` (shape, batch, CFG on/off, negative prompt,
    edit flag, mask flag, strength, adapter), keeping first-appearance order of shapes and of requests."""
    groups: dict[object, list[GenerationRequest]] = {}
    for r in requests:
        groups.setdefault(r.warmup_key, []).append(r)
    return list(groups.values())


def shape_label(request: GenerationRequest) -> str:
    """The bench label of ``request``'s group: :meth:`GenerationRequest.shape_label`, plus ``edit@S`` for an
    edit at strength S (``inpaint@S`` with a mask), e.g. ``256x256 s8 b1 edit@0.6``."""
    label = request.shape_label()
    if request.is_edit:
        label += f" {'inpaint' if request.mask is not None else 'edit'}@{request.strength:g}"
    return label


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64))) if values else math.nan


class ShapeRun:
    """Accumulates one shape's measurements (picklable; :meth:`finish` gives the shape's result)."""

    def __init__(self, first: GenerationRequest) -> None:
        self.result = ShapeResult(
            shape=shape_label(first),
            height=first.height,
            width=first.width,
            frames=first.frames,
            steps=first.steps,
            batch=first.batch,
            guidance=first.guidance,
            edit=first.is_edit,
            strength=first.strength if first.is_edit else None,
            inpaint=first.is_edit and first.mask is not None,
        )
        self.stage_rows: list[tuple[float, float, float, float, float]] = []  # enc, img, den, dec, e2e
        self.steps: list[list[float]] = []
        self.calls: list[int] = []
        self.denoiser_batch: int | None = None
        self.mem_alloc: int | None = None
        self.mem_reserved: int | None = None
        self.mem_stage: str | None = None
        self.mem_kind = "none"
        self.mem_by_stage: dict[str, int] = {}  # stage -> peak bytes over the timed runs (RequestSignals)
        self.pending: list[float] = []
        self.cache: tuple[str, int, int] | None = None  # (name, lookups, hits) over the timed runs
        self.server: dict[str, list[float]] = {}  # server-reported stage -> seconds per timed run
        self.overhead: list[float] = []  # client latency - server service_time, per timed run
        self.energy: EnergyTally | None = None  # the counter read around each timed run (None: not read)

    def add(self, e2e: float, res: GenerationResult, pending: float) -> None:
        self.result.samples_s.append(e2e)
        self.pending.append(pending)
        st = res.stages
        if st is not None:
            self.stage_rows.append((st.text_encode_s, st.image_encode_s, st.denoise_s, st.vae_decode_s, e2e))
            if st.step_s:
                self.steps.append(list(st.step_s))
            self.calls.append(st.denoiser_calls)
        for key, value in res.extra.items():
            if key.startswith("server_") and key.endswith("_s"):
                self.server.setdefault(key[7:-2], []).append(float(value))
        if "server_service_time_s" in res.extra:
            self.overhead.append(e2e - float(res.extra["server_service_time_s"]))
        if "denoiser_batch" in res.extra:
            self.denoiser_batch = int(res.extra["denoiser_batch"])
        c = res.signals.cache if res.signals is not None else None
        if res.signals is not None:
            for stage, peak in res.signals.stage_peak_bytes.items():
                self.mem_by_stage[stage] = max(self.mem_by_stage.get(stage, 0), int(peak))
        if c is not None:
            _, lookups, hits = self.cache or (c.cache, 0, 0)
            self.cache = (c.cache, lookups + c.lookups, hits + c.hits)
        m = res.memory
        if m is not None and m.kind != "none":
            self.mem_kind = m.kind
            if m.peak_allocated_bytes is not None and (
                self.mem_alloc is None or m.peak_allocated_bytes > self.mem_alloc
            ):
                self.mem_alloc, self.mem_stage = m.peak_allocated_bytes, m.peak_stage
            if m.peak_reserved_bytes is not None:
                self.mem_reserved = max(self.mem_reserved or 0, m.peak_reserved_bytes)

    def finish(self, cfg: BenchConfig) -> ShapeResult:
        r = self.result
        samples = r.samples_s
        if not samples:
            if r.error is None and r.failed_runs:  # fewer failures than abandon a shape, but not one sample
                last = r.failed_runs[-1]
                r.error = (f"all {len(r.failed_runs)} request(s) failed"
                           + (f" ({last.outcome})" if last.outcome else "") + f"; last: {last.error}")
            return r
        r.latency_s = summarize(samples, check=cfg.percentiles)
        if self.stage_rows:
            enc, img, den, dec, e2e = (list(col) for col in zip(*self.stage_rows, strict=True))
            others = [t - a - i - b - c for a, i, b, c, t in self.stage_rows]

            def mean(xs: list[float]) -> float:
                return float(np.mean(xs))

            r.stages_s = StagesSummary(
                text_encode=mean(enc),
                image_encode=mean(img),
                denoise=mean(den),
                vae_decode=mean(dec),
                other=mean(others),
                end_to_end=mean(e2e),
                median={
                    "text_encode": _median(enc),
                    "image_encode": _median(img),
                    "denoise": _median(den),
                    "vae_decode": _median(dec),
                    "other": _median(others),
                    "end_to_end": _median(e2e),
                },
            )
        if self.steps:
            flat = [s for run in self.steps for s in run]
            width = min(len(run) for run in self.steps)
            per_step = [_median([run[i] for run in self.steps]) for i in range(width)]
            per_step_p90 = [percentile([run[i] for run in self.steps], 90) for i in range(width)]
            r.step_s = StepSummary(
                median=_median(flat),
                mean=float(np.mean(flat)),
                p90=float(np.percentile(flat, 90)),
                n=len(flat),
                steps_per_run=width,
                per_step_median=per_step,
                per_step_p90=per_step_p90,
                denoiser_calls_per_step=float(np.mean(self.calls)) / max(width, 1),
                denoiser_batch=self.denoiser_batch,
            )
            r.steps_run = width
        if self.cache is not None and self.cache[1] > 0:
            name, lookups, hits = self.cache
            r.cache = CacheDecisions(cache=name, lookups=lookups, hits=hits, hit_ratio=hits / lookups)
        r.server_stages_s = {k: ServerStage(median=_median(v), mean=float(np.mean(v)), n=len(v))
                             for k, v in self.server.items()}
        r.client_overhead_s = _median(self.overhead) if self.overhead else None
        r.memory = MemoryResult(
            kind=self.mem_kind,
            peak_allocated_bytes=self.mem_alloc,
            peak_reserved_bytes=self.mem_reserved,
            peak_stage=self.mem_stage,
            stage_peak_bytes=dict(self.mem_by_stage),
        )
        per_call = r.batch / float(np.mean(samples))  # outputs per second per device (mean of the runs)
        if r.frames is None:
            r.throughput_images_per_s = per_call
        else:
            r.throughput_videos_per_s = per_call
            if r.fps:
                r.video_seconds_per_s = per_call * r.frames / r.fps
        work_cost(r, per_call, cfg)
        r.sync_pending_s = max(self.pending) if self.pending else 0.0
        if self.energy is not None:
            r.energy = energy_result(self.energy, r.batch)
        notes = list(r.warnings)
        if cfg.warmup == 0 and not cfg.warmup_auto:
            notes.append(
                Note(
                    code="no_warmup",
                    message=(
                        f"{r.shape}: no warmup: the first call (compilation, autotuning, memory-pool growth) is inside "
                        f"the statistics; mean {r.latency_s.mean:.4g} s vs median {r.latency_s.p50:.4g} s"
                    ),
                )
            )
        if len(samples) >= 3:
            rest = _median(samples[1:])
            if rest > 0 and samples[0] > FIRST_RUN_OUTLIER * rest:
                notes.append(
                    Note(
                        code="first_run_outlier",
                        message=(
                            f"{r.shape}: the first timed run took {samples[0]:.4g} s, {samples[0] / rest:.1f}x the median "
                            "of the others: it most likely carried a compile or warmup; raise --warmup"
                        ),
                    )
                )
        notes += timing_notes(r.shape, samples, r.warmup_s)
        timed_failures = [f for f in r.failed_runs if f.phase == "timed"]
        if timed_failures:
            notes.append(Note(code="requests_failed", message=(
                f"{r.shape}: {len(timed_failures)} of {len(timed_failures) + len(samples)} timed requests failed "
                f"(not in the statistics); first: {timed_failures[0].error}")))
        for msg in percentile_warnings(len(samples), cfg.percentiles):
            notes.append(Note(code="percentile_unsupported", message=f"{r.shape}: {msg}"))
        if r.repro is not None and r.repro.reproducible is False:
            notes.append(
                Note(
                    code="not_reproducible",
                    message=(
                        f"{r.shape}: not reproducible: the same request twice gave PSNR {r.repro.psnr_db:.1f} dB "
                        f"(< {REPRO_THRESHOLD_DB:g} dB)"
                    ),
                )
            )
        r.warnings = notes
        return r


def energy_result(tally: EnergyTally, batch: int) -> EnergyResult:
    """The :class:`EnergyResult` of a shape's timed runs: measured when every timed run's window was read
    (``batch`` outputs per run), else ``not available`` with the first reason."""
    if tally.unavailable is not None or tally.windows == 0:
        reason = tally.unavailable.reason if tally.unavailable is not None else "no timed run finished"
        return EnergyResult(status="not available", reason=reason, source=tally.meter.source)
    outputs = tally.windows * batch
    return EnergyResult(
        status="measured", source=tally.meter.source, scope=tally.meter.scope, joules=tally.joules,
        seconds=tally.seconds, runs=tally.windows, outputs=outputs, joules_per_output=tally.joules / outputs,
        average_watts=tally.joules / tally.seconds if tally.seconds > 0 else None,
    )


def run_bench(
    engine: Engine,
    requests: Sequence[GenerationRequest],
    config: BenchConfig,
    *,
    timer: Timer | None = None,
    on_output: OutputSink | None = None,
    on_progress: Progress | None = None,
    on_run: RunProgress | None = None,
    energy: EnergyMeter | None = None,
) -> list[ShapeResult]:
    """Run the protocol over ``requests`` (any mix of shapes) and return one result per shape.

    Args:
        engine: a started engine.
        requests: the workload (prompts × seeds × shapes); shapes are measured in order of appearance.
        config: warmup and runs per shape, sync, repro.
        timer: clock + sync; defaults to the engine's clock, synchronized with ``engine.sync``
            (or unsynchronized when ``config.sync`` is False).
        on_output: called with the first output of each distinct request (for ``--save-outputs``).
        on_progress: called with the shapes so far after every timed run (for streaming the JSON).
        on_run: called with a :class:`~diffbench.bench.progress.RunEvent` after every warmup and timed run,
            after its clock reads (the live progress line; it must be cheap, it runs between runs).
        energy: the energy counter read around each timed run, outside its clock reads; default
            :func:`~diffbench.engines.instrument.energy.meter_for` the engine's device (NVML on CUDA, RAPL on
            the CPU, none for a remote or simulated engine: the shape's ``energy`` then says why).

    Raises:
        ShapeError: a request the model cannot take (checked for all shapes before anything runs).
    """
    for r in requests:
        engine.validate(r)
    info = engine.info()
    fps, fps_source = (config.fps, "--fps") if config.fps else (info.fps, info.fps_source)
    if timer is None:
        timer = Timer(sync=engine.sync if config.sync else no_sync, clock=engine.clock)
    meter = energy if energy is not None else meter_for(info.engine, info.device)
    done: list[ShapeResult] = []
    groups = group_by_shape(requests)
    for index, group in enumerate(groups):
        run = ShapeRun(group[0])
        run.energy = EnergyTally(meter)
        if run.result.frames is not None:
            run.result.fps, run.result.fps_source = fps, fps_source
        try:
            _run_shape(
                engine,
                group,
                config,
                timer,
                run,
                on_output,
                lambda current=run: on_progress(done + [current.result]) if on_progress else None,
                _emitter(on_run, run.result.shape, index, len(groups), config),
            )
        except GenerationError as exc:
            run.result.error = str(exc)
            run.result.warnings.append(Note(code="shape_failed", message=f"{run.result.shape}: {exc}"))
        except KeyboardInterrupt:
            done.append(run.finish(config))
            if on_progress:
                on_progress(done)
            raise
        done.append(run.finish(config))
        if on_progress:
            on_progress(done)
    return done


_Emit = Callable[[str, int, float, Sequence[float]], None]


def _emitter(on_run: RunProgress | None, shape: str, index: int, shapes: int, cfg: BenchConfig) -> _Emit:
    """A cheap ``emit(phase, done, last_s, samples)`` that builds a RunEvent only when someone listens."""

    def emit(phase: str, done: int, last_s: float, samples: Sequence[float]) -> None:
        if on_run is None:
            return
        warm = phase == "warmup"
        total = (None if cfg.warmup_auto else cfg.warmup) if warm else cfg.runs
        on_run(RunEvent(shape=shape, shape_index=index, shapes=shapes, phase="warmup" if warm else "timed",
                        done=done, total=total, last_s=last_s, samples_s=samples,
                        max_total=cfg.max_warmup if warm and cfg.warmup_auto else None))

    return emit


Attempt = Callable[[str, int, GenerationRequest], GenerationResult | None]


def make_attempt(engine: Engine, result: ShapeResult) -> Attempt:
    """``attempt(phase, index, request)``: ``engine.generate``; a remote engine's failed request is recorded in
    ``result.failed_runs`` and gives None.

    Raises:
        GenerationError: after :data:`MAX_CONSECUTIVE_FAILURES` failed requests in a row (the shape is abandoned).
    """
    failures = [0]  # consecutive failed requests of a remote engine

    def attempt(phase: str, index: int, req: GenerationRequest) -> GenerationResult | None:
        try:
            res = engine.generate(req)
        except RequestFailed as exc:
            result.failed_runs.append(FailedRun(phase=phase, index=index, status=exc.status, error=str(exc),
                                                outcome=exc.outcome))
            failures[0] += 1
            if failures[0] >= MAX_CONSECUTIVE_FAILURES:
                raise GenerationError(
                    f"{failures[0]} requests in a row failed, the shape is abandoned; last: {exc}") from None
            return None
        failures[0] = 0
        return res

    return attempt


def _seconds(res: GenerationResult, t0: int, t1: int) -> float:
    """The run's latency: the engine's own client latency when it reports one, else the clock reads (s)."""
    own = res.extra.get(CLIENT_LATENCY)
    return float(own) if own is not None else (t1 - t0) / 1e9


def warm_up(attempt: Attempt, timer: Timer, group: Sequence[GenerationRequest], cfg: BenchConfig,
            result: ShapeResult, emit: _Emit | None = None) -> None:
    """The warmup of one shape: ``cfg.warmup`` runs cycling through ``group`` (or, with ``warmup_auto``, until
    :func:`~diffbench.core.warmth.is_warm`, at most ``max_warmup``); their times (seconds) are appended to
    ``result.warmup_s`` and a ``warmup_not_stable`` note is added when the auto warmup hits its cap."""
    i = 0
    while (not is_warm(result.warmup_s) and i < cfg.max_warmup) if cfg.warmup_auto else i < cfg.warmup:
        t0 = timer.now_ns()
        warm = attempt("warmup", i, group[i % len(group)])
        t1 = timer.now_ns()
        i += 1
        if warm is None:
            continue
        result.warmup_s.append(_seconds(warm, t0, t1))
        if emit:
            emit("warmup", i, result.warmup_s[-1], ())
    if cfg.warmup_auto and not is_warm(result.warmup_s):
        w = result.warmup_s
        k = min(len(w), DEFAULT_WINDOW)
        result.warnings.append(Note(code="warmup_not_stable", message=(
            f"{result.shape}: still getting faster after {len(w)} warmup runs ({w[-k]:.4g} s -> "
            f"{w[-1]:.4g} s over the last {k}): the timed runs may carry the end of a cold start; "
            f"raise --max-warmup (the warm test needs at least {DEFAULT_WINDOW} runs)") if w else (
            f"{result.shape}: no warmup run finished; raise --max-warmup")))


def timed_run(attempt: Attempt, engine: Engine, timer: Timer, index: int, req: GenerationRequest
              ) -> tuple[float, GenerationResult, float] | None:
    """One timed run: ``(e2e seconds, result, pending seconds)``, None when a remote request failed.

    The device is synchronized at both clock reads (``timer``); afterwards the engine is synchronized once more
    and the device time still pending after the end read is returned (pending work means the launch was timed).
    """
    t0 = timer.now_ns()
    got = attempt("timed", index, req)
    t1 = timer.now_ns()
    if got is None:
        return None
    engine.sync()  # protocol guard: was device work still pending at the end read?
    pending = max(0.0, (engine.clock() - t1) / 1e9)
    return _seconds(got, t0, t1), got, pending


def add_timed(run: ShapeRun, e2e: float, res: GenerationResult, pending: float) -> None:
    """Add one timed run to a shape's accumulator, with the ``unsynchronized`` note when work was pending."""
    run.add(e2e, res, pending)
    if pending > max(UNSYNC_TOLERANCE * e2e, 1e-3) and not any(
        w.code == "unsynchronized" for w in run.result.warnings
    ):
        run.result.warnings.append(
            Note(
                code="unsynchronized",
                message=(
                    f"{run.result.shape}: device work was still pending {pending:.4g} s after the end-time read "
                    f"of a {e2e:.4g} s measurement: this timed the launch, not the generation. Synchronize the "
                    "device before reading the clock (drop --no-sync)"
                ),
            )
        )


def _run_shape(
    engine: Engine,
    group: list[GenerationRequest],
    cfg: BenchConfig,
    timer: Timer,
    run: ShapeRun,
    on_output: OutputSink | None,
    progress: Callable[[], None],
    emit: _Emit,
) -> None:
    attempt = make_attempt(engine, run.result)
    warm_up(attempt, timer, group, cfg, run.result, emit)
    first_images: dict[tuple[str, int], np.ndarray] = {}
    seen: set[tuple[str, int]] = set()
    for i in range(cfg.runs):
        req = group[i % len(group)]
        mark = run.energy.begin() if run.energy is not None else None
        timed = timed_run(attempt, engine, timer, i, req)
        if timed is None:
            continue
        if run.energy is not None and mark is not None:  # read after the run's final synchronization
            run.energy.end(mark)
        e2e, res, pending = timed
        add_timed(run, e2e, res, pending)
        key = (req.prompt_id, req.seed)
        if key not in seen and res.images is not None:
            seen.add(key)
            if cfg.repro and not first_images:
                first_images[key] = res.images.copy()
            if on_output:
                on_output(req, res.images)
        progress()
        emit("timed", i + 1, e2e, run.result.samples_s)
    if on_output:  # every request of the workload gets a saved output, even if runs < len(workload)
        for req in group:
            if (req.prompt_id, req.seed) not in seen:
                seen.add((req.prompt_id, req.seed))
                extra = attempt("output", 0, req)
                engine.sync()
                if extra is not None and extra.images is not None:
                    on_output(req, extra.images)
    if cfg.repro and first_images:
        (pid, seed), ref = next(iter(first_images.items()))
        req = next(r for r in group if (r.prompt_id, r.seed) == (pid, seed))
        again = attempt("output", 0, req)
        engine.sync()
        psnr = psnr_uint8(ref, again.images) if again is not None and again.images is not None else None
        run.result.repro = repro_result(engine, cfg, pid, seed, psnr)


def repro_result(engine: Engine, cfg: BenchConfig, prompt_id: str, seed: int, psnr: float | None) -> ReproResult:
    """The reproducibility check's result: PSNR (dB) of the same request generated twice, with the engine
    settings that decide bitwise reproducibility (threads, attention backend, deterministic algorithms)."""
    info = engine.info()
    return ReproResult(
        psnr_db=psnr,
        reproducible=None if psnr is None else psnr >= REPRO_THRESHOLD_DB,
        prompt_id=prompt_id,
        seed=seed,
        generator_device=cfg.generator_device,
        threads=int(info.details.get("threads", 0)) or None,
        attention_backend=info.attention_backend,
        deterministic_algorithms={"True": True, "False": False}.get(
            info.details.get("deterministic_algorithms", "")
        ),
    )
