"""The reference interpreter against numpy: te programs, hand-built loop nests, typed errors."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensor_ir import interp, te
from tensor_ir.buffer import decl_buffer
from tensor_ir.expr import (
    INTRINSICS, BinOp, BufferLoad, Call, Cast, FloatImm, Var, cast, const, select,
)
from tensor_ir.func import PrimFunc
from tensor_ir.interp import ArgumentError, InterpError, OutOfBoundsError
from tensor_ir.lower import lower
from tensor_ir.stmt import (
    Allocate, BufferStore, Evaluate, For, IfThenElse, LetStmt, SeqStmt, seq,
)

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32", lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def loop(var, extent, body, kind="serial", lo=0, thread=None):
    return For(var, const(lo), const(extent), kind, body, thread)


def matmul_func(m, n, k):
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def check_both(func, inputs, expected, rtol=1e-5, atol=1e-6):
    """Unlowered and lowered forms both match ``expected``."""
    for f in (func, lower(func)):
        outs = interp.evaluate(f, *inputs)
        got = outs[0] if len(outs) == 1 else outs
        if isinstance(expected, tuple):
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# te programs vs numpy
# ---------------------------------------------------------------------------------------------

def test_matmul_matches_numpy():
    func = matmul_func(4, 5, 6)
    a, b = rand(4, 6), rand(6, 5)
    check_both(func, (a, b), a @ b)


def test_run_writes_outputs_in_place():
    func = matmul_func(3, 3, 3)
    a, b = rand(3, 3), rand(3, 3)
    c = np.full((3, 3), 7.0, dtype="float32")
    assert interp.run(func, a, b, c) is None
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_relu_of_matmul_with_bias():
    m, n, k = 5, 7, 3
    A = te.placeholder((m, k), "float32", name="A")
    W = te.placeholder((k, n), "float32", name="W")
    bias = te.placeholder((n,), "float32", name="bias")
    r = te.reduce_axis(k, name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j] + bias[j], const(0.0, "float32")),
                   name="D")
    func = te.create_prim_func([A, W, bias, D])
    a, w, b = rand(m, k), rand(k, n), rand(n)
    check_both(func, (a, w, b), np.maximum(a @ w + b, 0))


def test_reductions_max_min_and_custom_reducer():
    A = te.placeholder((6, 8), "float32", name="A")
    r1 = te.reduce_axis(8, name="r1")
    r2 = te.reduce_axis(8, name="r2")
    r3 = te.reduce_axis(8, name="r3")
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")
    mx = te.compute((6,), lambda i: te.max(A[i, r1], axis=r1), name="mx")
    mn = te.compute((6,), lambda i: te.min(A[i, r2], axis=r2), name="mn")
    pr = te.compute((6,), lambda i: prod(A[i, r3], axis=r3), name="pr")
    func = te.create_prim_func([A, mx, mn, pr])
    a = rand(6, 8, lo=0.5, hi=1.5)
    check_both(func, (a,), (a.max(1), a.min(1), a.prod(1, dtype="float32")))


def test_reduction_with_where_and_offset_axis():
    A = te.placeholder((10,), "float32", name="A")
    r = te.reduce_axis((2, 9), name="r")
    S = te.compute((1,), lambda i: te.sum(A[r], axis=r, where=te.equal(r % 2, 0)), name="S")
    func = te.create_prim_func([A, S])
    a = rand(10)
    check_both(func, (a,), np.array([a[2:9:2].sum()], dtype="float32"))


def test_padding_with_if_then_else_is_lazy():
    # The padded load A[i - 1] is out of bounds exactly where the condition is false: only a
    # lazy Select runs this program.
    n, kw = 8, 3
    A = te.placeholder((n,), "float32", name="A")
    W = te.placeholder((kw,), "float32", name="W")
    P = te.compute((n + 2,), lambda i: te.if_then_else(
        te.all(i >= 1, i < n + 1), A[i - 1], const(0.0, "float32")), name="P")
    r = te.reduce_axis(kw, name="r")
    Y = te.compute((n,), lambda i: te.sum(P[i + r] * W[r], axis=r), name="Y")
    func = te.create_prim_func([A, W, Y])
    a, w = rand(n), rand(kw)
    padded = np.pad(a, 1)
    expected = np.array([(padded[i:i + kw] * w).sum() for i in range(n)], dtype="float32")
    check_both(func, (a, w), expected)


def test_floordiv_floormod_index_expressions():
    A = te.placeholder((12,), "float32", name="A")
    B = te.compute((3, 4), lambda i, j: A[(i * 4 + j + 5) % 12], name="B")
    C = te.compute((12,), lambda i: B[i // 4, i % 4] * 2.0, name="C")
    func = te.create_prim_func([A, C])
    a = rand(12)
    expected = (a[(np.arange(12) + 5) % 12] * 2).astype("float32")
    check_both(func, (a,), expected)


def test_floor_semantics_on_negative_values():
    # (i - 5) // 3 and (i - 5) % 3 for i in 0..9 round toward negative infinity.
    n = 10
    Q = decl_buffer((n,), "int64", "Q")
    R = decl_buffer((n,), "int64", "R")
    i = Var("i")
    body = loop(i, n, seq(BufferStore(Q, BinOp("//", i - 5, const(3)), (i,)),
                          BufferStore(R, BinOp("%", i - 5, const(-3)), (i,))))
    q, r = interp.evaluate(PrimFunc((Q, R), body))
    np.testing.assert_array_equal(q, (np.arange(n) - 5) // 3)
    np.testing.assert_array_equal(r, (np.arange(n) - 5) % -3)


def test_casts_truncate_toward_zero_and_ints_wrap():
    A = te.placeholder((6,), "float32", name="A")
    X = te.placeholder((6,), "int8", name="X")
    Y = te.placeholder((6,), "int8", name="Y")
    U = te.placeholder((6,), "uint8", name="U")
    T = te.compute((6,), lambda i: A[i].astype("int32"), name="T")
    S = te.compute((6,), lambda i: X[i] + Y[i], name="S")
    M = te.compute((6,), lambda i: X[i] * Y[i], name="M")
    D = te.compute((6,), lambda i: U[i] - const(200, "uint8"), name="D")
    W = te.compute((6,), lambda i: (X[i].astype("int32") * 1000).astype("int8"), name="W")
    F = te.compute((6,), lambda i: X[i].astype("float32") * 0.5, name="F")
    func = te.create_prim_func([A, X, Y, U, T, S, M, D, W, F])
    a = np.array([-2.7, -0.5, 0.0, 0.9, 3.99, -100.2], dtype="float32")
    x = np.array([127, -128, 100, -100, 5, 1], dtype="int8")
    y = np.array([1, -1, 100, -100, -7, 0], dtype="int8")
    u = np.array([0, 199, 200, 255, 1, 10], dtype="uint8")
    with np.errstate(over="ignore"):
        expected = (np.trunc(a).astype("int32"), x + y, x * y, u - np.uint8(200),
                    (x.astype("int32") * 1000).astype("int8"), x.astype("float32") * 0.5)
    for f in (func, lower(func)):
        for got, want in zip(interp.evaluate(f, a, x, y, u), expected):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def test_int64_arithmetic_wraps():
    big = 2 ** 62
    O = decl_buffer((4,), "int64", "O")
    i = Var("i")
    body = loop(i, 4, BufferStore(O, i * const(big) + const(big), (i,)))
    (out,) = interp.evaluate(PrimFunc((O,), body))
    with np.errstate(over="ignore"):
        expected = np.arange(4, dtype="int64") * np.int64(big) + np.int64(big)
    np.testing.assert_array_equal(out, expected)


def test_float32_math_rounds_in_float32():
    # 1 + 2**-30 is 1 in float32; float64 math would keep the difference.
    A = te.placeholder((1,), "float32", name="A")
    B = te.compute((1,), lambda i: (A[i] + const(2.0 ** -30, "float32")) - A[i], name="B")
    (out,) = interp.evaluate(te.create_prim_func([A, B]), np.ones(1, "float32"))
    assert out[0] == 0.0


def _numpy_intrinsic(name, x, y=None):
    table = {
        "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v),
        "tanh": np.tanh, "erf": np.vectorize(math.erf), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.round,
        "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "cos": np.cos,
    }
    if name == "pow":
        return np.power(x, y)
    return table[name](x)


@pytest.mark.parametrize("name", sorted(INTRINSICS))
def test_every_intrinsic(name):
    positive = name in ("log", "log2", "sqrt", "rsqrt", "pow")
    x = rand(9, lo=0.1, hi=2.0) if positive else rand(9, lo=-2.0, hi=2.0)
    x[0] = 2.5 if not positive else x[0]  # a half-way case for round (ties to even)
    y = rand(9, lo=-1.5, hi=1.5)
    X = te.placeholder((9,), "float32", name="X")
    Y = te.placeholder((9,), "float32", name="Y")
    if INTRINSICS[name] == 2:
        R = te.compute((9,), lambda i: Call(name, (X[i], Y[i]), "float32"), name="R")
        func, inputs = te.create_prim_func([X, Y, R]), (x, y)
        expected = _numpy_intrinsic(name, x, y)
    else:
        R = te.compute((9,), lambda i: Call(name, (X[i],), "float32"), name="R")
        func, inputs = te.create_prim_func([X, R]), (x,)
        expected = _numpy_intrinsic(name, x)
    (out,) = interp.evaluate(func, *inputs)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected.astype("float32"), rtol=2e-6, atol=1e-7)


def test_float64_intrinsic_keeps_dtype():
    X = te.placeholder((3,), "float64", name="X")
    R = te.compute((3,), lambda i: te.exp(X[i]) + te.erf(X[i]), name="R")
    x = np.array([0.1, 0.2, 0.3])
    (out,) = interp.evaluate(te.create_prim_func([X, R]), x)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, np.exp(x) + np.vectorize(math.erf)(x), rtol=1e-14)


def test_float_min_max_propagate_nan():
    A = te.placeholder((3,), "float32", name="A")
    B = te.placeholder((3,), "float32", name="B")
    MX = te.compute((3,), lambda i: te.max(A[i], B[i]), name="MX")
    MN = te.compute((3,), lambda i: te.min(A[i], B[i]), name="MN")
    a = np.array([np.nan, 1.0, 2.0], dtype="float32")
    b = np.array([0.0, np.nan, 3.0], dtype="float32")
    mx, mn = interp.evaluate(te.create_prim_func([A, B, MX, MN]), a, b)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["int8", "int16", "int32", "uint8"]),
       st.sampled_from(["+", "-", "*", "//", "%", "min", "max"]),
       st.lists(st.integers(-(2 ** 31), 2 ** 31 - 1), min_size=8, max_size=8),
       st.lists(st.integers(-(2 ** 31), 2 ** 31 - 1), min_size=8, max_size=8))
def test_integer_ops_match_numpy(dtype, op, xs, ys):
    info = np.iinfo(dtype)
    x = np.array([v % (int(info.max) - int(info.min) + 1) + int(info.min) for v in xs], dtype)
    y = np.array([v % (int(info.max) - int(info.min) + 1) + int(info.min) for v in ys], dtype)
    if op in ("//", "%"):
        y[y == 0] = 3
    X = decl_buffer((8,), dtype, "X")
    Y = decl_buffer((8,), dtype, "Y")
    Z = decl_buffer((8,), dtype, "Z")
    i = Var("i")
    body = loop(i, 8, BufferStore(Z, BinOp(op, X[i], Y[i]), (i,)))
    (z,) = interp.evaluate(PrimFunc((X, Y, Z), body), x, y)
    numpy_op = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
                "%": np.remainder, "min": np.minimum, "max": np.maximum}[op]
    with np.errstate(over="ignore", divide="ignore"):
        np.testing.assert_array_equal(z, numpy_op(x, y))


# ---------------------------------------------------------------------------------------------
# Hand-built lowered programs
# ---------------------------------------------------------------------------------------------

def test_every_loop_kind_runs_serially_with_same_result():
    A = decl_buffer((4, 8), "float32", "A")
    B = decl_buffer((4, 8), "float32", "B")
    i, j, jo, ji = Var("i"), Var("j"), Var("jo"), Var("ji")
    store = BufferStore(B, A[i, jo * 4 + ji] * 2.0, (i, jo * 4 + ji))
    body = For(i, const(0), const(4), "thread_binding",
               For(jo, const(0), const(2), "parallel",
                   For(ji, const(0), const(4), "vectorized", store)), "threadIdx.x")
    a = rand(4, 8)
    (b,) = interp.evaluate(PrimFunc((A, B), body), a)
    np.testing.assert_allclose(b, a * 2)
    unrolled = For(i, const(0), const(4), "unrolled", For(j, const(0), const(8), "serial",
                   BufferStore(B, A[i, j] * 2.0, (i, j)), annotations=(("pragma", 1),)))
    (b2,) = interp.evaluate(PrimFunc((A, B), unrolled), a)
    np.testing.assert_array_equal(b, b2)


def test_nonzero_loop_min_let_if_else_and_allocate():
    A = decl_buffer((10,), "float32", "A")
    B = decl_buffer((10,), "float32", "B")
    T = decl_buffer((1,), "float32", "T", scope="local")
    i, t = Var("i"), Var("t", "float32")
    body = SeqStmt((
        For(i, const(0), const(2), "serial", BufferStore(B, const(-1.0, "float32"), (i,))),
        For(i, const(2), const(8), "serial",
            Allocate(T, seq(
                BufferStore(T, A[i] * 3.0, (const(0),)),
                LetStmt(t, T[0] - 1.0,
                        IfThenElse(te.equal(i % 2, 0), BufferStore(B, t, (i,)),
                                   BufferStore(B, -t, (i,)))),
                Evaluate(const(0)),
            ))),
    ))
    a = rand(10)
    b = np.zeros(10, "float32")
    interp.run(PrimFunc((A, B), body), a, b)
    expected = np.zeros(10, "float32")
    expected[:2] = -1
    for k in range(2, 10):
        v = np.float32(a[k] * np.float32(3)) - np.float32(1)
        expected[k] = v if k % 2 == 0 else -v
    np.testing.assert_array_equal(b, expected)


def test_allocated_buffer_starts_as_nan_and_sentinel():
    F = decl_buffer((3,), "float32", "F")
    I = decl_buffer((3,), "int32", "I")
    Tf = decl_buffer((3,), "float32", "Tf")
    Ti = decl_buffer((3,), "int32", "Ti")
    i = Var("i")
    body = Allocate(Tf, Allocate(Ti, loop(i, 3, seq(
        BufferStore(F, Tf[i], (i,)), BufferStore(I, Ti[i], (i,))))))
    f, v = interp.evaluate(PrimFunc((F, I), body))
    assert np.isnan(f).all()
    assert (v == np.iinfo("int32").min).all()


def test_symbolic_shape_is_bound_from_arrays():
    n = Var("n")
    A = decl_buffer((n, 2), "float32", "A")
    B = decl_buffer((n, 2), "float32", "B")
    i, j = Var("i"), Var("j")
    body = For(i, const(0), n, "serial", loop(j, 2, BufferStore(B, A[i, j] + 1.0, (i, j))))
    func = PrimFunc((A, B), body)
    for rows in (1, 5):
        a = rand(rows, 2)
        (b,) = interp.evaluate(func, a)
        np.testing.assert_allclose(b, a + 1)
    with pytest.raises(ArgumentError, match="shape variable n"):
        interp.run(func, rand(3, 2), np.zeros((4, 2), "float32"))


def test_deep_loop_nest_and_deep_expression_are_outlined():
    # 24 nested loops exceed CPython's 20 nested blocks; a 150-term chain exceeds the
    # tokenizer's parenthesis limit if emitted in one expression.
    vars_ = [Var(f"l{d}") for d in range(24)]
    O = decl_buffer((2,), "float32", "O")
    A = decl_buffer((2,), "float32", "A")
    total = A[vars_[-1]]
    for _ in range(150):
        total = total + A[vars_[-1]]
    stmt = BufferStore(O, total, (vars_[-1],))
    for d, v in reversed(list(enumerate(vars_))):
        stmt = loop(v, 2 if d == len(vars_) - 1 else 1, stmt)
    a = np.array([1.0, 2.0], "float32")
    (o,) = interp.evaluate(PrimFunc((A, O), stmt), a)
    np.testing.assert_array_equal(o, a * 151)
    assert "def _f" in interp.python_source(PrimFunc((A, O), stmt))


def test_float_division_by_zero_is_ieee():
    A = te.placeholder((2,), "float32", name="A")
    B = te.compute((2,), lambda i: A[i] / const(0.0, "float32"), name="B")
    (b,) = interp.evaluate(te.create_prim_func([A, B]), np.array([1.0, -1.0], "float32"))
    np.testing.assert_array_equal(b, [np.inf, -np.inf])


def test_unlowered_and_lowered_agree_on_multistage():
    A = te.placeholder((4, 6), "float32", name="A")
    r = te.reduce_axis(6, name="r")
    M = te.compute((4,), lambda i: te.max(A[i, r], axis=r), name="M")
    E = te.compute((4, 6), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    r2 = te.reduce_axis(6, name="r2")
    S = te.compute((4,), lambda i: te.sum(E[i, r2], axis=r2), name="S")
    Y = te.compute((4, 6), lambda i, j: E[i, j] / S[i], name="Y")
    func = te.create_prim_func([A, Y])
    a = rand(4, 6)
    e = np.exp(a - a.max(1, keepdims=True))
    expected = e / e.sum(1, keepdims=True)
    (y1,) = interp.evaluate(func, a)
    (y2,) = interp.evaluate(lower(func), a)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, expected, rtol=1e-5)


def test_matmul_32_is_fast():
    func = matmul_func(32, 32, 32)
    a, b = rand(32, 32), rand(32, 32)
    start = time.perf_counter()
    (c,) = interp.evaluate(func, a, b)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)
    assert elapsed < 1.0, f"32x32x32 matmul took {elapsed:.2f}s in the interpreter"


def test_compiled_code_is_cached_per_function():
    func = matmul_func(2, 2, 2)
    assert interp.python_source(func) is interp.python_source(func)
    assert "for" in interp.python_source(func)


# ---------------------------------------------------------------------------------------------
# Typed errors
# ---------------------------------------------------------------------------------------------

def shifted_copy(shift):
    A = decl_buffer((4,), "float32", "A")
    B = decl_buffer((4,), "float32", "B")
    i = Var("i")
    return PrimFunc((A, B), loop(i, 4, BufferStore(B, A[i + shift], (i,))))


def test_out_of_bounds_load_names_buffer_and_index():
    with pytest.raises(OutOfBoundsError, match=r"A\[4\].*shape \(4,\).*i=3"):
        interp.evaluate(shifted_copy(1), rand(4))


def test_negative_index_is_not_wrapped():
    with pytest.raises(IndexError, match=r"A\[-1\]"):
        interp.evaluate(shifted_copy(-1), rand(4))


def test_out_of_bounds_store():
    A = decl_buffer((4,), "float32", "A")
    i = Var("i")
    func = PrimFunc((A,), loop(i, 5, BufferStore(A, const(1.0, "float32"), (i,))))
    with pytest.raises(OutOfBoundsError, match=r"store to A\[4\]"):
        interp.run(func, np.zeros(4, "float32"))
    assert issubclass(OutOfBoundsError, InterpError)


def test_out_of_bounds_with_data_dependent_index():
    idx = decl_buffer((3,), "int32", "idx")
    A = decl_buffer((5,), "float32", "A")
    B = decl_buffer((3,), "float32", "B")
    i = Var("i")
    func = PrimFunc((idx, A, B), loop(i, 3, BufferStore(B, A[cast("int64", idx[i])], (i,))))
    (b,) = interp.evaluate(func, np.array([4, 0, 2], "int32"), np.arange(5, dtype="float32"))
    np.testing.assert_array_equal(b, [4, 0, 2])
    with pytest.raises(OutOfBoundsError, match=r"A\[5\]"):
        interp.evaluate(func, np.array([1, 5, 2], "int32"), np.zeros(5, "float32"))


@pytest.mark.parametrize("arrays, message", [
    ((np.zeros((4, 6), "float32"),), "takes 3 arrays"),
    ((np.zeros((4, 6), "float64"), np.zeros((6, 5), "float32"), np.zeros((4, 5), "float32")),
     "argument 0 \\(A\\): expected dtype float32, got float64"),
    ((np.zeros((4, 6), "float32"), np.zeros((5, 6), "float32"), np.zeros((4, 5), "float32")),
     "argument 1 \\(B\\): expected shape \\(6, 5\\)"),
    ((np.zeros((4, 6), "float32"), np.zeros(30, "float32"), np.zeros((4, 5), "float32")),
     "argument 1 \\(B\\): expected 2 dimensions"),
    (([[0.0] * 6] * 4, np.zeros((6, 5), "float32"), np.zeros((4, 5), "float32")),
     "expected a numpy array, got list"),
])
def test_wrong_arguments(arrays, message):
    func = matmul_func(4, 5, 6)
    with pytest.raises(ArgumentError, match=message):
        interp.run(func, *arrays)


def test_evaluate_with_too_many_inputs():
    func = matmul_func(2, 2, 2)
    with pytest.raises(ArgumentError, match="takes 3 arrays"):
        interp.evaluate(func, *(np.zeros((2, 2), "float32"),) * 4)


def test_integer_division_by_zero_and_invalid_cast():
    X = decl_buffer((2,), "int32", "X")
    Y = decl_buffer((2,), "int32", "Y")
    i = Var("i")
    div = PrimFunc((X, Y), loop(i, 2, BufferStore(Y, BinOp("//", X[i], X[i]), (i,))))
    # numpy's integer semantics, as compiled code computes it: x // 0 == 0, no error.
    (y,) = interp.evaluate(div, np.array([1, 0], "int32"))
    np.testing.assert_array_equal(y, [1, 0])
    F = decl_buffer((2,), "float32", "F")
    to_int = PrimFunc((F, Y), loop(i, 2, BufferStore(Y, Cast("int32", F[i]), (i,))))
    with pytest.raises(InterpError, match="not finite"):
        interp.evaluate(to_int, np.array([1.0, np.nan], "float32"))
    with pytest.raises(InterpError, match="out of the int32 range"):
        interp.evaluate(to_int, np.array([1.0, 3e9], "float32"))


def test_malformed_programs_are_rejected():
    A = decl_buffer((2,), "float32", "A")
    i, stray = Var("i"), Var("stray")
    free = PrimFunc((A,), loop(i, 2, BufferStore(A, const(0.0, "float32"), (stray,))))
    with pytest.raises(InterpError, match="variable stray"):
        interp.run(free, np.zeros(2, "float32"))
    other = decl_buffer((2,), "float32", "Other")
    unknown = PrimFunc((A,), loop(i, 2, BufferStore(A, other[i], (i,))))
    with pytest.raises(InterpError, match="buffer Other"):
        interp.run(unknown, np.zeros(2, "float32"))
    wrong_dtype = PrimFunc((A,), loop(i, 2, BufferStore(A, FloatImm(1.0, "float64"), (i,))))
    with pytest.raises(InterpError, match="value is float64"):
        interp.run(wrong_dtype, np.zeros(2, "float32"))
    rank = PrimFunc((A,), loop(i, 2, BufferStore(A, BufferLoad(A, (i, i)), (i,))))
    with pytest.raises(InterpError, match="2 indices for a buffer of rank 1"):
        interp.run(rank, np.zeros(2, "float32"))


def test_select_only_evaluates_taken_branch_in_lowered_code():
    A = decl_buffer((4,), "float32", "A")
    B = decl_buffer((6,), "float32", "B")
    i = Var("i")
    value = select(i < 4, A[i], const(-1.0, "float32"))
    func = PrimFunc((A, B), loop(i, 6, BufferStore(B, value, (i,))))
    a = rand(4)
    (b,) = interp.evaluate(func, a)
    np.testing.assert_array_equal(b, np.concatenate([a, [-1, -1]]).astype("float32"))
