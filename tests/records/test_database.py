"""The tuning-record database: storage, queries, target matching, file validation, migration."""
from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import warnings

import pytest

from records import (
    SCHEMA_VERSION,
    Database,
    DatabaseError,
    MemoryDatabase,
    RecordsWarning,
    TuningRecord,
    Workload,
    fingerprint_differences,
    hardware_hash,
    target_fingerprint,
    trace_hash,
)
from records.database import _MIGRATIONS, APPLICATION_ID
from schedules import Trace
from search.measure import MeasureResult
from tensor_ir import ops
from tensor_ir.func import structural_equal
from tensor_ir.target import Target

from .helpers import HOST, file_digest, make_records, sketch

OTHER_CPU = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=sandybridge -num-cores=4"


@pytest.fixture
def db():
    with MemoryDatabase() as database:
        yield database


@pytest.fixture
def workload():
    return Workload(sketch(64)[0])


def filled(path, n=6, errors=1):
    """A file database with one workload and n + errors records; returns (key, records)."""
    with Database(path) as database:
        key = database.commit_workload(Workload(sketch(64)[0]))
        recs = make_records(key, HOST, n, errors=errors)
        assert database.commit_records(recs) == n + errors
    return key, recs


# -- storing and querying -----------------------------------------------------------------------

def test_best_k_ranks_successes_by_median_and_skips_errors(db, workload):
    key = db.commit_workload(workload)
    recs = make_records(key, HOST, 8, errors=2)
    assert db.commit_records(recs) == 10
    best = db.best_k(key, HOST, k=3)
    expected = sorted((r for r in recs if not r.is_error), key=lambda r: r.median)[:3]
    assert [r.trace_hash for r in best] == [r.trace_hash for r in expected]
    assert [r.median for r in best] == [r.median for r in expected]
    assert all(r.record_id is not None and r.score == r.median for r in best)
    assert db.best(key, Target(HOST)).trace_hash == expected[0].trace_hash
    assert db.count() == 10 and db.count(key, HOST) == 10
    assert db.count(key, include_errors=False) == 8
    assert len(db.records(key)) == 10 and len(db.records(key, include_errors=False)) == 8
    assert db.best_k(key, HOST, k=100) == sorted(
        (r for r in db.records(key) if not r.is_error), key=lambda r: r.median)


def test_records_round_trip_every_field(db, workload):
    key = db.commit_workload(workload)
    crashed = make_records(key, HOST, 0, errors=1)[0]
    ok = make_records(key, HOST, 1, seed=5, config={"repeat": 3, "slow_factor": 10.0})[0]
    db.commit_records([ok, crashed])
    back_ok, back_err = db.records(key)
    assert back_ok == ok and back_err == crashed   # equality covers every measured field
    assert back_ok.target == str(Target(HOST))     # stored canonical
    assert MeasureResult.from_record(back_ok) == MeasureResult(
        list(ok.run_times), ok.median, number=2, checked=True)
    assert back_err.is_error and back_err.median == math.inf and back_err.run_times == ()
    assert back_err.error_msg == "kernel killed by SIGSEGV"
    assert back_ok.fingerprint == target_fingerprint(HOST)
    assert back_ok.version and back_ok.host and back_ok.timestamp > 0


def test_stored_trace_replays_to_the_same_program(db, workload):
    func, _ = sketch(64)
    key = db.commit_workload(workload)
    db.commit_records(make_records(key, HOST, 4))
    best = db.best(key, HOST)
    trace = best.trace()
    assert isinstance(trace, Trace) and trace.to_text() == best.trace_text
    assert trace_hash(trace) == best.trace_hash == \
        hashlib.sha256(trace.to_text().encode()).hexdigest()
    replayed = trace.apply(func)
    again = Trace.from_json(json.loads(best.trace_text)).apply(func)
    assert structural_equal(replayed.func, again.func)
    assert not structural_equal(replayed.func, func)


def test_workloads_are_keyed_by_structure(db):
    func = ops.matmul(32, 32, 32)
    key = db.commit_workload(func, name="mm32")
    assert key == func.structural_hash()
    # The same operator built again (new Vars and Buffers) is the same workload.
    assert db.commit_workload(Workload(ops.matmul(32, 32, 32), "again")) == key
    other = db.commit_workload(ops.matmul(32, 32, 16))
    assert other != key
    loaded = db.workload(key)
    assert loaded.name == "mm32" and loaded.key == key
    assert structural_equal(loaded.func, func)
    assert [w.key for w in db.workloads()] == [key, other]
    assert db.has_workload(func) and not db.has_workload("0" * 64)
    with pytest.raises(DatabaseError, match="no workload 0000"):
        db.workload("0" * 64)


def test_records_need_their_workload_first(db):
    recs = make_records("f" * 64, HOST, 2)
    with pytest.raises(DatabaseError, match="no workload ffff.*commit_workload"):
        db.commit_records(recs)
    assert db.count() == 0


def test_batch_is_one_transaction(db, workload):
    key = db.commit_workload(workload)
    good = make_records(key, HOST, 3)
    stray = make_records("e" * 64, HOST, 1)
    with pytest.raises(DatabaseError):
        db.commit_records(good + stray)
    assert db.count() == 0   # nothing of the failed batch was kept


def test_commit_is_idempotent_and_resume_queries(db, workload):
    key = db.commit_workload(workload)
    recs = make_records(key, HOST, 5, errors=2)
    assert db.commit_records(recs[:4]) == 4
    assert db.commit_records(recs) == 3          # the first four are already there
    hashes = db.measured_hashes(key, HOST)
    assert hashes == {r.trace_hash for r in recs}  # errors count as measured
    assert all(db.has_record(key, HOST, h) for h in hashes)
    unseen = make_records(key, HOST, 1, seed=99)[0]
    assert unseen.trace_hash not in hashes and not db.has_record(key, HOST, unseen.trace_hash)
    assert db.measured_hashes(key, OTHER_CPU) == set()


def test_remeasurement_pools_into_the_score(db, workload):
    key = db.commit_workload(workload)
    db.commit_records(make_records(key, HOST, 4))
    first, second = db.best_k(key, HOST, k=2)
    # The lucky first was noise: re-measured it is slower than the second.
    slow = [second.median * 3] * 7
    score = db.update_best_remeasure(first.record_id, slow, {"repeat": 7})
    assert score == pytest.approx(second.median * 3)   # 3 original + 7 new: median is new
    top = db.best(key, HOST)
    assert top.record_id == second.record_id
    moved = [r for r in db.records(key) if r.record_id == first.record_id][0]
    assert moved.remeasure_count == 1 and moved.score == score
    assert moved.median == first.median              # the original measurement is kept
    (entry,) = db.remeasurements(first.record_id)
    assert entry["run_times"] == slow and entry["spread"] == 0.0
    assert entry["config"] == {"repeat": 7}
    with pytest.raises(DatabaseError, match="no record 999"):
        db.update_best_remeasure(999, [1.0])
    with pytest.raises(ValueError, match="non-empty"):
        db.update_best_remeasure(first.record_id, [])


def test_error_records_are_not_remeasured(db, workload):
    key = db.commit_workload(workload)
    db.commit_records(make_records(key, HOST, 0, errors=1))
    (err,) = db.records(key)
    with pytest.raises(DatabaseError, match="is an error"):
        db.update_best_remeasure(err.record_id, [1e-3])


# -- target matching ----------------------------------------------------------------------------

def test_records_of_another_target_are_never_picked(db, workload):
    key = db.commit_workload(workload)
    mine = make_records(key, HOST, 3, seed=1)
    # Much faster records, but tuned for other hardware.
    foreign = [TuningRecord(**{**_fields(r), "run_times": (1e-9,), "median": None})
               for r in make_records(key, OTHER_CPU, 3, seed=2)]
    gpu = [TuningRecord(**{**_fields(r), "run_times": (1e-9,), "median": None})
           for r in make_records(key, "cuda -arch=sm_80", 2, seed=3)]
    db.commit_records(mine + foreign + gpu)
    best = db.best_k(key, HOST, k=10)
    assert {r.trace_hash for r in best} == {r.trace_hash for r in mine}
    assert all(r.target == str(Target(HOST)) for r in best)
    assert db.best(key, "cuda -arch=sm_90") is None
    # Naming a compatible target explicitly lets its records in.
    widened = db.best_k(key, HOST, k=10, compatible_targets=[OTHER_CPU])
    assert len(widened) == 6 and widened[0].target == str(Target(OTHER_CPU))
    assert sorted(db.targets(key)) == sorted(
        {str(Target(HOST)), str(Target(OTHER_CPU)), str(Target("cuda -arch=sm_80"))})
    assert db.fingerprints("cuda -arch=sm_80")[0]["arch"] == "sm_80"


def test_same_target_string_on_other_hardware_is_left_out_with_a_warning(db, workload):
    key = db.commit_workload(workload)
    here = target_fingerprint(HOST)
    # Another machine reporting the same CPU name but without AVX-512 (a VM that hides it).
    elsewhere = dict(here, features=[f for f in here["features"] if "avx512" not in f] +
                     ["made-up-feature"], model_name="Other box")
    theirs = [TuningRecord(**{**_fields(r), "run_times": (1e-9,), "median": None})
              for r in make_records(key, HOST, 3, seed=7)]
    db.commit_records(theirs, fingerprint=elsewhere)
    mine = make_records(key, HOST, 2, seed=8)
    db.commit_records(mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        best = db.best_k(key, HOST, k=5)
        db.best_k(key, HOST, k=5)                  # warns once per target
    assert {r.trace_hash for r in best} == {r.trace_hash for r in mine}
    assert len(caught) == 1 and issubclass(caught[0].category, RecordsWarning)
    message = str(caught[0].message)
    assert "3 record(s)" in message and "different hardware" in message
    assert "+made-up-feature" in message or "-made-up-feature" in message
    # They are not "measured here" either: a resumed search measures them again.
    assert db.measured_hashes(key, HOST) == {r.trace_hash for r in mine}
    assert len(db.best_k(key, HOST, k=5, check_fingerprint=False)) == 5
    assert len(db.fingerprints(HOST)) == 2


def test_opencl_records_apply_only_on_the_device_they_were_measured_on(db, workload):
    # The target string "opencl" names no device: PoCL on a CPU and a GPU share it.  Records
    # measured on one device are not the best on another (limits and speed differ).
    key = db.commit_workload(workload)
    here = target_fingerprint("opencl")
    pocl = dict(here, device="pthread-SomeCPU")
    gpu = dict(here, device="NVIDIA H100 80GB HBM3")
    assert hardware_hash(pocl) != hardware_hash(gpu)
    assert "device: pthread-SomeCPU (measured) vs NVIDIA H100 80GB HBM3 (here)" in \
        fingerprint_differences(pocl, gpu)
    mine = make_records(key, "opencl", 2, seed=3)
    db.commit_records(mine, fingerprint=here)      # this machine's device (PoCL here)
    db.commit_records(make_records(key, "opencl", 3, seed=4), fingerprint=gpu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        best = db.best_k(key, "opencl", k=5)
    assert {r.trace_hash for r in best} == {r.trace_hash for r in mine}
    assert any("NVIDIA H100" in str(w.message) for w in caught)
    assert len(db.fingerprints("opencl")) == 2
    # A CPU fingerprint's hash does not depend on a device field (stored hashes stay valid).
    cpu = target_fingerprint(HOST)
    assert hardware_hash(cpu) == hardware_hash(dict(cpu, device="anything"))


def test_cuda_records_are_keyed_by_the_gpu_name_not_the_driver(db, workload):
    # An H100 and an H200 are both sm_90: the name tells them apart.  A new driver runs the
    # same schedules, so it is reported, not matched.
    here = target_fingerprint("cuda -arch=sm_90")
    assert "device" in here and "driver" in here
    h100 = dict(here, device="NVIDIA H100 80GB HBM3", driver=13000)
    h200 = dict(here, device="NVIDIA H200", driver=13000)
    assert hardware_hash(h100) != hardware_hash(h200)
    assert hardware_hash(h200) == hardware_hash(dict(h200, driver=13010))
    assert "device: NVIDIA H100 80GB HBM3 (measured) vs NVIDIA H200 (here)" in \
        fingerprint_differences(h100, h200)
    key = db.commit_workload(workload)
    mine = make_records(key, "cuda -arch=sm_90", 2, seed=5)
    db.commit_records(mine, fingerprint=here)
    db.commit_records(make_records(key, "cuda -arch=sm_90", 3, seed=6),
                      fingerprint=dict(here, device="Some other GPU"))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        best = db.best_k(key, "cuda -arch=sm_90", k=5)
    assert {r.trace_hash for r in best} == {r.trace_hash for r in mine}


def test_query_targets_are_canonicalised():
    with MemoryDatabase() as db:
        key = db.commit_workload(ops.matmul(16, 16, 16))
        db.commit_records(make_records(key, "llvm -num-cores 1", 1))
        canonical = str(Target("llvm -num-cores=1"))
        assert db.count(key, canonical) == 1 and db.count(key, Target("llvm -num-cores=1")) == 1
        assert db.count(key, HOST) == (1 if canonical == str(Target(HOST)) else 0)
        with pytest.raises(DatabaseError, match="does not parse"):
            db.best_k(key, "llvm -no-such-option=1")


# -- files: validation, corruption, schema versions ------------------------------------------------

def test_file_database_persists_in_wal_mode(tmp_path):
    path = tmp_path / "t.db"
    key, recs = filled(path)
    with Database(path, create=False) as db:
        assert db.journal_mode == "wal" and db.schema_version == SCHEMA_VERSION
        assert db.count(key) == len(recs) and db.integrity_check() == []
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_missing_file_and_closed_database(tmp_path):
    with pytest.raises(DatabaseError, match="no database at .*absent.db"):
        Database(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(DatabaseError, match="directory"):
        Database(tmp_path / "nowhere" / "x.db")
    db = Database(tmp_path / "x.db")
    db.close()
    with pytest.raises(DatabaseError, match="is closed"):
        db.count()


@pytest.mark.parametrize("content", [
    b"this is a text file, not a database\n" * 10,
    b"SQLite format 3",                         # too short to hold a header
    b"\x00" * 4096,                             # zeros
], ids=["text", "short", "zeros"])
def test_non_sqlite_file_is_refused_untouched(tmp_path, content):
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseError, match=r"notes\.db is not an SQLite database.*nothing"):
        Database(path)
    assert path.read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["notes.db"]


def test_corrupt_schema_page_is_refused_untouched(tmp_path):
    path = tmp_path / "broken.db"
    filled(path)
    data = bytearray(path.read_bytes())
    data[100:1024] = os.urandom(924)            # page 1 after the header: the schema b-tree
    path.write_bytes(bytes(data))
    for name in os.listdir(tmp_path):
        if name != "broken.db":
            os.remove(tmp_path / name)
    before = file_digest(path)
    with pytest.raises(DatabaseError, match=r"broken\.db is corrupt.*nothing was written"):
        Database(path)
    assert file_digest(path) == before


def test_corrupt_data_pages_are_reported_naming_the_file(tmp_path):
    path = tmp_path / "damaged.db"
    key, _ = filled(path, n=200)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    for p in range(2, len(data) // page):
        data[p * page + 8:p * page + 200] = b"\xff" * 192
    path.write_bytes(bytes(data))
    before = file_digest(path)
    with pytest.raises(DatabaseError, match=r"damaged\.db is corrupt.*nothing was written"):
        Database(path, verify=True)
    assert file_digest(path) == before
    # Without the full check, the damage surfaces at the first query that reads it.
    with pytest.raises(DatabaseError, match=r"damaged\.db"):
        with Database(path) as db:
            db.records(key)


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "future.db"
    filled(path)
    raw = sqlite3.connect(path)
    raw.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION + 1),))
    raw.execute("ALTER TABLE records ADD COLUMN energy REAL")
    raw.commit()
    raw.close()
    before = file_digest(path)
    with pytest.raises(DatabaseError, match=rf"future\.db has schema version "
                                            rf"{SCHEMA_VERSION + 1}, newer.*Upgrade"):
        Database(path)
    assert file_digest(path) == before


def test_foreign_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "app.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE people (name TEXT)")
    raw.execute("INSERT INTO people VALUES ('ada')")
    raw.commit()
    raw.close()
    before = file_digest(path)
    with pytest.raises(DatabaseError, match=r"app\.db is an SQLite database of another "
                                            r"application.*people"):
        Database(path)
    assert file_digest(path) == before


def test_version_1_file_is_migrated(tmp_path):
    path = tmp_path / "old.db"
    func = sketch(64)[0]
    key = func.structural_hash()
    rec = make_records(key, HOST, 1)[0]
    target = str(Target(HOST))
    raw = sqlite3.connect(path)
    for statement in _MIGRATIONS[1]:
        raw.execute(statement)
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute("PRAGMA user_version = 1")
    raw.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("application", "autotune.records"), ("schema_version", "1")])
    raw.execute("INSERT INTO workloads VALUES (?, ?, ?, 0)",
                (key, "mm", json.dumps(func.to_json())))
    raw.execute("INSERT INTO records(uid, workload_key, target, trace_hash, trace, run_times, "
                "median, host, version, timestamp, config, details) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, 'h', '0.0.1', 1.0, '{}', '{}')",
                ("u1", key, target, rec.trace_hash, rec.trace_text,
                 json.dumps(list(rec.run_times)), rec.median))
    raw.commit()
    raw.close()
    with Database(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        (best,) = db.best_k(key, HOST, k=3)
        assert best.trace_hash == rec.trace_hash and best.score == rec.median
        assert best.fingerprint is None                 # unknown before schema 2
        db.update_best_remeasure(best.record_id, [rec.median])
        db.commit_records(make_records(key, HOST, 2, seed=4))
        assert db.count(key) == 3 and db.integrity_check() == []
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_memory_database_saves_to_a_file(tmp_path, workload):
    with MemoryDatabase() as db:
        key = db.commit_workload(workload)
        db.commit_records(make_records(key, HOST, 3))
        saved = db.save(tmp_path / "kept.db")
        with pytest.raises(DatabaseError, match="exists"):
            db.save(tmp_path / "kept.db")
    with saved:
        assert saved.count(key) == 3 and saved.journal_mode == "wal"
        assert saved.best(key, HOST) is not None


# -- records themselves --------------------------------------------------------------------------

def test_tuning_record_validation():
    trace = sketch(64)[1]
    with pytest.raises(ValueError, match="unknown error kind"):
        TuningRecord("k", HOST, trace, error_kind="exploded", error_msg="?")
    with pytest.raises(ValueError, match="at least one run time"):
        TuningRecord("k", HOST, trace)
    with pytest.raises(ValueError, match="finite"):
        TuningRecord("k", HOST, trace, run_times=(float("nan"),))
    with pytest.raises(ValueError, match="error_kind is None"):
        TuningRecord("k", HOST, trace, run_times=(1.0,), error_msg="oops")
    with pytest.raises(ValueError, match="format_version"):
        TuningRecord("k", HOST, {"instructions": []}, run_times=(1.0,))
    with pytest.raises(TypeError, match="Trace"):
        TuningRecord("k", HOST, 42, run_times=(1.0,))
    rec = TuningRecord("k", Target(HOST), trace.to_text(), run_times=(3.0, 1.0, 2.0))
    assert rec.median == 2.0 and rec.target == str(Target(HOST))
    assert TuningRecord.from_json(rec.to_json()) == rec
    changed = rec.to_json()
    changed["trace"]["instructions"][0]["decision"] = [1, 1, 1, 64]
    with pytest.raises(ValueError, match="trace_hash .* does not match"):
        TuningRecord.from_json(changed)


def test_measurement_contract_lives_in_search_and_is_re_exported():
    import autotune.measure
    import records
    import search.measure

    assert autotune.measure.MeasureResult is search.measure.MeasureResult
    assert autotune.measure.Runner is search.measure.Runner
    assert search.measure.ERROR_KINDS is records.ERROR_KINDS


def test_nothing_in_records_can_execute_stored_data():
    import records

    package = os.path.dirname(records.__file__)
    for name in os.listdir(package):
        if name.endswith(".py"):
            with open(os.path.join(package, name)) as f:
                source = f.read()
            for banned in ("import pickle", "import marshal", "import shelve", "eval(",
                           "exec(", "__import__"):
                assert banned not in source, f"records/{name} uses {banned}"


def _fields(record: TuningRecord) -> dict:
    return {f: getattr(record, f) for f, spec in record.__dataclass_fields__.items()
            if spec.init}


def test_write_benchmark_reports_ms_per_record(tmp_path, capsys):
    from benchmarks import db_write

    assert db_write.main(["--batches", "3", "--dir", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch_size"] == 64 and doc["records_stored"] == 3 * 64
    assert doc["journal_mode"] == "wal" and doc["synchronous"] == "full"
    assert 0 < doc["ms_per_record"] < doc["limit_ms_per_record"] == 5.0


def test_empty_file_becomes_a_database(tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with Database(path) as db:
        assert db.schema_version == SCHEMA_VERSION and db.count() == 0


def test_a_choice_in_a_context_overrides_the_score_there_only(db, workload):
    key = db.commit_workload(workload)
    db.commit_records(make_records(key, HOST, 4, errors=1))
    ranked = db.best_k(key, HOST, k=4)
    assert db.chosen(key, HOST, "bert") is None
    db.choose(key, HOST, ranked[2].record_id, "bert", details={"in_model_ms": {"1": 2.0}})
    assert db.chosen(key, HOST, "bert").record_id == ranked[2].record_id
    assert db.best(key, HOST).record_id == ranked[0].record_id   # the score is untouched
    assert db.chosen(key, HOST, "resnet18") is None               # another model's build
    assert db.chosen(key, OTHER_CPU, "bert") is None              # another target
    db.choose(key, HOST, ranked[3].record_id, "bert")             # a later choice replaces it
    assert db.chosen(key, HOST, "bert").record_id == ranked[3].record_id
    crashed = [r for r in db.records(key) if r.error_kind is not None][0]
    with pytest.raises(DatabaseError, match="cannot be chosen"):
        db.choose(key, HOST, crashed.record_id, "bert")
    with pytest.raises(DatabaseError, match="cannot be chosen"):
        db.choose(key, OTHER_CPU, ranked[0].record_id, "bert")
    with pytest.raises(DatabaseError, match="cannot be chosen"):
        db.choose(key, HOST, 9999, "bert")
    with pytest.raises(ValueError, match="context"):
        db.choose(key, HOST, ranked[0].record_id, "")


def test_a_version_3_file_gains_the_choices_table(tmp_path):
    path = tmp_path / "v3.db"
    key, _ = filled(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE choices")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with Database(path, create=False, readonly=True) as ro:   # migrated in memory only
        assert ro.chosen(key, HOST, "m") is None
    assert "choices" not in {n for (n,) in sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    with Database(path, create=False) as rw:
        assert rw.schema_version == SCHEMA_VERSION == 4
        best = rw.best(key, HOST)
        rw.choose(key, HOST, best.record_id, "m")
        assert rw.chosen(key, HOST, "m").record_id == best.record_id
