"""LLVM backend: generated kernels against numpy, for every loop kind, dtype, cast and intrinsic."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from tensor_ir import te
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen import CodegenOptions, LLVMTarget, codegen, compile_module
from tensor_ir.codegen.llvm import symbol_name
from tensor_ir.dtype import DTYPES
from tensor_ir.errors import BuildError
from tensor_ir.expr import FloatImm, IntImm, Var, binary, call, cast, compare, const, select
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import (
    Allocate, Block, BlockRealize, BufferStore, For, IfThenElse, LetStmt, seq,
)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def run(func: PrimFunc, *arrays, num_threads: int = 0):
    """Compile ``func`` and call it on ``arrays``; returns the CompiledModule."""
    func = lower(func)
    compiled = compile_module(codegen(func, options=CodegenOptions(num_threads=num_threads)))
    jit = compiled.jit()
    addr = jit.function_address(symbol_name(func.name))
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(arrays)))
    proto(addr)(*[a.ctypes.data for a in arrays])
    return compiled


def lowered(params, body, name="f") -> PrimFunc:
    return PrimFunc(tuple(params), body, name, (("lowered", True),))


def loop(var, extent, body, kind="serial", annotations=()):
    ext = IntImm(extent) if isinstance(extent, int) else extent
    return For(var, IntImm(0), ext, kind, body, None, tuple(annotations))


def store(buf, value, *idx):
    return BufferStore(buf, value, tuple(const(i) if isinstance(i, int) else i for i in idx))


def f32(v):
    return FloatImm(float(v), "float32")


# ---------------------------------------------------------------------------------------------
# te-defined functions
# ---------------------------------------------------------------------------------------------

def test_te_matmul_matches_numpy():
    M, N, K = 8, 12, 16
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    rng = np.random.default_rng(0)
    a = rng.random((M, K), dtype=np.float32)
    b = rng.random((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    run(te.create_prim_func([A, B, C]), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_te_intermediate_stage_and_padding():
    # B (intermediate, allocated by the root block) = A + 1; C pads B by one on both sides:
    # the lazy select must never evaluate B[i - 1] when i is out of range.
    n = 6
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n + 2,), lambda i: te.if_then_else(
        te.all(i >= 1, i < n + 1), B[i - 1], te.const(0.0, "float32")), name="C")
    a = np.arange(n, dtype=np.float32)
    c = np.full(n + 2, -1, np.float32)
    compiled = run(te.create_prim_func([A, C]), a, c)
    np.testing.assert_array_equal(c, np.pad(a + 1, 1))
    assert "phi" in compiled.source_ir  # real branches, not a select over both loads


def test_te_max_reduction_int32():
    A = te.placeholder((5, 7), "int32", name="A")
    k = te.reduce_axis(7, name="k")
    B = te.compute((5,), lambda i: te.max(A[i, k], axis=k), name="B")
    a = np.random.default_rng(1).integers(-100, 100, (5, 7)).astype(np.int32)
    b = np.zeros(5, np.int32)
    run(te.create_prim_func([A, B]), a, b)
    np.testing.assert_array_equal(b, a.max(axis=1))


# ---------------------------------------------------------------------------------------------
# loop kinds
# ---------------------------------------------------------------------------------------------

def test_unrolled_loop_is_expanded():
    A = decl_buffer((4,), "float32", "A")
    C = decl_buffer((4,), "float32", "C")
    i = Var("i")
    f = lowered([A, C], loop(i, 4, store(C, A[i] * f32(3), i), kind="unrolled"))
    a = np.arange(4, dtype=np.float32)
    c = np.zeros(4, np.float32)
    compiled = run(f, a, c)
    np.testing.assert_array_equal(c, a * 3)
    assert "i.head" not in compiled.source_ir


@pytest.mark.parametrize("max_step, outer_unrolled", [(16, True), (8, False)])
def test_pragma_auto_unroll_max_step(max_step, outer_unrolled):
    A = decl_buffer((4, 4), "float32", "A")
    C = decl_buffer((4, 4), "float32", "C")
    i, j = Var("i"), Var("j")
    body = loop(j, 4, store(C, A[i, j] + f32(1), i, j))
    f = lowered([A, C], loop(i, 4, body,
                             annotations=[("pragma_auto_unroll_max_step", max_step)]))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    c = np.zeros((4, 4), np.float32)
    compiled = run(f, a, c)
    np.testing.assert_array_equal(c, a + 1)
    assert "j.head" not in compiled.source_ir
    assert ("i.head" not in compiled.source_ir) == outer_unrolled


def test_vectorized_contiguous_strided_and_broadcast():
    # C[i, j] = A[i, j] * 2 + B[2 j] + S[i]: contiguous, strided (gather) and uniform loads.
    A = decl_buffer((4, 8), "float32", "A")
    B = decl_buffer((16,), "float32", "B")
    S = decl_buffer((4,), "float32", "S")
    C = decl_buffer((4, 8), "float32", "C")
    i, j = Var("i"), Var("j")
    value = A[i, j] * f32(2) + B[j * 2] + S[i]
    f = lowered([A, B, S, C], loop(i, 4, loop(j, 8, store(C, value, i, j), kind="vectorized")))
    rng = np.random.default_rng(2)
    a, b, s = (rng.random(x, dtype=np.float32) for x in ((4, 8), (16,), (4,)))
    c = np.zeros((4, 8), np.float32)
    compiled = run(f, a, b, s, c)
    np.testing.assert_allclose(c, a * 2 + b[::2][None, :] + s[:, None], rtol=1e-6)
    assert "load <8 x float>" in compiled.source_ir
    assert "store <8 x float>" in compiled.source_ir


def test_vectorized_gather_scatter_and_let():
    A = decl_buffer((8,), "float32", "A")
    D = decl_buffer((8,), "float32", "D")
    E = decl_buffer((16,), "float32", "E")
    G = decl_buffer((8,), "float32", "G")
    j = Var("j")
    t = Var("t")
    body = seq(
        store(D, A[j // 2], j),                           # non-affine index: gather
        store(E, A[j], j * 2),                            # stride-2 store: scatter
        LetStmt(t, j + 1, store(G, A[t - 1] + f32(1), t - 1)),  # varying let, contiguous
    )
    f = lowered([A, D, E, G], loop(j, 8, body, kind="vectorized"))
    a = np.arange(8, dtype=np.float32) + 10
    d, e, g = np.zeros(8, np.float32), np.zeros(16, np.float32), np.zeros(8, np.float32)
    run(f, a, d, e, g)
    np.testing.assert_array_equal(d, a[np.arange(8) // 2])
    expected_e = np.zeros(16, np.float32)
    expected_e[::2] = a
    np.testing.assert_array_equal(e, expected_e)
    np.testing.assert_array_equal(g, a + 1)


def test_vectorized_varying_condition_guards_loads():
    # Padding inside a vectorized loop: lane 0 and lane 9 must not read A.
    A = decl_buffer((8,), "float32", "A")
    P = decl_buffer((10,), "float32", "P")
    Q = decl_buffer((8,), "float32", "Q")
    j = Var("j")
    inside = (j >= 1) & (j < 9)
    pad = store(P, select(inside, A[j - 1], f32(0)), j)
    j2 = Var("j2")
    branch = IfThenElse(compare("==", j2 % 2, 0), store(Q, f32(1), j2), store(Q, A[j2], j2))
    f = lowered([A, P, Q], seq(loop(j, 10, pad, kind="vectorized"),
                               loop(j2, 8, branch, kind="vectorized")))
    a = np.arange(8, dtype=np.float32) + 1
    p, q = np.full(10, -1, np.float32), np.zeros(8, np.float32)
    run(f, a, p, q)
    np.testing.assert_array_equal(p, np.pad(a, 1))
    np.testing.assert_array_equal(q, np.where(np.arange(8) % 2 == 0, 1, a))


def test_vectorized_uniform_lazy_select_and_casts():
    # A uniform condition guarding vector loads: real branches whose results are vectors
    # (or a broadcast scalar) merged by a phi; half -> float casts on vectors.
    H = decl_buffer((8,), "float16", "H")
    B = decl_buffer((8,), "float32", "B")
    F = decl_buffer((1,), "int32", "F")
    Out = decl_buffer((2, 8), "float32", "Out")
    Small = decl_buffer((8,), "int8", "Small")
    i, j = Var("i"), Var("j")
    value = select(compare(">", F[0], cast("int32", i)), cast("float32", H[j]), B[0])
    body = seq(store(Out, value, i, j), store(Small, cast("int8", B[j] * f32(-3)), j))
    f = lowered([H, B, F, Out, Small], loop(i, 2, loop(j, 8, body, kind="vectorized")))
    h = (np.arange(8) * 0.5).astype(np.float16)
    b = np.arange(8, dtype=np.float32) + 1
    flag = np.array([1], np.int32)
    o, out_i = np.zeros((2, 8), np.float32), np.zeros(8, np.int8)
    compiled = run(f, h, b, flag, o, out_i)
    np.testing.assert_array_equal(o[0], h.astype(np.float32))
    np.testing.assert_array_equal(o[1], np.full(8, b[0]))
    np.testing.assert_array_equal(out_i, (b * -3).astype(np.int8))
    assert "<8 x half>" in compiled.source_ir


def test_vectorized_store_to_one_address_keeps_serial_order():
    A = decl_buffer((8,), "float32", "A")
    S = decl_buffer((1,), "float32", "S")
    j = Var("j")
    f = lowered([A, S], loop(j, 8, store(S, S[0] + A[j], 0), kind="vectorized"))
    a = np.arange(8, dtype=np.float32)
    s = np.array([100], np.float32)
    run(f, a, s)
    assert s[0] == 100 + a.sum()


def test_vectorized_with_inner_serial_loop_and_long_extent():
    A = decl_buffer((4, 8), "float32", "A")
    Out = decl_buffer((8,), "float32", "Out")
    L = decl_buffer((100,), "int32", "L")
    j, k, m = Var("j"), Var("k"), Var("m")
    reduce = loop(j, 8, seq(store(Out, f32(0), j),
                            loop(k, 4, store(Out, Out[j] + A[k, j], j))), kind="vectorized")
    # extent 100 > MAX_LANES: a loop over chunks of 50 lanes.
    long = loop(m, 100, store(L, cast("int32", m) * 3, m), kind="vectorized")
    f = lowered([A, Out, L], seq(reduce, long))
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    o, lo = np.zeros(8, np.float32), np.zeros(100, np.int32)
    compiled = run(f, a, o, lo)
    np.testing.assert_array_equal(o, a.sum(axis=0))
    np.testing.assert_array_equal(lo, np.arange(100) * 3)
    assert "<50 x i32>" in compiled.source_ir


def test_unrolled_loop_inside_vectorized_loop_and_heap_buffer():
    # Y[j] = sum_k X[k, j] with k unrolled inside the vectorized j loop; then a bool buffer
    # too large for the stack (heap) holds Y > 10 and is copied out.
    n = 70000
    X = decl_buffer((3, 8), "float32", "X")
    Y = decl_buffer((8,), "float32", "Y")
    Z = decl_buffer((8,), "bool", "Z")
    big = decl_buffer((n,), "bool", "big")
    j, k, m = Var("j"), Var("k"), Var("m")
    acc = loop(j, 8, seq(store(Y, f32(0), j),
                         loop(k, 3, store(Y, Y[j] + X[k, j], j), kind="unrolled")),
               kind="vectorized")
    flags = Allocate(big, seq(loop(m, 8, store(big, Y[m] > f32(10), m * 1000)),
                              loop(m, 8, store(Z, big[m * 1000], m))))
    f = lowered([X, Y, Z], seq(acc, flags))
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    y, z = np.zeros(8, np.float32), np.zeros(8, bool)
    compiled = run(f, x, y, z)
    np.testing.assert_array_equal(y, x.sum(axis=0))
    np.testing.assert_array_equal(z, x.sum(axis=0) > 10)
    assert "k.head" not in compiled.source_ir
    assert "aligned_alloc" in compiled.source_ir and "free" in compiled.source_ir


def test_kernel_name_clashing_with_runtime_symbol_is_rejected():
    A = decl_buffer((4,), "float32", "A")
    with pytest.raises(BuildError, match="'free'"):
        codegen(lowered([A], store(A, f32(0), 0), name="free"))


def test_vectorized_non_constant_extent_falls_back_to_scalar():
    T = decl_buffer((4, 4), "float32", "T")
    i, j = Var("i"), Var("j")
    f = lowered([T], loop(i, 4, For(j, IntImm(0), i + 1, "vectorized",
                                    store(T, f32(1), i, j))))
    t = np.zeros((4, 4), np.float32)
    run(f, t)
    np.testing.assert_array_equal(t, np.tril(np.ones((4, 4), np.float32)))


def test_vectorized_bool():
    X = decl_buffer((16,), "bool", "X")
    Y = decl_buffer((16,), "bool", "Y")
    j = Var("j")
    f = lowered([X, Y], loop(j, 16, store(Y, ~X[j], j), kind="vectorized"))
    x = np.arange(16) % 3 == 0
    y = np.zeros(16, bool)
    run(f, x, y)
    np.testing.assert_array_equal(y, ~x)


def _parallel_func(inner_kind="serial", big=False):
    # for i parallel: allocate tmp; tmp[j] = 2 A[i, j]; C[i, j] = tmp[j] + tmp[7 - j] + off
    n = 20000 if big else 8
    A = decl_buffer((16, 8), "float32", "A")
    C = decl_buffer((16, 8), "float32", "C")
    tmp = decl_buffer((n,), "float32", "tmp", scope="local")
    i, j, j2, off = Var("i"), Var("j"), Var("j2"), Var("off")
    body = Allocate(tmp, seq(
        loop(j, 8, store(tmp, A[i, j] * f32(2), j)),
        loop(j2, 8, store(C, tmp[j2] + tmp[7 - j2] + cast("float32", off), i, j2),
             kind=inner_kind)))
    return lowered([A, C], LetStmt(off, IntImm(3), loop(i, 16, body, kind="parallel")))


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("num_threads", [0, 2])
def test_parallel_loop_with_allocate(big, num_threads):
    a = np.random.default_rng(3).random((16, 8), dtype=np.float32)
    c = np.zeros((16, 8), np.float32)
    compiled = run(_parallel_func(big=big), a, c, num_threads=num_threads)
    np.testing.assert_allclose(c, 2 * a + 2 * a[:, ::-1] + 3, rtol=1e-6)
    assert "tir_parallel_launch" in compiled.source_ir and "GOMP" not in compiled.source_ir
    assert ("aligned_alloc" in compiled.source_ir) == big


def test_nested_parallel_runs_serially_inside():
    A = decl_buffer((4, 6), "int32", "A")
    i, j = Var("i"), Var("j")
    f = lowered([A], loop(i, 4, loop(j, 6, store(A, cast("int32", i * 10 + j), i, j),
                                     kind="parallel"), kind="parallel"))
    a = np.zeros((4, 6), np.int32)
    compiled = run(f, a)
    np.testing.assert_array_equal(a, np.arange(4)[:, None] * 10 + np.arange(6))
    assert compiled.source_ir.count("call void @\"tir_parallel_launch\"") == 1


def test_thread_binding_is_a_build_error():
    A = decl_buffer((4,), "float32", "A")
    i = Var("i")
    f = lowered([A], For(i, IntImm(0), IntImm(4), "thread_binding", store(A, f32(0), i),
                         "threadIdx.x"))
    with pytest.raises(BuildError, match="threadIdx.x"):
        codegen(f)


# ---------------------------------------------------------------------------------------------
# dtypes, casts, arithmetic
# ---------------------------------------------------------------------------------------------

def _elementwise(dtypes_in, dtypes_out, fn, n):
    ins = [decl_buffer((n,), d, f"in{k}") for k, d in enumerate(dtypes_in)]
    outs = [decl_buffer((n,), d, f"out{k}") for k, d in enumerate(dtypes_out)]
    i = Var("i")
    values = fn(i, ins, outs)
    body = seq(*[store(o, v, i) for o, v in zip(outs, values)])
    return lowered(ins + outs, loop(i, n, body))


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bool"])
def test_arithmetic_each_dtype(dtype):
    a = np.array([-3, -1, 0, 1, 2, 5, 7, 9]).astype(dtype)
    if dtype == "uint8":
        a = np.array([0, 1, 2, 5, 7, 9, 200, 255], np.uint8)
    b = (np.array([2, 3, 1, 4, 5, 2, 3, 7])).astype(dtype)

    def fn(i, ins, outs):
        x, y = ins[0][i], ins[1][i]
        return [x * y - x + y, binary("min", x, y), binary("max", x, y)]

    f = _elementwise([dtype, dtype], [dtype] * 3, fn, 8)
    outs = [np.zeros(8, dtype) for _ in range(3)]
    with np.errstate(over="ignore"):
        expected = [a * b - a + b, np.minimum(a, b), np.maximum(a, b)]
    run(f, a, b, *outs)
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3)


def test_bool_logic():
    def fn(i, ins, outs):
        x, y = ins[0][i], ins[1][i]
        return [x & y, x | ~y, compare("!=", x, y)]

    f = _elementwise(["bool", "bool"], ["bool"] * 3, fn, 4)
    x = np.array([True, True, False, False])
    y = np.array([True, False, True, False])
    outs = [np.zeros(4, bool) for _ in range(3)]
    run(f, x, y, *outs)
    np.testing.assert_array_equal(outs[0], x & y)
    np.testing.assert_array_equal(outs[1], x | ~y)
    np.testing.assert_array_equal(outs[2], x != y)


def _cast_source(src, dst):
    if src == "bool":
        return np.array([True, False, True, True, False, False])
    if src.startswith("float"):
        vals = [-3.7, -1.0, 0.0, 0.5, 2.5, 7.9]
        if dst in ("uint8", "bool"):
            vals = [abs(v) for v in vals]
        return np.array(vals, src)
    vals = [-5, -1, 0, 1, 3, 100]
    if src == "uint8":
        vals = [0, 1, 3, 100, 200, 255]
    return np.array(vals).astype(src)


@pytest.mark.parametrize("src", DTYPES)
def test_casts_from_each_dtype(src):
    dsts = [d for d in DTYPES if d != src]
    f = _elementwise([src], dsts, lambda i, ins, outs: [cast(d, ins[0][i]) for d in dsts], 6)
    outs = [np.zeros(6, d) for d in dsts]
    a = _cast_source(src, "bool")
    run(f, a, *outs)
    for d, got in zip(dsts, outs):
        with np.errstate(invalid="ignore", over="ignore"):
            want = a.astype(d)
        np.testing.assert_array_equal(got, want, err_msg=f"cast {src} -> {d}")


def test_float_to_int_truncates_toward_zero():
    f = _elementwise(["float32"], ["int32", "int8"],
                     lambda i, ins, outs: [cast("int32", ins[0][i]), cast("int8", ins[0][i])], 4)
    a = np.array([-2.7, -0.5, 0.9, 3.99], np.float32)
    o32, o8 = np.zeros(4, np.int32), np.zeros(4, np.int8)
    run(f, a, o32, o8)
    np.testing.assert_array_equal(o32, [-2, 0, 0, 3])
    np.testing.assert_array_equal(o8, [-2, 0, 0, 3])


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "float32",
                                   "float64"])
def test_floordiv_floormod_negative(dtype):
    if dtype == "uint8":
        a = np.array([0, 7, 9, 200, 255, 13], np.uint8)
        b = np.array([3, 2, 5, 7, 16, 13], np.uint8)
    else:
        a = np.array([-7, 7, -7, 7, -6, 0, -1, 5]).astype(dtype)
        b = np.array([2, -2, -2, 2, 3, -3, 4, -4]).astype(dtype)
    n = len(a)
    f = _elementwise([dtype, dtype], [dtype, dtype],
                     lambda i, ins, outs: [ins[0][i] // ins[1][i], ins[0][i] % ins[1][i]], n)
    q, r = np.zeros(n, dtype), np.zeros(n, dtype)
    run(f, a, b, q, r)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)


_REFERENCE = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "erf": np.vectorize(math.erf), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "cos": np.cos,
}


@pytest.mark.parametrize("kind", ["serial", "vectorized"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_each_intrinsic(dtype, kind):
    names = list(_REFERENCE) + ["pow"]
    n = 8
    X = decl_buffer((n,), dtype, "X")
    Y = decl_buffer((n,), dtype, "Y")
    outs = [decl_buffer((n,), dtype, f"o_{name}") for name in names]
    i = Var("i")
    body = seq(*[store(o, call(name, X[i], Y[i]) if name == "pow" else call(name, X[i]), i)
                 for o, name in zip(outs, names)])
    f = lowered([X, Y] + outs, loop(i, n, body, kind=kind))
    x = np.array([0.25, 0.5, 1.5, 2.5, 0.7, 1.0, 3.2, 1.9], dtype)
    y = np.array([2.0, 0.5, 1.5, 3.0, 1.0, 2.0, 0.3, 1.1], dtype)
    results = [np.zeros(n, dtype) for _ in names]
    run(f, x, y, *results)
    rtol = 2e-3 if dtype == "float16" else 1e-5
    for name, got in zip(names, results):
        x64 = x.astype(np.float64)
        want = np.power(x64, y.astype(np.float64)) if name == "pow" else _REFERENCE[name](x64)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol,
                                   err_msg=f"intrinsic {name} on {dtype}")


def test_round_is_half_to_even():
    f = _elementwise(["float32"], ["float32"], lambda i, ins, o: [call("round", ins[0][i])], 6)
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.6], np.float32)
    out = np.zeros(6, np.float32)
    run(f, x, out)
    np.testing.assert_array_equal(out, np.round(x))


# ---------------------------------------------------------------------------------------------
# errors, source and cross compilation
# ---------------------------------------------------------------------------------------------

def test_unlowered_function_is_rejected():
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(BuildError, match="not lowered"):
        codegen(te.create_prim_func([A, B]))


def test_blocks_left_in_a_lowered_function_are_rejected():
    A = decl_buffer((4,), "float32", "A")
    block = Block("b", (), (), (), store(A, f32(0), 0))
    f = lowered([A], BlockRealize((), IntImm(1, "bool"), block))
    with pytest.raises(BuildError, match="blocks"):
        codegen(f)


def test_undefined_variable_and_dynamic_shape_are_rejected():
    A = decl_buffer((4,), "float32", "A")
    v = Var("v")
    with pytest.raises(BuildError, match="variable v"):
        codegen(lowered([A], store(A, f32(0), v)))
    n = Var("n")
    D = decl_buffer((n,), "float32", "D")
    with pytest.raises(BuildError, match="buffer D"):
        codegen(lowered([D], store(D, f32(0), 0)))


def test_cross_target_emits_object_but_does_not_run():
    A = decl_buffer((16,), "float32", "A")
    i = Var("i")
    f = lowered([A], loop(i, 16, store(A, A[i] * f32(2), i), kind="vectorized"))
    target = LLVMTarget(mtriple="aarch64-unknown-linux-gnu", mcpu="cortex-a72")
    compiled = compile_module(codegen(f, options=CodegenOptions(triple=target.triple)), target)
    assert compiled.object_code[:4] == b"\x7fELF"
    assert "aarch64" in compiled.llvm_ir
    assert "fmul" in compiled.assembly() or "fadd" in compiled.assembly()
    with pytest.raises(BuildError, match="cannot run"):
        compiled.jit()
