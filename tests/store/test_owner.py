"""Rows of ended processes, one live run per sweep id, and read-only stores (issue 24, items 6, 7 and 9).

Reproductions: a sweep killed by SIGTERM (or SIGKILL) left its sweep and points ``running`` forever; two
identical sweeps on one store both ran (2 baselines and 2 points for one value, no warning); ``runs`` and
``runs show`` refused a store on a read-only mount and suggested ``chmod``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.store.test_store import _run

from diffbench.cli.main import main
from diffbench.errors import StoreError
from diffbench.store import RunStore
from diffbench.store.models import SweepRecord

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import sys, time
from diffbench.store import RunStore
from diffbench.store.models import SweepRecord
sys.path.insert(0, sys.argv[2])
from tests.store.test_store import _run
with RunStore.open(sys.argv[1]) as st:
    st.put_run(_run("r-killed", status="running"))
    st.claim_sweep(SweepRecord(id="s1", created_unix=0, updated_unix=0, axis="first-block", model="m",
                               status="running", options_json="{}"))
print("ready", flush=True)
time.sleep(600)
"""


def _writer(store: Path) -> subprocess.Popen[str]:
    """A process that stores a running run and claims sweep s1, then waits (until killed)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(ROOT)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.e2e  # runs a subprocess
def test_rows_of_a_killed_process_show_interrupted_with_its_pid(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    store = tmp_path / "s.sqlite"
    proc = _writer(store)
    with RunStore.open(store) as st:  # the writer still runs: its rows stay running
        assert st.get_run("r-killed").status == "running"
        assert st.get_sweep("s1").status == "running"  # type: ignore[union-attr]
    proc.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 60
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:  # dead, not reaped: still judged ended
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with RunStore.open(store, readonly=True) as st:
        assert st.get_run("r-killed").status_text == f"interrupted (pid {proc.pid} ended)"
    proc.wait(60)
    assert main(["runs", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"interrupted (pid {proc.pid} ended)" in out  # the sweep's row (the runs table wraps its cells)
    assert main(["runs", "show", "r-killed", "--store", str(store)]) == 0
    assert f"interrupted (pid {proc.pid} ended)" in capsys.readouterr().out
    RunStore.open(store).close()  # `runs` reads read-only; a writable open stores the mark
    raw = sqlite3.connect(store)
    assert raw.execute("SELECT status, status_note FROM runs WHERE id = 'r-killed'").fetchone() == (
        "interrupted", f"pid {proc.pid} ended")
    raw.close()


@pytest.mark.e2e  # runs a subprocess
def test_a_sweep_running_in_a_live_process_is_not_claimed_twice(tmp_path) -> None:
    store = tmp_path / "s.sqlite"
    proc = _writer(store)
    try:
        with RunStore.open(store) as st, pytest.raises(StoreError, match=f"running in process {proc.pid}") as e:
            st.claim_sweep(SweepRecord(id="s1", created_unix=0, updated_unix=0, axis="first-block", model="m",
                                       status="running", options_json="{}"))
        assert e.value.exit_code == 4 and "kill -TERM" in str(e.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    with RunStore.open(store) as st:  # once it has ended, the sweep can be resumed
        st.claim_sweep(SweepRecord(id="s1", created_unix=0, updated_unix=0, axis="first-block", model="m",
                                   status="running", options_json="{}"))
        assert st.get_sweep("s1").pid == os.getpid()  # type: ignore[union-attr]


SIM_SWEEP_AFTER_BARRIER = """
import sys, time
from pathlib import Path
import diffbench.sweep.runner as runner
from diffbench.engines.config import SimParams
from diffbench.engines.registry import create_engine

go, ready = Path(sys.argv[1]), Path(sys.argv[2])
_orig = runner.run_sweep

def _run(opts, store, **kw):
    def factory(cfg):
        return create_engine(cfg.model_copy(update={"engine": "sim", "sim": SimParams(
            realtime=True, compile_s=0.0, step_s=0.02, vae_decode_s=0.01, tail_prob=0.0)}))
    ready.touch()
    while not go.exists():  # both processes are about to claim the sweep: release them together
        time.sleep(0.01)
    return _orig(opts, store, engine_factory=factory, **kw)

runner.run_sweep = _run
from diffbench.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow
def test_two_identical_sweeps_racing_on_one_store(tmp_path) -> None:
    store, go = tmp_path / "s.sqlite", tmp_path / "go"
    RunStore.open(store).close()
    args = ["sweep", "--option", "precision", "--values", "bfloat16", "--height", "64", "--width", "64", "--steps",
            "4", "--num-prompts", "2", "--runs", "300", "--warmup", "0", "--store", str(store), "-q"]
    procs, ready = [], [tmp_path / "ready0", tmp_path / "ready1"]
    for i in range(2):
        procs.append(subprocess.Popen([sys.executable, "-c", SIM_SWEEP_AFTER_BARRIER, str(go), str(ready[i]),
                                       *args, "--json", str(tmp_path / f"c{i}.json")], cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.02)
    go.touch()
    first = None
    while first is None:  # the refused one ends at once; the other runs for minutes
        assert time.monotonic() < deadline, "neither sweep was refused"
        first = next((i for i, p in enumerate(procs) if p.poll() is not None), None)
        time.sleep(0.05)
    other = procs[1 - first]
    other.send_signal(signal.SIGTERM)
    _, err_other = other.communicate(timeout=120)
    _, err = procs[first].communicate()
    assert procs[first].returncode == 4, err
    assert f"already running in process {other.pid}" in " ".join(err.split())
    assert other.returncode == 143, err_other
    with RunStore.open(store) as st:
        baselines = [r for r in st.list_runs() if r.kind == "baseline"]
    assert len(baselines) == 1  # one run of the sweep made one baseline


def test_compare_never_takes_another_baselines_samples(tmp_path) -> None:
    """Two runs of one sweep id stored two baselines; `runs compare B1 P2` used P2's own session (B2's)
    baseline samples as if they were B1's."""
    from diffbench.store.models import RunQuality
    from diffbench.sweep.compare import compare_runs

    point = _run("p2")
    point = point.model_copy(update={
        "timing": point.timing.model_copy(update={"baseline_samples_s": [0.2, 0.21, 0.22]}),  # type: ignore[union-attr]
        "quality": RunQuality(against_run="b2", psnr=point.quality.psnr)})  # type: ignore[union-attr]
    with RunStore.open(tmp_path / "s.sqlite") as st:
        for rid in ("b1", "b2"):
            st.put_run(_run(rid).model_copy(update={"kind": "baseline", "timing": None, "quality": None,
                                                    "fingerprint": point.fingerprint,
                                                    "fingerprint_hash": point.fingerprint_hash}))
        st.put_run(point)
        named = compare_runs(st, "b1", "p2")
        own = compare_runs(st, "b2", "p2")
    assert named.speedup is None and not named.paired
    assert any("measured against baseline run b2, not b1" in w for w in named.warnings)
    assert own.paired and own.speedup is not None
    assert own.speedup.speedup == pytest.approx(0.21 / 0.11)  # median of its baseline samples / its own


def test_compare_with_another_sweeps_baseline_names_the_points_own(tmp_path) -> None:
    """`runs compare B P` where P belongs to another sweep (its own baseline is B2): the warning names B2 and
    says why there is no speed-up (was: 'a run has no timing: no speed-up', which hid the cause)."""
    from diffbench.store.models import RunQuality
    from diffbench.sweep.compare import compare_runs

    point = _run("p2").model_copy(update={"sweep_id": "sweep-2"})
    point = point.model_copy(update={"quality": RunQuality(against_run="b2", psnr=point.quality.psnr)})  # type: ignore[union-attr]
    with RunStore.open(tmp_path / "s.sqlite") as st:
        st.put_run(_run("b1").model_copy(update={"kind": "baseline", "timing": None, "quality": None,
                                                 "sweep_id": "sweep-1", "fingerprint": point.fingerprint,
                                                 "fingerprint_hash": point.fingerprint_hash}))
        st.put_run(point)
        res = compare_runs(st, "b1", "p2")
    assert res.speedup is None and not res.paired
    (w,) = [w for w in res.warnings if "p2" in w]
    assert "own baseline run b2, not b1" in w and "compare b2 p2" in w


def test_read_commands_work_on_a_store_that_cannot_be_written(tmp_path, capsys, monkeypatch) -> None:
    """As root chmod does not stop writes, so the read-only mount is simulated where diffbench asks: the
    file and its directory report not writable (os.access). Before, `runs` refused with `chmod u+w`."""
    store = tmp_path / "s.sqlite"
    with RunStore.open(store) as st:
        st.put_run(_run("r1"))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real_access(p, mode))
    assert main(["runs", "--store", str(store)]) == 0
    assert "r1" in capsys.readouterr().out
    assert main(["runs", "show", "r1", "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == "r1"
    with RunStore.open(store, readonly=True) as st, pytest.raises(StoreError, match="read-only"):
        st.put_run(_run("r2"))
    with pytest.raises(StoreError, match="chmod"):  # a command that writes still gets the clear error
        RunStore.open(store)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_read_commands_work_on_a_read_only_file_and_directory(tmp_path, capsys) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    store = d / "s.sqlite"
    with RunStore.open(store) as st:
        st.put_run(_run("r1"))
    store.chmod(0o444)
    d.chmod(0o555)
    try:
        assert main(["runs", "--store", str(store)]) == 0
        assert "r1" in capsys.readouterr().out
    finally:
        d.chmod(0o755)


def test_a_version_1_store_is_read_and_migrated(tmp_path) -> None:
    store = tmp_path / "s.sqlite"
    with RunStore.open(store) as st:
        st.put_run(_run("r1"))
    raw = sqlite3.connect(store)
    for table in ("runs", "sweeps"):
        for col in ("pid", "host", "pid_started", "status_note"):
            raw.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
    raw.execute("UPDATE schema_version SET version = 1")
    raw.commit()
    raw.close()
    with RunStore.open(store, readonly=True) as st:  # read as it is
        assert st.get_run("r1").pid is None
    with RunStore.open(store) as st:  # migrated on a writable open
        st.put_run(_run("r2"))
        assert st.get_run("r2").pid == os.getpid() and st.get_run("r1").status == "done"


def _read_only_mount_works() -> bool:
    import shutil

    if shutil.which("unshare") is None:
        return False
    d = Path(__file__).parent  # remounted read-only in a private mount namespace only
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {d} {d} && mount -o remount,bind,ro {d}"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="no mount namespace (unshare -m) to make a read-only mount")
@pytest.mark.slow
def test_read_commands_work_on_a_read_only_mount(tmp_path) -> None:
    """A real read-only mount (a bind mount remounted ro in a private mount namespace): even root cannot
    write there. Before, `runs` and `runs show` refused it with 'chmod u+w'."""
    d = tmp_path / "mnt"
    d.mkdir()
    store = d / "s.sqlite"
    with RunStore.open(store) as st:
        st.put_run(_run("r1"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "250"}
    cli = f"{sys.executable} -m diffbench.cli.main"
    script = (f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && "
              f"{cli} runs --store {store} && {cli} runs show r1 --store {store} --json && "
              f"{{ {cli} sweep --option precision --values bfloat16 --store {store}; echo sweep-rc=$?; }}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "r1" in done.stdout and '"id": "r1"' in done.stdout
    assert "sweep-rc=4" in done.stdout  # a command that writes still gets the clear StoreError
    assert "read-only file system" in done.stderr and "chmod" not in done.stderr, done.stderr
