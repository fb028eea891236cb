"""The simulated accelerator (issue 19): its functional model, tensorized programs, the timing
model, the cycle-counting runner and tuning against the default schedule."""
from __future__ import annotations

import ctypes
import math
import os
import shutil

import numpy as np
import pytest

import autotune
from autotune import accel
from records import MemoryDatabase, canonical_target
from schedules import Schedule, ScheduleError
from search import SearchConfig
from search.measure import MeasureConfig, MeasureInput
from search.simulation import SimulationBuilder
from tensor_ir import intrinsics, te
from tensor_ir.target import Target

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler to build the accelerator's model")

ACC = accel.DEFAULT_ACCELERATOR


def int8_inputs(m: int, n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    return a, b, a.astype(np.int32) @ b.astype(np.int32)


def run(kernel, a, b):
    c = np.full((a.shape[0], b.shape[1]), 12345, np.int32)  # the program must zero it itself
    kernel(a, b, c)
    return c


def scheduled(func, blocks, inp_at=None, wgt_at=None):
    """schedule_gemm with the tiles ``blocks`` and the copies at the given sampled-location
    decisions (None: innermost loop around the GEMM tile)."""
    sch = Schedule(func)
    if inp_at is None and wgt_at is None:
        accel.schedule_gemm(sch, blocks=blocks, naive=True)
        return sch
    space = accel.design_space(func)
    trace = space.sketches[0]
    samplers = [k for k, inst in enumerate(trace) if inst.kind.startswith("sample")]
    extents = [e // 16 for e in (func.params[0].const_shape[0], func.params[1].const_shape[1],
                                 func.params[0].const_shape[1])]
    decisions = [[e // b, b] for e, b in zip(extents, blocks)] + [inp_at, wgt_at]
    for k, d in zip(samplers, decisions):
        trace = trace.with_decision(k, d)
    return trace.apply(func)


# ---------------------------------------------------------------------------------------------
# The functional model and the intrinsic
# ---------------------------------------------------------------------------------------------

def test_functional_model_computes_one_gemm_tile_with_strides():
    lib = ctypes.CDLL(accel.functional_model())
    a, b, expected = int8_inputs(16, 16, 16, seed=1)
    # B given transposed in memory: its strides are (1, 16) instead of (16, 1).
    bt = np.ascontiguousarray(b.T)
    c = np.full((16, 16), 7, np.int32)
    gemm = getattr(lib, accel.GEMM_SYMBOL)
    gemm.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 3
    gemm.restype = None
    lib.simaccel_reset_gemm_calls()
    gemm(a.ctypes.data, 16, 1, bt.ctypes.data, 1, 16, c.ctypes.data, 16, 1)
    np.testing.assert_array_equal(c, expected + 7)  # accumulates into C
    lib.simaccel_gemm_calls.restype = ctypes.c_uint64
    assert lib.simaccel_gemm_calls() == 1


def test_intrinsic_is_registered_as_an_extern_c_gemm_tile():
    intrin = intrinsics.get(accel.GEMM_INTRIN)
    assert intrin.tile.extents == (16, 16, 16)
    assert [b.dtype for b in intrin.tile.params] == ["int8", "int8", "int32"]
    assert isinstance(intrin.impl, intrinsics.ExternCImpl)
    assert intrin.impl.symbol == accel.GEMM_SYMBOL
    assert intrin.impl.library == accel.functional_model()


def test_the_model_compiles_without_a_system_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, no gcc: the ziglang wheel's compiler
    path = accel.functional_model(str(tmp_path / "cache"))
    assert os.path.isfile(path) and ctypes.CDLL(path)[accel.GEMM_SYMBOL]
    accel.functional_model()  # the intrinsic back on the session's library


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    import importlib.util

    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, no gcc
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ziglang" else find_spec(name, *a))
    cache = tmp_path / "cache"
    with pytest.raises(accel.AcceleratorError, match=r"no C compiler \(cc or gcc\) is on PATH"):
        accel.functional_model(str(cache))
    with pytest.raises(accel.AcceleratorError, match="'no-such-cc' .* not an executable"):
        accel.functional_model(str(cache), compiler="no-such-cc")
    assert intrinsics.get(accel.GEMM_INTRIN).impl.library == accel.functional_model()


def test_set_cache_dir_moves_where_models_are_compiled(tmp_path):
    folder = tmp_path / "models"
    before = accel.get_cache_dir()
    try:
        accel.set_cache_dir(folder)
        assert accel.get_cache_dir() == str(folder)
        # The intrinsic names the new library at once; it is compiled on first use.
        library = intrinsics.get(accel.GEMM_INTRIN).impl.library
        assert os.path.dirname(library) == str(folder) and not folder.exists()
        assert accel.functional_model() == library and os.path.exists(library)
        accel.set_cache_dir(None)
        assert accel.get_cache_dir() == accel.default_cache_dir()
        assert os.path.dirname(intrinsics.get(accel.GEMM_INTRIN).impl.library) \
            == accel.default_cache_dir()
    finally:
        accel.set_cache_dir(before)
    assert os.path.dirname(intrinsics.get(accel.GEMM_INTRIN).impl.library) == before
    with pytest.raises(accel.AcceleratorError, match="must be a folder path or None, got 3"):
        accel.set_cache_dir(3)
    with pytest.raises(accel.AcceleratorError, match="got ''"):
        accel.set_cache_dir("")
    assert accel.get_cache_dir() == before


@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 4, 2)])
def test_tensorized_program_equals_numpy(blocks):
    func = accel.matmul_int8(64, 64, 64)
    sch = scheduled(func, blocks)
    kernel = accel.build(sch.func)
    assert accel.GEMM_SYMBOL in kernel.get_source("ll-raw")
    a, b, expected = int8_inputs(64, 64, 64, seed=2)
    lib = ctypes.CDLL(accel.functional_model())
    lib.simaccel_gemm_calls.restype = ctypes.c_uint64
    lib.simaccel_reset_gemm_calls()
    np.testing.assert_array_equal(run(kernel, a, b), expected)
    # Every GEMM tile ran in the model, as many as the timing model counts.
    assert lib.simaccel_gemm_calls() == accel.simulate(sch.func).macs == 4 ** 3


def test_extreme_values_are_exact():
    func = accel.matmul_int8(32, 32, 64)
    kernel = accel.build(accel.default_schedule(func).func)
    a = np.full((32, 64), -128, np.int8)
    b = np.full((64, 32), -128, np.int8)
    np.testing.assert_array_equal(run(kernel, a, b), a.astype(np.int32) @ b.astype(np.int32))


def test_non_multiple_of_16_is_refused():
    with pytest.raises(ScheduleError, match="extent 40, not a multiple of 16"):
        accel.default_schedule(accel.matmul_int8(40, 32, 32))


# ---------------------------------------------------------------------------------------------
# The timing model
# ---------------------------------------------------------------------------------------------

def test_default_schedule_cycles_follow_the_formulas():
    m = n = k = 64
    report = accel.simulate(accel.default_schedule(accel.matmul_int8(m, n, k)).func)
    tiles = (m // 16) * (n // 16) * (k // 16)
    assert report.macs == tiles
    # A and B: one 16x16 int8 tile each per GEMM; C: one 16x16 int32 tile per output tile.
    assert report.loads == 2 * tiles and report.load_bytes == 2 * tiles * 256
    assert report.stores == (m // 16) * (n // 16) and report.store_bytes == m * n * 4
    assert report.load_cycles == 2 * tiles * (ACC.dma_setup_cycles + 256 // 8)
    assert report.store_cycles == (m // 16) * (n // 16) * (ACC.dma_setup_cycles + 1024 // 8)
    assert report.reset_cycles == m * n // ACC.reset_lanes
    assert report.cycles == (tiles * ACC.mac_cycles + report.load_cycles
                             + report.store_cycles + report.reset_cycles)
    assert report.seconds == report.cycles / ACC.clock_hz


def test_bigger_tiles_with_reuse_need_fewer_transfer_cycles():
    func = accel.matmul_int8(128, 128, 128)
    naive = accel.simulate(scheduled(func, (1, 1, 1)).func)
    # 64x64 accumulator tiles, A's and B's copies under the k tile loop (location 2): each
    # 64x16 block of A serves 4 columns of GEMM tiles, each 16x64 block of B 4 rows.
    tiled = accel.simulate(scheduled(func, (4, 4, 1), inp_at=2, wgt_at=2).func)
    # Same work, fewer and bigger transfers.
    assert tiled.macs == naive.macs
    assert tiled.loads < naive.loads and tiled.load_bytes < naive.load_bytes
    assert tiled.transfer_cycles < naive.transfer_cycles
    assert tiled.cycles < naive.cycles


def test_copy_location_changes_the_transfers():
    func = accel.matmul_int8(128, 128, 128)
    # A's copy under the i tile loop (location 0) is reused by every j tile; under the k tile
    # loop (location 2) it is copied again for each of them.
    high = accel.simulate(scheduled(func, (2, 2, 1), inp_at=0, wgt_at=2).func)
    low = accel.simulate(scheduled(func, (2, 2, 1), inp_at=2, wgt_at=2).func)
    assert high.transfers_by_scope[accel.INP_SCOPE] < low.transfers_by_scope[accel.INP_SCOPE]
    assert high.bytes_by_scope[accel.INP_SCOPE] < low.bytes_by_scope[accel.INP_SCOPE]
    assert high.usage[accel.INP_SCOPE] > low.usage[accel.INP_SCOPE]
    assert high.bytes_by_scope[accel.WGT_SCOPE] == low.bytes_by_scope[accel.WGT_SCOPE]


def test_scratchpad_overflow_is_a_typed_error():
    func = accel.matmul_int8(256, 256, 256)
    # A 256 x 256 int32 accumulator tile is 256 KiB, over the 64 KiB scratchpad.
    sch = scheduled(func, (16, 16, 1))
    with pytest.raises(accel.ScratchpadOverflowError,
                       match=r"local\.acc_buffer holds 262144 bytes .* capacity of 65536"):
        accel.simulate(sch.func)
    bigger = accel.Accelerator(acc_bytes=256 * 1024)
    assert accel.simulate(sch.func, bigger).usage[accel.ACC_SCOPE] == 256 * 1024


def test_program_outside_the_scratchpads_is_refused():
    func = accel.matmul_int8(32, 32, 32)
    with pytest.raises(accel.UnsupportedProgramError, match="only copies between main memory"):
        accel.simulate(func)  # the plain loop nest: no GEMM instruction
    # Zeroing C in main memory is no accelerator instruction either.
    sch = scheduled(func, (1, 1, 1))
    sch.set_scope(sch.get_block("C_init"), 0, "local")
    with pytest.raises(accel.UnsupportedProgramError, match=r"C_local_acc_buffer \(local\)"):
        accel.simulate(sch.func)
    # B and C in their scratchpads, A left in main memory.
    sch = Schedule(func)
    c = sch.get_block("C")
    sch.cache_write(c, 0, accel.ACC_SCOPE)
    sch.cache_read(c, 1, accel.WGT_SCOPE)
    i, j, k = sch.get_loops(c)
    io, i16 = sch.split(i, [None, 16])
    jo, j16 = sch.split(j, [None, 16])
    ko, k16 = sch.split(k, [None, 16])
    sch.reorder(io, jo, ko, i16, j16, k16)
    sch.decompose_reduction(c, ko)
    sch.tensorize(i16, accel.GEMM_INTRIN)
    with pytest.raises(accel.UnsupportedProgramError,
                       match=r"operand A .* is A in scope global.* local\.inp_buffer"):
        accel.simulate(sch.func)


def test_design_space_samples_only_runnable_programs():
    func = accel.matmul_int8(256, 256, 256)
    space = accel.design_space(func)
    assert len(space.sketches) == 1
    for seed in range(6):
        cand = space.sample(seed=seed)
        report = accel.simulate(cand.func)
        assert report.macs == 16 ** 3
        assert all(report.usage[s] <= c for s, c in ACC.scratchpads.items())


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------

def _plus_one(m, n, k):
    """A reference that disagrees with the matmul: C + 1."""
    a = te.placeholder((m, k), "int8", name="A")
    b = te.placeholder((k, n), "int8", name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("int32")
                                               * b[r, j].astype("int32"), axis=r), name="C0")
    d = te.compute((m, n), lambda i, j: c[i, j] + 1, name="C")
    return te.create_prim_func([a, b, d])


def test_runner_returns_cycles_errors_and_wrong_results_as_records():
    target = accel.accelerator_target()
    func = accel.matmul_int8(64, 64, 64)
    good = scheduled(func, (2, 2, 2)).func
    overflow = scheduled(accel.matmul_int8(256, 256, 256), (16, 16, 1)).func
    config = MeasureConfig(number=1, repeat=1, min_repeat_ms=0.0, check="all")
    with accel.AcceleratorRunner(config=config) as runner, \
            accel.AcceleratorBuilder(max_workers=1) as bld:
        inputs = [MeasureInput(good, target, "mm64", reference=func),
                  MeasureInput(good, target, "mm64-wrong", reference=_plus_one(64, 64, 64)),
                  MeasureInput(overflow, target, "mm256", reference=None)]
        builds = bld.build(inputs[:2]) + SimulationBuilder().build(inputs[2:])
        ok, wrong, over = runner.run(inputs, builds)
        # Built by the builder, run by the model, checked, and timed in simulated cycles.
        assert not ok.is_error and ok.checked
        assert ok.run_times == [accel.simulate(good).seconds]
        assert accel.cycles_of(ok.median) == accel.simulate(good).cycles
        assert wrong.error_kind == "wrong_result"
        assert "differs from the reference" in wrong.error_msg
        assert over.error_kind == "build" and "local.acc_buffer" in over.error_msg
        # Without an artifact (a simulation builder), the worker builds the program itself.
        (again,) = runner.run(inputs[:1], SimulationBuilder().build(inputs[:1]))
        assert again.checked and again.median == ok.median
        assert runner.runs == 3


# ---------------------------------------------------------------------------------------------
# Tuning
# ---------------------------------------------------------------------------------------------

def test_records_are_filed_under_the_accelerator_target():
    target = accel.accelerator_target()
    assert Target(accel.TARGET_NAME) == target
    assert canonical_target(target) != canonical_target("llvm")
    assert "simaccel" in canonical_target(target)
    assert target.is_host  # the host runs the loops and the model


def test_tuning_beats_the_default_schedule_by_5x_and_apply_history_best_rebuilds_it():
    func = accel.matmul_int8(256, 256, 256)
    target = accel.accelerator_target()
    default_cycles = accel.simulate(accel.default_schedule(func).func).cycles
    with MemoryDatabase() as db, accel.AcceleratorRunner() as runner, \
            accel.AcceleratorBuilder(max_workers=2) as builder:
        result = autotune.tune(func, target, trials=32, database=db, space=accel.design_space(func),
                               runner=runner, builder=builder,
                               search=SearchConfig(batch_size=16, seed=0, remeasure_top=0),
                               log=False)
        best_cycles = accel.cycles_of(result.best_time)
        assert best_cycles == accel.simulate(result.best_func).cycles
        assert default_cycles >= 5 * best_cycles, (default_cycles, best_cycles)
        # Every recorded program was checked or refused without running; the best ran.
        assert runner.runs >= 1 and math.isfinite(result.best_time)
        a, b, expected = int8_inputs(256, 256, 256, seed=3)
        np.testing.assert_array_equal(run(accel.build(result.best_func), a, b), expected)
        # The database serves the best program back to a plain build for the target.
        with autotune.apply_history_best(db):
            kernel = accel.build(func)
        np.testing.assert_array_equal(run(kernel, a, b), expected)
        assert accel.simulate(kernel.func).cycles == best_cycles
        # The CPU target has no record of it.
        assert db.best(result.workload_key, "llvm") is None
