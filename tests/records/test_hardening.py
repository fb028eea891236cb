"""Databases a user may really have: damaged records, files in read-only places, old schemas.
A record that cannot be read or replayed is skipped with a warning, never the end of a build
or a resumed run; reading never changes a file."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import warnings

import pytest

import autotune
from records import Database, DatabaseError, RecordsWarning, Workload, trace_hash
from records.database import _MIGRATIONS, APPLICATION_ID
from schedules.space import DesignSpace
from search import SearchConfig
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir import ops
from tensor_ir.target import Target

TARGET = Target("llvm")


def _tuned(path, n: int = 16, trials: int = 8):
    """A database file with ``trials`` records of an n^3 matmul (simulated times)."""
    func = ops.matmul(n, n, n)
    autotune.tune(func, TARGET, trials=trials, search=SearchConfig(batch_size=4, remeasure_top=0),
                  database=str(path), builder=SimulationBuilder(),
                  runner=SimulationRunner(lambda inp: 1e-4 + (hash(inp.func.structural_hash())
                                                              % 1000) * 1e-7),
                  log=False)
    return func


def _raw(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def _best_id(path, func) -> int:
    with Database(path) as db:
        return db.best(Workload(func).key, TARGET).record_id


def test_damaged_best_record_is_skipped_and_the_next_one_serves(tmp_path, caplog):
    path = tmp_path / "t.db"
    func = _tuned(path)
    bad = _best_id(path, func)
    with _raw(path) as raw:
        raw.execute("UPDATE records SET trace = '{not json' WHERE id = ?", (bad,))
    with pytest.warns(RecordsWarning, match=f"record {bad} is malformed"):
        with autotune.apply_history_best(str(path)) as ctx:
            autotune.build(func, TARGET)
    assert ctx.coverage()["served"] == 1
    assert ctx.entries[0].record_id != bad
    with Database(path, readonly=True) as db:
        assert db.info()["unreadable"] == 1


def test_record_with_unknown_instruction_is_skipped_by_builds_and_resumes(tmp_path):
    path = tmp_path / "t.db"
    func = _tuned(path)
    bad = _best_id(path, func)
    with _raw(path) as raw:
        # Every instruction's kind, not only a split's: the best record (chosen by measured
        # times, so by noise) need not contain a split.
        raw.execute("UPDATE records SET trace = replace(trace, '\"kind\":\"', "
                    "'\"kind\":\"no_such_primitive_') WHERE id = ?", (bad,))
    with pytest.warns(RecordsWarning, match=f"record {bad} .*cannot be used"):
        with autotune.apply_history_best(str(path)) as ctx:
            autotune.build(func, TARGET)
    assert ctx.coverage()["served"] == 1 and ctx.entries[0].record_id != bad
    with pytest.warns(RecordsWarning, match=f"record {bad} .*no_such_primitive_"):
        result = autotune.tune(func, TARGET, trials=12,
                               search=SearchConfig(batch_size=4, remeasure_top=0),
                               database=str(path), builder=SimulationBuilder(),
                               runner=SimulationRunner(lambda i: 1e-4), log=False)
    assert result.trials == 4 and result.best_trace is not None
    with Database(path, readonly=True) as db:
        assert db.info()["unreadable"] == 1


def test_damaged_fingerprint_and_deeply_nested_json_are_skipped(tmp_path):
    path = tmp_path / "t.db"
    func = _tuned(path)
    key = Workload(func).key
    with Database(path) as db:
        ids = [r.record_id for r in db.records(key)]
    with _raw(path) as raw:
        raw.execute("UPDATE records SET config = ? WHERE id = ?",
                    ("[" * 100000 + "]" * 100000, ids[0]))
        raw.execute("INSERT INTO fingerprints(target, hw_hash, digest, data) "
                    "VALUES ('x', 'y', 'z', '{broken')")
        raw.execute("UPDATE records SET fingerprint_id = last_insert_rowid() WHERE id = ?",
                    (ids[1],))
    with Database(path) as db:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kept = db.records(key)
        assert len(kept) == len(ids) - 2
        assert sum("is malformed" in str(w.message) for w in caught) == 2
        assert db.info()["unreadable"] == 2


def test_import_refuses_a_trace_that_does_not_replay(tmp_path):
    path = tmp_path / "t.db"
    _tuned(path)
    out = tmp_path / "x.jsonl"
    with Database(path) as db:
        db.export_jsonl(out)
    lines = out.read_text().splitlines()
    for i, line in enumerate(lines):
        data = json.loads(line)
        if data["kind"] == "record":
            for inst in data["trace"]["instructions"]:
                if inst["kind"] == "sample_perfect_tile":
                    inst["decision"] = [7] * len(inst["decision"])   # not a factorisation
                    break
            data.pop("trace_hash")
            lines[i] = json.dumps(data)
            where = i + 1
            break
    out.write_text("\n".join(lines) + "\n")
    with Database(tmp_path / "other.db") as dst:
        with pytest.raises(DatabaseError, match=rf"x.jsonl:{where}: the record's trace does "
                                                r"not replay"):
            dst.import_jsonl(out)
        assert dst.count() == 0


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _schema_file(path, version: int) -> None:
    """A database file of schema ``version`` with one workload and no records."""
    raw = _raw(path)
    for step in range(1, version + 1):
        for statement in _MIGRATIONS[step]:
            raw.execute(statement)
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute(f"PRAGMA user_version = {version}")
    raw.executemany("INSERT INTO meta(key, value) VALUES (?, ?)",
                    [("application", "autotune.records"), ("schema_version", str(version))])
    func = ops.matmul(8, 8, 8)
    raw.execute("INSERT INTO workloads(key, name, func, created) VALUES (?, ?, ?, 0)",
                (Workload(func).key, "mm8", json.dumps(func.to_json())))
    raw.close()


@pytest.mark.parametrize("version", sorted(_MIGRATIONS))
def test_read_only_use_leaves_every_schema_version_byte_identical(tmp_path, version):
    from records.__main__ import main

    path = tmp_path / f"v{version}.db"
    _schema_file(path, version)
    before = _digest(path)
    with Database(path, readonly=True) as db:
        info = db.info()
        assert info["schema_version"] == version and info["unreadable"] == 0
        assert len(db.workloads()) == 1 and db.count() == 0
        assert list(db.dump())
        with pytest.raises(DatabaseError, match="read-only"):
            db.commit_workload(ops.matmul(4, 4, 4))
    assert main(["info", str(path)]) == 0
    assert main(["export", str(path), str(tmp_path / "out.jsonl")]) == 0
    with autotune.apply_history_best(str(path)):
        autotune.build(ops.matmul(8, 8, 8), TARGET)
    assert _digest(path) == before


def test_read_only_open_falls_back_to_immutable(tmp_path, monkeypatch):
    """A WAL file in a folder this process cannot write: SQLite's read-only mode cannot make
    the shared-memory file, so the file is read as immutable instead."""
    path = tmp_path / "t.db"
    func = _tuned(path)
    real = sqlite3.connect
    tried = []

    def connect(target, *args, **kwargs):
        tried.append(str(target))
        if str(target).endswith("mode=ro"):
            raise sqlite3.OperationalError("unable to open database file")
        return real(target, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    with Database(path, readonly=True) as db:
        assert db.best(Workload(func).key, TARGET) is not None
    assert tried[-1].endswith("immutable=1")


def test_two_database_objects_claim_disjoint_candidates(tmp_path):
    path = tmp_path / "t.db"
    func = ops.matmul(16, 16, 16)
    space = DesignSpace(func, TARGET)
    hashes = list(dict.fromkeys(trace_hash(space.sample(seed=s).final_trace)
                                for s in range(8)))[:6]
    assert len(hashes) == 6
    with Database(path) as a, Database(path) as b:
        key = a.commit_workload(func)
        first = a.claim(key, TARGET, hashes[:4])
        second = b.claim(key, TARGET, hashes)
        assert first == set(hashes[:4]) and second == set(hashes) - first
        # Claims are a process's own: claiming again is granted, and expired ones lapse.
        assert a.claim(key, TARGET, hashes[:4]) == first
        assert b.claim(key, TARGET, hashes[:2], ttl=0.0) == set()


def test_claims_of_a_process_that_died_on_this_machine_lapse_at_once(tmp_path):
    """A run killed mid-batch leaves claims with an hour to live; its resumed run must not
    skip those candidates, while a live process's claims still hold."""
    import subprocess
    import sys

    from records import host_name

    path = tmp_path / "t.db"
    func = ops.matmul(16, 16, 16)
    space = DesignSpace(func, TARGET)
    hashes = list(dict.fromkeys(trace_hash(space.sample(seed=s).final_trace)
                                for s in range(8)))[:4]
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    with Database(path) as db:
        key = db.commit_workload(func)
        live, dead = f"{host_name()}:{os.getppid()}:1", f"{host_name()}:{dead_pid}:1"
        elsewhere = f"another-host:{dead_pid}:1"
        with Database(path) as other:  # claims as another process would leave them
            assert other.claim(key, TARGET, hashes[:3]) == set(hashes[:3])
        with db._write("giving the claims their owners") as conn:
            conn.executemany("UPDATE claims SET owner = ? WHERE trace_hash = ?",
                             [(live, hashes[0]), (dead, hashes[1]), (elsewhere, hashes[2])])
        assert db.claim(key, TARGET, hashes) == {hashes[1], hashes[3]}
