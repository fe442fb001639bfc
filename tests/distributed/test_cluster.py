"""The cluster connection: loopback only, address checking, a reused session left open."""

from __future__ import annotations

import pytest

from diffbench.distributed.cluster import check_address, connect
from diffbench.distributed.taskstore import TaskRecord, TaskStore, sha256_file, task_id
from diffbench.errors import UsageError


def by_value(module: str) -> None:
    """Let Ray ship the classes of a test module by value (its workers cannot import ``tests``)."""
    import sys

    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[module])


@pytest.mark.parametrize("bad", ["", "10.0.0.1", "http://x:1", "local ", "a b:1", "host:port", "127.0.0.1:99999",
                                 "127.0.0.1:0"])
def test_bad_addresses_are_refused(bad: str) -> None:
    if bad.strip() == "local":
        assert check_address(bad) == "local"
        return
    with pytest.raises(UsageError, match="--ray"):
        check_address(bad)


@pytest.mark.parametrize("good", ["local", "auto", "127.0.0.1:6379", "ray://head:10001", "[::1]:6379"])
def test_good_addresses(good: str) -> None:
    assert check_address(good) == good


def test_local_cluster_listens_on_loopback_only(ray_cluster) -> None:
    import psutil

    assert ray_cluster.nodes and all(n.ip == "127.0.0.1" for n in ray_cluster.nodes)
    import ray

    node = ray._private.worker._global_node  # this session's cluster only (other clusters may run on the machine)
    pids = {info.process.pid for infos in node.all_processes.values() for info in infos}
    kids = {c.pid for pid in pids if psutil.pid_exists(pid) for c in psutil.Process(pid).children(recursive=True)}
    pids |= kids  # raylet's workers and agents
    assert pids, "no Ray processes found"
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening
    for c in listening:
        assert c.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), c
    with connect("local") as again:  # an open session is reused, not restarted
        assert not again.started_here
    assert ray.is_initialized()


def test_local_cluster_workers_run_at_the_commands_priority(ray_cluster) -> None:
    """Ray starts workers at nice 15; beside two busy loops such actors got ~4 % of a core and the distributed
    tests crawled past CI's limit (reproduction: ``ps -o ni`` of a quality actor showed 15)."""
    import os

    import ray

    from diffbench.distributed.cluster import actor_pool

    class _Nice:
        def nice(self) -> int:
            return os.nice(0)

    by_value(__name__)
    with actor_pool(_Nice, 1, tag="nice-test", threads=1) as handles:
        assert ray.get(handles[0].nice.remote()) == os.nice(0)  # the driver's (this test process's) priority


def test_the_niceness_warning_names_the_nodes_below_normal_priority_and_the_fix() -> None:
    from diffbench.distributed.cluster import niceness_warning

    assert niceness_warning([("10.0.0.1", 0), ("10.0.0.2", None), ("10.0.0.1", -5)], "timings") is None
    text = niceness_warning([("10.0.0.1", 0), ("10.0.0.2", None), ("10.0.0.2", 5), ("10.0.0.2", 15),
                             ("10.0.0.3", 10)], "timings")
    assert text is not None and "10.0.0.2 (nice 15), 10.0.0.3 (nice 10):" in text and "10.0.0.1" not in text
    assert "RAY_worker_niceness=0 ray start" in text and "timings" in text


def test_task_ids_are_deterministic_and_content_checked(tmp_path) -> None:
    a = task_id("bench", {"prompt": "x", "seed": 1, "image": b"\x00\x01"})
    assert a == task_id("bench", {"seed": 1, "image": b"\x00\x01", "prompt": "x"})  # order does not matter
    assert a != task_id("bench", {"prompt": "x", "seed": 2, "image": b"\x00\x01"})
    assert a != task_id("bench", {"prompt": "x", "seed": 1, "image": b"\x00\x02"})
    store = TaskStore(tmp_path)
    f = tmp_path / "out.png"
    f.write_bytes(b"png")
    store.write(TaskRecord(id=a, kind="bench", files={"out.png": sha256_file(f)}))
    assert store.done(a) is not None
    f.write_bytes(b"changed")  # a changed output is not done
    assert store.done(a) is None
    f.unlink()
    assert store.done(a) is None
    assert store.done("0" * 20) is None


class _Echo:
    """A test actor (pickled by value: Ray workers cannot import test modules)."""

    def pid_threads(self) -> tuple[int, str]:
        import os

        return os.getpid(), os.environ.get("OMP_NUM_THREADS", "")


def test_actor_pool_caps_threads_and_releases_its_actors(ray_cluster, monkeypatch) -> None:
    import ray

    from diffbench.distributed.cluster import actor_pool

    by_value(__name__)
    with actor_pool(_Echo, 2, tag="t", threads=1) as actors:
        got = ray.get([a.pid_threads.remote() for a in actors])
        assert len({pid for pid, _ in got}) == 2 and all(t == "1" for _, t in got)
    with actor_pool(_Echo, 2, tag="t") as actors:  # the first pool's CPUs were released
        assert len(ray.get([a.pid_threads.remote() for a in actors])) == 2
    monkeypatch.setattr("diffbench.distributed.cluster.RELEASE_WAIT_S", 1.0)
    with pytest.raises(UsageError, match="--ray-actors 3"), actor_pool(_Echo, 3, tag="t"):
        pass


def test_missing_ray_extra_names_it(monkeypatch, capsys, tmp_path) -> None:
    import sys

    from diffbench.cli.main import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    rc = main(["bench", "--engine", "sim", "--runs", "1", "--warmup", "0", "--save-outputs", str(tmp_path / "o"),
               "--ray", "local"])
    err = capsys.readouterr().err
    assert rc == 3 and "--ray needs the ray extra" in err and '.[ray]' in err, err


@pytest.mark.ray
def test_an_unreachable_address_is_refused_in_seconds_not_retried_for_minutes() -> None:
    """Reproduction (user trial): ``--ray 127.0.0.1:1`` printed Ray's GCS retry lines for 5 min 28 s until
    killed (Ray maps a loopback host to the node's IP and retries); ``--ray auto`` with no ``ray start`` cluster
    did the same against another process's private cluster. The probe refuses both before ``ray.init``."""
    import socket
    import time

    pytest.importorskip("ray")
    from diffbench.distributed.cluster import PROBE_TIMEOUT_S, _probe
    from diffbench.errors import DiffbenchError

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(DiffbenchError, match=rf"--ray 127.0.0.1:{port}: nothing accepts connections at .*:{port}"):
            _probe(f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 2 * PROBE_TIMEOUT_S + 5
    # auto: no `ray start --head` cluster here; the suite's private one (loopback only) is never joined
    with pytest.raises(DiffbenchError, match=r"--ray auto: (no Ray cluster found|nothing accepts connections|the only Ray cluster found here .* private)"):
        _probe("auto")


def test_packed_results_round_trip_and_foreign_pickles_are_refused(tmp_path) -> None:
    """Our result types come back equal (float32 features bit for bit); any other global is refused unloaded."""
    import base64
    import os
    import pickle

    import numpy as np

    from diffbench.distributed.taskstore import pack, unpack
    from diffbench.engines.base import GenerationResult, StageTimes
    from diffbench.quality.compare import PairOutcome

    feats = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
    out = unpack(pack(PairOutcome(feats=(feats, feats * 2))))
    assert out.feats[0].dtype == np.float32 and np.array_equal(out.feats[1], feats * 2)
    gen = GenerationResult(images=None, stages=StageTimes(text_encode_s=0.1, denoise_s=1.0, vae_decode_s=0.2, step_s=[0.5, 0.5]),
                           extra={"x": 1.5})
    assert unpack(pack(gen)) == gen
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for bad in (base64.b64encode(pickle.dumps(Planted())).decode(), "not base64!!", "", 3,
                base64.b64encode(pickle.dumps(tmp_path)).decode()):
        with pytest.raises(ValueError, match="packed"):
            unpack(bad)
    assert not marker.exists()


@pytest.mark.ray
@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_during_a_ray_run_is_ctrl_c(tmp_path) -> None:
    """ray.init sets its own SIGTERM handler (sys.exit(15)): connect() gives SIGTERM back to the Ctrl-C path,
    so `bench --ray` stopped by SIGTERM writes its partial JSON and exits 143."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "b.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffbench.cli.main", "bench", "--engine", "sim", "--sim-realtime",
         "--sim-compile-s", "0", "--sim-step-s", "0.05", "--warmup", "1", "--runs", "300", "--ray", "local",
         "--save-outputs", str(tmp_path / "o"), "--json", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 240
    while not (out.exists() and json.loads(out.read_text())["shapes"][0]["samples_s"]):  # a timed run is in
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "SIGTERM" in err and "Traceback" not in err
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted"] is True
