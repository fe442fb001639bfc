"""``sweep --ray``: every device runs the single-process interleaved protocol on its shard of the prompts; the
per-device speed-ups are pooled per device class (never across classes); shards stream to disk and resume.

The sim engine on its virtual clock makes a shard's timings exactly reproducible, so each actor's result is
compared with the same shard run in this process; the pooled numbers are recomputed here from the per-device
samples the actors returned.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from diffbench.engines.config import EngineConfig, SimParams
from diffbench.sweep.models import SweepOptions

pytestmark = pytest.mark.ray

VALUES = ["bfloat16", "float16"]


def _opts(**kw: object) -> SweepOptions:
    base: dict[str, object] = dict(engine=EngineConfig(engine="sim", model="sim-flux"), axis="precision",
                                   values=VALUES, height=64, width=64, steps=2, num_prompts=4, seeds=[0], warmup=0,
                                   runs=8, bootstrap_resamples=300)
    base.update(kw)
    return SweepOptions(**base)  # type: ignore[arg-type]


def _events() -> tuple[list[str], object]:
    got: list[str] = []
    return got, got.append


def test_two_value_sweep_on_two_actors_pools_the_per_device_results(ray_cluster, tmp_path) -> None:
    import ray

    from diffbench.distributed.sweep import run_sweep_ray, shard_run
    from diffbench.store.runs import RunStore
    from diffbench.sweep.runner import run_sweep

    opts = _opts()
    res = run_sweep_ray(opts, tmp_path / "s.sqlite", "local", actors=2)
    assert [s.shard for s in res.shards] == [0, 1] and not res.failed and not res.partial
    assert len(res.groups) == 1 and res.groups[0].shards == [0, 1]
    assert not [w for w in res.warnings if "below normal priority" in w]
    node_ips = {n.ip for n in ray_cluster.nodes}
    for s in res.shards:
        # the environment was captured in the actor: its node, CPU, GPUs and driver are in the fingerprint
        assert s.fingerprint["node"] in node_ips
        assert {"gpus", "driver", "cuda", "cpu", "hardware"} <= set(s.fingerprint)
        assert s.device_class == f"cpu: {s.fingerprint['cpu']}"
        import os

        assert s.nice == os.nice(0)  # the shard ran at this process's priority (Ray's default would be 15)
        # the actor ran exactly the single-process protocol: the same shard here gives the same samples
        mine = opts.model_copy(update={"shard": (s.shard, 2)})
        with RunStore.open(tmp_path / f"here-{s.shard}.sqlite") as st:
            here = run_sweep(mine, st)
            for p in here.points:
                t = st.get_run(p.run_id).timing
                assert t is not None
                assert s.samples[p.value].baseline_s == t.baseline_samples_s
                assert s.samples[p.value].candidate_s == t.samples_s
            assert [p.speedup for p in s.result.points] == [p.speedup for p in here.points]
        assert shard_run(mine, tmp_path / f"again-{s.shard}.sqlite").samples == s.samples
    # the pooled speed-up, recomputed from the per-device samples: block-weighted mean of per-device log ratios
    pooled = res.groups[0].result
    for p in pooled.points:
        devs = [s.samples[p.value] for s in res.shards]
        n = np.array([len(d.baseline_s) for d in devs], dtype=float)
        logs = np.array([np.log(np.median(d.baseline_s) / np.median(d.candidate_s)) for d in devs])
        assert p.speedup == pytest.approx(float(np.exp((n * logs).sum() / n.sum())), rel=1e-12)
        assert p.speedup_ci[0] <= p.speedup <= p.speedup_ci[1]
        assert p.quality.psnr.n == 4  # the images of both shards, merged
        assert p.run_id == "+".join(next(q.run_id for q in s.result.points if q.value == p.value)
                                    for s in res.shards)
    # the shards were streamed to disk; the actors are gone
    root = Path(res.directory)
    assert sorted(f.name for f in root.glob("*.json")) == ["shard-0-of-2.json", "shard-1-of-2.json"]
    assert not [a for a in ray.util.list_named_actors() if a.startswith("diffbench-sweep")]
    # a rerun takes every finished shard from disk, starts no actor, and gives the same pooled result
    events, event = _events()
    again = run_sweep_ray(opts, tmp_path / "s.sqlite", "local", actors=2, on_event=event)  # type: ignore[arg-type]
    assert all(s.resumed for s in again.shards) and not any("actor" in e for e in events)
    assert [p.speedup_detail for p in again.groups[0].result.points] == [p.speedup_detail for p in pooled.points]
    # one shard's file gone: only that shard runs again, and its own store resumes its finished points
    (root / "shard-1-of-2.json").unlink()
    events, event = _events()
    third = run_sweep_ray(opts, tmp_path / "s.sqlite", "local", actors=2, on_event=event)  # type: ignore[arg-type]
    assert [s.resumed for s in third.shards] == [True, False]
    assert "1 shard(s) on 1 actor(s) (1 thread(s) each)" in events
    # the shard's own store resumes it as a single-process sweep resumes: its baseline is not generated again
    # (the sim engine reports no precision, so its points are timed again, as they are without --ray)
    assert third.shards[1].result.baseline.resumed
    assert third.shards[1].result.baseline.run_id == res.shards[1].result.baseline.run_id

    # device classes: a shard of another class is reported in its own group, never pooled with the others
    from diffbench.distributed.sweep import combine, pool_group

    other = res.shards[1].model_copy(update={"device_class": "NVIDIA H100 80GB HBM3 / driver 550.54"})
    groups = combine(opts, [res.shards[0], other])
    assert [g.shards for g in groups] == [[0], [1]]
    for g, s in zip(groups, [res.shards[0], other], strict=True):
        assert [p.speedup for p in g.result.points] == pytest.approx([p.speedup for p in s.result.points], rel=1e-12)
    with pytest.raises(ValueError, match="never pooled"):
        pool_group(opts, res.shards[0].device_class, [res.shards[0], other])


def test_an_actor_killed_mid_run_loses_no_finished_shard(ray_cluster, tmp_path) -> None:
    import ray

    from diffbench.distributed.cluster import ActorDied
    from diffbench.distributed.sweep import run_sweep_ray

    # real time, about 2 s per shard, so that one actor can be killed while both run
    sim = SimParams(realtime=True, compile_s=0.0, text_encode_s=0.06, tail_prob=0.0)
    opts = _opts(engine=EngineConfig(engine="sim", model="sim-flux", sim=sim), num_prompts=2, runs=4)
    box: dict[str, object] = {}

    def drive() -> None:
        try:
            box["result"] = run_sweep_ray(opts, tmp_path / "s.sqlite", "local", actors=2)
        except BaseException as exc:  # noqa: BLE001 (the test inspects it)
            box["error"] = exc

    th = threading.Thread(target=drive)
    th.start()
    deadline = time.monotonic() + 60
    name = None
    while name is None and time.monotonic() < deadline:
        name = next((a for a in ray.util.list_named_actors() if a.startswith("diffbench-sweep-0-")), None)
        time.sleep(0.05)
    assert name is not None, "the actor of shard 0 never started"
    time.sleep(0.5)
    ray.kill(ray.get_actor(name), no_restart=True)
    th.join(120)
    err = box.get("error")
    assert isinstance(err, ActorDied), box
    assert err.exit_code == 5 and "rerun the same command" in str(err)
    partial = err.result  # type: ignore[attr-defined]
    assert partial.partial and list(partial.failed) == [0] and [s.shard for s in partial.shards] == [1]
    root = Path(partial.directory)
    assert [f.name for f in root.glob("*.json")] == ["shard-1-of-2.json"]
    saved = json.loads((root / "shard-1-of-2.json").read_text())
    assert saved["shard"] == 1 and set(saved["samples"]) == set(VALUES)
    # the rerun completes only the killed shard
    events, event = _events()
    done = run_sweep_ray(opts, tmp_path / "s.sqlite", "local", actors=2, on_event=event)  # type: ignore[arg-type]
    assert [s.resumed for s in done.shards] == [False, True] and not done.failed
    assert "1 shard(s) on 1 actor(s) (1 thread(s) each)" in events
    assert done.shards[1].samples == partial.shards[0].samples
    assert len(done.groups) == 1 and done.groups[0].shards == [0, 1]


def test_more_actors_than_prompts_is_refused(ray_cluster, tmp_path) -> None:
    from diffbench.distributed.sweep import run_sweep_ray
    from diffbench.errors import UsageError

    with pytest.raises(UsageError, match="--ray-actors 3: 2 prompt"):
        run_sweep_ray(_opts(num_prompts=2), tmp_path / "s.sqlite", "local", actors=3)
    with pytest.raises(UsageError, match="--device cuda:1 with --ray"):
        run_sweep_ray(_opts(engine=EngineConfig(engine="sim", model="sim-flux", device="cuda:1")),
                      tmp_path / "s.sqlite", "local", actors=1)
    assert not (tmp_path / "ray-sweeps").exists()


@pytest.mark.slow  # about 14 s on an idle 2-core machine (two actors import torch and build tiny-flux)
def test_cli_tiny_flux_sweep_on_two_cpu_actors(ray_cluster, tmp_path, capsys) -> None:
    """The command end to end with the diffusers engine: 2 values, 2 actors with one torch thread each."""
    from diffbench.cli.main import main

    out = tmp_path / "out"
    rc = main(["sweep", "--cache", "first-block", "--values", "0.1,0.3", "--height", "64", "--width", "64",
               "--steps", "2", "--num-prompts", "2", "--warmup", "0", "--runs", "2", "--threads", "1",
               "--ray", "local", "--ray-actors", "2", "--store", str(out / "s.sqlite"), "--mkdir",
               "--json", str(out / "r.json"), "--csv", str(out / "r.csv"), "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "pooled over device class cpu:" in captured.out
    doc = json.loads((out / "r.json").read_text())
    assert doc["kind"] == "diffbench.sweep.ray" and [s["shard"] for s in doc["shards"]] == [0, 1]
    assert all("driver" in s["fingerprint"] and "gpus" in s["fingerprint"] for s in doc["shards"])
    (group,) = doc["groups"]
    for p in group["result"]["points"]:
        devs = [s["samples"][p["value"]] for s in doc["shards"]]
        n = np.array([len(d["baseline_s"]) for d in devs], dtype=float)
        logs = np.array([np.log(np.median(d["baseline_s"]) / np.median(d["candidate_s"])) for d in devs])
        assert p["speedup"] == pytest.approx(float(np.exp((n * logs).sum() / n.sum())), rel=1e-12)
        assert p["quality"]["psnr"]["n"] == 2
    rows = (out / "r.csv").read_text().splitlines()
    assert rows[0].startswith("device_class,value,") and len(rows) == 4  # header, baseline, 2 values


def test_a_failing_shard_is_an_error_with_the_partial_result(ray_cluster, tmp_path, monkeypatch) -> None:
    from diffbench.distributed.sweep import run_sweep_ray
    from diffbench.errors import DiffbenchError, UsageError

    # every generation fails as out of memory on the simulated device: each shard fails, nothing is pooled
    sim = SimParams(fail_above_pixels=1)
    opts = _opts(engine=EngineConfig(engine="sim", model="sim-flux", sim=sim), num_prompts=2)
    with pytest.raises(DiffbenchError) as info:
        run_sweep_ray(opts, tmp_path / "s.sqlite", "local", actors=2)
    partial = info.value.result  # type: ignore[attr-defined]
    assert partial.partial and sorted(partial.failed) == [0, 1] and not partial.shards and not partial.groups
    assert all("memory" in m.lower() for m in partial.failed.values()), partial.failed
    assert not list(Path(partial.directory).glob("*.json"))
    # one actor per GPU: a cluster without GPUs is refused with the count, not waited on forever
    monkeypatch.setattr("diffbench.distributed.cluster.RELEASE_WAIT_S", 0.5)
    with pytest.raises(UsageError, match="1 GPUs and the cluster has 0 free"):
        run_sweep_ray(_opts(engine=EngineConfig(engine="sim", model="sim-flux", device="cuda")),
                      tmp_path / "s.sqlite", "local")


def test_the_pooled_result_keeps_every_devices_warmup_runs(tmp_path) -> None:
    """Reproduction (user trial): the pooled ``sweep --ray`` CSV had an empty ``warmup_runs`` column and the JSON
    ``warmup_s: {}``, though each shard had warmed every arm (single process: 5 and 6)."""
    import csv
    import io

    from diffbench.distributed.sweep import pool_group, shard_run
    from diffbench.report.sweep_report import to_csv

    opts = _opts(warmup=2)
    shards = [shard_run(opts.model_copy(update={"shard": (i, 2)}), tmp_path / f"s{i}.sqlite") for i in range(2)]
    assert all(s.result.warmup_s.get("baseline") for s in shards)
    pooled = pool_group(opts, shards[0].device_class, shards)
    for key in ("baseline", *VALUES):
        assert pooled.warmup_s[key] == shards[0].result.warmup_s[key] + shards[1].result.warmup_s[key]
    rows = {r["value"]: r for r in csv.DictReader(io.StringIO(to_csv(pooled)))}
    assert int(rows["baseline"]["warmup_runs"]) == sum(len(s.result.warmup_s["baseline"]) for s in shards)
    assert all(int(rows[v]["warmup_runs"]) == len(pooled.warmup_s[v]) for v in VALUES)
