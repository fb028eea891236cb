"""Operators no library test defines, written by a user with te, build and run correctly."""
from __future__ import annotations

import numpy as np

import autotune
from tensor_ir import interp, te


def test_fused_relu_matmul_bias_scale():
    M, N, K = 37, 20, 13
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    scale = te.placeholder((M,), name="scale")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.max(C[i, j] + bias[j], 0.0) * scale[i], name="D")
    func = te.create_prim_func([A, B, bias, scale, D])

    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((M, K), "float32"), rng.standard_normal((K, N), "float32")
    bb, s = rng.standard_normal(N, "float32"), rng.uniform(0.5, 2, M).astype("float32")
    expected = np.maximum(a @ b + bb, 0) * s[:, None]

    out = np.empty((M, N), "float32")
    autotune.build(func)(a, b, bb, s, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    (ref,) = interp.evaluate(func, a, b, bb, s)
    np.testing.assert_allclose(ref, expected, rtol=1e-5, atol=1e-5)


def test_floormod_index_expression_roll_and_gather():
    # A circular shift with a negative offset plus a strided gather: floor semantics matter.
    n = 23
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[te.floormod(i - 5, n)] * 2.0 + X[(i * 3) % n], name="Y")
    Z = te.compute((n // 2,), lambda i: Y[te.floordiv(i * 7, 3) % n], name="Z")
    func = te.create_prim_func([X, Z])

    x = np.arange(n, dtype="float32")
    y = np.roll(x, 5) * 2 + x[(np.arange(n) * 3) % n]
    expected = y[((np.arange(n // 2) * 7) // 3) % n]

    out = np.empty(n // 2, "float32")
    autotune.build(func)(x, out)
    np.testing.assert_allclose(out, expected)
    np.testing.assert_allclose(interp.evaluate(func, x)[0], expected)
