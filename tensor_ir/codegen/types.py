"""LLVM types of IR dtypes and small llvmlite value helpers shared by the code generator."""
from __future__ import annotations

import re

import llvmlite.ir as ir

from ..errors import BuildError

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_INT_TYPES = {"int8": I8, "int16": ir.IntType(16), "int32": I32, "int64": I64, "uint8": I8,
              "uint16": ir.IntType(16), "uint32": I32, "uint64": I64}
_FLOAT_TYPES = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType()}

# Contraction into FMA is allowed (as C compilers do by default); reassociation is not, so the
# order of a reduction is the one the program states.
FAST_MATH = ("contract",)


def value_type(dtype: str) -> ir.Type:
    """LLVM type of a scalar of ``dtype`` in registers (bool is i1)."""
    if dtype == "bool":
        return I1
    if dtype in _INT_TYPES:
        return _INT_TYPES[dtype]
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    raise BuildError(f"codegen: unsupported dtype {dtype!r}")


def memory_type(dtype: str) -> ir.Type:
    """LLVM type of an element of ``dtype`` in memory (bool is one byte, as numpy stores it)."""
    return I8 if dtype == "bool" else value_type(dtype)


def symbol_name(name: str) -> str:
    """A C identifier made from ``name`` (other characters become '_')."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name) or "kernel"
    return "_" + out if out[0].isdigit() else out


def int_constant(ty: ir.IntType, value: int) -> ir.Constant:
    # Store unsigned constants in their signed spelling, which LLVM always accepts.
    width = ty.width
    value &= (1 << width) - 1
    if width > 1 and value >= 1 << (width - 1):
        value -= 1 << width
    return ir.Constant(ty, value)


def lanes_of(v: ir.Value) -> int:
    return v.type.count if isinstance(v.type, ir.VectorType) else 0


def scalar_type(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def like(v: ir.Value, scalar: ir.Type) -> ir.Type:
    """``scalar``, or a vector of it when ``v`` is a vector."""
    return ir.VectorType(scalar, v.type.count) if isinstance(v.type, ir.VectorType) else scalar


def zero_of(ty: ir.Type) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [zero_of(ty.element)] * ty.count)
    return ir.Constant(ty, 0.0 if isinstance(ty, (ir.HalfType, ir.FloatType, ir.DoubleType))
                       else 0)


def all_ones(ty: ir.Type) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [all_ones(ty.element)] * ty.count)
    return int_constant(ty, -1)


def int_bits(v: ir.Value) -> int:
    return scalar_type(v.type).width


def type_suffix(ty: ir.Type) -> str:
    scalar = scalar_type(ty)
    name = {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(scalar)]
    return f"v{ty.count}{name}" if isinstance(ty, ir.VectorType) else name
