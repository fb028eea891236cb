"""Immutable statements: loops, sequences, conditionals, stores, allocation and blocks.

Blocks follow TensorIR: a ``Block`` declares iteration variables (spatial or reduce) over
domains, the buffer regions it reads and writes, an optional ``init`` (run before the first
reduction step) and a body.  A ``BlockRealize`` binds the iteration variables to expressions of
the surrounding loop variables and guards the block with a predicate.
"""
from __future__ import annotations

from dataclasses import dataclass

from .expr import IntImm, Node, PrimExpr, Var, const, node_text

# Loop kinds.  A thread-bound loop names its thread axis in For.thread_binding.
SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD_BINDING = (
    "serial", "parallel", "vectorized", "unrolled", "thread_binding")
FOR_KINDS = (SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD_BINDING)
THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z",
               "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")

SPATIAL, REDUCE = "spatial", "reduce"


class Stmt(Node):
    __slots__ = ()

    def __str__(self) -> str:
        return node_text(self)


@dataclass(frozen=True, slots=True)
class Range(Node):
    """Half-open interval [min, min + extent)."""

    min: PrimExpr
    extent: PrimExpr

    @staticmethod
    def of(begin, extent) -> "Range":
        return Range(const(begin) if not isinstance(begin, PrimExpr) else begin,
                     const(extent) if not isinstance(extent, PrimExpr) else extent)


@dataclass(frozen=True, slots=True)
class IterVar(Node):
    """A block iteration variable with its domain and kind (spatial or reduce)."""

    var: Var
    dom: Range
    kind: str = SPATIAL


@dataclass(frozen=True, slots=True)
class BufferRegion(Node):
    """A rectangular region of a buffer: one Range per dimension."""

    buffer: object
    region: tuple


@dataclass(frozen=True, slots=True)
class For(Stmt):
    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    thread_binding: str | None = None
    annotations: tuple = ()  # ((key, value), ...) with JSON-like values

    def annotation(self, key, default=None):
        for k, v in self.annotations:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class SeqStmt(Stmt):
    stmts: tuple


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, slots=True)
class BufferStore(Stmt):
    buffer: object
    value: PrimExpr
    indices: tuple


@dataclass(frozen=True, slots=True)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """Allocate ``buffer`` (in its scope) for the duration of ``body``."""

    buffer: object
    body: Stmt


@dataclass(frozen=True, slots=True)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (kept for intrinsics with side effects)."""

    value: PrimExpr


@dataclass(frozen=True, slots=True)
class TensorIntrinCall(Stmt):
    """One tile computed by the tensor intrinsic ``intrin`` (see :mod:`tensor_ir.intrinsics`).

    Per parameter of the intrinsic's description, in its order: ``operands`` holds the load of
    the tile's first element in the program's buffer, ``steps`` the change of that buffer's
    indices (a tuple of ints, one per buffer dimension) one step along each dimension of the
    description's buffer makes, ``extents`` the description buffer's shape and ``written``
    whether the intrinsic writes the operand.  Keeping the steps per buffer dimension rather
    than as flat strides lets buffer compaction reshape the buffer after ``tensorize``.
    """

    intrin: str
    operands: tuple  # BufferLoad
    steps: tuple     # per operand: per description dimension: per buffer dimension: int
    extents: tuple   # per operand: tuple of ints
    written: tuple   # per operand: bool


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    name: str
    iter_vars: tuple  # IterVar
    reads: tuple  # BufferRegion
    writes: tuple  # BufferRegion
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple = ()
    annotations: tuple = ()

    def annotation(self, key, default=None):
        for k, v in self.annotations:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class BlockRealize(Stmt):
    iter_values: tuple
    predicate: PrimExpr
    block: Block


def seq(*stmts) -> Stmt:
    """A SeqStmt of the given statements, flattening nested sequences; one statement alone."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


TRUE = IntImm(1, "bool")
