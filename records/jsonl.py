"""JSON-lines export and import of tuning records (importing twice adds nothing).

A file is one JSON object per line, keys sorted, so it diffs well under version control:

    {"format": "autotune-records", "format_version": 1, "kind": "header"}
    {"kind": "workload", "format_version": 1, "key": ..., "name": ..., "func": {...}}
    {"kind": "record", "format_version": 1, "workload_key": ..., "target": ..., "trace": {...},
     "trace_hash": ..., "run_times": [...], "median": ..., "error_kind": null, ...,
     "fingerprint": {...}, "remeasurements": [{"run_times": [...], ...}]}

Workloads come before the records that refer to them; records are grouped by workload and
kept in the order they were measured, so re-exporting a grown database appends lines within
each group.  Import validates every line before writing anything (a malformed line raises
DatabaseError naming the file and line, and nothing is added), then adds everything in one
transaction.  Records are identified by their content hash (``TuningRecord.uid``), so a record
already present is skipped; target strings and fingerprints are kept as written (they describe
the machine that measured them, not the one importing).  Parsing is ``json.loads`` only.
"""
from __future__ import annotations

import io
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Mapping

from .database import _RECORD_COLUMNS, _spread, _workload_key, canonical_target
from .errors import DatabaseError
from .record import TuningRecord, canonical_json
from .workload import WORKLOAD_FORMAT_VERSION, Workload

__all__ = ["JSONL_FORMAT", "JSONL_FORMAT_VERSION", "export_jsonl", "import_jsonl"]

JSONL_FORMAT = "autotune-records"
JSONL_FORMAT_VERSION = 1


def _line(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n"


def export_jsonl(db, path, workload=None, target=None) -> int:
    """Write ``db``'s workloads and records (optionally of one workload and/or one target
    string) to ``path`` ("-" for standard output).  The file is written to a temporary name
    and renamed, so a reader never sees half an export.  Returns the number of records."""
    key = None if workload is None else _workload_key(workload)
    target = None if target is None else canonical_target(target)
    if path == "-":
        return _write_export(db, sys.stdout, key, target)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".jsonl", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            n = _write_export(db, f, key, target)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return n


def _write_export(db, out: io.TextIOBase, key: str | None, target: str | None) -> int:
    out.write(_line({"kind": "header", "format": JSONL_FORMAT,
                     "format_version": JSONL_FORMAT_VERSION}))
    where, params = [], []
    if key is not None:
        where.append("r.workload_key = ?")
        params.append(key)
    if target is not None:
        where.append("r.target = ?")
        params.append(target)
    with db._read("exporting") as conn:
        # A read transaction: the export is one snapshot even while another process writes.
        conn.execute("BEGIN")
        try:
            return _write_snapshot(db, conn, out, key, target, where, params)
        finally:
            conn.execute("COMMIT")


def _write_snapshot(db, conn, out, key, target, where, params) -> int:
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    if target is not None:
        keys = [k for (k,) in conn.execute(
            "SELECT key FROM workloads WHERE key IN (SELECT DISTINCT r.workload_key FROM "
            f"records r{clause}) ORDER BY rowid", params)]
    elif key is not None:
        if conn.execute("SELECT 1 FROM workloads WHERE key = ?", (key,)).fetchone() is None:
            raise DatabaseError(f"database {db.path} has no workload {key}")
        keys = [key]
    else:
        keys = [k for (k,) in conn.execute("SELECT key FROM workloads ORDER BY rowid")]
    # Workloads first (a reader adds them before the records that need them).
    for k in keys:
        (name, func) = conn.execute("SELECT name, func FROM workloads WHERE key = ?",
                                    (k,)).fetchone()
        out.write(_line({"kind": "workload", "format_version": WORKLOAD_FORMAT_VERSION,
                         "key": k, "name": name, "func": json.loads(func)}))
    count = 0
    for k in keys:
        if target is None:
            rows = conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records r WHERE "
                                f"r.workload_key = ? ORDER BY r.id", (k,))
        else:
            rows = conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records r WHERE "
                                f"r.workload_key = ? AND r.target = ? ORDER BY r.id",
                                (k, target))
        for row in rows.fetchall():
            record = db._record_from_row(conn, row)
            data = record.to_json()
            data["kind"] = "record"
            if record.remeasure_count:
                data["remeasurements"] = [
                    {"run_times": json.loads(t), "timestamp": ts, "host": h,
                     "config": json.loads(c)}
                    for t, ts, h, c in conn.execute(
                        "SELECT run_times, timestamp, host, config FROM remeasurements "
                        "WHERE record_id = ? ORDER BY id", (record.record_id,))]
            out.write(_line(data))
            count += 1
    return count


def _parse_remeasurements(value, where: str) -> list[dict]:
    if not isinstance(value, list):
        raise DatabaseError(f"{where}: remeasurements must be a list")
    out = []
    for entry in value:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("run_times"), list) \
                or not entry["run_times"]:
            raise DatabaseError(f"{where}: a re-measurement needs a non-empty run_times list")
        try:
            times = [float(t) for t in entry["run_times"]]
            timestamp = float(entry.get("timestamp", 0.0))
        except (TypeError, ValueError):
            raise DatabaseError(f"{where}: re-measurement run_times and timestamp must be "
                                f"numbers") from None
        config = entry.get("config") or {}
        if not isinstance(config, Mapping):
            raise DatabaseError(f"{where}: re-measurement config must be an object")
        out.append({"run_times": times, "timestamp": timestamp,
                    "host": str(entry.get("host", "")), "config": dict(config)})
    return out


def import_jsonl(db, path) -> int:
    """Add the workloads and records of a JSON-lines file ("-": standard input) to ``db`` in
    one transaction.  Returns the number of records added."""
    name = "<stdin>" if path == "-" else os.fspath(path)
    # 1. Parse and validate every line; nothing is written until all are good.
    workloads: dict[str, Workload] = {}
    records: list[tuple[TuningRecord, list[dict]]] = []
    try:
        stream = sys.stdin if path == "-" else open(name, encoding="utf-8")
    except OSError as err:
        raise DatabaseError(f"cannot read {name}: {err}") from None
    with stream:
        header_seen = False
        for lineno, text in enumerate(stream, 1):
            where = f"{name}:{lineno}"
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as err:
                raise DatabaseError(f"{where}: not valid JSON ({err})") from None
            if not isinstance(data, dict):
                raise DatabaseError(f"{where}: each line must be a JSON object")
            kind = data.pop("kind", None)
            if not header_seen:
                if kind != "header" or data.get("format") != JSONL_FORMAT:
                    raise DatabaseError(f"{where}: not a tuning-record export (the first line "
                                        f"must be the {JSONL_FORMAT!r} header)")
                version = data.get("format_version")
                if version != JSONL_FORMAT_VERSION:
                    raise DatabaseError(f"{where}: export format_version {version!r}; this "
                                        f"release reads {JSONL_FORMAT_VERSION}")
                header_seen = True
            elif kind == "workload":
                try:
                    w = Workload.from_json(data)
                except ValueError as err:
                    raise DatabaseError(f"{where}: bad workload: {err}") from None
                workloads[w.key] = w
            elif kind == "record":
                remeasured = _parse_remeasurements(data.pop("remeasurements", []), where)
                try:
                    record = TuningRecord.from_json(data)
                except ValueError as err:
                    raise DatabaseError(f"{where}: bad record: {err}") from None
                if record.is_error and remeasured:
                    raise DatabaseError(f"{where}: an error record cannot have "
                                        f"re-measurements")
                records.append((record, remeasured))
            else:
                raise DatabaseError(f"{where}: unknown line kind {kind!r} (expected header, "
                                    f"workload or record)")
        if not header_seen:
            raise DatabaseError(f"{name} is empty: not a tuning-record export")
    # 2. One transaction: workloads, records, re-measurements.
    fp_ids: dict[str, int] = {}
    with db._write(f"importing {name}") as conn:
        known = set(workloads)
        needed = {r.workload_key for r, _ in records} - known
        for key in needed:
            if conn.execute("SELECT 1 FROM workloads WHERE key = ?", (key,)).fetchone() is None:
                raise DatabaseError(f"{name}: records refer to workload {key}, which is "
                                    f"neither in the file nor in database {db.path}")
        db._insert_workloads(conn, workloads.values())
        added = db._insert_records(conn, [(r, r.fingerprint) for r, _ in records], fp_ids)
        for record, remeasured in records:
            if not remeasured:
                continue
            (rid,) = conn.execute("SELECT id FROM records WHERE uid = ?",
                                  (record.uid,)).fetchone()
            new = 0
            for entry in remeasured:
                times = entry["run_times"]
                median = statistics.median(times)
                cur = conn.execute(
                    "INSERT OR IGNORE INTO remeasurements(record_id, run_times, median, "
                    "spread, timestamp, host, config) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rid, json.dumps(times), median, _spread(times), entry["timestamp"],
                     entry["host"], canonical_json(entry["config"])))
                new += cur.rowcount
            if new:
                db._rescore(conn, rid)
    db._fingerprint_ids.update(fp_ids)
    return added
