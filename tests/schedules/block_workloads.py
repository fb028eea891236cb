"""Workloads (te definitions with numpy references) and the two-oracle check shared by the
block-primitive tests: every transformed program must match numpy through the interpreter and
through an LLVM build."""
from __future__ import annotations

import numpy as np

import autotune
from tensor_ir import interp, te


def matmul(m=16, n=16, k=16, relu=False):
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    if relu:
        D = te.compute((m, n), lambda i, j: te.max(C[i, j], te.const(0.0, "float32")), name="D")
        func = te.create_prim_func([A, B, D])
    else:
        func = te.create_prim_func([A, B, C])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    ref = a @ b
    if relu:
        ref = np.maximum(ref, 0)
    return func, [a, b], [ref]


def conv2d(n=1, c=3, h=8, w=8, f=4, kh=3, kw=3):
    """NCHW conv2d, stride 1, padding 1, with an explicit padding stage ``pad``."""
    data = te.placeholder((n, c, h, w), "float32", name="data")
    weight = te.placeholder((f, c, kh, kw), "float32", name="weight")
    pad = te.compute(
        (n, c, h + 2, w + 2),
        lambda b, ch, y, x: te.if_then_else(
            te.all(y >= 1, y < h + 1, x >= 1, x < w + 1), data[b, ch, y - 1, x - 1],
            te.const(0.0, "float32")),
        name="pad")
    rc = te.reduce_axis(c, name="rc")
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    out = te.compute(
        (n, f, h, w),
        lambda b, o, y, x: te.sum(pad[b, rc, y + ry, x + rx] * weight[o, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv")
    func = te.create_prim_func([data, weight, out])
    rng = np.random.default_rng(1)
    d = rng.standard_normal((n, c, h, w)).astype("float32")
    wt = rng.standard_normal((f, c, kh, kw)).astype("float32")
    padded = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((n, f, h, w), "float32")
    for y in range(kh):
        for x in range(kw):
            ref += np.einsum("bchw,oc->bohw", padded[:, :, y:y + h, x:x + w], wt[:, :, y, x])
    return func, [d, wt], [ref]


def softmax(m=8, n=16):
    X = te.placeholder((m, n), "float32", name="X")
    k1 = te.reduce_axis(n, name="k1")
    mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="maxelem")
    ex = te.compute((m, n), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis(n, name="k2")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="expsum")
    out = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="norm")
    func = te.create_prim_func([X, out])
    x = np.random.default_rng(2).standard_normal((m, n)).astype("float32")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return func, [x], [e / e.sum(axis=1, keepdims=True)]


def layer_norm(m=8, n=16, eps=1e-5):
    X = te.placeholder((m, n), "float32", name="X")
    gamma = te.placeholder((n,), "float32", name="gamma")
    beta = te.placeholder((n,), "float32", name="beta")
    k1 = te.reduce_axis(n, name="k1")
    s = te.compute((m,), lambda i: te.sum(X[i, k1], axis=k1), name="xsum")
    k2 = te.reduce_axis(n, name="k2")
    sq = te.compute((m,), lambda i: te.sum(X[i, k2] * X[i, k2], axis=k2), name="sqsum")
    inv_n = 1.0 / n

    def norm(i, j):
        mean = s[i] * inv_n
        var = sq[i] * inv_n - mean * mean
        return (X[i, j] - mean) * te.rsqrt(var + eps) * gamma[j] + beta[j]

    out = te.compute((m, n), norm, name="ln")
    func = te.create_prim_func([X, gamma, beta, out])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, n)).astype("float32")
    g = rng.standard_normal(n).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    mu = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return func, [x, g, b], [(x - mu) / np.sqrt(var + eps) * g + b]


def check(func, inputs, refs, rtol=1e-4, atol=1e-4, llvm=True):
    """``func`` matches ``refs`` through the interpreter and (unless ``llvm=False``) an LLVM
    build."""
    outs = interp.evaluate(func, *inputs)
    for got, ref in zip(outs, refs):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    if llvm:
        kernel = autotune.build(func)
        arrays = [np.array(a) for a in inputs] + [np.zeros_like(r) for r in refs]
        kernel(*arrays)
        for got, ref in zip(arrays[len(inputs):], refs):
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
