"""apply_history_best: build with the best stored schedule of each workload.

    with autotune.apply_history_best("tuning.db") as ctx:
        kernel = autotune.build(func, target="llvm")
    print(ctx.coverage())            # which workloads a record served, which fell back

Under the context, ``autotune.build`` looks the function's workload (its structural hash) up
in the database for the build target, replays the best record's trace on the function and
builds the result.  A workload without a usable record falls back to the default schedule and
logs one warning naming it (once per workload and context); with ``strict=True`` the build
raises ``MissingRecordError`` instead.  Records are only taken for the target being built (or
targets the caller names as compatible), never from other hardware.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Iterable

from records import Database, Workload
from schedules.postproc import replay
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

log = logging.getLogger("autotune")


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
    _skipped: set = field(default_factory=set)

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
        """The function scheduled by its best record for ``target`` -- or, building a model
        named ``context``, the record chosen for it there (autotune.model_rerank) -- or None
        (recorded in the coverage, warned about once; raises in strict mode)."""
        workload = Workload(func)
        target_str = str(target)
        # A few candidates: when the best record no longer replays (damaged, or from another
        # release), the next one serves instead of the default schedule.
        best = self.database.best_k(workload.key, target_str, 4,
                                    compatible_targets=self.compatible_targets)
        chosen = self.database.chosen(workload.key, target_str, context) if context else None
        if chosen is not None:
            best = [chosen] + [r for r in best if r.record_id != chosen.record_id]
        reason = "no tuning record for this workload and target"
        for record in best:
            try:
                scheduled = replay(record.trace(), func, target).func
            except Exception as err:  # noqa: BLE001 - a stale record must not stop a build
                reason = f"record {record.record_id} does not replay: {err}"
                if record.record_id not in self._skipped:
                    self._skipped.add(record.record_id)
                    log.warning("apply_history_best: %s [%s] on %s: %s; it is skipped",
                                workload.name, workload.key[:12], target_str, reason)
                continue
            self.entries.append(CoverageEntry(workload.key, workload.name, target_str, True,
                                              record.record_id, record.median))
            return scheduled
        self.entries.append(CoverageEntry(workload.key, workload.name, target_str, False,
                                          reason=reason))
        if self.strict:
            raise MissingRecordError(f"apply_history_best(strict=True): workload "
                                     f"{workload.name} [{workload.key[:12]}] on {target_str}: "
                                     f"{reason}")
        if (workload.key, target_str) not in self._warned:
            self._warned.add((workload.key, target_str))
            log.warning("apply_history_best: %s [%s] on %s: %s; using the default schedule",
                        workload.name, workload.key[:12], target_str, reason)
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
