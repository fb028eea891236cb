"""Small workloads for schedule tests, each with its numpy reference, and numeric checkers.

Written with te directly (not tensor_ir.ops) so the block and loop names the tests address
are fixed here.
"""
from __future__ import annotations

import numpy as np

from tensor_ir import interp, te
from tensor_ir.func import PrimFunc


def matmul(m: int = 8, n: int = 12, k: int = 6) -> tuple[PrimFunc, callable]:
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C]), lambda a, b: a @ b


def matmul_relu(m: int = 8, n: int = 8, k: int = 4) -> tuple[PrimFunc, callable]:
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return te.create_prim_func([A, B, D]), lambda a, b: np.maximum(a @ b, 0)


def conv2d(n=1, c=2, h=5, w=5, f=3, r=3, pad=1) -> tuple[PrimFunc, callable]:
    """NCHW conv2d with zero padding done in a separate stage (as topi does)."""
    X = te.placeholder((n, c, h, w), "float32", name="X")
    W = te.placeholder((f, c, r, r), "float32", name="W")
    hp, wp = h + 2 * pad, w + 2 * pad
    P = te.compute((n, c, hp, wp), lambda b, ci, y, x: te.if_then_else(
        te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
        X[b, ci, y - pad, x - pad], 0.0), name="pad")
    oh, ow = hp - r + 1, wp - r + 1
    rc = te.reduce_axis(c, name="rc")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(r, name="rx")
    Y = te.compute((n, f, oh, ow), lambda b, fo, y, x: te.sum(
        P[b, rc, y + ry, x + rx] * W[fo, rc, ry, rx], axis=[rc, ry, rx]), name="conv")

    def ref(x, wt):
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((n, f, oh, ow), np.float32)
        for dy in range(r):
            for dx in range(r):
                out += np.einsum("bchw,fc->bfhw", xp[:, :, dy:dy + oh, dx:dx + ow],
                                 wt[:, :, dy, dx])
        return out

    return te.create_prim_func([X, W, Y]), ref


def softmax(m: int = 4, n: int = 6) -> tuple[PrimFunc, callable]:
    X = te.placeholder((m, n), "float32", name="X")
    k1 = te.reduce_axis(n, name="k1")
    mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="maxelem")
    e = te.compute((m, n), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis(n, name="k2")
    s = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="expsum")
    y = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="norm")

    def ref(x):
        z = np.exp(x - x.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    return te.create_prim_func([X, y]), ref


def layer_norm(m: int = 4, n: int = 8) -> tuple[PrimFunc, callable]:
    X = te.placeholder((m, n), "float32", name="X")
    G = te.placeholder((n,), "float32", name="G")
    k1 = te.reduce_axis(n, name="k1")
    s = te.compute((m,), lambda i: te.sum(X[i, k1], axis=k1), name="rowsum")
    k2 = te.reduce_axis(n, name="k2")
    sq = te.compute((m,), lambda i: te.sum(X[i, k2] * X[i, k2], axis=k2), name="rowsq")
    y = te.compute((m, n), lambda i, j: (X[i, j] - s[i] / float(n)) * te.rsqrt(
        sq[i] / float(n) - (s[i] / float(n)) * (s[i] / float(n)) + 1e-5) * G[j], name="ln")

    def ref(x, g):
        mu = x.mean(axis=1, keepdims=True)
        var = (x * x).mean(axis=1, keepdims=True) - mu * mu
        return (x - mu) / np.sqrt(var + 1e-5) * g

    return te.create_prim_func([X, G, y]), ref


def elementwise_chain(m: int = 6, n: int = 5) -> tuple[PrimFunc, callable]:
    X = te.placeholder((m, n), "float32", name="X")
    a = te.compute((m, n), lambda i, j: X[i, j] * 2.0, name="scale")
    b = te.compute((m, n), lambda i, j: a[i, j] + 1.0, name="shift")
    c = te.compute((m, n), lambda i, j: te.max(b[i, j], 0.0), name="relu")
    return te.create_prim_func([X, c]), lambda x: np.maximum(x * 2 + 1, 0)


WORKLOADS = {"matmul": matmul, "matmul_relu": matmul_relu, "conv2d": conv2d,
             "softmax": softmax, "layer_norm": layer_norm, "elementwise": elementwise_chain}


def random_inputs(func: PrimFunc, seed: int = 0) -> list[np.ndarray]:
    """Random arrays for every parameter but the last (the output)."""
    rng = np.random.default_rng(seed)
    out = []
    for buf in func.params[:-1]:
        out.append(rng.uniform(-1, 1, buf.const_shape).astype(buf.dtype))
    return out


def check_interp(func: PrimFunc, ref, seed: int = 0) -> None:
    inputs = random_inputs(func, seed)
    (got,) = interp.evaluate(func, *inputs)
    np.testing.assert_allclose(got, ref(*inputs), rtol=1e-4, atol=1e-4)


def check_llvm(func: PrimFunc, ref, seed: int = 0) -> None:
    import autotune

    inputs = random_inputs(func, seed)
    out_buf = func.params[-1]
    out = np.zeros(out_buf.const_shape, out_buf.dtype)
    autotune.build(func)(*inputs, out)
    np.testing.assert_allclose(out, ref(*inputs), rtol=1e-4, atol=1e-4)
