"""The SQLite run store: where it lives, how it opens, its schema and the errors it raises.

Location: ``--store PATH``, else ``$DIFFBENCH_STORE``, else ``$XDG_DATA_HOME/diffbench/store.sqlite``
(``~/.local/share/diffbench/store.sqlite`` when XDG_DATA_HOME is unset).

Schema (version :data:`SCHEMA_VERSION`, kept in the one-row table ``schema_version``):

- ``runs``: one generation set (a baseline, a noise-floor repeat or a sweep point) with its deployment
  fingerprint, conditions, outputs manifest, timing summary (seconds) and quality summary (dB).
- ``sweeps``: one sweep definition (axis, values, options) and its last assembled result.
- both carry the process that wrote the row (``pid``, ``host``, ``pid_started``: its start time, Unix s)
  and a ``status_note``: a ``running`` row whose process has ended is marked ``interrupted`` when the store
  is opened (version 2; a version-1 file gains these columns on its first writable open).

Read-only commands open the file read-only (:func:`open_db` with ``readonly``): they work on a read-only
file or mount; only writes need a writable file.

Every sqlite3 error is translated here into :class:`~diffbench.errors.StoreError` (exit 4) naming the file
and the fix: a lock held by another process, a read-only file, a file from a newer diffbench, a file that is
not a database.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from diffbench.errors import StoreError, UsageError

SCHEMA_VERSION = 2
STORE_ENV = "DIFFBENCH_STORE"
DEFAULT_TIMEOUT_S = 5.0

_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        created_unix REAL NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        sweep_id TEXT,
        axis TEXT,
        value TEXT,
        model TEXT NOT NULL,
        fingerprint_hash TEXT NOT NULL,
        fingerprint_json TEXT NOT NULL,
        conditions_json TEXT NOT NULL,
        manifest_json TEXT,
        outputs_dir TEXT,
        timing_json TEXT,
        quality_json TEXT,
        extra_json TEXT,
        pid INTEGER,
        host TEXT,
        pid_started REAL,
        status_note TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep_id, value, fingerprint_hash)",
    """CREATE TABLE IF NOT EXISTS sweeps (
        id TEXT PRIMARY KEY,
        created_unix REAL NOT NULL,
        updated_unix REAL NOT NULL,
        axis TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        options_json TEXT NOT NULL,
        result_json TEXT,
        pid INTEGER,
        host TEXT,
        pid_started REAL,
        status_note TEXT
    )""",
)

# version 2 added the owner of each row (the process that wrote it) and a note on its status, so that a
# `running` row whose process has ended can be marked `interrupted` (see diffbench.store.owner)
_OWNER_COLUMNS = (("pid", "INTEGER"), ("host", "TEXT"), ("pid_started", "REAL"), ("status_note", "TEXT"))


def default_store_path() -> Path:
    """``$DIFFBENCH_STORE``, else ``$XDG_DATA_HOME/diffbench/store.sqlite`` (``~/.local/share`` default)."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "diffbench" / "store.sqlite"


def translate(exc: sqlite3.Error, path: Path) -> StoreError:
    """Map a sqlite3 error on ``path`` to a :class:`StoreError` with the fix."""
    msg = str(exc).lower()
    if "locked" in msg or "busy" in msg:
        return StoreError(
            f"store {path} is locked by another process (sqlite: {exc}); wait for the other diffbench "
            f"command to finish, or pass --store with another file"
        )
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return StoreError(
            f"store {path} cannot be written (sqlite: {exc}); make it writable (chmod u+w {path}, and its "
            f"directory) or pass --store / set {STORE_ENV} to a writable file"
        )
    if "not a database" in msg or "malformed" in msg:
        return StoreError(
            f"store {path} is not a diffbench SQLite database (sqlite: {exc}); pass --store with another file"
        )
    return StoreError(f"store {path}: sqlite error: {exc}")


class Database:
    """An open store file. Use :func:`open_db`; close with :meth:`close` (or as a context manager)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, readonly: bool = False) -> None:
        self.path = path
        self.conn = conn
        self.readonly = readonly

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``); sqlite errors become :class:`StoreError`."""
        if self.readonly:
            raise StoreError(f"store {self.path} was opened read-only (a command that only reads); this write "
                             "needs a command that writes the store")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise translate(exc, self.path) from exc
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):
            self.conn.execute("ROLLBACK")

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """Run a read query; sqlite errors become :class:`StoreError`."""
        try:
            return list(self.conn.execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return False


def _check_writable(path: Path) -> None:
    target = path if path.exists() else path.parent
    if _read_only_mount(target):
        raise StoreError(
            f"store {path} is on a read-only file system (mount); the commands that only read it (runs, runs "
            f"show, runs compare) work there; to write, pass --store / set {STORE_ENV} to a writable file"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise StoreError(
            f"store {path} is read-only; make it writable (chmod u+w {path}) or pass --store / set "
            f"{STORE_ENV} to a writable file"
        )
    if not os.access(target, os.W_OK):
        raise StoreError(
            f"store directory {target} is not writable; pass --store / set {STORE_ENV} to a writable location"
        )


def open_db(path: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, *, mkdir: bool = False,
            create: bool = True, readonly: bool = False) -> Database:
    """Open (creating the file if needed and ``create``) the store at ``path`` (default :func:`default_store_path`).

    Directories: the per-user default location is created when missing. A store named explicitly
    (``path``, i.e. ``--store``, or ``$DIFFBENCH_STORE``) must have an existing parent directory unless
    ``mkdir``: a mistyped directory is an error, never a fresh empty store somewhere unexpected.

    Args:
        path: the SQLite file.
        timeout_s: how long to wait for another process's write lock before failing (seconds).
        mkdir: create a missing parent directory of an explicitly named store.
        create: create the file when it does not exist (False for commands that only read: ``runs``).
        readonly: open for reading only (``runs``, ``runs show``, ``runs compare``): works on a read-only file,
            directory or mount (SQLite ``mode=ro``, plus ``immutable=1`` when the file or its directory
            cannot be written, since nobody can change it then); implies ``create`` False. A version-1 file
            is read as it is (not migrated).

    Raises:
        UsageError: an explicitly named store whose parent directory is missing (without ``mkdir``), or a
            missing file with ``create`` False. Exit code 2.
        StoreError: the file or its directory is not writable, the file is locked, is not a SQLite database,
            or was written by a newer diffbench (its schema version is above :data:`SCHEMA_VERSION`).
    """
    option = "--store" if path is not None else f"${STORE_ENV}"
    explicit = path is not None or bool(os.environ.get(STORE_ENV))
    path = Path(path).expanduser() if path is not None else default_store_path()
    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory; give a file path such as {path / 'store.sqlite'}")
    if not path.exists() and (not create or readonly):
        raise UsageError(
            f"{option} {path}: no store there; check the path (list stores' runs with `diffbench runs --store "
            f"FILE`), or run a sweep first"
        )
    if not path.parent.exists():
        if explicit and not mkdir:
            raise UsageError(
                f"{option} {path}: directory {path.parent} does not exist; create it first or pass --mkdir"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {path}: cannot create its directory ({exc}); pass --store elsewhere") from exc
    if readonly:
        return _open_readonly(path, timeout_s)
    _check_writable(path)
    try:
        conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    except sqlite3.Error as exc:
        raise translate(exc, path) from exc
    conn.row_factory = sqlite3.Row
    try:  # commits without a full fsync each (safe against a crashed process; a sweep commits every run)
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:
        conn.close()
        raise translate(exc, path) from exc
    db = Database(path, conn)
    try:
        _migrate(db)
    except BaseException:
        conn.close()
        raise
    return db


def _open_readonly(path: Path, timeout_s: float) -> Database:
    """``path`` opened read-only; ``immutable=1`` when the file or its directory is not writable (a read-only
    mount: SQLite could not take its shared lock or read a journal there, and nothing can change the file)."""
    fixed = not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))
    uri = path.resolve().as_uri() + "?mode=ro" + ("&immutable=1" if fixed else "")
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None)
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise translate(exc, path) from exc
    found = row[0] if row is not None else None
    if found is not None and int(found) > SCHEMA_VERSION:
        conn.close()
        raise StoreError(
            f"store {path} has schema version {found}, newer than this diffbench understands "
            f"({SCHEMA_VERSION}); upgrade diffbench, or pass --store with another file"
        )
    return Database(path, conn, readonly=True)


def _migrate(db: Database) -> None:
    with db.write() as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "schema_version" in tables:
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            found = row[0] if row is not None else None
            if found is not None and int(found) > SCHEMA_VERSION:
                raise StoreError(
                    f"store {db.path} has schema version {found}, newer than this diffbench understands "
                    f"({SCHEMA_VERSION}); upgrade diffbench, or pass --store with another file"
                )
            if found is not None and int(found) == SCHEMA_VERSION:
                return
        for stmt in _DDL:
            conn.execute(stmt)
        for table in ("runs", "sweeps"):  # version 1 -> 2: the owner columns
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            for name, kind in _OWNER_COLUMNS:
                if name not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
