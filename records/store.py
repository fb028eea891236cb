"""RecordStore: the part of a tuning-record database that the search reads and writes.

The tuning loop and the task scheduler (package ``search``) touch records only through these
methods, so anything that has them serves a run.  records.Database (SQLite, on a file or in
memory: MemoryDatabase) is the store this package provides; its other methods (export and
import, notes, a model's choices, maintenance) serve the tools above the search.
``workload`` is a key, a Workload or a PrimFunc; ``target`` a string or Target, matched on
this machine's hardware unless ``check_fingerprint=False`` (see records.sqlite.records).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from .record import TuningRecord

__all__ = ["RecordStore"]


@runtime_checkable
class RecordStore(Protocol):
    """What a search needs of a record store; records.Database documents each in full."""

    def commit_workload(self, workload, name: str | None = None) -> str:
        """Store a workload unless it is present; its key."""

    def commit_records(self, records: Iterable[TuningRecord],
                       fingerprint: Mapping | None = None) -> int:
        """Store a measured batch at once, ending its claims; how many records were new."""

    def records(self, workload, target=None, include_errors: bool = True) -> list[TuningRecord]:
        """Every record of a workload (of one target string), oldest first."""

    def best_k(self, workload, target, k: int = 1, compatible_targets: Iterable = (),
               check_fingerprint: bool = True) -> list[TuningRecord]:
        """The ``k`` fastest successful records, by score (re-measurements pooled in)."""

    def best(self, workload, target, compatible_targets: Iterable = (),
             check_fingerprint: bool = True) -> TuningRecord | None:
        """The fastest successful record, or None."""

    def measured_hashes(self, workload, target, check_fingerprint: bool = True) -> set[str]:
        """Trace hashes of every candidate measured (errors included): what a resumed run
        skips."""

    def claim(self, workload, target, trace_hashes: Iterable[str],
              ttl: float = 3600.0) -> set[str]:
        """The hashes this store's holder may measure: not measured, and not claimed by
        another live tuning process; they stay claimed until committed or ``ttl`` passes."""

    def update_best_remeasure(self, record_id: int, run_times: Sequence[float],
                              config=None, *, host: str | None = None,
                              timestamp: float | None = None) -> float:
        """Store a re-measurement of a successful record; its new (pooled) score."""

    def skip_unusable(self, record: TuningRecord, reason: str) -> None:
        """Note that a record's trace does not parse or replay here (warning once)."""
