"""Choices: the record a model's build takes when it is not the best by score, and the records
that builds and searches pass over because their traces do not replay here."""
from __future__ import annotations

import time
import warnings
from collections.abc import Iterable

from ..errors import DatabaseError, RecordsWarning
from ..keys import canonical_json, canonical_target, workload_key
from ..record import TuningRecord, json_dict
from .records import RECORD_COLUMNS


class ChoiceTables:
    """The choices table of a Database, and ``unusable``: record id -> why it cannot serve."""

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
                f"SELECT {RECORD_COLUMNS} FROM choices c JOIN records r ON r.id = c.record_id "
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
        (``autotune.tuning.history.choose_record``, the one rule every build path uses)."""
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
