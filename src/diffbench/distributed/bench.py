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

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from diffbench.bench.protocol import BenchConfig, group_by_shape, shape_label
from diffbench.bench.result import BenchResult, DistributedRun, Note
from diffbench.distributed.bench_actor import BenchActor
from diffbench.distributed.bench_tasks import (
    BenchTask,
    assemble_shapes,
    manifest_entries,
    one_device_class,
    plan_tasks,
    shared_counter_reason,
)
from diffbench.distributed.cluster import (
    ActorDied,
    actor_pool,
    connect,
    default_actors,
    import_ray,
    niceness_warning,
)
from diffbench.distributed.taskstore import TaskRecord, TaskStore, decodes
from diffbench.engines.base import GenerationRequest
from diffbench.errors import DiffbenchError, GenerationError, UsageError

MANIFEST_EVERY_S = 1.0  # the driver rewrites manifest.json and the partial JSON at most this often


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
    from diffbench.bench.session import base_result, build_workload, write_result
    from diffbench.core.manifest import Manifest, write_manifest

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
            records = {t.id: rec for t in tasks if (rec := decodes(store.done(t.id), "result")) is not None}
            by_id = {t.id: t for t in tasks}
            resumed = len(records)
            hw = descs[0]["worker"].device_class if not gpu else ", ".join(g.name for g in env.gpus)
            base = base_result(cfg, info, requests, env, hw, outputs_dir=str(out_dir))
            manifest = Manifest(conditions=base.conditions.model_dump(mode="json"), fingerprint=descs[0]["fingerprint"])
            fps = (cfg.fps, "--fps") if cfg.fps else (info.fps, info.fps_source)
            driver = _Driver(ray, handles, tasks, records, on_record=lambda: None)

            def result(partial: bool, repros: dict[int, Any] | None = None, interrupted: bool = False) -> BenchResult:
                shapes = assemble_shapes(groups, tasks, records, cfg, fps, driver.shape_errors, repros or {},
                                         energy_shared=shared_counter_reason([d["worker"] for d in descs]))
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
                r = base.model_copy(update={"shapes": shapes, "partial": partial, "interrupted": interrupted,
                                            "distributed": dist}).with_primary()
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
                if not partial or interrupted:
                    notes.extend(busy_notes(ray, handles, descs, threads))
                low = niceness_warning([(w.node_ip, w.nice) for w in workers], "timings")
                if low:
                    notes.append(Note(code="actor_niceness", message=low))
                if interrupted:
                    notes.append(Note(code="interrupted", message="interrupted: results cover the tasks done so far"))
                r.warnings.extend(notes)
                return r

            def flush(partial: bool, interrupted: bool = False) -> BenchResult:
                manifest.entries = manifest_entries(tasks, records)
                write_manifest(out_dir, manifest)
                r = result(partial, interrupted=interrupted)
                write_result(opts, r, markdown=not partial)
                if on_update:
                    on_update(r)
                return r

            driver.on_record = lambda: flush(partial=True)
            try:
                died = driver.run()
            except KeyboardInterrupt:
                flush(partial=True, interrupted=True)
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
            write_result(opts, r, markdown=True)
            ray.get([h.stop.remote() for h in handles])
            return r


def busy_notes(ray: Any, handles: list[Any], descs: list[dict[str, Any]], threads: int) -> list[Note]:
    """``machine_busy`` for each node where other work competed with this run's actors.

    Each node's 1-minute load average counts this run's own actors there (``k`` actors x ``threads``, at most its
    CPUs); the node is busy when the rest exceeds ``0.75 x CPUs - threads``: the allowance of the single-process
    rule (load average above 0.75 x CPUs, one bench of ``threads`` threads included), kept per actor. A node whose
    actors cannot answer (dead, or no load average on its OS) gives no note.
    """
    by_node: dict[str, list[int]] = {}
    for i, d in enumerate(descs):
        by_node.setdefault(str(d["worker"].node_ip), []).append(i)
    notes = []
    for ip, idx in by_node.items():
        try:
            got = ray.get(handles[idx[0]].load.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - a dead or slow actor: no reading, no note
            continue
        if got is None:
            continue
        load, cpus = got
        own = min(float(cpus), len(idx) * threads)
        if load - own > 0.75 * cpus - threads:
            notes.append(Note(code="machine_busy", message=(
                f"node {ip} was busy while timing (1-minute load average {load:.1f} on {cpus} CPUs, about "
                f"{own:g} of it this run's {len(idx)} actor(s)): timings are slower and more spread than on a "
                "quiet machine")))
    return notes


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
