"""Database: tuning records in SQLite (WAL, one transaction per batch), queries, schema migration.

    db = Database("tuning.db")                       # or Database() / MemoryDatabase()
    key = db.commit_workload(Workload(func))
    db.commit_records([result.to_record(key, target, trace, config), ...])  # MeasureResults
    best = db.best_k(key, "llvm", k=4)               # fastest successful records, this hardware
    done = db.measured_hashes(key, "llvm")           # trace hashes a resumed search skips

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
    (see ``choose`` and autotune.model_rerank); details: the in-model times as JSON.

Schema history: 1 had meta, workloads and records without fingerprints, score and
re-measurements; 2 added them (records of a version-1 file have no fingerprint: their target
string alone decides where they apply); 3 added claims; 4 added choices.

Target matching
---------------
Queries take a target (string or Target) and canonicalise it.  A record matches when its target
string equals the queried one *and* its fingerprint's hardware part equals this machine's
resolution of that target, or when its target string is one of the ``compatible_targets`` the
caller names explicitly.  Records of the queried target measured on other hardware are never
returned; ``best_k`` warns once (RecordsWarning) when such records exist and are left out.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sqlite3
import statistics
import threading
import time
import urllib.parse
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from schedules.errors import ScheduleError
from schedules.trace import Trace
from tensor_ir.func import PrimFunc

from .errors import DatabaseError
from .fingerprint import fingerprint_differences, hardware_hash, target_fingerprint
from .jsonl import export_jsonl, import_jsonl
from .keys import canonical_json, canonical_target, spread, workload_key
from .record import TuningRecord, host_name, json_dict, library_version
from .workload import WORKLOAD_FORMAT_VERSION, Workload

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "Database", "RecordsWarning"]

SCHEMA_VERSION = 4
APPLICATION = "autotune.records"
APPLICATION_ID = 0x41545244  # "ATRD" in the SQLite header
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SYNCHRONOUS = ("off", "normal", "full", "extra")


class RecordsWarning(UserWarning):
    """Records exist but are not used (measured on other hardware)."""


# Each step takes a database at version N-1 to version N.  A new file runs every step, so the
# migration path is exercised by every test that creates a database.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
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
assert max(_MIGRATIONS) == SCHEMA_VERSION

_RECORD_COLUMNS = ("r.id, r.workload_key, r.target, r.trace, r.run_times, r.median, "
                   "r.error_kind, r.error_msg, r.host, r.version, r.timestamp, r.config, "
                   "r.details, r.score, r.remeasure_count, r.fingerprint_id, r.uid, "
                   "r.trace_hash")


def _fingerprint_digest(target: str, fingerprint: Mapping) -> str:
    return hashlib.sha256((target + "\n" + canonical_json(fingerprint)).encode()).hexdigest()


class Database:
    """Tuning records in an SQLite file (or in memory with the default ``":memory:"``).

    ``Database(path=":memory:", *, create=True, timeout=60.0, synchronous="full",
    verify=False, readonly=False)``: ``create=False`` refuses a missing file; ``timeout`` is
    how long a write waits for another process's transaction; ``verify`` runs SQLite's full
    quick_check when opening (reads the whole file).  ``readonly=True`` never writes the file
    or anything beside it (see :meth:`_open_readonly`): what builds and reports use, so that a
    shipped database in a read-only folder serves them.  Usable as a context manager;
    thread-safe; not to be shared across ``fork`` (open it again in the child).
    """

    def __init__(self, path=":memory:", *, create: bool = True, timeout: float = 60.0,
                 synchronous: str = "full", verify: bool = False, readonly: bool = False):
        self.readonly = bool(readonly)
        if self.readonly and path == ":memory:":
            raise ValueError("a read-only database needs a file")
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got "
                             f"{synchronous!r}")
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._known_workloads: set[str] = set()
        self._fingerprint_ids: dict[str, int] = {}
        self._fingerprint_data: dict[int, dict] = {}
        self._warned: set[str] = set()
        self._unreadable: set[int] = set()
        # Records whose traces do not parse or replay here: record id -> why (skip_unusable).
        self.unusable: dict[int, str] = {}
        # Who holds a claim: this object in this process on this host.
        self._owner = f"{host_name()}:{os.getpid()}:{id(self):x}"
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
                app_id, tables = self._schema_facts(verify)
                if not tables and app_id == 0:
                    raise DatabaseError(f"no tuning records in {self.path} (an empty file)")
                version = self._check_ours(app_id, tables)
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

    # -- opening -------------------------------------------------------------------------------
    def _open(self, synchronous: str, verify: bool, timeout: float) -> None:
        conn = self._conn
        # 1. Read-only checks: nothing is written before the file is known to be ours.
        with self._guard("reading the schema", opening=True), self._snapshot():
            app_id, tables = self._schema_facts(verify)
            fresh = not tables and app_id == 0
            version = 0 if fresh else self._check_ours(app_id, tables)
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

    def _schema_facts(self, verify: bool) -> tuple[int, set[str]]:
        """(application_id, table names) of the open file, read without writing; with
        ``verify``, SQLite's quick_check first (a corrupt file is a DatabaseError)."""
        conn = self._conn
        if verify:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise DatabaseError(f"database file {self.path} is corrupt (SQLite quick_check: "
                                    f"{_summarise(problems)}); nothing was written to it")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        return app_id, tables

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
            app_id, tables = self._schema_facts(verify=False)
            version = 0 if (not tables and app_id == 0) else self._check_ours(app_id, tables)
            if version == SCHEMA_VERSION:
                return
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
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

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else f"schema {SCHEMA_VERSION}"
        return f"Database({self.path!r}, {state})"

    @property
    def schema_version(self) -> int:
        with self._read("reading the schema version") as conn:
            return int(conn.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    # -- workloads -----------------------------------------------------------------------------
    def commit_workload(self, workload: Workload | PrimFunc, name: str | None = None) -> str:
        """Store a workload (a Workload, or a PrimFunc with an optional name) unless its key is
        present already; returns the key."""
        if isinstance(workload, PrimFunc):
            workload = Workload(workload, name)
        elif not isinstance(workload, Workload):
            raise TypeError(f"commit_workload takes a Workload or PrimFunc, got "
                            f"{type(workload).__name__}")
        if workload.key in self._known_workloads:
            return workload.key
        with self._write(f"storing workload {workload.name}") as conn:
            self._insert_workloads(conn, [workload])
        self._known_workloads.add(workload.key)
        return workload.key

    def _insert_workloads(self, conn, workloads: Iterable[Workload]) -> int:
        rows = [(w.key, w.name, canonical_json(w.func.to_json()), time.time())
                for w in workloads]
        cur = conn.executemany("INSERT OR IGNORE INTO workloads(key, name, func, created) "
                               "VALUES (?, ?, ?, ?)", rows)
        return cur.rowcount

    def has_workload(self, workload) -> bool:
        key = workload_key(workload)
        with self._read("looking up a workload") as conn:
            return conn.execute("SELECT 1 FROM workloads WHERE key = ?", (key,)).fetchone() \
                is not None

    def workload(self, key: str) -> Workload:
        """The stored workload with this key (DatabaseError when absent)."""
        with self._read(f"reading workload {key}") as conn:
            row = conn.execute("SELECT key, name, func FROM workloads WHERE key = ?",
                               (key,)).fetchone()
        if row is None:
            raise DatabaseError(f"database {self.path} has no workload {key}")
        return self._workload_from_row(row)

    def workloads(self) -> list[Workload]:
        """Every stored workload, in the order they were added."""
        with self._read("reading workloads") as conn:
            rows = conn.execute("SELECT key, name, func FROM workloads ORDER BY rowid").fetchall()
        return [self._workload_from_row(row) for row in rows]

    def _workload_from_row(self, row) -> Workload:
        key, name, func_text = row
        try:
            func = PrimFunc.from_json(json.loads(func_text))
        except Exception as err:  # malformed JSON or IR fails in many ways
            raise DatabaseError(f"database {self.path}: workload {key} ({name}) does not "
                                f"load: {type(err).__name__}: {err}") from None
        return Workload(func, name, key=key)

    # -- writing records -----------------------------------------------------------------------
    def commit_records(self, records: Iterable[TuningRecord],
                       fingerprint: Mapping | None = None) -> int:
        """Store a batch of records in one transaction; returns how many were new (a record
        already present, same uid, is skipped).  Target strings are canonicalised and each
        record is tagged with the fingerprint of its target as resolved here, or with
        ``fingerprint`` when given (a remote runner's, for every record of the batch).
        Every record's workload must have been committed first."""
        records = list(records)
        for r in records:
            if not isinstance(r, TuningRecord):
                raise TypeError(f"commit_records takes TuningRecords, got {type(r).__name__}")
        if not records:
            return 0
        # 1. Resolve targets and fingerprints before taking the write lock (parsing a target
        # can take a while the first time; other processes should not wait on it).
        resolved: dict[str, tuple[str, dict]] = {}
        batch = []
        for r in records:
            if r.target not in resolved:
                canonical = canonical_target(r.target)
                fp = dict(fingerprint) if fingerprint is not None else (
                    r.fingerprint if r.fingerprint is not None
                    else target_fingerprint(canonical))
                resolved[r.target] = (canonical, fp)
            canonical, fp = resolved[r.target]
            if canonical != r.target:
                r = dataclasses.replace(r, target=canonical)
            batch.append((r, fp))
        # 2. One transaction for the batch.
        fp_ids: dict[str, int] = {}
        with self._write(f"committing {len(batch)} records") as conn:
            added = self._insert_records(conn, batch, fp_ids)
            conn.executemany("DELETE FROM claims WHERE workload_key = ? AND target = ? AND "
                             "trace_hash = ?",
                             [(r.workload_key, r.target, r.trace_hash) for r, _ in batch])
        self._fingerprint_ids.update(fp_ids)  # only ids of committed rows are remembered
        return added

    def _insert_records(self, conn, batch: Sequence[tuple[TuningRecord, dict | None]],
                        fp_ids: dict[str, int]) -> int:
        """Insert records (workloads must be present); ``fp_ids`` collects the fingerprint
        ids used, for the caller to cache once the transaction has committed."""
        keys = {r.workload_key for r, _ in batch}
        present = {k for (k,) in conn.execute(
            f"SELECT key FROM workloads WHERE key IN ({','.join('?' * len(keys))})",
            tuple(keys))}
        missing = keys - present
        if missing:
            raise DatabaseError(f"database {self.path} has no workload {sorted(missing)[0]}; "
                                f"commit_workload it before its records")
        rows = []
        for r, fp in batch:
            fp_id = None
            if fp is not None:
                digest = _fingerprint_digest(r.target, fp)
                fp_id = fp_ids.get(digest)
                if fp_id is None:
                    fp_id = self._fingerprint_id(conn, r.target, fp, digest)
                    fp_ids[digest] = fp_id
            median = None if r.is_error else r.median
            rows.append((r.uid, r.workload_key, r.target, r.trace_hash, r.trace_text,
                         json.dumps(list(r.run_times)), median, r.error_kind, r.error_msg,
                         r.host, r.version, r.timestamp, canonical_json(r.config),
                         canonical_json(r.details), fp_id, median))
        cur = conn.executemany(
            "INSERT OR IGNORE INTO records(uid, workload_key, target, trace_hash, trace, "
            "run_times, median, error_kind, error_msg, host, version, timestamp, config, "
            "details, fingerprint_id, score) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        return cur.rowcount

    def _fingerprint_id(self, conn, target: str, fp: Mapping, digest: str) -> int:
        # NOTE: ids cached across transactions are safe because fingerprints are never
        # deleted; the cache holds only ids of committed rows (see commit_records).
        cached = self._fingerprint_ids.get(digest)
        if cached is not None:
            return cached
        conn.execute("INSERT OR IGNORE INTO fingerprints(target, hw_hash, digest, data) "
                     "VALUES (?, ?, ?, ?)",
                     (target, hardware_hash(fp), digest, canonical_json(dict(fp))))
        fp_id = conn.execute("SELECT id FROM fingerprints WHERE digest = ?",
                             (digest,)).fetchone()[0]
        return fp_id

    def update_best_remeasure(self, record_id: int, run_times: Sequence[float],
                              config=None, *, host: str | None = None,
                              timestamp: float | None = None) -> float:
        """Store a re-measurement of a successful record (the tuner re-times its top
        candidates to be robust to noise) and return the record's new score: the median of
        its original run times pooled with every re-measurement's.  ``best_k`` ranks by it."""
        times = [float(t) for t in run_times]
        if not times or not all(math.isfinite(t) and t >= 0 for t in times):
            raise ValueError(f"re-measured run times must be a non-empty list of finite "
                             f"seconds, got {run_times!r}")
        config_text = canonical_json(json_dict(config, "config"))
        with self._write(f"storing a re-measurement of record {record_id}") as conn:
            row = conn.execute("SELECT run_times, error_kind FROM records WHERE id = ?",
                               (record_id,)).fetchone()
            if row is None:
                raise DatabaseError(f"database {self.path} has no record {record_id}")
            if row[1] is not None:
                raise DatabaseError(f"record {record_id} is an error ({row[1]}); only "
                                    f"successful records are re-measured")
            conn.execute(
                "INSERT OR IGNORE INTO remeasurements(record_id, run_times, median, spread, "
                "timestamp, host, config) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record_id, json.dumps(times), statistics.median(times), spread(times),
                 time.time() if timestamp is None else float(timestamp),
                 host_name() if host is None else host, config_text))
            return self._rescore(conn, record_id)

    def _rescore(self, conn, record_id: int) -> float:
        (original,) = conn.execute("SELECT run_times FROM records WHERE id = ?",
                                   (record_id,)).fetchone()
        pooled = list(json.loads(original))
        extra = conn.execute("SELECT run_times FROM remeasurements WHERE record_id = ?",
                             (record_id,)).fetchall()
        for (text,) in extra:
            pooled.extend(json.loads(text))
        score = statistics.median(pooled)
        conn.execute("UPDATE records SET score = ?, remeasure_count = ? WHERE id = ?",
                     (score, len(extra), record_id))
        return score

    def remeasurements(self, record_id: int) -> list[dict]:
        """The re-measurements of a record, oldest first: ``{"run_times", "median", "spread",
        "timestamp", "host", "config"}``."""
        with self._read(f"reading re-measurements of record {record_id}") as conn:
            rows = conn.execute(
                "SELECT run_times, median, spread, timestamp, host, config FROM remeasurements "
                "WHERE record_id = ? ORDER BY id", (record_id,)).fetchall()
        return [{"run_times": json.loads(t), "median": m, "spread": s, "timestamp": ts,
                 "host": h, "config": json.loads(c)} for t, m, s, ts, h, c in rows]

    # -- queries -------------------------------------------------------------------------------
    def _target_filter(self, target, compatible_targets: Iterable,
                       check_fingerprint: bool) -> tuple[str, list, str]:
        """SQL condition on records ``r`` for the target match, its parameters, and the
        canonical primary target."""
        primary = canonical_target(target)
        others = sorted({canonical_target(t) for t in compatible_targets} - {primary})
        if check_fingerprint:
            hw = hardware_hash(target_fingerprint(primary))
            cond = ("(r.target = ? AND (r.fingerprint_id IS NULL OR r.fingerprint_id IN "
                    "(SELECT id FROM fingerprints WHERE hw_hash = ?)))")
            params: list = [primary, hw]
        else:
            cond, params = "(r.target = ?)", [primary]
        if others:
            cond = f"({cond} OR r.target IN ({','.join('?' * len(others))}))"
            params.extend(others)
        return cond, params, primary

    def best_k(self, workload, target, k: int = 1, compatible_targets: Iterable = (),
               check_fingerprint: bool = True) -> list[TuningRecord]:
        """The ``k`` fastest successful records of a workload (key, Workload or PrimFunc) for
        ``target``, fastest first (by score; ties by age).  ``compatible_targets`` names other
        target strings whose records are acceptable too.  Records of ``target`` measured on
        hardware that differs from this machine's resolution of it are left out (with
        ``check_fingerprint=False`` they are not)."""
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        key = workload_key(workload)
        cond, params, primary = self._target_filter(target, compatible_targets,
                                                    check_fingerprint)
        with self._read("querying the best records") as conn:
            rows = conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records r WHERE r.workload_key = ? AND {cond} "
                f"AND r.error_kind IS NULL ORDER BY r.score, r.id", [key, *params])
            out = self._readable(conn, rows, k) if k else []
        if check_fingerprint and len(out) < k:
            self._warn_foreign(key, primary)
        return out

    def best(self, workload, target, compatible_targets: Iterable = (),
             check_fingerprint: bool = True) -> TuningRecord | None:
        """The fastest matching record, or None."""
        found = self.best_k(workload, target, 1, compatible_targets, check_fingerprint)
        return found[0] if found else None

    def choose(self, workload, target, record_id: int, context: str,
               details=None) -> None:
        """Record that builds in ``context`` (a model's name) take record ``record_id`` for
        ``workload`` on ``target``, whatever the scores say (``chosen`` returns it); it
        replaces an earlier choice there.  ``details``: JSON-able evidence (in-model times).
        The record must be a successful one of that workload and target."""
        key = workload_key(workload)
        primary = canonical_target(target)
        if not isinstance(context, str) or not context:
            raise ValueError(f"choose: context must be a non-empty string, got {context!r}")
        text = canonical_json(json_dict(details or {}, "details"))
        with self._write(f"storing the choice of record {record_id}") as conn:
            row = conn.execute("SELECT workload_key, target, error_kind FROM records "
                               "WHERE id = ?", (record_id,)).fetchone()
            if row is None or row[0] != key or row[1] != primary or row[2] is not None:
                raise DatabaseError(
                    f"database {self.path}: record {record_id} is not a successful record of "
                    f"workload {key[:12]} on {primary}; it cannot be chosen for it")
            conn.execute("INSERT OR REPLACE INTO choices(workload_key, target, context, "
                         "record_id, timestamp, details) VALUES (?, ?, ?, ?, ?, ?)",
                         (key, primary, context, record_id, time.time(), text))

    def chosen(self, workload, target, context: str,
               check_fingerprint: bool = True) -> TuningRecord | None:
        """The record chosen for ``workload`` on ``target`` in ``context`` (see ``choose``),
        or None: none was chosen, or it was measured on other hardware than this machine's
        resolution of the target (unless ``check_fingerprint=False``)."""
        key = workload_key(workload)
        cond, params, _ = self._target_filter(target, (), check_fingerprint)
        with self._read("querying the chosen record") as conn:
            rows = conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM choices c JOIN records r ON r.id = c.record_id "
                f"WHERE c.workload_key = ? AND c.context = ? AND c.target = r.target AND "
                f"r.workload_key = c.workload_key AND {cond} AND r.error_kind IS NULL",
                [key, context, *params])
            found = self._readable(conn, rows, 1)
        return found[0] if found else None

    def build_candidates(self, workload, target, context: str | None = None, k: int = 4,
                         compatible_targets: Iterable = ()) -> list[TuningRecord]:
        """The records a build of ``workload`` on ``target`` tries, in order: the one chosen
        for it in ``context`` (a model's name; see ``choose``) where there is one, then the
        ``k`` best by score.  The build takes the first that replays
        (``autotune.history.choose_record``, the one rule every build path uses)."""
        ranked = self.best_k(workload, target, k, compatible_targets=compatible_targets)
        chosen = self.chosen(workload, target, context) if context else None
        if chosen is None:
            return ranked
        return [chosen] + [r for r in ranked if r.record_id != chosen.record_id]

    def skip_unusable(self, record: TuningRecord, reason: str) -> None:
        """Note that ``record`` cannot serve in this release (its trace does not parse or
        replay): the first note of a record warns (RecordsWarning, naming it and why), later
        ones are silent; ``unusable`` counts them.  Searches, builds and reports leave such a
        record out and go on."""
        if record.record_id in self.unusable:
            return
        self.unusable[record.record_id] = reason
        warnings.warn(RecordsWarning(
            f"database {self.path}: record {record.record_id} of workload "
            f"{record.workload_key[:12]} on {record.target} cannot be used ({reason}); it "
            f"is skipped"), stacklevel=3)

    def _warn_foreign(self, key: str, target: str) -> None:
        """Warn (once per target) when records of ``target`` exist that were measured on
        hardware other than this machine's resolution of the target."""
        if target in self._warned:
            return
        current = target_fingerprint(target)
        hw = hardware_hash(current)
        with self._read("checking fingerprints") as conn:
            rows = conn.execute(
                "SELECT f.data, COUNT(*) FROM records r JOIN fingerprints f "
                "ON r.fingerprint_id = f.id WHERE r.workload_key = ? AND r.target = ? "
                "AND f.hw_hash != ? GROUP BY f.id", (key, target, hw)).fetchall()
        if not rows:
            return
        self._warned.add(target)
        count = sum(n for _, n in rows)
        diffs = fingerprint_differences(json.loads(rows[0][0]), current)
        warnings.warn(RecordsWarning(
            f"database {self.path} holds {count} record(s) for target '{target}' measured on "
            f"different hardware ({'; '.join(diffs) or 'fingerprint differs'}); they are not "
            f"used.  Pass the target as compatible_targets, or check_fingerprint=False, to "
            f"use them anyway"), stacklevel=3)

    def records(self, workload, target=None, include_errors: bool = True) -> list[TuningRecord]:
        """Every record of a workload (all targets, or one target string, matched exactly
        after canonicalisation and without a fingerprint check), oldest first."""
        where, params = _record_filter(workload_key(workload), target, include_errors)
        with self._read("reading records") as conn:
            rows = conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records r{where} ORDER BY r.id",
                                params).fetchall()
            return self._readable(conn, rows)

    def count(self, workload=None, target=None, include_errors: bool = True) -> int:
        """Number of records, optionally of one workload and/or target string."""
        where, params = _record_filter(workload, target, include_errors)
        with self._read("counting records") as conn:
            return conn.execute(f"SELECT COUNT(*) FROM records r{where}", params).fetchone()[0]

    def has_record(self, workload, target, trace_hash: str,
                   check_fingerprint: bool = True) -> bool:
        """Whether a candidate (by ``TuningRecord.trace_hash`` / ``records.trace_hash``) was
        measured for this workload and target on this hardware, successfully or not."""
        cond, params, _ = self._target_filter(target, (), check_fingerprint)
        with self._read("looking up a record") as conn:
            return conn.execute(
                f"SELECT 1 FROM records r WHERE r.workload_key = ? AND r.trace_hash = ? AND "
                f"{cond} LIMIT 1", [workload_key(workload), trace_hash, *params]
            ).fetchone() is not None

    def measured_hashes(self, workload, target, check_fingerprint: bool = True) -> set[str]:
        """Trace hashes of every candidate measured for this workload and target on this
        hardware (errors included): what a resumed search must not measure again."""
        cond, params, _ = self._target_filter(target, (), check_fingerprint)
        with self._read("reading measured trace hashes") as conn:
            return {h for (h,) in conn.execute(
                f"SELECT r.trace_hash FROM records r WHERE r.workload_key = ? AND {cond}",
                [workload_key(workload), *params])}

    def claim(self, workload, target, trace_hashes: Iterable[str],
              ttl: float = 3600.0) -> set[str]:
        """Claim candidates for measurement; returns the hashes this database object may
        measure: those neither measured for the target (on this hardware) nor claimed by
        another tuning process whose claim is still live.  Claims end when the records are
        committed, or after ``ttl`` seconds (a process killed mid-batch).  Two processes
        tuning one workload into one file thus never measure the same candidate twice."""
        key, primary = workload_key(workload), canonical_target(target)
        wanted = list(dict.fromkeys(trace_hashes))
        if not wanted:
            return set()
        # Only the batch's own hashes are looked up (not every record of the workload, which
        # grows with the run), inside the write lock, so a commit cannot slip in between.
        cond, params, _ = self._target_filter(primary, (), True)
        marks = ",".join("?" * len(wanted))
        now = time.time()
        with self._write(f"claiming {len(wanted)} candidates") as conn:
            measured = {h for (h,) in conn.execute(
                f"SELECT r.trace_hash FROM records r WHERE r.workload_key = ? AND {cond} AND "
                f"r.trace_hash IN ({marks})", [key, *params, *wanted])}
            conn.execute("DELETE FROM claims WHERE expires < ?", (now,))
            rows = conn.execute(
                f"SELECT trace_hash, owner FROM claims WHERE workload_key = ? AND target = ? "
                f"AND owner != ? AND trace_hash IN ({marks})",
                [key, primary, self._owner, *wanted]).fetchall()
            # A run killed mid-batch on this machine leaves its claims behind: they lapse at
            # once, not after ``ttl`` (its resumed run would otherwise skip that batch).
            dead = {owner for _, owner in rows if _owner_is_dead(owner)}
            if dead:
                conn.execute(f"DELETE FROM claims WHERE owner IN ({','.join('?' * len(dead))})",
                             sorted(dead))
            taken = {h for h, owner in rows if owner not in dead}
            granted = [h for h in wanted if h not in taken and h not in measured]
            conn.executemany("INSERT OR REPLACE INTO claims(workload_key, target, trace_hash, "
                             "owner, expires) VALUES (?, ?, ?, ?, ?)",
                             [(key, primary, h, self._owner, now + ttl) for h in granted])
        return set(granted)

    def targets(self, workload=None) -> list[str]:
        """Target strings that have records (of one workload, or of any)."""
        with self._read("reading targets") as conn:
            if workload is None:
                rows = conn.execute("SELECT DISTINCT target FROM records ORDER BY target")
            else:
                rows = conn.execute("SELECT DISTINCT target FROM records WHERE workload_key = ?"
                                    " ORDER BY target", (workload_key(workload),))
            return [t for (t,) in rows]

    def fingerprints(self, target) -> list[dict]:
        """The stored fingerprints (hardware records were measured on) of a target string."""
        with self._read("reading fingerprints") as conn:
            rows = conn.execute("SELECT data FROM fingerprints WHERE target = ? ORDER BY id",
                                (canonical_target(target),)).fetchall()
        return [json.loads(text) for (text,) in rows]

    def _readable(self, conn, rows, k: int | None = None) -> list[TuningRecord]:
        """The records of ``rows`` (at most ``k``).  A row that does not parse (a damaged or
        hand-edited file) is skipped with one warning naming it: one bad record must not stop
        a build or a resumed run."""
        out = []
        for row in rows:
            try:
                out.append(self._record_from_row(conn, row))
            except DatabaseError as err:
                if row[0] not in self._unreadable:
                    self._unreadable.add(row[0])
                    warnings.warn(RecordsWarning(f"{err}; the record is skipped"),
                                  stacklevel=3)
                continue
            if k is not None and len(out) >= k:
                break
        return out

    def _record_from_row(self, conn, row) -> TuningRecord:
        (rid, key, target, trace, run_times, median, error_kind, error_msg, host, version,
         timestamp, config, details, score, remeasure_count, fp_id, uid, thash) = row
        try:
            fingerprint = None
            if fp_id is not None:
                fingerprint = self._fingerprint_data.get(fp_id)
                if fingerprint is None:
                    (text,) = conn.execute("SELECT data FROM fingerprints WHERE id = ?",
                                           (fp_id,)).fetchone()
                    fingerprint = json.loads(text)
                    if not isinstance(fingerprint, dict):
                        raise ValueError("its fingerprint is not a JSON object")
                    self._fingerprint_data[fp_id] = fingerprint
            return TuningRecord.from_stored({
                "workload_key": key, "target": target, "trace_json": json.loads(trace),
                "run_times": tuple(json.loads(run_times)),
                "median": math.inf if error_kind is not None else median,
                "error_kind": error_kind, "error_msg": error_msg, "host": host,
                "version": version, "timestamp": timestamp, "config": json.loads(config),
                "details": json.loads(details), "record_id": rid, "score": score,
                "remeasure_count": remeasure_count, "fingerprint": fingerprint,
                "trace_text": trace, "trace_hash": thash, "uid": uid})
        # JSON that does not parse, or nests deeper than the parser goes: a damaged row.
        except (ValueError, TypeError, RecursionError) as err:
            raise DatabaseError(f"database {self.path}: record {rid} is malformed: "
                                f"{type(err).__name__}: {err}") from None

    # -- notes of the tools above (model runs, ...) ---------------------------------------------
    # NOTE: kept in the meta table under a "note:" prefix, so the schema stays as it is and
    # the keys the database itself reads (application, schema_version, ...) cannot be hit.
    def set_note(self, name: str, value: str) -> None:
        """Store ``value`` (text, e.g. JSON) under ``name``, replacing what was there, in one
        transaction.  Used for what is not a record: the task list of a tuned model, say."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a note name must be a non-empty string, got {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"a note value is text, got {type(value).__name__}")
        with self._write(f"storing note {name!r}") as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                         ("note:" + name, value))

    def notes(self, prefix: str = "") -> dict[str, str]:
        """The stored notes whose names start with ``prefix``, by name."""
        with self._read("reading notes") as conn:
            rows = conn.execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ? "
                                "ORDER BY key", (5 + len(prefix), "note:" + prefix)).fetchall()
        return {key[5:]: value for key, value in rows}

    # -- maintenance ---------------------------------------------------------------------------
    def integrity_check(self) -> list[str]:
        """Problems SQLite's integrity_check finds (empty when the file is sound)."""
        with self._read("checking integrity") as conn:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems == ["ok"]:
            return []
        return [line for p in problems for line in p.splitlines() if line.strip()]

    def info(self) -> dict:
        """A summary: schema, counts, and per workload and target the record counts and the
        best median; ``unreadable`` counts the records that builds and resumed runs skip
        (damaged JSON, or a trace of instructions this release does not know)."""
        with self._read("summarising") as conn:
            unreadable = 0
            for row in conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records r"):
                try:
                    Trace.from_json(self._record_from_row(conn, row).trace_json)
                except (DatabaseError, ScheduleError):
                    unreadable += 1
            names = dict(conn.execute("SELECT key, name FROM workloads"))
            order = [k for (k,) in conn.execute("SELECT key FROM workloads ORDER BY rowid")]
            per = conn.execute(
                "SELECT workload_key, target, COUNT(*), SUM(error_kind IS NOT NULL), "
                "MIN(score) FROM records GROUP BY workload_key, target").fetchall()
            remeasured = conn.execute("SELECT COUNT(*) FROM remeasurements").fetchone()[0]
        workloads = {k: {"key": k, "name": names[k], "records": 0, "errors": 0, "targets": {}}
                     for k in order}
        for key, target, n, errors, best in per:
            entry = workloads[key]
            entry["records"] += n
            entry["errors"] += errors
            entry["targets"][target] = {"records": n, "errors": errors, "best_median": best}
        return {
            # A read-only open of an older file reads a migrated copy; the file's own version
            # is the one to report.
            "path": self.path, "schema_version": getattr(self, "file_version",
                                                         self.schema_version),
            "journal_mode": self.journal_mode,
            "workloads": list(workloads.values()),
            "records": sum(w["records"] for w in workloads.values()),
            "errors": sum(w["errors"] for w in workloads.values()),
            "remeasurements": remeasured,
            "unreadable": unreadable,
        }

    # -- moving records between files (the JSON-lines format is records.jsonl's) -----------
    def dump(self, workload=None, target=None) -> Iterator[dict]:
        """The workloads and records (optionally of one workload and/or one target), as the
        JSON objects of an export: every workload that has records first, then each record
        with its re-measurements.  One read transaction: a snapshot, even while another
        process writes."""
        key = None if workload is None else workload_key(workload)
        target = None if target is None else canonical_target(target)
        with self._read("exporting") as conn:
            conn.execute("BEGIN")
            try:
                yield from self._dump(conn, key, target)
            finally:
                conn.execute("COMMIT")

    def _dump(self, conn, key: str | None, target: str | None) -> Iterator[dict]:
        if target is not None:
            where, params = _record_filter(key, target)
            keys = [k for (k,) in conn.execute(
                "SELECT key FROM workloads WHERE key IN (SELECT DISTINCT r.workload_key FROM "
                f"records r{where}) ORDER BY rowid", params)]
        elif key is not None:
            if conn.execute("SELECT 1 FROM workloads WHERE key = ?", (key,)).fetchone() is None:
                raise DatabaseError(f"database {self.path} has no workload {key}")
            keys = [key]
        else:
            keys = [k for (k,) in conn.execute("SELECT key FROM workloads ORDER BY rowid")]
        # Workloads first (a reader adds them before the records that need them).
        for k in keys:
            (name, func) = conn.execute("SELECT name, func FROM workloads WHERE key = ?",
                                        (k,)).fetchone()
            yield {"kind": "workload", "format_version": WORKLOAD_FORMAT_VERSION, "key": k,
                   "name": name, "func": json.loads(func)}
        for k in keys:
            where, params = _record_filter(k, target)
            rows = conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records r{where} ORDER BY r.id",
                                params)
            for record in self._readable(conn, rows.fetchall()):
                data = record.to_json()
                data["kind"] = "record"
                if record.remeasure_count:
                    data["remeasurements"] = [
                        {"run_times": json.loads(t), "timestamp": ts, "host": h,
                         "config": json.loads(c)}
                        for t, ts, h, c in conn.execute(
                            "SELECT run_times, timestamp, host, config FROM remeasurements "
                            "WHERE record_id = ? ORDER BY id", (record.record_id,))]
                yield data

    def add_dump(self, workloads: Iterable[Workload],
                 records: Sequence[tuple[TuningRecord, list[dict]]], source: str) -> int:
        """Add exported workloads and records, each record with its re-measurements
        (``{"run_times", "timestamp", "host", "config"}``), in one transaction; records and
        re-measurements already present are skipped.  Returns the number of records added.
        ``source`` names the file in errors."""
        workloads = list(workloads)
        fp_ids: dict[str, int] = {}
        with self._write(f"importing {source}") as conn:
            known = {w.key for w in workloads}
            for key in {r.workload_key for r, _ in records} - known:
                if conn.execute("SELECT 1 FROM workloads WHERE key = ?",
                                (key,)).fetchone() is None:
                    raise DatabaseError(f"{source}: records refer to workload {key}, which is "
                                        f"neither in the file nor in database {self.path}")
            self._insert_workloads(conn, workloads)
            added = self._insert_records(conn, [(r, r.fingerprint) for r, _ in records],
                                         fp_ids)
            for record, remeasured in records:
                if not remeasured:
                    continue
                (rid,) = conn.execute("SELECT id FROM records WHERE uid = ?",
                                      (record.uid,)).fetchone()
                new = 0
                for entry in remeasured:
                    times = entry["run_times"]
                    cur = conn.execute(
                        "INSERT OR IGNORE INTO remeasurements(record_id, run_times, median, "
                        "spread, timestamp, host, config) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (rid, json.dumps(times), statistics.median(times), spread(times),
                         entry["timestamp"], entry["host"], canonical_json(entry["config"])))
                    new += cur.rowcount
                if new:
                    self._rescore(conn, rid)
        self._fingerprint_ids.update(fp_ids)
        return added

    def export_jsonl(self, path, workload=None, target=None) -> int:
        """Write workloads and records as JSON lines (see records.jsonl); returns the number
        of records written."""
        return export_jsonl(self, path, workload=workload, target=target)

    def import_jsonl(self, path) -> int:
        """Add the records of a JSON-lines file in one transaction; returns how many were new
        (importing a file twice adds nothing the second time)."""
        return import_jsonl(self, path)


def _summarise(problems: list[str], shown: int = 3) -> str:
    """The first few lines of an integrity report, on one line."""
    lines = [line.strip() for p in problems for line in p.splitlines()
             if line.strip() and not line.startswith("***")]
    more = f" (and {len(lines) - shown} more)" if len(lines) > shown else ""
    return "; ".join(lines[:shown]) + more


def _record_filter(workload=None, target=None, include_errors: bool = True) -> tuple[str, list]:
    """The `` WHERE ...`` clause (empty when nothing is asked) selecting records ``r`` of a
    workload and/or a target string (matched exactly after canonicalisation), and its
    parameters."""
    where, params = [], []
    if workload is not None:
        where.append("r.workload_key = ?")
        params.append(workload_key(workload))
    if target is not None:
        where.append("r.target = ?")
        params.append(canonical_target(target))
    if not include_errors:
        where.append("r.error_kind IS NULL")
    return (f" WHERE {' AND '.join(where)}" if where else ""), params


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


def _owner_is_dead(owner: str) -> bool:
    """Whether a claim's owner ("host:pid:object") is a process of this machine that has
    exited.  Owners on other machines, and unreadable ones, count as alive: their claims
    lapse by time."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host_name() or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive under another user (PermissionError), or unknowable
        return False
    return False
