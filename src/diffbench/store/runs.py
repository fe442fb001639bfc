"""Reading and writing runs and sweeps in the store.

Points are keyed by (sweep id, value, fingerprint hash): a rerun of an interrupted sweep finds the points
that finished and does not recompute them. A run, once stored ``done`` or ``failed``, is immutable
(:meth:`RunStore.put_run` refuses to rewrite it).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path

from pydantic import BaseModel

from diffbench.core.jsonio import strict_json_value
from diffbench.errors import StoreError, UsageError
from diffbench.store import owner
from diffbench.store.db import DEFAULT_TIMEOUT_S, Database, open_db
from diffbench.store.models import RunKind, RunRecord, SweepRecord

_RUN_JSON = ("fingerprint", "conditions", "manifest", "timing", "quality", "extra")


def new_run_id() -> str:
    """A short unique run id (12 hex characters)."""
    return uuid.uuid4().hex[:12]


def _dumps(obj: object) -> str | None:
    if obj is None:
        return None
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="python")
    return json.dumps(strict_json_value(obj), sort_keys=True, default=str)


def _loads(text: str | None) -> object:
    return None if text is None else json.loads(text)


def _owner_fields(r: dict[str, object]) -> dict[str, object]:
    """Owner and status columns of a row; a ``running`` row whose process has ended reads ``interrupted``
    (a read-only store cannot mark it; a writable one already has, on open)."""
    pid, host, started = r.get("pid"), r.get("host"), r.get("pid_started")
    out: dict[str, object] = {"pid": pid, "host": host, "pid_started": started, "status_note": r.get("status_note")}
    if r.get("status") == "running" and owner.ended(pid, host, started):  # type: ignore[arg-type]
        out.update(status="interrupted", status_note=owner.ended_note(pid))  # type: ignore[arg-type]
    return out


def _sweep_from_row(row: object) -> SweepRecord:
    r = dict(row)  # type: ignore[call-overload]
    return SweepRecord.model_validate({**r, **_owner_fields(r)})


class RunStore:
    """The run store (SQLite). Open with :meth:`open`; every method raises :class:`StoreError` on failure."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    def open(cls, path: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, *, mkdir: bool = False,
             create: bool = True, readonly: bool = False) -> RunStore:
        """Open the store at ``path`` (default: ``$DIFFBENCH_STORE`` or the per-user location); see
        :func:`diffbench.store.db.open_db` for ``mkdir``, ``create``, ``readonly`` and the errors raised.

        A writable store marks its ``running`` rows whose process has ended ``interrupted`` (noting the
        pid); a read-only one shows them so without writing (see :mod:`diffbench.store.owner`)."""
        st = cls(open_db(path, timeout_s, mkdir=mkdir, create=create, readonly=readonly))
        if not st.db.readonly:
            try:
                st.mark_stale()
            except BaseException:
                st.close()
                raise
        return st

    def mark_stale(self) -> int:
        """Mark ``running`` runs and sweeps whose owner process has ended as ``interrupted`` with the note
        ``"pid N ended"``. Returns how many rows changed."""
        stale = [(table, rid, pid) for table in ("runs", "sweeps")
                 for rid, pid, host, started in self.db.query(
                     f"SELECT id, pid, host, pid_started FROM {table} WHERE status = 'running'")
                 if owner.ended(pid, host, started)]
        if not stale:  # the common case: no write transaction, no wait on another writer's lock
            return 0
        with self.db.write() as conn:
            for table, rid, pid in stale:  # still running: the row may have been finished meanwhile
                conn.execute(f"UPDATE {table} SET status = 'interrupted', status_note = ? WHERE id = ? AND "
                             "status = 'running' AND pid = ?", (owner.ended_note(pid), rid, pid))
        return len(stale)

    @property
    def path(self) -> Path:
        return self.db.path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------
    def put_run(self, run: RunRecord) -> None:
        """Insert ``run``, or finish it: a run stored ``running`` may be replaced (to record it ``done`` or
        ``failed``); a run stored finished is immutable.

        Raises:
            StoreError: ``run.id`` is already stored as ``done`` or ``failed`` (a stored result is never
                rewritten; a new measurement is a new run id), or the store is locked / read-only.
        """
        extra = {"skipped": run.skipped.model_dump() if run.skipped else None, "error": run.error}
        row = (
            run.id,
            run.created_unix,
            run.kind,
            run.status,
            run.sweep_id,
            run.axis,
            run.value,
            run.model,
            run.fingerprint_hash,
            _dumps(run.fingerprint),
            _dumps(run.conditions),
            _dumps(run.manifest),
            run.outputs_dir,
            _dumps(run.timing),
            _dumps(run.quality),
            _dumps(extra),
            *owner.current(),
            run.status_note,
        )
        with self.db.write() as conn:
            found = conn.execute("SELECT status FROM runs WHERE id = ?", (run.id,)).fetchone()
            if found is not None and found[0] != "running":
                raise StoreError(
                    f"run {run.id} is already stored as {found[0]} in {self.path}: stored runs are immutable "
                    f"(a new measurement gets a new run id)"
                )
            conn.execute(
                "INSERT OR REPLACE INTO runs (id, created_unix, kind, status, sweep_id, axis, value, model, "
                "fingerprint_hash, fingerprint_json, conditions_json, manifest_json, outputs_dir, timing_json, "
                "quality_json, extra_json, pid, host, pid_started, status_note) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )

    @staticmethod
    def _run_from_row(row: object) -> RunRecord:
        r = dict(row)  # type: ignore[call-overload]
        extra = _loads(r.get("extra_json")) or {}
        assert isinstance(extra, dict)
        return RunRecord.model_validate(
            dict(
                id=r["id"],
                created_unix=r["created_unix"],
                kind=r["kind"],
                status=r["status"],
                sweep_id=r["sweep_id"],
                axis=r["axis"],
                value=r["value"],
                model=r["model"],
                fingerprint=_loads(r["fingerprint_json"]),
                fingerprint_hash=r["fingerprint_hash"],
                conditions=_loads(r["conditions_json"]) or {},
                manifest=_loads(r["manifest_json"]),
                outputs_dir=r["outputs_dir"],
                timing=_loads(r["timing_json"]),
                quality=_loads(r["quality_json"]),
                skipped=extra.get("skipped"),
                error=extra.get("error"),
            ) | _owner_fields(r)
        )

    def get_run(self, run_id: str) -> RunRecord:
        """The run whose id is ``run_id`` (or starts with it, when unambiguous).

        Raises:
            UsageError: no such run, or an ambiguous prefix.
        """
        rows = self.db.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            rows = self.db.query("SELECT * FROM runs WHERE id LIKE ? ORDER BY created_unix", (run_id + "%",))
        if not rows:
            raise UsageError(f"no run {run_id!r} in store {self.path}; list them with `diffbench runs`")
        if len(rows) > 1:
            ids = ", ".join(r["id"] for r in rows[:5])
            raise UsageError(f"run id prefix {run_id!r} is ambiguous ({ids}); give more characters")
        return self._run_from_row(rows[0])

    def list_runs(self, sweep_id: str | None = None, kind: RunKind | None = None, limit: int = 50) -> list[RunRecord]:
        """Runs, newest first (optionally of one sweep and/or one kind)."""
        sql, params = "SELECT * FROM runs WHERE 1=1", []
        if sweep_id is not None:
            sql += " AND sweep_id = ?"
            params.append(sweep_id)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        sql += " ORDER BY created_unix DESC LIMIT ?"
        params.append(limit)
        return [self._run_from_row(r) for r in self.db.query(sql, tuple(params))]

    def find_done(self, sweep_id: str, kind: RunKind, value: str, fp_hash: str | None) -> RunRecord | None:
        """The newest finished run of ``sweep_id`` with this kind, value and fingerprint hash (any hash when
        ``fp_hash`` is None: the sweep id already fixes the configuration), if any."""
        if fp_hash is None:
            rows = self.db.query(
                "SELECT * FROM runs WHERE sweep_id = ? AND kind = ? AND value = ? AND status = 'done' "
                "ORDER BY created_unix DESC LIMIT 1", (sweep_id, kind, value))
        else:
            rows = self.db.query(
                "SELECT * FROM runs WHERE sweep_id = ? AND kind = ? AND value = ? AND fingerprint_hash = ? "
                "AND status = 'done' ORDER BY created_unix DESC LIMIT 1",
                (sweep_id, kind, value, fp_hash),
            )
        return self._run_from_row(rows[0]) if rows else None

    # -- sweeps -------------------------------------------------------------------------------
    def put_sweep(self, sweep: SweepRecord) -> None:
        """Insert or replace ``sweep`` (``updated_unix`` is set to now; this process is its owner)."""
        with self.db.write() as conn:
            self._put_sweep(conn, sweep)

    @staticmethod
    def _put_sweep(conn: sqlite3.Connection, sweep: SweepRecord) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO sweeps (id, created_unix, updated_unix, axis, model, status, options_json, "
            "result_json, pid, host, pid_started, status_note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sweep.id, sweep.created_unix, time.time(), sweep.axis, sweep.model, sweep.status, sweep.options_json,
             sweep.result_json, *owner.current(), sweep.status_note),
        )

    def claim_sweep(self, sweep: SweepRecord) -> None:
        """Store ``sweep`` as ``running`` by this process, unless another live process on this host is
        running the same sweep id (checked and written in one transaction, so two racing commands cannot
        both claim it).

        Raises:
            StoreError: the sweep is ``running`` in another process that still runs (exit 4; the message
                names its pid and the fix).
        """
        me = owner.current()
        with self.db.write() as conn:
            row = conn.execute("SELECT status, pid, host, pid_started FROM sweeps WHERE id = ?",
                               (sweep.id,)).fetchone()
            if row is not None and row[0] == "running" and row[1] != me[0] and owner.ended(*row[1:]) is False:
                raise StoreError(
                    f"sweep {sweep.id} is already running in process {row[1]} on this host (store {self.path}): "
                    f"two runs of one sweep would mix their baselines and points; wait for pid {row[1]} to "
                    f"finish (or stop it: kill -TERM {row[1]}), then rerun this command to resume, or pass "
                    f"--store with another file"
                )
            self._put_sweep(conn, sweep.model_copy(update={"status": "running", "status_note": None}))

    def get_sweep(self, sweep_id: str) -> SweepRecord | None:
        """The sweep ``sweep_id`` (exact id), or None."""
        rows = self.db.query("SELECT * FROM sweeps WHERE id = ?", (sweep_id,))
        return _sweep_from_row(rows[0]) if rows else None

    def list_sweeps(self, limit: int = 50) -> list[SweepRecord]:
        """Sweeps, most recently updated first."""
        rows = self.db.query("SELECT * FROM sweeps ORDER BY updated_unix DESC LIMIT ?", (limit,))
        return [_sweep_from_row(r) for r in rows]

