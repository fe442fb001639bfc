"""The pure half of the distributed bench (no Ray): its tasks with deterministic ids, the device-class rule, and
the assembly of per-shape results and manifest entries from task records (see :mod:`diffbench.distributed.bench`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from diffbench.bench.protocol import BenchConfig, ShapeRun, add_timed
from diffbench.bench.result import FailedRun, Note, ShapeResult, WorkerInfo
from diffbench.distributed.taskstore import TaskRecord, task_id, unpack
from diffbench.engines.base import GenerationRequest
from diffbench.engines.instrument.energy import EnergyTally, Unavailable
from diffbench.errors import UsageError


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


class _RecordedMeter:
    """The meter an actor named in its task records (source and scope), for :class:`EnergyTally` sums."""

    def __init__(self, source: str, scope: str) -> None:
        self.source, self.scope = source, scope

    def read(self) -> Unavailable:  # never read: the windows were measured on the actors
        return Unavailable("read on the actors")


def shared_counter_reason(workers: Sequence[WorkerInfo]) -> str | None:
    """Why the actors' energy windows overlap, else None: CPU actors on one node read one CPU package counter
    (RAPL), so a window of one actor holds the others' work too. GPU actors each read their own device."""
    per_node = Counter(w.node_ip for w in workers if not w.device.startswith("cuda"))
    crowded = sorted(node for node, n in per_node.items() if n > 1)
    if not crowded:
        return None
    return (f"{per_node[crowded[0]]} CPU actors on node {crowded[0]} share its package energy counter, so each "
            "timed run's window also holds the others' work; run one CPU actor per node to measure energy")


def energy_tally(records: Sequence[dict[str, Any]], shared: str | None) -> EnergyTally | None:
    """The summed energy windows of a shape's timed-run records (``data["energy"]`` of each), None when no
    record carries one (records of an older version); a window that was not measured, or ``shared``, makes
    the shape's energy not available with that reason."""
    windows = [d["energy"] for d in records if "energy" in d]
    if not windows:
        return None
    tally = EnergyTally(_RecordedMeter(str(windows[0].get("source", "")), str(windows[0].get("scope", ""))))
    tally.unavailable = Unavailable(shared) if shared else None
    for w in windows:
        if "unavailable" in w:
            tally.unavailable = tally.unavailable or Unavailable(str(w["unavailable"]))
            continue
        tally.joules += float(w["joules"])
        tally.seconds += float(w["seconds"])
        tally.windows += 1
    if len(windows) < len(records):
        tally.unavailable = tally.unavailable or Unavailable("some timed runs were recorded without a reading")
    return tally


def assemble_shapes(groups: list[list[GenerationRequest]], tasks: list[BenchTask], records: dict[str, TaskRecord],
                    cfg: BenchConfig, fps: tuple[float | None, str | None], shape_errors: dict[int, str],
                    repros: dict[int, Any], energy_shared: str | None = None) -> list[ShapeResult]:
    """Per-shape results from the task records, as a single process computes them from its runs: timed runs in
    task order, the warmup of the first actor that warmed the shape up, failed requests, the repro check, and
    the energy the actors read around each timed run (:func:`energy_tally`; ``energy_shared``: why their
    windows overlap, :func:`shared_counter_reason`)."""
    out = []
    for si, group in enumerate(groups):
        run = ShapeRun(group[0])
        timed_data = [rec.data for t in tasks if t.shape == si and t.phase == "timed"
                      and (rec := records.get(t.id)) is not None and "result" in rec.data]
        run.energy = energy_tally(timed_data, energy_shared)
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
                add_timed(run, float(d["e2e_s"]), unpack(d["result"]), float(d["pending_s"]))
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


