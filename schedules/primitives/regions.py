"""Region inference for block primitives: symbolic interval relaxation of index expressions over
loops, and recomputation of block read/write regions.

The arithmetic is :mod:`tensor_ir.arith`'s, with terms kept in the order they were written (so
the expressions primitives build read like their inputs).  Two expressions whose difference is
a constant are known to be a constant apart, which is what region inference needs: the region a
consumer reads under ``for io: for ii in 0..32: A[io*32 + ii]`` is ``[io*32, io*32 + 31]``,
extent 32.
"""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir import arith
from tensor_ir import dtype as dt
from tensor_ir.expr import BufferLoad, IntImm, PrimExpr, Var, binary
from tensor_ir.stmt import Block, BufferRegion, BufferStore, For, Range
from tensor_ir.visitor import free_vars, walk

# An interval with symbolic, inclusive ends: (lo, hi).
Interval = tuple


def canon(e: PrimExpr) -> PrimExpr:
    """Canonical (simplified) form of an integer index expression, terms in written order;
    other expressions are returned unchanged."""
    if not isinstance(e, PrimExpr) or not dt.is_int(e.dtype) or e.dtype == "bool":
        return e
    return arith.canonical(e, keep_order=True)


def relax(e: PrimExpr, ranges: dict) -> Interval | None:
    """:func:`tensor_ir.arith.relax` with terms in written order."""
    return arith.relax(e, ranges, keep_order=True)


def as_var_plus_const(e: PrimExpr) -> tuple[Var, int] | None:
    """``(v, c)`` when ``e`` is ``v + c`` for a variable ``v``."""
    if not arith.is_index_dtype(e.dtype):
        return None
    form = arith.linear_form(e)
    if len(form.terms) == 1:
        (atom, coeff), = form.terms
        if coeff == 1 and isinstance(atom, Var):
            return atom, form.const
    return None


def loop_ranges(loops: list[For], ranges: dict | None = None) -> dict | None:
    """Extend ``ranges`` with the inclusive ranges of ``loops`` (outer to inner); a loop whose
    bounds depend on an earlier relaxed loop is relaxed through it.  None when a loop's bounds
    cannot be bounded."""
    out = dict(ranges or {})
    for loop in loops:
        lo = relax(loop.min, out)
        hi = relax(binary("-", binary("+", loop.min, loop.extent), 1), out)
        if lo is None or hi is None:
            return None
        out[loop.loop_var] = (lo[0], hi[1])
    return out


def shares_storage_across(scope: str, loop: For) -> bool:
    """Whether the threads of a thread-bound ``loop`` share one copy of a buffer in storage
    ``scope``: a ``shared`` buffer belongs to a thread block, so every ``threadIdx.*`` (and
    ``vthread``) iteration sees the same copy.  A ``local`` buffer is private to one thread;
    a ``global`` one is left out here (its producer keeps the per-thread region, so the
    threads of a grid never write one element redundantly)."""
    binding = loop.thread_binding
    if binding is None or scope != "shared":
        return False
    return binding.startswith("threadIdx") or binding == "vthread"


def const_dom(loops: list[For]) -> dict:
    """``{loop_var: (lo, hi)}`` constant inclusive bounds of ``loops`` (outer to inner), for
    :func:`tensor_ir.arith.int_bound`; loops whose bounds are unknown are left out."""
    dom: dict = {}
    for loop in loops:
        lo = arith.int_bound(loop.min, dom)
        hi = arith.int_bound(binary("-", binary("+", loop.min, loop.extent), 1), dom)
        if lo is not None and hi is not None:
            dom[loop.loop_var] = (lo[0], hi[1])
    return dom


def union(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None:
        return b
    if b is None:
        return a
    return canon(binary("min", a[0], b[0])), canon(binary("max", a[1], b[1]))


# ---------------------------------------------------------------------------------------------
# Block access regions
# ---------------------------------------------------------------------------------------------

def _dim_region(exprs: list, extent: PrimExpr) -> Range:
    first = exprs[0]
    offsets = [arith.const_diff(e, first, keep_order=True) for e in exprs]
    if all(o is not None for o in offsets):
        lo, hi = min(offsets), max(offsets)
        start = canon(binary("+", first, IntImm(lo, first.dtype))) if lo else first
        return Range(start, IntImm(hi - lo + 1))
    return Range(IntImm(0), extent)


def access_regions(buffer, index_tuples: list) -> tuple:
    """A region covering every index tuple in ``index_tuples`` (expressions of block iteration
    variables): per dimension a point or a constant-width window when the accesses are a
    constant apart, otherwise the whole dimension."""
    return tuple(_dim_region([idx[d] for idx in index_tuples], buffer.shape[d])
                 for d in range(len(buffer.shape)))


def recompute_regions(block: Block) -> Block:
    """``block`` with reads and writes recomputed from the loads and stores in its body (blocks
    nested inside are not looked into: their own regions stand for them)."""
    loads = _own_accesses(block, BufferLoad)
    stores = _own_accesses(block, BufferStore)
    reads = tuple(BufferRegion(buf, access_regions(buf, idxs)) for buf, idxs in loads.items())
    writes = tuple(BufferRegion(buf, access_regions(buf, idxs)) for buf, idxs in stores.items())
    for inner in _nested_blocks(block):
        for r in inner.reads:
            if r.buffer not in loads and not _defined_inside(r, block):
                reads += (r,)
        for w in inner.writes:
            if w.buffer not in stores and not _defined_inside(w, block):
                writes += (w,)
    return dc_replace(block, reads=reads, writes=writes)


def _defined_inside(region: BufferRegion, block: Block) -> bool:
    # Regions of nested blocks mention their own iteration variables; keep only those that
    # are meaningful at this block's level.
    own = {iv.var for iv in block.iter_vars}
    for rng in region.region:
        for v in free_vars(rng.min) | free_vars(rng.extent):
            if v not in own:
                return True
    return False


def _nested_blocks(block: Block) -> list:
    found = []

    def fn(n):
        if n is not block and isinstance(n, Block):
            found.append(n)
            return False
        return None

    for part in (block.init, block.body):
        if part is not None:
            walk(part, fn)
    return found


def _own_accesses(block: Block, cls) -> dict:
    out: dict = {}

    def fn(n):
        if isinstance(n, Block):
            return False
        if isinstance(n, cls):
            out.setdefault(n.buffer, []).append(n.indices)
        return None

    for part in (block.init, block.body):
        if part is not None:
            walk(part, fn)
    return out
