"""Command line for tuning-record databases: export, import, info.

    python -m records export tuning.db records.jsonl [--workload KEY] [--target TARGET]
    python -m records import tuning.db records.jsonl      # creates tuning.db if needed
    python -m records info tuning.db [--json] [--check]

"-" as the JSON-lines path means standard output / input.  Exit status 0 on success, 1 when
the database or file is unusable (the message names it), 2 on wrong usage, including an export
path that cannot be written (a directory, or a file in a missing folder): it is checked before
the database is read.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .database import Database
from .errors import DatabaseError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m records",
                                     description="Export, import and inspect tuning records.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="write a database's records as JSON lines")
    p.add_argument("db", help="database file (must exist)")
    p.add_argument("out", help="JSON-lines file to write ('-': standard output)")
    p.add_argument("--workload", help="only this workload key")
    p.add_argument("--target", help="only records of this target string")
    p = sub.add_parser("import", help="add the records of a JSON-lines file to a database")
    p.add_argument("db", help="database file (created when missing)")
    p.add_argument("src", help="JSON-lines file to read ('-': standard input)")
    p = sub.add_parser("info", help="summarise a database")
    p.add_argument("db", help="database file (must exist)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--check", action="store_true",
                   help="also run SQLite's integrity check (reads the whole file)")
    return parser


def _format_seconds(value) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def _print_info(info: dict, problems: list[str] | None) -> None:
    print(f"{info['path']}: schema {info['schema_version']}, journal {info['journal_mode']}, "
          f"{len(info['workloads'])} workloads, {info['records']} records "
          f"({info['errors']} errors), {info['remeasurements']} re-measurements")
    if info.get("unreadable"):
        print(f"  {info['unreadable']} records cannot be read or name unknown instructions; "
              f"builds and resumed runs skip them")
    for w in info["workloads"]:
        print(f"  {w['key'][:12]}  {w['name']}: {w['records']} records")
        for target, t in sorted(w["targets"].items()):
            print(f"      {target}: {t['records']} records, {t['errors']} errors, "
                  f"best {_format_seconds(t['best_median'])}")
    if problems is not None:
        print("integrity: ok" if not problems else "integrity: " + "; ".join(problems[:10]))


def _output_problem(path: str) -> str | None:
    """Why the JSON-lines file ``path`` could not be written, or None."""
    if os.path.isdir(path):
        return f"{path} is a directory, not a file"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write {path}: the folder {folder} does not exist"
    # The export goes to a temporary file in the same folder, renamed at the end: the folder
    # must be writable even when the file itself exists.
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write {path}: the folder {folder} is not writable"
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "export" and args.out != "-":
        problem = _output_problem(args.out)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    try:
        if args.command == "export":
            with Database(args.db, create=False, readonly=True) as db:
                n = db.export_jsonl(args.out, workload=args.workload, target=args.target)
            if args.out != "-":
                print(f"exported {n} records from {args.db} to {args.out}")
        elif args.command == "import":
            with Database(args.db) as db:
                before = db.count()
                n = db.import_jsonl(args.src)
                print(f"imported {n} new records into {args.db} "
                      f"({n + before} in all; {before} were there before)")
        else:
            with Database(args.db, create=False, readonly=True) as db:
                info = db.info()
                problems = db.integrity_check() if args.check else None
            if args.json:
                if problems is not None:
                    info["integrity_problems"] = problems
                print(json.dumps(info, indent=2, sort_keys=True))
            else:
                _print_info(info, problems)
            if problems:
                return 1
    except DatabaseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        # NOTE: a file system error the checks above could not foresee (disk full, the folder
        # removed meanwhile): named, not a traceback.
        where = f" ({err.filename})" if err.filename else ""
        print(f"error: {args.command} failed: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
