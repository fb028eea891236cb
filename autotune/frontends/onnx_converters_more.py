"""More ONNX converters: elementwise math, variadic Sum/Mean, the log-softmax family, the
composite reductions, RMSNormalization, the gathers with runtime indices, LRN, LpPool and the
1-D and 3-D forms of the windowed operators.

Registered into ``onnx_converters.CONVERTERS`` when that module is imported (at its end).
"""
from __future__ import annotations

import math

import numpy as np

from .onnx_context import Importer
from .onnx_registry import axes_arg as _axes_arg
from .onnx_registry import converter as _converter
from .onnx_registry import float_input as _float_input
from .onnx_registry import value_dtype


# ONNX op type -> (graph operator, {attribute: default}); float inputs only unless noted.
_UNARY_MATH = {
    "Reciprocal": ("reciprocal", {}), "Floor": ("floor", {}), "Ceil": ("ceil", {}),
    "Round": ("round", {}), "Sin": ("sin", {}), "Cos": ("cos", {}), "Tan": ("tan", {}),
    "Sinh": ("sinh", {}), "Cosh": ("cosh", {}), "Asinh": ("asinh", {}),
    "Acosh": ("acosh", {}), "Atanh": ("atanh", {}), "Softsign": ("softsign", {}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625,
                      "gamma": 1.05070102214813232421875}),
    "Celu": ("celu", {"alpha": 1.0}), "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Swish": ("swish", {"alpha": 1.0}), "IsNaN": ("isnan", {}),
}
# Operators that also take integer inputs.
_ANY_DTYPE = {"Sign": ("sign", {}), "Shrink": ("shrink", {"bias": 0.0, "lambd": 0.5})}


@_converter(*_UNARY_MATH, *_ANY_DTYPE)
def _unary_math(ctx: Importer) -> None:
    op_type = ctx.node.op_type
    op, defaults = _UNARY_MATH.get(op_type) or _ANY_DTYPE[op_type]
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    if op_type in _UNARY_MATH:
        _float_input(ctx, x)
    ctx.set_output(ctx.add(op, [x], **{k: ctx.float_attr(attrs, k, v)
                                       for k, v in defaults.items()}))


@_converter("IsInf")
def _isinf(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    ctx.set_output(ctx.add("isinf", [x], detect_positive=ctx.int_attr(
        attrs, "detect_positive", 1, minimum=0, maximum=1), detect_negative=ctx.int_attr(
        attrs, "detect_negative", 1, minimum=0, maximum=1)))


@_converter("Mod", inputs=(2, 2))
def _mod(ctx: Importer) -> None:
    a, b = ctx.inputs()
    fmod = ctx.int_attr(ctx.attrs(), "fmod", 0, minimum=0, maximum=1)
    dtype = ctx.type_of(a).dtype
    if ctx.is_const(b) and dtype[0] in "iu" and not ctx.const(b, "divisor").all():
        raise ctx.error("integer Mod by zero")
    ctx.set_output(ctx.add("mod", [a, b], fmod=fmod))


@_converter("CastLike", inputs=(2, 2))
def _cast_like(ctx: Importer) -> None:
    x, like = ctx.inputs()
    dtype = ctx.type_of(like).dtype
    if ctx.type_of(x).dtype == dtype:
        ctx.set_output(x)
        return
    ctx.set_output(ctx.add("cast", [x], dtype=dtype))


@_converter("Sum", "Mean", inputs=(1, None))
def _sum_mean(ctx: Importer) -> None:
    inputs = ctx.inputs()
    result = inputs[0]
    for other in inputs[1:]:
        result = ctx.add("add", [result, other])
    if ctx.node.op_type == "Mean" and len(inputs) > 1:
        dtype = ctx.type_of(result).dtype
        result = ctx.add("divide", [result, ctx.constant(np.array(len(inputs), dtype=dtype))])
    elif len(inputs) == 1:
        result = ctx.add("identity", [result]) if not ctx.is_const(result) else result
    ctx.set_output(result)


def _coerced_axis(ctx: Importer, x: str) -> tuple[int, tuple[int, ...]]:
    """The axis of a softmax-family node and the input's shape; before opset 13 the input is
    coerced to 2-D at the axis (default 1), which :func:`_flattened` applies."""
    ndim = len(ctx.type_of(x).shape)
    default = -1 if ctx.opset >= 13 else 1
    axis = ctx.axis(ctx.int_attr(ctx.attrs(), "axis", default), ndim, "attribute axis")
    return axis, ctx.type_of(x).shape


def _flattened(ctx: Importer, x: str, axis: int, shape) -> tuple[str, int]:
    """(the value to normalise, its axis): ``x`` reshaped to (prod(shape[:axis]),
    prod(shape[axis:])) before opset 13 when more than the last axis is covered."""
    if ctx.opset >= 13 or axis == len(shape) - 1:
        return x, axis
    lead, rest = math.prod(shape[:axis]), math.prod(shape[axis:])
    return ctx.add("reshape", [x], shape=(lead, rest)), 1


def _unflattened(ctx: Importer, y: str, shape) -> str:
    if ctx.type_of(y).shape == tuple(shape):
        return y
    return ctx.add("reshape", [y], shape=tuple(shape))


@_converter("Softmax")
def _softmax(ctx: Importer) -> None:
    x = ctx.inputs()[0]
    axis, shape = _coerced_axis(ctx, x)
    flat, flat_axis = _flattened(ctx, x, axis, shape)
    ctx.set_output(_unflattened(ctx, ctx.add("softmax", [flat], axis=flat_axis), shape))


@_converter("LogSoftmax")
def _log_softmax(ctx: Importer) -> None:
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    axis, shape = _coerced_axis(ctx, x)
    flat, flat_axis = _flattened(ctx, x, axis, shape)
    # x - max - log(sum(exp(x - max))): the shift keeps exp from overflowing.
    top = ctx.add("reduce_max", [flat], axes=(flat_axis,), keepdims=True)
    shifted = ctx.add("subtract", [flat, top])
    total = ctx.add("reduce_sum", [ctx.add("exp", [shifted])], axes=(flat_axis,),
                    keepdims=True)
    y = ctx.add("subtract", [shifted, ctx.add("log", [total])])
    ctx.set_output(_unflattened(ctx, y, shape))


@_converter("Hardmax")
def _hardmax(ctx: Importer) -> None:
    x = ctx.inputs()[0]
    axis, shape = _coerced_axis(ctx, x)
    flat, flat_axis = _flattened(ctx, x, axis, shape)
    flat_shape = ctx.type_of(flat).shape
    # 1 at the first maximum along the axis: argmax compared with the axis' positions.
    first = ctx.add("argmax", [flat], axis=flat_axis, keepdims=True, select_last_index=False)
    positions = np.arange(flat_shape[flat_axis], dtype=np.int64).reshape(
        [-1 if d == flat_axis else 1 for d in range(len(flat_shape))])
    hit = ctx.add("equal", [first, ctx.constant(positions)])
    y = ctx.add("cast", [hit], dtype=ctx.type_of(x).dtype)
    ctx.set_output(_unflattened(ctx, y, shape))


_COMPOSITE_REDUCE = ("ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@_converter(*_COMPOSITE_REDUCE, inputs=(1, 2))
def _composite_reduce(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    op = ctx.node.op_type
    axes = _axes_arg(ctx, inputs, attrs, len(ctx.type_of(x).shape), unique=False)
    keepdims = bool(ctx.int_attr(attrs, "keepdims", 1, minimum=0, maximum=1))
    if not axes:
        if ctx.int_attr(attrs, "noop_with_empty_axes", 0, minimum=0, maximum=1):
            raise ctx.unsupported("noop_with_empty_axes=1 with no axes")
        axes = list(range(len(ctx.type_of(x).shape)))
    axes = tuple(axes)
    if op == "ReduceL1":
        ctx.set_output(ctx.add("reduce_sum", [ctx.add("abs", [x])], axes=axes,
                               keepdims=keepdims))
    elif op == "ReduceSumSquare":
        ctx.set_output(ctx.add("reduce_sum", [ctx.add("multiply", [x, x])], axes=axes,
                               keepdims=keepdims))
    elif op == "ReduceLogSum":
        _float_input(ctx, x)
        ctx.set_output(ctx.add("log", [ctx.add("reduce_sum", [x], axes=axes,
                                                keepdims=keepdims)]))
    else:
        _float_input(ctx, x)
        top = ctx.add("reduce_max", [x], axes=axes, keepdims=True)
        total = ctx.add("reduce_sum", [ctx.add("exp", [ctx.add("subtract", [x, top])])],
                        axes=axes, keepdims=keepdims)
        if not keepdims:
            top = ctx.add("reshape", [top], shape=ctx.type_of(total).shape)
        ctx.set_output(ctx.add("add", [ctx.add("log", [total]), top]))


def _normalized(ctx: Importer, x: str, axis: int, epsilon: float, center: bool):
    """(y, mean, inverse standard deviation) over the axes from ``axis`` on, composed from
    reductions (the mean and deviation keep their axes, as ONNX's optional outputs do)."""
    ndim = len(ctx.type_of(x).shape)
    axes = tuple(range(axis, ndim))
    dtype = ctx.type_of(x).dtype
    mean = None
    if center:
        mean = ctx.add("reduce_mean", [x], axes=axes, keepdims=True)
        x = ctx.add("subtract", [x, mean])
    square = ctx.add("reduce_mean", [ctx.add("multiply", [x, x])], axes=axes, keepdims=True)
    eps = ctx.constant(np.array(epsilon, dtype=dtype))
    inverse = ctx.add("reciprocal", [ctx.add("sqrt", [ctx.add("add", [square, eps])])])
    return ctx.add("multiply", [x, inverse]), mean, inverse


def _stash(ctx: Importer, x: str, attrs: dict) -> str:
    """``x`` in the computation type: float32 when stash_type is 1 (ONNX's FLOAT, the
    default), the input's own type otherwise."""
    stash = ctx.int_attr(attrs, "stash_type", 1)
    if stash == ctx.onnx.TensorProto.FLOAT and ctx.type_of(x).dtype != "float32":
        return ctx.add("cast", [x], dtype="float32")
    return x


def _affine(ctx: Importer, y: str, scale: str | None, bias: str | None, dtype: str) -> str:
    if ctx.type_of(y).dtype != dtype:
        y = ctx.add("cast", [y], dtype=dtype)
    if scale is not None:
        y = ctx.add("multiply", [y, scale])
    if bias is not None:
        y = ctx.add("add", [y, bias])
    return y


def layer_norm_composed(ctx: Importer) -> None:
    """LayerNormalization whose Mean and InvStdDev outputs are used: composed from reductions
    so that each output is a value of its own."""
    attrs = ctx.attrs()
    inputs = ctx.inputs() + [None] * (3 - len(ctx.node.input))
    x, scale, bias = inputs[:3]
    _float_input(ctx, x)
    dtype = ctx.type_of(x).dtype
    axis = ctx.axis(ctx.int_attr(attrs, "axis", -1), len(ctx.type_of(x).shape),
                    "attribute axis")
    y, mean, inverse = _normalized(ctx, _stash(ctx, x, attrs), axis,
                                   ctx.float_attr(attrs, "epsilon", 1e-5), center=True)
    ctx.set_output(_affine(ctx, y, scale, bias, dtype))
    ctx.set_output(mean, 1)
    ctx.set_output(inverse, 2)


@_converter("RMSNormalization", inputs=(2, 2))
def _rms_norm(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x, scale = ctx.inputs()
    _float_input(ctx, x)
    dtype = ctx.type_of(x).dtype
    axis = ctx.axis(ctx.int_attr(attrs, "axis", -1), len(ctx.type_of(x).shape),
                    "attribute axis")
    y, _, _ = _normalized(ctx, _stash(ctx, x, attrs), axis,
                          ctx.float_attr(attrs, "epsilon", 1e-5), center=False)
    ctx.set_output(_affine(ctx, y, scale, None, dtype))


@_converter("GatherElements", inputs=(2, 2))
def _gather_elements(ctx: Importer) -> None:
    data, indices = ctx.inputs()
    ndim = len(ctx.type_of(data).shape)
    axis = ctx.axis(ctx.int_attr(ctx.attrs(), "axis", 0), ndim, "attribute axis")
    if len(ctx.type_of(indices).shape) != ndim:
        raise ctx.error(f"indices of shape {ctx.type_of(indices).shape} must have the rank "
                        f"of data {ctx.type_of(data).shape}")
    _check_indices(ctx, indices, ctx.type_of(data).shape[axis], f"axis {axis}")
    ctx.set_output(ctx.add("gather_elements", [data, indices], axis=axis))


@_converter("GatherND", inputs=(2, 2))
def _gather_nd(ctx: Importer) -> None:
    data, indices = ctx.inputs()
    batch = ctx.int_attr(ctx.attrs(), "batch_dims", 0, minimum=0)
    shape, ishape = ctx.type_of(data).shape, ctx.type_of(indices).shape
    if not ishape or batch + ishape[-1] > len(shape) or ishape[:batch] != shape[:batch]:
        raise ctx.error(f"indices of shape {ishape} do not index data of shape {shape} with "
                        f"batch_dims={batch}")
    if ctx.is_const(indices):
        index = ctx.const(indices, "indices")
        for k in range(ishape[-1]):
            extent = shape[batch + k]
            column = index[..., k]
            if column.size and not (-extent <= column.min() and column.max() < extent):
                raise ctx.error(f"indices {column.reshape(-1).tolist()[:8]} are out of range "
                                f"for axis {batch + k} of extent {extent}")
    ctx.set_output(ctx.add("gather_nd", [data, indices], batch_dims=batch))


def _check_indices(ctx: Importer, indices: str, extent: int, what: str) -> None:
    """Constant indices in [-extent, extent); runtime ones are the caller's promise (a load
    outside the data would read another buffer, so the executor's inputs are trusted)."""
    if not ctx.is_const(indices):
        return
    index = ctx.const(indices, "indices")
    if index.dtype.kind not in "iu":
        raise ctx.error(f"indices must be integers, got {index.dtype}")
    if index.size and not (-extent <= index.min() and index.max() < extent):
        raise ctx.error(f"indices {index.reshape(-1).tolist()[:8]} are out of range for "
                        f"{what} of extent {extent}")


def gather_runtime(ctx: Importer, data: str, indices: str, axis: int) -> None:
    """Gather with computed data or indices: the gather kernel."""
    _check_indices(ctx, indices, ctx.type_of(data).shape[axis], f"axis {axis}")
    ctx.set_output(ctx.add("gather", [data, indices], axis=axis))


@_converter("CumSum", "CumProd", inputs=(2, 2))
def _cumsum(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x, axis_value = ctx.inputs()
    values = ctx.const_ints(axis_value, "axis")
    if len(values) != 1:
        raise ctx.error(f"axis must be a single integer, got {values}")
    axis = ctx.axis(values[0], len(ctx.type_of(x).shape), "axis input")
    ctx.set_output(ctx.add("cumsum", [x], axis=axis, product=int(ctx.node.op_type == "CumProd"),
                           exclusive=ctx.int_attr(attrs, "exclusive", 0, minimum=0, maximum=1),
                           reverse=ctx.int_attr(attrs, "reverse", 0, minimum=0, maximum=1)))


@_converter("TopK", inputs=(1, 2))
def _topk(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    axis = ctx.axis(ctx.int_attr(attrs, "axis", -1), len(shape), "attribute axis")
    if ctx.opset < 10:
        k = ctx.int_attr(attrs, "k", None)
    else:
        values = ctx.const_ints(inputs[1] if len(inputs) > 1 else None, "k")
        if len(values) != 1:
            raise ctx.error(f"k must be a single integer, got {values}")
        k = values[0]
    if not 1 <= k <= shape[axis]:
        raise ctx.error(f"k={k} must lie in [1, {shape[axis]}] (axis {axis} of {shape})")
    if not ctx.int_attr(attrs, "sorted", 1, minimum=0, maximum=1):
        # Unsorted output lets the order be anything; the sorted order is one of them.
        pass
    largest = ctx.int_attr(attrs, "largest", 1, minimum=0, maximum=1)
    indices = ctx.add("topk_indices", [x], axis=axis, k=k, largest=largest)
    ctx.set_output(ctx.add("gather_elements", [x, indices], axis=axis), 0)
    ctx.set_output(indices, 1)


@_converter("ScatterElements", "Scatter", inputs=(3, 3))
def _scatter_elements(ctx: Importer) -> None:
    attrs = ctx.attrs()
    data, indices, updates = ctx.inputs()
    shape = ctx.type_of(data).shape
    axis = ctx.axis(ctx.int_attr(attrs, "axis", 0), len(shape), "attribute axis")
    reduction = attrs.get("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.bad_attribute("reduction", reduction, "is not none, add, mul, max or min")
    _check_indices(ctx, indices, shape[axis], f"axis {axis}")
    ctx.set_output(ctx.add("scatter_elements", [data, indices, updates], axis=axis,
                           reduction=reduction))


@_converter("ScatterND", inputs=(3, 3))
def _scatter_nd(ctx: Importer) -> None:
    attrs = ctx.attrs()
    data, indices, updates = ctx.inputs()
    reduction = attrs.get("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.bad_attribute("reduction", reduction, "is not none, add, mul, max or min")
    ctx.set_output(ctx.add("scatter_nd", [data, indices, updates], reduction=reduction))


@_converter("OneHot", inputs=(3, 3))
def _one_hot(ctx: Importer) -> None:
    indices, depth_value, values = ctx.inputs()
    depth = int(ctx.const_scalar(depth_value, "depth"))
    pair = ctx.const(values, "values").reshape(-1)
    if pair.size != 2:
        raise ctx.error(f"values must hold [off, on], got {pair.size} elements")
    ishape = ctx.type_of(indices).shape
    ndim = len(ishape) + 1
    axis = ctx.axis(ctx.int_attr(ctx.attrs(), "axis", -1), ndim, "attribute axis")
    # indices (negative ones counted from depth) compared with the positions along the axis.
    index = indices if ctx.type_of(indices).dtype == "int64" else \
        ctx.add("cast", [indices], dtype="int64")
    zero = ctx.constant(np.array(0, np.int64))
    wrapped = ctx.add("where", [ctx.add("less", [index, zero]),
                                ctx.add("add", [index, ctx.constant(np.array(depth, np.int64))]),
                                index])
    expanded = ctx.add("reshape", [wrapped], shape=ishape[:axis] + (1,) + ishape[axis:])
    positions = np.arange(depth, dtype=np.int64).reshape(
        [-1 if d == axis else 1 for d in range(ndim)])
    hit = ctx.add("equal", [expanded, ctx.constant(positions)])
    off, on = (ctx.constant(np.array(v, dtype=pair.dtype)) for v in pair)
    ctx.set_output(ctx.add("where", [hit, on, off]))


@_converter("EyeLike")
def _eye_like(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    shape = ctx.type_of(x).shape
    if len(shape) != 2:
        raise ctx.error(f"input of shape {shape} must have rank 2")
    dtype = ctx.type_of(x).dtype
    if "dtype" in attrs:
        dtype = value_dtype(ctx.onnx, ctx.int_attr(attrs, "dtype", None),
                            f"{ctx.where()}: attribute dtype")
    k = ctx.int_attr(attrs, "k", 0)
    ctx.set_output(ctx.constant(np.eye(shape[0], shape[1], k=k, dtype=dtype)))


@_converter("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    shape = ctx.type_of(x).shape
    if len(shape) != 4:
        raise ctx.error(f"input of shape {shape} must be NCHW")
    if "blocksize" not in attrs:
        raise ctx.error("attribute blocksize is required")
    b = ctx.int_attr(attrs, "blocksize", None, minimum=1)
    n, c, h, w = shape
    if ctx.node.op_type == "DepthToSpace":
        if c % (b * b):
            raise ctx.error(f"{c} channels do not divide by blocksize^2 = {b * b}")
        if attrs.get("mode", "DCR") == "DCR":
            y = ctx.add("reshape", [x], shape=(n, b, b, c // (b * b), h, w))
            y = ctx.add("transpose", [y], perm=(0, 3, 4, 1, 5, 2))
        else:
            y = ctx.add("reshape", [x], shape=(n, c // (b * b), b, b, h, w))
            y = ctx.add("transpose", [y], perm=(0, 1, 4, 2, 5, 3))
        ctx.set_output(ctx.add("reshape", [y], shape=(n, c // (b * b), h * b, w * b)))
        return
    if h % b or w % b:
        raise ctx.error(f"spatial size {(h, w)} does not divide by blocksize {b}")
    y = ctx.add("reshape", [x], shape=(n, c, h // b, b, w // b, b))
    # DCR puts the block offsets before the channel in the new channel axis, CRD after it.
    crd = attrs.get("mode", "DCR") == "CRD"
    y = ctx.add("transpose", [y], perm=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
    ctx.set_output(ctx.add("reshape", [y], shape=(n, c * b * b, h // b, w // b)))


@_converter("LpNormalization")
def _lp_normalization(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    axis = ctx.axis(ctx.int_attr(attrs, "axis", -1), len(ctx.type_of(x).shape),
                    "attribute axis")
    p = ctx.int_attr(attrs, "p", 2)
    if p == 1:
        norm = ctx.add("reduce_sum", [ctx.add("abs", [x])], axes=(axis,), keepdims=True)
    elif p == 2:
        norm = ctx.add("reduce_l2", [x], axes=(axis,), keepdims=True)
    else:
        raise ctx.bad_attribute("p", p, "must be 1 or 2")
    # A zero norm gives 0 (as ONNX's reference), not 0/0.
    zero = ctx.constant(np.array(0, ctx.type_of(x).dtype))
    one = ctx.constant(np.array(1, ctx.type_of(x).dtype))
    is_zero = ctx.add("equal", [norm, zero])
    safe = ctx.add("where", [is_zero, one, norm])
    ctx.set_output(ctx.add("where", [is_zero, zero, ctx.add("divide", [x, safe])]))


@_converter("MeanVarianceNormalization")
def _mvn(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    ndim = len(ctx.type_of(x).shape)
    axes = tuple(ctx.axis(a, ndim, "attribute axes entry")
                 for a in ctx.ints_attr(attrs, "axes", (0, 2, 3)))
    dtype = ctx.type_of(x).dtype
    mean = ctx.add("reduce_mean", [x], axes=axes, keepdims=True)
    centered = ctx.add("subtract", [x, mean])
    var = ctx.add("reduce_mean", [ctx.add("multiply", [centered, centered])], axes=axes,
                  keepdims=True)
    eps = ctx.constant(np.array(1e-9, dtype))
    ctx.set_output(ctx.add("divide", [centered, ctx.add("add", [ctx.add("sqrt", [var]), eps])]))


def lift_1d(ctx: Importer, convert, weight: bool) -> None:
    """Convert a 1-D Conv, ConvTranspose or pool (an (N, C, L) input) as the 2-D operator
    over (N, C, 1, L): the window attributes gain a leading 1 (pads a leading 0 on each side),
    the weight a unit axis, and the result loses its unit axis again."""
    from onnx import helper

    node = ctx.node
    attrs = ctx.attrs()
    lifted = {}
    for name, value in attrs.items():
        if name in ("kernel_shape", "strides", "dilations", "output_padding"):
            value = [1] + list(value)
        elif name == "pads":
            value = [0, value[0], 0, value[1]] if len(value) == 2 else value
        elif name == "output_shape":
            value = [1] + list(value)
        lifted[name] = value
    names = list(node.input)

    def add_unit_axis(position: int) -> None:
        value = ctx.value(names[position])
        shape = ctx.type_of(value).shape
        if len(shape) != 3:
            raise ctx.error(f"input {position} of shape {shape} must have rank 3")
        alias = f"{names[position]}__2d"
        ctx.values[alias] = ctx.add("reshape", [value], shape=shape[:2] + (1,) + shape[2:])
        names[position] = alias

    add_unit_axis(0)
    if weight:
        add_unit_axis(1)
    out = f"{node.output[0]}__2d"
    ctx.node = helper.make_node(node.op_type, names, [out] + list(node.output[1:]),
                                name=node.name, domain=node.domain, **lifted)
    try:
        convert(ctx)
    finally:
        ctx.node = node
    y = ctx.values[out]
    shape = ctx.type_of(y).shape
    ctx.set_output(ctx.add("reshape", [y], shape=shape[:2] + shape[3:]))


_BITWISE = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


@_converter(*_BITWISE, inputs=(2, 2))
def _bitwise(ctx: Importer) -> None:
    ctx.set_output(ctx.add(_BITWISE[ctx.node.op_type], ctx.inputs()))


@_converter("BitwiseNot")
def _bitwise_not(ctx: Importer) -> None:
    ctx.set_output(ctx.add("bitwise_not", ctx.inputs()))


@_converter("BitShift", inputs=(2, 2))
def _bitshift(ctx: Importer) -> None:
    direction = ctx.attrs().get("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.bad_attribute("direction", direction, "must be LEFT or RIGHT")
    ctx.set_output(ctx.add("bitshift", ctx.inputs(), direction=direction))


@_converter("LRN")
def _lrn(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    if len(ctx.type_of(x).shape) < 3:
        raise ctx.error(f"input of shape {ctx.type_of(x).shape} must have rank 3 or more "
                        f"(N, C, spatial axes)")
    if "size" not in attrs:
        raise ctx.error("attribute size is required")
    ctx.set_output(ctx.add("lrn", [x], size=ctx.int_attr(attrs, "size", None, minimum=1),
                           alpha=ctx.float_attr(attrs, "alpha", 1e-4),
                           beta=ctx.float_attr(attrs, "beta", 0.75),
                           bias=ctx.float_attr(attrs, "bias", 1.0)))


