"""The pure half of the distributed bench: task planning and the assembly of results from task records, checked
against the single-process protocol on the same runs (no Ray cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diffbench.bench.protocol import BenchConfig, group_by_shape, run_bench
from diffbench.distributed.bench_tasks import assemble_shapes, manifest_entries, plan_tasks
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine


def _requests(shapes: list[tuple[int, int]], prompts: int, seeds: list[int]) -> list[GenerationRequest]:
    return [GenerationRequest(prompt=f"p{p}", prompt_id=f"p{p}", height=h, width=w, steps=4, seed=s)
            for h, w in shapes for p in range(prompts) for s in seeds]


def test_tasks_follow_the_single_process_order_and_saves() -> None:
    groups = group_by_shape(_requests([(64, 64), (64, 32)], prompts=3, seeds=[0, 1]))
    cfg = BenchConfig(runs=4, warmup=0)
    tasks = plan_tasks(groups, cfg, {"engine": "x"})
    # per shape: 4 timed runs cycling through the 6 requests, then untimed outputs for the 2 no run reached
    # (the second shape's outputs share the first's file names: a single process saves them once)
    assert [(t.shape, t.phase, t.request) for t in tasks] == [
        (0, "timed", 0), (0, "timed", 1), (0, "timed", 2), (0, "timed", 3), (0, "output", 4), (0, "output", 5),
        (1, "timed", 0), (1, "timed", 1), (1, "timed", 2), (1, "timed", 3)]
    assert [t.save for t in tasks] == [True] * 6 + [False] * 4
    assert len({t.id for t in tasks}) == len(tasks)
    assert [t.id for t in plan_tasks(groups, cfg, {"engine": "x"})] == [t.id for t in tasks]  # deterministic
    assert not {t.id for t in plan_tasks(groups, cfg, {"engine": "y"})} & {t.id for t in tasks}  # config in the id


def test_assembled_shapes_equal_the_single_process_protocol(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from diffbench.distributed.bench_actor import BenchActor

    sim = EngineConfig(engine="sim", sim=SimParams(compile_s=0.5, seed=3))
    requests = _requests([(256, 256), (128, 128)], prompts=2, seeds=[0, 1])
    cfg = BenchConfig(runs=5, warmup=1, repro=False)
    engine = create_engine(sim)
    engine.start()
    one = run_bench(engine, requests, cfg)
    actor = BenchActor(sim, threads=1, out_dir=str(tmp_path), inputs={})
    actor.start(0)
    groups = group_by_shape(requests)
    actor.set_workload(groups, cfg)
    tasks = plan_tasks(groups, cfg, {"engine": "sim"})
    records = {t.id: actor.run(t) for t in tasks}  # one actor running every task in order: the same runs
    got = assemble_shapes(groups, tasks, records, cfg, (None, None), {}, {})
    for a, b in zip(one, got, strict=True):
        assert b.samples_s == a.samples_s and b.warmup_s == a.warmup_s
        assert b.latency_s == a.latency_s and b.stages_s == a.stages_s and b.step_s == a.step_s
        assert b.energy == a.energy and b.energy is not None  # the sim: not available, with the same reason
    assert len(manifest_entries(tasks, records)) == 4  # 2 prompts x 2 seeds, saved once


class _CountingMeter:
    """A fake counter: each read adds ``step`` joules (so every timed window holds exactly ``step``)."""

    source, scope = "nvml", "GPU fake"

    def __init__(self, step: float) -> None:
        self.step, self.total = step, 0.0

    def read(self) -> float:
        self.total += self.step
        return self.total


def test_actor_energy_windows_sum_like_the_single_process(tmp_path: Path) -> None:
    """Each actor reads its device counter around each timed run; the driver sums the windows per shape into
    the same J per output and W as a single process reading the same counter."""
    pytest.importorskip("ray")
    from diffbench.distributed.bench_actor import BenchActor
    from diffbench.engines.instrument.energy import EnergyTally

    sim = EngineConfig(engine="sim", sim=SimParams(compile_s=0.0, seed=3))
    requests = _requests([(64, 64)], prompts=1, seeds=[0, 1])
    cfg = BenchConfig(runs=4, warmup=1, repro=False)
    engine = create_engine(sim)
    engine.start()
    (one,) = run_bench(engine, requests, cfg, energy=_CountingMeter(7.0))
    actor = BenchActor(sim, threads=1, out_dir=str(tmp_path), inputs={})
    actor.start(0)
    actor.energy = EnergyTally(_CountingMeter(7.0))
    groups = group_by_shape(requests)
    actor.set_workload(groups, cfg)
    tasks = plan_tasks(groups, cfg, {"engine": "sim"})
    records = {t.id: actor.run(t) for t in tasks}
    (got,) = assemble_shapes(groups, tasks, records, cfg, (None, None), {}, {})
    assert one.energy is not None and got.energy is not None
    assert got.energy.status == one.energy.status == "measured"
    assert got.energy.joules == one.energy.joules == 4 * 7.0 and got.energy.runs == 4
    assert got.energy.joules_per_output == pytest.approx(7.0) and got.energy.source == "nvml"
    shared = assemble_shapes(groups, tasks, records, cfg, (None, None), {}, {}, energy_shared="shared counter")
    assert shared[0].energy is not None and shared[0].energy.status == "not available"
    assert shared[0].energy.reason == "shared counter"


def test_cpu_actors_sharing_a_node_share_its_package_counter() -> None:
    from diffbench.bench.result import WorkerInfo
    from diffbench.distributed.bench_tasks import shared_counter_reason

    def w(i: int, node: str, device: str) -> WorkerInfo:
        return WorkerInfo(index=i, node_ip=node, pid=i, device=device, device_class="x")

    assert shared_counter_reason([w(0, "a", "cuda"), w(1, "a", "cuda")]) is None  # one GPU counter each
    assert shared_counter_reason([w(0, "a", "cpu"), w(1, "b", "cpu")]) is None  # one CPU actor per node
    reason = shared_counter_reason([w(0, "a", "cpu"), w(1, "a", "cpu"), w(2, "b", "cpu")])
    assert reason is not None and "2 CPU actors on node a" in reason
