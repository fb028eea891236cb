"""Region inference for block primitives: affine canonical forms, symbolic interval relaxation
of index expressions over loops, and recomputation of block read/write regions.

Index expressions are put into a canonical linear form ``sum(coeff * atom) + const`` where an
atom is a variable or a non-linear subexpression (floordiv, floormod, min, max, a product of two
non-constants, ...).  Two expressions whose difference is a constant in that form are known to
be a constant apart, which is what region inference needs: the region a consumer reads under
``for io: for ii in 0..32: A[io*32 + ii]`` is ``[io*32, io*32 + 31]``, extent 32.
"""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir import dtype as dt
from tensor_ir.analysis import const_bound
from tensor_ir.expr import BinOp, BufferLoad, Cast, IntImm, PrimExpr, Var, binary
from tensor_ir.stmt import Block, BufferRegion, BufferStore, For, Range
from tensor_ir.visitor import collect, free_vars, uses_var, walk

INDEX = dt.INDEX_DTYPE

# An interval with symbolic, inclusive ends: (lo, hi).
Interval = tuple


# ---------------------------------------------------------------------------------------------
# Canonical linear forms
# ---------------------------------------------------------------------------------------------

def _linear(e: PrimExpr) -> tuple[dict, int]:
    """``(terms, const)`` with ``terms`` an insertion-ordered ``{atom: coeff}``."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, BinOp) and dt.is_int(e.dtype):
        op = e.op
        if op in ("+", "-"):
            ta, ca = _linear(e.a)
            tb, cb = _linear(e.b)
            sign = 1 if op == "+" else -1
            out = dict(ta)
            for atom, c in tb.items():
                out[atom] = out.get(atom, 0) + sign * c
            return {a: c for a, c in out.items() if c != 0}, ca + sign * cb
        if op == "*":
            ta, ca = _linear(e.a)
            tb, cb = _linear(e.b)
            if not tb:
                return {a: c * cb for a, c in ta.items() if c * cb != 0}, ca * cb
            if not ta:
                return {a: c * ca for a, c in tb.items() if c * ca != 0}, ca * cb
            atom = BinOp("*", _build(ta, ca, e.dtype), _build(tb, cb, e.dtype))
            return {atom: 1}, 0
        if op in ("//", "%"):
            ta, ca = _linear(e.a)
            tb, cb = _linear(e.b)
            if not tb and cb > 0:
                if op == "//":
                    if all(c % cb == 0 for c in ta.values()):
                        # (cb*x + k) // cb == x + k // cb exactly for floor division.
                        return {a: c // cb for a, c in ta.items()}, ca // cb
                    # Pull out the multiples of cb: (cb*x + r) // cb == x + r // cb.
                    whole = {a: c // cb for a, c in ta.items() if c % cb == 0}
                    rest = {a: c for a, c in ta.items() if c % cb != 0}
                    atom = BinOp("//", _build(rest, ca, e.dtype), IntImm(cb, e.b.dtype))
                    whole[atom] = whole.get(atom, 0) + 1
                    return whole, 0
                rest = {a: c for a, c in ta.items() if c % cb != 0}
                if not rest:
                    return {}, ca % cb
                atom = BinOp("%", _build(rest, ca, e.dtype), IntImm(cb, e.b.dtype))
                return {atom: 1}, 0
            atom = BinOp(op, _build(ta, ca, e.dtype), _build(tb, cb, e.dtype))
            return {atom: 1}, 0
        if op in ("min", "max"):
            a, b = canon(e.a), canon(e.b)
            if isinstance(a, IntImm) and isinstance(b, IntImm):
                return {}, (min if op == "min" else max)(a.value, b.value)
            diff = canon(binary("-", a, b))
            if isinstance(diff, IntImm):
                # The two sides are a constant apart: the min/max is one of them.
                pick_a = (diff.value <= 0) == (op == "min")
                return _linear(a if pick_a else b)
            return {BinOp(op, a, b): 1}, 0
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        inner = canon(e.value)
        if isinstance(inner, IntImm):
            return {}, inner.value
        return {Cast(e.dtype, inner): 1}, 0
    return {e: 1}, 0


def _build(terms: dict, const: int, dtype: str = INDEX) -> PrimExpr:
    out: PrimExpr | None = None
    for atom, c in terms.items():
        if c == 0:
            continue
        mag = atom if abs(c) == 1 else binary("*", atom, IntImm(abs(c), atom.dtype))
        if out is None:
            out = mag if c > 0 else binary("-", IntImm(0, atom.dtype), mag)
        else:
            out = binary("+" if c > 0 else "-", out, mag)
    if out is None:
        return IntImm(const, dtype)
    if const:
        out = binary("+" if const > 0 else "-", out, IntImm(abs(const), out.dtype))
    return out


def canon(e: PrimExpr) -> PrimExpr:
    """Canonical (simplified) form of an integer index expression; other expressions are
    returned unchanged."""
    if not isinstance(e, PrimExpr) or not dt.is_int(e.dtype) or e.dtype == "bool":
        return e
    terms, const = _linear(e)
    return _build(terms, const, e.dtype)


def const_diff(a: PrimExpr, b: PrimExpr) -> int | None:
    """``a - b`` when it is a known constant, else None."""
    d = canon(binary("-", a, b))
    return d.value if isinstance(d, IntImm) else None


def as_var_plus_const(e: PrimExpr) -> tuple[Var, int] | None:
    """``(v, c)`` when ``e`` is ``v + c`` for a variable ``v``."""
    terms, const = _linear(e)
    if len(terms) == 1:
        (atom, coeff), = terms.items()
        if coeff == 1 and isinstance(atom, Var):
            return atom, const
    return None


def sym_min(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    d = const_diff(a, b)
    if d is not None:
        return a if d <= 0 else b
    return canon(binary("min", a, b))


def sym_max(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    d = const_diff(a, b)
    if d is not None:
        return a if d >= 0 else b
    return canon(binary("max", a, b))


# ---------------------------------------------------------------------------------------------
# Symbolic interval relaxation
# ---------------------------------------------------------------------------------------------

def relax(e: PrimExpr, ranges: dict) -> Interval | None:
    """Inclusive symbolic bounds of ``e`` when each variable in ``ranges`` (``Var -> (lo, hi)``)
    takes every value of its interval; other variables stay symbolic.  None when no bound can
    be stated (a load, a product of two relaxed expressions, ...)."""
    if not any(uses_var(e, v) for v in ranges):
        c = canon(e)
        return c, c
    terms, const = _linear(e)
    lo_terms: list = []
    hi_terms: list = []
    for atom, coeff in terms.items():
        if isinstance(atom, Var):
            if atom in ranges:
                alo, ahi = ranges[atom]
            else:
                alo = ahi = atom
        else:
            bounds = _relax_atom(atom, ranges)
            if bounds is None:
                return None
            alo, ahi = bounds
        if coeff > 0:
            lo_terms.append(binary("*", alo, IntImm(coeff, alo.dtype)))
            hi_terms.append(binary("*", ahi, IntImm(coeff, ahi.dtype)))
        else:
            lo_terms.append(binary("*", ahi, IntImm(coeff, ahi.dtype)))
            hi_terms.append(binary("*", alo, IntImm(coeff, alo.dtype)))
    lo = IntImm(const, e.dtype)
    hi = IntImm(const, e.dtype)
    for t in lo_terms:
        lo = binary("+", lo, t)
    for t in hi_terms:
        hi = binary("+", hi, t)
    return canon(lo), canon(hi)


def _relax_atom(atom: PrimExpr, ranges: dict) -> Interval | None:
    if not any(uses_var(atom, v) for v in ranges):
        return atom, atom
    if isinstance(atom, BinOp):
        if atom.op == "//" and isinstance(atom.b, IntImm) and atom.b.value > 0:
            inner = relax(atom.a, ranges)
            if inner is None:
                return None
            c = atom.b
            return canon(binary("//", inner[0], c)), canon(binary("//", inner[1], c))
        if atom.op == "%" and isinstance(atom.b, IntImm) and atom.b.value > 0:
            inner = relax(atom.a, ranges)
            c = atom.b.value
            if inner is not None:
                span = const_diff(inner[1], inner[0])
                # The relaxed operand stays inside one period when its floordivs agree.
                if span is not None and span < c and \
                        const_diff(binary("//", inner[1], atom.b),
                                   binary("//", inner[0], atom.b)) == 0:
                    return canon(binary("%", inner[0], atom.b)), canon(binary("%", inner[1],
                                                                               atom.b))
            return IntImm(0, atom.dtype), IntImm(c - 1, atom.dtype)
        if atom.op in ("min", "max"):
            a, b = relax(atom.a, ranges), relax(atom.b, ranges)
            if a is None or b is None:
                return None
            f = sym_min if atom.op == "min" else sym_max
            return f(a[0], b[0]), f(a[1], b[1])
    if isinstance(atom, Cast) and dt.is_int(atom.value.dtype):
        inner = relax(atom.value, ranges)
        if inner is None:
            return None
        return Cast(atom.dtype, inner[0]), Cast(atom.dtype, inner[1])
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


def const_dom(loops: list[For]) -> dict:
    """``{loop_var: (lo, hi)}`` constant inclusive bounds of ``loops`` (outer to inner), for
    :func:`tensor_ir.analysis.const_bound`; loops whose bounds are unknown are left out."""
    dom: dict = {}
    for loop in loops:
        lo = const_bound(loop.min, dom)
        hi = const_bound(binary("-", binary("+", loop.min, loop.extent), 1), dom)
        if lo is not None and hi is not None:
            dom[loop.loop_var] = (lo[0], hi[1])
    return dom


def provably_le(a: PrimExpr, b: PrimExpr, dom: dict) -> bool:
    """True when ``a <= b`` for every value of the variables in ``dom``."""
    d = canon(binary("-", b, a))
    if isinstance(d, IntImm):
        return d.value >= 0
    bound = const_bound(d, dom)
    return bound is not None and bound[0] >= 0


def union(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None:
        return b
    if b is None:
        return a
    return sym_min(a[0], b[0]), sym_max(a[1], b[1])


# ---------------------------------------------------------------------------------------------
# Block access regions
# ---------------------------------------------------------------------------------------------

def _dim_region(exprs: list, extent: PrimExpr) -> Range:
    first = exprs[0]
    offsets = [const_diff(e, first) for e in exprs]
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


def block_loads(block: Block) -> dict:
    """``{buffer: [indices, ...]}`` of every load in the block's body and init, in order."""
    out: dict = {}
    for part in (block.init, block.body):
        if part is None:
            continue
        for ld in collect(part, BufferLoad):
            out.setdefault(ld.buffer, []).append(ld.indices)
    return out


def block_stores(block: Block) -> dict:
    out: dict = {}
    for part in (block.init, block.body):
        if part is None:
            continue
        for st in collect(part, BufferStore):
            out.setdefault(st.buffer, []).append(st.indices)
    return out


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
