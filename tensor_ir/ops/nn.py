"""Neural-network operators: matmul, batch_matmul, dense, convolutions and pooling.

Every operator comes at two levels, each beside its numpy reference:

* ``te_<op>(tensors..., attrs)`` takes and returns ``te.Tensor`` so that graph-level fusion can
  compose several operators into one PrimFunc;
* ``<op>(shape ints..., attrs, dtype="float32")`` returns a PrimFunc whose parameters are the
  inputs followed by the output;
* ``ref_<op>(arrays..., attrs)`` computes the same result with numpy (in float64, cast back to
  the input dtype) and is what tests and the measurement check compare against.

Layouts follow TVM's topi: conv2d NCHW data with OIHW weights, conv2d NHWC data with HWIO
weights, depthwise NCHW with (C, multiplier, R, S) weights, conv2d_transpose with IOHW weights
(in channels first).  Padding is an int, (pad_h, pad_w) or (top, left, bottom, right).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..func import PrimFunc
from .utils import (
    as_tensor_args, canonical_dtype, check, conv_out_size, pad_nd, padding4, pair,
    positive_ints, reduce_max, to_float,
)

__all__ = [
    "te_matmul", "matmul", "ref_matmul",
    "te_batch_matmul", "batch_matmul", "ref_batch_matmul",
    "te_dense", "dense", "ref_dense",
    "te_conv2d_nchw", "conv2d_nchw", "ref_conv2d_nchw",
    "te_conv2d_nhwc", "conv2d_nhwc", "ref_conv2d_nhwc",
    "te_depthwise_conv2d_nchw", "depthwise_conv2d_nchw", "ref_depthwise_conv2d_nchw",
    "te_conv2d_transpose_nchw", "conv2d_transpose_nchw", "ref_conv2d_transpose_nchw",
    "te_max_pool2d", "max_pool2d", "ref_max_pool2d",
    "te_avg_pool2d", "avg_pool2d", "ref_avg_pool2d",
    "te_global_avg_pool2d", "global_avg_pool2d", "ref_global_avg_pool2d",
]


def _rank(t: te.Tensor, ndim: int, op: str, what: str) -> None:
    check(t.ndim == ndim, op, f"{what} must have rank {ndim}, got shape {t.shape}")


def _same_dtype(op: str, *tensors: te.Tensor) -> None:
    dtypes = {t.dtype for t in tensors}
    check(len(dtypes) == 1, op, f"inputs have different dtypes {sorted(dtypes)}")


def _operands(op: str, rank: int, **tensors: te.Tensor) -> None:
    """Tensors of one dtype, each of ``rank`` dimensions (named by keyword in messages)."""
    as_tensor_args(tuple(tensors.values()), op)
    for what, t in tensors.items():
        _rank(t, rank, op, what)
    _same_dtype(op, *tensors.values())


def _check_groups(op: str, groups, c: int, k_out: int | None = None,
                  c_group: int | None = None) -> None:
    """``groups`` divides the input channels (and, given a weight, its output channels, and
    the weight holds ``c // groups`` input channels)."""
    check(isinstance(groups, int) and groups >= 1, op, f"groups must be a positive int, got "
          f"{groups!r}")
    check(c % groups == 0, op, f"input channels {c} are not divisible by groups={groups}")
    if k_out is None:
        return
    check(k_out % groups == 0, op, f"output channels {k_out} are not divisible by "
          f"groups={groups}")
    check(c_group == c // groups, op, f"weight has {c_group} input channels per group but data "
          f"has {c} channels in {groups} group(s) ({c // groups} per group)")


def _cast_back(result: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(result).astype(like.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# matmul / batch_matmul / dense
# ---------------------------------------------------------------------------------------------

def te_matmul(a: te.Tensor, b: te.Tensor, transpose_a: bool = False,
              transpose_b: bool = False, name: str = "matmul") -> te.Tensor:
    """C[M, N] = op(A) @ op(B); A is [M, K] ([K, M] when transpose_a), B is [K, N] ([N, K]
    when transpose_b)."""
    op = "matmul"
    _operands(op, 2, A=a, B=b)
    m, ka = (a.shape[1], a.shape[0]) if transpose_a else a.shape
    kb, n = (b.shape[1], b.shape[0]) if transpose_b else b.shape
    check(ka == kb, op, f"reduction extents differ: A gives K={ka}, B gives K={kb}")
    k = te.reduce_axis(ka, name="k")

    def fcompute(i, j):
        lhs = a[k, i] if transpose_a else a[i, k]
        rhs = b[j, k] if transpose_b else b[k, j]
        return te.sum(lhs * rhs, axis=k)

    return te.compute((m, n), fcompute, name=name)


def matmul(M: int, N: int, K: int, transpose_a: bool = False, transpose_b: bool = False,
           dtype: str = "float32") -> PrimFunc:
    M, N, K = positive_ints((M, N, K), "matmul", "M, N, K")
    dtype = canonical_dtype(dtype, "matmul")
    a = te.placeholder((K, M) if transpose_a else (M, K), dtype, name="A")
    b = te.placeholder((N, K) if transpose_b else (K, N), dtype, name="B")
    c = te_matmul(a, b, transpose_a, transpose_b, name="C")
    return te.create_prim_func([a, b, c], name="matmul")


def ref_matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
               transpose_b: bool = False) -> np.ndarray:
    lhs = a.T if transpose_a else a
    rhs = b.T if transpose_b else b
    return _cast_back(lhs.astype(np.float64) @ rhs.astype(np.float64), a)


def te_batch_matmul(a: te.Tensor, b: te.Tensor, transpose_a: bool = False,
                    transpose_b: bool = False, name: str = "batch_matmul") -> te.Tensor:
    """C[B, M, N] = op(A[b]) @ op(B[b]); a batch extent of 1 on either side broadcasts."""
    op = "batch_matmul"
    _operands(op, 3, A=a, B=b)
    ba, bb = a.shape[0], b.shape[0]
    check(ba == bb or ba == 1 or bb == 1, op,
          f"batch extents {ba} and {bb} differ and neither is 1")
    m, ka = (a.shape[2], a.shape[1]) if transpose_a else (a.shape[1], a.shape[2])
    kb, n = (b.shape[2], b.shape[1]) if transpose_b else (b.shape[1], b.shape[2])
    check(ka == kb, op, f"reduction extents differ: A gives K={ka}, B gives K={kb}")
    k = te.reduce_axis(ka, name="k")

    def fcompute(bi, i, j):
        ia = 0 if ba == 1 else bi
        ib = 0 if bb == 1 else bi
        lhs = a[ia, k, i] if transpose_a else a[ia, i, k]
        rhs = b[ib, j, k] if transpose_b else b[ib, k, j]
        return te.sum(lhs * rhs, axis=k)

    return te.compute((max(ba, bb), m, n), fcompute, name=name)


def batch_matmul(B: int, M: int, N: int, K: int, transpose_a: bool = False,
                 transpose_b: bool = False, dtype: str = "float32") -> PrimFunc:
    B, M, N, K = positive_ints((B, M, N, K), "batch_matmul", "B, M, N, K")
    dtype = canonical_dtype(dtype, "batch_matmul")
    a = te.placeholder((B, K, M) if transpose_a else (B, M, K), dtype, name="A")
    b = te.placeholder((B, N, K) if transpose_b else (B, K, N), dtype, name="B")
    c = te_batch_matmul(a, b, transpose_a, transpose_b, name="C")
    return te.create_prim_func([a, b, c], name="batch_matmul")


def ref_batch_matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
                     transpose_b: bool = False) -> np.ndarray:
    lhs = np.swapaxes(a, 1, 2) if transpose_a else a
    rhs = np.swapaxes(b, 1, 2) if transpose_b else b
    return _cast_back(np.matmul(lhs.astype(np.float64), rhs.astype(np.float64)), a)


def te_dense(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
             name: str = "dense") -> te.Tensor:
    """out[M, N] = data[M, K] @ weight[N, K]^T (+ bias[N])."""
    op = "dense"
    as_tensor_args((data, weight) + ((bias,) if bias is not None else ()), op)
    _rank(data, 2, op, "data")
    _rank(weight, 2, op, "weight")
    _same_dtype(op, data, weight, *((bias,) if bias is not None else ()))
    m, k_extent = data.shape
    n, kw = weight.shape
    check(k_extent == kw, op, f"reduction extents differ: data has K={k_extent}, weight has "
          f"K={kw}")
    if bias is not None:
        check(bias.shape == (n,), op, f"bias must have shape ({n},), got {bias.shape}")
    k = te.reduce_axis(k_extent, name="k")
    matmul_name = name if bias is None else f"{name}_matmul"
    out = te.compute((m, n), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k),
                     name=matmul_name)
    if bias is None:
        return out
    # NOTE: the bias is a separate elementwise stage (as in TVM): a reduction must be the
    # whole body of its stage, and auto-inline folds the add into the output store.
    return te.compute((m, n), lambda i, j: out[i, j] + bias[j], name=name)


def dense(M: int, N: int, K: int, bias: bool = False, dtype: str = "float32") -> PrimFunc:
    M, N, K = positive_ints((M, N, K), "dense", "M, N, K")
    dtype = canonical_dtype(dtype, "dense")
    x = te.placeholder((M, K), dtype, name="data")
    w = te.placeholder((N, K), dtype, name="weight")
    if bias:
        b = te.placeholder((N,), dtype, name="bias")
        out = te_dense(x, w, b, name="T_dense")
        return te.create_prim_func([x, w, b, out], name="dense_bias")
    out = te_dense(x, w, name="T_dense")
    return te.create_prim_func([x, w, out], name="dense")


def ref_dense(data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None
              ) -> np.ndarray:
    out = data.astype(np.float64) @ weight.astype(np.float64).T
    if bias is not None:
        out = out + bias.astype(np.float64)
    return _cast_back(out, data)


# ---------------------------------------------------------------------------------------------
# convolutions
# ---------------------------------------------------------------------------------------------

def _conv_attrs(op: str, stride, padding, dilation):
    return pair(stride, op, "stride"), padding4(padding, op), pair(dilation, op, "dilation")


def te_conv2d_nchw(data: te.Tensor, weight: te.Tensor, stride=1, padding=0, dilation=1,
                   groups: int = 1, name: str = "conv2d_nchw") -> te.Tensor:
    """data [N, C, H, W], weight [K, C // groups, R, S] -> out [N, K, OH, OW]."""
    op = "conv2d_nchw"
    _operands(op, 4, data=data, weight=weight)
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = _conv_attrs(op, stride, padding, dilation)
    n, c, h, w = data.shape
    k_out, c_group, r, s = weight.shape
    _check_groups(op, groups, c, k_out, c_group)
    oh = conv_out_size(h, pt, pb, r, sh, dh, op, "height")
    ow = conv_out_size(w, pl, pr, s, sw, dw, op, "width")
    padded = pad_nd(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    rc = te.reduce_axis(c_group, name="rc")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")
    k_per_group = k_out // groups

    def fcompute(nn, ff, yy, xx):
        channel = rc if groups == 1 else (ff // k_per_group) * c_group + rc
        return te.sum(padded[nn, channel, yy * sh + ry * dh, xx * sw + rx * dw]
                      * weight[ff, rc, ry, rx], axis=[rc, ry, rx])

    return te.compute((n, k_out, oh, ow), fcompute, name=name)


def conv2d_nchw(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1, padding=0,
                dilation=1, groups: int = 1, dtype: str = "float32") -> PrimFunc:
    op = "conv2d_nchw"
    N, C, H, W, K, R, S = positive_ints((N, C, H, W, K, R, S), op, "N, C, H, W, K, R, S")
    _check_groups(op, groups, C)
    dtype = canonical_dtype(dtype, op)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    weight = te.placeholder((K, C // groups, R, S), dtype, name="weight")
    out = te_conv2d_nchw(data, weight, stride, padding, dilation, groups, name="conv2d_nchw")
    return te.create_prim_func([data, weight, out], name=op)


def _ref_conv_nchw(padded: np.ndarray, weight: np.ndarray, oh: int, ow: int,
                   stride, dilation, groups: int) -> np.ndarray:
    """Grouped NCHW convolution of an already padded float64 input: one tensordot per kernel
    offset, summed."""
    n, c = padded.shape[:2]
    k_out, c_group, r, s = weight.shape
    sh, sw = stride
    dh, dw = dilation
    out = np.zeros((n, k_out, oh, ow), dtype=np.float64)
    k_group = k_out // groups
    for g in range(groups):
        x = padded[:, g * c_group:(g + 1) * c_group]
        wg = weight[g * k_group:(g + 1) * k_group]
        for y in range(r):
            for z in range(s):
                window = x[:, :, y * dh: y * dh + (oh - 1) * sh + 1: sh,
                           z * dw: z * dw + (ow - 1) * sw + 1: sw]
                # window [n, c, oh, ow] . weight [k, c] -> [n, k, oh, ow]
                out[:, g * k_group:(g + 1) * k_group] += np.einsum(
                    "nchw,kc->nkhw", window, wg[:, :, y, z])
    return out


def ref_conv2d_nchw(data: np.ndarray, weight: np.ndarray, stride=1, padding=0, dilation=1,
                    groups: int = 1) -> np.ndarray:
    op = "ref_conv2d_nchw"
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = _conv_attrs(op, stride, padding, dilation)
    _, _, h, w = data.shape
    _, _, r, s = weight.shape
    oh = conv_out_size(h, pt, pb, r, sh, dh, op, "height")
    ow = conv_out_size(w, pl, pr, s, sw, dw, op, "width")
    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    out = _ref_conv_nchw(padded, weight.astype(np.float64), oh, ow, (sh, sw), (dh, dw), groups)
    return _cast_back(out, data)


def te_conv2d_nhwc(data: te.Tensor, weight: te.Tensor, stride=1, padding=0, dilation=1,
                   groups: int = 1, name: str = "conv2d_nhwc") -> te.Tensor:
    """data [N, H, W, C], weight [R, S, C // groups, K] (HWIO) -> out [N, OH, OW, K]."""
    op = "conv2d_nhwc"
    _operands(op, 4, data=data, weight=weight)
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = _conv_attrs(op, stride, padding, dilation)
    n, h, w, c = data.shape
    r, s, c_group, k_out = weight.shape
    _check_groups(op, groups, c, k_out, c_group)
    oh = conv_out_size(h, pt, pb, r, sh, dh, op, "height")
    ow = conv_out_size(w, pl, pr, s, sw, dw, op, "width")
    padded = pad_nd(data, (0, pt, pl, 0), (0, pb, pr, 0), name="pad_data")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")
    rc = te.reduce_axis(c_group, name="rc")
    k_per_group = k_out // groups

    def fcompute(nn, yy, xx, ff):
        channel = rc if groups == 1 else (ff // k_per_group) * c_group + rc
        return te.sum(padded[nn, yy * sh + ry * dh, xx * sw + rx * dw, channel]
                      * weight[ry, rx, rc, ff], axis=[ry, rx, rc])

    return te.compute((n, oh, ow, k_out), fcompute, name=name)


def conv2d_nhwc(N: int, H: int, W: int, C: int, K: int, R: int, S: int, stride=1, padding=0,
                dilation=1, groups: int = 1, dtype: str = "float32") -> PrimFunc:
    op = "conv2d_nhwc"
    N, H, W, C, K, R, S = positive_ints((N, H, W, C, K, R, S), op, "N, H, W, C, K, R, S")
    _check_groups(op, groups, C)
    dtype = canonical_dtype(dtype, op)
    data = te.placeholder((N, H, W, C), dtype, name="data")
    weight = te.placeholder((R, S, C // groups, K), dtype, name="weight")
    out = te_conv2d_nhwc(data, weight, stride, padding, dilation, groups, name="conv2d_nhwc")
    return te.create_prim_func([data, weight, out], name=op)


def ref_conv2d_nhwc(data: np.ndarray, weight: np.ndarray, stride=1, padding=0, dilation=1,
                    groups: int = 1) -> np.ndarray:
    nchw = np.transpose(data, (0, 3, 1, 2))
    oihw = np.transpose(weight, (3, 2, 0, 1))
    out = ref_conv2d_nchw(nchw, oihw, stride, padding, dilation, groups)
    return np.ascontiguousarray(np.transpose(out, (0, 2, 3, 1)))


def te_depthwise_conv2d_nchw(data: te.Tensor, weight: te.Tensor, stride=1, padding=0,
                             dilation=1, name: str = "depthwise_conv2d_nchw") -> te.Tensor:
    """data [N, C, H, W], weight [C, multiplier, R, S] -> out [N, C * multiplier, OH, OW];
    output channel ``c * multiplier + q`` reads input channel ``c``."""
    op = "depthwise_conv2d_nchw"
    _operands(op, 4, data=data, weight=weight)
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = _conv_attrs(op, stride, padding, dilation)
    n, c, h, w = data.shape
    cw, mult, r, s = weight.shape
    check(cw == c, op, f"weight has {cw} channels but data has {c}")
    oh = conv_out_size(h, pt, pb, r, sh, dh, op, "height")
    ow = conv_out_size(w, pl, pr, s, sw, dw, op, "width")
    padded = pad_nd(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")

    def fcompute(nn, cc, yy, xx):
        ch = cc if mult == 1 else cc // mult
        q = 0 if mult == 1 else cc % mult
        return te.sum(padded[nn, ch, yy * sh + ry * dh, xx * sw + rx * dw]
                      * weight[ch, q, ry, rx], axis=[ry, rx])

    return te.compute((n, c * mult, oh, ow), fcompute, name=name)


def depthwise_conv2d_nchw(N: int, C: int, H: int, W: int, R: int, S: int, multiplier: int = 1,
                          stride=1, padding=0, dilation=1, dtype: str = "float32") -> PrimFunc:
    op = "depthwise_conv2d_nchw"
    N, C, H, W, R, S, multiplier = positive_ints((N, C, H, W, R, S, multiplier), op,
                                                 "N, C, H, W, R, S, multiplier")
    dtype = canonical_dtype(dtype, op)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    weight = te.placeholder((C, multiplier, R, S), dtype, name="weight")
    out = te_depthwise_conv2d_nchw(data, weight, stride, padding, dilation,
                                   name="depthwise_conv2d_nchw")
    return te.create_prim_func([data, weight, out], name=op)


def ref_depthwise_conv2d_nchw(data: np.ndarray, weight: np.ndarray, stride=1, padding=0,
                              dilation=1) -> np.ndarray:
    c, mult, r, s = weight.shape
    # A depthwise convolution is a grouped one with one group per input channel; the
    # (C, multiplier) weight flattens to OIHW in output-channel order c * multiplier + q.
    oihw = weight.reshape(c * mult, 1, r, s)
    return ref_conv2d_nchw(data, oihw, stride, padding, dilation, groups=c)


def _transpose_conv_sizes(op: str, h: int, w: int, r: int, s: int, stride, padding,
                          output_padding):
    sh, sw = pair(stride, op, "stride")
    pt, pl, pb, pr = padding4(padding, op)
    oph, opw = pair(output_padding, op, "output_padding", allow_zero=True)
    check(oph < sh and opw < sw, op, f"output_padding {(oph, opw)} must be smaller than the "
          f"stride {(sh, sw)}")
    oh = (h - 1) * sh - pt - pb + r + oph
    ow = (w - 1) * sw - pl - pr + s + opw
    check(oh > 0 and ow > 0, op, f"output size {(oh, ow)} is not positive: padding "
          f"{(pt, pl, pb, pr)} crops away the whole output")
    return (sh, sw), (pt, pl, pb, pr), (oph, opw), (oh, ow)


def te_conv2d_transpose_nchw(data: te.Tensor, weight: te.Tensor, stride=1, padding=0,
                             output_padding=0, name: str = "conv2d_transpose_nchw"
                             ) -> te.Tensor:
    """data [N, C, H, W], weight [C, K, R, S] -> out [N, K, OH, OW] with
    OH = (H - 1) * stride - pad_top - pad_bottom + R + output_padding.

    As in TVM it is two stages: the input dilated by the stride and padded by R - 1 - pad
    (one Select-guarded stage), then a plain convolution with the flipped kernel.
    """
    op = "conv2d_transpose_nchw"
    _operands(op, 4, data=data, weight=weight)
    n, c, h, w = data.shape
    cw, k_out, r, s = weight.shape
    check(cw == c, op, f"weight has {cw} input channels but data has {c}")
    (sh, sw), (pt, pl, pb, pr), (oph, opw), (oh, ow) = _transpose_conv_sizes(
        op, h, w, r, s, stride, padding, output_padding)
    # Offsets of the dilated input inside the padded buffer; negative when the padding is
    # larger than R - 1, in which case rows are cropped instead (the guard handles both).
    top, left = r - 1 - pt, s - 1 - pl
    dil_h, dil_w = (h - 1) * sh + 1, (w - 1) * sw + 1
    ph, pw = oh + r - 1, ow + s - 1
    zero = to_float(0.0, data.dtype)

    def fpad(nn, cc, yy, xx):
        y = yy - top if top else yy
        x = xx - left if left else xx
        conds = [y >= 0, y < dil_h, x >= 0, x < dil_w]
        if sh > 1:
            conds.append(te.equal(te.floormod(y, sh), 0))
        if sw > 1:
            conds.append(te.equal(te.floormod(x, sw), 0))
        src_y = te.floordiv(y, sh) if sh > 1 else y
        src_x = te.floordiv(x, sw) if sw > 1 else x
        return te.if_then_else(te.all(*conds), data[nn, cc, src_y, src_x], zero)

    padded = te.compute((n, c, ph, pw), fpad, name="data_dilate_pad")
    rc = te.reduce_axis(c, name="rc")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")

    def fcompute(nn, ff, yy, xx):
        return te.sum(padded[nn, rc, yy + ry, xx + rx]
                      * weight[rc, ff, r - 1 - ry, s - 1 - rx], axis=[rc, ry, rx])

    return te.compute((n, k_out, oh, ow), fcompute, name=name)


def conv2d_transpose_nchw(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1,
                          padding=0, output_padding=0, dtype: str = "float32") -> PrimFunc:
    op = "conv2d_transpose_nchw"
    N, C, H, W, K, R, S = positive_ints((N, C, H, W, K, R, S), op, "N, C, H, W, K, R, S")
    dtype = canonical_dtype(dtype, op)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    weight = te.placeholder((C, K, R, S), dtype, name="weight")
    out = te_conv2d_transpose_nchw(data, weight, stride, padding, output_padding,
                                   name="conv2d_transpose_nchw")
    return te.create_prim_func([data, weight, out], name=op)


def ref_conv2d_transpose_nchw(data: np.ndarray, weight: np.ndarray, stride=1, padding=0,
                              output_padding=0) -> np.ndarray:
    op = "ref_conv2d_transpose_nchw"
    n, c, h, w = data.shape
    _, k_out, r, s = weight.shape
    (sh, sw), (pt, pl, _, _), _, (oh, ow) = _transpose_conv_sizes(
        op, h, w, r, s, stride, padding, output_padding)
    # Scatter every input pixel's contribution into an uncropped output, then crop: output
    # row y is full row y + pad_top; rows past the full extent (output_padding) stay zero.
    full_h = max((h - 1) * sh + r, pt + oh)
    full_w = max((w - 1) * sw + s, pl + ow)
    full = np.zeros((n, k_out, full_h, full_w), dtype=np.float64)
    x = data.astype(np.float64)
    wt = weight.astype(np.float64)
    for y in range(r):
        for z in range(s):
            full[:, :, y: y + (h - 1) * sh + 1: sh, z: z + (w - 1) * sw + 1: sw] += np.einsum(
                "nchw,ck->nkhw", x, wt[:, :, y, z])
    return _cast_back(full[:, :, pt:pt + oh, pl:pl + ow], data)


# ---------------------------------------------------------------------------------------------
# pooling (NCHW)
# ---------------------------------------------------------------------------------------------

def _pool_attrs(op: str, kernel, stride, padding):
    kh, kw = pair(kernel, op, "kernel")
    sh, sw = pair(stride, op, "stride")
    pt, pl, pb, pr = padding4(padding, op)
    # NOTE: a window lying entirely in the padding would have no element (max = -inf, average
    # over zero elements); requiring padding < kernel rules that out, as PyTorch does.
    check(max(pt, pb) < kh and max(pl, pr) < kw, op, f"padding {(pt, pl, pb, pr)} must be "
          f"smaller than the kernel {(kh, kw)}")
    return (kh, kw), (sh, sw), (pt, pl, pb, pr)


def pool_sizes(op: str, shape, kernel, stride, padding):
    """(kernel, stride, padding, output size) of a 2-D pooling of NCHW ``shape``, checked
    (``op`` names the operator in errors); the blocked layout's pooling shares it."""
    (kh, kw), (sh, sw), pad = _pool_attrs(op, kernel, stride, padding)
    _, _, h, w = shape
    oh = conv_out_size(h, pad[0], pad[2], kh, sh, 1, op, "height")
    ow = conv_out_size(w, pad[1], pad[3], kw, sw, 1, op, "width")
    return (kh, kw), (sh, sw), pad, (oh, ow)


def te_max_pool2d(data: te.Tensor, kernel, stride=1, padding=0, name: str = "max_pool2d"
                  ) -> te.Tensor:
    """Max pooling of NCHW data; the padding is -inf so it never wins."""
    op = "max_pool2d"
    _operands(op, 4, data=data)
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (oh, ow) = pool_sizes(op, data.shape, kernel,
                                                                 stride, padding)
    padded = pad_nd(data, (0, 0, pt, pl), (0, 0, pb, pr),
                    value=te.min_value(data.dtype), name="pad_data")
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    n, c = data.shape[:2]
    return te.compute(
        (n, c, oh, ow),
        lambda nn, cc, yy, xx: reduce_max(padded[nn, cc, yy * sh + ry, xx * sw + rx],
                                          axis=[ry, rx]),
        name=name)


def max_pool2d(N: int, C: int, H: int, W: int, kernel, stride=1, padding=0,
               dtype: str = "float32") -> PrimFunc:
    op = "max_pool2d"
    N, C, H, W = positive_ints((N, C, H, W), op, "N, C, H, W")
    data = te.placeholder((N, C, H, W), canonical_dtype(dtype, op), name="data")
    out = te_max_pool2d(data, kernel, stride, padding, name="pool_max")
    return te.create_prim_func([data, out], name=op)


def _ref_windows(x: np.ndarray, kernel, stride, out_size):
    (kh, kw), (sh, sw), (oh, ow) = kernel, stride, out_size
    for y in range(kh):
        for z in range(kw):
            yield x[:, :, y: y + (oh - 1) * sh + 1: sh, z: z + (ow - 1) * sw + 1: sw]


def ref_max_pool2d(data: np.ndarray, kernel, stride=1, padding=0) -> np.ndarray:
    kernel, stride, pad, out_size = pool_sizes("ref_max_pool2d", data.shape, kernel, stride,
                                                padding)
    pt, pl, pb, pr = pad
    x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)),
               constant_values=-np.inf)
    out = np.full(data.shape[:2] + out_size, -np.inf)
    for window in _ref_windows(x, kernel, stride, out_size):
        out = np.maximum(out, window)
    return _cast_back(out, data)


def te_avg_pool2d(data: te.Tensor, kernel, stride=1, padding=0, count_include_pad: bool = True,
                  name: str = "avg_pool2d") -> te.Tensor:
    """Average pooling of NCHW data: a sum stage, then a divide stage.  With
    ``count_include_pad=False`` each window is divided by its number of in-bounds elements."""
    op = "avg_pool2d"
    _operands(op, 4, data=data)
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (oh, ow) = pool_sizes(op, data.shape, kernel,
                                                                 stride, padding)
    n, c, h, w = data.shape
    padded = pad_nd(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    pool_sum = te.compute(
        (n, c, oh, ow),
        lambda nn, cc, yy, xx: te.sum(padded[nn, cc, yy * sh + ry, xx * sw + rx],
                                      axis=[ry, rx]),
        name=f"{name}_sum")
    no_pad = not any((pt, pl, pb, pr))
    if count_include_pad or no_pad:
        size = to_float(kh * kw, data.dtype)
        return te.compute((n, c, oh, ow),
                          lambda nn, cc, yy, xx: pool_sum[nn, cc, yy, xx] / size, name=name)

    def favg(nn, cc, yy, xx):
        y0, x0 = yy * sh - pt, xx * sw - pl
        rows = te.min(y0 + kh, h) - te.max(y0, 0)
        cols = te.min(x0 + kw, w) - te.max(x0, 0)
        return pool_sum[nn, cc, yy, xx] / te.cast(data.dtype, rows * cols)

    return te.compute((n, c, oh, ow), favg, name=name)


def avg_pool2d(N: int, C: int, H: int, W: int, kernel, stride=1, padding=0,
               count_include_pad: bool = True, dtype: str = "float32") -> PrimFunc:
    op = "avg_pool2d"
    N, C, H, W = positive_ints((N, C, H, W), op, "N, C, H, W")
    data = te.placeholder((N, C, H, W), canonical_dtype(dtype, op), name="data")
    out = te_avg_pool2d(data, kernel, stride, padding, count_include_pad, name="pool_avg")
    return te.create_prim_func([data, out], name=op)


def ref_avg_pool2d(data: np.ndarray, kernel, stride=1, padding=0,
                   count_include_pad: bool = True) -> np.ndarray:
    kernel, stride, pad, out_size = pool_sizes("ref_avg_pool2d", data.shape, kernel, stride,
                                                padding)
    pt, pl, pb, pr = pad
    widths = ((0, 0), (0, 0), (pt, pb), (pl, pr))
    x = np.pad(data.astype(np.float64), widths)
    ones = np.pad(np.ones((1, 1) + data.shape[2:]), widths)
    total = np.zeros(data.shape[:2] + out_size)
    count = np.zeros((1, 1) + out_size)
    for window, valid in zip(_ref_windows(x, kernel, stride, out_size),
                             _ref_windows(ones, kernel, stride, out_size)):
        total += window
        count += valid
    if count_include_pad:
        count = np.full_like(count, kernel[0] * kernel[1])
    return _cast_back(total / count, data)


def te_global_avg_pool2d(data: te.Tensor, name: str = "global_avg_pool2d") -> te.Tensor:
    """Mean over H and W of NCHW data -> [N, C, 1, 1] (as TVM's adaptive pool to 1x1)."""
    op = "global_avg_pool2d"
    _operands(op, 4, data=data)
    n, c, h, w = data.shape
    ry = te.reduce_axis(h, name="ry")
    rx = te.reduce_axis(w, name="rx")
    pool_sum = te.compute((n, c, 1, 1),
                          lambda nn, cc, yy, xx: te.sum(data[nn, cc, ry, rx], axis=[ry, rx]),
                          name=f"{name}_sum")
    size = to_float(h * w, data.dtype)
    return te.compute((n, c, 1, 1), lambda nn, cc, yy, xx: pool_sum[nn, cc, yy, xx] / size,
                      name=name)


def global_avg_pool2d(N: int, C: int, H: int, W: int, dtype: str = "float32") -> PrimFunc:
    op = "global_avg_pool2d"
    N, C, H, W = positive_ints((N, C, H, W), op, "N, C, H, W")
    data = te.placeholder((N, C, H, W), canonical_dtype(dtype, op), name="data")
    out = te_global_avg_pool2d(data, name="pool_avg")
    return te.create_prim_func([data, out], name=op)


def ref_global_avg_pool2d(data: np.ndarray) -> np.ndarray:
    return _cast_back(data.astype(np.float64).mean(axis=(2, 3), keepdims=True), data)
