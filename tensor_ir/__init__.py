"""Tensor IR: expressions, statements, buffers, PrimFunc and algorithm definitions."""
from __future__ import annotations

from . import dtype, printer, te
from .buffer import Buffer, decl_buffer
from .errors import (
    BuildError, DTypeError, KernelIndexError, LoweringError, TEError, TensorIRError,
)
from .expr import (
    And, BinOp, BufferLoad, Call, Cast, Cmp, FloatImm, IntImm, Not, Or, PrimExpr, Reduce,
    Select, Var, const,
)
from .func import PrimFunc, from_json, structural_equal, structural_hash, to_json
from .stmt import (
    Allocate, Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse,
    IterVar, LetStmt, Range, SeqStmt, Stmt, TensorIntrinCall,
)

__all__ = [
    "te", "dtype", "Buffer", "decl_buffer", "PrimFunc", "from_json", "to_json",
    "structural_equal", "structural_hash", "BuildError", "DTypeError", "KernelIndexError",
    "LoweringError",
    "TEError", "TensorIRError", "And", "BinOp", "BufferLoad", "Call", "Cast", "Cmp",
    "FloatImm", "IntImm", "Not", "Or", "PrimExpr", "Reduce", "Select", "Var", "const",
    "Allocate", "Block", "BlockRealize", "BufferRegion", "BufferStore", "Evaluate", "For",
    "IfThenElse", "IterVar", "LetStmt", "Range", "SeqStmt", "Stmt", "TensorIntrinCall",
]
