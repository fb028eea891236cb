"""What a converter sees of an ONNX import: :class:`Importer`, the node being converted with
the helpers every converter uses (reading attributes and constant inputs, adding graph nodes,
naming its outputs, the typed errors that name the node).

The driver, :class:`autotune.frontends.onnx.ModelImporter`, subclasses it: it reads the
model, sets the node being converted and checks it against ONNX's schema before the node's
converter (``onnx_converters``, ``onnx_converters_more``) runs.  The converters import this
module, not the driver, so the driver can import them.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph.errors import FrontendError, GraphError, UnsupportedOperatorError
from ..graph.operators import get_op
from ..graph.types import TensorType, contiguous

__all__ = ["Importer", "is_int"]


def is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class Importer:
    """The import's state as converters read it, set by the driver: ``onnx`` and
    ``numpy_helper`` (the onnx package), ``opset``, ``graph`` (the GraphProto), ``builder``
    (the GraphBuilder being filled), ``values`` (ONNX value name -> graph value name),
    ``node`` and ``index`` (the node being converted, None before the first), ``used`` (the
    ONNX values something reads), ``max_elements`` and ``constant_elements`` (the size limit
    and the constants' elements so far)."""

    def where(self) -> str:
        n = self.node
        if n is None:  # reading initializers and inputs, before any node
            return f"graph {self.graph.name!r}"
        return f"node {n.name or '<unnamed>'!r} ({n.op_type})"

    def unsupported(self, what: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(f"ONNX operator {self.node.op_type} in {self.where()}: "
                                        f"{what}")

    def error(self, what: str) -> FrontendError:
        """An invalid node (not merely an unsupported variant): the message names it."""
        return FrontendError(f"{self.where()}: {what}")

    def bad_attribute(self, name: str, value, why: str) -> FrontendError:
        return FrontendError(f"{self.where()}: attribute {name}={value!r} {why}")

    def attrs(self) -> dict:
        out = {}
        for a in self.node.attribute:
            out[a.name] = self.onnx.helper.get_attribute_value(a)
            if isinstance(out[a.name], bytes):
                try:
                    out[a.name] = out[a.name].decode()
                except UnicodeDecodeError:
                    raise self.bad_attribute(a.name, out[a.name], "is not UTF-8 text") from None
        return out

    def int_attr(self, attrs: dict, name: str, default, minimum: int | None = None,
                 maximum: int | None = None) -> int:
        value = attrs.get(name, default)
        if not is_int(value):
            raise self.bad_attribute(name, value, "must be an int")
        if minimum is not None and value < minimum:
            raise self.bad_attribute(name, value, f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise self.bad_attribute(name, value, f"must be at most {maximum}")
        return int(value)

    def ints_attr(self, attrs: dict, name: str, default, length: int | None = None,
                  minimum: int | None = None) -> tuple[int, ...]:
        value = attrs.get(name, default)
        if not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value):
            raise self.bad_attribute(name, value, "must be a list of ints")
        if length is not None and len(value) != length:
            raise self.bad_attribute(name, list(value), f"must have {length} entries")
        if minimum is not None and any(v < minimum for v in value):
            raise self.bad_attribute(name, list(value), f"must have every entry at least "
                                                        f"{minimum}")
        return tuple(int(v) for v in value)

    def float_attr(self, attrs: dict, name: str, default) -> float:
        value = attrs.get(name, default)
        if not isinstance(value, (float, int, np.floating, np.integer)) or \
                isinstance(value, bool):
            raise self.bad_attribute(name, value, "must be a float")
        return float(value)

    def axis(self, axis: int, ndim: int, what: str) -> int:
        """``axis`` in [-ndim, ndim), normalised; ``what`` says where it came from."""
        if not is_int(axis) or not -ndim <= axis < ndim:
            raise self.error(f"{what} {axis!r} is out of range for a rank-{ndim} input")
        return int(axis) % ndim

    def check_size(self, shape, what: str) -> None:
        """Refuse a tensor of more than ``max_elements`` elements before anything allocates
        it (math.prod on Python ints cannot overflow, unlike np.prod)."""
        if any(not is_int(d) or d < 0 for d in shape):
            raise self.error(f"{what} has shape {tuple(shape)} with a negative dimension")
        size = math.prod(int(d) for d in shape)
        if size > self.max_elements:
            raise self.error(f"{what} of shape {tuple(int(d) for d in shape)} has {size} "
                             f"elements, above the limit of {self.max_elements} (pass "
                             f"max_elements= to load_model to raise it)")

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

    def const_ints(self, value: str | None, what: str) -> list[int]:
        """A constant integer tensor (a shape, axes, pads) as a list of ints."""
        array = self.const(value, what)
        if array.dtype.kind not in "iu":
            raise self.error(f"{what} must be an integer tensor, got {array.dtype}")
        return [int(v) for v in array.reshape(-1)]

    def const_scalar(self, value: str | None, what: str) -> float:
        array = self.const(value, what)
        if array.size != 1 or array.dtype.kind not in "iuf":
            raise self.error(f"{what} must be a single number, got a {array.dtype} tensor of "
                             f"shape {array.shape}")
        return float(array.reshape(()))

    def type_of(self, value: str):
        return self.builder.type_of(value)

    def add(self, op: str, inputs: list[str], **attrs) -> str:
        """Add a graph node; evaluate it now when every input is a constant."""
        opdef = get_op(op)
        if all(self.is_const(v) for v in inputs):
            arrays = [self.builder.constants[v] for v in inputs]
            try:
                # Type inference first: it validates the attributes and shapes, and gives the
                # size to check before numpy allocates the result.
                out_type = opdef.infer([TensorType.of(a) for a in arrays], attrs)
                self.check_size(out_type.shape, f"the result of {op}")
                result = np.asarray(opdef.numpy(arrays, attrs), dtype=out_type.dtype)
            except GraphError as err:
                raise FrontendError(f"{self.where()}: {err}") from None
            return self.constant(result.reshape(out_type.shape),
                                 f"{self.node.output[0] or op}_const")
        try:
            out_type = opdef.infer([self.type_of(v) for v in inputs], attrs)
        except GraphError as err:
            raise FrontendError(f"{self.where()}: {err}") from None
        if 0 in out_type.shape:
            # An empty result has one value whatever the inputs hold: a constant (kernels
            # are generated for non-empty extents only).
            return self.constant(np.zeros(out_type.shape, dtype=out_type.dtype),
                                 f"{self.node.output[0] or op}_empty")
        try:
            out = self.builder.op(op, inputs, name=self.node_name(), **attrs)
        except GraphError as err:
            raise FrontendError(f"{self.where()}: {err}") from None
        self.check_size(self.type_of(out).shape, f"the result of {op}")
        return out

    def constant(self, array, name: str | None = None) -> str:
        array = contiguous(array)
        self.check_size(array.shape, f"constant {name or 'const'!r}")
        self.constant_elements += array.size
        if self.constant_elements > self.max_elements:
            raise self.error(f"the constants of the model reach {self.constant_elements} "
                             f"elements, above the limit of {self.max_elements} (pass "
                             f"max_elements= to load_model to raise it)")
        return self.builder.constant(array, name or "const")

    def tensor_array(self, tensor, what: str) -> np.ndarray:
        """A TensorProto (initializer or attribute) as an array, its size checked first."""
        self.check_size(tuple(tensor.dims), what)
        try:
            return self.numpy_helper.to_array(tensor)
        except Exception as err:  # onnx raises several kinds for corrupt or external data
            raise FrontendError(f"{what} cannot be read: {type(err).__name__}: {err}"
                                ) from None

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
