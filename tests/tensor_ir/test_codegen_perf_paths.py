"""Correctness of the code paths added for compile time and parallel runtime: generation-time
folding and value numbering, masked evaluation of lane-varying selects, constant conditions,
dynamically claimed parallel chunks, the object-only build and the OpenMP environment."""
from __future__ import annotations

import ctypes
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune
from autotune.runtime.build import build_object
from schedules.schedule import Schedule
from tensor_ir import ops
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen import CodegenOptions, codegen, compile_module
from tensor_ir.codegen import compile as compile_mod
from tensor_ir.codegen.llvm import CodeGenLLVM, fold_int
from tensor_ir.errors import BuildError
from tensor_ir.expr import FloatImm, IntImm, Var, binary, cast, compare, select
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import BufferStore, For, IfThenElse, seq


def lowered(params, body, name="f") -> PrimFunc:
    return PrimFunc(tuple(params), body, name, (("lowered", True),))


def loop(var, extent, body, kind="serial"):
    return For(var, IntImm(0), IntImm(extent), kind, body, None, ())


def f32(v):
    return FloatImm(float(v), "float32")


def run(func: PrimFunc, *arrays, num_threads: int = 0):
    compiled = compile_module(codegen(func, options=CodegenOptions(num_threads=num_threads)))
    jit = compiled.jit()
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(arrays)))
    proto(jit.function_address(func.name))(*[a.ctypes.data for a in arrays])
    return compiled


# ---------------------------------------------------------------------------------------------
# generation-time integer folding
# ---------------------------------------------------------------------------------------------

def _wrap(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >= 1 << (bits - 1) else x


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["+", "-", "*", "//", "%", "min", "max"]),
       st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(-2 ** 31, 2 ** 31 - 1))
def test_fold_int_matches_numpy_int32(op, a, b):
    x, y = np.int32(a), np.int32(b)
    folded = fold_int(op, a, b, 32, unsigned=False)
    if op in ("//", "%") and b == 0:
        assert folded == 0  # numpy's integer x // 0 and x % 0, as the emitted code computes
        return
    with np.errstate(over="ignore"):
        expected = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y,
                    "//": lambda: np.floor_divide(x, y), "%": lambda: np.mod(x, y),
                    "min": lambda: min(x, y), "max": lambda: max(x, y)}[op]()
    assert _wrap(folded, 32) == int(expected)


def test_fold_int_unsigned_reads_operands_as_unsigned():
    assert fold_int("//", -1, 2, 8, unsigned=True) == 127  # 255 // 2
    assert fold_int("%", -1, 16, 8, unsigned=True) == 15


def test_unrolled_constant_index_arithmetic_folds_and_computes_floor_semantics():
    # B[i] = (i - 3) // 2 * 10 + (i - 3) % 2 for an unrolled i: every index is a constant.
    B = decl_buffer((8,), "int64", "B")
    i = Var("i")
    shifted = binary("-", i, IntImm(3))
    value = binary("+", binary("*", binary("//", shifted, IntImm(2)), IntImm(10)),
                   binary("%", shifted, IntImm(2)))
    f = lowered([B], loop(i, 8, BufferStore(B, value, (i,)), kind="unrolled"))
    b = np.zeros(8, np.int64)
    compiled = run(f, b)
    k = np.arange(8) - 3
    np.testing.assert_array_equal(b, np.floor_divide(k, 2) * 10 + np.mod(k, 2))
    # Folded at generation time: no integer division or multiplication is left in the IR.
    assert "sdiv" not in compiled.source_ir and " mul " not in compiled.source_ir


# ---------------------------------------------------------------------------------------------
# value numbering respects dominance
# ---------------------------------------------------------------------------------------------

def test_values_from_a_branch_or_loop_body_are_not_reused_after_it():
    # The same index expression is computed inside an if, inside a loop body, in both sides
    # of a lazy select, and again after each: the IR must verify and compute the same.
    A = decl_buffer((64,), "float32", "A")
    B = decl_buffer((8, 4), "float32", "B")
    i, j = Var("i"), Var("j")
    idx = binary("+", binary("*", i, IntImm(3)), IntImm(1))
    cond = compare("<", i, IntImm(4))
    body = seq(
        IfThenElse(cond, BufferStore(B, A[idx], (i, 0)), None),
        loop(j, 2, BufferStore(B, A[binary("+", idx, j)], (i, 1))),
        BufferStore(B, select(cond, A[idx], A[binary("+", idx, IntImm(1))] * f32(2)), (i, 2)),
        BufferStore(B, A[idx], (i, 3)))
    f = lowered([A, B], loop(i, 8, body))
    a = np.arange(64, dtype=np.float32)
    b = np.zeros((8, 4), np.float32)
    run(f, a, b)
    ii = np.arange(8)
    expected = np.zeros((8, 4), np.float32)
    expected[:, 0] = np.where(ii < 4, a[ii * 3 + 1], 0)
    expected[:, 1] = a[ii * 3 + 2]  # the loop's last iteration, j = 1
    expected[:, 2] = np.where(ii < 4, a[ii * 3 + 1], a[ii * 3 + 2] * 2)
    expected[:, 3] = a[ii * 3 + 1]
    np.testing.assert_array_equal(b, expected)


def test_constant_conditions_emit_only_the_chosen_side():
    # Unrolled i: i < 4 is known for every copy, so A[i] (out of bounds for i >= 4) must not
    # be emitted in the copies that do not choose it.
    A = decl_buffer((4,), "float32", "A")
    B = decl_buffer((8,), "float32", "B")
    C = decl_buffer((8,), "float32", "C")
    i = Var("i")
    inb = compare("<", i, IntImm(4))
    body = seq(BufferStore(B, select(inb, A[i], f32(-1)), (i,)),
               IfThenElse(inb, BufferStore(C, A[i] * f32(2), (i,)),
                          BufferStore(C, f32(7), (i,))))
    f = lowered([A, B, C], loop(i, 8, body, kind="unrolled"))
    a = np.arange(1, 5, dtype=np.float32)
    b = np.zeros(8, np.float32)
    c = np.zeros(8, np.float32)
    compiled = run(f, a, b, c)
    np.testing.assert_array_equal(b, [1, 2, 3, 4, -1, -1, -1, -1])
    np.testing.assert_array_equal(c, [2, 4, 6, 8, 7, 7, 7, 7])
    assert "br i1" not in compiled.source_ir  # no branch is left for known conditions


# ---------------------------------------------------------------------------------------------
# vectorized loops wider than a register
# ---------------------------------------------------------------------------------------------

def _depthwise_register_tile(width: int, rows: int):
    """Depthwise 3x3 (pad 1) on 2 channels of 4 x ``width``, with a register-level
    accumulator tile of ``rows`` x the whole row, vectorized along the row."""
    func = ops.depthwise_conv2d_nchw(1, 2, 4, width, 3, 3, padding=1)
    sch = Schedule(func)
    conv = sch.get_block("depthwise_conv2d_nchw")
    acc = sch.cache_write(conv, 0, "local")
    n, c, y, x, ry, rx = sch.get_loops(conv)
    yo, yi = sch.split(y, [None, rows])
    sch.reorder(n, c, yo, ry, rx, yi, x)
    sch.vectorize(x)
    sch.unroll(yi)
    sch.reverse_compute_at(acc, yo)
    sch.vectorize(sch.get_loops(acc)[-1])
    sch.compute_at(sch.get_block("pad_data"), c)
    sch.vectorize(sch.get_loops(sch.get_block("pad_data"))[-1])
    return func, sch.mod


@pytest.mark.parametrize("width, vector_bits, lanes", [
    (56, 512, 16), (56, 256, 8), (28, 256, 8), (24, 512, 16), (13, 128, 4), (32, 256, None),
    (56, 0, None),
])
def test_wide_vector_loops_are_cut_into_register_vectors(width, vector_bits, lanes):
    # Register-sized pieces where the width is not a power of two (``lanes``), one wide
    # vector where it is or where the target's vector width is unknown (None); the results
    # match the unscheduled nest either way.
    naive, scheduled = _depthwise_register_tile(width, rows=2)
    rng = np.random.default_rng(width)
    data = rng.standard_normal((1, 2, 4, width)).astype(np.float32)
    weight = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    expected = np.empty((1, 2, 4, width), np.float32)
    autotune.build(naive, "llvm")(data, weight, expected)
    out = np.full_like(expected, np.nan)
    compiled = compile_module(codegen(lower(scheduled),
                                      options=CodegenOptions(vector_bits=vector_bits)))
    jit = compiled.jit()
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 3))
    proto(jit.function_address(scheduled.name))(data.ctypes.data, weight.ctypes.data,
                                                 out.ctypes.data)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    float_widths = {int(w) for w in re.findall(r"<(\d+) x float>", compiled.source_ir)}
    if lanes is None:
        assert width in float_widths
    else:
        assert max(float_widths) == lanes
        assert width % lanes == 0 or width % lanes in float_widths  # the remainder piece


def test_register_lanes_follow_the_widest_element():
    a = decl_buffer((48,), "float64", "a")
    b = decl_buffer((48,), "float32", "b")
    i = Var("i")
    body = loop(i, 48, BufferStore(b, cast("float32", a[i]), (i,)), kind="vectorized")
    gen = CodeGenLLVM(CodegenOptions(vector_bits=256))
    assert gen.register_lanes(body) == 4  # four doubles per 256-bit register


# ---------------------------------------------------------------------------------------------
# masked evaluation of lane-varying selects
# ---------------------------------------------------------------------------------------------

def _padded_copy(stride: int, lanes: int):
    # out[r, x] = 0 <= x - 1 < n ? data[(x - 1) * stride] + uniform[r] : 0, with x split into
    # xo and a vectorized xi of ``lanes``; width = n + 2 is a multiple of the lanes.
    width = 3 * lanes
    n = width - 2
    data = decl_buffer((n * stride,), "float32", "data")
    uniform = decl_buffer((3,), "float32", "uniform")
    out = decl_buffer((3, width), "float32", "out")
    r, xo, xi = Var("r"), Var("xo"), Var("xi")
    x = binary("+", binary("*", xo, IntImm(lanes)), xi)
    src = binary("-", x, IntImm(1))
    ok = compare(">=", src, IntImm(0)) & compare("<", src, IntImm(n))
    value = select(ok, data[binary("*", src, IntImm(stride))] + uniform[r], f32(0))
    body = loop(r, 3, loop(xo, 3, loop(xi, lanes, BufferStore(out, value, (r, x)),
                                       kind="vectorized")))
    return lowered([data, uniform, out], body), n, width


@pytest.mark.parametrize("stride, lanes", [(1, 8), (1, 11), (2, 8), (3, 4)])
def test_padding_select_in_vector_loop_uses_masked_loads(stride, lanes):
    f, n, width = _padded_copy(stride, lanes)
    rng = np.random.default_rng(1)
    data = rng.standard_normal(n * stride).astype(np.float32)
    uniform = rng.standard_normal(3).astype(np.float32)
    out = np.full((3, width), np.nan, np.float32)
    compiled = run(f, data, uniform, out)
    expected = np.zeros((3, width), np.float32)
    expected[:, 1:n + 1] = data[::stride][None, :] + uniform[:, None]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert ("llvm.masked.load" if stride == 1 else "llvm.masked.gather") in compiled.source_ir
    assert "sel.then" not in compiled.source_ir  # no per-lane branches


def test_nested_select_in_a_side_falls_back_to_per_lane_branches():
    A = decl_buffer((32,), "float32", "A")
    B = decl_buffer((32,), "float32", "B")
    o, xi = Var("o"), Var("xi")
    x = binary("+", binary("*", o, IntImm(16)), xi)  # not a constant in any lane
    inner = select(compare("<", x, IntImm(28)), A[binary("+", x, IntImm(4))], f32(5))
    value = select(compare(">=", x, IntImm(2)), inner, f32(9))
    f = lowered([A, B], loop(o, 2, loop(xi, 16, BufferStore(B, value, (x,)),
                                        kind="vectorized")))
    a = np.arange(32, dtype=np.float32)
    b = np.zeros(32, np.float32)
    compiled = run(f, a, b)
    xs = np.arange(32)
    expected = np.where(xs >= 2, np.where(xs < 28, a[np.minimum(xs + 4, 31)], 5), 9)
    np.testing.assert_array_equal(b, expected.astype(np.float32))
    assert "sel.then" in compiled.source_ir


def test_integer_division_by_a_variable_in_masked_lanes():
    # d[x] is 0 exactly in the lanes whose condition is false.  Integer division never traps
    # (a zero divisor is replaced before the instruction), so evaluating it in those lanes is
    # harmless and the select may stay vectorised.
    A = decl_buffer((8,), "int32", "A")
    D = decl_buffer((8,), "int32", "D")
    B = decl_buffer((8,), "int32", "B")
    x = Var("x")
    value = select(compare("!=", D[x], IntImm(0, "int32")), binary("//", A[x], D[x]),
                   IntImm(-1, "int32"))
    f = lowered([A, D, B], loop(x, 8, BufferStore(B, value, (x,)), kind="vectorized"))
    a = np.arange(8, dtype=np.int32) * 7
    d = np.array([1, 0, 2, 0, 3, 0, 4, 0], np.int32)
    b = np.zeros(8, np.int32)
    run(f, a, d, b)
    np.testing.assert_array_equal(b, np.where(d != 0, a // np.where(d == 0, 1, d), -1))


# ---------------------------------------------------------------------------------------------
# parallel loops: per-thread segments of claimed chunks
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extent", [1, 2, 5, 37, 1000])
@pytest.mark.parametrize("num_threads", [0, 1, 2, 3])
def test_parallel_chunks_cover_every_iteration_once(extent, num_threads):
    B = decl_buffer((extent,), "int32", "B")
    i = Var("i")
    f = lowered([B], loop(i, extent, BufferStore(B, B[i] + IntImm(1, "int32"), (i,)),
                          kind="parallel"))
    b = np.zeros(extent, np.int32)
    compiled = run(f, b, num_threads=num_threads)
    np.testing.assert_array_equal(b, np.ones(extent, np.int32))
    # A loop of one iteration is no loop (its variable is bound to the start).
    assert ("atomicrmw add" in compiled.source_ir) == (extent > 1)


@pytest.mark.parametrize("extent", [3, 7, 42, 1001])
@pytest.mark.parametrize("num_threads", [3, 5])
def test_parallel_threads_beyond_the_owners_only_take_what_is_left(monkeypatch, extent,
                                                                    num_threads):
    # Two owners: the third and later threads own no segment and claim from the owners'
    # counters; every iteration still runs exactly once, whoever claims it.
    from tensor_ir.codegen import parallel

    monkeypatch.setattr(parallel, "MAX_OWNERS", 2)
    B = decl_buffer((extent,), "int32", "B")
    i = Var("i")
    f = lowered([B], loop(i, extent, BufferStore(B, B[i] + IntImm(1, "int32"), (i,)),
                          kind="parallel"))
    b = np.zeros(extent, np.int32)
    for _ in range(20):
        run(f, b, num_threads=num_threads)
    np.testing.assert_array_equal(b, np.full(extent, 20, np.int32))


def test_parallel_counters_sit_on_their_own_cache_lines():
    B = decl_buffer((64,), "int32", "B")
    i = Var("i")
    f = lowered([B], loop(i, 64, BufferStore(B, B[i] + IntImm(1, "int32"), (i,)),
                          kind="parallel"))
    compiled = run(f, np.zeros(64, np.int32), num_threads=2)
    # The data block starts with MAX_OWNERS lines of counters; the caller zeroes those of
    # the two threads it asked for (2 x 64 bytes).
    from tensor_ir.codegen.parallel import COUNTER_STRIDE, MAX_OWNERS

    assert f"[{MAX_OWNERS} x [{COUNTER_STRIDE // 8} x i64]]" in compiled.source_ir
    assert (f'call void @"llvm.memset.p0.i64"(ptr %"f__par1.data", i8 0, '
            f'i64 {2 * COUNTER_STRIDE}, i1 0)') in compiled.source_ir


def test_parallel_body_is_outlined_noinline_and_runs_with_offset_start():
    A = decl_buffer((50,), "float32", "A")
    i = Var("i")
    body = BufferStore(A, cast("float32", i) * f32(2), (i,))
    f = lowered([A], For(i, IntImm(7), IntImm(40), "parallel", body, None, ()))
    a = np.full(50, -1, np.float32)
    compiled = run(f, a, num_threads=2)
    expected = np.full(50, -1, np.float32)
    expected[7:47] = np.arange(7, 47) * 2
    np.testing.assert_array_equal(a, expected)
    body_line = next(line for line in compiled.source_ir.splitlines()
                     if line.startswith("define") and "_body" in line)
    assert "noinline" in body_line


# ---------------------------------------------------------------------------------------------
# compile path
# ---------------------------------------------------------------------------------------------

def test_build_object_is_the_exported_object_and_loads(tmp_path):
    A = decl_buffer((4, 4), "float32", "A")
    B = decl_buffer((4, 4), "float32", "B")
    i, j = Var("i"), Var("j")
    f = lowered([A, B], loop(i, 4, loop(j, 4, BufferStore(B, A[i, j] + f32(1), (i, j)),
                                        kind="vectorized"), kind="parallel"), name="addone")
    obj = build_object(f, "llvm -num-cores 2")
    path = tmp_path / "k.o"
    path.write_bytes(obj)
    kernel = autotune.load_module(path)
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = np.zeros((4, 4), np.float32)
    kernel(a, b)
    np.testing.assert_array_equal(b, a + 1)
    with pytest.raises(BuildError, match="PrimFunc"):
        build_object("not a function")


def test_compiled_module_optimised_ir_is_produced_on_demand():
    A = decl_buffer((8,), "float32", "A")
    i = Var("i")
    f = lowered([A], loop(i, 8, BufferStore(A, A[i] * f32(3), (i,))))
    compiled = compile_module(codegen(f))
    text = compiled.llvm_ir
    assert isinstance(text, str) and "define" in text
    assert compiled.llvm_ir is text  # cached after the first request


# ---------------------------------------------------------------------------------------------
# OpenMP environment for the first libgomp load
# ---------------------------------------------------------------------------------------------

def test_openmp_environment_sets_spin_count_only_while_loading(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(compile_mod, "libgomp_loaded", lambda: False)
    with compile_mod._openmp_environment():
        assert os.environ["GOMP_SPINCOUNT"] == str(compile_mod.GOMP_SPIN_COUNT)
    assert "GOMP_SPINCOUNT" not in os.environ


@pytest.mark.parametrize("user_var", ["GOMP_SPINCOUNT", "OMP_WAIT_POLICY"])
def test_openmp_environment_respects_the_users_choice(monkeypatch, user_var):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv(user_var, "passive" if user_var == "OMP_WAIT_POLICY" else "5")
    monkeypatch.setattr(compile_mod, "libgomp_loaded", lambda: False)
    before = dict(os.environ)
    with compile_mod._openmp_environment():
        assert dict(os.environ) == before
    assert dict(os.environ) == before


def test_openmp_environment_does_nothing_once_libgomp_is_loaded(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(compile_mod, "libgomp_loaded", lambda: True)
    with compile_mod._openmp_environment():
        assert "GOMP_SPINCOUNT" not in os.environ


def test_llvm_options_default_and_environment_override(monkeypatch):
    monkeypatch.delenv(compile_mod.LLVM_OPTIONS_ENV, raising=False)
    assert compile_mod.llvm_options() == compile_mod.LLVM_OPTIONS
    monkeypatch.setenv(compile_mod.LLVM_OPTIONS_ENV, "-a=1  -b=2")
    assert compile_mod.llvm_options() == ("-a=1", "-b=2")
    monkeypatch.setenv(compile_mod.LLVM_OPTIONS_ENV, "")
    assert compile_mod.llvm_options() == ()
