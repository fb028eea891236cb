"""Buffer compaction: each buffer a block allocates moves to the lowest loop that encloses all
of its accesses and shrinks to the region one iteration of that loop touches.

This is the step that turns a register tile ``C_local`` of an 8x32 block, allocated by
``cache_write`` with the full output shape, into ``float32[8, 32]`` inside the loop over
blocks, and that gives every iteration of a parallel loop (every thread) a private copy of the
buffers computed under it::

    alloc C_local: float32[1024, 1024]          for f in parallel(4096):
    for f in parallel(4096):               =>     alloc C_local: float32[8, 32]
      for i, j: C_local[f // 32 * 8 + i,            for i, j: C_local[i, j] = ...
                        f % 32 * 32 + j] = ...

Placement.  The allocation site starts at the lowest common ancestor loop of every load and
store of the buffer (below the allocating block), then moves outward past:

- loops that bind a reduce iteration variable of a block storing to the buffer: the
  accumulator must survive across that loop's iterations;
- vectorized loops: the lanes of one vector share one allocation (a per-lane allocation
  would make the backend run the loop lane by lane);
- for ``shared`` buffers, loops bound to ``threadIdx.*``, and for ``global`` buffers, every
  thread-bound loop: such memory belongs to a thread block or to the whole grid.

The placement relies on the TensorIR invariant that a block reads only values produced in
the same iteration of every loop enclosing both producer and consumer, reductions aside
(compute_at, reverse_compute_at and cache_read/cache_write keep it).

Shape.  In each dimension every access index (block bindings substituted, so an expression
of loop variables) is split into ``outer + inner``: the terms of its canonical linear form
over loops enclosing the site, and those over loops below it.  The region is
``outer + [min inner, max inner]`` (constant extent), taking the outer part of the first
access as the reference and widening by the bounded difference where another access's outer
part differs (``max(y - 1, 0)`` beside ``y``); otherwise the dimension's constant bounds over
all loops are used; failing both, the whole dimension.
For a ``shared`` buffer kept out of threadIdx loops, the loops between those and the
accesses' common loop (the k-tile loop of a cooperative fetch) count as outer too when every
thread runs them alike: the threads go through their iterations together, a barrier apart,
so the allocation holds one iteration's tile (see ``_Planner.lockstep_vars``).
A region never exceeds the original dimension.  Indices are rewritten to subtract the
region's start.  Storage alignment requests (the block annotation ``buffer_dim_align`` written
by ``storage_align``) are applied again to the compacted shape, innermost axis first.
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as dc_replace

from . import dtype as dt
from .arith import Analyzer, is_index_dtype
from .buffer import Buffer
from .errors import LoweringError
from .expr import (
    And, BinOp, BufferLoad, Cast, Cmp, FloatImm, IntImm, Not, Or, PrimExpr, Select, Var,
    binary, cast,
)
from .func import PrimFunc
from .stmt import (
    PARALLEL, REDUCE, SERIAL, THREAD_BINDING, UNROLLED, VECTORIZED, Allocate, Block,
    BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse, LetStmt, Range, SeqStmt,
    Stmt, TensorIntrinCall,
)
from .visitor import children, node_fields, substitute, transform, walk

__all__ = ["compact_buffer_allocation", "private_buffers", "Placement", "plan_allocations"]

ALIGN_KEY = "buffer_dim_align"


@dataclass(frozen=True)
class Placement:
    """Where and how a block-allocated buffer is allocated after compaction.

    ``site`` is the loop whose body holds the allocation (None: it stays in ``block``'s
    alloc_buffers); ``enclosing`` are the loops around the allocation below the function
    body, outermost first; ``offsets`` the per-dimension start of the region (None where the
    region starts at 0)."""

    buffer: Buffer
    new_buffer: Buffer
    block: Block
    site: For | None
    enclosing: tuple
    offsets: tuple

    @property
    def changed(self) -> bool:
        return (self.site is not None or self.new_buffer is not self.buffer
                or any(o is not None for o in self.offsets))


# ---------------------------------------------------------------------------------------------
# 1. Collection: one walk records every access with its loop path
# ---------------------------------------------------------------------------------------------

class _Collector:
    """Walks a block-form body once.  For every buffer some block allocates it records the
    allocating block with its loop path, each access (indices in loop variables, loop path),
    the loops its reduction writers accumulate over, and storage-align requests."""

    def __init__(self):
        self.alloc: dict = {}       # Buffer -> (Block, loop path tuple)
        self.accesses: dict = {}    # Buffer -> [(indices, loop path tuple)]
        self.keep_out: dict = {}    # Buffer -> set of id(For) the allocation must enclose
        self.align: dict = {}       # Buffer -> [(axis, factor, offset)]
        self.dom: dict = {}         # loop Var -> (lo, hi) over every loop with constant bounds
        self.defined: set = set()   # variables defined inside the body (loops, lets)
        self.for_count: dict = {}   # loop Var -> number of For nodes binding it
        self.loading: dict = {}     # id(expr) -> (expr, allocated buffers it loads)
        self._loops: list = []
        self._subst_memo: dict = {}

    # -- helpers ----------------------------------------------------------------------------
    def _compose(self, e: PrimExpr, mapping: dict) -> PrimExpr:
        if not mapping:
            return e
        key = (id(e), id(mapping))
        hit = self._subst_memo.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        out = substitute(e, mapping)
        self._subst_memo[key] = (e, out, mapping)
        return out

    def _record(self, buf, indices: tuple, mapping: dict, store_reduce: frozenset | None):
        # The allocating block is an ancestor of every access, so it has been seen already:
        # accesses of parameters (the bulk of them) are skipped without composing indices.
        if buf not in self.alloc:
            return
        composed = tuple(self._compose(i, mapping) for i in indices)
        path = tuple(self._loops)
        self.accesses.setdefault(buf, []).append((composed, path))
        if store_reduce:
            out = self.keep_out.setdefault(buf, set())
            for lp in path:
                if lp.loop_var in store_reduce:
                    out.add(id(lp))

    def _loads(self, node, mapping: dict) -> None:
        """Record the loads inside an expression (or a tuple of them); remember which
        expressions load an allocated buffer so that rewriting can skip all others."""
        if node is None:
            return
        if isinstance(node, tuple):
            for x in node:
                if isinstance(x, PrimExpr):
                    self._loads(x, mapping)
            return
        found: set = set()
        self._scan(node, mapping, found)
        if found:
            self.loading[id(node)] = (node, found)

    def _scan(self, e, mapping: dict, found: set) -> None:
        """Find loads in ``e``; a hand-written descent (this runs on every expression of every
        lowered candidate, where the generic walker's reflection is the main cost)."""
        t = type(e)
        if t is BinOp or t is Cmp or t is And or t is Or:
            self._scan(e.a, mapping, found)
            self._scan(e.b, mapping, found)
        elif t is BufferLoad:
            for i in e.indices:
                self._scan(i, mapping, found)
            self._record(e.buffer, e.indices, mapping, None)
            if e.buffer in self.alloc:
                found.add(e.buffer)
        elif t is Var or t is IntImm or t is FloatImm:
            return
        elif t is Select:
            self._scan(e.condition, mapping, found)
            self._scan(e.true_value, mapping, found)
            self._scan(e.false_value, mapping, found)
        elif t is Cast:
            self._scan(e.value, mapping, found)
        elif t is Not:
            self._scan(e.a, mapping, found)
        else:
            for c in children(e):
                if isinstance(c, PrimExpr):
                    self._scan(c, mapping, found)

    # -- statements -------------------------------------------------------------------------
    def stmt(self, s, mapping: dict, reduce_vars: frozenset | None) -> None:
        if isinstance(s, For):
            self._loads(s.min, mapping)
            self._loads(s.extent, mapping)
            v = s.loop_var
            self.defined.add(v)
            self.for_count[v] = self.for_count.get(v, 0) + 1
            if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm) \
                    and s.extent.value >= 1:
                rng = (s.min.value, s.min.value + s.extent.value - 1)
                old = self.dom.get(v)
                # NOTE: a variable bound by two loops gets the hull of both ranges: facts
                # valid for the hull hold at each loop.
                self.dom[v] = rng if old is None else (min(old[0], rng[0]), max(old[1], rng[1]))
            self._loops.append(s)
            self.stmt(s.body, mapping, reduce_vars)
            self._loops.pop()
        elif isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, mapping, reduce_vars)
        elif isinstance(s, BlockRealize):
            self.realize(s, mapping)
        elif isinstance(s, BufferStore):
            self._loads(s.value, mapping)
            self._loads(s.indices, mapping)
            self._record(s.buffer, s.indices, mapping, reduce_vars)
        elif isinstance(s, IfThenElse):
            self._loads(s.condition, mapping)
            self.stmt(s.then_case, mapping, reduce_vars)
            if s.else_case is not None:
                self.stmt(s.else_case, mapping, reduce_vars)
        elif isinstance(s, LetStmt):
            self._loads(s.value, mapping)
            self.defined.add(s.var)
            self.stmt(s.body, mapping, reduce_vars)
        elif isinstance(s, Allocate):
            self.stmt(s.body, mapping, reduce_vars)
        elif isinstance(s, Evaluate):
            self._loads(s.value, mapping)
        elif isinstance(s, TensorIntrinCall):
            self.tensor_intrin(s, mapping, reduce_vars)
        elif isinstance(s, Block):
            self.block(s, mapping, None)
        else:
            raise LoweringError(f"compaction: unknown statement {type(s).__name__}")

    def tensor_intrin(self, s: TensorIntrinCall, mapping: dict,
                      reduce_vars: frozenset | None) -> None:
        """A tile touches, per operand, the box between the corners its steps reach from the
        first element: record both corners (the first element is recorded as a load, which
        also lets the rewriter find it)."""
        self._loads(s.operands, mapping)
        for load, steps, extents, written in zip(s.operands, s.steps, s.extents, s.written):
            low, high = list(load.indices), list(load.indices)
            for step, extent in zip(steps, extents):
                for p, delta in enumerate(step):
                    move = delta * (extent - 1)
                    if move > 0:
                        high[p] = binary("+", high[p], IntImm(move, high[p].dtype))
                    elif move < 0:
                        low[p] = binary("+", low[p], IntImm(move, low[p].dtype))
            reduce = reduce_vars if written else None
            self._record(load.buffer, tuple(low), mapping, reduce)
            self._record(load.buffer, tuple(high), mapping, reduce)

    def realize(self, r: BlockRealize, mapping: dict) -> None:
        blk = r.block
        self._loads(r.iter_values, mapping)
        self._loads(r.predicate, mapping)
        inner = dict(mapping)
        reduce_used: set = set()
        for iv, value in zip(blk.iter_vars, r.iter_values):
            composed = self._compose(value, mapping)
            inner[iv.var] = composed
            if iv.kind == REDUCE:
                walk(composed, lambda n: reduce_used.add(n) if isinstance(n, Var) else None)
        self.block(blk, inner, frozenset(reduce_used) if reduce_used else None)

    def block(self, blk: Block, mapping: dict, reduce_vars: frozenset | None) -> None:
        path = tuple(self._loops)
        for buf in blk.alloc_buffers:
            self.alloc[buf] = (blk, path)
        for rec in blk.annotation(ALIGN_KEY, ()) or ():
            index, axis, factor, offset = rec
            if 0 <= index < len(blk.writes):
                buf = blk.writes[index].buffer
                self.align.setdefault(buf, []).append((axis, factor, offset))
        if blk.init is not None:
            self.stmt(blk.init, mapping, reduce_vars)
        self.stmt(blk.body, mapping, reduce_vars)


# ---------------------------------------------------------------------------------------------
# 2. Planning: allocation site and region per buffer
# ---------------------------------------------------------------------------------------------

def _must_enclose(loop: For, scope: str, kind: str, thread: str | None) -> bool:
    """Whether an allocation in ``scope`` must stay outside a loop of this kind."""
    if kind == VECTORIZED:
        return True
    if kind == THREAD_BINDING and thread is not None:
        if scope == "global":
            return True
        if scope == "shared":
            return thread.startswith("threadIdx")
    return False


class _Planner:
    def __init__(self, col: _Collector, overrides: dict | None = None):
        self.col = col
        self.an = Analyzer(col.dom)
        self.overrides = overrides or {}  # id(For) -> (kind, thread) as if already applied
        self._vars: dict = {}
        self._affine: dict = {}

    def vars_of(self, e) -> tuple[frozenset, bool]:
        """Variables of ``e`` and whether it holds a load (a data-dependent value)."""
        hit = self._vars.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1], hit[2]
        found: set = set()
        has_load = _gather_vars(e, found)
        out = frozenset(found)
        self._vars[id(e)] = (e, out, has_load)
        return out, has_load

    def common_depth(self, base: int, paths: list) -> int:
        """Number of loops enclosing every access (``base``: those above the allocating
        block)."""
        first = paths[0]
        depth = min(len(p) for p in paths)
        for p in paths[1:]:
            k = base
            while k < depth and p[k] is first[k]:
                k += 1
            depth = k
        return depth

    def kind_of(self, lp: For) -> tuple:
        return self.overrides.get(id(lp), (lp.kind, lp.thread_binding))

    def site_depth(self, buf, base: int, paths: list) -> int:
        """Number of loops enclosing the allocation (``base``: those above its block)."""
        first = paths[0]
        depth = self.common_depth(base, paths)
        keep_out = self.col.keep_out.get(buf, ())
        for k in range(base, depth):
            lp = first[k]
            kind, thread = self.kind_of(lp)
            # A loop bound twice (the same Var in two For nodes) cannot host an allocation
            # safely: its index rewriting would be ambiguous.
            if id(lp) in keep_out or _must_enclose(lp, buf.scope, kind, thread) \
                    or self.col.for_count.get(lp.loop_var, 0) > 1:
                return k
        return depth

    def lockstep_vars(self, buf, site: int, paths: list, outer_vars: set) -> set:
        """Variables of loops below the allocation site of a ``shared`` buffer whose single
        iteration the region may describe: loops between the site and the accesses' common
        loop, inside the threadIdx loops that kept the allocation out.

        Every thread of a block runs such a loop over the same values (its bounds do not
        depend on a thread), and a barrier at the end of each iteration (the GPU printer's
        rule for a loop body that writes and reads one shared buffer) keeps the threads on
        one iteration at a time; by the TensorIR invariant a block reads only what was
        produced in the same iteration of the loops enclosing it and its producer.  So the
        tile of a k-loop iteration, not the whole k extent, is allocated: ``A_shared[ty_tile,
        k_tile]`` for a cooperative fetch computed at the k-loop under the thread loops.
        The walk stops at a loop that accumulates into the buffer, a vectorized loop, a
        loop bound twice or a loop whose bounds vary with a thread."""
        if buf.scope != "shared":
            return set()
        first = paths[0]
        depth = self.common_depth(site, paths)
        keep_out = self.col.keep_out.get(buf, ())
        known = set(outer_vars)
        found: set = set()
        for k in range(site, depth):
            lp = first[k]
            kind, thread = self.kind_of(lp)
            if kind == THREAD_BINDING and thread is not None \
                    and (thread.startswith("threadIdx") or thread == "vthread"):
                continue  # its threads share the one copy: the region spans them
            if kind not in (SERIAL, UNROLLED) or id(lp) in keep_out \
                    or self.col.for_count.get(lp.loop_var, 0) > 1:
                break
            used: set = set()
            if _gather_vars(lp.min, used) | _gather_vars(lp.extent, used) or used - known:
                break
            known.add(lp.loop_var)
            found.add(lp.loop_var)
        return found

    def affine(self, e):
        """``e`` as ({atom: coeff}, const) over + - and constant products, without any
        canonicalisation (the fast path: most indices are sums of loop variables)."""
        hit = self._affine.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        t = type(e)
        out = None
        if t is IntImm:
            out = ({}, e.value)
        elif t is BinOp and e.op in ("+", "-"):
            ta, ca = self.affine(e.a)
            tb, cb = self.affine(e.b)
            sign = 1 if e.op == "+" else -1
            terms = dict(ta)
            for atom, k in tb.items():
                v = terms.get(atom, 0) + sign * k
                if v:
                    terms[atom] = v
                else:
                    terms.pop(atom, None)
            out = (terms, ca + sign * cb)
        elif t is BinOp and e.op == "*" and (type(e.a) is IntImm or type(e.b) is IntImm):
            c, rest = (e.a.value, e.b) if type(e.a) is IntImm else (e.b.value, e.a)
            tr, cr = self.affine(rest)
            out = ({a: k * c for a, k in tr.items() if k * c}, cr * c)
        if out is None:
            out = ({e: 1}, 0)
        self._affine[id(e)] = (e, out)
        return out

    def split_access(self, e, outer_vars: set, inner_defined: set, canonical: bool):
        """``e = outer + inner``: (outer terms as {atom: coeff}, inner lo, inner hi), or None
        when an atom mixes both sides, loads data or cannot be bounded."""
        if canonical:
            form = self.an.linear_form(e)
            terms, const = form.terms, form.const
        else:
            terms_d, const = self.affine(e)
            terms = terms_d.items()
        outer, lo, hi = {}, const, const
        for atom, coeff in terms:
            used, has_load = self.vars_of(atom)
            if has_load:
                return None
            if not (used & inner_defined):
                outer[atom] = coeff
                continue
            if used & outer_vars:
                return None  # mixes loops inside and outside the site
            b = self.col.dom.get(atom) if type(atom) is Var else self.an.bound(atom)
            if b is None:
                return None
            lo += coeff * (b[0] if coeff > 0 else b[1])
            hi += coeff * (b[1] if coeff > 0 else b[0])
        return outer, lo, hi

    def symbolic_region(self, exprs: list, outer_vars: set, canonical: bool):
        """(outer terms, lo, hi) shared by every access of one dimension, or None."""
        inner_defined = self.col.defined - outer_vars
        key = lo = hi = None
        for e in exprs:
            if not is_index_dtype(e.dtype):
                return None
            part = self.split_access(e, outer_vars, inner_defined, canonical)
            if part is None:
                return None
            outer, ilo, ihi = part
            if key is None:
                key = outer
            elif outer != key:
                # Another outer part (a clipped start such as max(y - 1, 0) beside y): the
                # access sits at key + (outer - key) + inner, so the region widens by the
                # range of the difference when that is bounded.
                shift = self.shift_bound(outer, key)
                if shift is None:
                    return None
                ilo += shift[0]
                ihi += shift[1]
            lo = ilo if lo is None else min(lo, ilo)
            hi = ihi if hi is None else max(hi, ihi)
        return (None if key is None else tuple(key.items())), lo, hi

    def shift_bound(self, outer: dict, key: dict):
        """Bounds of ``outer - key`` (two sums of atoms) over the loop domains."""
        diff = dict(outer)
        for atom, coeff in key.items():
            v = diff.get(atom, 0) - coeff
            if v:
                diff[atom] = v
            else:
                diff.pop(atom, None)
        if not diff:
            return (0, 0)
        return self.bound_split(_render(tuple(diff.items()), 0), 0)

    def bound_split(self, e: PrimExpr, depth: int):
        """Bounds of ``e``, distributing one min / max atom over its operands:
        ``max(y - 1, 0) - y`` is ``max(-1, -y)``, within [-1, 0], where bounding the atoms
        apart gives [-(n - 1), n - 2]."""
        form = self.an.linear_form(e)
        if depth < 4:
            for atom, coeff in form.terms:
                if not (type(atom) is BinOp and atom.op in ("min", "max")):
                    continue
                rest = tuple((a, k) for a, k in form.terms if a is not atom)
                cases = []
                for operand in (atom.a, atom.b):
                    terms = rest + ((operand, coeff),)
                    b = self.bound_split(_render(terms, form.const), depth + 1)
                    if b is None:
                        break
                    cases.append(b)
                else:
                    # rest + coeff * max(a, b) is the max of the two cases for coeff > 0 and
                    # their min for coeff < 0 (and the other way round for min).
                    take_max = (atom.op == "max") == (coeff > 0)
                    pick = max if take_max else min
                    return (pick(cases[0][0], cases[1][0]), pick(cases[0][1], cases[1][1]))
        return self.an.bound(e)

    def dim_region(self, exprs: list, size, outer_vars: set):
        """(offset expression or None, extent) of one dimension; extent None: whole."""
        # The literal affine split is tried first; canonical forms (which see through
        # floordiv / floormod of fused and split loops) only when it fails.
        found = self.symbolic_region(exprs, outer_vars, False)
        if found is None:
            found = self.symbolic_region(exprs, outer_vars, True)
        symbolic = found is not None
        key, lo, hi = found if symbolic else (None, None, None)
        const_size = size.value if isinstance(size, IntImm) else None
        best = None  # (extent, offset expr or None)
        if symbolic and key is not None:
            extent = hi - lo + 1
            if key:
                best = (extent, _render(key, lo))
            else:
                c_lo = max(lo, 0)
                c_hi = hi if const_size is None else min(hi, const_size - 1)
                best = (max(c_hi - c_lo + 1, 1), None if c_lo == 0 else IntImm(c_lo))
        if best is None:
            # Constant bounds over every loop: accesses whose outer parts differ.  (When the
            # outer parts agree the constant region, which adds their range, is never smaller.)
            best = self.const_region(exprs, const_size)
        if best is None:
            return None, None
        if const_size is not None and best[0] >= const_size:
            return None, None
        return best[1], best[0]

    def const_region(self, exprs: list, const_size):
        lo = hi = None
        for e in exprs:
            if not (dt.is_int(e.dtype)):
                return None
            b = self.an.bound(e)
            if b is None:
                return None
            lo = b[0] if lo is None else min(lo, b[0])
            hi = b[1] if hi is None else max(hi, b[1])
        lo = max(lo, 0)
        if const_size is not None:
            hi = min(hi, const_size - 1)
        extent = max(hi - lo + 1, 1)
        return extent, (None if lo == 0 else IntImm(lo))

    def plan(self, buf) -> Placement | None:
        col = self.col
        blk, alloc_path = col.alloc[buf]
        accs = col.accesses.get(buf)
        if not accs:
            return None
        base = len(alloc_path)
        paths = [p for _, p in accs]
        if any(len(p) < base or any(a is not b for a, b in zip(p, alloc_path))
               for p in paths):
            return None  # accessed outside its allocating block: leave it alone
        depth = self.site_depth(buf, base, paths)
        enclosing = paths[0][:depth]
        outer_vars = {lp.loop_var for lp in enclosing}
        region_vars = outer_vars | self.lockstep_vars(buf, depth, paths, outer_vars)
        shape, offsets = [], []
        for d, size in enumerate(buf.shape):
            off, extent = self.dim_region([idx[d] for idx, _ in accs], size, region_vars)
            if extent is None:
                shape.append(size)
                offsets.append(None)
            else:
                shape.append(IntImm(extent, size.dtype if is_index_dtype(size.dtype)
                                    else dt.INDEX_DTYPE))
                offsets.append(off)
        shape = _align(shape, col.align.get(buf, ()), buf)
        site = enclosing[-1] if depth > base else None
        if all(a is b for a, b in zip(shape, buf.shape)):
            new_buf = buf
        elif all(isinstance(a, IntImm) and isinstance(b, IntImm) and a.value == b.value
                 for a, b in zip(shape, buf.shape)):
            new_buf = buf
        else:
            new_buf = Buffer(buf.name, tuple(shape), buf.dtype, buf.scope)
        return Placement(buf, new_buf, blk, site, tuple(enclosing), tuple(offsets))


def _gather_vars(e, found: set) -> bool:
    """Add the variables of ``e`` to ``found``; True when ``e`` loads from a buffer."""
    t = type(e)
    if t is Var:
        found.add(e)
        return False
    if t is IntImm or t is FloatImm:
        return False
    if t is BinOp or t is Cmp or t is And or t is Or:
        return _gather_vars(e.a, found) | _gather_vars(e.b, found)
    if t is BufferLoad:
        for i in e.indices:
            _gather_vars(i, found)
        return True
    out = False
    for c in children(e):
        if isinstance(c, PrimExpr):
            out |= _gather_vars(c, found)
    return out


def _render(terms: tuple, const: int) -> PrimExpr:
    """``sum(coeff * atom) + const`` as an index expression."""
    out = None
    for atom, coeff in terms:
        t = atom if coeff == 1 else binary("*", atom, IntImm(coeff, atom.dtype))
        out = t if out is None else binary("+", out, t)
    if out is None:
        return IntImm(const)
    if const:
        out = binary("+", out, IntImm(const, out.dtype))
    return out


def _align(shape: list, requests, buf) -> list:
    """Pad dimension ``axis + 1`` so that the stride of ``axis`` is ``offset`` modulo
    ``factor``, innermost request first (padding an outer dimension never changes the stride
    of an inner one)."""
    if not requests or not all(isinstance(s, IntImm) for s in shape):
        return shape
    dims = [s.value for s in shape]
    ndim = len(dims)
    for axis, factor, offset in sorted(requests, key=lambda r: -(r[0] % ndim)):
        axis %= ndim
        if axis >= ndim - 1 or factor <= 0:
            continue
        inner = 1
        for s in dims[axis + 2:]:
            inner *= s
        base = dims[axis + 1]
        padded = next((s for s in range(base, base + factor)
                       if (s * inner) % factor == offset % factor), None)
        if padded is not None:
            dims[axis + 1] = padded
    return [s if s.value == v else IntImm(v, s.dtype) for s, v in zip(shape, dims)]


# ---------------------------------------------------------------------------------------------
# 3. Rewriting
# ---------------------------------------------------------------------------------------------

class _Rewriter:
    def __init__(self, plans: dict, loading: dict):
        self.plans = plans  # Buffer -> Placement (changed ones only)
        self.loading = loading  # from the collector: expressions that load allocated buffers
        self.sites: dict = {}
        for p in plans.values():
            if p.site is not None:
                self.sites.setdefault(id(p.site), []).append(p.new_buffer)
        self.moved = {p.buffer for p in plans.values() if p.site is not None}

    def indices(self, buf, indices: tuple) -> tuple:
        p = self.plans[buf]
        out = []
        for i, off in zip(indices, p.offsets):
            if off is None:
                out.append(i)
            else:
                out.append(binary("-", i, off if off.dtype == i.dtype else cast(i.dtype, off)))
        return tuple(out)

    def _expr_fn(self, n):
        if isinstance(n, BufferLoad) and n.buffer in self.plans:
            return BufferLoad(self.plans[n.buffer].new_buffer, self.indices(n.buffer, n.indices))
        if isinstance(n, BufferRegion) and n.buffer in self.plans:
            p = self.plans[n.buffer]
            region = tuple(
                r if off is None else Range(
                    binary("-", r.min, off if off.dtype == r.min.dtype
                           else cast(r.min.dtype, off)), r.extent)
                for r, off in zip(n.region, p.offsets))
            return BufferRegion(p.new_buffer, region)
        return None

    def expr(self, e):
        if e is None:
            return None
        hit = self.loading.get(id(e))
        if hit is None or hit[0] is not e or not any(b in self.plans for b in hit[1]):
            return e
        return transform(e, self._expr_fn)

    def region(self, r: BufferRegion) -> BufferRegion:
        return r if r.buffer not in self.plans else self._expr_fn(r)

    def stmt(self, s):
        if isinstance(s, For):
            body = self.stmt(s.body)
            for buf in reversed(self.sites.get(id(s), ())):
                body = Allocate(buf, body)
            mn, ext = self.expr(s.min), self.expr(s.extent)
            if body is s.body and mn is s.min and ext is s.extent:
                return s
            return dc_replace(s, min=mn, extent=ext, body=body)
        if isinstance(s, SeqStmt):
            stmts = tuple(self.stmt(x) for x in s.stmts)
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else SeqStmt(stmts)
        if isinstance(s, BufferStore):
            value = self.expr(s.value)
            indices = tuple(self.expr(i) for i in s.indices)
            buf = s.buffer
            if buf in self.plans:
                indices = self.indices(buf, indices)
                buf = self.plans[buf].new_buffer
            if buf is s.buffer and value is s.value and all(
                    a is b for a, b in zip(indices, s.indices)):
                return s
            return BufferStore(buf, value, indices)
        if isinstance(s, Block):
            return self.block(s)
        # Remaining statements: rebuild the fields that changed.
        changes = {}
        for name in node_fields(type(s)):
            old = getattr(s, name)
            if isinstance(old, Stmt):
                new = self.stmt(old)
            elif isinstance(old, PrimExpr):
                new = self.expr(old)
            elif isinstance(old, tuple):
                new = tuple(self.expr(x) if isinstance(x, PrimExpr) else x for x in old)
                if all(a is b for a, b in zip(new, old)):
                    new = old
            else:
                continue
            if new is not old:
                changes[name] = new
        return dc_replace(s, **changes) if changes else s

    def block(self, b: Block) -> Block:
        body = self.stmt(b.body)
        init = None if b.init is None else self.stmt(b.init)
        reads = tuple(self.region(r) for r in b.reads)
        writes = tuple(self.region(w) for w in b.writes)
        allocs = tuple(self.plans[buf].new_buffer if buf in self.plans else buf
                       for buf in b.alloc_buffers if buf not in self.moved)
        if (body is b.body and init is b.init and len(allocs) == len(b.alloc_buffers)
                and all(x is y for x, y in zip(allocs, b.alloc_buffers))
                and all(x is y for x, y in zip(reads, b.reads))
                and all(x is y for x, y in zip(writes, b.writes))):
            return b
        return dc_replace(b, body=body, init=init, reads=reads, writes=writes,
                          alloc_buffers=allocs)


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

def _collect(body) -> _Collector:
    col = _Collector()
    col.stmt(body, {}, None)
    return col


def plan_allocations(func: PrimFunc, overrides: dict | None = None) -> dict:
    """``{buffer: Placement}`` for every buffer a block of ``func`` allocates and accesses.

    ``overrides`` maps ``id(For)`` to ``(kind, thread_binding)`` to plan as if those loops had
    that kind already (used to ask what a primitive's result would do)."""
    return _plan(_collect(func.body), overrides)


def _plan(col: _Collector, overrides: dict | None) -> dict:
    planner = _Planner(col, overrides)
    out = {}
    for buf in col.alloc:
        p = planner.plan(buf)
        if p is not None:
            out[buf] = p
    return out


def compact_buffer_allocation(func: PrimFunc) -> PrimFunc:
    """Move and shrink every block-allocated buffer of a block-form ``func`` (see the module
    text).  Function parameters are never touched.  Returns ``func`` itself when nothing
    changes."""
    col = _collect(func.body)
    plans = {b: p for b, p in _plan(col, None).items() if p.changed}
    if not plans:
        return func
    body = _Rewriter(plans, col.loading).stmt(func.body)
    return func.with_body(body)


# (body, its _Collector) of the last private_buffers question; holding the body keeps its id
# from being reused.
_LAST_COLLECTED: list = [None, None]


def private_buffers(func, loop: For, kind: str = PARALLEL,
                    thread_binding: str | None = None) -> set:
    """Buffers that compaction allocates inside the body of ``loop`` once the loop has
    ``kind`` (and ``thread_binding``): every iteration of the loop, hence every thread running
    it, owns a copy, so they carry no dependence between its iterations.

    A buffer also accessed outside ``loop``, accumulated over it, or kept outside it by its
    scope is not private.  A vectorized loop never holds an allocation, so for
    ``kind=VECTORIZED`` the answer is always the empty set.

    ``func`` is a block-form PrimFunc or its body (what dependence checks hold)."""
    if kind == VECTORIZED:
        return set()
    body = func.body if isinstance(func, PrimFunc) else func
    # Post-processors ask this about several loops of one (immutable) body in a row: collect
    # its accesses once.
    if _LAST_COLLECTED[0] is body:
        col = _LAST_COLLECTED[1]
    else:
        col = _collect(body)
        _LAST_COLLECTED[:] = [body, col]
    plans = _plan(col, {id(loop): (kind, thread_binding)})
    return {b for b, p in plans.items() if any(lp is loop for lp in p.enclosing)}
