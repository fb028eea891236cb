"""What the ONNX converters share: the table of converters by op type (and their input
counts), the registering decorator, and the checks several converters make (element types,
float inputs, axes).  autotune.frontends.onnx_converters and onnx_converters_more register
their converters here."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..graph.errors import FrontendError
from .onnx_context import Importer

__all__ = ["ARITY", "CONVERTERS", "VALUE_DTYPES", "axes_arg", "converter", "float_input",
           "value_dtype"]

# The element types a graph input or a Cast may have: the dtypes the code generator handles.
VALUE_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64")


def value_dtype(onnx, elem_type: int, what: str) -> str:
    try:
        name = str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        raise FrontendError(f"{what}: ONNX element type {elem_type} is not supported") from None
    if name not in VALUE_DTYPES:
        raise FrontendError(f"{what}: element type {name} is not supported; supported: "
                            f"{', '.join(VALUE_DTYPES)}")
    return name


CONVERTERS: dict[str, Callable[[Importer], None]] = {}
ARITY: dict[str, tuple[int, int | None]] = {}  # op type -> (required inputs, most inputs)


def converter(*names, inputs: tuple[int, int | None] = (1, 1)):
    """Register a converter for ONNX op types ``names`` taking ``inputs`` = (required, most;
    None for any number) inputs; the driver checks the count before calling it."""
    def register(fn):
        for name in names:
            CONVERTERS[name] = fn
            ARITY[name] = inputs
        return fn
    return register


def float_input(ctx: Importer, x: str) -> None:
    dtype = ctx.type_of(x).dtype
    if not dtype.startswith("float"):
        raise ctx.error(f"input of dtype {dtype} must be a float tensor")


def axes_arg(ctx: Importer, inputs, attrs, ndim: int, position: int = 1,
             unique: bool = True):
    """The node's axes (an attribute before opset 13/18, an input after), each checked to lie
    in [-ndim, ndim) and normalised; duplicates are an error where ONNX says so (``unique``),
    else dropped (a reduction over an axis named twice is over that axis, as onnxruntime
    reads it).  None when the node gives none."""
    if "axes" in attrs:
        axes, what = list(ctx.ints_attr(attrs, "axes", ())), "attribute axes entry"
    elif len(inputs) > position and inputs[position] is not None:
        axes, what = ctx.const_ints(inputs[position], "axes"), "axes input entry"
    else:
        return None
    normal = [ctx.axis(a, ndim, what) for a in axes]
    if len(set(normal)) != len(normal):
        if unique:
            raise ctx.error(f"axes {axes} repeat an axis")
        normal = list(dict.fromkeys(normal))
    return normal
