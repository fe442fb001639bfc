"""One sweep: baseline outputs → quality noise floor → interleaved timing → one point per value → working point.

Order of work:

1. **Baseline outputs** (the quality reference): measured here, taken from the store (resume), or a stored
   run (``--baseline``); then the baseline configuration once more (the quality noise floor).
2. **Interleaved timing** of the live baseline and every value not yet in the store, in one process
   (:mod:`diffbench.sweep.interleave`): every configuration warms up until its latency is stable, then
   timed runs alternate in seeded random block order. The outputs of each value (for quality) and its skip
   counts come from its warmup runs (and one untimed run per request the warmup did not reach).
3. **Points**: each value's speed-up is the paired ratio of medians against the baseline samples of the
   *same* blocks, beside the timing noise floor of the same session (baseline vs itself); the verdict and
   the working point follow :mod:`diffbench.sweep.working_point`.

Every run goes to the store as it finishes (status ``done``); a point stores its own samples together with
the baseline samples it was interleaved with, so a resumed point keeps a drift-free ratio (the baseline run
itself holds the quality reference and no timing: stored runs are immutable). Rerunning the same command
resumes: points are keyed by (sweep id, value, fingerprint hash) and are not recomputed; an interrupted
timing session leaves its points ``interrupted`` (``failed`` after an error) and is redone. The sweep id hashes the sorted value set, the
model, shape, steps, prompts, seeds, protocol and the deployment fingerprint without the swept field: a
sweep with other values is a separate sweep and never touches another's runs or result.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from diffbench.bench.outputs import OutputWriter
from diffbench.bench.result import Conditions
from diffbench.bench.session import (
    IMAGE_DEFAULT,
    VIDEO_DEFAULT,
    BenchOptions,
    Shape,
    build_workload,
    engine_fingerprint,
    optional_conditions,
)
from diffbench.core.env import EnvInfo, capture_env
from diffbench.core.jsonio import strict_json_value
from diffbench.core.stats import summarize
from diffbench.engines.base import Engine, EngineInfo, GenerationRequest, StageTimes
from diffbench.engines.config import EngineConfig
from diffbench.engines.knobs import CACHE_AXES, describe_cache
from diffbench.engines.registry import create_engine
from diffbench.errors import GenerationError, InputError, UsageError
from diffbench.store.models import RunQuality, RunRecord, RunTiming, SweepRecord, fingerprint_hash
from diffbench.store.runs import RunStore, new_run_id
from diffbench.sweep.axes import AXIS_FIELD, DEPLOYMENT_AXIS, DEPLOYMENT_FIELDS
from diffbench.sweep.bootstrap import paired_speedup_ci
from diffbench.sweep.compare import check_fingerprints
from diffbench.sweep.engine import CachedEngine
from diffbench.sweep.interleave import Arm, ScheduleInfo, Tick, noise_floor_ci, run_interleaved
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
from diffbench.sweep.working_point import choose, default_gates, gate_rows, speed_verdict

Event = Callable[[str], None]
EngineFactory = Callable[[EngineConfig], Engine]


def _quiet(_: str) -> None:
    return None


def requests_for(opts: SweepOptions, info: EngineInfo) -> list[GenerationRequest]:
    """Prompts × seeds at the sweep's one shape (tiny models: :data:`TINY_DEFAULTS`); with ``opts.shard``
    (index, count) only the prompts at positions ``i % count == index``, with every seed.

    Raises:
        UsageError: a shard with no prompt (more shards than prompts).
    """
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
    if opts.shard is not None:  # a device's share: whole prompts (all their seeds), by prompt position
        index, count = opts.shard
        order = list(dict.fromkeys(r.prompt_id for r in reqs))
        mine = {pid for i, pid in enumerate(order) if i % count == index}
        reqs = [r for r in reqs if r.prompt_id in mine]
        if not reqs:
            raise UsageError(f"--ray-actors {count}: {len(order)} prompt(s) cannot be split over {count} devices; "
                             f"use at most {len(order)} actors or more prompts (--num-prompts / --prompts)")
    if not info.is_video and opts.frames is None:  # --frames on an image model is refused by validate()
        reqs = [r.model_copy(update={"frames": None}) for r in reqs]
    return reqs


def timed_runs(opts: SweepOptions, reqs: list[GenerationRequest]) -> int:
    """Timed blocks: ``opts.runs``, else 24 for tiny models and two per request (prompts x seeds) otherwise
    (blocks 2i and 2i+1 share a request)."""
    if opts.runs is not None:
        return opts.runs
    return TINY_RUNS if opts.engine.model in TINY_DEFAULTS else max(2 * len(reqs), 4)


def conditions_for(info: EngineInfo, req: GenerationRequest, env: EnvInfo) -> Conditions:
    """The minimal report conditions of ``info`` at ``req``'s shape."""
    hw = ", ".join(g.name for g in env.gpus) if info.device.startswith("cuda") else env.cpu
    return Conditions(
        model=info.model, model_hash=info.model_hash, pipeline=info.pipeline_class, shape=req.shape_label(),
        steps=req.steps, cfg=info.cfg, guidance=req.guidance, batch=req.batch, engine=info.engine,
        engine_version=info.engine_version, attention_backend=info.attention_backend,
        parallelism=info.parallelism, precision=info.dtype, cache=info.cache, compile=info.compile,
        device=info.device, hardware=hw, driver=env.driver, cuda=env.cuda, **optional_conditions(info),
    )


def sweep_identity(opts: SweepOptions, fp: dict[str, object], field: str, reqs: list[GenerationRequest]) -> str:
    """sha256 (16 hex) of the sweep: what makes points comparable, and the sorted value set (a sweep with
    other values is another sweep, with its own baseline and result; the order of ``--values`` does not count).
    """
    data = {
        "axis": opts.axis,
        "values": sorted(opts.values),
        "fingerprint": fingerprint_hash(fp, ignore=(field,)),
        "requests": [(r.prompt_id, r.prompt, r.seed, r.shape_key, r.guidance) for r in reqs],
        "protocol": ("interleaved-v2", opts.warmup, opts.max_warmup, opts.stable_window, opts.schedule_seed,
                     timed_runs(opts, reqs)),
        "baseline_run": opts.baseline_run,
    }
    if opts.value_configs:  # axis 'deployment': a value is its whole configuration
        data["value_configs"] = {k: v.model_dump(mode="json") for k, v in sorted(opts.value_configs.items())}
    if opts.engine.engine == "http" and opts.engine.http is not None:  # services are known by URL too
        data["services"] = [opts.engine.http.url, *opts.url_per_value]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _Sweep:
    """State of one sweep run; see :func:`run_sweep`."""

    def __init__(self, opts: SweepOptions, store: RunStore, factory: EngineFactory, event: Event,
                 tick: Callable[[Tick], None] | None = None) -> None:
        self.opts, self.store, self.factory, self.event, self.tick = opts, store, factory, event, tick
        self.field = AXIS_FIELD.get(opts.axis, opts.axis)  # an http sweep may name any server-side option
        self.is_cache = opts.axis in CACHE_AXES and opts.engine.engine != "http"  # http: one service per value
        self.urls = dict(zip(opts.values, opts.url_per_value, strict=False))
        self.env = capture_env()
        self.gates = list(opts.gates) or default_gates(opts.budget_db)
        self.forced_diff: list[str] = []
        self.progress: dict[str, object] = {}  # what has finished (for a partial result on Ctrl-C)
        self.declared: list[str] = []  # http: values whose service does not report the swept field

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
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C or SIGTERM: the run was stopped, not failed
            from diffbench.core.interrupt import interrupt_name

            self.store.put_run(run.model_copy(update={"status": "interrupted", "error": None,
                                                      "status_note": f"stopped by {interrupt_name()}"}))
            return
        self.store.put_run(run.model_copy(update={"status": "failed", "error": f"{type(exc).__name__}: {exc}"}))


def _point_config(base: EngineConfig, axis: str, value: str, url: str | None = None,
                  configs: dict[str, EngineConfig] | None = None) -> EngineConfig:
    if axis == DEPLOYMENT_AXIS:  # derive: the value names a whole configuration
        if not configs or value not in configs:
            raise UsageError(f"axis {DEPLOYMENT_AXIS}: no configuration for value {value!r}")
        return configs[value]
    if base.engine == "http":  # the option lives in the service's launch flags: the value's own service
        assert base.http is not None and url is not None
        return base.model_copy(update={"http": base.http.model_copy(update={"url": url})})
    if axis == "precision":
        return base.model_copy(update={"dtype": value})
    if axis == "compile":
        return base.model_copy(update={"compile": value == "on"})
    if axis == "quantization":
        return base.model_copy(update={"quantization": value})
    if axis == "fuse-projections":
        return base.model_copy(update={"fuse_projections": value == "on"})
    return base.model_copy(update={"attention_backend": value})


def _predicted_fp(fp: dict[str, object], axis: str, field: str, value: str) -> dict[str, object]:
    """The fingerprint of value ``value`` of ``axis``: the baseline's ``fp`` with the swept field set (an
    optional field, :data:`~diffbench.engines.fingerprint.OPTIONAL_FIELDS`, is absent at its default)."""
    if axis in CACHE_AXES:
        return {**fp, "cache": describe_cache(axis, value)}
    if axis in ("quantization", "fuse-projections"):
        rest = {k: v for k, v in fp.items() if k != field}
        if value in ("none", "off"):
            return rest
        return {**rest, field: True if axis == "fuse-projections" else value}
    return {**fp, field: value == "on" if axis == "compile" else value}


def preflight(opts: SweepOptions, engine: Engine | None = None) -> None:
    """Check every request of the sweep against the pipeline before the model is loaded, when the engine can
    tell its pipeline class without loading (``peek_info``; tiny models and local directories).

    Raises:
        ShapeError: a request the model cannot take (neutral message: the caller names its option).
    """
    eng = engine if engine is not None else create_engine(opts.engine)
    peek = getattr(eng, "peek_info", None)
    early = peek() if callable(peek) else None
    if early is None:
        return
    for r in requests_for(opts, early):
        eng.validate(r)


def run_sweep(
    opts: SweepOptions,
    store: RunStore,
    *,
    engine_factory: EngineFactory = create_engine,
    on_event: Event | None = None,
    on_point: Callable[[PointResult], None] | None = None,
    on_tick: Callable[[Tick], None] | None = None,
) -> SweepResult:
    """Run (or resume) a sweep and return its result; everything is stored as it finishes.

    Args:
        opts: the sweep options.
        store: an open run store.
        engine_factory: creates (does not start) an engine from a config. Option axes hold one engine per
            value at once during the interleaved timing (plus the baseline's).
        on_event: progress messages for the console.
        on_point: called with each point once all are finished (or found in the store).
        on_tick: called after every warmup and timed generation of the interleaved session (a progress
            line: value i of k, run j of n; see :class:`~diffbench.sweep.interleave.Tick`).

    Raises:
        UsageError: an axis the pipeline does not support, a stored baseline whose fingerprint differs in
            anything but the swept field (unless ``opts.force``).
        InputError: a stored baseline whose outputs are gone or do not cover the prompts × seeds.
        GenerationError: a generation failed (the runs of the session are stored as failed).
        StoreError: the store is locked, read-only or from a newer schema.
    """
    s = _Sweep(opts, store, engine_factory, on_event or _quiet, on_tick)
    inner = engine_factory(opts.engine)
    preflight(opts, inner)
    info = inner.start()
    if opts.engine.engine == "http":  # a service is known by the model it reports (tiny defaults apply)
        s.opts = opts.model_copy(update={"engine": opts.engine.model_copy(update={"model": info.model})})
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
    base_fp = engine_fingerprint(engine, info, s.env)
    sweep_id = sweep_identity(opts, base_fp, s.field, reqs)
    base_cond = conditions_for(info, reqs[0], s.env)
    if opts.baseline_run:  # refuse before anything is generated or stored
        stored = store.get_run(opts.baseline_run)
        s.forced_diff += check_fingerprints(stored.fingerprint, base_fp, s.field, opts.force,
                                            f"baseline run {stored.id}")
    old = store.get_sweep(sweep_id)
    store.claim_sweep(SweepRecord(  # refused while another live process runs this sweep id on this store
        id=sweep_id, created_unix=old.created_unix if old else time.time(), updated_unix=time.time(),
        axis=opts.axis, model=info.model, status="running", options_json=opts.model_dump_json(),
    ))
    try:  # a sweep that fails or is interrupted never stays 'running' in the store
        result = _measure(s, engine, info, base_fp, base_cond, reqs, sweep_id)
    except KeyboardInterrupt:
        _save_partial(s, sweep_id, info, "interrupted")
        try:
            partial = _partial_result(s, sweep_id)
        except Exception as exc:  # the interrupt is what matters: report it even if the partial is unusable
            s.event(f"no partial result: {exc}")
            partial = None
        raise SweepInterrupted(sweep_id, partial) from None
    except BaseException:
        _save_partial(s, sweep_id, info, "failed")
        raise
    if on_point is not None:
        for p in result.points:
            on_point(p)
    return result


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: ``result`` holds what had finished (``partial`` and ``interrupted`` true), or
    None when not even the baseline was done. The sweep is stored with status ``interrupted``; rerunning
    the same command resumes it."""

    def __init__(self, sweep_id: str, result: SweepResult | None) -> None:
        super().__init__("sweep interrupted")
        self.sweep_id, self.result = sweep_id, result


def _partial_result(s: _Sweep, sweep_id: str) -> SweepResult | None:
    """What had finished when the sweep was interrupted: the baseline and every point already stored done
    (each with the baseline samples of its own interleaved session)."""
    base_run = s.progress.get("baseline")
    if not isinstance(base_run, RunRecord):
        return None
    noise = s.progress.get("noise")
    points = []
    for value in s.opts.values:
        run = s.progress.get(f"point:{value}")
        if isinstance(run, RunRecord):
            points.append(_point_result(s, run, noise if isinstance(noise, RunQuality) else None, resumed=True))
    runs = {p.value: s.progress[f"point:{p.value}"] for p in points}
    live = _live_baseline(points, runs)  # type: ignore[arg-type]
    return SweepResult(
        sweep_id=sweep_id, created_unix=time.time(), partial=True, interrupted=True, axis=s.opts.axis,
        field=s.field, store=str(s.store.path),
        baseline=RunRef(run_id=base_run.id, conditions=Conditions.model_validate(base_run.conditions),
                        latency_s=summarize(live, check=()) if live else None, outputs_dir=base_run.outputs_dir),
        noise_floor=noise if isinstance(noise, RunQuality) else None, gates=s.gates,
        budget_db=None if s.opts.gates else s.opts.budget_db, points=points,
        timing_floor=noise_floor_ci(live, s.opts.bootstrap_resamples, s.opts.bootstrap_seed) if live else None,
        warnings=[f"interrupted: {len(points)} of {len(s.opts.values)} value(s) finished; rerun the same "
                  f"command to resume"],
    )


def _measure(s: _Sweep, engine: Engine, info: EngineInfo, base_fp: dict[str, object], base_cond: Conditions,
             reqs: list[GenerationRequest], sweep_id: str) -> SweepResult:
    """Baseline, noise floor, the interleaved session of the values not in the store, and the result."""
    opts, store = s.opts, s.store
    base_run, base_images, resumed = _baseline(s, engine, info, base_fp, base_cond, reqs, sweep_id)
    s.progress["baseline"] = base_run
    noise = _noise_floor(s, engine, info, base_fp, base_cond, reqs, sweep_id, base_run, base_images)
    s.progress["noise"] = noise
    runs: dict[str, RunRecord] = {}
    for value in opts.values:
        found = _stored_point(s, base_fp, sweep_id, value, base_run.id)
        if found is not None:
            runs[value] = found
            s.progress[f"point:{value}"] = found
    todo = [v for v in opts.values if v not in runs]
    schedule: ScheduleInfo | None = None
    warmups: dict[str, list[float]] = {}
    stable: dict[str, bool] = {}
    if todo:
        schedule, made, _live, warmups, stable = _session(s, engine, base_fp, reqs, sweep_id, todo, base_run.id,
                                                         base_images)
        runs.update(made)
        # the baseline's samples of a session are stored on each of its points, never on the baseline
        # run: that run is finished (immutable) before its first session, and a resumed sweep may time it
        # again in another session
    points = [_point_result(s, runs[v], noise, resumed=v not in todo) for v in opts.values]
    live_samples = _live_baseline(points, runs)
    base_lat = summarize(live_samples, check=()) if live_samples else (
        base_run.timing.latency_s if base_run.timing else None)
    result = SweepResult(
        sweep_id=sweep_id, created_unix=time.time(), axis=opts.axis, field=s.field, store=str(store.path),
        baseline=RunRef(run_id=base_run.id, conditions=Conditions.model_validate(base_run.conditions),
                        latency_s=base_lat, outputs_dir=base_run.outputs_dir, resumed=resumed),
        noise_floor=noise, noise_floor_psnr=noise.psnr if noise else None, gates=s.gates,
        budget_db=None if opts.gates else opts.budget_db, forced=bool(s.forced_diff),
        fingerprint_differences=sorted(set(s.forced_diff)), points=points, schedule=schedule, warmup_s=warmups,
        timing_floor=noise_floor_ci(live_samples, opts.bootstrap_resamples, opts.bootstrap_seed)
        if live_samples else None,
    )
    if opts.baseline_run:
        result.warnings.append(
            f"quality is measured against the stored run {base_run.id}; timing against this deployment's "
            f"baseline configuration ({s.field}={base_fp.get(s.field)!r}), interleaved with the points in "
            f"this process (a stored run's timing carries the machine's drift since it was measured)"
        )
        if base_run.fingerprint.get(s.field) != base_fp.get(s.field):
            result.warnings.append(
                f"the stored baseline {base_run.id} has {s.field}={base_run.fingerprint.get(s.field)!r}, not this "
                f"deployment's {base_fp.get(s.field)!r}: quality is compared with that configuration"
            )
    if noise is not None and noise.psnr.p10 < 40:
        result.warnings.append(
            f"the baseline is not reproducible: the same configuration run twice gives psnr p10 "
            f"{noise.psnr.p10:.2f} dB (< 40 dB); quality differences below this noise floor are not "
            f"attributable to the option"
        )
    for name, ok in stable.items():
        if not ok:
            result.warnings.append(
                f"{name}: latency still falling after {len(warmups.get(name, []))} warmup runs (cap "
                f"--max-warmup {opts.max_warmup}); its timed runs may include warmup drift"
            )
    result.warnings += s.declared
    if todo:
        result.warnings += _load_warning(info, opts.engine.threads)
    if any(p.resumed for p in points) and todo:
        result.warnings.append(
            "some points come from an earlier interleaved session (resumed): each is compared with the "
            "baseline samples of its own session, never across sessions"
        )
    result.working_point = choose(result.points, s.gates)
    result.partial = False
    for p in points:
        s.event(f"{opts.axis}={p.value}: {p.speedup:.3f}x ({p.verdict}), psnr p10 {p.quality.psnr.p10:.2f} dB"
                + (" (from the store)" if p.resumed else ""))
    _save(s, sweep_id, info, result, "done")
    return result


def _load_warning(info: EngineInfo, threads: int | None) -> list[str]:
    """The busy-machine warning, with what it means for the sweep's intervals."""
    from diffbench.core.env import busy_machine_warning

    msg = busy_machine_warning(info.device, threads)
    return [] if msg is None else [msg + "; the intervals widen, and the noise floor shows by how much"]


def _live_baseline(points: list[PointResult], runs: dict[str, RunRecord]) -> list[float]:
    """The baseline samples of the newest session among the points (for the header and the floor)."""
    newest: RunTiming | None = None
    for p in points:
        t = runs[p.value].timing
        if t is not None and t.baseline_samples_s and (
                newest is None or (t.measured_unix or (0, 0))[1] > (newest.measured_unix or (0, 0))[1]):
            newest = t
    return list(newest.baseline_samples_s or []) if newest is not None else []


def _save(s: _Sweep, sweep_id: str, info: EngineInfo, result: SweepResult, status: str) -> None:
    old = s.store.get_sweep(sweep_id)
    s.store.put_sweep(SweepRecord(
        id=sweep_id, created_unix=old.created_unix if old else time.time(), updated_unix=time.time(),
        axis=s.opts.axis, model=info.model, status=status, options_json=s.opts.model_dump_json(),  # type: ignore[arg-type]
        result_json=json.dumps(strict_json_value(result.model_dump(mode="python")), default=str),
    ))


def _save_partial(s: _Sweep, sweep_id: str, info: EngineInfo, status: str) -> None:
    old = s.store.get_sweep(sweep_id)
    s.store.put_sweep(SweepRecord(
        id=sweep_id, created_unix=old.created_unix if old else time.time(), updated_unix=time.time(),
        axis=s.opts.axis, model=info.model, status=status,  # type: ignore[arg-type]
        options_json=s.opts.model_dump_json(),
        result_json=old.result_json if old else None,
    ))


def _writer_sink(writer: OutputWriter, images: Images) -> Callable[[GenerationRequest, object], None]:
    def sink(req: GenerationRequest, arr: object) -> None:
        if image_key(req.prompt_id, req.seed, 0) in images:
            return
        add_images(images, req, arr)  # type: ignore[arg-type]
        writer(req, arr)  # type: ignore[arg-type]

    return sink


def _generate_all(engine: Engine, reqs: list[GenerationRequest], sink: Callable[[GenerationRequest, object], None],
                  images: Images) -> None:
    """One untimed generation of every request whose output is not in ``images`` yet."""
    for r in reqs:
        if image_key(r.prompt_id, r.seed, 0) in images:
            continue
        res = engine.generate(r)
        engine.sync()
        if res.images is None:
            raise GenerationError(f"{r.shape_label()}: the engine returned no images")
        sink(r, res.images)


def _baseline(s: _Sweep, engine: Engine, info: EngineInfo, fp: dict[str, object], cond: Conditions,
              reqs: list[GenerationRequest], sweep_id: str) -> tuple[RunRecord, Images, bool]:
    """The quality reference: a stored run, this sweep's stored baseline, or one untimed pass now."""
    opts, store = s.opts, s.store
    if opts.baseline_run:
        run = store.get_run(opts.baseline_run)
        want = {image_key(r.prompt_id, r.seed, i) for r in reqs for i in range(r.batch)}
        if not run.outputs_dir:
            raise InputError(f"baseline run {run.id} has no outputs; pick a finished baseline run")
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
    s.event("baseline: outputs")
    run = s._new_run("baseline", "baseline", info, fp, cond, sweep_id)
    store.put_run(run)
    images: Images = {}
    try:
        if isinstance(engine, CachedEngine):
            engine.use(opts.axis, None, reqs[0].steps)
        writer = OutputWriter(Path(run.outputs_dir), cond.model_dump(mode="json"), fp)  # type: ignore[arg-type]
        _generate_all(engine, reqs, _writer_sink(writer, images), images)
    except BaseException as exc:
        s._fail(run, exc)
        raise
    return s._finish(run), images, False


def _noise_floor(s: _Sweep, engine: Engine, info: EngineInfo, fp: dict[str, object], cond: Conditions,
                 reqs: list[GenerationRequest], sweep_id: str, base: RunRecord, base_images: Images,
                 ) -> RunQuality | None:
    """The baseline configuration once more (untimed): its PSNR against the baseline is the quality floor."""
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
        if isinstance(engine, CachedEngine):
            engine.use(s.opts.axis, None, reqs[0].steps)
        _generate_all(engine, reqs, _writer_sink(writer, images), images)
        quality = compare_images(base_images, images, base.id, s.opts.ssim)
    except BaseException as exc:
        s._fail(run, exc)
        raise
    s._finish(run, quality=quality)
    return quality


def _stored_point(s: _Sweep, base_fp: dict[str, object], sweep_id: str, value: str, base_id: str,
                  ) -> RunRecord | None:
    """A finished point of this sweep measured against this baseline, with interleaved timing."""
    if not s.opts.resume:
        return None
    if s.opts.axis == DEPLOYMENT_AXIS:  # the sweep id fixes the value's whole configuration
        run = s.store.find_done(sweep_id, "point", value, None)
    else:
        fp = _predicted_fp(base_fp, s.opts.axis, s.field, value)
        run = s.store.find_done(sweep_id, "point", value, fingerprint_hash(fp))
    if run is None or run.quality is None or run.quality.against_run != base_id:
        return None
    if run.timing is None or not run.timing.baseline_samples_s:
        return None
    return run


UNREPORTED = (None, "unknown", "remote", "")


def _declared(s: _Sweep, fp: dict[str, object], predicted: dict[str, object], value: str) -> dict[str, object]:
    """A value's service must report the value it was mapped to, when it reports the swept field at all.

    A service that does not report it (a third-party server, or an option outside the fingerprint) gets
    the value as declared by ``--values``, and the result says so.

    Raises:
        UsageError: the service reports another value of the swept field than the one mapped to its URL.
    """
    field, want = s.field, predicted.get(s.field)
    got = fp.get(field)
    url = s.urls.get(value)
    if got in UNREPORTED:
        s.declared.append(f"{s.opts.axis}={value}: the service at {url} does not report {field}; the value is "
                          f"as declared by --values/--url-per-value, not verified")
        return {**fp, field: want}
    if got != want:
        raise UsageError(
            f"--url-per-value {url}: the service reports {field}={got!r}, but it is mapped to --values {value} "
            f"({field}={want!r}); give the URLs in the order of --values, each of the service launched with "
            f"that value"
        )
    return fp


class _Candidate:
    """A value being measured in this session: its run record, engine, arm and outputs."""

    def __init__(self, value: str, run: RunRecord, arm: Arm, own: Engine | None, images: Images,
                 sink: Callable[[GenerationRequest, object], None]) -> None:
        self.value, self.run, self.arm, self.own, self.images, self.sink = value, run, arm, own, images, sink


def _prepare(s: _Sweep, engine: Engine, base_fp: dict[str, object], reqs: list[GenerationRequest],
             sweep_id: str, value: str) -> _Candidate:
    opts = s.opts
    own: Engine | None = None
    steps = reqs[0].steps
    if isinstance(engine, CachedEngine):
        engine.use(opts.axis, value, steps)
        target: Engine = engine
        ce = engine

        def apply() -> None:
            ce.use(opts.axis, value, steps)
    else:
        own = s.factory(_point_config(opts.engine, opts.axis, value, s.urls.get(value), opts.value_configs))
        own.start()
        target = own

        def apply() -> None:
            return None
    try:
        pinfo = target.info()
        fp = engine_fingerprint(target, pinfo, s.env)
        if own is not None and opts.engine.engine == "http":
            fp = _declared(s, fp, _predicted_fp(base_fp, opts.axis, s.field, value), value)
        if opts.axis == DEPLOYMENT_AXIS:  # the value may change every deployment field; nothing else
            others = {k: v for k, v in base_fp.items() if k not in DEPLOYMENT_FIELDS}
            s.forced_diff += check_fingerprints(others, {k: fp.get(k) for k in others}, None, opts.force,
                                                "the sweep's baseline")
        else:
            s.forced_diff += check_fingerprints(base_fp, fp, s.field, opts.force, "the sweep's baseline")
        cond = conditions_for(pinfo, reqs[0], s.env)
        run = s._new_run("point", value, pinfo, fp, cond, sweep_id)
        s.store.put_run(run)
    except BaseException:
        if own is not None:
            own.stop()
        raise
    images: Images = {}
    writer = OutputWriter(Path(run.outputs_dir), cond.model_dump(mode="json"), fp)  # type: ignore[arg-type]
    sink = _writer_sink(writer, images)

    def on_output(req: GenerationRequest, res: object) -> None:
        arr = getattr(res, "images", None)
        if arr is not None:
            sink(req, arr)

    arm = Arm(name=value, engine=target, apply=apply, on_output=on_output)
    return _Candidate(value, run, arm, own, images, sink)


def _stage_medians(stages: list[StageTimes]) -> dict[str, float | None]:
    import numpy as np

    if not stages:
        return {"denoise_median_s": None, "vae_decode_median_s": None, "step_median_s": None}
    steps = [x for st in stages for x in st.step_s]
    return {
        "denoise_median_s": float(np.median([st.denoise_s for st in stages])),
        "vae_decode_median_s": float(np.median([st.vae_decode_s for st in stages])),
        "step_median_s": float(np.median(steps)) if steps else None,
    }


def _timing(arm: Arm, sched: ScheduleInfo, base: list[float] | None, span: tuple[float, float]) -> RunTiming:
    """The stored timing of one arm of a session (``base``: the baseline samples of the same blocks)."""
    return RunTiming(
        samples_s=list(arm.samples_s), warmup_s=list(arm.warmup_s), latency_s=summarize(arm.samples_s, check=()),
        runs=len(arm.samples_s), warmup=len(arm.warmup_s), session_id=sched.session_id,
        baseline_samples_s=None if base is None else list(base), stable=arm.stable, measured_unix=span,
        **_stage_medians(arm.stages),  # type: ignore[arg-type]
    )


def _session(s: _Sweep, engine: Engine, base_fp: dict[str, object], reqs: list[GenerationRequest],
             sweep_id: str, todo: list[str], base_id: str, base_images: Images,
             ) -> tuple[ScheduleInfo, dict[str, RunRecord], RunTiming, dict[str, list[float]], dict[str, bool]]:
    """Prepare every value in ``todo``, time them interleaved with the live baseline, store the points."""
    opts = s.opts
    steps = reqs[0].steps
    cands: list[_Candidate] = []
    made: dict[str, RunRecord] = {}
    try:
        for value in todo:
            s.event(f"{opts.axis}={value}: preparing")
            cands.append(_prepare(s, engine, base_fp, reqs, sweep_id, value))
        if isinstance(engine, CachedEngine):
            ce = engine
            engine.reset_skips()

            def base_apply() -> None:
                ce.use(opts.axis, None, steps)
        else:
            def base_apply() -> None:
                return None
        base_arm = Arm(name="baseline", engine=engine, apply=base_apply)
        arms = [base_arm] + [c.arm for c in cands]
        t0 = time.time()
        sched = run_interleaved(arms, reqs, timed_runs(opts, reqs), seed=opts.schedule_seed,
                                min_warmup=opts.warmup, max_warmup=opts.max_warmup, window=opts.stable_window,
                                on_event=s.event, on_tick=s.tick)
        span = (t0, time.time())
        for c in cands:
            c.arm.apply()  # requests the warmup and the timed blocks did not reach: one untimed run each
            _generate_all(c.arm.engine, reqs, c.sink, c.images)
            skipped = engine.skip_stats(c.value) if isinstance(engine, CachedEngine) else None
            quality = compare_images(base_images, c.images, base_id, opts.ssim)
            made[c.value] = s.progress[f"point:{c.value}"] = s._finish(c.run, timing=_timing(c.arm, sched, base_arm.samples_s, span),
                                      quality=quality, skipped=skipped)
    except BaseException as exc:
        for c in cands:
            if c.value not in made:
                s._fail(c.run, exc)
        raise
    finally:
        for c in cands:
            if c.own is not None:
                c.own.stop()
        if isinstance(engine, CachedEngine):
            engine.clear_cache()
    warm = {a.name: list(a.warmup_s) for a in arms}
    stable = {a.name: a.stable for a in arms}
    return sched, made, _timing(base_arm, sched, None, span), warm, stable


def _point_result(s: _Sweep, run: RunRecord, noise: RunQuality | None, resumed: bool) -> PointResult:
    opts = s.opts
    t = run.timing
    assert t is not None and t.baseline_samples_s and run.quality is not None
    sp = paired_speedup_ci(t.baseline_samples_s, t.samples_s, resamples=opts.bootstrap_resamples,
                           seed=opts.bootstrap_seed)
    floor = noise_floor_ci(t.baseline_samples_s, opts.bootstrap_resamples, opts.bootstrap_seed)
    skipped = run.skipped.fraction if run.skipped else None
    fast, verdict = speed_verdict(sp, floor, skipped)
    rows = gate_rows(run.quality, s.gates, noise)
    return PointResult(
        value=run.value or "", run_id=run.id, conditions=Conditions.model_validate(run.conditions),
        latency_s=t.latency_s, speedup=sp.speedup, speedup_ci=(sp.low, sp.high), speedup_detail=sp,
        noise_floor=floor, measurably_faster=fast, verdict=verdict, session_id=t.session_id,
        quality=run.quality, skipped_steps=skipped, skipped_detail=run.skipped, gates=rows,
        passed=all(r.gate.passed for r in rows), resumed=resumed,
    )
