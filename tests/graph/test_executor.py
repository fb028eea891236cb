"""The model executor: run, reuse, errors, threads, benchmark, coverage report."""
from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from autotune.runtime.executor import BenchmarkResult
from autotune.graph.build import MissingRecordWarning, build_model
from records import MemoryDatabase
from search.measure import MeasureResult
from tensor_ir.errors import BuildError

from .helpers import TARGET, conv_bn_relu_model, random_inputs, sampled_lookup


@pytest.fixture(scope="module")
def model():
    return conv_bn_relu_model()


@pytest.fixture(scope="module")
def lib(model):
    return build_model(model, TARGET)


def test_run_matches_numpy_and_is_reusable(model, lib):
    for seed in (0, 1):
        inputs = random_inputs(model, seed)
        out = lib.run(inputs)
        np.testing.assert_allclose(out["output"], model.evaluate(inputs)["output"],
                                   rtol=1e-4, atol=1e-5)
    # Outputs are copies, not the executor's buffers.
    first = lib.run(random_inputs(model, 0))["output"]
    kept = first.copy()
    lib.run(random_inputs(model, 1))
    np.testing.assert_array_equal(first, kept)
    assert lib(**random_inputs(model, 0))["output"].shape == (1, 8, 12, 12)


def test_run_rejects_wrong_inputs(lib):
    with pytest.raises(BuildError, match="no value for input 'input'"):
        lib.run({})
    with pytest.raises(BuildError, match=r"has no input\(s\) \['x'\]"):
        lib.run({"x": np.zeros(3)})
    with pytest.raises(BuildError, match=r"must have shape \(1, 8, 12, 12\)"):
        lib.run({"input": np.zeros((1, 8, 12, 11), np.float32)})
    with pytest.raises(BuildError, match="must be float32"):
        lib.run({"input": np.zeros((1, 8, 12, 12), np.int64)})


def test_concurrent_runs_take_turns(model, lib):
    inputs = [random_inputs(model, seed) for seed in range(4)]
    expected = [model.evaluate(x)["output"] for x in inputs]
    errors = []

    def worker(k):
        try:
            for _ in range(5):
                np.testing.assert_allclose(lib.run(inputs[k])["output"], expected[k],
                                           rtol=1e-4, atol=1e-5)
        except Exception as err:  # reported below; a thread cannot fail the test itself
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_benchmark_and_profile(lib):
    result = lib.benchmark(repeat=3, min_repeat_ms=1.0)
    assert isinstance(result, BenchmarkResult)
    assert len(result.times_ms) == 3 and result.median_ms > 0 and result.number >= 1
    assert "median" in str(result)
    profile = lib.profile(repeat=2)
    assert [name for name, _ in profile] == [s.name for s in lib.steps]


def test_identical_functions_compile_once():
    from autotune.graph import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder("twice")
    y = b.input("input", (1, 4, 6, 6))
    for _ in range(3):
        w = b.constant(rng.normal(size=(4, 4, 3, 3)).astype(np.float32))
        y = b.op("conv2d", [y, w], strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1))
        y = b.op("relu", [y])
    b.output(y, "output")
    model = b.build()
    lib = build_model(model, TARGET)
    # The three conv + relu groups have the same structure: one kernel serves them all.
    assert len(lib.steps) == 3 and len({s.key for s in lib.steps}) == 1
    assert lib.steps[0].kernel is lib.steps[2].kernel
    assert [f.count for f in lib.report.functions] == [3]
    inputs = random_inputs(model)
    np.testing.assert_allclose(lib.run(inputs)["output"], model.evaluate(inputs)["output"],
                               rtol=1e-4, atol=1e-4)


def test_coverage_report_and_missing_record_warning():
    from autotune.frontends import get_model

    model = get_model("bert_base_layer", seq=4, hidden=16, heads=2, ffn=32)
    tuned = {"fused_matmul_add_gelu", "fused_matmul_add"}
    lookup = sampled_lookup(only=tuned)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lib = build_model(model, TARGET, lookup=lookup)
    missing = [w for w in caught if issubclass(w.category, MissingRecordWarning)]
    assert len(missing) == 1, [str(w.message) for w in caught]
    report = lib.report
    assert {f.name for f in report.tuned} == tuned
    assert 0.0 < report.coverage < 1.0
    assert all(f.name in str(missing[0].message) for f in report.fallbacks)
    assert "fused_softmax" in {f.name for f in report.fallbacks}
    assert "from tuning records" in str(report)
    inputs = random_inputs(model)
    np.testing.assert_allclose(lib.run(inputs)["output"], model.evaluate(inputs)["output"],
                               rtol=1e-4, atol=1e-4)


def test_build_from_database():
    from autotune.graph import extract_tasks
    from schedules.space import DesignSpace

    model = conv_bn_relu_model()
    db = MemoryDatabase()
    result = MeasureResult(run_times=[1e-3], median=1e-3)
    for task in extract_tasks(model):
        key = db.commit_workload(task.func)
        trace = DesignSpace(task.func, TARGET).sample(seed=1).final_trace
        db.commit_records([result.to_record(key, TARGET, trace)])
    lib = build_model(model, TARGET, database=db)
    assert lib.report.coverage == 1.0
    inputs = random_inputs(model)
    np.testing.assert_allclose(lib.run(inputs)["output"], model.evaluate(inputs)["output"],
                               rtol=1e-4, atol=1e-5)


def test_every_kernel_argument_is_64_byte_aligned(model, lib):
    # Weights included: numpy leaves large arrays 16-byte aligned, and tuned kernels' wide
    # vector loads from such a weight straddle cache lines (tuning measured aligned arrays).
    misaligned = {name: a.ctypes.data % 64 for name, a in lib._arrays.items()
                  if a.ctypes.data % 64}
    assert not misaligned
    assert lib.model.constants and set(lib.model.constants) <= set(lib._arrays)
    out = lib.run(random_inputs(model, 3))["output"]
    np.testing.assert_allclose(out, model.evaluate(random_inputs(model, 3))["output"],
                               rtol=1e-4, atol=1e-5)


def test_a_run_is_one_native_call_with_the_kernels_results(model, lib):
    """Every kernel of a CPU model is called from one native function (no Python between
    kernels); it computes what calling the kernels one by one does."""
    assert lib._run_all is not None
    inputs = random_inputs(model, 2)
    fused = lib.run(inputs)["output"]
    lib._set_inputs(random_inputs(model, 3))
    for name in lib.model.outputs:
        lib._arrays[name][...] = np.nan
    for call in lib._calls:  # the same kernels, one ctypes call each
        call()
    lib._set_inputs(inputs)
    for call in lib._calls:
        call()
    np.testing.assert_array_equal(lib._arrays["output"], fused)
    np.testing.assert_allclose(fused, model.evaluate(inputs)["output"], rtol=1e-4, atol=1e-5)
