"""Database: tuning records in SQLite (WAL, one transaction per batch), queries, schema migration.

    db = Database("tuning.db")                       # or Database() / MemoryDatabase()
    key = db.commit_workload(Workload(func))
    db.commit_records([result.to_record(key, target, trace, config), ...])  # MeasureResults
    best = db.best_k(key, "llvm", k=4)               # fastest successful records, this hardware
    done = db.measured_hashes(key, "llvm")           # trace hashes a resumed search skips

The engine is composed here from its parts in records.sqlite (schema and migration, records,
claims, choices, notes); what the search needs of it is records.store.RecordStore.
"""
from __future__ import annotations

import os

from .errors import RecordsWarning
from .record import host_name
from .sqlite.choices import ChoiceTables
from .sqlite.claims import ClaimTables
from .sqlite.notes import NoteTables
from .sqlite.records import RecordTables
# _MIGRATIONS: the migration steps under the name the tests read them by.
from .sqlite.schema import APPLICATION_ID, MIGRATIONS as _MIGRATIONS, SCHEMA_VERSION, SQLiteFile

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "Database", "RecordsWarning"]


class Database(RecordTables, ClaimTables, ChoiceTables, NoteTables, SQLiteFile):
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
        # The parts' state; opening the file (SQLiteFile) reads none of it.
        self._known_workloads: set[str] = set()
        self._fingerprint_ids: dict[str, int] = {}
        self._fingerprint_data: dict[int, dict] = {}
        self._warned: set[str] = set()
        self._unreadable: set[int] = set()
        # Records whose traces do not parse or replay here: record id -> why (skip_unusable).
        self.unusable: dict[int, str] = {}
        # Who holds a claim: this object in this process on this host.
        self._owner = f"{host_name()}:{os.getpid()}:{id(self):x}"
        self._open_file(path, create, timeout, synchronous, verify, readonly)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else f"schema {SCHEMA_VERSION}"
        return f"Database({self.path!r}, {state})"
