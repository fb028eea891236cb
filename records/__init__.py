"""records: workload identity, tuning records and the tuning-record database.

    from records import Database, TuningRecord, Workload
    with Database("tuning.db") as db:
        key = db.commit_workload(Workload(func))
        db.commit_records([result.to_record(key, target, trace, config)])  # a MeasureResult
        best = db.best_k(key, target, k=1)[0]
        sch = best.trace().apply(func)

``python -m records export|import|info`` moves records between files and machines.  This
package sits between ``schedules`` and ``cost_models``: it never imports the tuner above it.
"""
from __future__ import annotations

from .database import SCHEMA_VERSION, Database, RecordsWarning
from .errors import DatabaseError
from .fingerprint import fingerprint_differences, hardware_hash, target_fingerprint
from .jsonl import export_jsonl, import_jsonl
from .keys import canonical_json, canonical_target, workload_key
from .memory import MemoryDatabase
from .record import (
    ERROR_KINDS,
    TuningRecord,
    host_name,
    library_version,
    trace_hash,
    trace_text,
)
from .store import RecordStore
from .workload import Workload, describe

__all__ = [
    "ERROR_KINDS",
    "SCHEMA_VERSION",
    "Database",
    "DatabaseError",
    "MemoryDatabase",
    "RecordStore",
    "RecordsWarning",
    "TuningRecord",
    "Workload",
    "canonical_json",
    "canonical_target",
    "describe",
    "export_jsonl",
    "fingerprint_differences",
    "hardware_hash",
    "host_name",
    "import_jsonl",
    "library_version",
    "target_fingerprint",
    "trace_hash",
    "trace_text",
    "workload_key",
]
