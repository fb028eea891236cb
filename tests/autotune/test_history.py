"""apply_history_best: builds use the best stored schedule; missing records warn once or raise."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import autotune
from benchmarks.matmul_schedule import schedule_matmul
from records import Database, TuningRecord, Workload
from tensor_ir import ops
from tensor_ir.func import structural_equal
from tensor_ir.lower import lower


def _db_with_matmul_record(n=64, median=1e-3):
    func = ops.matmul(n, n, n)
    sch = schedule_matmul(func)
    db = Database()
    key = db.commit_workload(Workload(func))
    target = str(autotune.Target("llvm"))
    db.commit_records([TuningRecord(key, target, sch.trace, run_times=[median], median=median)])
    return db, func, sch


def _run(kernel, n):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), "float32"), rng.standard_normal((n, n), "float32")
    out = np.empty((n, n), "float32")
    kernel(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_build_uses_the_best_record():
    db, func, sch = _db_with_matmul_record()
    with autotune.apply_history_best(db) as ctx:
        kernel = autotune.build(func, target="llvm")
    assert structural_equal(kernel.func, lower(sch.func))
    _run(kernel, 64)
    cov = ctx.coverage()
    assert cov["served"] == 1 and cov["fallback"] == []
    # Outside the context the plain function is built again.
    assert not structural_equal(autotune.build(func).func, lower(sch.func))


def test_best_of_several_records_is_chosen():
    db, func, sch = _db_with_matmul_record(median=2e-3)
    key = Workload(func).key
    slower = TuningRecord(key, str(autotune.Target("llvm")), schedule_matmul(func, rows=4).trace,
                          run_times=[5e-3], median=5e-3)
    db.commit_records([slower])
    with autotune.apply_history_best(db):
        kernel = autotune.build(func)
    assert structural_equal(kernel.func, lower(sch.func))


def test_missing_record_falls_back_and_warns_once(caplog):
    db, _, _ = _db_with_matmul_record()
    other = ops.softmax((8, 24))
    with caplog.at_level(logging.WARNING, logger="autotune"):
        with autotune.apply_history_best(db) as ctx:
            k1 = autotune.build(other)
            k2 = autotune.build(other)
    warnings = [r for r in caplog.records if "apply_history_best" in r.getMessage()]
    assert len(warnings) == 1
    assert "softmax" in warnings[0].getMessage()
    assert ctx.coverage()["served"] == 0 and len(ctx.coverage()["fallback"]) == 2
    assert structural_equal(k1.func, k2.func)


def test_missing_record_builds_the_default_schedule_not_the_plain_nest():
    """The fallback is what the warning says: the default schedule (the program the tuner
    measures first), as a model's functions get it, not the unscheduled loop nest."""
    from autotune.graph.build import default_schedule

    func = ops.matmul(128, 128, 128)
    with autotune.apply_history_best(Database()):
        kernel = autotune.build(func, target="llvm")
    expected = default_schedule(func, autotune.Target("llvm"))
    assert expected is not None
    assert structural_equal(kernel.func, lower(expected))
    assert not structural_equal(kernel.func, lower(func))
    _run(kernel, 128)


def test_strict_mode_raises_naming_the_workload():
    db, _, _ = _db_with_matmul_record()
    with pytest.raises(autotune.MissingRecordError, match="softmax"):
        with autotune.apply_history_best(db, strict=True):
            autotune.build(ops.softmax((8, 24)))


def test_records_of_another_target_are_not_used():
    db, func, sch = _db_with_matmul_record()
    with autotune.apply_history_best(db) as ctx:
        kernel = autotune.build(func, target="llvm -num-cores 1")
    assert ctx.coverage()["served"] == 0
    assert not structural_equal(kernel.func, lower(sch.func))
    with autotune.apply_history_best(db, compatible_targets=["llvm"]) as ctx:
        kernel = autotune.build(func, target="llvm -num-cores 1")
    assert ctx.coverage()["served"] == 1


def test_database_path_is_opened(tmp_path):
    path = tmp_path / "t.db"
    db, func, sch = _db_with_matmul_record()
    db.close()
    disk = Database(str(path))
    key = disk.commit_workload(Workload(func))
    disk.commit_records([TuningRecord(key, str(autotune.Target("llvm")), sch.trace,
                                      run_times=[1e-3], median=1e-3)])
    disk.close()
    with autotune.apply_history_best(str(path)):
        kernel = autotune.build(func)
    assert structural_equal(kernel.func, lower(sch.func))


def test_model_build_under_apply_history_best_reports_coverage():
    from autotune.graph.tasks import extract_tasks
    from schedules.space import DesignSpace
    from tests.graph.helpers import conv_bn_relu_model, random_inputs

    model = conv_bn_relu_model()
    tasks = extract_tasks(model)
    assert len(tasks) >= 2
    heavy = max(tasks, key=lambda t: t.flops)
    candidate = DesignSpace(heavy.func, "llvm").sample(seed=3)
    db = Database()
    key = db.commit_workload(Workload(heavy.func))
    db.commit_records([TuningRecord(key, str(autotune.Target("llvm")), candidate.final_trace,
                                    run_times=[1e-4], median=1e-4)])
    inputs = random_inputs(model, 0)
    expected = model.evaluate(inputs)["output"]

    with autotune.apply_history_best(db) as ctx:
        lib = autotune.build(model, target="llvm")
    np.testing.assert_allclose(lib.run(inputs)["output"], expected, rtol=1e-4, atol=1e-5)
    assert [f.key for f in lib.report.tuned] == [heavy.key]
    assert 0 < lib.report.coverage < 1 or len(tasks) == 1
    assert ctx.coverage()["served"] == 1

    with pytest.raises(autotune.MissingRecordError) as err:
        with autotune.apply_history_best(db, strict=True):
            autotune.build(model, target="llvm")
    others = [t for t in tasks if t.key != heavy.key]
    assert all(t.key[:12] in str(err.value) for t in others)


def test_fully_covered_model_builds_in_strict_mode_without_fallbacks():
    from autotune.graph.tasks import extract_tasks
    from schedules.space import DesignSpace
    from tests.graph.helpers import conv_bn_relu_model

    model = conv_bn_relu_model()
    db = Database()
    target = str(autotune.Target("llvm"))
    for task in extract_tasks(model):
        key = db.commit_workload(Workload(task.func))
        trace = DesignSpace(task.func, "llvm").sample(seed=1).final_trace
        db.commit_records([TuningRecord(key, target, trace, run_times=[1e-4], median=1e-4)])
    with autotune.apply_history_best(db, strict=True) as ctx:
        lib = autotune.build(model, target="llvm")
    assert lib.report.coverage == 1.0
    cov = ctx.coverage()
    assert cov["fallback"] == [] and cov["served"] == len(extract_tasks(model))
