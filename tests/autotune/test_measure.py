"""Builders and runners: isolation from bad candidates, the timing protocol, the output check."""
from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np
import pytest

from autotune.measure import (
    BuildResult,
    LocalBuilder,
    LocalRunner,
    MeasureConfig,
    MeasureInput,
    MeasureResult,
    measure,
)
from autotune.measure.protocol import compare_outputs, timed_repeats
from autotune.measure.runner import param_spec, workload_inputs
from search import SearchConfig
from tensor_ir import te
from tensor_ir.expr import FloatImm, Var, const
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import BufferStore, For, SeqStmt
from tensor_ir.target import Target
from tensor_ir.visitor import transform

N = 64
KEY = "matmul64"


def matmul(n: int = N, transposed: bool = False) -> PrimFunc:
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis(n, name="k")
    if transposed:  # a plausible bug: B indexed the wrong way round
        body = lambda i, j: te.sum(A[i, k] * B[j, k], axis=k)
    else:
        body = lambda i, j: te.sum(A[i, k] * B[k, j], axis=k)
    return te.create_prim_func([A, B, te.compute((n, n), body, name="C")])


REFERENCE = matmul()


def out_of_bounds_writer() -> PrimFunc:
    """Stores C 2**30 rows past its end: terabytes away, in unmapped memory."""
    low = lower(REFERENCE)

    def shift(node):
        if isinstance(node, BufferStore):
            return BufferStore(node.buffer, node.value,
                               (node.indices[0] + const(2 ** 30, "int64"),) + node.indices[1:])
        return None

    return low.with_body(transform(low.body, shift))


def repeated(times: int) -> PrimFunc:
    """The whole matmul ``times`` over: the same result, ``times`` slower."""
    low = lower(REFERENCE)
    v = Var("again", "int64")
    return low.with_body(For(v, const(0, "int64"), const(times, "int64"), "serial", low.body))


def input_writer() -> PrimFunc:
    """A correct matmul that also scribbles into its input A."""
    low = lower(REFERENCE)
    A = low.params[0]
    zero = (const(0, "int64"), const(0, "int64"))
    scribble = BufferStore(A, A[zero] + FloatImm(1.0, "float32"), zero)
    return low.with_body(SeqStmt((low.body, scribble)))


def thread_bound() -> PrimFunc:
    """A GPU-style loop the CPU backend refuses: a build error."""
    low = lower(REFERENCE)
    outer = low.body
    assert isinstance(outer, For)
    return low.with_body(For(outer.loop_var, outer.min, outer.extent, "thread_binding",
                             outer.body, "threadIdx.x"))


def inputs_for(funcs, key=KEY, target="llvm", reference=REFERENCE):
    return [MeasureInput(f, target, key, reference=reference) for f in funcs]


FAST = MeasureConfig(repeat=3, min_repeat_ms=5, timeout=2.0)


@pytest.fixture(scope="module")
def builder():
    with LocalBuilder(max_workers=2, timeout=60) as b:
        yield b


def test_bad_candidates_in_one_batch_become_distinct_errors(builder):
    """A wrong result, a segfault and an endless loop among good candidates: the good ones
    are timed, the bad ones are readable errors, and the runner goes on working."""
    funcs = [matmul(transposed=True), REFERENCE, out_of_bounds_writer(), repeated(1),
             repeated(2 ** 40), REFERENCE]
    inputs = inputs_for(funcs)
    builds = builder.build(inputs)
    assert all(b.ok for b in builds), [b.error for b in builds]
    with LocalRunner(FAST) as runner:
        results = runner.run(inputs, builds)
        wrong, good1, segv, good2, hang, good3 = results

        assert wrong.error_kind == "wrong_result"
        assert wrong.error_msg.startswith("wrong result: max abs diff ")
        assert "output C" in wrong.error_msg and math.isinf(wrong.median)
        assert segv.error_kind == "crash" and "SIGSEGV" in segv.error_msg
        assert hang.error_kind == "timeout" and "2 s" in hang.error_msg
        assert len({wrong.error_msg, segv.error_msg, hang.error_msg}) == 3
        for good in (good1, good2, good3):
            assert good.error_kind is None, good.error_msg
            assert len(good.run_times) == 3 and good.median > 0
            assert good.kernel_seconds > 0 and good.run_seconds >= good.kernel_seconds
        # The first good one is the workload's first success: it was checked.
        assert good1.checked
        # Restarts: the crash and the wrong result are each confirmed once on a fresh
        # worker (2 + 1), and the endless loop's worker is killed (1).
        assert runner.worker_restarts == 4
        assert runner.best(KEY) == min(g.median for g in (good1, good2, good3))

        # Still usable: a fresh batch runs normally on the restarted worker.
        again = runner.run(inputs[1:2], builds[1:2])[0]
        assert again.error_kind is None and len(again.run_times) == 3


def test_wrong_result_is_never_the_best_and_check_all(builder):
    ref = builder.build(inputs_for([REFERENCE]))
    wrong_in = inputs_for([matmul(transposed=True)])
    wrong = builder.build(wrong_in)
    with LocalRunner(FAST) as runner:
        first = runner.run(inputs_for([REFERENCE]), ref)[0]
        assert first.checked and first.error_kind is None
        # Under check="best" a candidate that is not a new best is not compared.
        runner.seed_best(KEY, first.median / 1000)  # something much faster is known
        unchecked = runner.run(wrong_in, wrong)[0]
        assert unchecked.error_kind is None and not unchecked.checked
    with LocalRunner(MeasureConfig(repeat=2, min_repeat_ms=5, timeout=5, check="all")) as r:
        r.run(inputs_for([REFERENCE]), ref)
        caught = r.run(wrong_in, wrong)[0]
        assert caught.error_kind == "wrong_result"
        assert r.best(KEY) is not None and r.best(KEY) < math.inf


def test_check_none_skips_comparison(builder):
    wrong_in = inputs_for([matmul(transposed=True)])
    with LocalRunner(MeasureConfig(repeat=1, min_repeat_ms=1, check="none")) as runner:
        result = runner.run(wrong_in, builder.build(wrong_in))[0]
    assert result.error_kind is None and not result.checked


def test_writing_into_an_input_is_an_error_and_inputs_are_restored(builder):
    inputs = inputs_for([input_writer(), REFERENCE])
    builds = builder.build(inputs)
    with LocalRunner(FAST) as runner:
        scribbler, good = runner.run(inputs, builds)
    assert scribbler.error_kind == "wrong_result"
    assert "wrote into its input A" in scribbler.error_msg
    assert good.error_kind is None and good.checked  # compared on restored inputs


def test_slow_candidate_stops_after_one_repeat(builder):
    inputs = inputs_for([REFERENCE, repeated(40)])
    builds = builder.build(inputs)
    config = MeasureConfig(repeat=5, min_repeat_ms=2, timeout=20, slow_factor=10)
    with LocalRunner(config) as runner:
        fast, slow = runner.run(inputs, builds)
    assert fast.error_kind is None and len(fast.run_times) == 5 and not fast.stopped_early
    assert slow.error_kind is None and slow.stopped_early and len(slow.run_times) == 1
    assert slow.median > 10 * fast.median
    assert runner.best(KEY) == fast.median


def test_repeats_last_at_least_min_repeat_ms(builder):
    inputs = inputs_for([REFERENCE])
    config = MeasureConfig(number=1, repeat=3, min_repeat_ms=30, flush_cache=True)
    with LocalRunner(config) as runner:
        result = runner.run(inputs, builder.build(inputs))[0]
    assert result.error_kind is None
    assert result.number > 1
    # Each repeat is number calls; the median repeat lasted (about) min_repeat_ms or more.
    assert result.number * result.median >= 0.030 * 0.8
    assert result.kernel_seconds >= 3 * 0.030


def test_build_errors_and_build_timeouts(builder):
    inputs = inputs_for([thread_bound(), REFERENCE])
    builds = builder.build(inputs)
    assert not builds[0].ok and "thread" in builds[0].error and builds[1].ok
    with LocalRunner(FAST) as runner:
        results = runner.run(inputs, builds)
    assert results[0].error_kind == "build" and results[0].error_msg == builds[0].error
    assert results[1].error_kind is None

    with LocalBuilder(max_workers=1, timeout=0.001) as hasty:
        timed_out = hasty.build(inputs_for([REFERENCE]))[0]
    assert not timed_out.ok and "timed out after 0.001 s" in timed_out.error


def test_builder_keeps_order_and_survives_many_batches(builder):
    funcs = [repeated(t) for t in (1, 2, 3, 4, 5)]
    for _ in range(2):
        builds = builder.build(inputs_for(funcs))
        assert all(b.ok and os.path.exists(b.artifact_path) for b in builds)
        assert len({b.artifact_path for b in builds}) == len(funcs)


def test_cross_target_builds_but_is_not_run(builder):
    target = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    if target.is_host:
        pytest.skip("the host is AArch64")
    inputs = inputs_for([REFERENCE], target=target)
    builds = builder.build(inputs)
    assert builds[0].ok, builds[0].error
    with open(builds[0].artifact_path, "rb") as f:
        header = f.read(20)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # AArch64
    with LocalRunner(FAST) as runner:
        result = runner.run(inputs, builds)[0]
    assert result.error_kind == "runtime" and "not run locally" in result.error_msg


def test_without_reference_nothing_is_checked(builder):
    inputs = inputs_for([REFERENCE], key="noref", reference=None)
    with LocalRunner(FAST) as runner:
        result = runner.run(inputs, builder.build(inputs))[0]
    assert result.error_kind is None and not result.checked


def test_broken_reference_is_reported_per_workload(builder):
    bad_ref = out_of_bounds_writer()
    inputs = inputs_for([REFERENCE, REFERENCE], key="badref", reference=bad_ref)
    builds = builder.build(inputs)
    with LocalRunner(FAST) as runner:
        results = runner.run(inputs, builds)
        assert all(r.error_kind == "runtime" for r in results)
        assert "workload badref" in results[0].error_msg and "SIGSEGV" in results[0].error_msg
        # Other workloads are unaffected.
        ok = runner.run(inputs_for([REFERENCE]), builds[:1])[0]
        assert ok.error_kind is None


def test_measure_helper_removes_artifacts(builder):
    inputs = inputs_for([REFERENCE])
    seen = []

    class Spy(LocalRunner):
        def run(self, inputs, builds):
            seen.extend(b.artifact_path for b in builds)
            return super().run(inputs, builds)

    with Spy(FAST) as runner:
        results = measure(builder, runner, inputs)
    assert results[0].error_kind is None
    assert seen and not os.path.exists(seen[0])


def test_runner_rejects_mismatched_batches():
    with LocalRunner(FAST) as runner, pytest.raises(ValueError, match="2 inputs but 1 build"):
        runner.run(inputs_for([REFERENCE, REFERENCE]), [BuildResult(None, "x", 0.0)])


# -- pieces ---------------------------------------------------------------------------------------

def test_workload_inputs_are_fixed_per_seed_and_aligned():
    spec = param_spec(REFERENCE)
    assert [p["written"] for p in spec] == [False, False, True]
    a = workload_inputs(spec, 7)
    b = workload_inputs(spec, 7)
    c = workload_inputs(spec, 8)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    assert a[0].min() < 0 < a[0].max()  # negative values too
    assert all(x.ctypes.data % 64 == 0 for x in a)


def test_compare_outputs_messages():
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert compare_outputs([ref.copy()], [ref], ["C"], None, None) is None
    off = ref.copy()
    off[1, 2] += 5
    msg = compare_outputs([off], [ref], ["C"], None, None)
    assert msg.startswith("wrong result: max abs diff 5 in output C at C[1, 2]")
    missing = ref.copy()
    missing[2, :] = np.nan
    assert "4 of 12 elements not written" in compare_outputs([missing], [ref], ["C"], None, None)
    tiny = ref + 1e-6
    assert compare_outputs([tiny], [ref], ["C"], None, None) is None
    assert compare_outputs([tiny], [ref], ["C"], 0.0, 0.0) is not None
    ints = np.arange(6, dtype=np.int32)
    bad = ints.copy()
    bad[4] = 0
    assert "differs from the reference in 1 of 6" in compare_outputs([bad], [ints], ["D"],
                                                                     None, None)


def test_measure_config_validates():
    for bad in ({"number": 0}, {"repeat": 0}, {"timeout": 0}, {"slow_factor": 1.0},
                {"check": "sometimes"}, {"min_repeat_ms": -1}, {"rtol": -1}):
        with pytest.raises(ValueError):
            MeasureConfig(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        FAST.repeat = 9


def test_measure_result_json_round_trip():
    ok = MeasureResult.success([0.002, 0.001, 0.003], number=7, checked=True)
    assert ok.median == 0.002
    assert MeasureResult.from_json(ok.to_json()) == ok
    err = MeasureResult.error("crash", "kernel crashed")
    data = err.to_json()
    assert data["median"] is None and MeasureResult.from_json(data).median == math.inf
    with pytest.raises(ValueError):
        MeasureResult.error("exploded", "?")
    with pytest.raises(ValueError):
        BuildResult("x.o", "also an error", 0.0)


def test_measure_input_takes_target_strings():
    inp = MeasureInput(REFERENCE, "llvm -num-cores 1", KEY)
    assert isinstance(inp.target, Target) and inp.target.num_cores == 1
    with pytest.raises(TypeError):
        MeasureInput("not a func", "llvm", KEY)
    with pytest.raises(ValueError):
        MeasureInput(REFERENCE, "llvm -bogus=1", KEY)


# -- the worker process itself ------------------------------------------------------------------

def misbehaving_handler(request, state):
    """Handler run inside a WorkerProcess by the test below."""
    import signal
    import time

    state["calls"] = state.get("calls", 0) + 1
    if request == "abort":
        os.abort()
    if request == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if request == "sleep":
        time.sleep(60)
    if request == "raise":
        raise KeyError("no such thing")
    return {"echo": request, "calls": state["calls"]}


def test_worker_process_survives_abort_crash_hang_and_exceptions():
    from autotune.measure.worker import WorkerProcess

    worker = WorkerProcess(f"{__name__}:misbehaving_handler")
    try:
        assert worker.call("hello", 30) == ("ok", {"echo": "hello", "calls": 1})
        assert worker.call("again", 30)[1]["calls"] == 2  # state persists between requests
        status, reply = worker.call("raise", 30)
        assert status == "ok" and reply["exception"].startswith("KeyError")
        assert worker.restarts == 0
        status, reply = worker.call("abort", 30)
        assert status == "crash" and "SIGABRT" in reply
        status, reply = worker.call("segfault", 30)
        assert status == "crash" and "SIGSEGV" in reply
        status, reply = worker.call("sleep", 0.5)
        assert status == "timeout" and not worker.alive
        assert worker.call("back", 30) == ("ok", {"echo": "back", "calls": 1})  # fresh state
        assert worker.restarts == 3
    finally:
        worker.close()
    assert not worker.alive


def test_long_reductions_widen_the_check_tolerance():
    # A float32 norm over a million elements: the serial reference is itself off by ~2e-4,
    # so the default 1e-4 would refuse the accurate (tree-summed) programs.
    from autotune.measure.runner import longest_reduction, reduction_rtol
    from tensor_ir import ops, te

    assert longest_reduction(ops.matmul(64, 32, 48)) == 48
    assert reduction_rtol(ops.matmul(64, 32, 1024)) == 1e-4  # matmuls keep the default
    a = te.placeholder((1024, 1024), "float32", name="A")
    i, j = te.reduce_axis(1024, "i"), te.reduce_axis(1024, "j")
    c = te.compute((1,), lambda b: te.sum(a[i, j] * a[i, j], axis=[i, j]), name="C")
    norm = te.create_prim_func([a, c], name="norm")
    assert longest_reduction(norm) == 1 << 20
    assert 9e-4 < reduction_rtol(norm) < 1.1e-3
    assert reduction_rtol(ops.relu((4, 4))) == 1e-4


def test_norm_tuned_with_vectorised_partial_sums_passes_the_check():
    import autotune
    from benchmarks.op_table import make

    w = make("NRM")
    r = autotune.tune(w.func, "llvm", trials=8,
                      search=SearchConfig(batch_size=8, seed=0, remeasure_top=0), log=False,
                      space=None)
    assert r.best_schedule is not None
    assert not any(t.error_kind == "wrong_result" for t in r.history), \
        [t.error_kind for t in r.history]


# -- model weights: timed without the candidate's packing of them --------------------------------

def _packing_candidate(func: PrimFunc) -> PrimFunc:
    """A design-space sample of ``func`` that packs its second operand (B) into panels."""
    from schedules.space import DesignSpace

    space = DesignSpace(func, Target("llvm"))
    for sketch in range(len(space.sketches)):
        for seed in range(8):
            cand = space.sample(seed=seed, sketch=sketch)
            if any(i.kind == "pack_layout" for i in cand.final_trace):
                return cand.func
    raise AssertionError("no sketch of the matmul packs an operand")


def test_weight_packing_is_split_off_the_build_and_run_once_before_timing(builder):
    from autotune.runtime.prepack import split_packing

    cand = _packing_candidate(REFERENCE)
    _, packs = split_packing(cand, {1})
    assert [p.index for p in packs] == [1]
    inp = MeasureInput(cand, "llvm", KEY, reference=REFERENCE, weight_params=(1,))
    plain = MeasureInput(cand, "llvm", KEY, reference=REFERENCE)
    config = dataclasses.replace(FAST, check="all")
    with LocalRunner(config) as runner:
        split_build, plain_build = builder.build([inp, plain])
        assert split_build.ok and plain_build.ok
        # With the weights named: the artifact takes B packed, the runner packs it once and
        # the outputs still match the reference.
        got = runner.run([inp], [split_build])[0]
        assert got.error_kind is None, got.error_msg
        assert got.checked and got.median > 0
        # Without: the whole candidate, packing included, on the plain arrays.
        whole = runner.run([plain], [plain_build])[0]
        assert whole.error_kind is None and whole.checked
        # The runner packs only what the builder split off: an artifact built whole is
        # refused under weight_params (its B is the unpacked matrix), and the split one
        # without them.
        mixed = runner.run([inp, plain], [plain_build, split_build])
        for result in mixed:
            assert result.error_kind == "runtime"
            assert "differ from the workload's" in result.error_msg


def test_weight_params_of_a_function_without_packing_change_nothing(builder):
    inp = MeasureInput(REFERENCE, "llvm", KEY, reference=REFERENCE, weight_params=(0, 1))
    (build,) = builder.build([inp])
    with LocalRunner(FAST) as runner:
        result = runner.run([inp], [build])[0]
    assert result.error_kind is None and result.checked


def test_measure_input_weight_params_are_parameter_indices():
    assert MeasureInput(REFERENCE, "llvm", KEY, weight_params=[1, 0, 1]).weight_params == (0, 1)
    for bad in ([3], [-1], [True], ["B"]):
        with pytest.raises(ValueError, match="weight_params"):
            MeasureInput(REFERENCE, "llvm", KEY, weight_params=bad)


# -- model weights read cold: the timed calls rotate over copies of them -------------------------

def test_weight_sets_copy_only_the_cold_arrays_and_outgrow_the_cache():
    from autotune.measure.cpu import weight_sets

    arrays = [np.arange(1024, dtype="float32").reshape(32, 32) + k for k in range(3)]
    cache = 64 * 1024  # bytes: the cold arrays of all sets together pass twice this
    sets = weight_sets(arrays, [1], cache)
    assert sets[0] == arrays  # the workload's own arrays first: the check reads them
    assert len(sets) * arrays[1].nbytes >= 2 * cache
    assert len({s[1].ctypes.data for s in sets}) == len(sets)  # every copy its own memory
    for s in sets:
        assert s[0] is arrays[0] and s[2] is arrays[2]  # activations and outputs shared
        np.testing.assert_array_equal(s[1], arrays[1])
    assert all(s[1].ctypes.data % 64 == 0 for s in sets[1:])  # copies aligned like workloads'
    # Nothing cold, one set; a huge cache, the number of copies is bounded.
    assert weight_sets(arrays, [], cache) == [arrays]
    assert len(weight_sets(arrays, [1], 2**40)) == 4096
    # Rotated over what a model streams between two calls: just enough copies for that.
    streamed = 10 * arrays[1].nbytes + 1
    assert len(weight_sets(arrays, [1], cache, streamed)) == 11
    assert len(weight_sets(arrays, [1], 2**40, 3 * arrays[1].nbytes)) == 3


@pytest.mark.parametrize("fresh", [False, True])
def test_cold_weights_are_timed_and_checked_like_warm_ones(builder, fresh):
    """Weights warm or read cold, and (``fresh``) activations rewritten before each call or
    re-read: every protocol times the candidate and checks its outputs."""
    cand = _packing_candidate(REFERENCE)
    config = dataclasses.replace(FAST, check="all")
    inputs = [MeasureInput(cand, "llvm", KEY, reference=REFERENCE, weight_params=(1,),
                           cold_weights=cold, fresh_inputs=fresh) for cold in (False, True)]
    # A function without weights: all its inputs are activations.
    inputs.append(MeasureInput(REFERENCE, "llvm", KEY, reference=REFERENCE,
                               fresh_inputs=fresh))
    with LocalRunner(config) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for result in results:
        assert result.error_kind is None, result.error_msg
        assert result.checked and result.median > 0


def test_measure_input_cold_weights_is_a_bool():
    with pytest.raises(TypeError, match="cold_weights"):
        MeasureInput(REFERENCE, "llvm", KEY, weight_params=(1,), cold_weights="yes")
    for bad in (-1, 1.5, True, "1MB"):
        with pytest.raises(ValueError, match="cold_bytes"):
            MeasureInput(REFERENCE, "llvm", KEY, weight_params=(1,), cold_weights=True,
                         cold_bytes=bad)


def test_the_runner_rotates_cold_weights_over_the_bytes_asked(builder):
    # The request carries cold_bytes to the worker, which times and checks the candidate on
    # that many bytes of weight copies.
    cand = _packing_candidate(REFERENCE)
    config = dataclasses.replace(FAST, check="all")
    streamed = 4 * 2**20
    inp = MeasureInput(cand, "llvm", KEY, reference=REFERENCE, weight_params=(1,),
                       cold_weights=True, fresh_inputs=True, cold_bytes=streamed)
    with LocalRunner(config) as runner:
        sent = []
        call = runner._worker.call
        runner._worker.call = lambda request, limit: (sent.append(request)
                                                      or call(request, limit))
        result = runner.run([inp], builder.build([inp]))[0]
    assert result.error_kind is None, result.error_msg
    assert result.checked and result.median > 0
    measures = [r for r in sent if r.get("op") == "measure"]
    assert measures and all(r["cold_params"] == [1] and r["cold_bytes"] == streamed
                            for r in measures)


# -- activations rewritten before each call, as a model's producer leaves them -------------------

def test_fresh_loop_copies_before_each_call_and_times_the_calls_alone():
    import ctypes

    from autotune.measure.cpu import _Harness
    from tensor_ir.codegen import LLVMTarget, compile_module

    # A kernel that counts its calls in its first argument and copies the first element of
    # its second into its third, so that each call's view of the rewritten input is seen;
    # it returns the status of a failed index check, 2, from its fourth call on.
    text = """
define i32 @probe(ptr %count, ptr %src, ptr %dst) {
  %c = load i64, ptr %count
  %c1 = add i64 %c, 1
  store i64 %c1, ptr %count
  %v = load float, ptr %src
  store float %v, ptr %dst
  store float -1.0, ptr %src
  %late = icmp sge i64 %c1, 4
  %status = select i1 %late, i32 2, i32 0
  ret i32 %status
}
"""
    jit = compile_module(text, LLVMTarget()).jit()
    count = np.zeros(1, dtype=np.int64)
    big = np.zeros(16 * 2**20 // 4, dtype=np.float32)  # 16 MiB rewritten before each call
    pristine = np.full_like(big, 3.0)
    out = np.zeros(1, dtype=np.float32)
    argv = (ctypes.c_void_p * 3)(count.ctypes.data, big.ctypes.data, out.ctypes.data)
    copies = (ctypes.c_uint64 * 3)(big.ctypes.data, pristine.ctypes.data, big.nbytes)
    harness = _Harness()  # owns the compiled loop: kept alive while it runs
    loop = harness.fresh_loop(3)
    status = ctypes.c_int32(-1)
    start = time.perf_counter()
    seconds = loop(jit.function_address("probe"), argv, 1, 3, copies, 1, ctypes.byref(status))
    wall = time.perf_counter() - start
    assert count[0] == 3 and status.value == 0
    # The kernel spoils its input each call; the copy before the next call restored it.
    assert out[0] == 3.0 and big[0] == -1.0 and big[1] == 3.0
    # Three 16 MiB copies take milliseconds; the three calls themselves, microseconds.
    assert 0 < seconds < wall / 10
    # Without copies it is the plain timed loop; the first failed status is reported (calls
    # 4 and 5 fail).
    assert loop(jit.function_address("probe"), argv, 1, 2, copies, 0, ctypes.byref(status)) > 0
    assert count[0] == 5 and status.value == 2
    assert harness.loop(3)(jit.function_address("probe"), argv, 1, 1) == 2


def test_measure_input_fresh_inputs_is_a_bool():
    with pytest.raises(TypeError, match="fresh_inputs"):
        MeasureInput(REFERENCE, "llvm", KEY, fresh_inputs=1)


def _fake_kernel(per_call: list[float]):
    """A ``timed(n)`` for timed_repeats whose calls take ``per_call[i]`` seconds in turn (the
    last value repeats), and the list of the ``n`` it was asked for."""
    asked: list[int] = []

    def timed(n: int) -> float:
        asked.append(n)
        start = sum(asked[:-1])
        return sum(per_call[min(i, len(per_call) - 1)] for i in range(start, start + n))
    return timed, asked


REQUEST = {"best": 1e-3, "slow_factor": 10.0, "min_repeat_ms": 5.0, "number": 1, "repeat": 3}


def test_a_stalled_warm_up_does_not_write_a_good_candidate_off():
    """A 1 ms kernel whose warm-up the host stalled for 50 ms: the confirming call is fast,
    so it is timed in full repeats like any other."""
    timed, asked = _fake_kernel([1e-3])
    times, number, stopped = timed_repeats(timed, 50e-3, REQUEST, math.inf)
    assert not stopped and len(times) == 3 and times == pytest.approx([1e-3] * 3)
    assert asked[0] == 1 and number * 1e-3 >= 5e-3


def test_a_slow_warm_up_confirmed_stops_after_that_call():
    timed, asked = _fake_kernel([40e-3])
    times, number, stopped = timed_repeats(timed, 50e-3, REQUEST, math.inf)
    assert stopped and times == [40e-3] and number == 1 and asked == [1]
    # No time left for the confirming call: the warm-up is the one repeat.
    timed, asked = _fake_kernel([40e-3])
    times, _, stopped = timed_repeats(timed, 50e-3, REQUEST, time.perf_counter() + 0.01)
    assert stopped and times == [50e-3] and asked == []
