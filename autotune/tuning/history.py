"""apply_history_best: build with the best stored schedule of each workload.

    with autotune.apply_history_best("tuning.db") as ctx:
        kernel = autotune.build(func, target="llvm")
    print(ctx.coverage())            # which workloads a record served, which fell back

Under the context, ``autotune.build`` looks the function's workload (its structural hash) up in
the database for the build target, replays the trace of the record :func:`choose_record` picks
on the function and builds the result.  A workload without a usable record falls back to the
default schedule and logs one warning naming it (once per workload and context); with
``strict=True`` the build raises ``MissingRecordError`` instead.  Records are only taken for the
target being built (or targets the caller names as compatible), never from other hardware.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Iterable

from records import Database, TuningRecord, Workload
from schedules.postproc import replay
from schedules.schedule import Schedule
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

log = logging.getLogger("autotune")


# How many records by score a build tries, best first, before it takes the default schedule:
# enough to pass over a damaged record or one an older release wrote, few enough that a
# workload whose records all fail costs little.
BUILD_CANDIDATES = 4


@dataclass(frozen=True)
class RecordChoice:
    """What a build of one workload takes: ``record`` and ``schedule`` (its trace replayed on
    the workload), both None when no record serves, with ``reason`` saying why."""

    record: TuningRecord | None
    schedule: Schedule | None
    reason: str = ""

    @property
    def func(self) -> PrimFunc | None:
        """The scheduled function (None when no record serves)."""
        return None if self.schedule is None else self.schedule.func


def choose_record(database, func: PrimFunc, target: Target, context: str | None = None,
                  compatible_targets: Iterable = ()) -> RecordChoice:
    """The one rule by which every build path (``build_model(database=...)``, ``build``
    under ``apply_history_best``, the rerank, ``tune``'s result) picks a workload's record:
    the candidates of ``Database.build_candidates`` (the record chosen for the model named
    ``context``, then the BUILD_CANDIDATES best by score) in order, the first whose trace
    parses and replays on ``func``.  A record that does not is noted with
    ``Database.skip_unusable`` (one warning naming it) and passed over."""
    candidates = database.build_candidates(func.structural_hash(), str(target), context,
                                           BUILD_CANDIDATES, compatible_targets)
    reason = "no tuning record for this workload and target"
    for record in candidates:
        try:
            return RecordChoice(record, replay(record.trace(), func, target))
        except Exception as err:  # noqa: BLE001 - a stale record must not stop a build
            reason = f"record {record.record_id} does not replay: {type(err).__name__}: {err}"
            database.skip_unusable(record, f"{type(err).__name__}: {err}")
    return RecordChoice(None, None, reason)


class MissingRecordError(BuildError):
    """strict apply_history_best: workloads without a tuning record (named in the message)."""


@dataclass
class CoverageEntry:
    workload_key: str
    name: str
    target: str
    served: bool
    record_id: int | None = None
    median: float | None = None
    reason: str = ""


@dataclass
class ApplyHistoryBest:
    """The context manager returned by :func:`apply_history_best`."""

    database: object
    strict: bool = False
    compatible_targets: tuple = ()
    entries: list = field(default_factory=list)
    _owns_db: bool = False
    _warned: set = field(default_factory=set)

    # -- context protocol ---------------------------------------------------------------------
    def __enter__(self) -> "ApplyHistoryBest":
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()
        if self._owns_db:
            self.database.close()

    # -- lookup ---------------------------------------------------------------------------------
    def lookup(self, func: PrimFunc, target: Target, context: str | None = None
               ) -> PrimFunc | None:
        """The function scheduled by the record a build takes (:func:`choose_record`: the
        record chosen for the model named ``context``, else the best that replays), or None
        (recorded in the coverage, warned about once; raises in strict mode)."""
        workload = Workload(func)
        target_str = str(target)
        choice = choose_record(self.database, func, target, context, self.compatible_targets)
        if choice.record is not None:
            self.entries.append(CoverageEntry(workload.key, workload.name, target_str, True,
                                              choice.record.record_id, choice.record.median))
            return choice.func
        self.entries.append(CoverageEntry(workload.key, workload.name, target_str, False,
                                          reason=choice.reason))
        if self.strict:
            raise MissingRecordError(f"apply_history_best(strict=True): workload "
                                     f"{workload.name} [{workload.key[:12]}] on {target_str}: "
                                     f"{choice.reason}")
        if (workload.key, target_str) not in self._warned:
            self._warned.add((workload.key, target_str))
            log.warning("apply_history_best: %s [%s] on %s: %s; using the default schedule",
                        workload.name, workload.key[:12], target_str, choice.reason)
        return None

    # -- reporting --------------------------------------------------------------------------------
    def coverage(self) -> dict:
        """Which workloads built under this context were served by a record."""
        served = [e for e in self.entries if e.served]
        fallback = [e for e in self.entries if not e.served]
        return {
            "built": len(self.entries),
            "served": len(served),
            "fallback": [{"workload": e.name, "key": e.workload_key, "target": e.target,
                          "reason": e.reason} for e in fallback],
            "served_workloads": [{"workload": e.name, "key": e.workload_key,
                                  "record_id": e.record_id, "median_s": e.median}
                                 for e in served],
        }


_local = threading.local()


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current() -> ApplyHistoryBest | None:
    """The innermost active apply_history_best context of this thread."""
    stack = _stack()
    return stack[-1] if stack else None


def apply_history_best(database, strict: bool = False,
                       compatible_targets: Iterable = ()) -> ApplyHistoryBest:
    """Context under which ``autotune.build`` uses the best record of each workload.

    ``database`` is a ``records.Database`` or a path to one (opened read-only in spirit: the
    context never writes).  ``compatible_targets`` are other target strings whose records
    may be used too; records are never taken from other hardware silently.
    """
    owns = False
    if not isinstance(database, Database):
        database = Database(database, create=False, readonly=True)
        owns = True
    return ApplyHistoryBest(database, strict, tuple(str(Target(t)) for t in compatible_targets),
                            _owns_db=owns)
