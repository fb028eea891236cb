"""JSON-lines export and import, and the ``python -m records`` command line."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from records import (
    SCHEMA_VERSION,
    Database,
    DatabaseError,
    MemoryDatabase,
    TuningRecord,
    Workload,
)
from records.__main__ import main
from tensor_ir import ops
from tensor_ir.target import Target

from .helpers import HOST, make_records, sketch

REPO = Path(__file__).resolve().parents[2]
OTHER_CPU = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -num-cores=4"


def populated(db) -> tuple[str, str]:
    """Two workloads, records on two targets (with errors), one re-measurement."""
    key = db.commit_workload(Workload(sketch(64)[0], "mm64"))
    small = db.commit_workload(ops.matmul(16, 16, 16), name="mm16")
    db.commit_records(make_records(key, HOST, 5, errors=1, seed=1))
    db.commit_records(make_records(key, OTHER_CPU, 2, seed=2))
    db.commit_records(make_records(small, HOST, 3, seed=3, n=16))
    best = db.best(key, HOST)
    db.update_best_remeasure(best.record_id, [best.median * 2] * 5, {"repeat": 5})
    return key, small


def snapshot(db) -> list:
    """Everything a database holds that an export must carry, as comparable values."""
    out = []
    for w in db.workloads():
        recs = db.records(w.key)
        out.append((w.key, w.name, sorted(
            (r.uid, r.to_json().__repr__(), r.score, r.remeasure_count,
             json.dumps(db.remeasurements(r.record_id), sort_keys=True)) for r in recs)))
    return out


def test_export_import_round_trip_and_import_twice_adds_nothing(tmp_path):
    src = Database(tmp_path / "a.db")
    key, small = populated(src)
    out = tmp_path / "records.jsonl"
    assert src.export_jsonl(out) == 11
    lines = out.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "autotune-records", "format_version": 1,
                                    "kind": "header"}
    assert [json.loads(line)["kind"] for line in lines[1:3]] == ["workload", "workload"]
    with Database(tmp_path / "b.db") as dst:
        assert dst.import_jsonl(out) == 11
        assert dst.import_jsonl(out) == 0
        assert dst.count() == 11
        assert snapshot(dst) == snapshot(src)
        # The best record after import reflects the re-measurement.
        assert dst.best(key, HOST).uid == src.best(key, HOST).uid
        again = tmp_path / "again.jsonl"
        dst.export_jsonl(again)
        assert again.read_text() == out.read_text()    # stable text: diffs stay small
    src.close()


def test_import_merges_two_machines_databases(tmp_path):
    a, b = MemoryDatabase(), MemoryDatabase()
    key = a.commit_workload(ops.matmul(16, 16, 16))
    b.commit_workload(ops.matmul(16, 16, 16))
    first = make_records(key, HOST, 3, seed=10, n=16)
    second = make_records(key, HOST, 4, seed=11, n=16)
    a.commit_records(first)
    b.commit_records(first[:1] + second)            # one record shared by both
    a.export_jsonl(tmp_path / "a.jsonl")
    assert b.import_jsonl(tmp_path / "a.jsonl") == 2
    assert b.measured_hashes(key, HOST) == {r.trace_hash for r in first + second}


def test_records_imported_from_other_hardware_keep_their_fingerprint(tmp_path):
    src = MemoryDatabase()
    key = src.commit_workload(ops.matmul(16, 16, 16))
    here = src.commit_records(make_records(key, HOST, 2, seed=20, n=16))
    assert here == 2
    fp = json.loads(json.dumps(src.records(key)[0].fingerprint))
    fp["features"] = ["sse2"]
    fp["model_name"] = "old box"
    other = make_records(key, HOST, 2, seed=21, n=16)
    src.commit_records([TuningRecord(**{**_fields(r), "run_times": (1e-9,), "median": None})
                        for r in other], fingerprint=fp)
    src.export_jsonl(tmp_path / "x.jsonl")
    dst = MemoryDatabase()
    assert dst.import_jsonl(tmp_path / "x.jsonl") == 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = dst.best_k(key, HOST, k=4)
    assert len(best) == 2 and all(r.median > 1e-9 for r in best)
    assert {f["model_name"] for f in dst.fingerprints(HOST)} >= {"old box"}


def test_filtered_export(tmp_path):
    db = MemoryDatabase()
    key, small = populated(db)
    assert db.export_jsonl(tmp_path / "t.jsonl", target=OTHER_CPU) == 2
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert kinds == ["header", "workload", "record", "record"]
    assert db.export_jsonl(tmp_path / "w.jsonl", workload=small) == 3
    dst = MemoryDatabase()
    dst.import_jsonl(tmp_path / "w.jsonl")
    assert [w.key for w in dst.workloads()] == [small]
    with pytest.raises(DatabaseError, match="no workload"):
        db.export_jsonl(tmp_path / "n.jsonl", workload="0" * 64)


def _exported(tmp_path) -> tuple[Path, list[str]]:
    db = MemoryDatabase()
    populated(db)
    path = tmp_path / "good.jsonl"
    db.export_jsonl(path)
    return path, path.read_text().splitlines()


@pytest.mark.parametrize("damage, message", [
    (lambda lines: lines[:5] + ["{not json"] + lines[5:], r"bad\.jsonl:6: not valid JSON"),
    (lambda lines: lines[1:], r"bad\.jsonl:1: not a tuning-record export"),
    (lambda lines: [lines[0].replace('"format_version":1', '"format_version":9')] + lines[1:],
     r"bad\.jsonl:1: export format_version 9"),
    (lambda lines: lines[:1] + lines[3:], r"refer to workload .* neither in the file"),
    (lambda lines: lines[:4] + [lines[4].replace('"run_times":[', '"run_times":[-1,')]
     + lines[5:], r"bad\.jsonl:5: bad record: .*finite"),
    (lambda lines: lines[:4] + [lines[4].replace('"decision":[', '"decision":[1,')]
     + lines[5:], r"bad\.jsonl:5: bad record: .*trace_hash .* does not match"),
    (lambda lines: lines[:1] + [lines[1].replace('"name":"mm64"', '"nom":"mm64"')]
     + lines[2:], r"bad\.jsonl:2: bad workload: .*lacks field"),
    (lambda lines: lines + ['{"kind": "macro", "code": "import os"}'],
     r"unknown line kind 'macro'"),
], ids=["json", "header", "version", "workload", "times", "trace", "field", "kind"])
def test_bad_import_names_file_and_line_and_adds_nothing(tmp_path, damage, message):
    _, lines = _exported(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(damage(lines)) + "\n")
    with Database(tmp_path / "dst.db") as dst:
        with pytest.raises(DatabaseError, match=message):
            dst.import_jsonl(bad)
        assert dst.count() == 0 and dst.workloads() == []


# -- command line --------------------------------------------------------------------------------

def test_cli_export_import_info(tmp_path, capsys):
    with Database(tmp_path / "a.db") as db:
        key, _ = populated(db)
    out = tmp_path / "a.jsonl"
    assert main(["export", str(tmp_path / "a.db"), str(out)]) == 0
    assert "exported 11 records" in capsys.readouterr().out
    assert main(["import", str(tmp_path / "b.db"), str(out)]) == 0
    assert "imported 11 new records" in capsys.readouterr().out
    assert main(["import", str(tmp_path / "b.db"), str(out)]) == 0
    assert "imported 0 new records" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "b.db"), "--json", "--check"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 11 and info["errors"] == 1 and info["integrity_problems"] == []
    assert info["remeasurements"] == 1
    mm64 = [w for w in info["workloads"] if w["name"] == "mm64"][0]
    assert set(mm64["targets"]) == {str(Target(HOST)), str(Target(OTHER_CPU))}
    assert main(["info", str(tmp_path / "b.db")]) == 0
    text = capsys.readouterr().out
    assert "mm64: 8 records" in text and f"schema {SCHEMA_VERSION}" in text


def test_cli_reports_unusable_files(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n" * 40)
    assert main(["info", str(notes)]) == 1
    assert "notes.txt is not an SQLite database" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing.db"), str(tmp_path / "x.jsonl")]) == 1
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    assert main(["import", str(tmp_path / "n.db"), str(notes)]) == 1
    assert "notes.txt:1: not valid JSON" in capsys.readouterr().err


def test_cli_runs_as_a_module(tmp_path):
    with Database(tmp_path / "a.db") as db:
        populated(db)
    done = subprocess.run([sys.executable, "-m", "records", "export", str(tmp_path / "a.db"),
                           "-"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 + 2 + 11 and json.loads(lines[-1])["kind"] == "record"


def _fields(record: TuningRecord) -> dict:
    return {f: getattr(record, f) for f, spec in record.__dataclass_fields__.items()
            if spec.init}
