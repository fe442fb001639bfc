"""The SQLite run store: round trip, schema version, locked / read-only / foreign files."""

from __future__ import annotations

import math
import os
import sqlite3
import time

import pytest

from diffbench.core.stats import summarize
from diffbench.errors import StoreError, UsageError
from diffbench.store import (
    SCHEMA_VERSION,
    MetricStats,
    RunQuality,
    RunRecord,
    RunStore,
    RunTiming,
    default_store_path,
    fingerprint_hash,
)
from diffbench.store.db import translate


def _run(rid: str, value: str = "0.1", status: str = "done", created: float | None = None) -> RunRecord:
    fp = {"model": "tiny-flux", "compile": False, "cache": f"first-block(threshold={value})"}
    samples = [0.1, 0.12, 0.11]
    inf_stats = MetricStats(n=2, n_inf=1, mean=40.0, p10=40.0, p50=math.inf, p90=math.inf, min=40.0,
                            max=math.inf, worst=40.0)
    return RunRecord(
        id=rid, created_unix=created or time.time(), kind="point", status=status, sweep_id="s1", axis="first-block",
        value=value, model="tiny-flux", fingerprint=fp, fingerprint_hash=fingerprint_hash(fp),
        conditions={"model": "tiny-flux", "cache": fp["cache"]},
        timing=RunTiming(samples_s=samples, latency_s=summarize(samples, check=()), runs=3, warmup=1),
        quality=RunQuality(against_run="base", psnr=inf_stats),
    )


def test_round_trip_keeps_inf_and_lists_newest_first(tmp_path):
    path = tmp_path / "s.sqlite"
    with RunStore.open(path) as st:
        st.put_run(_run("aaa111", created=1.0))
        st.put_run(_run("bbb222", value="0.2", created=2.0))
        got = st.get_run("aaa1")  # unique prefix
        assert got.quality is not None and math.isinf(got.quality.psnr.p50)
        assert got.timing is not None and got.timing.samples_s == [0.1, 0.12, 0.11]
        assert [r.id for r in st.list_runs()] == ["bbb222", "aaa111"]
        fp = got.fingerprint
        assert st.find_done("s1", "point", "0.1", fingerprint_hash(fp)).id == "aaa111"  # type: ignore[union-attr]
        assert st.find_done("s1", "point", "0.1", "other") is None
        with pytest.raises(UsageError, match="no run"):
            st.get_run("zzz")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_unfinished_runs_are_not_resumed(tmp_path):
    with RunStore.open(tmp_path / "s.sqlite") as st:
        r = _run("r1", status="running")
        st.put_run(r)
        assert st.find_done("s1", "point", "0.1", r.fingerprint_hash) is None


def test_newer_schema_is_refused_with_exit_4(tmp_path):
    path = tmp_path / "s.sqlite"
    RunStore.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer") as exc:
        RunStore.open(path)
    assert exc.value.exit_code == 4
    assert str(path) in str(exc.value)


def test_locked_store_names_file_and_fix(tmp_path):
    path = tmp_path / "s.sqlite"
    RunStore.open(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked") as exc:
            RunStore.open(path, timeout_s=0.05)
        assert str(path) in str(exc.value) and "--store" in str(exc.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_locked_while_writing(tmp_path):
    path = tmp_path / "s.sqlite"
    st = RunStore.open(path, timeout_s=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked"):
            st.put_run(_run("r1"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        st.close()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_file_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    RunStore.open(path).close()
    path.chmod(0o444)
    with pytest.raises(StoreError, match="read-only"):
        RunStore.open(path)


def test_readonly_sqlite_error_is_translated(tmp_path):
    """A real 'attempt to write a readonly database' from sqlite (works as root too) becomes a StoreError."""
    path = tmp_path / "s.sqlite"
    RunStore.open(path).close()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as raw:
        conn.execute("DELETE FROM runs")
    conn.close()
    err = translate(raw.value, path)
    assert isinstance(err, StoreError) and "cannot be written" in str(err) and str(path) in str(err)


def test_not_a_database(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a diffbench SQLite database"):
        RunStore.open(path)


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("DIFFBENCH_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("DIFFBENCH_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "diffbench" / "store.sqlite"


def test_explicit_store_in_a_missing_directory_is_refused(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="does not exist; create it first or pass --mkdir"):
        RunStore.open(tmp_path / "typo" / "s.sqlite")
    assert not (tmp_path / "typo").exists()
    monkeypatch.setenv("DIFFBENCH_STORE", str(tmp_path / "typo2" / "s.sqlite"))
    with pytest.raises(UsageError, match=r"\$DIFFBENCH_STORE"):
        RunStore.open()
    assert not (tmp_path / "typo2").exists()
    RunStore.open(mkdir=True).close()
    assert (tmp_path / "typo2" / "s.sqlite").exists()
    # the per-user default location is created when missing
    monkeypatch.delenv("DIFFBENCH_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    RunStore.open().close()
    assert (tmp_path / "xdg" / "diffbench" / "store.sqlite").exists()


def test_reading_commands_never_create_a_store(tmp_path):
    with pytest.raises(UsageError, match="no store there"):
        RunStore.open(tmp_path / "s.sqlite", create=False)
    assert not (tmp_path / "s.sqlite").exists()


def test_finished_runs_are_immutable(tmp_path):
    """A run id, once stored finished (done or failed), is never rewritten: a second sweep with other values
    once replaced the first sweep's baseline timing (`runs show <baseline>` changed from 1079 ms to 20 ms)."""
    with RunStore.open(tmp_path / "s.sqlite") as st:
        r = _run("r1", status="running")
        st.put_run(r)
        st.put_run(r.model_copy(update={"status": "done"}))  # running -> done: the one allowed update
        before = st.get_run("r1").model_dump()
        for status in ("done", "failed", "running"):
            with pytest.raises(StoreError, match="immutable"):
                st.put_run(r.model_copy(update={"status": status, "value": "0.9"}))
        assert st.get_run("r1").model_dump() == before
        f = _run("f1", status="running")
        st.put_run(f)
        st.put_run(f.model_copy(update={"status": "failed", "error": "boom"}))
        with pytest.raises(StoreError, match="immutable"):
            st.put_run(f.model_copy(update={"status": "done"}))
