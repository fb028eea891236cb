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
import sys
import tempfile
from collections.abc import Mapping

from schedules.trace import Trace

from .errors import DatabaseError
from .keys import canonical_target, workload_key
from .record import TuningRecord
from .workload import Workload

__all__ = ["JSONL_FORMAT", "JSONL_FORMAT_VERSION", "export_jsonl", "import_jsonl"]

JSONL_FORMAT = "autotune-records"
JSONL_FORMAT_VERSION = 1


def _line(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n"


def export_jsonl(db, path, workload=None, target=None) -> int:
    """Write ``db``'s workloads and records (optionally of one workload and/or one target
    string) to ``path`` ("-" for standard output).  The file is written to a temporary name
    and renamed, so a reader never sees half an export.  Returns the number of records."""
    key = None if workload is None else workload_key(workload)
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
    count = 0
    for data in db.dump(key, target):
        out.write(_line(data))
        count += data["kind"] == "record"
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
    places: list[str] = []
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
            except (json.JSONDecodeError, RecursionError) as err:
                raise DatabaseError(f"{where}: not valid JSON ({type(err).__name__}: {err})"
                                    ) from None
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
                except (ValueError, RecursionError) as err:
                    raise DatabaseError(f"{where}: bad record: {err}") from None
                if record.is_error and remeasured:
                    raise DatabaseError(f"{where}: an error record cannot have "
                                        f"re-measurements")
                records.append((record, remeasured))
                places.append(where)
            else:
                raise DatabaseError(f"{where}: unknown line kind {kind!r} (expected header, "
                                    f"workload or record)")
        if not header_seen:
            raise DatabaseError(f"{name} is empty: not a tuning-record export")
    # 2. Every trace must replay on its workload, as a build will replay it.
    for (record, _), where in zip(records, places):
        _check_replays(db, workloads, record, where)
    # 3. One transaction: workloads, records, re-measurements.
    return db.add_dump(workloads.values(), records, name)


def _check_replays(db, workloads: dict, record: TuningRecord, where: str) -> None:
    workload = workloads.get(record.workload_key)
    if workload is None:
        if not db.has_workload(record.workload_key):
            return  # add_dump names the missing workload
        workload = db.workload(record.workload_key)
    try:
        Trace.from_json(record.trace_json).apply(workload.func)
    except Exception as err:  # noqa: BLE001 - whatever a replay raises, the line is refused
        raise DatabaseError(f"{where}: the record's trace does not replay on workload "
                            f"{workload.name} ({type(err).__name__}: {err}); nothing was "
                            f"imported") from None
