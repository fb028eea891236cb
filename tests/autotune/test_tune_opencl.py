"""autotune.tune end to end on the opencl target (PoCL: OpenCL on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig, MeasureInput
from records import MemoryDatabase
from schedules.schedule import Schedule
from search import SearchConfig
from tensor_ir import te
from tensor_ir.target import Target

pytest.importorskip("pyopencl")

from ..opencl_support import RUN_TARGET, needs_opencl_run

# On the default OpenCL device, else on Oclgrind (see tests/opencl_support.py).
pytestmark = needs_opencl_run

# Short repeats and a short time-out: a PoCL kernel with a pathological work-group shape can
# take seconds, and such a candidate must cost one time-out record, not the test's budget.
FAST = MeasureConfig(repeat=2, min_repeat_ms=2.0, timeout=3.0, check="all")


def _matmul(n=32):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def _softmax(rows=8, cols=64):
    from tensor_ir.ops.norm import softmax

    return softmax((rows, cols))


def _check_tune(func, reference, trials=8):
    db = MemoryDatabase()
    best = autotune.tune(func, RUN_TARGET, trials=trials, database=db, measure=FAST,
                         search=SearchConfig(batch_size=4, remeasure_top=1, remeasure_rounds=1),
                         log=False)
    records = db.records(best.workload_key)
    # Every measured candidate is in the database, errors included.
    assert len(records) == best.trials == trials
    assert best.best_schedule is not None, [r.error_msg for r in records]
    kernel = autotune.build(best.best_schedule.func, RUN_TARGET)
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-1, 1, tuple(p.shape)).astype(p.dtype) if not p.written
              else np.zeros(tuple(p.shape), p.dtype) for p in kernel.params]
    kernel(*arrays)
    np.testing.assert_allclose(arrays[-1], reference(*arrays[:-1]), rtol=1e-4, atol=1e-4)
    return records


def test_tune_matmul_opencl():
    _check_tune(_matmul(), lambda a, b: a @ b)


def test_tune_softmax_opencl():
    def ref(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    _check_tune(_softmax(), ref)


def test_error_candidate_costs_one_record():
    func = _matmul(128)
    sch = Schedule(func)
    block = sch.get_block("C")
    i, j, _ = sch.get_loops(block)
    # 128 x 128 threads per block: over the device's work-group limit (PoCL: 4096).
    sch.bind(i, "threadIdx.y")
    sch.bind(j, "threadIdx.x")
    bad = MeasureInput(sch.func, Target(RUN_TARGET), "wk-bad", reference=func)
    with LocalBuilder(max_workers=1) as builder, LocalRunner(FAST) as runner:
        builds = builder.build([bad])
        results = runner.run([bad], builds)
    assert len(results) == 1 and results[0].error_kind == "build"
    assert "thread" in results[0].error_msg.lower()


def test_gpu_tune_seeds_no_cpu_default():
    import cost_models
    from autotune.tuning.tune import tuning_loop
    from search import SearchConfig, create

    with LocalBuilder(max_workers=1) as builder, LocalRunner(FAST) as runner:
        loop = tuning_loop(_matmul(), Target(RUN_TARGET), MemoryDatabase(), builder, runner,
                           SearchConfig(), create("random"), cost_models.create("random"),
                           measure_config=FAST)
    # The CPU rule of thumb binds no threads: nothing is seeded on a GPU target.
    assert loop.seed_traces == ()
