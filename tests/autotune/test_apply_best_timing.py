"""apply_history_best on a database written by autotune.tune: the build replays the best record.

The timing half of the acceptance check ("the kernel's measured time is within 10% of the best
record's") is a benchmark, not a test (the machine is shared and noisy):
``python -m benchmarks.apply_best``.  Here: the kernel built under the context is the best
record's program, structurally, and computes the right result; a workload the tuning run never
saw builds with its default schedule, warning once.  Tuning uses the simulation builder and runner
(search.simulation) so that the records' ranking is deterministic.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

import autotune
from autotune.graph.build import default_schedule
from records import Database, Workload
from schedules.space import DesignSpace
from search import SearchConfig
from search.simulation import SimulationBuilder
from tensor_ir import ops
from tensor_ir.func import structural_equal
from tensor_ir.lower import lower
from tests.search.landscape import synthetic_runner


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """(database path, workload func, TuneResult) of a 16-trial tuning run of a matmul."""
    path = tmp_path_factory.mktemp("apply_best") / "tuning.db"
    func = ops.matmul(32, 32, 32)
    space = DesignSpace(func, "llvm")
    result = autotune.tune(func, "llvm", trials=16, database=str(path),
                           search=SearchConfig(batch_size=8, seed=0), builder=SimulationBuilder(),
                           runner=synthetic_runner(space), space=space, log=False)
    assert result.trials == 16 and result.best_schedule is not None
    return path, func, result


def _operands(func, seed=0):
    rng = np.random.default_rng(seed)
    n = func.params[0].shape[0].value
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    return a, b, np.zeros((n, n), "float32")


def test_build_replays_the_best_record_of_a_tuned_database(tuned):
    path, func, result = tuned
    key = Workload(func).key
    with Database(path) as db:
        best = db.best(key, "llvm")
        assert best.record_id == db.best_k(key, "llvm", 16)[0].record_id
        assert db.count(key) == 16
    with autotune.apply_history_best(str(path)) as ctx:
        kernel = autotune.build(func, target="llvm")
    # The built program is the best record's trace replayed on the workload, lowered ...
    replayed = best.trace().apply(func).func
    assert structural_equal(kernel.func, lower(replayed))
    assert structural_equal(kernel.func, lower(result.best_func))
    # ... which is not what the same build gives without the context.
    assert not structural_equal(kernel.func, autotune.build(func, target="llvm").func)
    served = ctx.coverage()["served_workloads"]
    assert [(s["key"], s["record_id"]) for s in served] == [(key, best.record_id)]
    assert served[0]["median_s"] == best.median
    # The fake runner never ran it: here it runs for real and must compute the matmul.
    a, b, c = _operands(func)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_untuned_workload_builds_its_default_schedule_and_warns_once(tuned, caplog):
    path, _, _ = tuned
    other = ops.matmul(24, 24, 24)  # same operator, another shape: another workload
    default = autotune.build(default_schedule(other, autotune.Target("llvm")), target="llvm")
    with caplog.at_level(logging.WARNING, logger="autotune"), \
            autotune.apply_history_best(str(path)) as ctx:
        kernels = [autotune.build(other, target="llvm") for _ in range(3)]
    warned = [r.getMessage() for r in caplog.records
              if r.name == "autotune" and "apply_history_best" in r.getMessage()]
    assert len(warned) == 1
    assert Workload(other).key[:12] in warned[0] and "default schedule" in warned[0]
    for kernel in kernels:
        assert structural_equal(kernel.func, default.func)
    cov = ctx.coverage()
    assert cov["served"] == 0 and len(cov["fallback"]) == 3
    a, b, c = _operands(other, seed=1)
    kernels[0](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
