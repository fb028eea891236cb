"""Two processes writing into one database file, and a writer killed with SIGKILL."""
from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from records import Database, DatabaseError, TuningRecord, canonical_target
from tensor_ir import ops

from .helpers import HOST, sketch

REPO = Path(__file__).resolve().parents[2]
BATCH = 32


def _batch(key: str, target: str, batch: int, size: int = BATCH) -> list[TuningRecord]:
    """Records of one batch; each carries its batch number in its config and a distinct
    trace (the real tiled trace plus an annotation naming batch and index)."""
    base = sketch(64)[1].to_json()
    out = []
    for index in range(size):
        trace = dict(base, instructions=base["instructions"] + [
            {"kind": "annotate", "inputs": ["b0"], "attrs": {"key": "batch_index",
                                                            "value": [batch, index]},
             "outputs": []}])
        out.append(TuningRecord(key, target, trace, run_times=(1e-3 + index * 1e-6,),
                                host="writer", version="test", timestamp=time.time(),
                                config={"batch": batch}))
    return out


def _writer(path: str, n: str, first: str, batches: str, go_file: str) -> None:
    """Child process: wait for ``go_file``, then commit ``batches`` batches (-1: until
    killed), printing each batch number after its commit returned."""
    db = Database(path, timeout=60)
    key = db.commit_workload(ops.matmul(int(n), int(n), int(n)))
    target = canonical_target(HOST)
    while go_file != "-" and not os.path.exists(go_file):
        time.sleep(0.001)
    b, end = int(first), (None if int(batches) < 0 else int(first) + int(batches))
    while end is None or b < end:
        db.commit_records(_batch(key, target, b))
        print(b, flush=True)
        b += 1
    db.close()


def _spawn(*args) -> subprocess.Popen:
    code = ("import sys; from tests.records.test_concurrency import _writer; "
            "_writer(*sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _batches(db: Database, key: str) -> collections.Counter:
    return collections.Counter(r.config["batch"] for r in db.records(key))


def test_two_processes_write_into_one_file_at_once(tmp_path):
    path = tmp_path / "shared.db"
    go = tmp_path / "go"
    n_batches = 25
    writers = [_spawn(path, n, 0, n_batches, go) for n in (32, 48)]
    time.sleep(0.5)                    # let both open the (new) file and wait at the gate
    go.touch()
    # Meanwhile this process reads: WAL readers are not blocked by the writers.
    reads = 0
    with Database(path) as reader:
        while any(w.poll() is None for w in writers):
            reader.count()
            reads += 1
            time.sleep(0.005)
    outputs = [w.communicate(timeout=120) for w in writers]
    for w, (out, err) in zip(writers, outputs):
        assert w.returncode == 0, err
        assert out.split() == [str(b) for b in range(n_batches)]
    with Database(path) as db:
        assert db.integrity_check() == []
        keys = [ops.matmul(n, n, n).structural_hash() for n in (32, 48)]
        assert sorted(w.key for w in db.workloads()) == sorted(keys)
        for key in keys:
            assert _batches(db, key) == {b: BATCH for b in range(n_batches)}
        assert db.count() == 2 * n_batches * BATCH
    assert reads > 0


def test_killed_writer_loses_no_committed_batch(tmp_path):
    path = tmp_path / "killed.db"
    rng = random.Random(0)
    key = ops.matmul(64, 64, 64).structural_hash()
    acknowledged: set[int] = set()
    for round_ in range(3):
        writer = _spawn(path, 64, round_ * 1000, -1, "-")
        wanted = rng.randint(2, 6)
        seen = 0
        while seen < wanted:
            line = writer.stdout.readline()
            assert line, writer.stderr.read()
            acknowledged.add(int(line))
            seen += 1
        time.sleep(rng.uniform(0, 0.01))  # land anywhere, quite often inside a commit
        os.kill(writer.pid, signal.SIGKILL)
        out, _ = writer.communicate(timeout=60)
        acknowledged.update(int(b) for b in out.split())
        assert writer.returncode == -signal.SIGKILL
        with Database(path) as db:
            assert db.integrity_check() == []
            present = _batches(db, key)
        # Every batch whose commit returned is there, and every batch there is whole.
        assert acknowledged <= set(present)
        assert set(present.values()) == {BATCH}
    assert len(acknowledged) >= 6


def test_threads_share_one_database(tmp_path):
    import threading

    errors: list[BaseException] = []
    with Database(tmp_path / "threads.db") as db:
        key = db.commit_workload(ops.matmul(64, 64, 64))
        target = canonical_target(HOST)

        def work(first: int) -> None:
            try:
                for b in range(first, first + 5):
                    db.commit_records(_batch(key, target, b, size=8))
                    db.best_k(key, HOST, k=2)
            except (DatabaseError, AssertionError) as err:  # pragma: no cover - reported
                errors.append(err)

        threads = [threading.Thread(target=work, args=(k * 100,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert db.count(key) == 3 * 5 * 8


def test_lock_held_too_long_is_a_clear_error_and_readers_are_not_blocked(tmp_path):
    import sqlite3

    path = tmp_path / "locked.db"
    with Database(path) as db:
        key = db.commit_workload(ops.matmul(64, 64, 64))
        target = canonical_target(HOST)
        db.commit_records(_batch(key, target, 0, size=4))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")        # another process in the middle of a commit
    try:
        with Database(path, timeout=0.2) as db:   # opening a current file writes nothing
            assert db.count(key) == 4 and db.best(key, HOST) is not None
            started = time.monotonic()
            try:
                db.commit_records(_batch(key, target, 1, size=4))
                raise AssertionError("commit went through a held write lock")
            except DatabaseError as err:
                assert "busy time-out" in str(err) and "locked.db" in str(err)
            assert time.monotonic() - started >= 0.15
            assert db.count(key) == 4
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_file_created_between_two_schema_reads_is_opened(tmp_path, monkeypatch):
    """Two processes open one new file and the other one creates the schema in the moment
    between this opener's read of the application id and its read of the table list (a CI
    run hit this).  The two reads must come from one snapshot: read apart, the opener saw
    tables without our application id and refused the file as another application's."""
    import sqlite3
    import threading

    path = tmp_path / "new.db"
    real_connect = sqlite3.connect
    creator_errors: list[BaseException] = []
    creators: list[threading.Thread] = []

    def create():
        try:
            Database(path, timeout=20).close()
        except BaseException as err:       # reported by the assertion below
            creator_errors.append(err)

    class Interleaved(sqlite3.Connection):
        def execute(self, sql, *args):
            if "sqlite_master" in sql and not creators:
                creators.append(threading.Thread(target=create))
                creators[0].start()
                # Read apart, the creator finishes well inside this second; inside one read
                # transaction it waits on the opener's read lock instead.
                creators[0].join(timeout=1.0)
            return super().execute(sql, *args)

    def connect(*args, **kwargs):
        if not creators:
            kwargs.setdefault("factory", Interleaved)
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    with Database(path, timeout=20) as db:
        key = db.commit_workload(ops.matmul(16, 16, 16))
    creators[0].join(timeout=30)
    assert not creators[0].is_alive() and not creator_errors
    with Database(path) as db:
        assert db.count(key) == 0 and key in {w.key for w in db.workloads()}
