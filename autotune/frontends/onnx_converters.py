"""ONNX operator converters: one function per ONNX op type, adding graph nodes through the
importer (``autotune.frontends.onnx``), which checks the node against its schema first.

Each converter reads and validates its attributes and constant inputs: an invalid value is a
FrontendError naming the node and the attribute, a valid but unhandled variant is an
UnsupportedOperatorError.
"""
from __future__ import annotations

import math

import numpy as np

from tensor_ir import ops

from ..graph.errors import FrontendError
from ..graph.types import contiguous
from .onnx_context import Importer
from .onnx_registry import ARITY, CONVERTERS, VALUE_DTYPES, value_dtype  # noqa: F401
from .onnx_registry import axes_arg as _axes_arg
from .onnx_registry import converter as _converter
from .onnx_registry import float_input as _float_input


@_converter("Constant", inputs=(0, 0))
def _constant(ctx: Importer) -> None:
    attrs = ctx.attrs()
    if "value" in attrs:
        array = ctx.tensor_array(next(a.t for a in ctx.node.attribute if a.name == "value"),
                                 f"{ctx.where()}: attribute value")
    elif "value_float" in attrs:
        array = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        array = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        array = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        array = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        raise ctx.unsupported(f"attributes {sorted(attrs)} (sparse or string constants)")
    ctx.set_output(ctx.constant(array, ctx.node.output[0]))


@_converter("Identity")
@_converter("Dropout", inputs=(1, 3))
def _identity(ctx: Importer) -> None:
    if ctx.node.op_type == "Dropout":
        inputs = ctx.inputs()
        training = inputs[2] if len(inputs) > 2 else None
        ratio = inputs[1] if len(inputs) > 1 else None
        drops = ratio is None or not ctx.is_const(ratio) or \
            ctx.const(ratio, "ratio").any()
        if drops and (ctx.int_attr(ctx.attrs(), "training_mode", 0) or training is not None
                      and (not ctx.is_const(training) or
                           ctx.const(training, "training_mode").any())):
            # Training-mode dropout draws a random mask: an inference importer has none (a
            # ratio of 0 keeps everything, in training as in inference).
            raise ctx.unsupported("training_mode (random dropout masks)")
        if len(ctx.node.output) > 1 and ctx.node.output[1]:
            # Inference keeps every element: the mask is all True.
            shape = ctx.type_of(inputs[0]).shape
            ctx.set_output(ctx.constant(np.ones(shape, dtype=bool)), 1)
    ctx.set_output(ctx.inputs()[0])


def _window_attrs(ctx: Importer, attrs: dict, kernel_default=None, rank: int = 2):
    """kernel_shape, strides and dilations of a window over ``rank`` spatial axes, each
    checked: one entry per axis, all positive (a zero stride would divide by zero in the
    output-size formula)."""
    if kernel_default is None and "kernel_shape" not in attrs:
        raise ctx.error("attribute kernel_shape is required")
    kernel = ctx.ints_attr(attrs, "kernel_shape", kernel_default, length=rank, minimum=1)
    strides = ctx.ints_attr(attrs, "strides", (1,) * rank, length=rank, minimum=1)
    dilations = ctx.ints_attr(attrs, "dilations", (1,) * rank, length=rank, minimum=1)
    return kernel, strides, dilations


def _window_rank(ctx: Importer, convert, what: str, weight: bool) -> int | None:
    """The spatial rank (2 or 3) of a Conv, ConvTranspose or pool node's input, checked; None
    when the input was 1-D, which ``convert`` has then converted as 2-D (``lift_1d``)."""
    shape = ctx.type_of(ctx.inputs()[0]).shape
    if len(shape) == 3:
        from .onnx_converters_more import lift_1d

        lift_1d(ctx, convert, weight=weight)
        return None
    if len(shape) not in (4, 5):
        verb = "is" if what == "pooling" else "are"
        raise ctx.unsupported(f"only 1-D, 2-D and 3-D {what} (NCL, NCHW, NCDHW input) {verb} "
                              f"supported, got input shape {shape}")
    return len(shape) - 2


def _conv_window(ctx: Importer, attrs: dict, wt, rank: int, layout: str) -> tuple:
    """(kernel, strides, dilations, group) of a Conv or ConvTranspose node over ``rank``
    spatial axes, checked against its weight's type ``wt`` (laid out as ``layout``)."""
    if len(wt.shape) != rank + 2:
        raise ctx.error(f"weight of shape {wt.shape} must have rank {rank + 2} ({layout})")
    kernel, strides, dilations = _window_attrs(ctx, attrs, wt.shape[2:], rank=rank)
    if kernel != wt.shape[2:]:
        raise ctx.bad_attribute("kernel_shape", list(kernel),
                                f"does not match the weight's shape {wt.shape}")
    return kernel, strides, dilations, ctx.int_attr(attrs, "group", 1, minimum=1)


def _add_bias(ctx: Importer, y: str, inputs, channels: int, rank: int) -> str:
    """``y`` plus the optional bias input (one value per output channel) as a per-channel
    add over ``rank`` spatial axes."""
    if len(inputs) < 3 or inputs[2] is None:
        return y
    bias = inputs[2]
    if ctx.type_of(bias).shape != (channels,):
        raise ctx.error(f"bias of shape {ctx.type_of(bias).shape} must have shape "
                        f"({channels},), one value per output channel")
    per_channel = (channels,) + (1,) * rank
    if ctx.is_const(bias):
        bias = ctx.constant(ctx.const(bias, "bias").reshape(per_channel), f"{bias}_chw")
    else:
        bias = ctx.add("reshape", [bias], shape=per_channel)
    return ctx.add("add", [y, bias])


@_converter("Conv", inputs=(2, 3))
def _conv(ctx: Importer) -> None:
    """Conv of any spatial rank: conv2d (whose schedules are tuned; a 1-D input is lifted to
    it), conv3d over a volume; the bias as a per-channel add."""
    rank = _window_rank(ctx, _conv, "convolutions", weight=True)
    if rank is None:
        return
    attrs, inputs = ctx.attrs(), ctx.inputs()
    x, w = inputs[0], inputs[1]
    xt, wt = ctx.type_of(x), ctx.type_of(w)
    kernel, strides, dilations, group = _conv_window(ctx, attrs, wt, rank,
                                                     "OIHW" if rank == 2 else "OIDHW")
    pads = _window_pads(ctx, attrs, xt.shape[2:], kernel, strides, dilations)
    y = ctx.add("conv2d" if rank == 2 else "conv3d", [x, w], strides=strides, pads=pads,
                dilations=dilations, groups=group)
    ctx.set_output(_add_bias(ctx, y, inputs, wt.shape[0], rank))


def _window_pads(ctx: Importer, attrs: dict, spatial, kernel, strides, dilations=None):
    """The pads of a window over the axes ``spatial``: every leading pad, then every trailing
    one (ONNX's order, and the operators'), from ``pads`` or ``auto_pad``."""
    rank = len(spatial)
    dilations = (1,) * rank if dilations is None else dilations
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return ctx.ints_attr(attrs, "pads", (0,) * (2 * rank), length=2 * rank, minimum=0)
    if auto == "VALID":
        return (0,) * (2 * rank)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        before, after = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            before.append(small if auto == "SAME_UPPER" else large)
            after.append(large if auto == "SAME_UPPER" else small)
        return tuple(before) + tuple(after)
    raise ctx.unsupported(f"auto_pad={auto!r}")


@_converter("Gemm", inputs=(2, 3))
def _gemm(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    a, b = inputs[0], inputs[1]
    for what, v in (("A", a), ("B", b)):
        if len(ctx.type_of(v).shape) != 2:
            raise ctx.error(f"input {what} of shape {ctx.type_of(v).shape} must have rank 2")
    trans_a = ctx.int_attr(attrs, "transA", 0, minimum=0, maximum=1)
    trans_b = ctx.int_attr(attrs, "transB", 0, minimum=0, maximum=1)
    if trans_a:
        a = ctx.add("transpose", [a], perm=(1, 0))
    y = ctx.add("matmul", [a, b], transpose_b=bool(trans_b))
    alpha, beta = ctx.float_attr(attrs, "alpha", 1.0), ctx.float_attr(attrs, "beta", 1.0)
    dtype = ctx.type_of(y).dtype
    if alpha != 1.0:
        y = ctx.add("multiply", [y, ctx.constant(np.array(alpha, dtype=dtype))])
    if len(inputs) > 2 and inputs[2] is not None and beta != 0.0:
        c = inputs[2]
        # C broadcasts to A @ B one way only: it must not grow the result.
        out_shape, c_shape = ctx.type_of(y).shape, ctx.type_of(c).shape
        if len(c_shape) > 2 or any(d not in (1, o) for d, o in
                                   zip(reversed(c_shape), reversed(out_shape))):
            raise ctx.error(f"input C of shape {c_shape} does not broadcast to the result "
                            f"shape {out_shape}")
        if beta != 1.0:
            c = ctx.add("multiply", [c, ctx.constant(np.array(beta, dtype=dtype))])
        y = ctx.add("add", [y, c])
    ctx.set_output(y)


@_converter("MatMul", inputs=(2, 2))
def _matmul(ctx: Importer) -> None:
    a, b = ctx.inputs()
    ra, rb = len(ctx.type_of(a).shape), len(ctx.type_of(b).shape)
    if ra >= 2 and rb >= 2:
        ctx.set_output(ctx.add("matmul", [a, b]))
        return
    if ra < 1 or rb < 1:
        raise ctx.error(f"operands must have rank 1 or more ({ctx.type_of(a)} @ "
                        f"{ctx.type_of(b)})")
    # numpy's rule for vectors: a 1 prepended to A's shape or appended to B's, then dropped.
    a2 = ctx.add("reshape", [a], shape=(1,) + ctx.type_of(a).shape) if ra == 1 else a
    b2 = ctx.add("reshape", [b], shape=ctx.type_of(b).shape + (1,)) if rb == 1 else b
    y = ctx.add("matmul", [a2, b2])
    shape = ctx.type_of(y).shape
    if rb == 1:
        shape = shape[:-1]
    if ra == 1:
        shape = shape[:-2] + shape[-1:] if rb != 1 else shape[:-1]
    ctx.set_output(ctx.add("reshape", [y], shape=shape))


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
           "Pow": "power", "Max": "maximum", "Min": "minimum"}


@_converter("Add", "Sub", "Mul", "Div", "Pow", inputs=(2, 2))
@_converter("Max", "Min", inputs=(1, None))
def _binary(ctx: Importer) -> None:
    inputs = ctx.inputs()
    op = _BINARY[ctx.node.op_type]
    if ctx.node.op_type in ("Max", "Min"):
        result = inputs[0]
        for other in inputs[1:]:
            result = ctx.add(op, [result, other])
        ctx.set_output(result)
        return
    a, b = inputs
    ta, tb = ctx.type_of(a), ctx.type_of(b)
    if op == "power" and ta.dtype.startswith("float") and ta.dtype != tb.dtype and \
            ctx.is_const(b):
        b = ctx.constant(ctx.const(b, "exponent").astype(ta.dtype))
        tb = ctx.type_of(b)
    if op == "power" and (ta.dtype != tb.dtype or not ta.dtype.startswith("float")) and \
            not (ctx.is_const(a) and ctx.is_const(b)):
        # The exponent may have another type than the base (ONNX's T1 and T2), and pow is a
        # float function: compute in float64, then back to the base's type.
        wide = [v if ctx.type_of(v).dtype == "float64" else
                ctx.add("cast", [v], dtype="float64") for v in (a, b)]
        y = ctx.add("power", wide)
        ctx.set_output(y if ta.dtype == "float64" else ctx.add("cast", [y], dtype=ta.dtype))
        return
    if ta.dtype != tb.dtype:
        raise ctx.unsupported(f"operand dtypes differ ({ta.dtype} and {tb.dtype})")
    if op == "power" and ctx.is_const(b) and not ctx.is_const(a):
        exponent = ctx.const(b, "exponent")
        if exponent.size == 1 and float(exponent.reshape(())) == 2.0:
            ctx.set_output(ctx.add("multiply", [a, a]))
            return
        if exponent.size == 1 and float(exponent.reshape(())) == 0.5:
            ctx.set_output(ctx.add("sqrt", [a]))
            return
    if ta.dtype.startswith("int") and op == "divide" and ctx.is_const(a) and ctx.is_const(b):
        # Integer division on shapes: ONNX truncates.
        divisor = ctx.const(b, "b")
        if not divisor.all():
            raise ctx.error("integer division by zero in a constant expression")
        try:
            ctx.check_size(np.broadcast_shapes(ta.shape, tb.shape), "the quotient")
        except ValueError:
            raise ctx.error(f"operand shapes {ta.shape} and {tb.shape} do not broadcast"
                            ) from None
        result = np.trunc(ctx.const(a, "a") / divisor).astype(ta.dtype)
        ctx.set_output(ctx.constant(result))
        return
    if op == "divide" and ta.dtype[0] in "iu":
        op = "int_divide"
    ctx.set_output(ctx.add(op, [a, b]))


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt",
          "Exp": "exp", "Log": "log", "Abs": "abs", "Neg": "negative"}


@_converter(*_UNARY)
def _unary(ctx: Importer) -> None:
    ctx.set_output(ctx.add(_UNARY[ctx.node.op_type], [ctx.inputs()[0]]))


@_converter("Gelu")
def _gelu(ctx: Importer) -> None:
    approximate = ctx.attrs().get("approximate", "none")
    x = ctx.inputs()[0]
    if approximate == "none":
        ctx.set_output(ctx.add("gelu", [x]))
        return
    if approximate != "tanh":
        raise ctx.unsupported(f"approximate={approximate!r}")
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    dtype = ctx.type_of(x).dtype

    def c(v):
        return ctx.constant(np.array(v, dtype=dtype))
    cube = ctx.add("multiply", [ctx.add("multiply", [x, x]), x])
    inner = ctx.add("add", [x, ctx.add("multiply", [cube, c(0.044715)])])
    t = ctx.add("tanh", [ctx.add("multiply", [inner, c(float(np.sqrt(2.0 / np.pi)))])])
    y = ctx.add("multiply", [ctx.add("multiply", [x, c(0.5)]), ctx.add("add", [t, c(1.0)])])
    ctx.set_output(y)


@_converter("HardSigmoid")
def _hard_sigmoid(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    ctx.set_output(ctx.add("hard_sigmoid", [x], alpha=ctx.float_attr(attrs, "alpha", 0.2),
                           beta=ctx.float_attr(attrs, "beta", 0.5)))


# ONNX activation -> (graph operator, {attribute: default})
_ACTIVATIONS = {"HardSwish": ("hard_swish", {}), "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
                "Elu": ("elu", {"alpha": 1.0}), "Softplus": ("softplus", {}),
                "Mish": ("mish", {})}


@_converter(*_ACTIVATIONS)
def _activation(ctx: Importer) -> None:
    op, defaults = _ACTIVATIONS[ctx.node.op_type]
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    ctx.set_output(ctx.add(op, [x], **{k: ctx.float_attr(attrs, k, v)
                                       for k, v in defaults.items()}))


@_converter("PRelu", inputs=(2, 2))
def _prelu(ctx: Importer) -> None:
    x, slope = ctx.inputs()
    _float_input(ctx, x)
    xs, ss = ctx.type_of(x).shape, ctx.type_of(slope).shape
    if ctx.opset < 7 and len(ss) == 1 and len(xs) >= 2 and ss[0] == xs[1] != 1:
        # Before opset 7 a slope of one value per channel applies along axis 1 (PyTorch's
        # opset-6 exports write its per-channel slope as (C,)); numpy's rule came with 7.
        slope = ctx.add("reshape", [slope], shape=ss + (1,) * (len(xs) - 2))
        ss = ctx.type_of(slope).shape
    # ONNX broadcasts the slope to X one way, numpy's rule aligning trailing axes (PyTorch
    # exports a per-channel slope as (C, 1, 1)).
    try:
        out = np.broadcast_shapes(xs, ss)
    except ValueError:
        out = None
    if out != xs:
        raise ctx.error(f"slope of shape {ss} does not broadcast to the input's shape {xs}")
    ctx.set_output(ctx.add("prelu", [x, slope]))


_COMPARE = {"Equal": "equal", "Less": "less", "LessOrEqual": "less_equal",
            "Greater": "greater", "GreaterOrEqual": "greater_equal"}


@_converter(*_COMPARE, inputs=(2, 2))
def _compare(ctx: Importer) -> None:
    a, b = ctx.inputs()
    ctx.set_output(ctx.add(_COMPARE[ctx.node.op_type], [a, b]))


_LOGIC = {"And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


@_converter(*_LOGIC, inputs=(2, 2))
def _logic(ctx: Importer) -> None:
    a, b = ctx.inputs()
    ctx.set_output(ctx.add(_LOGIC[ctx.node.op_type], [a, b]))


@_converter("Not")
def _not(ctx: Importer) -> None:
    ctx.set_output(ctx.add("logical_not", [ctx.inputs()[0]]))


@_converter("Where", inputs=(3, 3))
def _where(ctx: Importer) -> None:
    ctx.set_output(ctx.add("where", ctx.inputs()))


@_converter("Clip", inputs=(1, 3))
def _clip(ctx: Importer) -> None:
    inputs = ctx.inputs()
    attrs = ctx.attrs()
    if ctx.opset < 11:
        lo = ctx.float_attr(attrs, "min", None) if "min" in attrs else None
        hi = ctx.float_attr(attrs, "max", None) if "max" in attrs else None
    else:
        lo = ctx.const_scalar(inputs[1], "min") if len(inputs) > 1 and inputs[1] else None
        hi = ctx.const_scalar(inputs[2], "max") if len(inputs) > 2 and inputs[2] else None
    dtype = ctx.type_of(inputs[0]).dtype
    if dtype.startswith("float"):
        # ONNX's defaults are numeric_limits lowest() and max(), not "no bound": an omitted
        # max still turns +inf into the largest finite value, as onnxruntime does.
        info = np.finfo(dtype)
        lo = float(info.min) if lo is None else lo
        hi = float(info.max) if hi is None else hi
    ctx.set_output(ctx.add("clip", [inputs[0]], min=lo, max=hi))


@_converter("LayerNormalization", inputs=(2, 3))
def _layer_norm(ctx: Importer) -> None:
    if any(o and o in ctx.used for o in ctx.node.output[1:]):
        # Mean and InvStdDev are asked for: the composed form gives each a value.
        from .onnx_converters_more import layer_norm_composed

        layer_norm_composed(ctx)
        return
    attrs = ctx.attrs()
    inputs = [v for v in ctx.inputs() if v is not None]
    ndim = len(ctx.type_of(inputs[0]).shape)
    axis = ctx.axis(attrs.get("axis", -1), ndim, "attribute axis")
    norm_shape = ctx.type_of(inputs[0]).shape[axis:]
    args = [inputs[0]]
    for v in inputs[1:]:
        shape = ctx.type_of(v).shape
        if shape != norm_shape:
            # A scale or bias must broadcast to the norm shape (extra leading 1s allowed).
            trimmed = shape
            while len(trimmed) > len(norm_shape) and trimmed[0] == 1:
                trimmed = trimmed[1:]
            if len(trimmed) > len(norm_shape) or any(
                    d not in (1, n) for d, n in zip(reversed(trimmed), reversed(norm_shape))):
                raise ctx.error(f"scale/bias of shape {shape} does not broadcast to "
                                f"X.shape[{axis}:] = {norm_shape}")
            if math.prod(shape) == math.prod(norm_shape):
                v = ctx.add("reshape", [v], shape=norm_shape)
            else:
                v = ctx.constant(contiguous(np.broadcast_to(
                    ctx.const(v, "a broadcast scale/bias").reshape(trimmed), norm_shape)))
        args.append(v)
    ctx.set_output(ctx.add("layer_norm", args, axis=axis,
                           epsilon=ctx.float_attr(attrs, "epsilon", 1e-5)))


@_converter("BatchNormalization", inputs=(5, 5))
def _batch_norm(ctx: Importer) -> None:
    ctx.check_single_output()
    attrs = ctx.attrs()
    if attrs.get("training_mode", 0):
        raise ctx.unsupported("training_mode=1 (only inference batch norm is supported)")
    ctx.set_output(ctx.add("batch_norm", ctx.inputs()[:5],
                           epsilon=ctx.float_attr(attrs, "epsilon", 1e-5)))


@_converter("MaxPool", "AveragePool")
def _pool(ctx: Importer) -> None:
    ctx.check_single_output()
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    rank = _window_rank(ctx, _pool, "pooling", weight=False)
    if rank is None:
        return
    kernel, strides, dilations, pads, extra = pool_window(ctx, attrs, ctx.type_of(x).shape)
    average = ctx.node.op_type == "AveragePool"
    # The 2-D operators (which the blocked layout knows) where they apply; the n-D ones for
    # volumes, dilated windows and an average's partial ceil-mode windows.
    general = rank != 2 or dilations != (1,) * rank or (average and any(extra))
    if not average:
        y = ctx.add("max_pool_nd", [x], kernel=kernel, strides=strides, pads=pads,
                    dilations=dilations) if general else \
            ctx.add("max_pool2d", [x], kernel=kernel, strides=strides, pads=pads)
    else:
        include = bool(ctx.int_attr(attrs, "count_include_pad", 0, minimum=0, maximum=1))
        y = ctx.add("avg_pool_nd", [x], kernel=kernel, strides=strides, pads=pads,
                    dilations=dilations, count_include_pad=include, ceil_pads=extra) \
            if general else ctx.add("avg_pool2d", [x], kernel=kernel, strides=strides,
                                    pads=pads, count_include_pad=include)
    ctx.set_output(y)


def pool_window(ctx: Importer, attrs: dict, shape) -> tuple:
    """(kernel, strides, dilations, pads, ceil pads) of a pooling node over an input of
    ``shape``: the pads include the trailing ones that ceil_mode adds (``ceil pads``)."""
    rank = len(shape) - 2
    kernel, strides, dilations = _window_attrs(ctx, attrs, rank=rank)
    pads = _window_pads(ctx, attrs, shape[2:], kernel, strides, dilations)
    # As onnxruntime: a pad as wide as the window would give windows of padding only (-inf for
    # a max, 0/0 for an average that excludes padding).
    if any(p >= k for p, k in zip(pads, kernel + kernel)):
        raise ctx.bad_attribute("pads", list(pads), f"must be smaller than kernel_shape "
                                                    f"{list(kernel)}")
    extra = (0,) * rank
    if ctx.int_attr(attrs, "ceil_mode", 0, minimum=0, maximum=1):
        # Ceil mode adds a partial window at the end: pad the end so that the floor formula
        # gives the same size (a max ignores padding; an average is told which pads these
        # are, so that it does not count them).
        extra = []
        for axis, (size, k, s, d) in enumerate(zip(shape[2:], kernel, strides, dilations)):
            begin, end = pads[axis], pads[rank + axis]
            span = size + begin + end - (k - 1) * d - 1
            ceil_out = -(-span // s) + 1
            if (ceil_out - 1) * s >= size + begin:
                ceil_out -= 1  # the last window must start inside the input or left pad
            # Just enough padding for the last window to end inside it.
            extra.append(max(0, (ceil_out - 1) * s + (k - 1) * d + 1 - (size + begin + end)))
        extra = tuple(extra)
        pads = pads[:rank] + tuple(p + e for p, e in zip(pads[rank:], extra))
    return kernel, strides, dilations, pads, extra


@_converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: Importer) -> None:
    x = ctx.inputs()[0]
    ndim = len(ctx.type_of(x).shape)
    if ndim < 3:
        raise ctx.error(f"input of shape {ctx.type_of(x).shape} must have rank 3 or more "
                        f"(N, C, spatial axes)")
    if ctx.node.op_type == "GlobalAveragePool" and ndim == 4:
        ctx.set_output(ctx.add("global_avg_pool2d", [x]))
        return
    op = "reduce_mean" if ctx.node.op_type == "GlobalAveragePool" else "reduce_max"
    ctx.set_output(ctx.add(op, [x], axes=tuple(range(2, ndim)), keepdims=True))


@_converter("Flatten")
def _flatten(ctx: Importer) -> None:
    x = ctx.inputs()[0]
    shape = ctx.type_of(x).shape
    # The axis lies in [-rank, rank]: rank puts everything into the first dimension.
    axis = ctx.attrs().get("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise ctx.error(f"attribute axis {axis} is out of range for a rank-{len(shape)} "
                        f"input")
    if axis < 0:
        axis += len(shape)  # ONNX counts a negative axis from the rank, not the rank + 1
    lead = int(np.prod(shape[:axis], dtype=np.int64))
    ctx.set_output(ctx.add("reshape", [x], shape=(lead, int(np.prod(shape[axis:],
                                                                       dtype=np.int64)))))


@_converter("Reshape", inputs=(2, 2))
def _reshape(ctx: Importer) -> None:
    inputs = ctx.inputs()
    x = inputs[0]
    old = ctx.type_of(x).shape
    target = ctx.const_ints(inputs[1], "the target shape")
    allowzero = ctx.int_attr(ctx.attrs(), "allowzero", 0, minimum=0, maximum=1)
    if any(v < -1 for v in target):
        raise ctx.error(f"target shape {target} has an entry below -1")
    if allowzero and 0 in target and -1 in target:
        raise ctx.error(f"target shape {target} has both 0 and -1 with allowzero=1")
    shape = []
    for d, v in enumerate(target):
        if v == 0 and not allowzero:
            if d >= len(old):
                raise ctx.unsupported(f"target shape {target}: 0 at axis {d} copies an axis "
                                      f"the input {old} does not have")
            v = old[d]
        shape.append(v)
    ctx.set_output(ctx.add("reshape", [x], shape=_infer_minus_one(ctx, old, shape)))


def _infer_minus_one(ctx: Importer, old, shape) -> tuple:
    size = int(np.prod(old, dtype=np.int64))
    if shape.count(-1) > 1:
        raise ctx.unsupported(f"target shape {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise FrontendError(f"{ctx.where()}: cannot reshape {old} into {shape}")
        shape = [size // known if s == -1 else s for s in shape]
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise FrontendError(f"{ctx.where()}: cannot reshape {old} into {shape}")
    return tuple(shape)


@_converter("Unsqueeze", inputs=(1, 2))
def _unsqueeze(ctx: Importer) -> None:
    inputs = ctx.inputs()
    old = ctx.type_of(inputs[0]).shape
    attrs = ctx.attrs()
    count = len(attrs["axes"]) if "axes" in attrs else \
        (ctx.const(inputs[1], "axes").size if len(inputs) > 1 and inputs[1] else 0)
    # Unsqueeze axes index the output, whose rank counts the new axes.
    axes = _axes_arg(ctx, inputs, attrs, len(old) + count)
    if axes is None:
        raise ctx.error("no axes given")
    if not axes:  # an empty axes list inserts nothing (ONNX's reference, onnxruntime)
        ctx.set_output(inputs[0])
        return
    ndim = len(old) + len(axes)
    axes = sorted(axes)
    it = iter(old)
    shape = tuple(1 if d in axes else next(it) for d in range(ndim))
    ctx.set_output(ctx.add("reshape", [inputs[0]], shape=shape))


@_converter("Squeeze", inputs=(1, 2))
def _squeeze(ctx: Importer) -> None:
    inputs = ctx.inputs()
    old = ctx.type_of(inputs[0]).shape
    axes = _axes_arg(ctx, inputs, ctx.attrs(), len(old))
    if axes is None:
        axes = [d for d, s in enumerate(old) if s == 1]
    for a in axes:
        if old[a] != 1:
            raise FrontendError(f"{ctx.where()}: cannot squeeze axis {a} of shape {old}")
    shape = tuple(s for d, s in enumerate(old) if d not in axes)
    ctx.set_output(ctx.add("reshape", [inputs[0]], shape=shape))


@_converter("Transpose")
def _transpose(ctx: Importer) -> None:
    x = ctx.inputs()[0]
    ndim = len(ctx.type_of(x).shape)
    perm = ctx.ints_attr(ctx.attrs(), "perm", tuple(reversed(range(ndim))))
    if sorted(perm) != list(range(ndim)):
        raise ctx.bad_attribute("perm", list(perm), f"is not a permutation of the {ndim} "
                                                    f"axes")
    ctx.set_output(ctx.add("transpose", [x], perm=perm))


@_converter("Concat", inputs=(1, None))
def _concat(ctx: Importer) -> None:
    inputs = [v for v in ctx.inputs() if v is not None]
    ndim = len(ctx.type_of(inputs[0]).shape)
    attrs = ctx.attrs()
    if "axis" not in attrs:
        raise ctx.error("attribute axis is required")
    axis = ctx.axis(attrs["axis"], ndim, "attribute axis")
    if len(inputs) == 1:
        ctx.set_output(inputs[0])
        return
    ctx.set_output(ctx.add("concat", inputs, axis=axis))


@_converter("Pad", inputs=(1, 4))
def _pad(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ctx.unsupported(f"mode={mode!r}")
    if ctx.opset < 11:
        if "pads" not in attrs:
            raise ctx.error("attribute pads is required")
        pads, value = list(ctx.ints_attr(attrs, "pads", ())), ctx.float_attr(attrs, "value", 0.0)
    else:
        if len(inputs) < 2 or inputs[1] is None:
            raise ctx.error("input pads is required")
        pads = ctx.const_ints(inputs[1], "pads")
        value = ctx.const_scalar(inputs[2], "constant_value") \
            if len(inputs) > 2 and inputs[2] else 0.0
    ndim = len(shape)
    axes = list(range(ndim))
    if len(inputs) > 3 and inputs[3]:
        axes = _axes_arg(ctx, inputs, {}, ndim, position=3)
    if len(pads) != 2 * len(axes):
        raise FrontendError(f"{ctx.where()}: pads {pads} must have 2 entries per padded axis")
    widths = [[0, 0] for _ in range(ndim)]
    for k, a in enumerate(axes):
        widths[a] = [pads[k], pads[k + len(axes)]]
    if any(v < 0 for w in widths for v in w):
        raise ctx.unsupported(f"negative pads {pads} (cropping)")
    widths = tuple(tuple(w) for w in widths)
    if mode != "constant":
        if all(v == 0 for w in widths for v in w):
            ctx.set_output(x)
            return
        ctx.set_output(ctx.add("pad_mode", [x], pads=widths, mode=mode))
        return
    ctx.set_output(ctx.add("pad", [x], pads=widths, value=value))


_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL2": "reduce_l2"}


@_converter(*_REDUCE, inputs=(1, 2))
def _reduce(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    axes = _axes_arg(ctx, inputs, attrs, len(ctx.type_of(x).shape), unique=False)
    keepdims = bool(ctx.int_attr(attrs, "keepdims", 1, minimum=0, maximum=1))
    if axes is None or not axes:
        if ctx.int_attr(attrs, "noop_with_empty_axes", 0, minimum=0, maximum=1):
            ctx.set_output(x)
            return
        axes = None
    ctx.set_output(ctx.add(_REDUCE[ctx.node.op_type], [x],
                           axes=None if axes is None else tuple(axes), keepdims=keepdims))


@_converter("Cast")
def _cast(ctx: Importer) -> None:
    attrs = ctx.attrs()
    if "to" not in attrs:
        raise ctx.error("attribute to is required")
    dtype = value_dtype(ctx.onnx, ctx.int_attr(attrs, "to", None),
                        f"{ctx.where()}: attribute to")
    x = ctx.inputs()[0]
    if ctx.type_of(x).dtype == dtype:
        ctx.set_output(x)
        return
    ctx.set_output(ctx.add("cast", [x], dtype=dtype))


@_converter("Shape")
def _shape(ctx: Importer) -> None:
    attrs = ctx.attrs()
    shape = np.array(ctx.type_of(ctx.inputs()[0]).shape, dtype=np.int64)
    start = ctx.int_attr(attrs, "start", 0)
    end = ctx.int_attr(attrs, "end", len(shape))
    ctx.set_output(ctx.constant(shape[start:end], ctx.node.output[0]))


@_converter("Size")
def _size(ctx: Importer) -> None:
    size = int(np.prod(ctx.type_of(ctx.inputs()[0]).shape, dtype=np.int64))
    ctx.set_output(ctx.constant(np.array(size, dtype=np.int64), ctx.node.output[0]))


@_converter("ConstantOfShape")
def _constant_of_shape(ctx: Importer) -> None:
    shape = ctx.const_ints(ctx.inputs()[0], "the shape")
    ctx.check_size(shape, "the output")
    value = np.zeros(1, dtype=np.float32)
    for a in ctx.node.attribute:
        if a.name == "value":
            value = ctx.tensor_array(a.t, f"{ctx.where()}: attribute value")
            if value.size != 1:
                raise ctx.bad_attribute("value", value.tolist(), "must hold one element")
    ctx.set_output(ctx.constant(np.full(shape, value.reshape(-1)[0], dtype=value.dtype)))


@_converter("Gather", inputs=(2, 2))
def _gather(ctx: Importer) -> None:
    data, indices = ctx.inputs()
    if not (ctx.is_const(data) and ctx.is_const(indices)):
        from .onnx_converters_more import gather_runtime

        axis = ctx.axis(ctx.int_attr(ctx.attrs(), "axis", 0), len(ctx.type_of(data).shape),
                        "attribute axis")
        gather_runtime(ctx, data, indices, axis)
        return
    array, index = ctx.const(data, "data"), ctx.const(indices, "indices")
    axis = ctx.axis(ctx.attrs().get("axis", 0), array.ndim, "attribute axis")
    if index.dtype.kind not in "iu":
        raise ctx.error(f"indices must be integers, got {index.dtype}")
    extent = array.shape[axis]
    if index.size and not (-extent <= index.min() and index.max() < extent):
        raise ctx.error(f"indices {index.reshape(-1).tolist()[:8]} are out of range for axis "
                        f"{axis} of extent {extent}")
    ctx.check_size(array.shape[:axis] + index.shape + array.shape[axis + 1:], "the output")
    result = np.take(array, index, axis=axis)
    ctx.set_output(ctx.constant(np.asarray(result)))


@_converter("Slice", inputs=(1, 5))
def _slice(ctx: Importer) -> None:
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    if ctx.opset < 10:
        attrs = ctx.attrs()
        if "starts" not in attrs or "ends" not in attrs:
            raise ctx.error("attributes starts and ends are required")
        starts, ends = list(ctx.ints_attr(attrs, "starts", ())), \
            list(ctx.ints_attr(attrs, "ends", ()))
        axes = list(ctx.ints_attr(attrs, "axes", tuple(range(len(starts)))))
        steps = [1] * len(starts)
    else:
        if len(inputs) < 3 or inputs[1] is None or inputs[2] is None:
            raise ctx.error("inputs starts and ends are required")
        starts = ctx.const_ints(inputs[1], "starts")
        ends = ctx.const_ints(inputs[2], "ends")
        axes = ctx.const_ints(inputs[3], "axes") \
            if len(inputs) > 3 and inputs[3] else list(range(len(starts)))
        steps = ctx.const_ints(inputs[4], "steps") \
            if len(inputs) > 4 and inputs[4] else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} must "
                        f"have the same length")
    normal = [ctx.axis(a, len(shape), "axes entry") for a in axes]
    if len(set(normal)) != len(normal):
        raise ctx.error(f"axes {axes} repeat an axis")
    begin, end, step = [0] * len(shape), list(shape), [1] * len(shape)
    for s, e, a, st in zip(starts, ends, normal, steps):
        if st <= 0:
            raise ctx.unsupported(f"step {st} (only positive steps)")
        b, e2, _ = slice(s, e, st).indices(shape[a])
        begin[a], end[a], step[a] = b, max(b, e2), st
    _emit_slice(ctx, x, shape, begin, end, step)


def _emit_slice(ctx: Importer, x: str, shape, begin, end, step, position: int = 0) -> None:
    if list(begin) == [0] * len(shape) and list(end) == list(shape) and \
            list(step) == [1] * len(shape):
        ctx.set_output(x, position)
        return
    ctx.set_output(ctx.add("slice", [x], begin=tuple(begin), end=tuple(end),
                           step=tuple(step)), position)


@_converter("Split", inputs=(1, 2))
def _split(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    axis = ctx.axis(attrs.get("axis", 0), len(shape), "attribute axis")
    outputs = len(ctx.node.output)
    if "split" in attrs:
        sizes = list(ctx.ints_attr(attrs, "split", ()))
    elif len(inputs) > 1 and inputs[1]:
        sizes = ctx.const_ints(inputs[1], "split")
    else:
        extent = shape[axis]
        if "num_outputs" in attrs:
            if ctx.int_attr(attrs, "num_outputs", None, minimum=1) != outputs:
                raise ctx.bad_attribute("num_outputs", attrs["num_outputs"],
                                        f"differs from the node's {outputs} outputs")
        elif ctx.opset >= 18:
            raise ctx.error("needs the split input or attribute num_outputs (opset 18)")
        elif extent % outputs:
            # Before opset 18 an implicit split is even: num_outputs brought the short tail.
            raise ctx.error(f"axis {axis} of extent {extent} does not split evenly into "
                            f"{outputs} outputs")
        chunk = -(-extent // outputs)
        sizes = [min(chunk, extent - k * chunk) for k in range(outputs)]
    if sum(sizes) != shape[axis] or len(sizes) != outputs or any(v < 0 for v in sizes):
        raise FrontendError(f"{ctx.where()}: split sizes {sizes} do not cover axis {axis} of "
                            f"{shape} with {outputs} outputs")
    offset = 0
    for position, size in enumerate(sizes):
        begin, end = [0] * len(shape), list(shape)
        begin[axis], end[axis] = offset, offset + size
        offset += size
        if ctx.node.output[position]:
            _emit_slice(ctx, x, shape, begin, end, [1] * len(shape), position)


@_converter("Expand", inputs=(2, 2))
def _expand(ctx: Importer) -> None:
    x, shape_value = ctx.inputs()
    target = ctx.const_ints(shape_value, "the shape")
    xt = ctx.type_of(x)
    ctx.check_size(target, "the shape input")
    try:
        out_shape = np.broadcast_shapes(xt.shape, tuple(target))
    except ValueError:
        raise ctx.error(f"input of shape {xt.shape} does not broadcast to {target}") from None
    ctx.check_size(out_shape, "the output")
    if 0 in out_shape:
        # An empty result has one value whatever the input: a constant.
        ctx.set_output(ctx.constant(np.zeros(out_shape, dtype=xt.dtype)))
        return
    if ctx.is_const(x):
        array = ctx.const(x, "data")
        ctx.set_output(ctx.constant(contiguous(np.broadcast_to(array, out_shape))))
        return
    # A broadcast add of zeros has the expanded shape and stays injective; a bool tensor (a
    # mask expanded to the scores' shape, as DistilBERT's masked_fill exports) has no '+', and
    # an 'or' with False is its identity instead.
    zeros = ctx.constant(np.zeros(target, dtype=xt.dtype))
    op = "logical_or" if xt.dtype == "bool" else "add"
    ctx.set_output(ctx.add(op, [x, zeros]))


@_converter("Trilu", inputs=(1, 2))
def _trilu(ctx: Importer) -> None:
    inputs = ctx.inputs()
    x = inputs[0]
    if len(ctx.type_of(x).shape) < 2:
        raise ctx.error(f"input of shape {ctx.type_of(x).shape} must have rank 2 or more")
    k = 0
    if len(inputs) > 1 and inputs[1] is not None:
        values = ctx.const_ints(inputs[1], "k")
        if len(values) != 1:
            raise ctx.error(f"k must be a single integer, got {values}")
        k = values[0]
    upper = bool(ctx.int_attr(ctx.attrs(), "upper", 1, minimum=0, maximum=1))
    ctx.set_output(ctx.add("trilu", [x], k=k, upper=upper))


@_converter("Tile", inputs=(2, 2))
def _tile(ctx: Importer) -> None:
    x, repeats_value = ctx.inputs()
    shape = ctx.type_of(x).shape
    repeats = ctx.const_ints(repeats_value, "repeats")
    if len(repeats) != len(shape):
        raise ctx.error(f"repeats {repeats} must have one entry per axis of the rank-"
                        f"{len(shape)} input")
    if any(r < 0 for r in repeats):
        raise ctx.error(f"repeats {repeats} must be non-negative")
    if 0 in repeats:
        # NOTE: kernels are generated for non-empty extents only.
        raise ctx.unsupported(f"repeats {repeats} give an empty result")
    if all(r == 1 for r in repeats):
        ctx.set_output(x)
        return
    ctx.set_output(ctx.add("tile", [x], repeats=tuple(repeats)))


@_converter("Range", inputs=(3, 3))
def _range(ctx: Importer) -> None:
    start, limit, delta = (ctx.const(v, what) for v, what in
                           zip(ctx.inputs(), ("start", "limit", "delta")))
    for what, array in (("start", start), ("limit", limit), ("delta", delta)):
        if array.size != 1:
            raise ctx.error(f"{what} must be a scalar, got shape {array.shape}")
    start, limit, delta = (a.reshape(()) for a in (start, limit, delta))
    if delta == 0:
        raise ctx.error("delta is 0")
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    ctx.check_size((count,), "the output")
    # start + k * delta in the inputs' type, as ONNX defines each element.
    values = (start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)
    ctx.set_output(ctx.constant(values, ctx.node.output[0]))


@_converter("ArgMax", "ArgMin")
def _arg_reduce(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    ndim = len(ctx.type_of(x).shape)
    axis = ctx.axis(ctx.int_attr(attrs, "axis", 0), ndim, "attribute axis")
    keepdims = bool(ctx.int_attr(attrs, "keepdims", 1, minimum=0, maximum=1))
    last = bool(ctx.int_attr(attrs, "select_last_index", 0, minimum=0, maximum=1))
    op = "argmax" if ctx.node.op_type == "ArgMax" else "argmin"
    ctx.set_output(ctx.add(op, [x], axis=axis, keepdims=keepdims, select_last_index=last))


def _per_channel(ctx: Importer, value: str, channels: int, groups: int, what: str) -> str:
    """A scale or bias of shape (C,), or of shape (groups,) (GroupNormalization before opset
    21), as one value per channel."""
    shape = ctx.type_of(value).shape
    if shape == (channels,):
        return value
    if shape == (groups,):
        array = ctx.const(value, f"a per-group {what}")
        return ctx.constant(np.repeat(array, channels // groups))
    raise ctx.error(f"{what} of shape {shape} must have shape ({channels},)"
                    + (f" or ({groups},)" if groups != channels else ""))


@_converter("InstanceNormalization", inputs=(3, 3))
@_converter("GroupNormalization", inputs=(3, 3))
def _group_norm(ctx: Importer) -> None:
    attrs = ctx.attrs()
    x, scale, bias = ctx.inputs()
    xt = ctx.type_of(x)
    if len(xt.shape) < 3:
        raise ctx.error(f"input of shape {xt.shape} must have rank 3 or more (N, C, ...)")
    _float_input(ctx, x)
    channels = xt.shape[1]
    if ctx.node.op_type == "InstanceNormalization":
        groups = channels
    else:
        if "num_groups" not in attrs:
            raise ctx.error("attribute num_groups is required")
        groups = ctx.int_attr(attrs, "num_groups", None, minimum=1)
        if channels % groups:
            raise ctx.bad_attribute("num_groups", groups, f"does not divide the {channels} "
                                                          f"channels")
    scale = _per_channel(ctx, scale, channels, groups, "scale")
    bias = _per_channel(ctx, bias, channels, groups, "bias")
    ctx.set_output(ctx.add("group_norm", [x, scale, bias], groups=groups,
                           epsilon=ctx.float_attr(attrs, "epsilon", 1e-5)))


_RESIZE_MODES = {"nearest": "nearest", "linear": "linear"}


@_converter("Resize", inputs=(1, 4))
def _resize(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs() + [None] * (4 - len(ctx.node.input))
    x = inputs[0]
    shape = ctx.type_of(x).shape
    if ctx.opset < 11:
        raise ctx.unsupported(f"opset {ctx.opset} Resize (its coordinates predate "
                              f"coordinate_transformation_mode; opset 11 and later only)")
    if len(shape) != 4:
        raise ctx.unsupported(f"only NCHW (rank-4) inputs are resized, got shape {shape}")
    mode = attrs.get("mode", "nearest")
    if mode not in _RESIZE_MODES:
        raise ctx.unsupported(f"mode={mode!r} (nearest and linear only)")
    coordinate = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coordinate not in ops.RESIZE_COORDINATES:
        raise ctx.unsupported(f"coordinate_transformation_mode={coordinate!r}")
    rounding = attrs.get("nearest_mode", "round_prefer_floor")
    if rounding not in ops.RESIZE_ROUNDING:
        raise ctx.unsupported(f"nearest_mode={rounding!r}")
    if ctx.int_attr(attrs, "antialias", 0, minimum=0, maximum=1):
        raise ctx.unsupported("antialias=1")
    axes = list(range(4))
    if "axes" in attrs:
        axes = [ctx.axis(a, 4, "attribute axes entry") for a in ctx.ints_attr(attrs, "axes", ())]
    scales_value, sizes_value = inputs[2], inputs[3]
    has_scales = scales_value is not None and ctx.const(scales_value, "scales").size > 0
    has_sizes = sizes_value is not None and ctx.const(sizes_value, "sizes").size > 0
    if has_scales == has_sizes:
        raise ctx.error("exactly one of scales and sizes must be given")
    if has_sizes:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            raise ctx.bad_attribute("keep_aspect_ratio_policy", policy,
                                    "is not stretch, not_larger or not_smaller")
        given = ctx.const_ints(sizes_value, "sizes")
        if len(given) != len(axes):
            raise ctx.error(f"sizes {given} must have one entry per resized axis {axes}")
        size = list(shape)
        for a, v in zip(axes, given):
            if v < 1:
                raise ctx.error(f"sizes {given} must be positive")
            size[a] = v
        scales = [o / i for o, i in zip(size, shape)]
        if policy != "stretch":
            # One scale for every resized axis, the one that keeps the sizes within (not
            # larger) or around (not smaller) the given ones; sizes rounded half up.
            pick = min if policy == "not_larger" else max
            common = pick(scales[a] for a in axes)
            for a in axes:
                scales[a] = common
                size[a] = int(math.floor(common * shape[a] + 0.5))
    else:
        given = [float(v) for v in ctx.const(scales_value, "scales").reshape(-1)]
        if len(given) != len(axes):
            raise ctx.error(f"scales {given} must have one entry per resized axis {axes}")
        if any(v <= 0 for v in given):
            raise ctx.error(f"scales {given} must be positive")
        scales = [1.0] * 4
        for a, v in zip(axes, given):
            scales[a] = v
        size = [math.floor(i * v) for i, v in zip(shape, scales)]
    if tuple(size[:2]) != tuple(shape[:2]):
        raise ctx.unsupported(f"resizing the batch or channel axis ({shape} to {tuple(size)}); "
                              f"only H and W")
    if 0 in size:
        raise ctx.unsupported(f"the empty output size {tuple(size)}")
    if tuple(size) == tuple(shape) and all(v == 1.0 for v in scales[2:]):
        ctx.set_output(x)
        return
    ctx.set_output(ctx.add("resize2d", [x], size=tuple(size[2:]), scales=tuple(scales[2:]),
                           mode=_RESIZE_MODES[mode], coordinate=coordinate, rounding=rounding))


@_converter("ConvTranspose", inputs=(2, 3))
def _conv_transpose(ctx: Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x, w = inputs[0], inputs[1]
    xt, wt = ctx.type_of(x), ctx.type_of(w)
    rank = _window_rank(ctx, _conv_transpose, "transposed convolutions", weight=True)
    if rank is None:
        return
    kernel, strides, dilations, group = _conv_window(ctx, attrs, wt, rank,
                                                     "C, K/group, kernel...")
    if wt.shape[0] != xt.shape[1]:
        raise ctx.error(f"weight of shape {wt.shape} does not match the input's "
                        f"{xt.shape[1]} channels")
    if xt.shape[1] % group:
        raise ctx.bad_attribute("group", group, f"does not divide the {xt.shape[1]} input "
                                                f"channels")
    out_pad = ctx.ints_attr(attrs, "output_padding", (0,) * rank, length=rank, minimum=0)
    if any(p >= max(s, d) for p, s, d in zip(out_pad, strides, dilations)):
        raise ctx.bad_attribute("output_padding", list(out_pad),
                                f"must be smaller than strides {list(strides)} or dilations "
                                f"{list(dilations)}")
    spatial = xt.shape[2:]
    full = [(i - 1) * s + (k - 1) * d + 1 + p
            for i, s, k, d, p in zip(spatial, strides, kernel, dilations, out_pad)]
    auto = attrs.get("auto_pad", "NOTSET")

    def split(total, upper):
        # ONNX puts the larger half first unless auto_pad is SAME_UPPER.
        before = [t // 2 if upper else t - t // 2 for t in total]
        return tuple(before) + tuple(t - b for t, b in zip(total, before))

    if "output_shape" in attrs:
        target = ctx.ints_attr(attrs, "output_shape", ())[-rank:]
        if len(target) != rank:
            raise ctx.bad_attribute("output_shape", attrs["output_shape"],
                                    f"needs {rank} spatial sizes")
        total = [f - t for f, t in zip(full, target)]
        # A size beyond the full output is reached by output padding (ONNX's reference and
        # onnxruntime read it so): the missing rows at the end, none cropped.
        out_pad = tuple(p - min(t, 0) for p, t in zip(out_pad, total))
        pads = split([max(t, 0) for t in total], auto == "SAME_UPPER")
    elif auto in ("NOTSET", ""):
        pads = ctx.ints_attr(attrs, "pads", (0,) * (2 * rank), length=2 * rank, minimum=0)
    elif auto == "VALID":
        pads = (0,) * (2 * rank)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        # The output is input * stride; the padding that removes the rest is split as ONNX
        # says: the larger half at the end for SAME_UPPER, at the beginning for SAME_LOWER.
        total = [f - i * s for f, i, s in zip(full, spatial, strides)]
        if any(t < 0 for t in total):
            raise ctx.unsupported(f"auto_pad={auto} with kernel {list(kernel)} smaller than "
                                  f"strides {list(strides)}")
        pads = split(total, auto == "SAME_UPPER")
    else:
        raise ctx.unsupported(f"auto_pad={auto!r}")
    # conv2d_transpose where it applies; the n-D operator for volumes and dilated kernels.
    if rank == 2 and dilations == (1, 1) and all(p < s for p, s in zip(out_pad, strides)):
        def transposed(a, b):
            return ctx.add("conv2d_transpose", [a, b], strides=strides, pads=tuple(pads),
                           output_padding=out_pad)
    else:
        def transposed(a, b):
            return ctx.add("conv_transpose_nd", [a, b], strides=strides, pads=tuple(pads),
                           dilations=dilations, output_padding=out_pad)
    if group == 1:
        y = transposed(x, w)
    else:
        # Groups as separate transposed convolutions over channel slices, concatenated.
        per = xt.shape[1] // group
        parts = []
        for g in range(group):
            def channels(value, shape):
                begin, end = [0] * len(shape), list(shape)
                begin[1 if value is x else 0], end[1 if value is x else 0] = \
                    g * per, (g + 1) * per
                return ctx.add("slice", [value], begin=tuple(begin), end=tuple(end),
                               step=(1,) * len(shape))
            parts.append(transposed(channels(x, xt.shape), channels(w, wt.shape)))
        y = ctx.add("concat", parts, axis=1)
    ctx.set_output(_add_bias(ctx, y, inputs, wt.shape[1] * group, rank))


def _einsum_terms(ctx: Importer, equation: str, ranks: list[int]
                  ) -> tuple[list[str], str]:
    """The operand subscripts and the output's, with ``...`` spelled out as letters of their
    own (upper case ones the equation does not use), and the implicit output made explicit."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.bad_attribute("equation", equation, f"names {len(terms)} operands; the node "
                                                      f"has {len(ranks)}")
    used = set(text)
    spare = [c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in used]
    ellipsis_rank = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            ellipsis_rank = max(ellipsis_rank, rank - len(term.replace("...", "")))
    if ellipsis_rank > len(spare):
        raise ctx.unsupported(f"equation {equation!r}: too many axes under '...'")
    fill = "".join(spare[:ellipsis_rank][::-1])
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            own = rank - len(term.replace("...", ""))
            term = term.replace("...", fill[len(fill) - own:] if own else "")
        if not term.isalpha() or len(term) != rank:
            raise ctx.bad_attribute("equation", equation, f"term {term!r} does not match an "
                                                          f"operand of rank {rank}")
        if len(set(term)) != len(term):
            raise ctx.unsupported(f"equation {equation!r}: a letter repeated in one operand "
                                  f"(diagonals)")
        expanded.append(term)
    if arrow:
        out = rhs.replace("...", fill)
    else:
        # Implicit output: the ellipsis axes, then the letters used once, in alphabetical order.
        counts = {c: "".join(expanded).count(c) for c in set("".join(expanded))}
        out = fill + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in fill))
    if not out.isalpha() and out or len(set(out)) != len(out) or \
            any(c not in "".join(expanded) for c in out):
        raise ctx.bad_attribute("equation", equation, f"has an invalid output {rhs!r}")
    return expanded, out


def _permute(ctx: Importer, value: str, term: str, order: str) -> str:
    if term == order:
        return value
    return ctx.add("transpose", [value], perm=tuple(term.index(c) for c in order))


def _reshape_to(ctx: Importer, value: str, shape) -> str:
    shape = tuple(int(v) for v in shape)
    if ctx.type_of(value).shape == shape:
        return value
    return ctx.add("reshape", [value], shape=shape)


@_converter("Einsum", inputs=(1, None))
def _einsum(ctx: Importer) -> None:
    attrs = ctx.attrs()
    if "equation" not in attrs:
        raise ctx.error("attribute equation is required")
    inputs = ctx.inputs()
    if len(inputs) > 2:
        raise ctx.unsupported(f"{len(inputs)} operands (one or two are supported)")
    shapes = [ctx.type_of(v).shape for v in inputs]
    terms, out = _einsum_terms(ctx, attrs["equation"], [len(s) for s in shapes])
    extent: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        for c, d in zip(term, shape):
            if extent.setdefault(c, d) != d:
                raise ctx.unsupported(f"equation {attrs['equation']!r}: axis {c!r} has extents "
                                      f"{extent[c]} and {d} (broadcasting is not supported)")
    # Sum each operand over the letters nothing else uses.
    values = []
    for k, (value, term) in enumerate(zip(inputs, terms)):
        others = out + "".join(t for j, t in enumerate(terms) if j != k)
        alone = [d for d, c in enumerate(term) if c not in others]
        if alone:
            value = ctx.add("reduce_sum", [value], axes=tuple(alone), keepdims=False)
            term = "".join(c for c in term if c in others)
        values.append(value)
        terms[k] = term
    if len(values) == 1:
        ctx.set_output(_permute(ctx, values[0], terms[0], out))
        return
    (a, b), (ta, tb) = values, terms
    batch = "".join(c for c in out if c in ta and c in tb)
    m = "".join(c for c in out if c in ta and c not in tb)
    n = "".join(c for c in out if c in tb and c not in ta)
    k = "".join(c for c in ta if c in tb and c not in out)

    def size(letters):
        return math.prod(extent[c] for c in letters)

    a = _reshape_to(ctx, _permute(ctx, a, ta, batch + m + k),
                    ((size(batch),) if batch else ()) + (size(m), size(k)))
    # B read as [batch, n, k] needs no transpose: matmul takes it with transpose_b.
    trans_b = tb == batch + n + k and tb != batch + k + n
    order_b = batch + n + k if trans_b else batch + k + n
    inner = (size(n), size(k)) if trans_b else (size(k), size(n))
    b = _reshape_to(ctx, _permute(ctx, b, tb, order_b),
                    ((size(batch),) if batch else ()) + inner)
    y = ctx.add("matmul", [a, b], transpose_b=trans_b)
    y = _reshape_to(ctx, y, [extent[c] for c in batch + m + n])
    ctx.set_output(_permute(ctx, y, batch + m + n, out))


@_converter("LpPool")
def _lp_pool(ctx: Importer) -> None:
    """(sum over the window of |x|^p)^(1/p): a sum pool (an average that counts every window
    element, padding and ceil-mode overhang alike, times the window size) between powers;
    padding adds zeros, as ONNX's reference reads it."""
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    _float_input(ctx, x)
    if _window_rank(ctx, _lp_pool, "pooling", weight=False) is None:
        return
    xt = ctx.type_of(x)
    p = ctx.int_attr(attrs, "p", 2, minimum=1)
    kernel, strides, dilations, pads, _ = pool_window(ctx, attrs, xt.shape)
    dtype = xt.dtype
    powered = ctx.add("abs", [x]) if p == 1 else ctx.add("multiply", [x, x]) if p == 2 else \
        ctx.add("power", [ctx.add("abs", [x]), ctx.constant(np.array(p, dtype))])
    mean = ctx.add("avg_pool_nd", [powered], kernel=kernel, strides=strides, pads=pads,
                   dilations=dilations, count_include_pad=True, ceil_pads=(0,) * len(kernel))
    total = ctx.add("multiply", [mean, ctx.constant(np.array(math.prod(kernel), dtype))])
    if p == 1:
        ctx.set_output(total)
    elif p == 2:
        ctx.set_output(ctx.add("sqrt", [total]))
    else:
        ctx.set_output(ctx.add("power", [total, ctx.constant(np.array(1.0 / p, dtype))]))


# The converters of the rest of ONNX's elementwise math, the composite reductions and the
# gathers register themselves on import.
from . import onnx_converters_more  # noqa: E402,F401
