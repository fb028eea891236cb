"""ONNX function operators expanded into their bodies: an operator the importer has no
converter for, but whose schema defines it as a function of other operators (Attention,
NegativeLogLikelihoodLoss, RotaryEmbedding, ...), is imported as the nodes of that body.

ONNX gives a body two ways: a fixed FunctionProto per opset version (``has_function``), or one
built for the node at hand from its attributes and input types
(``has_context_dependent_function``).  Either way the body's formal inputs and outputs are
renamed to the node's values, its internal values get a prefix of their own, and attributes
that refer to the node's (``ref_attr_name``) take the node's value or the function's default.
"""
from __future__ import annotations

import numpy as np

__all__ = ["has_body", "expand"]


def _schema(onnx, node, opset: int):
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # onnx's SchemaError: no such operator at this opset
        return None


def has_body(onnx, node, opset: int) -> bool:
    """Whether ONNX defines ``node``'s operator (at ``opset``) as a function."""
    schema = _schema(onnx, node, opset)
    return schema is not None and bool(schema.has_function or
                                       schema.has_context_dependent_function)


def _version(versions, opset: int) -> int | None:
    """The newest function version not above the model's opset."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _type_proto(onnx, tensor_type):
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tensor_type.dtype))
    return onnx.helper.make_tensor_type_proto(elem, list(tensor_type.shape))


def _function(onnx, node, opset: int, input_types):
    """The node's FunctionProto, or None when ONNX gives none at this opset."""
    schema = _schema(onnx, node, opset)
    if schema is None:
        return None
    proto = onnx.FunctionProto()
    if schema.has_context_dependent_function:
        version = _version(schema.context_dependent_function_opset_versions, opset)
        if version is not None:
            types = [onnx.TypeProto() if t is None else _type_proto(onnx, t)
                     for t in input_types]
            text = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), [t.SerializeToString() for t in types])
            if text:
                proto.ParseFromString(text)
                return proto
    if schema.has_function:
        version = _version(schema.function_opset_versions, opset)
        if version is not None:
            proto.ParseFromString(schema.get_function_with_opset_version(version))
            return proto
    return None


def expand(onnx, node, opset: int, input_types, prefix: str) -> list | None:
    """The nodes of ``node``'s function body, wired to its inputs and outputs; None when its
    operator has no body at ``opset``.  ``input_types`` holds the TensorType of each input
    (None for an omitted one); ``prefix`` makes the body's internal names unique."""
    function = _function(onnx, node, opset, input_types)
    if function is None:
        return None
    names = {formal: (node.input[k] if k < len(node.input) else "")
             for k, formal in enumerate(function.input)}
    for k, formal in enumerate(function.output):
        # An output the node leaves out stays internal (the body may still use it).
        if k < len(node.output) and node.output[k]:
            names[formal] = node.output[k]

    def rename(value: str) -> str:
        if value in names:
            return names[value]
        return f"{prefix}{value}" if value else ""

    given = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in function.attribute_proto}
    body = []
    for inner in function.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        del copy.input[:]
        copy.input.extend(rename(v) for v in inner.input)
        del copy.output[:]
        copy.output.extend(rename(v) for v in inner.output)
        copy.name = f"{prefix}{inner.name or inner.op_type}_{len(body)}"
        attributes = []
        for attribute in inner.attribute:
            if not attribute.ref_attr_name:
                attributes.append(attribute)
                continue
            # A reference to the caller's attribute: its value, else the function's default,
            # else the attribute is left out (the operator's own default applies).
            source = given.get(attribute.ref_attr_name) or defaults.get(attribute.ref_attr_name)
            if source is not None:
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(source)
                resolved.name = attribute.name
                attributes.append(resolved)
        del copy.attribute[:]
        copy.attribute.extend(attributes)
        body.append(copy)
    return body
