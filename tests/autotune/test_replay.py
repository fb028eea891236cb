"""One construction of the default schedule and one way to replay a record: the program a
build falls back to is the program tuning measures first, and records are replayed through
schedules.postproc.replay wherever they are used."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.runtime.build import build as build_scheduled
from autotune.graph.build import default_schedule
from records import MemoryDatabase
from schedules.default_schedule import default_candidate
from schedules.errors import ScheduleError
from schedules.postproc import replay
from search import SearchConfig
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir import ops
from tensor_ir.func import structural_equal
from tensor_ir.target import Target

TARGET = Target("llvm")


def test_tuning_measures_the_build_fallback_first():
    func = ops.matmul(32, 32, 32)
    runner = SimulationRunner(lambda inp: 1e-3)
    autotune.tune(func, TARGET, trials=4, search=SearchConfig(batch_size=4, remeasure_top=0),
                  builder=SimulationBuilder(), runner=runner, log=False)
    assert structural_equal(runner.ran[0], default_schedule(func, TARGET))


def test_default_candidate_replays_to_itself():
    func = ops.softmax((8, 32), axis=-1)
    candidate = default_candidate(func, TARGET)
    assert candidate is not None
    assert structural_equal(replay(candidate.final_trace, func, TARGET).func, candidate.func)


def test_replay_refuses_a_program_the_verifier_rejects():
    from schedules.schedule import Schedule

    func = ops.relu((4, 256))
    sch = Schedule(func)
    # A vectorised loop of 256 lanes: beyond the CPU verifier's limit.
    sch.vectorize(sch.get_loops(sch.get_block("T_relu"))[-1])
    with pytest.raises(ScheduleError, match="post-processors"):
        replay(sch.trace, func, TARGET)


def test_build_under_the_context_replays_and_the_compiler_does_not_look_up():
    func = ops.matmul(16, 16, 16)
    db = MemoryDatabase()
    result = autotune.tune(func, TARGET, trials=4,
                           search=SearchConfig(batch_size=4, remeasure_top=0), database=db,
                           builder=SimulationBuilder(),
                           runner=SimulationRunner(lambda inp: inp.func.structural_hash()
                                                   .__hash__() % 97 * 1e-6 + 1e-6),
                           log=False)
    best = replay(db.best(result.workload_key, TARGET).trace(), func, TARGET).func
    a, b = np.random.rand(16, 16).astype("float32"), np.random.rand(16, 16).astype("float32")
    with autotune.apply_history_best(db) as context:
        kernel = autotune.build(func, TARGET)
        plain = build_scheduled(func, TARGET)
    assert context.coverage()["served"] == 1          # only autotune.build looked it up
    assert structural_equal(kernel.func, build_scheduled(best, TARGET).func)
    assert not structural_equal(plain.func, kernel.func)
    for k in (kernel, plain):
        c = np.empty((16, 16), "float32")
        k(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)
