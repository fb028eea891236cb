"""Model graphs: operators from tensor_ir.ops with attributes, constants and typed values.

    b = GraphBuilder("tiny")
    x = b.input("input", (1, 3, 32, 32))
    w = b.constant(np.ones((8, 3, 3, 3), "float32"), "conv.weight")
    y = b.op("conv2d", [x, w], strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1))
    y = b.op("relu", [y])
    b.output(y, "output")
    model = b.build()          # a Model; print(model) shows it

A value is named by a string: a graph input, a constant (a numpy array held by the model) or
the output of exactly one node.  Every value has a static :class:`TensorType`; types are
inferred when a node is added (``Model.infer_types`` runs inference again over a whole graph).
Nodes are kept in topological order.  A Model is treated as immutable: passes build new ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from .errors import GraphError
from .operators import get_op
from .types import TensorType, contiguous

__all__ = ["Node", "Model", "GraphBuilder", "TensorType", "format_attr"]


@dataclass(frozen=True, eq=False)
class Node:
    """One operator application: ``output = op(*inputs, **attrs)``; ``name`` is unique in its
    model (the frontend's node name where there is one)."""

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: Mapping = field(default_factory=dict)
    name: str = ""

    @property
    def kind(self) -> str:
        return get_op(self.op).kind

    def replace(self, **changes) -> Node:
        values = {"op": self.op, "inputs": self.inputs, "output": self.output,
                  "attrs": self.attrs, "name": self.name}
        values.update(changes)
        return Node(**values)

    def __repr__(self) -> str:
        return f"Node({self.name}: {self.output} = {self.op}({', '.join(self.inputs)}))"


def format_attr(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(format_attr(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


class Model:
    """A model graph.  ``inputs`` / ``outputs`` are value names (in order), ``nodes`` are in
    topological order, ``constants`` maps names to arrays, ``types`` maps every value to its
    TensorType."""

    def __init__(self, name: str, inputs: Sequence[str], outputs: Sequence[str],
                 nodes: Sequence[Node], constants: Mapping[str, np.ndarray],
                 types: Mapping[str, TensorType]):
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.nodes = list(nodes)
        self.constants = dict(constants)
        self.types = dict(types)
        self._producers: dict[str, Node] | None = None
        self._consumers: dict[str, list[Node]] | None = None
        self.validate()

    # -- structure ------------------------------------------------------------------------------
    def validate(self) -> None:
        """Every value is defined once before use, typed, and every node's op is known."""
        defined: set[str] = set()
        for name in self.inputs:
            if name in defined:
                raise GraphError(f"model {self.name}: input {name!r} is listed twice")
            if name in self.constants:
                raise GraphError(f"model {self.name}: {name!r} is both an input and a "
                                 f"constant")
            defined.add(name)
        defined.update(self.constants)
        for node in self.nodes:
            op = get_op(node.op)
            lo, hi = op.arity
            if not lo <= len(node.inputs) <= hi:
                raise GraphError(f"node {node.name} ({node.op}) takes {lo}..{hi} inputs, got "
                                 f"{len(node.inputs)}")
            for value in node.inputs:
                if value not in defined:
                    raise GraphError(f"node {node.name} ({node.op}) reads {value!r}, which is "
                                     f"not defined before it")
            if node.output in defined:
                raise GraphError(f"node {node.name} ({node.op}) redefines {node.output!r}")
            defined.add(node.output)
        for value in self.outputs:
            if value not in defined:
                raise GraphError(f"model {self.name}: output {value!r} is never defined")
        missing = [v for v in defined if v not in self.types]
        if missing:
            raise GraphError(f"model {self.name}: values without a type: {missing[:5]}")

    @property
    def producers(self) -> dict[str, Node]:
        if self._producers is None:
            self._producers = {n.output: n for n in self.nodes}
        return self._producers

    @property
    def consumers(self) -> dict[str, list[Node]]:
        if self._consumers is None:
            table: dict[str, list[Node]] = {}
            for node in self.nodes:
                for value in dict.fromkeys(node.inputs):
                    table.setdefault(value, []).append(node)
            self._consumers = table
        return self._consumers

    def input_types(self) -> dict[str, TensorType]:
        return {name: self.types[name] for name in self.inputs}

    def output_types(self) -> dict[str, TensorType]:
        return {name: self.types[name] for name in self.outputs}

    def replace(self, *, nodes: Sequence[Node] | None = None,
                constants: Mapping[str, np.ndarray] | None = None,
                outputs: Sequence[str] | None = None) -> Model:
        """A new model with some parts replaced; types are inferred again for the nodes."""
        nodes = list(self.nodes if nodes is None else nodes)
        constants = dict(self.constants if constants is None else constants)
        types = {name: self.types[name] for name in self.inputs}
        types.update({name: TensorType.of(a) for name, a in constants.items()})
        types.update(infer_types(nodes, types))
        return Model(self.name, self.inputs, self.outputs if outputs is None else outputs,
                     nodes, constants, types)

    def infer_types(self) -> dict[str, TensorType]:
        """Run shape inference over the whole graph again (it must agree with ``types``)."""
        start = {name: self.types[name] for name in self.inputs}
        start.update({name: TensorType.of(a) for name, a in self.constants.items()})
        return {**start, **infer_types(self.nodes, start)}

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model with each operator's numpy definition (slow; a reference)."""
        env: dict[str, np.ndarray] = dict(self.constants)
        for name in self.inputs:
            if name not in inputs:
                raise GraphError(f"model {self.name}: no value given for input {name!r}")
            env[name] = np.asarray(inputs[name], dtype=self.types[name].dtype)
        for node in self.nodes:
            env[node.output] = get_op(node.op).numpy([env[v] for v in node.inputs],
                                                     node.attrs)
        return {name: env[name] for name in self.outputs}

    # -- printing -------------------------------------------------------------------------------
    def __str__(self) -> str:
        args = ", ".join(f"%{n}: {self.types[n]}" for n in self.inputs)
        rets = ", ".join(f"%{n}: {self.types[n]}" for n in self.outputs)
        lines = [f"model {self.name}({args}) -> ({rets}) {{"]
        for name, array in self.constants.items():
            lines.append(f"  @{name}: {TensorType.of(array)}")
        for node in self.nodes:
            operands = ", ".join(("@" if v in self.constants else "%") + v for v in node.inputs)
            attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
            attrs = f" {{{attrs}}}" if attrs else ""
            lines.append(f"  %{node.output} = {node.op}({operands}){attrs} : "
                         f"{self.types[node.output]}")
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Model({self.name}: {len(self.inputs)} input(s), {len(self.nodes)} nodes, "
                f"{len(self.constants)} constants)")

    def summary(self) -> dict[str, int]:
        """Operator name -> number of nodes."""
        out: dict[str, int] = {}
        for node in self.nodes:
            out[node.op] = out.get(node.op, 0) + 1
        return out


def infer_types(nodes: Iterable[Node], known: Mapping[str, TensorType]
                ) -> dict[str, TensorType]:
    """The output type of every node, in order; errors name the node."""
    types = dict(known)
    out = {}
    for node in nodes:
        try:
            in_types = [types[v] for v in node.inputs]
        except KeyError as err:
            raise GraphError(f"node {node.name} ({node.op}) reads {err.args[0]!r}, which is "
                             f"not defined before it") from None
        try:
            result = get_op(node.op).infer(in_types, node.attrs)
        except GraphError as err:
            raise GraphError(f"node {node.name}: {err}") from None
        types[node.output] = out[node.output] = result
    return out


class GraphBuilder:
    """Builds a Model node by node, inferring types as it goes."""

    def __init__(self, name: str = "model"):
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self._node_names: set[str] = set()
        self._counter = 0

    def _fresh(self, base: str) -> str:
        name = base
        while name in self.types or name in self._node_names:
            self._counter += 1
            name = f"{base}_{self._counter}"
        return name

    def input(self, name: str, shape, dtype: str = "float32") -> str:
        if name in self.types:
            raise GraphError(f"{self.name}: value {name!r} is already defined")
        self.inputs.append(name)
        self.types[name] = TensorType(tuple(shape), str(np.dtype(dtype)))
        return name

    def constant(self, array, name: str | None = None) -> str:
        array = contiguous(array)
        name = self._fresh(name or "const")
        self.constants[name] = array
        self.types[name] = TensorType.of(array)
        return name

    def op(self, op: str, inputs: Sequence[str], name: str | None = None,
           output: str | None = None, **attrs) -> str:
        """Add ``op(*inputs, **attrs)``; returns the output value's name."""
        node_name = self._fresh(name or op)
        self._node_names.add(node_name)
        out = output if output is not None else node_name
        if out in self.types:
            raise GraphError(f"{self.name}: node {node_name} redefines value {out!r}")
        for value in inputs:
            if value not in self.types:
                raise GraphError(f"{self.name}: node {node_name} ({op}) reads {value!r}, "
                                 f"which is not defined")
        node = Node(op, tuple(inputs), out, dict(attrs), node_name)
        opdef = get_op(op)
        lo, hi = opdef.arity
        if not lo <= len(inputs) <= hi:
            raise GraphError(f"{self.name}: node {node_name} ({op}) takes {lo}..{hi} inputs, "
                             f"got {len(inputs)}")
        self.types.update(infer_types([node], self.types))
        self.nodes.append(node)
        return out

    def type_of(self, value: str) -> TensorType:
        return self.types[value]

    def output(self, value: str, name: str | None = None) -> str:
        """Mark ``value`` as a model output; with ``name`` it is renamed (an identity node
        when the value is an input or a constant)."""
        if name is not None and name != value:
            producer = next((n for n in self.nodes if n.output == value), None)
            if producer is None or name in self.types:
                value = self.op("identity", [value], output=name)
            else:
                # Rename the producer's output in place: no extra node.
                index = self.nodes.index(producer)
                self.nodes[index] = producer.replace(output=name)
                self.types[name] = self.types.pop(value)
                self.nodes = [n.replace(inputs=tuple(name if v == value else v
                                                     for v in n.inputs))
                              for n in self.nodes]
                value = name
        self.outputs.append(value)
        return value

    def build(self) -> Model:
        if not self.outputs:
            raise GraphError(f"{self.name}: the model has no output")
        return Model(self.name, self.inputs, self.outputs, self.nodes, self.constants,
                     self.types)
