"""The operator table of the Ansor and MetaSchedule evaluations, written with our own ``te``.

One shape per operator class, the ones TVM's MetaSchedule testing package lists first (or the
index the papers' CPU table uses), so that our times compare with TVM's tuned times for the
same computation (``../shared/anchors/tvm_table.py`` tunes TVM on them).  Each entry builds the
computation the way TVM's definition does -- the same layouts (NHWC/NLC/NDHWC data, HWIO
weights), the same padding and dilation stages, TBG's transposes as stages of their own -- so
the search starts from the same program.

    from benchmarks.op_table import TABLE, make
    w = make("TBG")             # Workload(name, func, reference, flops, bytes)
    out = w.reference(*inputs)  # numpy, float64 inside

``python -m benchmarks.op_table`` builds each one's default schedule, runs it on random inputs
and compares with numpy: a quick check that the table itself is right.
"""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tensor_ir import te
from tensor_ir.func import PrimFunc
from tensor_ir.ops.norm import softmax as _softmax
from tensor_ir.ops.utils import pad_nd


@dataclass(frozen=True)
class Workload:
    """A table entry: ``func`` (inputs then output), ``reference(*inputs) -> output``,
    ``flops`` (multiply-adds count 2) and ``bytes`` (each parameter read or written once)."""

    name: str
    what: str
    func: PrimFunc
    reference: Callable[..., np.ndarray]
    flops: float
    bytes: float


def _f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _windows(padded: np.ndarray, spatial_axes, kernel, stride, dilation, out_sizes):
    """padded[..., h*s + r*d, ...] for every output position and kernel offset, as a view
    with the kernel offsets appended after the output's spatial axes."""
    views = padded
    for ax, k, s, d, o in zip(spatial_axes, kernel, stride, dilation, out_sizes):
        idx = (np.arange(o) * s)[:, None] + (np.arange(k) * d)[None, :]
        views = np.take(views, idx, axis=ax)  # ax -> (o, k)
        # np.take put (o, k) at ax; move k to the end so that later axes keep their numbers
        views = np.moveaxis(views, ax + 1, -1)
    return views


def _conv_nhwc_like(data, weight, stride, padding, dilation, groups, nspatial):
    """Reference for TVM's NLC/NHWC/NDHWC convolution with (k..., CI/groups, CO) weights."""
    data, weight = _f64(data, weight)
    pads = [(0, 0)] + [(padding, padding)] * nspatial + [(0, 0)]
    padded = np.pad(data, pads)
    kernel = weight.shape[:nspatial]
    out = [(data.shape[1 + i] + 2 * padding - dilation * (kernel[i] - 1) - 1) // stride + 1
           for i in range(nspatial)]
    win = _windows(padded, list(range(1, 1 + nspatial)), kernel, [stride] * nspatial,
                   [dilation] * nspatial, out)  # [N, o..., CI, k...]
    ci, co = data.shape[-1], weight.shape[-1]
    cig, cog = ci // groups, co // groups
    outs = []
    sp = "".join("hwd"[i] for i in range(nspatial))
    ks = "".join("rst"[i] for i in range(nspatial))
    for g in range(groups):
        # win: n, o..., c, k... ; the channel axis sits after the output's spatial axes
        x = np.take(win, np.arange(g * cig, (g + 1) * cig), axis=1 + nspatial)
        wg = weight[..., g * cog:(g + 1) * cog]
        outs.append(np.einsum(f"n{sp}c{ks},{ks}co->n{sp}o", x, wg))
    return np.concatenate(outs, axis=-1)


def _pad(t, before, after, name):
    return pad_nd(t, before, after, value=0.0, name=name)


# --- the operators, as TVM's te_workload defines them ---------------------------------------

def conv1d_nlc(N, L, CI, CO, k, stride, pad, dilation=1, groups=1):
    x = te.placeholder((N, L, CI), name="inputs")
    w = te.placeholder((k, CI // groups, CO), name="weight")
    out_l = (L + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    cig, cog = CI // groups, CO // groups
    rl = te.reduce_axis(k, name="rl")
    rc = te.reduce_axis(cig, name="rc")
    p = _pad(x, (0, pad, 0), (0, pad, 0), "pad_temp")
    y = te.compute((N, out_l, CO), lambda n, pos, co: te.sum(
        p[n, pos * stride + rl * dilation, co // cog * cig + rc] * w[rl, rc, co], axis=[rl, rc]),
        name="conv1d_nlc")
    func = te.create_prim_func([x, w, y], name="conv1d_nlc")
    ref = lambda a, b: _conv_nhwc_like(a, b, stride, pad, dilation, groups, 1)
    return func, ref, 2.0 * N * out_l * CO * k * cig


def conv2d_nhwc(N, H, W, CI, CO, k, stride, pad, dilation=1, groups=1):
    x = te.placeholder((N, H, W, CI), name="inputs")
    w = te.placeholder((k, k, CI // groups, CO), name="weight")
    oh = (H + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    ow = (W + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    cig, cog = CI // groups, CO // groups
    rh, rw, rc = te.reduce_axis(k, "rh"), te.reduce_axis(k, "rw"), te.reduce_axis(cig, "rc")
    p = _pad(x, (0, pad, pad, 0), (0, pad, pad, 0), "pad_temp")
    y = te.compute((N, oh, ow, CO), lambda n, h, ww, co: te.sum(
        p[n, h * stride + rh * dilation, ww * stride + rw * dilation, co // cog * cig + rc]
        * w[rh, rw, rc, co], axis=[rh, rw, rc]), name="conv2d_nhwc")
    func = te.create_prim_func([x, w, y], name="conv2d_nhwc")
    ref = lambda a, b: _conv_nhwc_like(a, b, stride, pad, dilation, groups, 2)
    return func, ref, 2.0 * N * oh * ow * CO * k * k * cig


def conv3d_ndhwc(N, D, H, W, CI, CO, k, stride, pad):
    x = te.placeholder((N, D, H, W, CI), name="inputs")
    w = te.placeholder((k, k, k, CI, CO), name="weight")
    od, oh, ow = ((s + 2 * pad - k) // stride + 1 for s in (D, H, W))
    rd, rh, rw = te.reduce_axis(k, "rd"), te.reduce_axis(k, "rh"), te.reduce_axis(k, "rw")
    rc = te.reduce_axis(CI, "rc")
    p = _pad(x, (0, pad, pad, pad, 0), (0, pad, pad, pad, 0), "pad_temp")
    y = te.compute((N, od, oh, ow, CO), lambda n, d, h, ww, co: te.sum(
        p[n, d * stride + rd, h * stride + rh, ww * stride + rw, rc] * w[rd, rh, rw, rc, co],
        axis=[rd, rh, rw, rc]), name="conv3d_ndhwc")
    func = te.create_prim_func([x, w, y], name="conv3d_ndhwc")
    ref = lambda a, b: _conv_nhwc_like(a, b, stride, pad, 1, 1, 3)
    return func, ref, 2.0 * N * od * oh * ow * CO * k ** 3 * CI


def batch_matmul_nkkm(B, N, M, K):
    x = te.placeholder((B, N, K), name="X")
    y = te.placeholder((B, K, M), name="Y")
    k = te.reduce_axis(K, "k")
    z = te.compute((B, N, M), lambda b, i, j: te.sum(x[b, i, k] * y[b, k, j], axis=k), name="Z")
    func = te.create_prim_func([x, y, z], name="batch_matmul")
    return func, lambda a, b: np.matmul(*_f64(a, b)), 2.0 * B * N * M * K


def depthwise_conv2d_nhwc(N, H, W, C, k, stride, pad):
    x = te.placeholder((N, H, W, C), name="inputs")
    w = te.placeholder((1, k, k, C), name="weight")
    oh = (H + 2 * pad - k) // stride + 1
    ow = (W + 2 * pad - k) // stride + 1
    rh, rw = te.reduce_axis(k, "rh"), te.reduce_axis(k, "rw")
    p = _pad(x, (0, pad, pad, 0), (0, pad, pad, 0), "pad_temp")
    y = te.compute((N, oh, ow, C), lambda n, h, ww, c: te.sum(
        p[n, h * stride + rh, ww * stride + rw, c] * w[0, rh, rw, c], axis=[rh, rw]),
        name="depth_conv2d_nhwc")
    func = te.create_prim_func([x, w, y], name="depthwise_conv2d_nhwc")

    def ref(a, b):
        a, b = _f64(a, b)
        padded = np.pad(a, [(0, 0), (pad, pad), (pad, pad), (0, 0)])
        win = _windows(padded, [1, 2], (k, k), (stride, stride), (1, 1), (oh, ow))
        return np.einsum("nhwcrs,rsc->nhwc", win, b[0])
    return func, ref, 2.0 * N * oh * ow * C * k * k


def conv2d_transpose_nhwc(N, H, W, CI, CO, k, stride, pad):
    """TVM's form: pad the input, dilate it by the stride (zeros between rows/columns, as a
    select on the index), then a plain convolution with the kernel flipped."""
    x = te.placeholder((N, H, W, CI), name="inputs")
    w = te.placeholder((k, k, CI, CO), name="weight")
    bpad = k - 1 - pad
    border = (stride - bpad % stride) % stride
    ext = (bpad + stride - 1) // stride
    p = _pad(x, (0, ext, ext, 0), (0, ext, ext, 0), "pad_temp")
    oh = (H - 1) * stride - 2 * pad + k
    ow = (W - 1) * stride - 2 * pad + k
    rc, rh, rw = te.reduce_axis(CI, "rc"), te.reduce_axis(k, "rh"), te.reduce_axis(k, "rw")

    def dilated(n, yy, xx, c):
        on_grid = te.all(te.floormod(yy, stride) == 0, te.floormod(xx, stride) == 0)
        return te.if_then_else(on_grid, p[n, te.floordiv(yy, stride), te.floordiv(xx, stride), c],
                               te.const(0.0, "float32"))

    y = te.compute((N, oh, ow, CO), lambda n, h, ww, co: te.sum(
        dilated(n, h + rh + border, ww + rw + border, rc) * w[k - 1 - rh, k - 1 - rw, rc, co],
        axis=[rh, rw, rc]), name="conv2d_transpose_nhwc")
    func = te.create_prim_func([x, w, y], name="conv2d_transpose_nhwc")

    def ref(a, b):
        a, b = _f64(a, b)
        full = np.zeros((N, (H - 1) * stride + k, (W - 1) * stride + k, CO))
        for r in range(k):
            for s in range(k):
                full[:, r:r + (H - 1) * stride + 1:stride, s:s + (W - 1) * stride + 1:stride] += \
                    np.einsum("nhwc,co->nhwo", a, b[r, s])
        return full[:, pad:pad + oh, pad:pad + ow]
    return func, ref, 2.0 * N * H * W * CI * CO * k * k


def conv2d_capsule_nhwijc(N, H, W, CI, CO, k, stride, pad, cap=4):
    x = te.placeholder((N, H, W, cap, cap, CI), name="inputs")
    w = te.placeholder((k, k, cap, cap, CI, CO), name="weight")
    oh = (H + 2 * pad - k) // stride + 1
    ow = (W + 2 * pad - k) // stride + 1
    rh, rw = te.reduce_axis(k, "rh"), te.reduce_axis(k, "rw")
    ck, rc = te.reduce_axis(cap, "cap_k"), te.reduce_axis(CI, "rc")
    p = _pad(x, (0, pad, pad, 0, 0, 0), (0, pad, pad, 0, 0, 0), "pad_temp")
    y = te.compute((N, oh, ow, cap, cap, CO), lambda n, h, ww, ci, cj, co: te.sum(
        p[n, h * stride + rh, ww * stride + rw, ci, ck, rc] * w[rh, rw, ck, cj, rc, co],
        axis=[rh, rw, ck, rc]), name="conv2d_capsule_nhwijc")
    func = te.create_prim_func([x, w, y], name="conv2d_capsule")

    def ref(a, b):
        a, b = _f64(a, b)
        padded = np.pad(a, [(0, 0), (pad, pad), (pad, pad), (0, 0), (0, 0), (0, 0)])
        win = _windows(padded, [1, 2], (k, k), (stride, stride), (1, 1), (oh, ow))
        # win: n, h, w, i, kk, c, r, s
        return np.einsum("nhwikcrs,rskjco->nhwijo", win, b)
    return func, ref, 2.0 * N * oh * ow * cap * cap * CO * k * k * cap * CI


def norm_bmn(B, M, N):
    a = te.placeholder((B, M, N), name="A")
    i, j = te.reduce_axis(M, "i"), te.reduce_axis(N, "j")
    c = te.compute((B,), lambda b: te.sum(a[b, i, j] * a[b, i, j], axis=[i, j]), name="C")
    d = te.compute((B,), lambda b: te.sqrt(c[b]), name="D")
    func = te.create_prim_func([a, d], name="norm")
    return func, lambda x: np.sqrt((_f64(x)[0] ** 2).sum(axis=(1, 2))), 2.0 * B * M * N


def softmax_mn(M, N):
    func = _softmax((M, N), axis=1)

    def ref(x):
        x = _f64(x)[0]
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return func, ref, 4.0 * M * N


def conv2d_nhwc_bn_relu(N, H, W, CI, CO, k, stride, pad):
    x = te.placeholder((N, H, W, CI), name="data")
    w = te.placeholder((k, k, CI, CO), name="kernel")
    bias = te.placeholder((CO,), name="bias")
    scale = te.placeholder((CO,), name="bn_scale")
    offset = te.placeholder((CO,), name="bn_offset")
    oh = (H + 2 * pad - k) // stride + 1
    ow = (W + 2 * pad - k) // stride + 1
    ry, rx, rc = te.reduce_axis(k, "ry"), te.reduce_axis(k, "rx"), te.reduce_axis(CI, "rc")
    p = _pad(x, (0, pad, pad, 0), (0, pad, pad, 0), "PaddedInput")
    conv = te.compute((N, oh, ow, CO), lambda n, h, ww, f: te.sum(
        p[n, h * stride + ry, ww * stride + rx, rc] * w[ry, rx, rc, f], axis=[ry, rx, rc]),
        name="Conv2dOutput")
    b1 = te.compute(conv.shape, lambda *i: conv[i] + bias[i[3]], name="bias_add")
    b2 = te.compute(conv.shape, lambda *i: b1[i] * scale[i[3]], name="bn_mul")
    b3 = te.compute(conv.shape, lambda *i: b2[i] + offset[i[3]], name="bn_add")
    out = te.compute(conv.shape, lambda *i: te.max(b3[i], te.const(0.0, "float32")), name="relu")
    # TVM's argument order: data, kernel, bias, bn_offset, bn_scale, out
    func = te.create_prim_func([x, w, bias, offset, scale, out], name="conv2d_bn_relu")

    def ref(a, b, bi, off, sc):
        y = _conv_nhwc_like(a, b, stride, pad, 1, 1, 2)
        return np.maximum((y + bi) * sc + off, 0.0)
    return func, ref, 2.0 * N * oh * ow * CO * k * k * CI


def transpose_batch_matmul(B, S, H, D):
    """Attention scores: O[b, h, i, j] = sum_d Q[b, i, h, d] * K[b, j, h, d], with TVM's
    transposes of Q and K as stages of their own (the search inlines them)."""
    q = te.placeholder((B, S, H, D), name="query")
    v = te.placeholder((B, S, H, D), name="value")
    q_t = te.compute((B, H, S, D), lambda b, h, s, d: q[b, s, h, d], name="query_T")
    v_t = te.compute((B, H, D, S), lambda b, h, d, s: v[b, s, h, d], name="value_T")
    k = te.reduce_axis(D, "k")
    out = te.compute((B, H, S, S), lambda b, h, i, j: te.sum(q_t[b, h, i, k] * v_t[b, h, k, j],
                                                            axis=k), name="C")
    func = te.create_prim_func([q, v, out], name="transpose_batch_matmul")

    def ref(a, b):
        a, b = _f64(a, b)
        return np.einsum("bihd,bjhd->bhij", a, b)
    return func, ref, 2.0 * B * H * S * S * D


# name -> (what, maker, arguments): TVM's te_workload classes at the table's index
TABLE = {
    "C1D": ("conv1d NLC 1x256x64 -> 128, k3 s2 p1", conv1d_nlc, (1, 256, 64, 128, 3, 2, 1)),
    "C2D": ("conv2d NHWC 1x224x224x3 -> 64, k7 s2 p3", conv2d_nhwc, (1, 224, 224, 3, 64, 7, 2, 3)),
    "C3D": ("conv3d NDHWC 1x16x56x56x64 -> 64, k1", conv3d_ndhwc, (1, 16, 56, 56, 64, 64, 1, 1, 0)),
    "GMM": ("batch matmul 1x1024x1024x1024", batch_matmul_nkkm, (1, 1024, 1024, 1024)),
    "GRP": ("grouped conv2d NHWC 1x56x56x64 -> 128, k3 s2 p1, 4 groups", conv2d_nhwc,
            (1, 56, 56, 64, 128, 3, 2, 1, 1, 4)),
    "DIL": ("dilated conv2d NHWC 1x14x14x256 -> 256, k3 p1 d2", conv2d_nhwc,
            (1, 14, 14, 256, 256, 3, 1, 1, 2)),
    "DEP": ("depthwise conv2d NHWC 1x112x112x32, k3 p1", depthwise_conv2d_nhwc,
            (1, 112, 112, 32, 3, 1, 1)),
    "T2D": ("transposed conv2d NHWC 1x4x4x512 -> 256, k4 s2 p1", conv2d_transpose_nhwc,
            (1, 4, 4, 512, 256, 4, 2, 1)),
    "CAP": ("capsule conv2d 1x16x16x4x4x32 -> 32, k3 s2 p1", conv2d_capsule_nhwijc,
            (1, 16, 16, 32, 32, 3, 2, 1)),
    "NRM": ("2-norm of 1x1024x1024", norm_bmn, (1, 1024, 1024)),
    "SFM": ("softmax 1024x1024", softmax_mn, (1024, 1024)),
    "CBR": ("conv2d + bias + bn + relu NHWC 1x56x56x64 -> 128, k3 s2 p1", conv2d_nhwc_bn_relu,
            (1, 56, 56, 64, 128, 3, 2, 1)),
    "TBG": ("attention scores Q K^T, 1x128x12x64 (BSHD)", transpose_batch_matmul,
            (1, 128, 12, 64)),
}
# TVM's index into each class's shape list (the anchor's workload names: "C2D#0", ...)
TVM_INDEX = {"C1D": 0, "C2D": 0, "C3D": 1, "GMM": 3, "GRP": 0, "DIL": 2, "DEP": 0, "T2D": 0,
             "CAP": 0, "NRM": 2, "SFM": 2, "CBR": 1, "TBG": 0}


def make(name: str) -> Workload:
    if name not in TABLE:
        raise KeyError(f"unknown table workload {name!r}; known: {', '.join(TABLE)}")
    what, maker, args = TABLE[name]
    func, ref, flops = maker(*args)
    nbytes = sum(4 * math.prod(p.const_shape) for p in func.params)
    return Workload(name, what, func, ref, flops, float(nbytes))


def random_inputs(w: Workload, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(p.const_shape)).astype(p.dtype) for p in w.func.params[:-1]]


def relative_error(w: Workload, func: PrimFunc, seed: int = 0) -> float:
    """Build ``func`` (a program of ``w``), run it on random inputs and return its largest
    error relative to the largest value of the numpy reference."""
    import autotune

    kernel = autotune.build(func, "llvm")
    inputs = random_inputs(w, seed)
    out_buf = func.params[-1]
    out = np.zeros(tuple(out_buf.const_shape), dtype=out_buf.dtype)
    kernel(*inputs, out)
    ref = w.reference(*inputs)
    return float(np.max(np.abs(out - ref)) / (np.max(np.abs(ref)) + 1e-30))


def tolerance(w: Workload) -> float:
    """The error a correct program of ``w`` may show: the tuner's own output check (wider for
    long reductions, whose float32 serial sum is itself inexact: NRM sums a million terms)."""
    from autotune.measure.runner import reduction_rtol

    return reduction_rtol(w.func)


def check_default(name: str) -> dict:
    """Build ``name``'s default schedule, run it, compare with numpy."""
    import time

    w = make(name)
    t0 = time.perf_counter()
    err = relative_error(w, w.func)
    return {"workload": name, "rel_err": err, "ok": err < tolerance(w),
            "build_and_run_s": round(time.perf_counter() - t0, 2)}


def main(argv=None) -> int:
    names = (argv or sys.argv[1:]) or list(TABLE)
    rows = [check_default(n) for n in names]
    print(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
