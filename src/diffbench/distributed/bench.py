"""``diffbench bench --save-outputs DIR --ray ADDRESS``: the bench workload as tasks on engine actors.

The workload of a single-process bench (prompts × seeds × shapes, ``--runs`` timed runs per shape cycling through
them, one saved output per distinct request) is split into **tasks**: one per timed run and one per untimed output
(a request that no timed run reached), each with a deterministic id (:func:`plan_tasks`). Engine actors (one per
GPU, or N CPU actors with ``--threads`` each) pull tasks one at a time; before its first task of a shape an actor
warms that shape up (the protocol's warmup, on its own device). A task's actor writes the output files to the
shared directory ``DIR`` and then the task's record (:mod:`diffbench.distributed.taskstore`); the driver rewrites
``DIR/manifest.json`` from the records (at most once a second, and at the end) and assembles the timings of all
tasks into the same per-shape statistics as a single-process bench (:class:`~diffbench.bench.protocol.ShapeRun`).

Outputs are byte-identical to a single-process run with the same ``--threads``: an output depends only on its
request (seeded generator), and PNG encoding is deterministic. Timings are pooled only over actors of one
device class (GPU name and driver, or CPU model): a cluster mixing classes is refused.

Resuming: a rerun of the same command skips every task whose record and output files (sha256) are intact; an
actor that dies stops the run (exit 5, :class:`~diffbench.distributed.cluster.ActorDied`) after the other actors'
tasks in flight are recorded, and the rerun does only the rest.
"""

from __future__ import annotations

import base64
import pickle
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from diffbench.bench.protocol import (
    BenchConfig,
    ShapeRun,
    add_timed,
    group_by_shape,
    make_attempt,
    repro_result,
    shape_label,
    timed_run,
    warm_up,
)
from diffbench.bench.result import (
    BenchResult,
    DistributedRun,
    FailedRun,
    Note,
    Protocol,
    ShapeResult,
    WorkerInfo,
)
from diffbench.distributed.cluster import ActorDied, actor_pool, connect, default_actors, import_ray
from diffbench.distributed.taskstore import TaskRecord, TaskStore, task_id
from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.engines.config import EngineConfig
from diffbench.errors import DiffbenchError, GenerationError, UsageError

MANIFEST_EVERY_S = 1.0  # the driver rewrites manifest.json and the partial JSON at most this often


class BenchTask(BaseModel):
    """One unit of work: the ``run``-th timed run of shape ``shape`` (request ``request`` of that shape's group),
    or an untimed ``output`` run; ``save``: this task writes the request's output (its first occurrence)."""

    id: str
    shape: int
    request: int
    phase: Literal["timed", "output"]
    run: int
    save: bool


def plan_tasks(groups: list[list[GenerationRequest]], cfg: BenchConfig, identity: dict[str, Any]) -> list[BenchTask]:
    """The tasks of a bench, in the order a single process runs them: per shape, ``cfg.runs`` timed runs cycling
    through the group, then one untimed output task for every request no timed run reached.

    ``identity`` is what decides the outputs besides the request (engine configuration, diffbench version): it is
    hashed into every id, so a changed configuration never reuses an earlier run's records."""
    tasks = []
    saved: set[tuple[str, int]] = set()  # output files are named by (prompt_id, seed): the first shape's is kept
    for si, group in enumerate(groups):
        seen: set[tuple[str, int]] = set()

        def add(ri: int, phase: Literal["timed", "output"], run: int, si: int = si,
                group: list[GenerationRequest] = group, seen: set[tuple[str, int]] = seen) -> None:
            req = group[ri]
            key = (req.prompt_id, req.seed)
            fields = {"identity": identity, "request": req.model_dump(mode="python"), "phase": phase, "run": run}
            tasks.append(BenchTask(id=task_id("bench", fields), shape=si, request=ri, phase=phase, run=run,
                                   save=key not in saved))
            seen.add(key)
            saved.add(key)

        for i in range(cfg.runs):
            add(i % len(group), "timed", i)
        for ri, req in enumerate(group):
            if (req.prompt_id, req.seed) not in seen | saved:
                add(ri, "output", 0)
    return tasks


def _pack(obj: object) -> str:
    return base64.b64encode(pickle.dumps(obj)).decode()


def _unpack(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))  # noqa: S301 - our own records, written by our actors


class BenchActor:
    """An engine on one device (a Ray actor): warms each shape up on first use, runs tasks, writes their outputs
    and records to the shared directory."""

    def __init__(self, engine: EngineConfig, threads: int, out_dir: str, inputs: dict[str, str]):
        # Ray gives a GPU actor one device (CUDA_VISIBLE_DEVICES): it is cuda:0 inside the actor, whatever index was asked
        device = "cuda" if engine.device.startswith("cuda") else engine.device
        self.cfg_engine = engine.model_copy(update={"threads": threads, "device": device})
        self.threads, self.dir, self.inputs, self.index = threads, Path(out_dir), inputs, 0
        self.groups: list[list[GenerationRequest]] = []
        self.cfg = BenchConfig()
        self.runs: dict[int, ShapeRun] = {}
        self.attempts: dict[int, Any] = {}

    def start(self, index: int) -> dict[str, Any]:
        """Start the engine as actor ``index``; return its info, this worker's description and the deployment
        fingerprint (captured on this actor's node: its GPU and driver)."""
        import os

        self.index = index

        from diffbench.bench.session import engine_fingerprint
        from diffbench.core.clock import Timer
        from diffbench.core.env import capture_env
        from diffbench.engines.registry import create_engine

        self.engine = create_engine(self.cfg_engine)
        self.info = self.engine.start()
        self.timer = Timer(sync=self.engine.sync, clock=self.engine.clock)
        env = capture_env()
        gpu = self.info.device.startswith("cuda")
        hardware = ", ".join(g.name for g in env.gpus) if gpu else env.cpu
        ray = import_ray()
        worker = WorkerInfo(index=self.index, node_ip=ray.util.get_node_ip_address(), pid=os.getpid(),
                            device=self.info.device, device_class=f"{hardware} (driver {env.driver})" if gpu else hardware,
                            driver=env.driver, threads=self.threads)
        self.store = TaskStore(self.dir)
        return {"info": self.info, "worker": worker, "env": env,
                "fingerprint": engine_fingerprint(self.engine, self.info, env)}

    def validate(self, requests: list[GenerationRequest]) -> None:
        """Check every request against the model (ShapeError for one it cannot take)."""
        for r in requests:
            self.engine.validate(r)

    def set_workload(self, groups: list[list[GenerationRequest]], cfg: BenchConfig) -> None:
        """The workload grouped by shape (as :func:`~diffbench.bench.protocol.group_by_shape`) and the protocol."""
        self.groups, self.cfg = groups, cfg

    def run(self, task: BenchTask) -> TaskRecord:
        """Run ``task`` (after this actor's warmup of its shape), write its outputs, then its record."""
        from diffbench.bench.outputs import save_images

        group = self.groups[task.shape]
        warm: list[float] = []
        notes: list[Note] = []
        if task.shape not in self.runs:
            run = self.runs[task.shape] = ShapeRun(group[0])
            self.attempts[task.shape] = make_attempt(self.engine, run.result)
            warm_up(self.attempts[task.shape], self.timer, group, self.cfg, run.result)
            warm, notes = list(run.result.warmup_s), list(run.result.warnings)
        run, attempt = self.runs[task.shape], self.attempts[task.shape]
        failed_before = len(run.result.failed_runs)
        req = group[task.request]
        data: dict[str, Any] = {"phase": task.phase, "run": task.run, "warmup_s": warm,
                                "notes": [n.model_dump() for n in notes]}
        res: GenerationResult | None
        if task.phase == "timed":
            timed = timed_run(attempt, self.engine, self.timer, task.run, req)
            res = timed[1] if timed else None
            if timed is not None:
                e2e, got, pending = timed
                slim = GenerationResult(images=None, stages=got.stages, memory=got.memory, extra=dict(got.extra),
                                        signals=got.signals)
                data.update(e2e_s=e2e, pending_s=pending, result=_pack(slim))
        else:
            res = attempt("output", 0, req)
            self.engine.sync()
        data["failed"] = [f.model_dump() for f in run.result.failed_runs[failed_before:]]
        files: dict[str, str] = {}
        if task.save and res is not None and res.images is not None:
            entries = save_images(self.dir, req, res.images, self.inputs)
            files = {e.file: e.sha256 for e in entries}
            data["entries"] = [e.model_dump(mode="json") for e in entries]
        import os

        record = TaskRecord(id=task.id, kind="bench", files=files, data=data,
                            worker={"index": self.index, "pid": os.getpid()})
        self.store.write(record)
        return record

    def regenerate(self, shape: int, request: int) -> np.ndarray | None:
        """The images of one request generated again (the reproducibility check)."""
        res = self.engine.generate(self.groups[shape][request])
        self.engine.sync()
        return res.images

    def repro_result(self, cfg: BenchConfig, prompt_id: str, seed: int, psnr: float | None) -> Any:
        """The :class:`~diffbench.bench.result.ReproResult` of this actor's engine for a PSNR (dB)."""
        return repro_result(self.engine, cfg, prompt_id, seed, psnr)

    def stop(self) -> None:
        """Stop the engine (release the device)."""
        self.engine.stop()


def one_device_class(workers: list[WorkerInfo]) -> list[str]:
    """The device classes of the actors, when there is one.

    Raises:
        UsageError: actors on several device classes (their timings cannot be pooled); names each class and how
            many actors it has.
    """
    classes = sorted({w.device_class for w in workers})
    if len(classes) > 1:
        counts = ", ".join(f"{c} ({sum(w.device_class == c for w in workers)} actors)" for c in classes)
        raise UsageError(f"bench --ray pools the timings of one device class, and the actors run on {counts}; bench "
                         "one class at a time (a cluster of one GPU model, or --ray-actors within one class)")
    return classes


def _unwrap(ray: Any, exc: BaseException) -> BaseException:
    """The diffbench error inside a Ray task error (the actor's own exception), else ``exc``."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, DiffbenchError):
        return cause
    return exc


def _read_png(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


class _Driver:
    """Dispatches tasks to actors, collects records, and assembles the result."""

    def __init__(self, ray: Any, actors: list[Any], tasks: list[BenchTask], records: dict[str, TaskRecord],
                 on_record: Callable[[], None]):
        self.ray, self.actors, self.tasks, self.records, self.on_record = ray, actors, tasks, records, on_record
        self.shape_errors: dict[int, str] = {}
        self.done_now = 0
        self.new_ids: list[str] = []  # tasks recorded by this run, in completion order
        self.per_actor = [0] * len(actors)

    def run(self) -> str | None:
        """Run every task not yet recorded; the message of the first actor death, None when all went well."""
        todo = deque(t for t in self.tasks if t.id not in self.records)
        inflight: dict[Any, tuple[int, BenchTask]] = {}
        idle = list(range(len(self.actors)))
        died: str | None = None
        last = 0.0
        while True:
            while idle and todo and died is None:
                task = todo.popleft()
                if task.shape in self.shape_errors:
                    continue
                a = idle.pop(0)
                inflight[self.actors[a].run.remote(task)] = (a, task)
            if not inflight:
                break
            ready, _ = self.ray.wait(list(inflight), num_returns=1)
            a, task = inflight.pop(ready[0])
            try:
                rec = self.ray.get(ready[0])
            except self.ray.exceptions.RayActorError as exc:
                died = died or f"actor {a} died while running task {task.id} ({type(exc).__name__})"
                continue  # a dead actor gets no more tasks
            except self.ray.exceptions.RayTaskError as exc:
                err = _unwrap(self.ray, exc)
                if not isinstance(err, GenerationError):
                    raise err from None
                self.shape_errors[task.shape] = str(err)  # one shape failed (e.g. out of memory): the rest goes on
                idle.append(a)
                continue
            self.records[task.id] = rec
            self.new_ids.append(task.id)
            self.done_now += 1
            self.per_actor[a] += 1
            idle.append(a)
            if time.monotonic() - last >= MANIFEST_EVERY_S:
                self.on_record()
                last = time.monotonic()
        return died


def assemble_shapes(groups: list[list[GenerationRequest]], tasks: list[BenchTask], records: dict[str, TaskRecord],
                    cfg: BenchConfig, fps: tuple[float | None, str | None], shape_errors: dict[int, str],
                    repros: dict[int, Any]) -> list[ShapeResult]:
    """Per-shape results from the task records, as a single process computes them from its runs: timed runs in
    task order, the warmup of the first actor that warmed the shape up, failed requests, the repro check."""
    out = []
    for si, group in enumerate(groups):
        run = ShapeRun(group[0])
        if run.result.frames is not None:
            run.result.fps, run.result.fps_source = fps
        warmed = False
        for t in (t for t in tasks if t.shape == si):
            rec = records.get(t.id)
            if rec is None:
                continue
            d = rec.data
            if d.get("warmup_s") and not warmed:
                warmed = True
                run.result.warmup_s = list(d["warmup_s"])
                run.result.warnings.extend(Note.model_validate(n) for n in d.get("notes", []))
            run.result.failed_runs.extend(FailedRun.model_validate(f) for f in d.get("failed", []))
            if t.phase == "timed" and "result" in d:
                add_timed(run, float(d["e2e_s"]), _unpack(d["result"]), float(d["pending_s"]))
        if si in shape_errors:
            run.result.error = shape_errors[si]
            run.result.warnings.append(Note(code="shape_failed", message=f"{run.result.shape}: {shape_errors[si]}"))
        run.result.repro = repros.get(si)
        out.append(run.finish(cfg))
    return out


def manifest_entries(tasks: list[BenchTask], records: dict[str, TaskRecord]) -> list[Any]:
    """The manifest entries of the recorded tasks, in task order (the order a single process writes them)."""
    from diffbench.core.manifest import ManifestEntry

    return [ManifestEntry.model_validate(e) for t in tasks if (r := records.get(t.id)) for e in r.data.get("entries", [])]


def run_distributed_session(opts: Any, address: str, actors: int | None,
                            on_update: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """``bench --save-outputs DIR --ray ADDRESS``: the whole bench on engine actors (module doc).

    Args:
        opts: the bench's :class:`~diffbench.bench.session.BenchOptions` (``save_outputs`` is required).
        address: ``local`` | ``auto`` | ``HOST:PORT`` (:func:`~diffbench.distributed.cluster.check_address`).
        actors: how many engine actors (None: one per GPU for a CUDA device, else the cluster's CPUs ÷ threads).
        on_update: gets the partial result as tasks finish.

    Raises:
        UsageError: no ``--save-outputs``, the http engine, or actors on different device classes.
        ActorDied: an actor died; the finished tasks are kept, rerun the same command to do the rest.
        ShapeError, ModelError, ...: as the single-process bench, raised by the first actor.
    """
    import diffbench
    from diffbench.bench.session import _conditions, _write, build_workload
    from diffbench.core.manifest import Manifest, write_manifest
    from diffbench.core.stats import PERCENTILE_METHOD

    if opts.save_outputs is None:
        raise UsageError("--ray distributes the outputs of a bench: add --save-outputs DIR (a directory every node "
                         "of the cluster sees; finished outputs are kept there and skipped on a rerun)")
    if opts.engine.engine == "http":
        raise UsageError("--ray with --engine http: a service is measured at its client; spread the client with "
                         "`diffbench load --workers N --ray ADDRESS` instead")
    cfg: BenchConfig = opts.protocol
    threads = opts.engine.threads or 1
    gpu = opts.engine.device.startswith("cuda")
    from diffbench.bench.session import preflight
    from diffbench.engines.registry import create_engine

    preflight(opts, create_engine(opts.engine))  # a shape the model cannot take: refused before Ray starts
    out_dir = Path(opts.save_outputs)
    store = TaskStore(out_dir)
    inputs = {i.sha256: i.name for i in opts.edit_inputs}
    with connect(address) as cluster:
        ray = import_ray()
        n = actors or default_actors(cluster, gpu=gpu, cpus_per_actor=threads)
        with actor_pool(BenchActor, n, tag="bench", num_cpus=threads, num_gpus=1 if gpu else 0, threads=threads,
                        args=(opts.engine, threads, str(out_dir.resolve()), inputs)) as handles:
            try:
                descs = ray.get([h.start.remote(i) for i, h in enumerate(handles)])
            except ray.exceptions.RayTaskError as exc:
                raise _unwrap(ray, exc) from None
            classes = one_device_class([d["worker"] for d in descs])
            info, env = descs[0]["info"], descs[0]["env"]
            requests = build_workload(opts, info)
            try:
                ray.get(handles[0].validate.remote(requests))
            except ray.exceptions.RayTaskError as exc:
                raise _unwrap(ray, exc) from None
            groups = group_by_shape(requests)
            ref = ray.put(groups)
            ray.get([h.set_workload.remote(ref, cfg) for h in handles])
            identity = {"engine": opts.engine.model_dump(mode="json", exclude={"threads"}), "threads": threads,
                        "sync": cfg.sync, "version": diffbench.__version__}
            tasks = plan_tasks(groups, cfg, identity)
            records = {t.id: rec for t in tasks if (rec := store.done(t.id)) is not None}
            by_id = {t.id: t for t in tasks}
            resumed = len(records)
            hw = descs[0]["worker"].device_class if not gpu else ", ".join(g.name for g in env.gpus)
            base = BenchResult(
                created_unix=time.time(), conditions=_conditions(info, requests, hw, env.driver, env.cuda), env=env,
                protocol=Protocol(
                    warmup_per_shape=None if cfg.warmup_auto else cfg.warmup, warmup_auto=cfg.warmup_auto,
                    max_warmup=cfg.max_warmup if cfg.warmup_auto else None, runs_per_shape=cfg.runs,
                    synchronized=cfg.sync, percentile_method=PERCENTILE_METHOD),
                outputs_dir=str(out_dir))
            manifest = Manifest(conditions=base.conditions.model_dump(mode="json"), fingerprint=descs[0]["fingerprint"])
            fps = (cfg.fps, "--fps") if cfg.fps else (info.fps, info.fps_source)
            driver = _Driver(ray, handles, tasks, records, on_record=lambda: None)

            def result(partial: bool, repros: dict[int, Any] | None = None) -> BenchResult:
                shapes = assemble_shapes(groups, tasks, records, cfg, fps, driver.shape_errors, repros or {})
                warm: dict[int, dict[str, list[float]]] = {}
                for tid in driver.new_ids:  # this run's warmups, per actor and shape
                    rec = records[tid]
                    if rec.data.get("warmup_s"):
                        t = by_id[tid]
                        label = shape_label(groups[t.shape][0])
                        warm.setdefault(int(rec.worker["index"]), {})[label] = list(rec.data["warmup_s"])
                workers = [d["worker"].model_copy(update={"tasks": driver.per_actor[i], "warmup_s": warm.get(i, {})})
                           for i, d in enumerate(descs)]
                dist = DistributedRun(address=cluster.address, ray_version=cluster.ray_version, nodes=len(cluster.nodes),
                                      actors=workers, tasks=len(tasks), resumed=resumed, done_now=driver.done_now,
                                      not_done=len(tasks) - len(records), repro_across_actors=bool(repros) and n > 1)
                r = base.model_copy(update={"shapes": shapes, "partial": partial, "distributed": dist}).with_primary()
                if not cfg.sync:
                    r = r.model_copy(update={"valid": False})
                notes = [Note(code="distributed", message=(
                    f"distributed over {n} actor{'s' if n > 1 else ''} on {len(cluster.nodes)} node(s) "
                    f"({classes[0]}, {threads} thread(s) each): every timed run ran on one actor's device; the "
                    "statistics pool the runs of all actors"))]
                if resumed:
                    notes.append(Note(code="resumed", message=(
                        f"{resumed} of {len(tasks)} tasks were finished by an earlier run of this command (records and "
                        f"output sha256 checked in {out_dir}) and were not redone; their timings are in the statistics")))
                r.warnings.extend(notes)
                return r

            def flush(partial: bool) -> BenchResult:
                manifest.entries = manifest_entries(tasks, records)
                write_manifest(out_dir, manifest)
                r = result(partial)
                _write(opts, r, markdown=not partial)
                if on_update:
                    on_update(r)
                return r

            driver.on_record = lambda: flush(partial=True)
            try:
                died = driver.run()
            except KeyboardInterrupt:
                flush(partial=True)
                raise
            if died is not None:
                flush(partial=True)
                raise ActorDied(f"{died}; {len(records)} of {len(tasks)} tasks are finished and kept in {out_dir} "
                                "(records and outputs); rerun the same command to do only the remaining "
                                f"{len(tasks) - len(records)}")
            repros = _repro(ray, handles, groups, tasks, records, cfg, out_dir, set(driver.shape_errors)) \
                if cfg.repro else {}
            manifest.entries = manifest_entries(tasks, records)
            write_manifest(out_dir, manifest)
            r = result(False, repros)
            _write(opts, r, markdown=True)
            ray.get([h.stop.remote() for h in handles])
            return r


def _repro(ray: Any, handles: list[Any], groups: list[list[GenerationRequest]], tasks: list[BenchTask],
           records: dict[str, TaskRecord], cfg: BenchConfig, out_dir: Path, skip: set[int]) -> dict[int, Any]:
    """Per shape (but the failed ones, ``skip``): its first saved output generated again on another actor than the
    one that made it (when there are several), compared with the saved PNG (PSNR, dB); a generation that fails
    here leaves the PSNR unknown (None)."""
    from diffbench.core.psnr import psnr_uint8

    out = {}
    for si in range(len(groups)):
        if si in skip:
            continue
        first = next((t for t in tasks if t.shape == si and t.save and (r := records.get(t.id)) and r.data.get("entries")),
                     None)
        if first is None or any(e.get("frames") for e in records[first.id].data["entries"]):
            # no saved picture of this shape (its outputs are another shape's files) or a video: generate its first
            # request on actor 0 and on another actor
            request, maker = 0, 0
            ref = _get_images(ray, handles[0].regenerate.remote(si, 0))
        else:
            rec = records[first.id]
            request, maker = first.request, int(rec.worker.get("index", 0))
            ref = np.stack([_read_png(out_dir / e["file"]) for e in rec.data["entries"]])
        other = handles[(maker + 1) % len(handles)]
        again = _get_images(ray, other.regenerate.remote(si, request))
        ok = ref is not None and again is not None and again.shape == ref.shape
        psnr = psnr_uint8(ref, again) if ok else None
        req = groups[si][request]
        out[si] = ray.get(other.repro_result.remote(cfg, req.prompt_id, req.seed, psnr))
    return out


def _get_images(ray: Any, ref: Any) -> np.ndarray | None:
    """The images of a ``regenerate`` call; None when that generation failed (GenerationError)."""
    try:
        return ray.get(ref)  # type: ignore[no-any-return]
    except ray.exceptions.RayTaskError as exc:
        if isinstance(_unwrap(ray, exc), GenerationError):
            return None
        raise _unwrap(ray, exc) from None
