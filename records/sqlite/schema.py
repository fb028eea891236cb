"""The database file: opening and checking it, the schema, its versions and their migration, and
the transactions the other parts run through.

Files
-----
SQLite in WAL mode: readers never block the writer and a killed process loses at most the
transaction in flight.  Every write is one ``BEGIN IMMEDIATE`` transaction (a measured batch
is one), and a busy time-out makes a second process wait for the lock instead of failing, so
two tuning runs can share one file.  ``synchronous=FULL`` by default also keeps committed
batches through a power cut; ``synchronous="normal"`` keeps them through a process kill only.

Opening checks the file before writing anything: a file that is not SQLite, a corrupt one, an
SQLite file of another application, or one with a newer schema raises DatabaseError naming the
file and leaves it untouched.  An older schema is migrated in place, in one transaction.  No
value read from the file is ever executed: traces, workloads, settings are JSON text.

Schema (version 4)
------------------
meta(key PRIMARY KEY, value)
    application = "autotune.records", schema_version, created_by (library version).
    The SQLite header also holds application_id 0x41545244 ("ATRD") and user_version.
workloads(key PRIMARY KEY, name, func, created)
    key: structural hash of the PrimFunc; func: its JSON (tensor_ir.func.to_json) as text.
records(id PRIMARY KEY, uid UNIQUE, workload_key -> workloads, target, trace_hash, trace,
        run_times, median, error_kind, error_msg, host, version, timestamp, config, details,
        fingerprint_id -> fingerprints, score, remeasure_count)
    target: canonical target string; trace: canonical trace JSON (with its format_version);
    run_times: JSON list of seconds; median: NULL for errors; config: the MeasureConfig as
    JSON; details: the rest of the MeasureResult as JSON; uid: content hash (imports skip
    records already present); score: the median used for ranking, which re-measurements
    pool into; indexes on (workload_key, target, trace_hash) and (workload_key, target, score).
fingerprints(id PRIMARY KEY, target, hw_hash, digest UNIQUE, data)
    data: the fingerprint JSON (records.fingerprint); hw_hash: hash of its hardware part.
remeasurements(id PRIMARY KEY, record_id -> records, run_times, median, spread, timestamp,
               host, config)
    spread: (max - min) / median of the re-measured run times.

claims(workload_key, target, trace_hash, owner, expires), primary key on the first three
    candidates a tuning process is measuring right now (see ``claim``): another process
    tuning the same workload into the file skips them.
choices(workload_key, target, context, record_id -> records, timestamp, details), primary
    key on the first three: the record a model build takes for a workload in ``context`` (a
    model's name) rather than the best by score, because it ran fastest inside that model
    (see ``choose`` and autotune.tuning.rerank); details: the in-model times as JSON.

Schema history: 1 had meta, workloads and records without fingerprints, score and
re-measurements; 2 added them (records of a version-1 file have no fingerprint: their target
string alone decides where they apply); 3 added claims; 4 added choices.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
import urllib.parse
from contextlib import contextmanager

from ..errors import DatabaseError
from ..record import library_version

SCHEMA_VERSION = 4
APPLICATION = "autotune.records"
APPLICATION_ID = 0x41545244  # "ATRD" in the SQLite header
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SYNCHRONOUS = ("off", "normal", "full", "extra")

# Each step takes a database at version N-1 to version N.  A new file runs every step, so the
# migration path is exercised by every test that creates a database.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE workloads (key TEXT PRIMARY KEY, name TEXT NOT NULL, "
        "func TEXT NOT NULL, created REAL NOT NULL)",
        "CREATE TABLE records (id INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, "
        "workload_key TEXT NOT NULL REFERENCES workloads(key), target TEXT NOT NULL, "
        "trace_hash TEXT NOT NULL, trace TEXT NOT NULL, run_times TEXT NOT NULL, median REAL, "
        "error_kind TEXT, error_msg TEXT, host TEXT NOT NULL, version TEXT NOT NULL, "
        "timestamp REAL NOT NULL, config TEXT NOT NULL, details TEXT NOT NULL)",
        "CREATE INDEX records_by_trace ON records(workload_key, target, trace_hash)",
    ),
    2: (
        "CREATE TABLE fingerprints (id INTEGER PRIMARY KEY, target TEXT NOT NULL, "
        "hw_hash TEXT NOT NULL, digest TEXT NOT NULL UNIQUE, data TEXT NOT NULL)",
        "CREATE INDEX fingerprints_by_hw ON fingerprints(hw_hash)",
        "ALTER TABLE records ADD COLUMN fingerprint_id INTEGER REFERENCES fingerprints(id)",
        "ALTER TABLE records ADD COLUMN score REAL",
        "ALTER TABLE records ADD COLUMN remeasure_count INTEGER NOT NULL DEFAULT 0",
        "UPDATE records SET score = median",
        "CREATE INDEX records_by_score ON records(workload_key, target, score)",
        "CREATE TABLE remeasurements (id INTEGER PRIMARY KEY, "
        "record_id INTEGER NOT NULL REFERENCES records(id), run_times TEXT NOT NULL, "
        "median REAL NOT NULL, spread REAL NOT NULL, timestamp REAL NOT NULL, "
        "host TEXT NOT NULL, config TEXT NOT NULL, UNIQUE(record_id, timestamp, run_times))",
    ),
    3: (
        "CREATE TABLE claims (workload_key TEXT NOT NULL, target TEXT NOT NULL, "
        "trace_hash TEXT NOT NULL, owner TEXT NOT NULL, expires REAL NOT NULL, "
        "PRIMARY KEY (workload_key, target, trace_hash))",
    ),
    4: (
        "CREATE TABLE choices (workload_key TEXT NOT NULL, target TEXT NOT NULL, "
        "context TEXT NOT NULL, record_id INTEGER NOT NULL REFERENCES records(id), "
        "timestamp REAL NOT NULL, details TEXT NOT NULL, "
        "PRIMARY KEY (workload_key, target, context))",
    ),
}
assert max(MIGRATIONS) == SCHEMA_VERSION


class SQLiteFile:
    """The file under a Database: one connection and one lock, opened only once the file is
    known to be ours, and the ``_write`` / ``_read`` transactions every other part uses."""

    # -- opening -------------------------------------------------------------------------------
    def _open_file(self, path, create: bool, timeout: float, synchronous: str, verify: bool,
                   readonly: bool) -> None:
        self.readonly = bool(readonly)
        if self.readonly and path == ":memory:":
            raise ValueError("a read-only database needs a file")
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got "
                             f"{synchronous!r}")
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self.timeout = timeout
        self.path = path if path == ":memory:" else os.fspath(path)
        self.in_memory = self.path == ":memory:"
        if not self.in_memory:
            _check_file(self.path, create and not self.readonly)
        if self.readonly:
            self._open_readonly(verify, timeout)
            return
        try:
            conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as err:
            raise DatabaseError(f"cannot open database {self.path}: {err}") from None
        self._conn = conn
        try:
            self._open(synchronous, verify, timeout)
        except BaseException:
            conn.close()
            self._conn = None
            raise

    def _open_readonly(self, verify: bool, timeout: float) -> None:
        """Open without writing: SQLite's read-only mode; where that cannot work (a WAL file
        in a folder this process cannot write, which has no shared-memory file beside it), the
        file is read as immutable.  A file of an older schema is copied into memory and
        migrated there, so reading never rewrites it."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
        last = None
        for suffix in ("", "&immutable=1"):
            conn = None
            try:
                conn = sqlite3.connect(uri + suffix, uri=True, timeout=timeout,
                                       isolation_level=None, check_same_thread=False)
                conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as err:
                if conn is not None:
                    conn.close()
                last = err
                continue
            self._conn = conn
            break
        else:
            raise DatabaseError(f"cannot open database {self.path} read-only: {last}")
        try:
            with self._guard("reading the schema", opening=True), self._snapshot():
                version = self._stored_version(verify)
                if version is None:
                    raise DatabaseError(f"no tuning records in {self.path} (an empty file)")
                self.file_version = version
                self.journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if version < SCHEMA_VERSION:
                with self._guard("copying an older schema into memory", opening=True):
                    memory = sqlite3.connect(":memory:", isolation_level=None,
                                             check_same_thread=False)
                    conn.backup(memory)
                    conn.close()
                    self._conn = memory
                self.readonly = False  # the in-memory copy may be migrated, never the file
                self._migrate()
                self.readonly = True
        except BaseException:
            self._conn.close()
            self._conn = None
            raise

    def _open(self, synchronous: str, verify: bool, timeout: float) -> None:
        conn = self._conn
        # 1. Read-only checks: nothing is written before the file is known to be ours.
        with self._guard("reading the schema", opening=True), self._snapshot():
            version = self._stored_version(verify) or 0  # a new file is built from step 1
        # 2. Settings.  WAL is a property of the file; switching needs a moment's exclusive
        # access, which another process opening the same new file may hold.
        self.journal_mode = "memory"
        if not self.in_memory:
            self.journal_mode = self._set_wal(timeout)
        with self._guard("configuring the connection"):
            conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys = ON")
        # 3. Create or migrate (a no-op when another process got there first).  A current
        # file is not written at all, so a reader never takes the write lock.
        if version < SCHEMA_VERSION:
            self._migrate()

    @contextmanager
    def _snapshot(self):
        """One read transaction around the schema checks.  The application id (in the file
        header) and the table list are two statements; in autocommit each would see the file
        as it is at that moment, and another process creating the schema between them makes
        a new file look like another application's (tables, but application id 0)."""
        conn = self._conn
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _stored_version(self, verify: bool) -> int | None:
        """The schema version of the open file (None for a new, empty file; DatabaseError for
        one not ours), read without writing; with ``verify``, SQLite's quick_check first (a
        corrupt file is a DatabaseError)."""
        conn = self._conn
        if verify:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise DatabaseError(f"database file {self.path} is corrupt (SQLite quick_check: "
                                    f"{_summarise(problems)}); nothing was written to it")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        return None if not tables and app_id == 0 else self._check_ours(app_id, tables)

    def _check_ours(self, app_id: int, tables: set[str]) -> int:
        """The schema version of a file that must be ours; DatabaseError otherwise."""
        if app_id != APPLICATION_ID or "meta" not in tables:
            shown = ", ".join(sorted(tables)[:6]) or "no tables"
            raise DatabaseError(
                f"{self.path} is an SQLite database of another application (application_id "
                f"{app_id:#x}, tables: {shown}), not a tuning-record database; nothing was "
                f"written to it")
        meta = dict(self._conn.execute("SELECT key, value FROM meta"))
        if meta.get("application") != APPLICATION:
            raise DatabaseError(f"{self.path} is not a tuning-record database (its meta table "
                                f"names application {meta.get('application')!r}); nothing "
                                f"was written to it")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise DatabaseError(f"database {self.path} has an unreadable schema_version "
                                f"{meta.get('schema_version')!r}; nothing was written to it"
                                ) from None
        if version > SCHEMA_VERSION:
            raise DatabaseError(
                f"database {self.path} has schema version {version}, newer than this release "
                f"reads ({SCHEMA_VERSION}; written by autotune {meta.get('created_by', '?')}). "
                f"Upgrade autotune to open it; nothing was written to it")
        return version

    def _set_wal(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._guard("switching to WAL mode"):
                    return self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except DatabaseError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _migrate(self) -> None:
        with self._write("migrating the schema", opening=True) as conn:
            # Re-read inside the write lock: another process may have created or migrated
            # the file since the checks in _open.
            version = self._stored_version(verify=False) or 0
            if version == SCHEMA_VERSION:
                return
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            rows = [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))]
            if version == 0:
                rows.append(("created_by", library_version()))
            conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", rows)

    # -- plumbing ------------------------------------------------------------------------------
    @contextmanager
    def _guard(self, action: str, opening: bool = False):
        """Turn SQLite errors into DatabaseErrors that name the file and the action."""
        try:
            yield
        except sqlite3.Error as err:
            text = str(err)
            if isinstance(err, sqlite3.OperationalError) and ("locked" in text
                                                               or "busy" in text):
                raise DatabaseError(
                    f"database {self.path}: {action} failed: another process held the file "
                    f"locked for longer than the {self.timeout:g} s busy time-out") from None
            if "malformed" in text or "not a database" in text or "corrupt" in text:
                tail = "; nothing was written to it" if opening else ""
                raise DatabaseError(f"database file {self.path} is corrupt ({text}) while "
                                    f"{action}{tail}") from None
            raise DatabaseError(f"database {self.path}: {action} failed: {text}") from None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise DatabaseError(f"database {self.path} is closed")
        return self._conn

    @contextmanager
    def _write(self, action: str, opening: bool = False):
        """One write transaction, taken with BEGIN IMMEDIATE so that waiting for another
        writer happens up front (under the busy time-out), never as a failed upgrade of a
        read transaction halfway through."""
        if self.readonly:
            raise DatabaseError(f"database {self.path} is open read-only; {action} needs "
                                f"write access")
        with self._lock, self._guard(action, opening):
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # SQLite rolls some failed transactions back by itself; a second ROLLBACK
                # would raise and hide the original error.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self, action: str):
        with self._lock, self._guard(action):
            yield self._connection()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def schema_version(self) -> int:
        with self._read("reading the schema version") as conn:
            return int(conn.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    def integrity_check(self) -> list[str]:
        """Problems SQLite's integrity_check finds (empty when the file is sound)."""
        with self._read("checking integrity") as conn:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems == ["ok"]:
            return []
        return [line for p in problems for line in p.splitlines() if line.strip()]


def _summarise(problems: list[str], shown: int = 3) -> str:
    """The first few lines of an integrity report, on one line."""
    lines = [line.strip() for p in problems for line in p.splitlines()
             if line.strip() and not line.startswith("***")]
    more = f" (and {len(lines) - shown} more)" if len(lines) > shown else ""
    return "; ".join(lines[:shown]) + more


def _check_file(path: str, create: bool) -> None:
    """Refuse, before SQLite touches it, a path that cannot be a tuning database."""
    if os.path.isdir(path):
        raise DatabaseError(f"database path {path} is a directory")
    if not os.path.exists(path):
        if not create:
            raise DatabaseError(f"no database at {path}")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise DatabaseError(f"cannot create database {path}: directory {parent} does not "
                                f"exist")
        return
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as err:
        raise DatabaseError(f"cannot read database {path}: {err}") from None
    # An empty file is a new database (e.g. made by tempfile); anything else must be SQLite.
    if head and (len(head) < 100 or not head.startswith(_SQLITE_MAGIC)):
        raise DatabaseError(f"{path} is not an SQLite database (it starts with "
                            f"{head[:16]!r}); nothing was written to it")
