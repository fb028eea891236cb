"""The simulation runner: times from a cost function, or replayed from recorded measurements
(an export or a database), through the same contract the local runner implements."""
from __future__ import annotations

import math

import pytest

import autotune
from records import Database, MemoryDatabase, Workload
from schedules.space import DesignSpace
from search import SearchConfig
from search.measure import BuildResult, MeasureInput, MeasureResult
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir import ops
from tensor_ir.target import Target

TARGET = Target("llvm")


def _cost(inp: MeasureInput) -> float:
    return 1e-4 * (1 + int(inp.func.structural_hash()[:4], 16) / 65536)


def _inputs(func, count: int):
    space = DesignSpace(func, TARGET)
    key = Workload(func).key
    return [MeasureInput(space.sample(seed=s).func, TARGET, key, reference=func)
            for s in range(count)]


def test_cost_function_times_and_errors():
    func = ops.matmul(16, 16, 16)
    inputs = _inputs(func, 3)
    calls = iter([2e-3, math.nan, MeasureResult.error("crash", "simulated segfault")])
    runner = SimulationRunner(lambda inp: next(calls), repeat=4)
    builds = SimulationBuilder().build(inputs)
    ok, nan, crash = runner.run(inputs, builds)
    assert ok.run_times == [2e-3] * 4 and ok.median == 2e-3 and ok.checked
    assert nan.error_kind == "runtime" and "nan" in nan.error_msg
    assert crash.error_kind == "crash"
    failed = runner.run(inputs[:1], [BuildResult(None, "no compiler")])[0]
    assert failed.error_kind == "build" and failed.error_msg == "no compiler"
    assert len(runner.ran) == 4 and runner.calls == 2


def test_noise_is_seeded():
    inputs = _inputs(ops.matmul(16, 16, 16), 2)
    builds = SimulationBuilder().build(inputs)
    a = SimulationRunner(_cost, noise=0.1, seed=3).run(inputs, builds)
    b = SimulationRunner(_cost, noise=0.1, seed=3).run(inputs, builds)
    assert [r.run_times for r in a] == [r.run_times for r in b]
    assert len(set(a[0].run_times)) > 1


@pytest.mark.parametrize("source", ["jsonl", "db"])
def test_replay_gives_recorded_times_and_refuses_unrecorded_programs(tmp_path, source):
    func = ops.matmul(32, 32, 32)
    path = tmp_path / "recorded.db"
    autotune.tune(func, TARGET, trials=12,
                  search=SearchConfig(batch_size=4, seed=0, remeasure_top=0), database=str(path),
                  builder=SimulationBuilder(), runner=SimulationRunner(_cost), log=False)
    if source == "jsonl":
        with Database(path) as db:
            db.export_jsonl(tmp_path / "recorded.jsonl")
        runner = SimulationRunner.replay(str(tmp_path / "recorded.jsonl"))
    else:
        runner = SimulationRunner.replay(str(path))
    assert len(runner.recorded) == 12
    # The same search replayed: every candidate is a recorded one, with its recorded time.
    replayed = MemoryDatabase()
    autotune.tune(func, TARGET, trials=12,
                  search=SearchConfig(batch_size=4, seed=0, remeasure_top=0), database=replayed,
                  builder=SimulationBuilder(), runner=runner, log=False)
    with Database(path) as db:
        recorded = {r.trace_hash: r.median for r in db.records(Workload(func).key)}
    again = {r.trace_hash: r.median for r in replayed.records(Workload(func).key)}
    assert again == recorded
    # A program the recording never saw is an error, or the fallback cost's time.
    other = [i for i in _inputs(func, 40)
             if i.func.structural_hash() not in runner.recorded][0]
    builds = SimulationBuilder().build([other])
    assert runner.run([other], builds)[0].error_kind == "runtime"
    fallback = SimulationRunner.replay(str(path), cost=_cost)
    assert fallback.run([other], builds)[0].median == pytest.approx(_cost(other))
