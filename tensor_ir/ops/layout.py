"""Blocked channel layout (NCHW[b]c): the layout transforms and the convolutions over it.

A tensor [N, C, H, W] in blocked layout is [N, C / b, H, W, b]: channel ``c`` lives at
``[n, c // b, y, x, c % b]``.  With b = 16 floats a block is one 64-byte cache line and one
AVX-512 vector, so that a convolution vectorises along the channels whatever the image size
(a 7x7 image fills 49 of 64 lanes when it is the vector axis) and whatever the stride (a
stride-2 depthwise convolution along the width reads every other element).

* ``te_layout_to_blocked(data, b)`` / ``te_layout_from_blocked(data)``: the transforms.
* ``te_conv2d_nchwc(data, weight, ...)``: data [N, C/cb, H, W, cb] (or NCHW, read in
  place), weight [K/kb, C/cb, R, S, cb, kb] (``pack_conv2d_weight_nchwc`` lays out an OIHW
  weight) -> [N, K/kb, OH, OW, kb].  The input block cb and the output block kb may differ:
  an image of 3 channels is one block of 3.
* ``te_depthwise_conv2d_nchwc(data, weight, ...)``: data [N, C/b, H, W, b], weight
  [C/b, R, S, b] (``pack_depthwise_weight_nchwc`` from [C, 1, R, S]) -> [N, C/b, OH, OW, b].
* ``te_max_pool2d_nchwc(data, kernel, stride, padding)``: max pooling of blocked data, so
  that a pooling between two blocked convolutions (ResNet's stem) keeps the layout.

Each has its numpy reference (``ref_*``), computed through the NCHW operators.
"""
from __future__ import annotations

import numpy as np

from .. import te
from .nn import pool_sizes, ref_conv2d_nchw, ref_max_pool2d
from .utils import check, conv_out_size, pad_nd, padding4, pair, reduce_max

__all__ = [
    "te_layout_to_blocked", "ref_layout_to_blocked",
    "te_layout_from_blocked", "ref_layout_from_blocked",
    "te_conv2d_nchwc", "conv2d_nchwc_shape", "ref_conv2d_nchwc", "pack_conv2d_weight_nchwc",
    "te_depthwise_conv2d_nchwc", "depthwise_conv2d_nchwc_shape", "ref_depthwise_conv2d_nchwc",
    "pack_depthwise_weight_nchwc", "te_max_pool2d_nchwc", "ref_max_pool2d_nchwc",
]


def _blocks(channels: int, block: int, op: str, what: str) -> int:
    check(block >= 1 and channels % block == 0, op,
          f"{what} {channels} is not a multiple of the block {block}")
    return channels // block


# ---------------------------------------------------------------------------------------------
# transforms
# ---------------------------------------------------------------------------------------------

def te_layout_to_blocked(data: te.Tensor, block: int, name: str = "layout_to_blocked"
                         ) -> te.Tensor:
    """[N, C, H, W] -> [N, C / block, H, W, block]."""
    op = "layout_to_blocked"
    check(data.ndim == 4, op, f"data must be NCHW, got shape {data.shape}")
    n, c, h, w = data.shape
    outer = _blocks(c, block, op, "channel count")
    return te.compute((n, outer, h, w, block),
                      lambda i, co, y, x, ci: data[i, co * block + ci, y, x], name=name)


def ref_layout_to_blocked(data: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = data.shape
    return np.ascontiguousarray(
        data.reshape(n, _blocks(c, block, "layout_to_blocked", "channel count"), block, h, w)
        .transpose(0, 1, 3, 4, 2))


def te_layout_from_blocked(data: te.Tensor, name: str = "layout_from_blocked") -> te.Tensor:
    """[N, C / b, H, W, b] -> [N, C, H, W]."""
    op = "layout_from_blocked"
    check(data.ndim == 5, op, f"data must be NCHW[b]c, got shape {data.shape}")
    n, outer, h, w, block = data.shape
    return te.compute((n, outer * block, h, w),
                      lambda i, c, y, x: data[i, c // block, y, x, c % block], name=name)


def ref_layout_from_blocked(data: np.ndarray) -> np.ndarray:
    n, outer, h, w, block = data.shape
    return np.ascontiguousarray(data.transpose(0, 1, 4, 2, 3).reshape(n, outer * block, h, w))


# ---------------------------------------------------------------------------------------------
# convolutions
# ---------------------------------------------------------------------------------------------

def pack_conv2d_weight_nchwc(weight: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW [K, C, R, S] -> [K / kb, C / cb, R, S, cb, kb]."""
    op = "pack_conv2d_weight_nchwc"
    k, c, r, s = weight.shape
    ko = _blocks(k, out_block, op, "output channel count")
    co = _blocks(c, in_block, op, "input channel count")
    return np.ascontiguousarray(weight.reshape(ko, out_block, co, in_block, r, s)
                                .transpose(0, 2, 4, 5, 3, 1))


def pack_depthwise_weight_nchwc(weight: np.ndarray, block: int) -> np.ndarray:
    """[C, 1, R, S] -> [C / b, R, S, b]."""
    op = "pack_depthwise_weight_nchwc"
    c, mult, r, s = weight.shape
    check(mult == 1, op, f"only a channel multiplier of 1 is supported, got {mult}")
    return np.ascontiguousarray(weight.reshape(_blocks(c, block, op, "channel count"), block,
                                               r, s).transpose(0, 2, 3, 1))


def _out_size(op, h, w, r, s, stride, padding, dilation) -> tuple[int, int]:
    sh, sw = pair(stride, op, "stride")
    dh, dw = pair(dilation, op, "dilation")
    pt, pl, pb, pr = padding4(padding, op)
    return (conv_out_size(h, pt, pb, r, sh, dh, op, "height"),
            conv_out_size(w, pl, pr, s, sw, dw, op, "width"))


def _padded(op, data, padding):
    pt, pl, pb, pr = padding4(padding, op)
    rest = (0,) * (data.ndim - 4)   # the block axis of blocked data
    return pad_nd(data, (0, 0, pt, pl) + rest, (0, 0, pb, pr) + rest, name="pad_data")


def conv2d_nchwc_shape(data_shape, weight_shape, stride=1, padding=0, dilation=1
                       ) -> tuple[int, ...]:
    """The output shape of ``te_conv2d_nchwc`` for these operand shapes; TEError naming the
    operator when they do not fit (the graph operator's shape inference too)."""
    op = "conv2d_nchwc"
    data_shape, weight_shape = tuple(data_shape), tuple(weight_shape)
    check(len(data_shape) in (4, 5) and len(weight_shape) == 6, op,
          f"data must be rank 5 (NCHW[b]c) or 4 (NCHW) and weight rank 6, got {data_shape} "
          f"and {weight_shape}")
    ko, wco, r, s, wcb, kb = weight_shape
    co, cb = (data_shape[1], data_shape[4]) if len(data_shape) == 5 else (wco, wcb)
    check((wco, wcb) == (co, cb) and (len(data_shape) == 5 or data_shape[1] == co * cb), op,
          f"weight {weight_shape} does not match data {data_shape} (input blocks {co} x {cb})")
    oh, ow = _out_size(op, data_shape[2], data_shape[3], r, s, stride, padding, dilation)
    return (data_shape[0], ko, oh, ow, kb)


def te_conv2d_nchwc(data: te.Tensor, weight: te.Tensor, stride=1, padding=0, dilation=1,
                    name: str = "conv2d_nchwc") -> te.Tensor:
    """data [N, C/cb, H, W, cb], weight [K/kb, C/cb, R, S, cb, kb] -> [N, K/kb, OH, OW, kb].

    ``data`` may also be NCHW [N, C, H, W], read in place as blocks of cb channels: a model's
    image enters the blocked layout through its first convolution, with no transform of its
    own."""
    op = "conv2d_nchwc"
    shape = conv2d_nchwc_shape(data.shape, weight.shape, stride, padding, dilation)
    check(data.dtype == weight.dtype, op, f"dtypes differ: {data.dtype} vs {weight.dtype}")
    _, co, r, s, cb, _ = weight.shape
    (sh, sw), (dh, dw) = pair(stride, op, "stride"), pair(dilation, op, "dilation")
    padded = _padded(op, data, padding)
    rco = te.reduce_axis(co, name="rco")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")
    rci = te.reduce_axis(cb, name="rci")

    def read(i, y, x):
        if data.ndim == 5:
            return padded[i, rco, y, x, rci]
        return padded[i, rco * cb + rci, y, x]

    return te.compute(
        shape,
        lambda i, k, y, x, kk: te.sum(
            read(i, y * sh + ry * dh, x * sw + rx * dw) * weight[k, rco, ry, rx, rci, kk],
            axis=[rco, ry, rx, rci]),
        name=name)


def ref_conv2d_nchwc(data: np.ndarray, weight: np.ndarray, stride=1, padding=0, dilation=1
                     ) -> np.ndarray:
    ko, co, r, s, cb, kb = weight.shape
    plain_w = weight.transpose(0, 5, 1, 4, 2, 3).reshape(ko * kb, co * cb, r, s)
    plain = data if data.ndim == 4 else ref_layout_from_blocked(data)
    return ref_layout_to_blocked(ref_conv2d_nchw(plain, plain_w, stride, padding, dilation), kb)


def depthwise_conv2d_nchwc_shape(data_shape, weight_shape, stride=1, padding=0, dilation=1
                                 ) -> tuple[int, ...]:
    """The output shape of ``te_depthwise_conv2d_nchwc`` for these operand shapes; TEError
    naming the operator when they do not fit."""
    op = "depthwise_conv2d_nchwc"
    data_shape, weight_shape = tuple(data_shape), tuple(weight_shape)
    check(len(data_shape) == 5 and len(weight_shape) == 4, op,
          f"data must be rank 5 (NCHW[b]c) and weight rank 4, got {data_shape} and "
          f"{weight_shape}")
    n, co, h, w, b = data_shape
    wco, r, s, wb = weight_shape
    check((wco, wb) == (co, b), op, f"weight {weight_shape} does not match data {data_shape}")
    oh, ow = _out_size(op, h, w, r, s, stride, padding, dilation)
    return (n, co, oh, ow, b)


def te_depthwise_conv2d_nchwc(data: te.Tensor, weight: te.Tensor, stride=1, padding=0,
                              dilation=1, name: str = "depthwise_conv2d_nchwc") -> te.Tensor:
    """data [N, C/b, H, W, b], weight [C/b, R, S, b] -> [N, C/b, OH, OW, b]."""
    op = "depthwise_conv2d_nchwc"
    shape = depthwise_conv2d_nchwc_shape(data.shape, weight.shape, stride, padding, dilation)
    check(data.dtype == weight.dtype, op, f"dtypes differ: {data.dtype} vs {weight.dtype}")
    _, r, s, _ = weight.shape
    (sh, sw), (dh, dw) = pair(stride, op, "stride"), pair(dilation, op, "dilation")
    padded = _padded(op, data, padding)
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")
    return te.compute(
        shape,
        lambda i, c, y, x, cc: te.sum(
            padded[i, c, y * sh + ry * dh, x * sw + rx * dw, cc] * weight[c, ry, rx, cc],
            axis=[ry, rx]),
        name=name)


def ref_depthwise_conv2d_nchwc(data: np.ndarray, weight: np.ndarray, stride=1, padding=0,
                               dilation=1) -> np.ndarray:
    co, r, s, b = weight.shape
    plain_w = weight.transpose(0, 3, 1, 2).reshape(co * b, 1, r, s)
    out = ref_conv2d_nchw(ref_layout_from_blocked(data), plain_w, stride, padding, dilation,
                          co * b)
    return ref_layout_to_blocked(out, b)


# ---------------------------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------------------------

def te_max_pool2d_nchwc(data: te.Tensor, kernel, stride=1, padding=0,
                        name: str = "max_pool2d") -> te.Tensor:
    """``te_max_pool2d`` of blocked data [N, C/b, H, W, b] -> [N, C/b, OH, OW, b]; the padding
    is -inf so it never wins."""
    op = "max_pool2d_nchwc"
    check(data.ndim == 5, op, f"data must be NCHW[b]c (rank 5), got shape {data.shape}")
    n, cb, h, w, b = data.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (oh, ow) = pool_sizes(op, (n, cb, h, w), kernel,
                                                                 stride, padding)
    padded = pad_nd(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0),
                    value=te.min_value(data.dtype), name="pad_data")
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    return te.compute(
        (n, cb, oh, ow, b),
        lambda i, co, y, x, ci: reduce_max(padded[i, co, y * sh + ry, x * sw + rx, ci],
                                           axis=[ry, rx]),
        name=name)


def ref_max_pool2d_nchwc(data: np.ndarray, kernel, stride=1, padding=0) -> np.ndarray:
    block = data.shape[4]
    return ref_layout_to_blocked(ref_max_pool2d(ref_layout_from_blocked(data), kernel, stride,
                                                padding), block)
