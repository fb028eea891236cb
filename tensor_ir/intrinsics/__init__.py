"""Tensor intrinsics: the registry (descriptions and implementations) and the built-in ones.

Importing this package registers the built-in intrinsics (see :mod:`.builtin`)."""
from __future__ import annotations

from .builtin import SDOT_DOT, VNNI_DOT, dot_description
from .registry import (
    EmitContext,
    ExternCImpl,
    Implementation,
    IntrinsicError,
    LLVMImpl,
    ReferenceImpl,
    TensorIntrin,
    TileDescription,
    dense_strides,
    describe,
    expand,
    freeze_builtins,
    get,
    install,
    libraries_of,
    load_libraries,
    names,
    operand_strides,
    portable,
    portables,
    register,
    used_in,
)

freeze_builtins()  # what every interpreter registers on import; the rest travels (portables)

__all__ = [
    "SDOT_DOT",
    "VNNI_DOT",
    "EmitContext",
    "ExternCImpl",
    "Implementation",
    "IntrinsicError",
    "LLVMImpl",
    "ReferenceImpl",
    "TensorIntrin",
    "TileDescription",
    "dense_strides",
    "describe",
    "dot_description",
    "expand",
    "get",
    "install",
    "libraries_of",
    "load_libraries",
    "names",
    "operand_strides",
    "portable",
    "portables",
    "register",
    "used_in",
]
