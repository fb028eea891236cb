"""ONNX import: an .onnx file or an onnx.ModelProto -> a graph Model with static shapes.

    model = from_onnx("resnet18.onnx")                       # or a ModelProto
    model = from_onnx(proto, input_shapes={"x": (1, 3, 224, 224)})   # fix symbolic dims

Covers the operators of ResNet, MobileNet and BERT-style encoders as the PyTorch exporters
write them (opset 11 to 21).  Shape arithmetic (Shape, Gather, Unsqueeze, Concat, ... on
constants) is evaluated while importing, so a Reshape whose target shape is computed from
``x.shape`` sees a constant.  Any operator, attribute value or non-constant argument the
importer does not handle raises :class:`UnsupportedOperatorError` naming the operator and the
node.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

import numpy as np

from ..graph.errors import FrontendError, GraphError, UnsupportedOperatorError
from ..graph.ir import GraphBuilder, Model
from ..graph.operators import get_op
from ..graph.types import TensorType, contiguous

__all__ = ["from_onnx", "SUPPORTED_OPS"]


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as err:  # pragma: no cover - onnx is a test dependency
        raise FrontendError("importing ONNX models needs the onnx package (pip install onnx)"
                            ) from err
    return onnx, numpy_helper


class _Importer:
    def __init__(self, proto, input_shapes: Mapping[str, tuple] | None, name: str | None):
        onnx, self.numpy_helper = _onnx()
        self.onnx = onnx
        graph = proto.graph
        self.opset = 1
        for entry in proto.opset_import:
            if entry.domain in ("", "ai.onnx"):
                self.opset = entry.version
        self.builder = GraphBuilder(name or graph.name or "onnx_model")
        self.values: dict[str, str] = {}  # ONNX value name -> graph value name
        self.input_shapes = dict(input_shapes or {})
        self.node = None  # the node being converted, for error messages
        self.graph = graph

    # -- helpers -----------------------------------------------------------------------------
    def where(self) -> str:
        n = self.node
        return f"node {n.name or '<unnamed>'!r} ({n.op_type})"

    def unsupported(self, what: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(f"ONNX operator {self.node.op_type} in {self.where()}: "
                                        f"{what}")

    def attrs(self) -> dict:
        out = {}
        for a in self.node.attribute:
            out[a.name] = self.onnx.helper.get_attribute_value(a)
            if isinstance(out[a.name], bytes):
                out[a.name] = out[a.name].decode()
        return out

    def value(self, onnx_name: str) -> str:
        try:
            return self.values[onnx_name]
        except KeyError:
            raise FrontendError(f"{self.where()} reads {onnx_name!r}, which no earlier node, "
                                f"input or initializer defines") from None

    def inputs(self) -> list[str | None]:
        """Graph values of the node's inputs; None for an omitted optional input."""
        return [self.value(v) if v else None for v in self.node.input]

    def is_const(self, value: str | None) -> bool:
        return value is not None and value in self.builder.constants

    def const(self, value: str | None, what: str) -> np.ndarray:
        if not self.is_const(value):
            raise self.unsupported(f"{what} must be a constant (computed from initializers "
                                   f"and static shapes)")
        return self.builder.constants[value]

    def type_of(self, value: str):
        return self.builder.type_of(value)

    def add(self, op: str, inputs: list[str], **attrs) -> str:
        """Add a graph node; evaluate it now when every input is a constant."""
        opdef = get_op(op)
        if all(self.is_const(v) for v in inputs):
            arrays = [self.builder.constants[v] for v in inputs]
            try:
                # Type inference first: it validates the attributes and shapes.
                out_type = opdef.infer([TensorType.of(a) for a in arrays], attrs)
                result = np.asarray(opdef.numpy(arrays, attrs), dtype=out_type.dtype)
            except GraphError as err:
                raise FrontendError(f"{self.where()}: {err}") from None
            return self.builder.constant(result.reshape(out_type.shape),
                                         f"{self.node.output[0] or op}_const")
        try:
            return self.builder.op(op, inputs, name=self.node_name(), **attrs)
        except GraphError as err:
            raise FrontendError(f"{self.where()}: {err}") from None

    def constant(self, array, name: str | None = None) -> str:
        return self.builder.constant(contiguous(array), name or "const")

    def node_name(self) -> str:
        return self.node.name or f"{self.node.op_type}_{self.index}"

    def set_output(self, value: str, position: int = 0) -> None:
        outputs = self.node.output
        if position < len(outputs) and outputs[position]:
            self.values[outputs[position]] = value

    def check_single_output(self) -> None:
        used = [o for o in self.node.output[1:] if o and o in self.used]
        if used:
            raise self.unsupported(f"its optional outputs {used} are used; only the first "
                                   f"output is supported")

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> Model:
        graph = self.graph
        initializers = {t.name: t for t in graph.initializer}
        for name, tensor in initializers.items():
            self.values[name] = self.constant(self.numpy_helper.to_array(tensor), name)
        for vi in graph.input:
            if vi.name in initializers:
                continue
            self.values[vi.name] = self.builder.input(vi.name, *self._input_type(vi))
        self.used = {v for n in graph.node for v in n.input} | {o.name for o in graph.output}
        for self.index, self.node in enumerate(graph.node):
            if self.node.domain not in ("", "ai.onnx"):
                raise UnsupportedOperatorError(
                    f"ONNX operator {self.node.domain}.{self.node.op_type} in {self.where()}: "
                    f"only the default ONNX domain is supported")
            convert = _CONVERTERS.get(self.node.op_type)
            if convert is None:
                raise UnsupportedOperatorError(
                    f"ONNX operator {self.node.op_type} in {self.where()} is not supported; "
                    f"supported operators: {', '.join(sorted(_CONVERTERS))}")
            convert(self)
        # Marking an output renames its producer's value in place; remember the new names so
        # that a later output of the same tensor (graph outputs "h" and "y" with
        # y = Identity(h), which the importer collapsed into one value) finds it.
        renamed: dict[str, str] = {}
        for out in graph.output:
            value = self.value(out.name)
            value = renamed.get(value, value)
            if value in self.builder.outputs:
                # Already an output under another name: a copy gives this name its own value.
                self.builder.output(self.builder.op("identity", [value], output=out.name))
            else:
                renamed[value] = self.builder.output(value, out.name)
        return self.builder.build()

    def _input_type(self, vi) -> tuple[tuple, str]:
        tt = vi.type.tensor_type
        dtype = _dtype(self.onnx, tt.elem_type, f"graph input {vi.name!r}")
        if vi.name in self.input_shapes:
            return tuple(int(s) for s in self.input_shapes[vi.name]), dtype
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            else:
                raise FrontendError(f"graph input {vi.name!r} has a symbolic dimension "
                                    f"{d.dim_param or '?'!r}; pass input_shapes="
                                    f"{{{vi.name!r}: (...)}} to fix its shape")
        return tuple(dims), dtype


def _dtype(onnx, elem_type: int, what: str) -> str:
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        raise FrontendError(f"{what}: ONNX element type {elem_type} is not supported") from None


# ---------------------------------------------------------------------------------------------
# converters
# ---------------------------------------------------------------------------------------------

_CONVERTERS: dict[str, Callable[[_Importer], None]] = {}


def _converter(*names):
    def register(fn):
        for name in names:
            _CONVERTERS[name] = fn
        return fn
    return register


@_converter("Constant")
def _constant(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    if "value" in attrs:
        array = ctx.numpy_helper.to_array(
            next(a.t for a in ctx.node.attribute if a.name == "value"))
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


@_converter("Identity", "Dropout")
def _identity(ctx: _Importer) -> None:
    if ctx.node.op_type == "Dropout":
        ctx.check_single_output()
    ctx.set_output(ctx.inputs()[0])


@_converter("Conv")
def _conv(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x, w = inputs[0], inputs[1]
    xt, wt = ctx.type_of(x), ctx.type_of(w)
    if len(xt.shape) != 4:
        raise ctx.unsupported(f"only 2-D convolutions (NCHW input) are supported, got input "
                              f"shape {xt.shape}")
    kernel = tuple(attrs.get("kernel_shape", wt.shape[2:]))
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    pads = _pads_2d(ctx, attrs, xt.shape[2:], kernel, strides, dilations)
    y = ctx.add("conv2d", [x, w], strides=strides, pads=pads, dilations=dilations,
                groups=int(attrs.get("group", 1)))
    if len(inputs) > 2 and inputs[2] is not None:
        bias = inputs[2]
        if ctx.is_const(bias):
            bias = ctx.constant(ctx.const(bias, "bias").reshape(-1, 1, 1), f"{bias}_chw")
        else:
            bias = ctx.add("reshape", [bias], shape=(wt.shape[0], 1, 1))
        y = ctx.add("add", [y, bias])
    ctx.set_output(y)


def _pads_2d(ctx: _Importer, attrs: dict, spatial, kernel, strides, dilations=(1, 1)):
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
        if len(pads) != 4:
            raise ctx.unsupported(f"pads {pads} must have 4 entries for a 2-D window")
        # ONNX order (top, left, bottom, right) is the library's order too.
        return pads
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        before, after = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            before.append(small if auto == "SAME_UPPER" else large)
            after.append(large if auto == "SAME_UPPER" else small)
        return (before[0], before[1], after[0], after[1])
    raise ctx.unsupported(f"auto_pad={auto!r}")


@_converter("Gemm")
def _gemm(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    a, b = inputs[0], inputs[1]
    if attrs.get("transA", 0):
        a = ctx.add("transpose", [a], perm=(1, 0))
    y = ctx.add("matmul", [a, b], transpose_b=bool(attrs.get("transB", 0)))
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    dtype = ctx.type_of(y).dtype
    if alpha != 1.0:
        y = ctx.add("multiply", [y, ctx.constant(np.array(alpha, dtype=dtype))])
    if len(inputs) > 2 and inputs[2] is not None and beta != 0.0:
        c = inputs[2]
        if beta != 1.0:
            c = ctx.add("multiply", [c, ctx.constant(np.array(beta, dtype=dtype))])
        y = ctx.add("add", [y, c])
    ctx.set_output(y)


@_converter("MatMul")
def _matmul(ctx: _Importer) -> None:
    a, b = ctx.inputs()
    if len(ctx.type_of(a).shape) < 2 or len(ctx.type_of(b).shape) < 2:
        raise ctx.unsupported(f"operands of rank 1 ({ctx.type_of(a)} @ {ctx.type_of(b)})")
    ctx.set_output(ctx.add("matmul", [a, b]))


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
           "Pow": "power", "Max": "maximum", "Min": "minimum"}


@_converter(*_BINARY)
def _binary(ctx: _Importer) -> None:
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
    if ta.dtype != tb.dtype:
        if op == "power" and ctx.is_const(b):
            b = ctx.constant(ctx.const(b, "exponent").astype(ta.dtype))
        else:
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
        result = np.trunc(ctx.const(a, "a") / ctx.const(b, "b")).astype(ta.dtype)
        ctx.set_output(ctx.constant(result))
        return
    ctx.set_output(ctx.add(op, [a, b]))


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt",
          "Exp": "exp", "Log": "log", "Abs": "abs", "Neg": "negative"}


@_converter(*_UNARY)
def _unary(ctx: _Importer) -> None:
    ctx.set_output(ctx.add(_UNARY[ctx.node.op_type], [ctx.inputs()[0]]))


@_converter("Gelu")
def _gelu(ctx: _Importer) -> None:
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
def _hard_sigmoid(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    dtype = ctx.type_of(x).dtype
    alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
    y = ctx.add("add", [ctx.add("multiply", [x, ctx.constant(np.array(alpha, dtype))]),
                        ctx.constant(np.array(beta, dtype))])
    ctx.set_output(ctx.add("clip", [y], min=0.0, max=1.0))


@_converter("Clip")
def _clip(ctx: _Importer) -> None:
    inputs = ctx.inputs()
    attrs = ctx.attrs()
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo = float(ctx.const(inputs[1], "min").reshape(())) \
            if len(inputs) > 1 and inputs[1] else None
        hi = float(ctx.const(inputs[2], "max").reshape(())) \
            if len(inputs) > 2 and inputs[2] else None
    ctx.set_output(ctx.add("clip", [inputs[0]], min=lo, max=hi))


@_converter("Softmax")
def _softmax(ctx: _Importer) -> None:
    x = ctx.inputs()[0]
    ndim = len(ctx.type_of(x).shape)
    default = -1 if ctx.opset >= 13 else 1
    axis = ctx.attrs().get("axis", default) % ndim
    if ctx.opset < 13 and axis != ndim - 1:
        # Before opset 13 the input is coerced to 2-D at ``axis``: a softmax over all the
        # trailing axes together, which is not what the library's softmax computes.
        raise ctx.unsupported(f"opset {ctx.opset} softmax over axes {axis}.. of a rank-{ndim} "
                              f"tensor (only the last axis is supported before opset 13)")
    ctx.set_output(ctx.add("softmax", [x], axis=axis))


@_converter("LayerNormalization")
def _layer_norm(ctx: _Importer) -> None:
    ctx.check_single_output()
    attrs = ctx.attrs()
    inputs = [v for v in ctx.inputs() if v is not None]
    ndim = len(ctx.type_of(inputs[0]).shape)
    axis = attrs.get("axis", -1) % ndim
    norm_shape = ctx.type_of(inputs[0]).shape[axis:]
    args = [inputs[0]]
    for v in inputs[1:]:
        if ctx.type_of(v).shape != norm_shape:
            # A scale or bias given with broadcastable leading 1s: reshape to the norm shape.
            v = ctx.add("reshape", [v], shape=norm_shape)
        args.append(v)
    ctx.set_output(ctx.add("layer_norm", args, axis=axis,
                           epsilon=float(attrs.get("epsilon", 1e-5))))


@_converter("BatchNormalization")
def _batch_norm(ctx: _Importer) -> None:
    ctx.check_single_output()
    attrs = ctx.attrs()
    if attrs.get("training_mode", 0):
        raise ctx.unsupported("training_mode=1 (only inference batch norm is supported)")
    ctx.set_output(ctx.add("batch_norm", ctx.inputs()[:5],
                           epsilon=float(attrs.get("epsilon", 1e-5))))


@_converter("MaxPool", "AveragePool")
def _pool(ctx: _Importer) -> None:
    ctx.check_single_output()
    attrs = ctx.attrs()
    x = ctx.inputs()[0]
    xt = ctx.type_of(x)
    if len(xt.shape) != 4:
        raise ctx.unsupported(f"only 2-D pooling (NCHW input) is supported, got {xt.shape}")
    kernel = tuple(attrs["kernel_shape"])
    strides = tuple(attrs.get("strides", (1, 1)))
    if tuple(attrs.get("dilations", (1, 1))) != (1, 1):
        raise ctx.unsupported(f"dilations={attrs['dilations']}")
    pads = _pads_2d(ctx, attrs, xt.shape[2:], kernel, strides)
    if attrs.get("ceil_mode", 0):
        # Ceil mode adds a partial window at the end: pad the bottom/right so that the floor
        # formula gives the same size (max pool ignores padding; an average would not).
        pt, pl, pb, pr = pads
        extra = []
        for size, k, s, b, a in zip(xt.shape[2:], kernel, strides, (pt, pl), (pb, pr)):
            floor_out = (size + b + a - k) // s + 1
            ceil_out = -(-(size + b + a - k) // s) + 1
            if (ceil_out - 1) * s >= size + b:
                ceil_out -= 1  # the last window must start inside the input or left pad
            extra.append((ceil_out - floor_out) * s)
        if any(extra) and ctx.node.op_type == "AveragePool":
            raise ctx.unsupported("ceil_mode=1 with a partial last window")
        pads = (pt, pl, pb + extra[0], pr + extra[1])
    if ctx.node.op_type == "MaxPool":
        y = ctx.add("max_pool2d", [x], kernel=kernel, strides=strides, pads=pads)
    else:
        y = ctx.add("avg_pool2d", [x], kernel=kernel, strides=strides, pads=pads,
                    count_include_pad=bool(attrs.get("count_include_pad", 0)))
    ctx.set_output(y)


@_converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: _Importer) -> None:
    x = ctx.inputs()[0]
    ndim = len(ctx.type_of(x).shape)
    if ctx.node.op_type == "GlobalAveragePool" and ndim == 4:
        ctx.set_output(ctx.add("global_avg_pool2d", [x]))
        return
    op = "reduce_mean" if ctx.node.op_type == "GlobalAveragePool" else "reduce_max"
    ctx.set_output(ctx.add(op, [x], axes=tuple(range(2, ndim)), keepdims=True))


@_converter("Flatten")
def _flatten(ctx: _Importer) -> None:
    x = ctx.inputs()[0]
    shape = ctx.type_of(x).shape
    axis = ctx.attrs().get("axis", 1) % (len(shape) + 1) if shape else 0
    lead = int(np.prod(shape[:axis], dtype=np.int64))
    ctx.set_output(ctx.add("reshape", [x], shape=(lead, int(np.prod(shape[axis:],
                                                                       dtype=np.int64)))))


@_converter("Reshape")
def _reshape(ctx: _Importer) -> None:
    inputs = ctx.inputs()
    x = inputs[0]
    old = ctx.type_of(x).shape
    target = [int(v) for v in ctx.const(inputs[1], "the target shape").reshape(-1)]
    allowzero = ctx.attrs().get("allowzero", 0)
    shape = []
    for d, v in enumerate(target):
        if v == 0 and not allowzero:
            if d >= len(old):
                raise ctx.unsupported(f"target shape {target}: 0 at axis {d} copies an axis "
                                      f"the input {old} does not have")
            v = old[d]
        shape.append(v)
    ctx.set_output(ctx.add("reshape", [x], shape=_infer_minus_one(ctx, old, shape)))


def _infer_minus_one(ctx: _Importer, old, shape) -> tuple:
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


def _axes_arg(ctx: _Importer, inputs, attrs, position: int = 1):
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(inputs) > position and inputs[position] is not None:
        return [int(a) for a in ctx.const(inputs[position], "axes").reshape(-1)]
    return None


@_converter("Unsqueeze")
def _unsqueeze(ctx: _Importer) -> None:
    inputs = ctx.inputs()
    old = ctx.type_of(inputs[0]).shape
    axes = _axes_arg(ctx, inputs, ctx.attrs())
    if axes is None:
        raise ctx.unsupported("no axes given")
    ndim = len(old) + len(axes)
    axes = sorted(a % ndim for a in axes)
    it = iter(old)
    shape = tuple(1 if d in axes else next(it) for d in range(ndim))
    ctx.set_output(ctx.add("reshape", [inputs[0]], shape=shape))


@_converter("Squeeze")
def _squeeze(ctx: _Importer) -> None:
    inputs = ctx.inputs()
    old = ctx.type_of(inputs[0]).shape
    axes = _axes_arg(ctx, inputs, ctx.attrs())
    if axes is None:
        axes = [d for d, s in enumerate(old) if s == 1]
    axes = {a % len(old) for a in axes}
    for a in axes:
        if old[a] != 1:
            raise FrontendError(f"{ctx.where()}: cannot squeeze axis {a} of shape {old}")
    shape = tuple(s for d, s in enumerate(old) if d not in axes)
    ctx.set_output(ctx.add("reshape", [inputs[0]], shape=shape))


@_converter("Transpose")
def _transpose(ctx: _Importer) -> None:
    x = ctx.inputs()[0]
    ndim = len(ctx.type_of(x).shape)
    perm = tuple(ctx.attrs().get("perm", tuple(reversed(range(ndim)))))
    ctx.set_output(ctx.add("transpose", [x], perm=perm))


@_converter("Concat")
def _concat(ctx: _Importer) -> None:
    inputs = [v for v in ctx.inputs() if v is not None]
    ndim = len(ctx.type_of(inputs[0]).shape)
    axis = ctx.attrs()["axis"] % ndim
    if len(inputs) == 1:
        ctx.set_output(inputs[0])
        return
    ctx.set_output(ctx.add("concat", inputs, axis=axis))


@_converter("Pad")
def _pad(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    mode = attrs.get("mode", "constant")
    if mode != "constant":
        raise ctx.unsupported(f"mode={mode!r} (only constant padding)")
    if ctx.opset < 11:
        pads, value = list(attrs["pads"]), float(attrs.get("value", 0.0))
    else:
        pads = [int(v) for v in ctx.const(inputs[1], "pads").reshape(-1)]
        value = float(ctx.const(inputs[2], "constant_value").reshape(())) \
            if len(inputs) > 2 and inputs[2] else 0.0
    ndim = len(shape)
    axes = list(range(ndim))
    if len(inputs) > 3 and inputs[3]:
        axes = [int(a) % ndim for a in ctx.const(inputs[3], "axes").reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise FrontendError(f"{ctx.where()}: pads {pads} must have 2 entries per padded axis")
    widths = [[0, 0] for _ in range(ndim)]
    for k, a in enumerate(axes):
        widths[a] = [pads[k], pads[k + len(axes)]]
    if any(v < 0 for w in widths for v in w):
        raise ctx.unsupported(f"negative pads {pads} (cropping)")
    ctx.set_output(ctx.add("pad", [x], pads=tuple(tuple(w) for w in widths), value=value))


_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min"}


@_converter(*_REDUCE)
def _reduce(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    axes = _axes_arg(ctx, inputs, attrs)
    keepdims = bool(attrs.get("keepdims", 1))
    if axes is None or not axes:
        if attrs.get("noop_with_empty_axes", 0):
            ctx.set_output(x)
            return
        axes = None
    ctx.set_output(ctx.add(_REDUCE[ctx.node.op_type], [x],
                           axes=None if axes is None else tuple(axes), keepdims=keepdims))


@_converter("Cast")
def _cast(ctx: _Importer) -> None:
    dtype = _dtype(ctx.onnx, ctx.attrs()["to"], ctx.where())
    x = ctx.inputs()[0]
    if ctx.type_of(x).dtype == dtype:
        ctx.set_output(x)
        return
    ctx.set_output(ctx.add("cast", [x], dtype=dtype))


@_converter("Shape")
def _shape(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    shape = np.array(ctx.type_of(ctx.inputs()[0]).shape, dtype=np.int64)
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    ctx.set_output(ctx.constant(shape[start:end], ctx.node.output[0]))


@_converter("Size")
def _size(ctx: _Importer) -> None:
    size = int(np.prod(ctx.type_of(ctx.inputs()[0]).shape, dtype=np.int64))
    ctx.set_output(ctx.constant(np.array(size, dtype=np.int64), ctx.node.output[0]))


@_converter("ConstantOfShape")
def _constant_of_shape(ctx: _Importer) -> None:
    shape = [int(v) for v in ctx.const(ctx.inputs()[0], "the shape").reshape(-1)]
    value = np.zeros(1, dtype=np.float32)
    for a in ctx.node.attribute:
        if a.name == "value":
            value = ctx.numpy_helper.to_array(a.t)
    ctx.set_output(ctx.constant(np.full(shape, value.reshape(-1)[0], dtype=value.dtype)))


@_converter("Gather")
def _gather(ctx: _Importer) -> None:
    data, indices = ctx.inputs()
    axis = ctx.attrs().get("axis", 0)
    if not (ctx.is_const(data) and ctx.is_const(indices)):
        raise ctx.unsupported("gathering from a computed tensor (only constant data and "
                              "indices, as in shape arithmetic, are supported)")
    result = np.take(ctx.const(data, "data"), ctx.const(indices, "indices"), axis=axis)
    ctx.set_output(ctx.constant(np.asarray(result)))


@_converter("Slice")
def _slice(ctx: _Importer) -> None:
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    if ctx.opset < 10:
        attrs = ctx.attrs()
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in ctx.const(inputs[1], "starts").reshape(-1)]
        ends = [int(v) for v in ctx.const(inputs[2], "ends").reshape(-1)]
        axes = [int(v) for v in ctx.const(inputs[3], "axes").reshape(-1)] \
            if len(inputs) > 3 and inputs[3] else list(range(len(starts)))
        steps = [int(v) for v in ctx.const(inputs[4], "steps").reshape(-1)] \
            if len(inputs) > 4 and inputs[4] else [1] * len(starts)
    begin, end, step = [0] * len(shape), list(shape), [1] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= len(shape)
        if st <= 0:
            raise ctx.unsupported(f"step {st} (only positive steps)")
        b, e2, _ = slice(s, e, st).indices(shape[a])
        begin[a], end[a], step[a] = b, max(b, e2), st
    _emit_slice(ctx, x, shape, begin, end, step)


def _emit_slice(ctx: _Importer, x: str, shape, begin, end, step, position: int = 0) -> None:
    if list(begin) == [0] * len(shape) and list(end) == list(shape) and \
            list(step) == [1] * len(shape):
        ctx.set_output(x, position)
        return
    ctx.set_output(ctx.add("slice", [x], begin=tuple(begin), end=tuple(end),
                           step=tuple(step)), position)


@_converter("Split")
def _split(ctx: _Importer) -> None:
    attrs = ctx.attrs()
    inputs = ctx.inputs()
    x = inputs[0]
    shape = ctx.type_of(x).shape
    axis = attrs.get("axis", 0) % len(shape)
    outputs = len(ctx.node.output)
    if "split" in attrs:
        sizes = list(attrs["split"])
    elif len(inputs) > 1 and inputs[1]:
        sizes = [int(v) for v in ctx.const(inputs[1], "split").reshape(-1)]
    else:
        extent = shape[axis]
        chunk = -(-extent // outputs)
        sizes = [min(chunk, extent - k * chunk) for k in range(outputs)]
    if sum(sizes) != shape[axis] or len(sizes) != outputs:
        raise FrontendError(f"{ctx.where()}: split sizes {sizes} do not cover axis {axis} of "
                            f"{shape} with {outputs} outputs")
    offset = 0
    for position, size in enumerate(sizes):
        begin, end = [0] * len(shape), list(shape)
        begin[axis], end[axis] = offset, offset + size
        offset += size
        if ctx.node.output[position]:
            _emit_slice(ctx, x, shape, begin, end, [1] * len(shape), position)


@_converter("Expand")
def _expand(ctx: _Importer) -> None:
    x, shape_value = ctx.inputs()
    target = [int(v) for v in ctx.const(shape_value, "the shape").reshape(-1)]
    if ctx.is_const(x):
        array = ctx.const(x, "data")
        ctx.set_output(ctx.constant(contiguous(
            np.broadcast_to(array, np.broadcast_shapes(array.shape, tuple(target))))))
        return
    # A broadcast add of zeros has the expanded shape and stays injective.
    xt = ctx.type_of(x)
    zeros = ctx.constant(np.zeros(target, dtype=xt.dtype))
    ctx.set_output(ctx.add("add", [x, zeros]))


SUPPORTED_OPS = tuple(sorted(_CONVERTERS))


def from_onnx(source, input_shapes: Mapping[str, tuple] | None = None,
              name: str | None = None) -> Model:
    """Import an ONNX model: a path (str or PathLike), serialized bytes or a ModelProto."""
    onnx, _ = _onnx()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise FrontendError(f"no such ONNX file {path!r}")
        try:
            proto = onnx.load(path)
        except Exception as err:
            raise FrontendError(f"{path} is not a readable ONNX model: {err}") from err
        name = name or os.path.splitext(os.path.basename(path))[0]
    elif isinstance(source, (bytes, bytearray)):
        proto = onnx.load_from_string(bytes(source))
    elif isinstance(source, onnx.ModelProto):
        proto = source
    else:
        raise FrontendError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got "
                            f"{type(source).__name__}")
    return _Importer(proto, input_shapes, name).run()
