"""Tuning runs against a database file: killed with SIGKILL and resumed, and two processes
tuning different workloads into one file at once.

The runs are real ``autotune.tune`` calls on a matmul design space; only measurement is
offline (search.simulation, with the landscape of tests.search.landscape: times are a
deterministic function of the program), so every process of a test sees the same costs and a
fixed seed gives the same search.  The child processes print the trace hashes of every batch
after its commit returned, which is what "committed before the kill" means here.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import autotune
from records import Database, Workload
from schedules.space import DesignSpace
from search import SearchConfig
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir import ops
from tests.search.landscape import FeatureDistance, synthetic_runner

REPO = Path(__file__).resolve().parents[2]
BATCH = 8
# Generous: the machine is small and shared, and a child imports the whole stack first.
CHILD_TIMEOUT = 120.0


class _LoggedDatabase(Database):
    """A Database that prints the trace hashes of each batch once its commit returned."""

    def commit_records(self, records, fingerprint=None) -> int:
        records = list(records)
        added = super().commit_records(records, fingerprint)
        print("committed " + " ".join(r.trace_hash for r in records), flush=True)
        return added


class _SlowRunner(SimulationRunner):
    """The synthetic runner, ``delay`` seconds per batch after its first ``fast`` batches:
    a kill after the ``fast``-th commit then lands before the next one (in retraining,
    search or this sleep: "mid-run"), however slowly the killing process reacts."""

    def __init__(self, space, fast: int, delay: float):
        super().__init__(FeatureDistance(space))
        self.fast, self.delay = fast, delay

    def run(self, inputs, builds):
        if self.calls >= self.fast:
            time.sleep(self.delay)
        return super().run(inputs, builds)


def _tune_child(path: str, n: str, trials: str, fast: str, delay: str, go_file: str) -> None:
    """Child process: tune an n x n x n matmul into ``path`` (after ``go_file`` exists, '-'
    for at once), printing each committed batch and, at the end, a JSON summary line."""
    func = ops.matmul(int(n), int(n), int(n))
    space = DesignSpace(func, "llvm")
    runner = _SlowRunner(space, int(fast), float(delay))
    db = _LoggedDatabase(path, timeout=60)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while go_file != "-" and not os.path.exists(go_file):
        if time.monotonic() > deadline:
            raise SystemExit(f"the go file {go_file} never appeared")
        time.sleep(0.002)
    result = autotune.tune(func, "llvm", trials=int(trials), database=db,
                           search=SearchConfig(batch_size=BATCH, seed=0),
                           builder=SimulationBuilder(), runner=runner, space=space, log=False)
    db.close()
    print("done " + json.dumps({"trials": result.trials, "previous": result.previous_trials,
                                "remeasured": len(result.remeasured)}), flush=True)


def _spawn(path, n: int, trials: int, fast: int = 10 ** 6, delay: float = 0.0,
           go_file="-") -> subprocess.Popen:
    code = ("import sys; from tests.records.test_resume import _tune_child; "
            "_tune_child(*sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", code, *map(str, (path, n, trials, fast,
                                                                     delay, go_file))],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _committed(lines) -> list[list[str]]:
    """The batches (lists of trace hashes) of a child's output lines."""
    return [line.split()[1:] for line in lines if line.startswith("committed ")]


def _stored_hashes(db: Database, func) -> list[str]:
    return [r.trace_hash for r in db.records(Workload(func).key)]


def test_killed_tuning_run_resumes_without_repeats_and_ends_at_the_budget(tmp_path):
    path = tmp_path / "tuning.db"
    n, budget = 32, 32
    func = ops.matmul(n, n, n)
    # 1. Start the run; kill it with SIGKILL once two batches are committed.
    child = _spawn(path, n, budget, fast=2, delay=3.0)
    lines = []
    try:
        while len(_committed(lines)) < 2:
            line = child.stdout.readline()
            assert line, f"the tuning child ended early:\n{child.stderr.read()}"
            lines.append(line.strip())
        time.sleep(random.Random(0).uniform(0.0, 0.3))
        os.kill(child.pid, signal.SIGKILL)
        out, _ = child.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    lines += out.splitlines()
    assert child.returncode == -signal.SIGKILL
    assert not any(line.startswith("done ") for line in lines), "the run finished unkilled"
    acknowledged = [h for batch in _committed(lines) for h in batch]
    assert len(acknowledged) >= 2 * BATCH

    # 2. Reopen: the file is sound and holds every acknowledged batch, each one whole.
    with Database(path) as db:
        assert db.integrity_check() == []
        before = _stored_hashes(db, func)
    assert set(acknowledged) <= set(before)
    assert len(before) % BATCH == 0 and len(set(before)) == len(before) < budget

    # 3. Resume with the same call: it tops the stored trials up to the budget, measuring
    # nothing that was measured before.
    space = DesignSpace(func, "llvm")
    runner = synthetic_runner(space)
    progress: list[str] = []
    with Database(path) as db:
        result = autotune.tune(func, "llvm", trials=budget, database=db,
                               search=SearchConfig(batch_size=BATCH, seed=0),
                               builder=SimulationBuilder(), runner=runner, space=space,
                               log=progress.append)
        after = _stored_hashes(db, func)
        assert db.integrity_check() == []
    assert result.previous_trials == len(before)
    assert result.trials == budget - len(before) == len(result.history)
    resumed = [t.trace_hash for t in result.history]
    assert not set(resumed) & set(before)
    assert len(after) == len(set(after)) == budget
    assert set(after) == set(before) | set(resumed)
    # The loop ran each new program once; only re-measurement runs programs again.
    measured = [f.structural_hash() for f in runner.ran[:result.trials]]
    assert len(set(measured)) == result.trials
    assert result.best_schedule is not None
    # Progress counts the stored trials toward the budget.
    counts = [line.split("trials ")[1].split()[0] for line in progress if " trials " in line]
    assert counts[-1] == f"{budget}/{budget}"
    assert counts[0] == f"{len(before) + BATCH}/{budget}"

    # 4. Asked again for the same budget it measures nothing; top_up=False asks for more.
    again = autotune.tune(func, "llvm", trials=budget, database=str(path),
                          search=SearchConfig(batch_size=BATCH, seed=0, remeasure_top=0),
                          builder=SimulationBuilder(), runner=runner, space=space, log=False)
    assert again.trials == 0 and again.previous_trials == budget
    more = autotune.tune(func, "llvm", trials=BATCH, database=str(path),
                         search=SearchConfig(batch_size=BATCH, seed=0, remeasure_top=0,
                                             top_up=False),
                         builder=SimulationBuilder(), runner=runner, space=space, log=False)
    assert more.trials == BATCH and more.previous_trials == budget
    with Database(path) as db:
        final = _stored_hashes(db, func)
    assert len(final) == len(set(final)) == budget + BATCH


def test_two_processes_tune_different_workloads_into_one_file(tmp_path):
    path = tmp_path / "shared.db"
    go = tmp_path / "go"
    sizes, budget = (32, 48), 24
    children = [_spawn(path, n, budget, go_file=go) for n in sizes]
    try:
        time.sleep(0.2)
        go.touch()  # both start tuning (and committing) at about the same moment
        outputs = [c.communicate(timeout=CHILD_TIMEOUT) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.communicate()
    logged = {}
    for n, child, (out, err) in zip(sizes, children, outputs):
        assert child.returncode == 0, err
        lines = out.splitlines()
        summary = json.loads(lines[-1].removeprefix("done "))
        assert summary == {"trials": budget, "previous": 0, "remeasured": 3}
        logged[n] = [h for batch in _committed(lines) for h in batch]
        assert len(logged[n]) == budget
    with Database(path) as db:
        assert db.integrity_check() == []
        assert sorted(w.key for w in db.workloads()) == \
            sorted(Workload(ops.matmul(n, n, n)).key for n in sizes)
        spans = []
        for n in sizes:
            key = Workload(ops.matmul(n, n, n)).key
            stored = _stored_hashes(db, ops.matmul(n, n, n))
            assert sorted(stored) == sorted(logged[n])           # no record lost, none extra
            best = db.best(key, "llvm")
            assert best is not None and best.remeasure_count >= 1
            stamps = [r.timestamp for r in db.records(key)]
            spans.append((min(stamps), max(stamps)))
        assert db.count() == len(sizes) * budget
    # The two runs were measuring (and so committing) during the same stretch of time.
    assert max(lo for lo, _ in spans) < min(hi for _, hi in spans)


def test_two_processes_tuning_one_workload_never_measure_a_candidate_twice(tmp_path):
    """Same workload, same seed, one file: without claims both runs would propose (and
    measure) the same candidates; with them every stored candidate is distinct."""
    path = tmp_path / "shared.db"
    go = tmp_path / "go"
    n, budget = 32, 16
    children = [_spawn(path, n, budget, fast=0, delay=0.2, go_file=go) for _ in range(2)]
    try:
        time.sleep(0.2)
        go.touch()
        outputs = [c.communicate(timeout=CHILD_TIMEOUT) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.communicate()
    for child, (_, err) in zip(children, outputs):
        assert child.returncode == 0, err
    with Database(path) as db:
        stored = _stored_hashes(db, ops.matmul(n, n, n))
    assert len(stored) == len(set(stored)) >= budget
