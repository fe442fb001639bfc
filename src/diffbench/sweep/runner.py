"""One sweep: baseline (measured or stored) → noise floor → one point per value → working point.

Every run goes to the store as it finishes (status ``done``); an interrupted sweep leaves its finished
points there, and rerunning the same command resumes: points are keyed by (sweep id, value, fingerprint
hash) and are not recomputed. The sweep id hashes the model, shape, steps, prompts, seeds, protocol and the
deployment fingerprint without the swept field, so any change to those starts a new sweep.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from diffbench.bench.outputs import OutputWriter
from diffbench.bench.protocol import BenchConfig, run_bench
from diffbench.bench.result import Conditions
from diffbench.bench.session import IMAGE_DEFAULT, VIDEO_DEFAULT, BenchOptions, Shape, build_workload
from diffbench.core.env import EnvInfo, capture_env
from diffbench.core.fingerprint import deployment_fingerprint
from diffbench.core.jsonio import strict_json_value
from diffbench.core.stats import summarize
from diffbench.engines.base import Engine, EngineInfo, GenerationRequest
from diffbench.engines.registry import EngineConfig, create_engine
from diffbench.errors import InputError, UsageError
from diffbench.store.models import RunQuality, RunRecord, RunTiming, SweepRecord, fingerprint_hash
from diffbench.store.runs import RunStore, new_run_id
from diffbench.sweep.axes import AXIS_FIELD, CACHE_AXES, describe_cache
from diffbench.sweep.bootstrap import speedup_ci
from diffbench.sweep.compare import check_fingerprints
from diffbench.sweep.engine import CachedEngine
from diffbench.sweep.models import (
    TINY_DEFAULTS,
    TINY_PROMPTS,
    TINY_RUNS,
    PointResult,
    RunRef,
    SweepOptions,
    SweepResult,
)
from diffbench.sweep.pairs import Images, add_images, compare_images, image_key, load_images
from diffbench.sweep.working_point import choose, default_gates, gate_rows

Event = Callable[[str], None]
EngineFactory = Callable[[EngineConfig], Engine]


def _quiet(_: str) -> None:
    return None


def requests_for(opts: SweepOptions, info: EngineInfo) -> list[GenerationRequest]:
    """Prompts × seeds at the sweep's one shape (tiny models: :data:`TINY_DEFAULTS`)."""
    dh, dw, df, ds = TINY_DEFAULTS.get(opts.engine.model, VIDEO_DEFAULT if info.is_video else IMAGE_DEFAULT)
    bopts = BenchOptions(
        engine=opts.engine,
        shapes=[Shape(height=opts.height or dh, width=opts.width or dw, frames=opts.frames or df)],
        steps=opts.steps or ds,
        guidance=opts.guidance,
        prompts_file=opts.prompts_file,
        num_prompts=opts.num_prompts or (TINY_PROMPTS if opts.engine.model in TINY_DEFAULTS else None) or 20,
        seeds=opts.seeds,
    )
    reqs = build_workload(bopts, info)
    if not info.is_video:
        reqs = [r.model_copy(update={"frames": None}) for r in reqs]
    return reqs


def timed_runs(opts: SweepOptions, reqs: list[GenerationRequest]) -> int:
    """``opts.runs``, else 12 for tiny models and one per request (prompts x seeds) otherwise."""
    if opts.runs is not None:
        return opts.runs
    return TINY_RUNS if opts.engine.model in TINY_DEFAULTS else max(len(reqs), 2)


def conditions_for(info: EngineInfo, req: GenerationRequest, env: EnvInfo) -> Conditions:
    """The minimal report conditions of ``info`` at ``req``'s shape."""
    hw = ", ".join(g.name for g in env.gpus) if info.device.startswith("cuda") else env.cpu
    return Conditions(
        model=info.model, model_hash=info.model_hash, pipeline=info.pipeline_class, shape=req.shape_label(),
        steps=req.steps, cfg=info.cfg, guidance=req.guidance, batch=req.batch, engine=info.engine,
        engine_version=info.engine_version, attention_backend=info.attention_backend,
        parallelism=info.parallelism, precision=info.dtype, cache=info.cache, compile=info.compile,
        device=info.device, hardware=hw, driver=env.driver, cuda=env.cuda,
    )


def sweep_identity(opts: SweepOptions, fp: dict[str, object], field: str, reqs: list[GenerationRequest]) -> str:
    """sha256 (16 hex) of what makes points comparable (everything but the values)."""
    data = {
        "axis": opts.axis,
        "fingerprint": fingerprint_hash(fp, ignore=(field,)),
        "requests": [(r.prompt_id, r.prompt, r.seed, r.shape_key, r.guidance) for r in reqs],
        "protocol": (opts.warmup, timed_runs(opts, reqs)),
        "baseline_run": opts.baseline_run,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _Sweep:
    """State of one sweep run; see :func:`run_sweep`."""

    def __init__(self, opts: SweepOptions, store: RunStore, factory: EngineFactory, event: Event) -> None:
        self.opts, self.store, self.factory, self.event = opts, store, factory, event
        self.field = AXIS_FIELD[opts.axis]
        self.is_cache = opts.axis in CACHE_AXES
        self.env = capture_env()
        self.gates = list(opts.gates) or default_gates(opts.budget_db)
        self.forced_diff: list[str] = []

    # -- measuring ----------------------------------------------------------------------------
    def _measure(self, engine: Engine, reqs: list[GenerationRequest], out_dir: Path, cond: Conditions,
                 fp: dict[str, object]) -> tuple[RunTiming, Images]:
        writer = OutputWriter(out_dir, cond.model_dump(mode="json"), fp)
        images: Images = {}

        def sink(req: GenerationRequest, arr: object) -> None:
            add_images(images, req, arr)  # type: ignore[arg-type]
            writer(req, arr)  # type: ignore[arg-type]

        runs = timed_runs(self.opts, reqs)
        cfg = BenchConfig(warmup=self.opts.warmup, runs=runs, repro=False)
        shapes = run_bench(engine, reqs, cfg, on_output=sink)
        shape = shapes[0]
        if shape.error:
            raise UsageError(f"generation failed at {shape.shape}: {shape.error}")
        for r in reqs:  # requests the timed runs did not reach (runs < prompts x seeds): untimed
            if image_key(r.prompt_id, r.seed, 0) not in images:
                res = engine.generate(r)
                engine.sync()
                if res.images is not None:
                    sink(r, res.images)
        timing = RunTiming(
            samples_s=shape.samples_s,
            warmup_s=shape.warmup_s,
            latency_s=summarize(shape.samples_s, check=()),
            denoise_median_s=shape.stages_s.denoise if shape.stages_s else None,
            vae_decode_median_s=shape.stages_s.vae_decode if shape.stages_s else None,
            step_median_s=shape.step_s.median if shape.step_s else None,
            runs=runs,
            warmup=self.opts.warmup,
        )
        return timing, images

    def _new_run(self, kind: str, value: str, info: EngineInfo, fp: dict[str, object], cond: Conditions,
                 sweep_id: str) -> RunRecord:
        rid = new_run_id()
        root = self.opts.outputs_dir or (self.store.path.parent / "outputs")
        return RunRecord(
            id=rid, created_unix=time.time(), kind=kind, status="running", sweep_id=sweep_id,  # type: ignore[arg-type]
            axis=self.opts.axis, value=value, model=info.model, fingerprint=fp,
            fingerprint_hash=fingerprint_hash(fp), conditions=cond.model_dump(mode="json"),
            outputs_dir=str(Path(root) / sweep_id / f"{kind}-{value}-{rid}"),
        )

    def _finish(self, run: RunRecord, **update: object) -> RunRecord:
        from diffbench.core.manifest import read_manifest

        manifest = read_manifest(Path(run.outputs_dir)) if run.outputs_dir else None
        done = run.model_copy(update={**update, "status": "done", "manifest": manifest})
        self.store.put_run(done)
        return done

    def _fail(self, run: RunRecord, exc: BaseException) -> None:
        msg = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        self.store.put_run(run.model_copy(update={"status": "failed", "error": msg}))


def _point_config(base: EngineConfig, axis: str, value: str) -> EngineConfig:
    if axis == "precision":
        return base.model_copy(update={"dtype": value})
    if axis == "compile":
        return base.model_copy(update={"compile": value == "on"})
    return base.model_copy(update={"attention_backend": value})


def _predicted_fp(fp: dict[str, object], axis: str, field: str, value: str) -> dict[str, object]:
    if axis in CACHE_AXES:
        return {**fp, "cache": describe_cache(axis, value)}
    return {**fp, field: value == "on" if axis == "compile" else value}


def run_sweep(
    opts: SweepOptions,
    store: RunStore,
    *,
    engine_factory: EngineFactory = create_engine,
    on_event: Event | None = None,
    on_point: Callable[[PointResult], None] | None = None,
) -> SweepResult:
    """Run (or resume) a sweep and return its result; everything is stored as it finishes.

    Args:
        opts: the sweep options.
        store: an open run store.
        engine_factory: creates (does not start) an engine from a config.
        on_event: progress messages for the console.
        on_point: called with each point as it is finished (or found in the store).

    Raises:
        UsageError: an axis the pipeline does not support, a stored baseline whose fingerprint differs in
            anything but the swept field (unless ``opts.force``), a generation that failed.
        InputError: a stored baseline whose outputs are gone or do not cover the prompts × seeds.
        StoreError: the store is locked, read-only or from a newer schema.
    """
    s = _Sweep(opts, store, engine_factory, on_event or _quiet)
    inner = engine_factory(opts.engine)
    inner.start()
    engine: Engine = CachedEngine(inner) if s.is_cache else inner
    try:
        if isinstance(engine, CachedEngine):
            engine.check(opts.axis)  # before anything runs
        return _run(s, engine, on_point)
    finally:
        engine.stop()


def _run(s: _Sweep, engine: Engine, on_point: Callable[[PointResult], None] | None) -> SweepResult:
    opts, store = s.opts, s.store
    info = engine.info()
    reqs = requests_for(opts, info)
    for r in reqs:
        engine.validate(r)
    base_fp = deployment_fingerprint(info, s.env)
    sweep_id = sweep_identity(opts, base_fp, s.field, reqs)
    base_cond = conditions_for(info, reqs[0], s.env)
    if opts.baseline_run:  # refuse before anything is generated or stored
        stored = store.get_run(opts.baseline_run)
        s.forced_diff += check_fingerprints(stored.fingerprint, base_fp, s.field, opts.force,
                                            f"baseline run {stored.id}")
    old = store.get_sweep(sweep_id)
    store.put_sweep(SweepRecord(
        id=sweep_id, created_unix=old.created_unix if old else time.time(), updated_unix=time.time(),
        axis=opts.axis, model=info.model, status="running", options_json=opts.model_dump_json(),
    ))
    base_run, base_images, resumed = _baseline(s, engine, info, base_fp, base_cond, reqs, sweep_id)
    base_samples = base_run.timing.samples_s  # type: ignore[union-attr]
    noise = _noise_floor(s, engine, info, base_fp, base_cond, reqs, sweep_id, base_run, base_images)
    result = SweepResult(
        sweep_id=sweep_id, created_unix=time.time(), axis=opts.axis, field=s.field, store=str(store.path),
        baseline=RunRef(run_id=base_run.id, conditions=Conditions.model_validate(base_run.conditions),
                        latency_s=base_run.timing.latency_s, outputs_dir=base_run.outputs_dir,  # type: ignore[union-attr]
                        resumed=resumed),
        noise_floor=noise, noise_floor_psnr=noise.psnr if noise else None, gates=s.gates,
        budget_db=None if opts.gates else opts.budget_db, forced=bool(s.forced_diff),
        fingerprint_differences=list(s.forced_diff),
    )
    if opts.baseline_run and base_run.fingerprint.get(s.field) != base_fp.get(s.field):
        result.warnings.append(
            f"the stored baseline {base_run.id} has {s.field}={base_run.fingerprint.get(s.field)!r}, not this "
            f"deployment's {base_fp.get(s.field)!r}: the points are compared with that configuration"
        )
    if noise is not None and noise.psnr.p10 < 40:
        result.warnings.append(
            f"the baseline is not reproducible: the same configuration run twice gives psnr p10 "
            f"{noise.psnr.p10:.2f} dB (< 40 dB); quality differences below this noise floor are not "
            f"attributable to the option"
        )
    try:
        for value in opts.values:
            point = _point(s, engine, info, base_fp, reqs, sweep_id, value, base_run.id, base_samples,
                           base_images, noise)
            result.points.append(point)
            s.event(f"{opts.axis}={value}: {point.speedup:.3f}x, psnr p10 {point.quality.psnr.p10:.2f} dB"
                    + (" (from the store)" if point.resumed else ""))
            if on_point is not None:
                on_point(point)
    except BaseException:
        _save(s, sweep_id, info, result, "failed")
        raise
    result.forced = bool(s.forced_diff)
    result.fingerprint_differences = sorted(set(s.forced_diff))
    result.working_point = choose(result.points, s.gates)
    result.partial = False
    _save(s, sweep_id, info, result, "done")
    return result


def _save(s: _Sweep, sweep_id: str, info: EngineInfo, result: SweepResult, status: str) -> None:
    old = s.store.get_sweep(sweep_id)
    s.store.put_sweep(SweepRecord(
        id=sweep_id, created_unix=old.created_unix if old else time.time(), updated_unix=time.time(),
        axis=s.opts.axis, model=info.model, status=status, options_json=s.opts.model_dump_json(),  # type: ignore[arg-type]
        result_json=json.dumps(strict_json_value(result.model_dump(mode="python")), default=str),
    ))


def _baseline(s: _Sweep, engine: Engine, info: EngineInfo, fp: dict[str, object], cond: Conditions,
              reqs: list[GenerationRequest], sweep_id: str) -> tuple[RunRecord, Images, bool]:
    opts, store = s.opts, s.store
    if opts.baseline_run:
        run = store.get_run(opts.baseline_run)
        want = {image_key(r.prompt_id, r.seed, i) for r in reqs for i in range(r.batch)}
        if run.timing is None or not run.outputs_dir:
            raise InputError(f"baseline run {run.id} has no timing or outputs; pick a finished baseline run")
        images = load_images(Path(run.outputs_dir))
        missing = sorted(want - set(images))
        if missing or run.conditions.get("shape") != cond.shape:
            raise InputError(
                f"baseline run {run.id} does not cover this sweep's workload (shape {run.conditions.get('shape')} "
                f"vs {cond.shape}; {len(missing)} missing outputs, e.g. {missing[:1]}); use the same --prompts, "
                f"--num-prompts, --seeds, size and --steps, or rebuild the baseline"
            )
        s.event(f"baseline: stored run {run.id}")
        return run, {k: images[k] for k in want}, True
    if opts.resume:
        done = store.find_done(sweep_id, "baseline", "baseline", fingerprint_hash(fp))
        if done is not None and done.outputs_dir:
            try:
                images = load_images(Path(done.outputs_dir))
                s.event(f"baseline: from the store (run {done.id})")
                return done, images, True
            except InputError:
                pass
    s.event("baseline: measuring")
    run = s._new_run("baseline", "baseline", info, fp, cond, sweep_id)
    store.put_run(run)
    try:
        timing, images = s._measure(engine, reqs, Path(run.outputs_dir), cond, fp)  # type: ignore[arg-type]
    except BaseException as exc:
        s._fail(run, exc)
        raise
    return s._finish(run, timing=timing), images, False


def _noise_floor(s: _Sweep, engine: Engine, info: EngineInfo, fp: dict[str, object], cond: Conditions,
                 reqs: list[GenerationRequest], sweep_id: str, base: RunRecord, base_images: Images,
                 ) -> RunQuality | None:
    """The baseline configuration once more (untimed): its PSNR against the baseline is the noise floor."""
    store = s.store
    if s.opts.resume:
        done = store.find_done(sweep_id, "noise-floor", "baseline", fingerprint_hash(fp))
        if done is not None and done.quality is not None and done.quality.against_run == base.id:
            return done.quality
    s.event("noise floor: baseline configuration again")
    run = s._new_run("noise-floor", "baseline", info, fp, cond, sweep_id)
    writer = OutputWriter(Path(run.outputs_dir), cond.model_dump(mode="json"), fp)  # type: ignore[arg-type]
    images: Images = {}
    try:
        for r in reqs:
            res = engine.generate(r)
            engine.sync()
            if res.images is not None:
                add_images(images, r, res.images)
                writer(r, res.images)
        quality = compare_images(base_images, images, base.id, s.opts.ssim)
    except BaseException as exc:
        s._fail(run, exc)
        raise
    s._finish(run, quality=quality)
    return quality


def _point(s: _Sweep, engine: Engine, info: EngineInfo, base_fp: dict[str, object],
           reqs: list[GenerationRequest], sweep_id: str, value: str, base_id: str, base_samples: list[float],
           base_images: Images, noise: RunQuality | None) -> PointResult:
    opts, store = s.opts, s.store
    fp = _predicted_fp(base_fp, opts.axis, s.field, value)
    run: RunRecord | None = None
    if opts.resume:
        run = store.find_done(sweep_id, "point", value, fingerprint_hash(fp))
        if run is not None and (run.quality is None or run.quality.against_run != base_id):
            run = None
    resumed = run is not None
    if run is None:
        run = _measure_point(s, engine, info, base_fp, reqs, sweep_id, value, base_id, base_images)
    assert run.timing is not None and run.quality is not None
    sp = speedup_ci(base_samples, run.timing.samples_s, resamples=opts.bootstrap_resamples,
                    seed=opts.bootstrap_seed)
    rows = gate_rows(run.quality, s.gates, noise)
    return PointResult(
        value=value, run_id=run.id, conditions=Conditions.model_validate(run.conditions),
        latency_s=run.timing.latency_s, speedup=sp.speedup, speedup_ci=(sp.low, sp.high), speedup_detail=sp,
        quality=run.quality, skipped_steps=run.skipped.fraction if run.skipped else None,
        skipped_detail=run.skipped, gates=rows, passed=all(r.gate.passed for r in rows), resumed=resumed,
    )


def _measure_point(s: _Sweep, engine: Engine, info: EngineInfo, base_fp: dict[str, object],
                   reqs: list[GenerationRequest], sweep_id: str, value: str, base_id: str,
                   base_images: Images) -> RunRecord:
    opts = s.opts
    s.event(f"{opts.axis}={value}: measuring")
    own: Engine | None = None
    if isinstance(engine, CachedEngine):
        engine.set_cache(opts.axis, value, reqs[0].steps)
        target: Engine = engine
    else:
        own = s.factory(_point_config(opts.engine, opts.axis, value))
        own.start()
        target = own
    try:
        pinfo = target.info()
        fp = deployment_fingerprint(pinfo, s.env)
        s.forced_diff += check_fingerprints(base_fp, fp, s.field, opts.force, "the sweep's baseline")
        cond = conditions_for(pinfo, reqs[0], s.env)
        run = s._new_run("point", value, pinfo, fp, cond, sweep_id)
        s.store.put_run(run)
        try:
            if isinstance(target, CachedEngine):
                target.reset_skips()
            timing, images = s._measure(target, reqs, Path(run.outputs_dir), cond, fp)  # type: ignore[arg-type]
            skipped = target.skip_stats() if isinstance(target, CachedEngine) else None
            quality = compare_images(base_images, images, base_id, opts.ssim)
        except BaseException as exc:
            s._fail(run, exc)
            raise
        return s._finish(run, timing=timing, quality=quality, skipped=skipped)
    finally:
        if isinstance(engine, CachedEngine):
            engine.clear_cache()
        if own is not None:
            own.stop()
