"""ONNX import: an .onnx file or an onnx.ModelProto -> a graph Model with static shapes.

    model = from_onnx("resnet18.onnx")                       # or a ModelProto
    model = from_onnx(proto, input_shapes={"x": (1, 3, 224, 224)})   # fix symbolic dims

Symbolic dimensions (PyTorch's dynamic batch and sequence axes) must be fixed by
``input_shapes``; a model imported without it raises one FrontendError naming every input
and axis left symbolic.

Covers the operators of ResNet, MobileNet and BERT-style encoders as the PyTorch exporters
write them (opset 11 to 21).  Shape arithmetic (Shape, Gather, Unsqueeze, Concat, ... on
constants) is evaluated while importing, so a Reshape whose target shape is computed from
``x.shape`` sees a constant.  Any operator, attribute value or non-constant argument the
importer does not handle raises :class:`UnsupportedOperatorError` naming the operator and the
node; an operator without a converter that ONNX defines as a function (Attention, RotaryEmbedding,
the losses, ...) is imported as its function body (``onnx_functions``); the other operator
types it has no converter for are found before any node is converted and raised together, as
:class:`UnsupportedOperatorsError`, each with the nodes that use it.  ``constant_inputs`` fixes
graph inputs that give shapes, axes or pads to values; an input with a zero-size dimension is
a constant (its one possible value), and so is every empty result.  An invalid
model (an attribute or input outside ONNX's schema, a zero stride, an axis out
of range, a tensor above ``max_elements``) raises :class:`FrontendError` naming the node and the
attribute.  The converters, one per ONNX op type, live in ``onnx_converters``.
"""
from __future__ import annotations

import math
import os
from collections import deque
from typing import Mapping

import numpy as np

from ..graph.errors import FrontendError, GraphError, UnsupportedOperatorError
from ..graph.ir import GraphBuilder, Model
from ..graph.operators import get_op
from ..graph.types import TensorType, contiguous
from .onnx_context import Importer, is_int
from .onnx_converters import ARITY, CONVERTERS, value_dtype
from .onnx_functions import expand, has_body

# The command-line checker is autotune.frontends.check (python -m autotune.frontends.check).
__all__ = ["from_onnx", "SUPPORTED_OPS", "DEFAULT_MAX_ELEMENTS", "UnsupportedOperatorsError",
           "operator_report"]

# The most elements of any one tensor the importer creates or types, and of all the constants it
# holds together.  2**31 float32 elements are 8 GiB: far above any weight or activation of the
# models this project builds (BERT-base's word embedding, its largest tensor, has 23 M), yet low
# enough that a hostile or corrupt file (a ConstantOfShape of 100000 x 100000, an input of 10**15
# elements) is refused with a message before numpy or the executor tries to allocate it.
DEFAULT_MAX_ELEMENTS = 2 ** 31


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as err:  # pragma: no cover - onnx is a test dependency
        raise FrontendError("importing ONNX models needs the onnx package (pip install onnx)"
                            ) from err
    return onnx, numpy_helper


def _check_max_elements(max_elements) -> int:
    if not is_int(max_elements) or max_elements < 1:
        raise FrontendError(f"max_elements must be a positive int, got {max_elements!r}")
    return int(max_elements)


def _check_input_shapes(input_shapes) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` as {name: tuple of positive ints}; anything else is a FrontendError
    naming the input, so that a typo such as ``{"x": "abc"}`` is not parsed digit by digit."""
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise FrontendError(f"input_shapes must be a dict {{input name: shape}}, got "
                            f"{type(input_shapes).__name__}")
    shapes = {}
    for name, shape in input_shapes.items():
        if isinstance(shape, (str, bytes)) or not isinstance(shape, (tuple, list)) or \
                not all(is_int(d) for d in shape):
            raise FrontendError(f"input_shapes[{name!r}] must be a tuple of ints, got "
                                f"{shape!r}")
        if any(d < 1 for d in shape):
            raise FrontendError(f"input_shapes[{name!r}] = {tuple(shape)} has a dimension "
                                f"below 1")
        shapes[name] = tuple(int(d) for d in shape)
    return shapes


class UnsupportedOperatorsError(UnsupportedOperatorError):
    """A model uses operator types the importer has no converter for.

    ``operators`` maps each such op type (``domain.op_type`` outside the default domain) to
    the names of the nodes using it, in graph order, so that one import attempt shows
    everything a model is missing rather than the first gap only."""

    def __init__(self, operators: Mapping[str, list[str]]):
        self.operators = {op: list(nodes) for op, nodes in operators.items()}
        lines = []
        for op, nodes in self.operators.items():
            shown = ", ".join(repr(n) for n in nodes[:8])
            more = f" and {len(nodes) - 8} more" if len(nodes) > 8 else ""
            lines.append(f"  {op}: {len(nodes)} node(s): {shown}{more}")
        super().__init__(f"the model uses {len(self.operators)} unsupported ONNX operator "
                         f"type(s):\n" + "\n".join(lines) +
                         f"\nsupported operators: {', '.join(sorted(CONVERTERS))}")


def _op_key(node) -> str:
    """The operator a node names: its op type, prefixed by its domain outside ONNX's."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type
    return f"{node.domain}.{node.op_type}"


def _unsupported_nodes(graph, onnx=None, opset: int = 0) -> dict[str, list[str]]:
    """{op key: node names} of the nodes of ``graph`` no converter handles (and, given
    ``onnx``, that ONNX does not define as a function the importer expands at ``opset``)."""
    missing: dict[str, list[str]] = {}
    for index, node in enumerate(graph.node):
        key = _op_key(node)
        if key not in CONVERTERS and not (onnx is not None and has_body(onnx, node, opset)):
            missing.setdefault(key, []).append(node.name or f"{node.op_type}_{index}")
    return missing


class ModelImporter(Importer):
    """Reads a ModelProto into a graph Model: the initializers and inputs, then every node
    through its converter (or its function body), checked against ONNX's schema first."""

    def __init__(self, proto, input_shapes: Mapping[str, tuple] | None, name: str | None,
                 max_elements: int = DEFAULT_MAX_ELEMENTS,
                 constant_inputs: Mapping[str, np.ndarray] | None = None):
        onnx, self.numpy_helper = _onnx()
        self.onnx = onnx
        graph = proto.graph
        self.opset = 1
        for entry in proto.opset_import:
            if entry.domain in ("", "ai.onnx"):
                self.opset = entry.version
        self.builder = GraphBuilder(name or graph.name or "onnx_model")
        self.values: dict[str, str] = {}  # ONNX value name -> graph value name
        self.input_shapes = _check_input_shapes(input_shapes)
        self.max_elements = _check_max_elements(max_elements)
        self.constant_elements = 0  # elements of all constants held, against max_elements
        self.node = None  # the node being converted, for error messages
        self.graph = graph
        self.constant_inputs = dict(constant_inputs or {})


    def check_schema(self) -> None:
        """The node against ONNX's schema of its operator at the model's opset: attribute
        names and types, and the number of inputs.  An attribute of another opset version
        (ReduceSum's ``axes`` after opset 13) would otherwise be read or ignored silently."""
        node = self.node
        try:
            schema = self.onnx.defs.get_schema(node.op_type, self.opset, "")
        except Exception:  # onnx's SchemaError: no such operator at this opset
            raise self.error(f"{node.op_type} is not an operator of ONNX opset {self.opset}"
                             ) from None
        spelled = f"{node.op_type}-{schema.since_version}"
        for a in node.attribute:
            expected = schema.attributes.get(a.name)
            if expected is None:
                raise self.error(f"attribute {a.name} is not an attribute of {spelled} (the "
                                 f"model's opset is {self.opset})")
            if int(expected.type.value) != int(a.type):
                raise self.error(f"attribute {a.name} must be of type "
                                 f"{expected.type.name}, got "
                                 f"{self.onnx.AttributeProto.AttributeType.Name(a.type)}")
        count = len(node.input)
        if not schema.min_input <= count <= schema.max_input:
            expected = f"{schema.min_input}" if schema.min_input == schema.max_input else \
                f"{schema.min_input} to {schema.max_input}"
            raise self.error(f"{spelled} takes {expected} inputs, got {count}")
        # Type constraints: each input's element type is one its type parameter allows, and
        # inputs sharing a parameter (T of Add, Clip's x/min/max) share the type.
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        formal = schema.inputs
        bound: dict[str, str] = {}
        for k, name in enumerate(node.input):
            if not name or not formal:
                continue
            param = formal[min(k, len(formal) - 1)]  # a variadic last input repeats
            spelling = _ONNX_TYPE_NAMES.get(self.type_of(self.value(name)).dtype)
            if spelling is None:
                continue
            given = f"tensor({spelling})"
            if param.type_str in allowed:
                if given not in allowed[param.type_str]:
                    raise self.error(f"input {k} ({param.name}) is a {given}; {spelled} "
                                     f"takes {', '.join(sorted(allowed[param.type_str]))}")
                first = bound.setdefault(param.type_str, given)
                if first != given:
                    raise self.error(f"inputs of type parameter {param.type_str} differ: "
                                     f"{first} and {given} (input {k}, {param.name})")
            elif param.type_str.startswith("tensor(") and param.type_str != given:
                raise self.error(f"input {k} ({param.name}) is a {given}; {spelled} takes "
                                 f"{param.type_str}")

    def check_arity(self) -> None:
        """The number of inputs the converter handles, and its required ones present: the
        converters unpack inputs by position."""
        lo, hi = ARITY[self.node.op_type]
        count = len(self.node.input)
        if count < lo or (hi is not None and count > hi):
            expected = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any'}"
            raise self.error(f"takes {expected} inputs, got {count}")
        missing = [k for k in range(lo) if not self.node.input[k]]
        if missing:
            raise self.error(f"required input(s) {missing} are empty")
        if not self.node.output or not self.node.output[0]:
            raise self.error("has no output")

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> Model:
        graph = self.graph
        initializers = {t.name: t for t in graph.initializer}
        for name, tensor in initializers.items():
            self.values[name] = self.constant(
                self.tensor_array(tensor, f"initializer {name!r}"), name)
        graph_inputs = {vi.name for vi in graph.input if vi.name not in initializers}
        unknown = sorted(set(self.input_shapes) - graph_inputs)
        if unknown:
            raise FrontendError(f"input_shapes names {unknown}, which are not inputs of the "
                                f"graph; its inputs are {sorted(graph_inputs)}")
        unknown = sorted(set(self.constant_inputs) - graph_inputs)
        if unknown:
            raise FrontendError(f"constant_inputs names {unknown}, which are not inputs of the "
                                f"graph; its inputs are {sorted(graph_inputs)}")
        self._check_symbolic_inputs(graph, initializers)
        for vi in graph.input:
            if vi.name in initializers:
                continue
            if vi.name in self.values:
                raise FrontendError(f"graph input {vi.name!r} is listed twice")
            if vi.name in self.constant_inputs:
                self.values[vi.name] = self._constant_input(vi)
                continue
            dims, dtype = self._input_type(vi)
            if 0 in dims:
                # An empty tensor has one value: a constant, so that what depends on it only
                # is evaluated while importing (kernels have non-empty extents), and the
                # built model does not take it.
                self.values[vi.name] = self.constant(np.zeros(dims, dtype), vi.name)
                continue
            self.values[vi.name] = self.builder.input(vi.name, dims, dtype)
        self.used = {v for n in graph.node for v in n.input} | {o.name for o in graph.output}
        missing = _unsupported_nodes(graph, self.onnx, self.opset)
        if missing:
            raise UnsupportedOperatorsError(missing)
        pending = deque(graph.node)
        self.index = 0
        while pending:
            self.node = pending.popleft()
            if _op_key(self.node) not in CONVERTERS:
                pending.extendleft(reversed(self._function_body()))
                continue
            convert = CONVERTERS[self.node.op_type]
            self.check_schema()
            self.check_arity()
            convert(self)
            self.index += 1
        self.node = None
        if not graph.output:
            raise FrontendError(f"graph {graph.name!r} has no outputs")
        # Marking an output renames its producer's value in place; remember the new names so
        # that a later output of the same tensor (graph outputs "h" and "y" with
        # y = Identity(h), which the importer collapsed into one value) finds it.
        renamed: dict[str, str] = {}
        for out in graph.output:
            if out.name not in self.values:
                raise FrontendError(f"graph output {out.name!r} is not defined by any node, "
                                    f"input or initializer")
            value = self.values[out.name]
            value = renamed.get(value, value)
            if value in self.builder.outputs:
                # Already an output under another name: a copy gives this name its own value.
                self.builder.output(self.builder.op("identity", [value], output=out.name))
            else:
                renamed[value] = self.builder.output(value, out.name)
        return self.builder.build()

    def _function_body(self) -> list:
        """The nodes of the current node's ONNX function body (see onnx_functions), its
        input types known now that the nodes before it are converted."""
        node = self.node
        self.check_schema()
        types = [self.type_of(self.value(v)) if v else None for v in node.input]
        prefix = f"{node.name or node.op_type}_{self.index}__"
        try:
            body = expand(self.onnx, node, self.opset, types, prefix)
        except Exception as err:  # onnx builds context-dependent bodies in C++; it may refuse
            raise self.unsupported(f"its ONNX function body cannot be built: "
                                   f"{type(err).__name__}: {err}") from None
        if body is None:
            raise self.unsupported(f"no converter, and ONNX defines no function body for it "
                                   f"at opset {self.opset}")
        self.index += 1
        self.used |= {v for n in body for v in n.input}
        return body

    def _constant_input(self, vi) -> str:
        """A graph input fixed to a value by ``constant_inputs``: a constant of the declared
        element type (a shape, axes or pads input that the importer needs to know)."""
        array = np.asarray(self.constant_inputs[vi.name])
        if vi.type.WhichOneof("value") == "tensor_type":
            dtype = value_dtype(self.onnx, vi.type.tensor_type.elem_type,
                                f"graph input {vi.name!r}")
            if str(array.dtype) != dtype:
                raise FrontendError(f"constant_inputs[{vi.name!r}] is a {array.dtype} array; "
                                    f"the graph declares {dtype}")
        return self.constant(array, vi.name)

    def _check_symbolic_inputs(self, graph, initializers) -> None:
        """Refuse symbolic dimensions (PyTorch's dynamic batch and sequence axes) that
        ``input_shapes`` does not fix, naming every such input and axis in one message, with
        the fix spelled out for the API and for ``tune-model``.  No default is guessed: a
        batch of 1 would do, but a sequence length changes what the model computes and what
        tuning measures."""
        symbolic = {}
        for vi in graph.input:
            if vi.name in initializers or vi.name in self.input_shapes or \
                    vi.name in self.constant_inputs or \
                    vi.type.WhichOneof("value") != "tensor_type" or \
                    not vi.type.tensor_type.HasField("shape"):
                continue
            dims = vi.type.tensor_type.shape.dim
            axes = [(k, d.dim_param or "?") for k, d in enumerate(dims)
                    if not d.HasField("dim_value")]
            if axes:
                shown = ", ".join(d.dim_param or "?" if not d.HasField("dim_value")
                                  else str(d.dim_value) for d in dims)
                symbolic[vi.name] = (shown, axes)
        if not symbolic:
            return
        parts = []
        for name, (shown, axes) in symbolic.items():
            named = " and ".join(f"symbolic dimension {p!r} at axis {k}" for k, p in axes)
            parts.append(f"input {name!r} of shape ({shown}) has {named}")
        example = ", ".join(f"{name!r}: (...)" for name in symbolic)
        flags = " ".join(f"--input-shape {name}=DxDx..." for name in symbolic)
        raise FrontendError(f"{'; '.join(parts)}; pass input_shapes={{{example}}} to fix "
                            f"their shapes (tune-model: {flags})")

    def _input_type(self, vi) -> tuple[tuple, str]:
        if vi.type.WhichOneof("value") != "tensor_type":
            raise FrontendError(f"graph input {vi.name!r} is not a tensor (its type is "
                                f"{vi.type.WhichOneof('value')}); only tensor inputs are "
                                f"supported")
        tt = vi.type.tensor_type
        dtype = value_dtype(self.onnx, tt.elem_type, f"graph input {vi.name!r}")
        if vi.name in self.input_shapes:
            dims = self.input_shapes[vi.name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
                raise FrontendError(f"input_shapes[{vi.name!r}] = {dims} has rank {len(dims)}; "
                                    f"the graph declares rank {len(tt.shape.dim)}")
        elif not tt.HasField("shape"):
            # NOTE: no shape at all is not a scalar (that is a shape with no dimensions).
            raise FrontendError(f"graph input {vi.name!r} declares no shape; pass "
                                f"input_shapes={{{vi.name!r}: (...)}} to give it one")
        else:
            # Symbolic dimensions were refused before, all inputs at once.
            dims = tuple(d.dim_value for d in tt.shape.dim)
            for d in dims:
                if d < 0:
                    raise FrontendError(f"graph input {vi.name!r} has dimension {d} (shape "
                                        f"{dims}); dimensions must be at least 0")
        size = math.prod(dims)
        if size > self.max_elements:
            raise FrontendError(f"graph input {vi.name!r} of shape {dims} has {size} elements, "
                                f"above the limit of {self.max_elements} (pass max_elements= "
                                f"to load_model to raise it)")
        return dims, dtype


# numpy dtype name -> the spelling of ONNX type strings ("tensor(float)").
_ONNX_TYPE_NAMES = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32",
                    "int64": "int64", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
                    "uint64": "uint64", "float16": "float16", "float32": "float",
                    "float64": "double"}


SUPPORTED_OPS = tuple(sorted(CONVERTERS))


def operator_report(source) -> list[tuple[str, int, bool]]:
    """(op type, node count, supported) for every operator type of an ONNX model (a path,
    serialized bytes or a ModelProto), in order of first use.  Reads the graph only: nothing
    is imported, so a model with symbolic dimensions or unsupported operators can be
    checked before a night of tuning."""
    proto, _ = _load_proto(source)
    onnx, _ = _onnx()
    opset = max([e.version for e in proto.opset_import if e.domain in ("", "ai.onnx")] or [1])
    counts: dict[str, int] = {}
    supported: dict[str, bool] = {}
    for node in proto.graph.node:
        key = _op_key(node)
        counts[key] = counts.get(key, 0) + 1
        # An operator ONNX defines as a function is imported as its body.
        supported.setdefault(key, key in CONVERTERS or has_body(onnx, node, opset))
    return [(op, count, supported[op]) for op, count in counts.items()]


def _load_proto(source):
    """(ModelProto, default name) of a path, serialized bytes or a ModelProto."""
    onnx, _ = _onnx()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise FrontendError(f"no such ONNX file {path!r}")
        try:
            proto = onnx.load(path)
        except Exception as err:
            raise FrontendError(f"{path} is not a readable ONNX model: {err}") from err
        return proto, os.path.splitext(os.path.basename(path))[0]
    if isinstance(source, (bytes, bytearray, memoryview)):
        # Serialized bytes are what onnx.load reads from a file: parse them the same way.
        try:
            return onnx.load_from_string(bytes(source)), None
        except Exception as err:  # protobuf's DecodeError, or a RuntimeWarning made an error
            raise FrontendError(f"the {len(source)} bytes given are not a serialized ONNX "
                                f"model: {err}") from None
    if isinstance(source, onnx.ModelProto):
        return source, None
    raise FrontendError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got "
                        f"{type(source).__name__}")


def from_onnx(source, input_shapes: Mapping[str, tuple] | None = None,
              name: str | None = None, *, max_elements: int = DEFAULT_MAX_ELEMENTS,
              constant_inputs: Mapping[str, np.ndarray] | None = None) -> Model:
    """Import an ONNX model: a path (str or PathLike), serialized bytes or a ModelProto.

    ``input_shapes`` gives the shape of inputs with symbolic or missing dimensions.
    ``max_elements`` bounds every tensor the import creates or types, and all its constants
    together (see DEFAULT_MAX_ELEMENTS); a model beyond it raises FrontendError.
    ``constant_inputs`` fixes graph inputs to values ({name: array}): an input that gives a
    shape, axes, pads or sizes (which kernels need at build time) becomes a constant, and the
    built model no longer takes it.
    """
    proto, default_name = _load_proto(source)
    return ModelImporter(proto, input_shapes, name or default_name, max_elements,
                    constant_inputs).run()

