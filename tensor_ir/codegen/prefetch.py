"""Software prefetching for the LLVM backend, under a loop annotated with a distance.

A register-tiled matmul streams its packed weight panel along its k loop; a schedule may
annotate that loop with ``pragma_prefetch_bytes`` (PREFETCH_KEY in llvm.py), and then every
contiguous vector load in it that walks along the loop, through a buffer the loop does not
store to, asks for the lines that many bytes ahead (read, kept in every cache level).  On the
BERT layer's FFN2 (128x768x3072, 2 threads) 1-2 KiB ahead ran 8x32 tiles 5-18% faster, most
where the panel comes from L3 after another kernel evicted it (benchmarks.gemm_ceiling).  A
tile that reuses each panel slice from L1 over many rows ran slower with it (3.18 -> 3.55 ms),
so the distance belongs to the schedule, not to the code generator.  A prefetch never faults,
so one past a buffer's end is harmless.

Where the prefetches go:

* **hoisted** to the top of each iteration of the annotated loop, for a load whose address
  depends on nothing defined inside the loop but the vector lanes: one prefetch per 64-byte
  line of the vector.  The rows of a register tile (an inner loop the panel's address does not
  use) all load the same panel vector; LLVM merges those loads when it unrolls the rows, but
  not prefetch calls, so a prefetch emitted at the load ran once per row -- an 8-row tile
  issued 8 prefetches of one line per 16 FMAs, beside the 10 loads it needs, and never asked
  for the second line of its 32-float vector;
* **at the load** otherwise (its address uses an inner loop's variable), once per address
  within one emission of the loop's body (``address_key``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.ir as ir

from .. import dtype as dt
from ..arith import const_diff
from ..expr import BufferLoad, IntImm, Var, binary
from ..simplify import simplify_expr
from ..stmt import Allocate, For, LetStmt, VECTORIZED
from ..visitor import children, free_vars, substitute, uses_var
from .common import flat_index
from .types import I8, I32, I64, PTR, VOID

# Bytes one software prefetch brings in (a cache line on every target we emit them for).
CACHE_LINE = 64
# Lines prefetched for one vector load at most (a 64-lane float32 vector spans 4).
MAX_LINES_PER_LOAD = 4
# Instructions whose result is a function of their operands alone: two of them with the same
# opcode, flags and operands compute the same address (see address_key).
_PURE_OPS = frozenset({"add", "sub", "mul", "shl", "or", "and", "sdiv", "udiv", "srem",
                       "urem", "sext", "zext", "trunc", "getelementptr"})


@dataclass
class PrefetchScope:
    """Prefetching in force inside one annotated loop (see the module text)."""
    loop: Var
    distance: int
    stored: frozenset                       # buffers the loop stores to: never prefetched
    hoisted: list = field(default_factory=list)  # (buffer, flat index at lane 0, bytes)
    hoisted_loads: set = field(default_factory=set)  # ids of the loads those cover
    issued: set = field(default_factory=set)  # address keys asked for in this emission


def plan_prefetch(loop: For, distance: int, stored: frozenset) -> PrefetchScope:
    """The prefetch scope of ``loop``: which of its vector loads are hoisted."""
    scope = PrefetchScope(loop.loop_var, distance, stored)
    seen: set[tuple] = set()

    def visit(node, inner: frozenset, vec: For | None) -> None:
        if isinstance(node, For):
            if node.kind == VECTORIZED and vec is None:
                visit(node.body, inner, node)
            else:
                visit(node.body, inner | {node.loop_var}, vec)
            return
        if isinstance(node, LetStmt):
            visit(node.value, inner, vec)
            visit(node.body, inner | {node.var}, vec)
            return
        if isinstance(node, Allocate):
            visit(node.body, inner | {node.buffer}, vec)
            return
        if isinstance(node, BufferLoad) and vec is not None:
            _consider(scope, node, inner, vec, seen)
        for child in children(node):
            visit(child, inner, vec)

    visit(loop.body, frozenset(), None)
    return scope


def _consider(scope: PrefetchScope, load: BufferLoad, inner: frozenset, vec: For,
              seen: set) -> None:
    """Hoist ``load`` when it walks along the annotated loop, contiguously across the lanes
    of ``vec``, from a buffer defined outside the loop and not stored in it, at an address
    that uses no other variable defined inside the loop."""
    buf = load.buffer
    if buf in scope.stored or buf in inner or not isinstance(vec.extent, IntImm):
        return
    used = set()
    for index in load.indices:
        used |= free_vars(index)
    if scope.loop not in used or vec.loop_var not in used or used & inner \
            or free_vars(vec.min) & inner:
        return
    flat = flat_index(buf, load.indices, "codegen")
    next_lane = substitute(flat, {vec.loop_var: binary(
        "+", vec.loop_var, IntImm(1, vec.loop_var.dtype))})
    if const_diff(next_lane, flat) != 1:
        return  # not one contiguous vector: a gather, which is never prefetched
    scope.hoisted_loads.add(id(load))
    first = simplify_expr(substitute(flat, {vec.loop_var: vec.min}))
    nbytes = vec.extent.value * dt.nbytes(buf.dtype)
    key = (id(buf), repr(first), nbytes)
    if key not in seen:
        seen.add(key)
        scope.hoisted.append((buf, first, nbytes))


def address_key(value: ir.Value, depth: int = 12):
    """A key equal for two values computed by the same pure integer arithmetic from the same
    leaves (constants by value; loop counters, arguments and loads by identity).  The code
    generator recomputes an address in every unrolled copy of a loop body that uses it; this
    says when two such pointers are one address."""
    if isinstance(value, ir.Constant):
        return ("const", str(value.type), str(value.constant))
    opname = getattr(value, "opname", None)
    if depth <= 0 or opname not in _PURE_OPS:
        return ("value", id(value))
    flags = tuple(getattr(value, "flags", ()))
    return (opname, str(value.type), flags,
            tuple(address_key(op, depth - 1) for op in value.operands))


class PrefetchMixin:
    """Prefetch emission for CodeGenLLVM; ``self.prefetch`` is the PrefetchScope in force
    (None outside annotated loops)."""

    def prefetch_hoisted(self, s: For) -> None:
        """At the top of an iteration of the annotated loop ``s``: the hoisted loads' lines."""
        scope = self.prefetch
        if scope is None or scope.loop is not s.loop_var:
            return
        scope.issued = set()
        if self.lanes is not None or self.lane is not None:
            # Emitted lane by lane inside a vector loop: prefetch at each load instead.
            scope.hoisted_loads = set()
            return
        for buf, first, nbytes in scope.hoisted:
            self._prefetch_lines(self.element_ptr(buf, first), nbytes)

    def prefetch_ahead(self, load: BufferLoad, ptr: ir.Value, nbytes: int) -> None:
        """At a contiguous vector load of ``nbytes`` from ``ptr``: its lines, unless hoisted,
        or not walking along the annotated loop, or from a buffer the loop stores to."""
        scope = self.prefetch
        if id(load) in scope.hoisted_loads or load.buffer in scope.stored \
                or not any(uses_var(i, scope.loop) for i in load.indices):
            return
        key = address_key(ptr)
        if key in scope.issued:
            return
        scope.issued.add(key)
        self._prefetch_lines(ptr, nbytes)

    def _prefetch_lines(self, ptr: ir.Value, nbytes: int) -> None:
        fn = self.declare("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        distance = self.prefetch.distance
        lines = min(MAX_LINES_PER_LOAD, max(1, -(-nbytes // CACHE_LINE)))
        for line in range(lines):
            ahead = self.builder.gep(ptr, [ir.Constant(I64, distance + line * CACHE_LINE)],
                                     source_etype=I8)
            self.builder.call(fn, [ahead, ir.Constant(I32, 0), ir.Constant(I32, 3),
                                   ir.Constant(I32, 1)])
