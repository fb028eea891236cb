"""The convolution's rewritten forms: the halves of a Winograd convolution's transforms and
the blocked channel layout (NCHW[b]c) with its convolutions and conversions.

Registered into ``operators.OPS`` when ``autotune.graph`` is imported (see its ``__init__``);
each has, as there, a type rule, a te definition and a numpy meaning.  The graph passes
``winograd_conv2d`` and ``blocked_layout`` (autotune.graph.passes) put them in place of the
2-D convolutions of ``operators``; a model never names them itself.
"""
from __future__ import annotations

from tensor_ir import ops
from tensor_ir.errors import TEError

from .errors import GraphError
from .operators import COMPUTE, INJECTIVE, REDUCTION, check_op, register_op
from .types import TensorType


def _winograd_rows_infer(types, attrs):
    op = "winograd_input_rows"
    data, bt = types
    m = attrs["tile"]
    a = m + 2
    check_op(len(data.shape) == 4, op, f"data must be NCHW, got {data.shape}")
    check_op(bt.shape == (a, a) and bt.dtype == data.dtype, op,
           f"Bt must be {data.dtype} {(a, a)} for F({m}, 3), got {bt.dtype} {bt.shape}")
    n, c, h, w = data.shape
    pt, pl, pb, pr = attrs["pads"]
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    check_op(oh > 0 and ow > 0, op, f"output size {(oh, ow)} is not positive")
    th, tw, _ = ops.winograd_tiles(n, oh, ow, m)
    return TensorType((a, n, c, th, tw * m + 2), data.dtype)


def _winograd_cols_infer(types, attrs):
    op = "winograd_input_cols"
    rows, bt = types
    m = attrs["tile"]
    a = m + 2
    check_op(len(rows.shape) == 5 and rows.shape[0] == a and (rows.shape[4] - 2) % m == 0, op,
           f"T must be ({a}, N, C, th, tw * {m} + 2), got {rows.shape}")
    check_op(bt.shape == (a, a) and bt.dtype == rows.dtype, op,
           f"Bt must be {rows.dtype} {(a, a)} for F({m}, 3), got {bt.dtype} {bt.shape}")
    _, n, c, th, width = rows.shape
    return TensorType((a * a, n * th * ((width - 2) // m), c), rows.dtype)


def _winograd_output_rows_infer(types, attrs):
    op = "winograd_output_rows"
    mm, at = types
    m = attrs["tile"]
    a = m + 2
    check_op(len(mm.shape) == 3 and mm.shape[0] == a * a, op,
           f"M must be ({a * a}, P, K) for F({m}, 3), got {mm.shape}")
    check_op(at.shape == (m, a) and at.dtype == mm.dtype, op,
           f"At must be {mm.dtype} {(m, a)} for F({m}, 3), got {at.dtype} {at.shape}")
    return TensorType((m, a, mm.shape[2], mm.shape[1]), mm.dtype)


def _winograd_output_cols_infer(types, attrs):
    op = "winograd_output_cols"
    rows, at = types
    m = attrs["tile"]
    a = m + 2
    n, oh, ow = attrs["batch"], attrs["height"], attrs["width"]
    tiles = ops.winograd_tiles(n, oh, ow, m)[2]
    check_op(len(rows.shape) == 4 and rows.shape[:2] == (m, a) and rows.shape[3] == tiles, op,
           f"S must be ({m}, {a}, K, {tiles}) for {n} x {oh} x {ow} outputs, "
           f"got {rows.shape}")
    check_op(at.shape == (m, a) and at.dtype == rows.dtype, op,
           f"At must be {rows.dtype} {(m, a)} for F({m}, 3), got {at.dtype} {at.shape}")
    return TensorType((n, rows.shape[2], oh, ow), rows.dtype)


# The transforms of a Winograd convolution (see tensor_ir.ops.winograd): the input and the
# output transform, each in two halves (rows, then columns of each tile); the pass
# ``winograd_conv2d`` puts a batched matmul with the transformed weights between them.  Each
# is a small reduction over a tile's positions: the convolution's elementwise consumers
# (bias, residual add, relu) fuse into the output transform's second half, which produces
# the convolution's value.
def _winograd_half(op: str, infer, keys: tuple[str, ...]) -> None:
    """Register a Winograd half: the library's ``te_<op>`` and ``ref_<op>`` over the data and
    the transform matrix, with the attributes ``keys`` as their further arguments."""
    te_fn, ref_fn = getattr(ops, f"te_{op}"), getattr(ops, f"ref_{op}")
    register_op(op, REDUCTION, (2, 2), infer,
              lambda args, attrs, name: te_fn(args[0], args[1], *(attrs[k] for k in keys),
                                              name=name),
              lambda arrays, attrs: ref_fn(arrays[0], arrays[1], *(attrs[k] for k in keys)))


_OUTPUT_COLS_KEYS = ("tile", "batch", "height", "width")
_winograd_half("winograd_input_rows", _winograd_rows_infer, ("tile", "pads"))
_winograd_half("winograd_input_cols", _winograd_cols_infer, ("tile",))
_winograd_half("winograd_output_rows", _winograd_output_rows_infer, ("tile",))
_winograd_half("winograd_output_cols", _winograd_output_cols_infer, _OUTPUT_COLS_KEYS)


def _winograd_rows_nchwc_infer(types, attrs):
    data, bt = types
    check_op(len(data.shape) == 5, "winograd_input_rows_nchwc",
           f"data must be NCHW[b]c (rank 5), got {data.shape}")
    n, cb, h, w, b = data.shape
    a, _, _, th, width = _winograd_rows_infer(
        [TensorType((n, cb * b, h, w), data.dtype), bt], attrs).shape
    return TensorType((a, n, cb, th, width, b), data.dtype)


def _winograd_cols_nchwc_infer(types, attrs):
    rows, bt = types
    check_op(len(rows.shape) == 6, "winograd_input_cols_nchwc",
           f"T must be (m+2, N, C/b, th, tw * m + 2, b), got {rows.shape}")
    a, n, cb, th, width, b = rows.shape
    return _winograd_cols_infer([TensorType((a, n, cb * b, th, width), rows.dtype), bt], attrs)


def _winograd_output_rows_nchwc_infer(types, attrs):
    m, a, k, p = _winograd_output_rows_infer(types, attrs).shape
    return TensorType((m, a, p, k), types[0].dtype)


def _winograd_output_cols_nchwc_infer(types, attrs):
    op = "winograd_output_cols_nchwc"
    rows, at = types
    check_op(len(rows.shape) == 4, op, f"S must be (m, m+2, P, K), got {rows.shape}")
    m, a, p, k = rows.shape
    n, _, oh, ow = _winograd_output_cols_infer(
        [TensorType((m, a, k, p), rows.dtype), at], attrs).shape
    block = attrs["block"]
    check_op(block >= 1 and k % block == 0, op,
           f"{k} channels are not a multiple of the block {block}")
    return TensorType((n, k // block, oh, ow, block), rows.dtype)


# The same transforms in the blocked channel layout (``blocked_layout`` puts them in place of
# the NCHW ones): the channels are the innermost axis of every half, so none turns the
# layout (see tensor_ir.ops.winograd).
_winograd_half("winograd_input_rows_nchwc", _winograd_rows_nchwc_infer, ("tile", "pads"))
_winograd_half("winograd_input_cols_nchwc", _winograd_cols_nchwc_infer, ("tile",))
_winograd_half("winograd_output_rows_nchwc", _winograd_output_rows_nchwc_infer, ("tile",))
_winograd_half("winograd_output_cols_nchwc", _winograd_output_cols_nchwc_infer,
               _OUTPUT_COLS_KEYS + ("block",))


def _nchwc_infer(op, library_shape):
    """Shape inference of a blocked convolution: the library's own check of the operand
    shapes (``tensor_ir.ops.layout``), its error raised as a GraphError."""
    def infer(types, attrs):
        data, weight = types
        check_op(data.dtype == weight.dtype, op, f"dtypes differ: {data.dtype} vs {weight.dtype}")
        try:
            shape = library_shape(data.shape, weight.shape, *_conv_nchwc_attrs(attrs))
        except TEError as err:
            raise GraphError(str(err)) from None
        return TensorType(shape, data.dtype)
    return infer


def _conv_nchwc_attrs(attrs):
    return attrs["strides"], attrs["pads"], attrs["dilations"]


# Convolutions in the blocked channel layout (see tensor_ir.ops.layout); the pass
# ``blocked_layout`` puts them in place of NCHW convolutions with their weights laid out once.
register_op("conv2d_nchwc", COMPUTE, (2, 2),
            _nchwc_infer("conv2d_nchwc", ops.conv2d_nchwc_shape),
            lambda args, attrs, name: ops.te_conv2d_nchwc(args[0], args[1],
                                                        *_conv_nchwc_attrs(attrs), name=name),
            lambda arrays, attrs: ops.ref_conv2d_nchwc(arrays[0], arrays[1],
                                                     *_conv_nchwc_attrs(attrs)))
register_op("depthwise_conv2d_nchwc", COMPUTE, (2, 2),
            _nchwc_infer("depthwise_conv2d_nchwc", ops.depthwise_conv2d_nchwc_shape),
            lambda args, attrs, name: ops.te_depthwise_conv2d_nchwc(
                args[0], args[1], *_conv_nchwc_attrs(attrs), name=name),
            lambda arrays, attrs: ops.ref_depthwise_conv2d_nchwc(arrays[0], arrays[1],
                                                               *_conv_nchwc_attrs(attrs)))


def _to_blocked_infer(types, attrs):
    op = "layout_to_blocked"
    data, block = types[0], attrs["block"]
    check_op(len(data.shape) == 4, op, f"data must be NCHW, got {data.shape}")
    n, c, h, w = data.shape
    check_op(block >= 1 and c % block == 0, op,
           f"{c} channels are not a multiple of the block {block}")
    return TensorType((n, c // block, h, w, block), data.dtype)


def _from_blocked_infer(types, attrs):
    data = types[0]
    check_op(len(data.shape) == 5, "layout_from_blocked",
           f"data must be NCHW[b]c (rank 5), got {data.shape}")
    n, co, h, w, b = data.shape
    return TensorType((n, co * b, h, w), data.dtype)


register_op("layout_to_blocked", INJECTIVE, (1, 1), _to_blocked_infer,
            lambda args, attrs, name: ops.te_layout_to_blocked(args[0], attrs["block"],
                                                             name=name),
            lambda arrays, attrs: ops.ref_layout_to_blocked(arrays[0], attrs["block"]))
register_op("layout_from_blocked", INJECTIVE, (1, 1), _from_blocked_infer,
            lambda args, attrs, name: ops.te_layout_from_blocked(args[0], name=name),
            lambda arrays, attrs: ops.ref_layout_from_blocked(arrays[0]))
