"""Workloads and tuning records: committing them (a batch per transaction), the fingerprints
that tag them, re-measurements, the queries of searches and builds, and export and import.

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
import statistics
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence

from schedules.errors import ScheduleError
from schedules.trace import Trace
from tensor_ir.func import PrimFunc

from ..errors import DatabaseError, RecordsWarning
from ..fingerprint import fingerprint_differences, hardware_hash, target_fingerprint
from ..jsonl import export_jsonl, import_jsonl
from ..keys import canonical_json, canonical_target, spread, workload_key
from ..record import TuningRecord, host_name, json_dict
from ..workload import WORKLOAD_FORMAT_VERSION, Workload

RECORD_COLUMNS = ("r.id, r.workload_key, r.target, r.trace, r.run_times, r.median, "
                  "r.error_kind, r.error_msg, r.host, r.version, r.timestamp, r.config, "
                  "r.details, r.score, r.remeasure_count, r.fingerprint_id, r.uid, "
                  "r.trace_hash")


def _fingerprint_digest(target: str, fingerprint: Mapping) -> str:
    return hashlib.sha256((target + "\n" + canonical_json(fingerprint)).encode()).hexdigest()


class RecordTables:
    """The workloads, records, fingerprints and remeasurements tables of a Database."""

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
                f"SELECT {RECORD_COLUMNS} FROM records r WHERE r.workload_key = ? AND {cond} "
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
            rows = conn.execute(f"SELECT {RECORD_COLUMNS} FROM records r{where} ORDER BY r.id",
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

    # -- summary -------------------------------------------------------------------------------
    def info(self) -> dict:
        """A summary: schema, counts, and per workload and target the record counts and the
        best median; ``unreadable`` counts the records that builds and resumed runs skip
        (damaged JSON, or a trace of instructions this release does not know)."""
        with self._read("summarising") as conn:
            unreadable = 0
            for row in conn.execute(f"SELECT {RECORD_COLUMNS} FROM records r"):
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
            rows = conn.execute(f"SELECT {RECORD_COLUMNS} FROM records r{where} ORDER BY r.id",
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
