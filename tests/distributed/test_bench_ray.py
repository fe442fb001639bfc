"""``bench --save-outputs DIR --ray local``: outputs byte-identical to one process; a killed actor loses no
finished output and the rerun does only the rest (issue 15 acceptance)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main
from diffbench.distributed.taskstore import TASKS_DIR, TaskStore

pytestmark = pytest.mark.ray

TINY16 = ["--model", "tiny-flux", "--height", "64", "--width", "64", "--steps", "2", "--warmup", "1", "--runs", "16",
          "--num-prompts", "8", "--seeds", "0,1", "--threads", "1", "-q"]


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.png"))}


def test_sixteen_outputs_byte_identical_to_single_process(ray_cluster, tmp_path: Path) -> None:
    import torch

    threads = torch.get_num_threads()
    try:
        assert main(["bench", *TINY16, "--save-outputs", str(tmp_path / "one"), "--json", str(tmp_path / "one.json")]) == 0
    finally:
        torch.set_num_threads(threads)  # the in-process bench set 1 thread: give the rest of the session its own
    assert main(["bench", *TINY16, "--save-outputs", str(tmp_path / "ray"), "--json", str(tmp_path / "ray.json"),
                 "--ray", "local", "--ray-actors", "2"]) == 0
    one, ray = _files(tmp_path / "one"), _files(tmp_path / "ray")
    assert len(one) == 16 and one == ray  # same names, same bytes
    m1 = json.loads((tmp_path / "one" / "manifest.json").read_text())
    m2 = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert m1["entries"] == m2["entries"]  # same entries (ids, seeds, sha256) in the same order
    r = json.loads((tmp_path / "ray.json").read_text())
    dist = r["distributed"]
    assert dist["tasks"] == 16 and dist["done_now"] == 16 and dist["resumed"] == 0 and dist["not_done"] == 0
    assert len(dist["actors"]) == 2 and sum(a["tasks"] for a in dist["actors"]) == 16
    assert all(a["node_ip"] == "127.0.0.1" and a["threads"] == 1 for a in dist["actors"])
    import os

    assert all(a["nice"] == os.nice(0) for a in dist["actors"])  # the local cluster's actors: this process's priority
    assert not [w for w in r["warnings"] if w["code"] == "actor_niceness"]
    shape = r["shapes"][0]
    assert len(shape["samples_s"]) == 16  # --runs 16 timed runs over both actors
    assert shape["latency_s"]["p50"] == pytest.approx(float(np.median(shape["samples_s"])), rel=1e-12)
    assert shape["repro"]["reproducible"] is True and dist["repro_across_actors"] is True  # another actor agrees
    assert shape["stages_s"] is not None and shape["step_s"]["n"] == 16 * 2  # per-step times of every timed run


SIM = ["--engine", "sim", "--sim-realtime", "--sim-step-s", "0.5", "--sim-compile-s", "0", "--steps", "4",
       "--height", "64", "--width", "64", "--warmup", "0", "--runs", "24", "--num-prompts", "12", "--seeds", "0,1",
       "--no-repro", "-q"]


def test_killed_actor_loses_no_finished_output_and_the_rerun_does_only_the_rest(ray_cluster, tmp_path: Path) -> None:
    import ray

    out = tmp_path / "out"
    args = ["bench", *SIM, "--save-outputs", str(out), "--json", str(tmp_path / "r.json"), "--ray", "local",
            "--ray-actors", "2"]
    rc: list[int] = []
    t = threading.Thread(target=lambda: rc.append(main(args)))
    t.start()
    tasks = out / TASKS_DIR
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(tasks.glob("*.json"))) < 4:
        time.sleep(0.02)
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("diffbench-bench-")]
    assert len(names) == 2, names
    ray.kill(ray.get_actor(sorted(names)[1]))
    t.join(timeout=120)
    assert rc == [5]  # ActorDied: the run stops, not silently complete
    store = TaskStore(out)
    recorded = sorted(p.stem for p in tasks.glob("*.json"))
    assert 4 <= len(recorded) < 24
    assert all(store.done(tid) is not None for tid in recorded)  # every record's files are intact
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {e["file"] for e in manifest["entries"]}
    assert listed <= {p.name for p in out.glob("*.png")}  # the killed actor's task in flight may have left a file
    assert len(listed) == len(recorded)  # one output per recorded task (24 runs over 24 distinct requests)
    partial = json.loads((tmp_path / "r.json").read_text())
    assert partial["partial"] is True and partial["distributed"]["not_done"] == 24 - len(recorded)

    assert main(args) == 0  # the rerun completes only the rest
    final = json.loads((tmp_path / "r.json").read_text())["distributed"]
    assert final["resumed"] == len(recorded) and final["done_now"] == 24 - len(recorded) and final["not_done"] == 0
    assert main(["bench", *[a for a in SIM if a != "--sim-realtime"], "--save-outputs", str(tmp_path / "one")]) == 0
    assert _files(out) == _files(tmp_path / "one") and len(_files(out)) == 24  # complete, as one process makes it


def test_actors_on_two_device_classes_are_refused() -> None:
    from diffbench.bench.result import WorkerInfo
    from diffbench.distributed.bench_tasks import one_device_class
    from diffbench.errors import UsageError

    def w(i: int, cls: str) -> WorkerInfo:
        return WorkerInfo(index=i, node_ip="127.0.0.1", pid=i, device="cuda", device_class=cls)

    assert one_device_class([w(0, "H100 (driver 1)"), w(1, "H100 (driver 1)")]) == ["H100 (driver 1)"]
    with pytest.raises(UsageError, match=r"A100 \(driver 1\) \(1 actors\), H100 \(driver 1\) \(2 actors\)"):
        one_device_class([w(0, "H100 (driver 1)"), w(1, "A100 (driver 1)"), w(2, "H100 (driver 1)")])


def test_an_out_of_memory_shape_is_recorded_and_the_rest_reported(ray_cluster, tmp_path: Path) -> None:
    args = ["bench", "--engine", "sim", "--shapes", "64x64,2048x2048", "--runs", "3", "--warmup", "0", "-q",
            "--sim-fail-above-pixels", "100000", "--save-outputs", str(tmp_path / "o"), "--json", str(tmp_path / "r.json"),
            "--ray", "local", "--ray-actors", "2"]
    assert main(args) == 0
    small, big = json.loads((tmp_path / "r.json").read_text())["shapes"]
    assert len(small["samples_s"]) == 3 and small["error"] is None and small["repro"]["reproducible"] is True
    assert big["samples_s"] == [] and "out of memory" in big["error"] and big["repro"] is None


def test_a_planted_or_corrupt_record_is_never_run_and_its_task_is_done_again(ray_cluster, tmp_path: Path) -> None:
    """Reproduction (user trial): a record whose ``result`` was a pickle of ``os.system("touch …")`` ran the
    command on the rerun, then died with AttributeError; ``"result": "not base64!!"`` died with binascii.Error.
    The shared directory is not trusted: neither record is loaded, both tasks are done again."""
    import base64
    import os
    import pickle

    out = tmp_path / "out"
    fast = [a for a in SIM if a != "--sim-realtime"]
    args = ["bench", *fast, "--save-outputs", str(out), "--json", str(tmp_path / "r.json"), "--ray", "local",
            "--ray-actors", "2"]
    assert main(args) == 0
    timed = sorted(p for p in (out / TASKS_DIR).glob("*.json") if "result" in json.loads(p.read_text())["data"])
    assert len(timed) >= 2
    marker = tmp_path / "PWNED"

    class Planted:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for path, value in ((timed[0], base64.b64encode(pickle.dumps(Planted())).decode()), (timed[1], "not base64!!")):
        rec = json.loads(path.read_text())
        rec["data"]["result"] = value
        path.write_text(json.dumps(rec))
    assert main(args) == 0
    assert not marker.exists()  # never unpickled into a call
    dist = json.loads((tmp_path / "r.json").read_text())["distributed"]
    assert dist["done_now"] == 2 and dist["resumed"] == 24 - 2 and dist["not_done"] == 0
    assert main(["bench", *fast, "--save-outputs", str(tmp_path / "one")]) == 0
    assert _files(out) == _files(tmp_path / "one")  # the redone tasks' outputs are those of one process


def test_ctrl_c_writes_an_interrupted_partial_result(ray_cluster, tmp_path: Path, monkeypatch) -> None:
    """Reproduction (user trial): Ctrl-C during ``bench --ray`` printed "interrupted: the partial result was
    written" but the JSON said ``interrupted: false`` with no interrupted note (one process says true)."""
    from diffbench.distributed import bench as dbench

    run = dbench._Driver.run

    def interrupted_after_three(self):
        flush, seen = self.on_record, [0]

        def hook():
            flush()
            seen[0] += 1
            if seen[0] == 3:
                raise KeyboardInterrupt

        self.on_record = hook
        return run(self)

    monkeypatch.setattr(dbench._Driver, "run", interrupted_after_three)
    monkeypatch.setattr(dbench, "MANIFEST_EVERY_S", 0.0)  # on_record after every record, not at most 1/s
    out, js = tmp_path / "out", tmp_path / "r.json"
    args = ["bench", *[a for a in SIM if a != "--sim-realtime"], "--save-outputs", str(out), "--json", str(js),
            "--ray", "local", "--ray-actors", "2"]
    assert main(args) == 130
    r = json.loads(js.read_text())
    assert r["partial"] is True and r["interrupted"] is True
    assert "interrupted" in {w["code"] for w in r["warnings"]}
    assert 3 <= 24 - r["distributed"]["not_done"] < 24
    monkeypatch.setattr(dbench._Driver, "run", run)
    assert main(args) == 0  # and the rerun completes it
    assert json.loads(js.read_text())["distributed"]["not_done"] == 0


class _FakeRay:
    @staticmethod
    def get(value, timeout=None):
        return value


class _FakeActor:
    def __init__(self, reading):
        self.load = type("M", (), {"remote": staticmethod(lambda: reading)})


def test_busy_node_rule_discounts_this_runs_own_actors() -> None:
    """Reproduction (user trial): ``bench --ray`` on a machine CI was loading gave p50 52 ms (27 ms in one
    process) and no ``machine_busy`` warning. The rule: load average - own actors x threads > 0.75 x CPUs -
    threads (the single-process allowance)."""
    from diffbench.bench.result import WorkerInfo
    from diffbench.distributed.bench import busy_notes

    def descs(n):
        return [{"worker": WorkerInfo(index=i, node_ip="10.0.0.1", pid=i, device="cpu", device_class="cpu", threads=1)}
                for i in range(n)]

    # 2 actors x 1 thread on 2 CPUs: their own load is 2; the rest may be up to 0.75 * 2 - 1 = 0.5
    assert busy_notes(_FakeRay, [_FakeActor((2.4, 2))] * 2, descs(2), 1) == []
    busy = busy_notes(_FakeRay, [_FakeActor((2.6, 2))] * 2, descs(2), 1)
    assert [n.code for n in busy] == ["machine_busy"] and "10.0.0.1" in busy[0].message
    # one process on 2 CPUs is busy above a load of 1.5 (core/env rule): one actor gives the same threshold
    assert busy_notes(_FakeRay, [_FakeActor((1.4, 2))], descs(1), 1) == []
    assert len(busy_notes(_FakeRay, [_FakeActor((1.6, 2))], descs(1), 1)) == 1
    assert busy_notes(_FakeRay, [_FakeActor(None)], descs(1), 1) == []  # no load average: no note
