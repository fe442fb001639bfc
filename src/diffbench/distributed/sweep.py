"""``diffbench sweep --ray ADDRESS``: the single-process sweep protocol on every device, results pooled.

Work split: the prompts are dealt to ``N`` shards by position (prompt *i* → shard ``i % N``, every seed of a
prompt with it; :func:`diffbench.sweep.runner.requests_for` with ``SweepOptions.shard``). One Ray actor per
shard (one per GPU, or ``N`` CPU actors with ``threads`` torch threads each) runs
:func:`~diffbench.sweep.runner.run_sweep` unchanged on its shard: baseline outputs, quality noise floor, and
the baseline and every value warm and interleaved on **its own device**, so every ratio is measured on one
device. The environment (GPU names, driver, CPU) is captured inside the actor.

Storage (a directory every node sees, next to the driver's store): ``ray-sweeps/<key>/shard-<i>-of-<N>.sqlite``
is the shard's own run store (its outputs beside it, or under ``--outputs/<key>/shard-<i>``), so a rerun resumes
each shard exactly as a single-process sweep resumes (finished points are reused); ``shard-<i>-of-<N>.json`` is
written atomically as soon as that actor returns (streamed), and a rerun with ``resume`` reuses it without
starting an actor. An actor that dies or fails leaves the other shards' files in place.

Combination (:mod:`diffbench.sweep.combine`): devices are grouped by device class (GPU names and driver, or the
CPU model); within a group the per-device speed-ups are pooled (block-weighted geometric mean, stratified
paired bootstrap interval, pooled noise floor) and the per-image quality values are merged; each group is
reported as a :class:`~diffbench.sweep.models.SweepResult`. Devices of different classes are never pooled.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from diffbench.distributed.cluster import ClusterInfo, niceness_warning, process_nice
from diffbench.errors import DiffbenchError, UsageError
from diffbench.sweep.bootstrap import SpeedupCI
from diffbench.sweep.combine import POOLED, DeviceSamples
from diffbench.sweep.models import SweepOptions, SweepResult

Event = Callable[[str], None]


class ShardResult(BaseModel):
    """One device's sweep: its shard, where it ran, its class, fingerprint and the single-process result.

    ``samples``: per value, the interleaved baseline and candidate latencies (seconds, paired by block).
    ``floor_baseline_s``: the baseline samples of the newest session (the timing noise floor). ``psnr`` /
    ``ssim``: per value (and ``"noise-floor"``), the per-image values (dB / unitless) by image key.
    ``skipped``: per value, (computed, total) cache-hooked computations (None for option axes).
    ``fingerprint``: the baseline's deployment fingerprint plus the actor's node, GPUs, driver, CUDA and CPU.
    ``nice``: the nice value the shard's process ran at (Ray's default for workers is 15; None: not known).
    """

    shard: int
    shards: int
    node: str
    device_class: str
    fingerprint: dict[str, object]
    result: SweepResult
    samples: dict[str, DeviceSamples]
    floor_baseline_s: list[float]
    psnr: dict[str, dict[str, float]]
    ssim: dict[str, dict[str, float]]
    skipped: dict[str, tuple[int, int] | None] = {}
    resumed: bool = False
    wall_s: float = 0.0
    nice: int | None = None


class DeviceGroup(BaseModel):
    """The pooled result of the devices of one class."""

    device_class: str
    shards: list[int]
    result: SweepResult


class RaySweepResult(BaseModel):
    """Per-device results, one pooled result per device class, and what failed."""

    kind: str = "diffbench.sweep.ray"
    key: str
    axis: str
    values: list[str]
    directory: str
    cluster: ClusterInfo | None = None
    method: str = POOLED
    shards: list[ShardResult] = []
    groups: list[DeviceGroup] = []
    failed: dict[int, str] = {}
    partial: bool = False
    warnings: list[str] = []


def sweep_key(opts: SweepOptions, count: int) -> str:
    """sha256 (16 hex) of the options (without the shard and ``resume``) and the shard count: the distributed
    sweep's folder (``--no-resume`` redoes the same sweep in the same folder)."""
    data = opts.model_copy(update={"shard": None, "resume": True}).model_dump(mode="json")
    return hashlib.sha256(json.dumps([data, count], sort_keys=True, default=str).encode()).hexdigest()[:16]


def prompt_count(opts: SweepOptions) -> int:
    """How many prompts the sweep has (the shards split them)."""
    from diffbench.sweep.models import TINY_DEFAULTS, TINY_PROMPTS

    if opts.prompts_file is not None:
        from diffbench.workload.prompts import load_prompt_file

        return len(load_prompt_file(opts.prompts_file))
    return opts.num_prompts or (TINY_PROMPTS if opts.engine.model in TINY_DEFAULTS else None) or 20


class SweepActor:
    """Runs one shard of a sweep with the single-process runner (a plain class; made remote by ``actor_pool``)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def run(self, opts_json: str, store_path: str) -> ShardResult:
        """Run (or resume) the shard in ``opts_json`` against the run store at ``store_path``."""
        opts = SweepOptions.model_validate_json(opts_json)
        if opts.engine.engine == "diffusers":
            import torch

            torch.set_num_threads(self.threads)
        return shard_run(opts, Path(store_path))


def shard_run(opts: SweepOptions, store_path: Path) -> ShardResult:
    """One shard, in this process: :func:`~diffbench.sweep.runner.run_sweep`, then what the driver pools (the
    interleaved samples, per-image quality values, the node's GPU, driver and CPU)."""
    from diffbench.core.env import capture_env
    from diffbench.store.runs import RunStore
    from diffbench.sweep.combine import device_class
    from diffbench.sweep.pairs import load_images, pair_values
    from diffbench.sweep.runner import run_sweep

    assert opts.shard is not None
    t0 = time.monotonic()
    env = capture_env()
    with RunStore.open(store_path, mkdir=True) as st:
        result = run_sweep(opts, st)
        base = st.get_run(result.baseline.run_id)
        noise = [r for r in st.list_runs(sweep_id=result.sweep_id, kind="noise-floor") if r.status == "done"
                 and r.quality is not None and r.quality.against_run == base.id]
        runs = {p.value: st.get_run(p.run_id) for p in result.points}
    base_images = load_images(Path(base.outputs_dir or ""))
    psnr: dict[str, dict[str, float]] = {}
    ssim: dict[str, dict[str, float]] = {}
    samples: dict[str, DeviceSamples] = {}
    skipped: dict[str, tuple[int, int] | None] = {}
    newest: tuple[float, list[float]] = (-1.0, [])
    for value, run in runs.items():
        t = run.timing
        assert t is not None and t.baseline_samples_s
        samples[value] = DeviceSamples(baseline_s=list(t.baseline_samples_s), candidate_s=list(t.samples_s))
        end = (t.measured_unix or (0.0, 0.0))[1]
        if end > newest[0]:
            newest = (end, list(t.baseline_samples_s))
        psnr[value], ssim[value] = pair_values(base_images, load_images(Path(run.outputs_dir or "")), opts.ssim)
        skipped[value] = (run.skipped.computed, run.skipped.total) if run.skipped else None
    if noise:
        latest = max(noise, key=lambda r: r.created_unix)
        psnr["noise-floor"], ssim["noise-floor"] = pair_values(
            base_images, load_images(Path(latest.outputs_dir or "")), opts.ssim)
    device = result.baseline.conditions.device
    gpus = [g.name for g in env.gpus]
    fp = {**base.fingerprint, "gpus": gpus, "driver": env.driver, "cuda": env.cuda, "cpu": env.cpu,
          "node": _node_ip()}
    index, count = opts.shard
    return ShardResult(shard=index, shards=count, node=str(fp["node"]), fingerprint=fp,
                       device_class=device_class(device, gpus, env.driver, env.cpu), result=result, samples=samples,
                       floor_baseline_s=newest[1], psnr=psnr, ssim=ssim, skipped=skipped,
                       wall_s=time.monotonic() - t0, nice=process_nice())


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address()) if ray.is_initialized() else "local"
    except Exception:  # outside Ray (a shard run in-process)
        return "local"


def pool_group(opts: SweepOptions, device_cls: str, shards: list[ShardResult]) -> SweepResult:
    """The pooled :class:`SweepResult` of the devices of one class (module doc; :mod:`diffbench.sweep.combine`).

    Raises:
        ValueError: shards of different device classes, or without a common value.
    """
    from diffbench.core.stats import summarize
    from diffbench.sweep.combine import pooled_noise_floor, pooled_speedup_ci
    from diffbench.sweep.models import PointResult, RunRef
    from diffbench.sweep.pairs import quality_of
    from diffbench.sweep.working_point import choose, default_gates, gate_rows, speed_verdict

    if any(s.device_class != device_cls for s in shards):
        raise ValueError(f"pool_group({device_cls!r}): shards of other device classes "
                         f"{sorted({s.device_class for s in shards} - {device_cls})} are never pooled")
    gates = list(opts.gates) or default_gates(opts.budget_db)
    first = shards[0].result
    base_ids = "+".join(s.result.baseline.run_id for s in shards)
    noise_q = None
    if all("noise-floor" in s.psnr for s in shards):
        noise_q = quality_of(_merge(s.psnr["noise-floor"] for s in shards),
                             _merge(s.ssim["noise-floor"] for s in shards), base_ids)
    floor = pooled_noise_floor([s.floor_baseline_s for s in shards], opts.bootstrap_resamples, opts.bootstrap_seed)
    points = []
    for value in opts.values:
        devs = [s.samples[value] for s in shards]
        sp = pooled_speedup_ci(devs, resamples=opts.bootstrap_resamples, seed=opts.bootstrap_seed)
        skips = [s.skipped.get(value) for s in shards]
        skipped = (1.0 - sum(k[0] for k in skips if k) / sum(k[1] for k in skips if k)
                   if all(k is not None and k[1] > 0 for k in skips) else None)
        fast, verdict = speed_verdict(sp, floor, skipped)
        quality = quality_of(_merge(s.psnr[value] for s in shards), _merge(s.ssim[value] for s in shards), base_ids)
        rows = gate_rows(quality, gates, noise_q)
        one = next(p for p in first.points if p.value == value)
        points.append(PointResult(
            value=value, run_id="+".join(next(p.run_id for p in s.result.points if p.value == value) for s in shards),
            conditions=one.conditions, latency_s=summarize([x for d in devs for x in d.candidate_s], check=()),
            speedup=sp.speedup, speedup_ci=(sp.low, sp.high), speedup_detail=sp, noise_floor=floor,
            measurably_faster=fast, verdict=verdict, quality=quality, skipped_steps=skipped, gates=rows,
            passed=all(r.gate.passed for r in rows), resumed=all(s.resumed for s in shards),
        ))
    live = [x for s in shards for x in s.floor_baseline_s]
    result = SweepResult(
        sweep_id=base_ids, created_unix=time.time(), partial=False, axis=opts.axis, field=first.field,
        store=",".join(s.result.store for s in shards),
        baseline=RunRef(run_id=base_ids, conditions=first.baseline.conditions,
                        latency_s=summarize(live, check=()) if live else None),
        noise_floor=noise_q, noise_floor_psnr=noise_q.psnr if noise_q else None, timing_floor=floor, gates=gates,
        budget_db=None if opts.gates else opts.budget_db, points=points,
        warnings=list(dict.fromkeys(w for s in shards for w in s.result.warnings)),
        # every device warmed each arm itself: the pooled lists hold all devices' warmup times, in shard order
        # (the per-device lists stay in each shard's result)
        warmup_s={k: [x for s in shards for x in s.result.warmup_s.get(k, [])]
                  for k in dict.fromkeys(k for s in shards for k in s.result.warmup_s)},
    )
    result.working_point = choose(points, gates)
    return result


def _merge(parts: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in parts:
        out.update(p)
    return out


def combine(opts: SweepOptions, shards: list[ShardResult]) -> list[DeviceGroup]:
    """One pooled group per device class (first-seen order), never pooling across classes."""
    from diffbench.sweep.combine import group_by_class

    ordered = sorted(shards, key=lambda s: s.shard)
    groups = group_by_class([s.device_class for s in ordered])
    return [DeviceGroup(device_class=c, shards=[ordered[i].shard for i in idx],
                        result=pool_group(opts, c, [ordered[i] for i in idx])) for c, idx in groups.items()]


def run_sweep_ray(opts: SweepOptions, store_path: Path, address: str, *, actors: int | None = None,
                  threads: int = 1, on_event: Event | None = None,
                  on_shard: Callable[[ShardResult], None] | None = None) -> RaySweepResult:
    """Run (or resume) a sweep on a Ray cluster, one shard of the prompts per actor (module doc).

    Args:
        opts: the sweep options (``shard`` unset; ``engine.device`` ``cpu`` or ``cuda``).
        store_path: the driver's run store; the shards live in ``<its folder>/ray-sweeps/<key>/`` (a path
            every node must see).
        address: ``local`` | ``auto`` | ``[ray://]HOST:PORT``.
        actors: actors (= shards); default one per GPU for ``cuda``, else the cluster's CPUs // ``threads``.
        threads: torch intra-op threads per CPU actor.
        on_event: progress messages. on_shard: each shard's result as it arrives (streamed).

    Returns:
        Per-device results and one pooled result per device class; ``partial`` and ``failed`` when an actor
        failed (the finished shards are kept on disk; rerun to complete only the rest).

    Raises:
        UsageError: ``cuda:N`` (Ray assigns the GPU), more actors than prompts, or the cluster lacks the
            resources for the actors.
        ActorDied: an actor or its node died (exit 5); raised after the result of the others is saved, with
            ``result`` set on the exception.
        MissingDependencyError: ray is not installed.
    """
    from diffbench.core.jsonio import write_json_atomic
    from diffbench.distributed.cluster import ActorDied, actor_pool, connect, default_actors, import_ray

    event = on_event or (lambda _m: None)
    device = opts.engine.device
    gpu = device.startswith("cuda")
    if gpu and device != "cuda":
        raise UsageError(f"--device {device} with --ray: Ray gives each actor its own GPU; use --device cuda")
    n_prompts = prompt_count(opts)
    with connect(address) as info:
        n = actors or default_actors(info, gpu=gpu, cpus_per_actor=threads)
        if n > n_prompts:
            raise UsageError(f"--ray-actors {n}: {n_prompts} prompt(s) cannot be split over {n} devices; use at most "
                             f"{n_prompts} actors or more prompts (--num-prompts / --prompts)")
        key = sweep_key(opts, n)
        root = store_path.parent / "ray-sweeps" / key
        root.mkdir(parents=True, exist_ok=True)
        out = RaySweepResult(key=key, axis=opts.axis, values=list(opts.values), directory=str(root), cluster=info)
        jobs: dict[int, SweepOptions] = {}
        for i in range(n):
            outputs = opts.outputs_dir / key / f"shard-{i}" if opts.outputs_dir is not None else None
            shard_opts = opts.model_copy(update={"shard": (i, n), "outputs_dir": outputs})
            if not gpu:
                shard_opts = shard_opts.model_copy(update={"engine": opts.engine.model_copy(update={"threads": threads})})
            done = _stored(root, i, n) if opts.resume else None
            if done is not None:
                out.shards.append(done)
                event(f"shard {i + 1}/{n}: from {root} (resumed)")
                if on_shard is not None:
                    on_shard(done)
            else:
                jobs[i] = shard_opts
        died: list[int] = []
        first_error: BaseException | None = None
        if jobs:
            ray = import_ray()
            event(f"{len(jobs)} shard(s) on {len(jobs)} actor(s) ({'one GPU' if gpu else f'{threads} thread(s)'} each)")
            with actor_pool(SweepActor, len(jobs), tag="sweep", args=(threads,),
                            num_cpus=1 if gpu else threads, num_gpus=1 if gpu else 0, threads=threads) as handles:
                refs = {h.run.remote(jobs[i].model_dump_json(), str(root / f"shard-{i}-of-{n}.sqlite")): i
                        for h, i in zip(handles, sorted(jobs), strict=True)}
                while refs:
                    ready, _ = ray.wait(list(refs), num_returns=1)
                    for ref in ready:
                        i = refs.pop(ref)
                        try:
                            shard = ray.get(ref)
                        except ray.exceptions.RayActorError as exc:
                            died.append(i)
                            out.failed[i] = f"actor died: {exc}".splitlines()[0]
                            continue
                        except ray.exceptions.RayTaskError as exc:
                            cause = getattr(exc, "cause", None)
                            out.failed[i] = f"{type(cause or exc).__name__}: {cause or exc}".splitlines()[0]
                            first_error = first_error or cause or exc
                            continue
                        write_json_atomic(root / f"shard-{i}-of-{n}.json", shard_json(shard))
                        out.shards.append(shard)
                        event(f"shard {i + 1}/{n} done on {shard.node} ({shard.device_class}) in {shard.wall_s:.1f} s")
                        if on_shard is not None:
                            on_shard(shard)
        out.shards.sort(key=lambda s: s.shard)
        if out.shards:
            out.groups = combine(opts, out.shards)
        low = niceness_warning([(sh.node, sh.nice) for sh in out.shards], "timings")
        if low:
            out.warnings.append(low)
        if len(out.groups) > 1:
            out.warnings.append("devices of different classes are reported per class, never pooled: "
                                + "; ".join(f"{g.device_class} (shards {g.shards})" for g in out.groups))
        out.partial = bool(out.failed)
        if out.failed:
            out.warnings.append(f"{len(out.failed)} of {n} shard(s) failed ({sorted(out.failed)}); the pooled "
                                f"result covers only the finished shards; rerun the same command to complete the rest")
        if died:
            exc = ActorDied(f"sweep --ray: the actor(s) of shard(s) {sorted(died)} died; the {len(out.shards)} "
                            f"finished shard(s) are kept in {root}; rerun the same command to complete only the rest")
            exc.result = out  # type: ignore[attr-defined]
            raise exc
        if isinstance(first_error, DiffbenchError):
            first_error.result = out  # type: ignore[attr-defined]
            raise first_error
        if first_error is not None:
            raise DiffbenchError(f"sweep --ray: shard(s) {sorted(out.failed)} failed ({out.failed}); the finished "
                                 f"shards are kept in {root}") from None
        return out


def shard_json(shard: ShardResult) -> Any:
    """A shard result as strict JSON (non-finite floats as "inf"/"-inf"/"nan" strings, read back by pydantic)."""
    from diffbench.core.jsonio import strict_json_value

    return strict_json_value(shard.model_dump(mode="python"))


def _stored(root: Path, i: int, n: int) -> ShardResult | None:
    path = root / f"shard-{i}-of-{n}.json"
    if not path.is_file():
        return None
    try:
        shard = ShardResult.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return shard.model_copy(update={"resumed": True})


def speedup_line(ci: SpeedupCI) -> str:
    """``1.234x (1.100-1.300)``."""
    return f"{ci.speedup:.3f}x ({ci.low:.3f}-{ci.high:.3f})"


def to_csv(result: RaySweepResult) -> str:
    """The pooled curve of every device class (:func:`diffbench.report.sweep_report.to_csv`), with a leading
    ``device_class`` column; the per-device results are in the JSON."""
    from diffbench.report.sweep_report import to_csv as curve_csv

    lines: list[str] = []
    for g in result.groups:
        head, *rows = curve_csv(g.result).splitlines()
        if not lines:
            lines.append("device_class," + head)
        cls = '"' + g.device_class.replace('"', '""') + '"'
        lines += [f"{cls},{r}" for r in rows]
    return "\n".join(lines) + "\n" if lines else ""


def print_console(result: RaySweepResult, console: Any) -> None:
    """Per-device speed-ups (each measured on one device), then the pooled curve of each device class."""
    from rich.table import Table

    from diffbench.report.sweep_report import print_console as curve_console

    t = Table(title=f"sweep --ray {result.key}: per device ({len(result.shards)} finished, {len(result.failed)} "
                    f"failed)")
    for col in ("shard", "node", "device class", result.axis, "speed-up (95 % CI)", "noise floor (95 % CI)",
                "verdict", "psnr p10"):
        t.add_column(col)
    for s in result.shards:
        for p in s.result.points:
            t.add_row(f"{s.shard + 1}/{s.shards}" + (" (resumed)" if s.resumed else ""), s.node, s.device_class,
                      p.value, speedup_line(p.speedup_detail), speedup_line(p.noise_floor) if p.noise_floor else "—",
                      p.verdict, f"{p.quality.psnr.p10:.2f}")
    for i, msg in sorted(result.failed.items()):
        t.add_row(f"{i + 1}", "—", "—", "—", "—", "—", f"FAILED: {msg}", "—")
    console.print(t)
    for g in result.groups:
        console.print(f"[bold]pooled over device class {g.device_class}[/bold] (shards "
                      f"{', '.join(str(i + 1) for i in g.shards)}): {result.method}")
        curve_console(g.result, console)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
