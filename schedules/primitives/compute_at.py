"""Block placement primitives: compute_at, reverse_compute_at, compute_inline and
reverse_compute_inline (pure PrimFunc -> PrimFunc rewrites with TensorIR semantics)."""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir import arith
from tensor_ir.expr import BufferLoad, IntImm, PrimExpr, Var, binary, compare
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import (
    REDUCE, SERIAL, SPATIAL, TRUE, Block, BlockRealize, BufferStore, For, TensorIntrinCall, seq,
)
from tensor_ir.visitor import collect, substitute, transform, uses_var

from .. import tree
from ..errors import ScheduleError, check
from . import blocks as B
from .regions import (
    as_var_plus_const, canon, const_dom, loop_ranges, recompute_regions, relax,
    shares_storage_across, union,
)

__all__ = ["compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline"]


# ---------------------------------------------------------------------------------------------
# Shared checks
# ---------------------------------------------------------------------------------------------

def _locate(func: PrimFunc, block: str, loop_var: Var, what: str):
    loc = tree.find_block(func, block)
    lloc = tree.find_loop(func, loop_var)
    loop = lloc.node
    check(loc.parent_block is lloc.parent_block,
          f"{what}: block {block} and loop {loop_var.name} are not in the same block scope")
    check(not any(n is loop for n in loc.path),
          f"{what}: loop {loop_var.name} already encloses block {block}")
    return loc, lloc


def _ordered_reads(blk: Block) -> list:
    """Buffers the block reads, in a deterministic order (declared regions, then loads)."""
    out: list = []
    for buf in [r.buffer for r in blk.reads] + [ld.buffer for ld in collect(blk.body,
                                                                              BufferLoad)]:
        if not any(b is buf for b in out):
            out.append(buf)
    return out


def _block_under(loop: For) -> set[str]:
    return {b.name for b in B.blocks_in(loop.body)}


def _program_order(func: PrimFunc) -> dict[str, int]:
    return {name: i for i, name in enumerate(B.block_names(func))}


def _clip(lo: PrimExpr, hi: PrimExpr, dom, outer: dict):
    """Clip the symbolic interval [lo, hi] to an iteration domain.  Returns (start, extent,
    end) where ``extent`` is a constant loop extent and ``end`` the inclusive symbolic end to
    guard with (None when the extent is exact)."""
    check(isinstance(dom.min, IntImm) and isinstance(dom.extent, IntImm),
          "iteration domains must be constant for region inference")
    dmin, dmax = dom.min.value, dom.min.value + dom.extent.value - 1
    start = lo if arith.prove(compare("<=", IntImm(dmin, lo.dtype), lo), outer) \
        else canon(binary("max", lo, IntImm(dmin)))
    end = hi if arith.prove(compare("<=", hi, IntImm(dmax, hi.dtype)), outer) \
        else canon(binary("min", hi, IntImm(dmax)))
    extent = canon(binary("+", binary("-", end, start), 1))
    if isinstance(extent, IntImm):
        return start, max(extent.value, 0), None
    # NOTE: the extent varies with the outer loops: loop over its upper bound (the unclipped
    # width, at most the domain) and guard the realize with the true end.
    width = canon(binary("+", binary("-", hi, lo), 1))
    bound = arith.int_bound(width, outer) if not isinstance(width, IntImm) else (0, width.value)
    upper = dom.extent.value if bound is None else min(bound[1], dom.extent.value)
    return start, max(upper, 0), end


def _rebuild_nest(blk: Block, ranges: dict, pred_extra=None):
    """Fresh loops for every iteration variable of ``blk`` over ``ranges[var] = (start, extent,
    end)``; iteration variables missing from ``ranges`` cover their whole domain."""
    starts, extents, guards = [], [], []
    for k, iv in enumerate(blk.iter_vars):
        if iv.var in ranges:
            start, extent, end = ranges[iv.var]
        else:
            start, extent, end = iv.dom.min, iv.dom.extent, None
        starts.append(start)
        extents.append(extent)
        if end is not None:
            guards.append(lambda values, k=k, end=end: compare("<=", values[k], end))
    loop_vars = [Var(f"ax{d}") for d in range(len(blk.iter_vars))]
    values = tuple(lv if (isinstance(s, IntImm) and s.value == 0) else canon(binary("+", s, lv))
                   for s, lv in zip(starts, loop_vars))
    pred = None
    for g in guards:
        c = g(values)
        pred = c if pred is None else (pred & c)
    stmt = BlockRealize(values, TRUE if pred is None else pred, blk)
    for lv, ext in reversed(list(zip(loop_vars, extents))):
        stmt = For(lv, IntImm(0), ext if isinstance(ext, PrimExpr) else IntImm(ext), SERIAL,
                   stmt)
    return stmt


def _realize_accesses(rloc: tree.Located, buffer, kind) -> list[tuple]:
    """Index tuples of ``buffer`` loads (kind BufferLoad) or write regions (kind "writes") of
    the located realize, in terms of loop variables."""
    realize: BlockRealize = rloc.node
    blk = realize.block
    mapping = {iv.var: v for iv, v in zip(blk.iter_vars, realize.iter_values)}

    def regions(declared) -> list:
        """(first, last) index pairs of each declared region of ``buffer``."""
        return [[(substitute(r.min, mapping),
                  substitute(binary("-", binary("+", r.min, r.extent), 1), mapping))
                 for r in region.region] for region in declared if region.buffer is buffer]

    if kind == "writes":
        return regions(blk.writes)
    if collect(blk.body, TensorIntrinCall):
        # NOTE: a tensorized tile's operand load names only the tile's first element; the
        # block's read regions (kept by blockize and tensorize) cover the whole tile.
        return regions(blk.reads)
    out = []
    for part in (blk.init, blk.body):
        if part is None:
            continue
        for ld in collect(part, BufferLoad):
            if ld.buffer is buffer:
                out.append([(substitute(i, mapping),) * 2 for i in ld.indices])
    return out


def _region_under(func: PrimFunc, loop: For, names: list[str], buffer, kind, what: str,
                  shared_by: list[For] = ()):
    """Per-dimension symbolic interval of ``buffer`` touched by blocks ``names`` (all under
    ``loop``) during one iteration of ``loop``; None in a dimension that cannot be bounded.

    ``shared_by``: thread-bound loops at or above ``loop`` whose threads all use the one copy
    of ``buffer`` (see :func:`shares_storage_across`); the region covers every thread of
    them, so that each of them finds what it reads whichever thread wrote it."""
    ndim = len(buffer.shape)
    region: list = [None] * ndim
    bounded = [True] * ndim
    base = loop_ranges(list(shared_by))
    for name in names:
        rloc = tree.find_block(func, name)
        loops = rloc.loops
        idx = next(i for i, lp in enumerate(loops) if lp is loop)
        ranges = None if base is None else loop_ranges(loops[idx + 1:], base)
        for acc in _realize_accesses(rloc, buffer, kind):
            for d, (lo_e, hi_e) in enumerate(acc):
                if ranges is None:
                    bounded[d] = False
                    continue
                lo = relax(lo_e, ranges)
                hi = relax(hi_e, ranges)
                if lo is None or hi is None:
                    bounded[d] = False
                    continue
                region[d] = union(region[d], (lo[0], hi[1]))
    return [r if ok else None for r, ok in zip(region, bounded)]


def _insert_in_loop(func: PrimFunc, loop_var: Var, nest, pos_fn) -> PrimFunc:
    lloc = tree.find_loop(func, loop_var)
    loop = lloc.node
    items = B.seq_children(loop.body)
    pos = pos_fn(items)
    items.insert(pos, nest)
    return tree.replace(func, loop, dc_replace(loop, body=seq(*items)))


def _single_output(func: PrimFunc, blk: Block, what: str):
    check(len(blk.writes) == 1,
          f"{what}: block {blk.name} writes {len(blk.writes)} buffers; exactly one is needed")
    out = blk.writes[0].buffer
    ws = B.writers(func, out)
    check(ws == [blk.name], f"{what}: block {blk.name} is not the only writer of buffer "
                            f"{out.name} (writers: {', '.join(ws)})")
    return out


# ---------------------------------------------------------------------------------------------
# compute_at
# ---------------------------------------------------------------------------------------------

def compute_at(func: PrimFunc, block: str, loop_var: Var) -> PrimFunc:
    """Move producer ``block`` under the loop ``loop_var`` of its consumers, computing exactly the
    region of its output that the consumers under that loop read in one iteration.

    Preconditions (ScheduleError otherwise):
      * the block and the loop are in the same block scope and the loop does not already
        enclose the block;
      * the block is complete (spatial only, no init) or a reduction block, stores through a
        single BufferStore whose indices are distinct spatial iteration variables, and is the
        only writer of its single output, which is not a function parameter;
      * every consumer of the output is under the loop (the loop dominates the consumers);
      * the producers of the block's inputs come before the loop, or under it before the first
        consumer.
    The new loops cover the inferred region clipped to the block's domain; when the clipped
    extent is not constant the loop runs to its upper bound and the realize is guarded.
    For an output in ``shared`` scope the region is that of every thread of the enclosing
    loops bound to ``threadIdx.*`` or ``vthread`` (the loop itself included), as in TVM: the
    threads of a block share the buffer, so the copy computed at the loop must hold what all
    of them read (a cooperative fetch: bind its loops to the threads to split the copying).
    ``local`` and ``global`` outputs keep the region of one thread.

    Before / after (B consumed by C under loop i)::

        for i, j: B[i, j] = A[i, j] * 2            for i:
        for i, j: C[i, j] = B[i, j] + 1      =>       for ax0 in 0..1, ax1 in 0..16:
                                                          B[i + ax0, ax1] = A[i + ax0, ax1] * 2
                                                      for j: C[i, j] = B[i, j] + 1
    """
    what = "compute_at"
    loc, lloc = _locate(func, block, loop_var, what)
    blk: Block = loc.node.block
    loop: For = lloc.node
    check(B.is_complete(blk) or B.is_reduction(blk),
          f"{what}: block {block} is neither a complete block nor a reduction block")
    out = _single_output(func, blk, what)
    check(out not in func.params,
          f"{what}: block {block} writes the function output {out.name}; moving it under a "
          f"loop could leave parts of the output unwritten")
    store_vars = B.spatial_store_vars(blk)
    check(store_vars is not None,
          f"{what}: block {block} does not store to {out.name} at its own spatial iteration "
          f"variables, so its iteration region cannot be inferred")
    consumers = B.readers(func, out)
    under = _block_under(loop)
    check(bool(consumers), f"{what}: block {block} has no consumers")
    outside = [c for c in consumers if c not in under]
    check(not outside, f"{what}: loop {loop_var.name} does not enclose consumer(s) "
                       f"{', '.join(outside)} of block {block}")
    order = _program_order(func)
    first_in_loop = min(order[n] for n in under)
    inputs = [buf for buf in _ordered_reads(blk) if buf is not out]
    producers = {p for buf in inputs for p in B.writers(func, buf)} - {block}
    for p in sorted(producers, key=order.get):
        if p not in under:
            check(order[p] < first_in_loop,
                  f"{what}: producer {p} of block {block} comes after loop {loop_var.name}")

    # 1. The region of the output the consumers read in one iteration of the loop -- of every
    #    thread of it, for a buffer the threads of enclosing thread loops share (a "shared"
    #    tile under threadIdx loops: each thread's consumer reads rows other threads fetch).
    shared_by = [lp for lp in lloc.loops + [loop] if shares_storage_across(out.scope, lp)]
    region = _region_under(func, loop, consumers, out, BufferLoad, what, shared_by)
    outer = const_dom(lloc.loops + [loop])
    ranges = {}
    for d, v in enumerate(store_vars):
        dom = B.iter_dom(blk, v)
        lo, hi = region[d] if region[d] is not None else (dom.min, canon(
            binary("-", binary("+", dom.min, dom.extent), 1)))
        ranges[v] = _clip(lo, hi, dom, outer)

    # 2. Fresh loops over the region, placed before the first consumer inside the loop.
    nest = _rebuild_nest(blk, ranges)
    new = B.remove(func, B.own_subtree(loc))

    def position(items):
        cons = B.child_index(items, set(consumers))
        prods = B.child_index(items, producers)
        pos = cons[0]
        check(not prods or prods[-1] < pos,
              f"{what}: under loop {loop_var.name} a producer of block {block} comes after its "
              f"first consumer")
        return pos

    return _insert_in_loop(new, loop_var, nest, position)


# ---------------------------------------------------------------------------------------------
# reverse_compute_at
# ---------------------------------------------------------------------------------------------

def reverse_compute_at(func: PrimFunc, block: str, loop_var: Var) -> PrimFunc:
    """Move consumer ``block`` under the loop ``loop_var`` of its producers, computing in each
    iteration exactly the part of its iteration space whose inputs were produced in that
    iteration.

    Preconditions (ScheduleError otherwise):
      * the block and the loop are in the same block scope, the loop does not enclose it;
      * the block is complete or a reduction block and the only writer of its outputs;
      * at least one producer of the block is under the loop, each reduction of such a producer
        completes inside one iteration of the loop, and the block reads each buffer produced
        under the loop through one index pattern; every read stays inside the produced region;
      * producers not under the loop come before it, and consumers of the block come after the
        producers under it.

    Before / after (C consumes B; moved under B's loop i)::

        for i, j: B[i, j] = A[i, j] * 2            for i:
        for i, j: C[i, j] = B[i, j] + 1      =>       for j: B[i, j] = A[i, j] * 2
                                                      for ax0 in 0..1, ax1 in 0..16:
                                                          C[i + ax0, ax1] = B[i + ax0, ax1] + 1
    """
    what = "reverse_compute_at"
    loc, lloc = _locate(func, block, loop_var, what)
    blk: Block = loc.node.block
    loop: For = lloc.node
    check(B.is_complete(blk) or B.is_reduction(blk),
          f"{what}: block {block} is neither a complete block nor a reduction block")
    outs = [w.buffer for w in blk.writes]
    for o in outs:
        ws = B.writers(func, o)
        check(ws == [block], f"{what}: block {block} is not the only writer of buffer "
                             f"{o.name} (writers: {', '.join(ws)})")
    under = _block_under(loop)
    order = _program_order(func)
    first_in_loop = min(order[n] for n in under)
    inputs = [buf for buf in _ordered_reads(blk) if buf not in outs]
    produced_under = {}
    producers_under: set[str] = set()
    for buf in inputs:
        ws = [w for w in B.writers(func, buf) if w != block]
        inside = [w for w in ws if w in under]
        for w in ws:
            if w not in under:
                check(order[w] < first_in_loop,
                      f"{what}: producer {w} of block {block} comes after loop {loop_var.name}")
        if inside:
            check(len(inside) == len(ws),
                  f"{what}: buffer {buf.name} is written both inside and outside loop "
                  f"{loop_var.name}")
            produced_under[buf] = inside
            producers_under.update(inside)
    check(bool(produced_under),
          f"{what}: no producer of block {block} is under loop {loop_var.name}")

    # 1. Producers' reductions must be finished within one iteration of the loop.
    for p in producers_under:
        ploc = tree.find_block(func, p)
        pblk = ploc.node.block
        loops = ploc.loops
        idx = next(i for i, lp in enumerate(loops) if lp is loop)
        outer_vars = [lp.loop_var for lp in loops[:idx + 1]]
        for iv, val in zip(pblk.iter_vars, ploc.node.iter_values):
            if iv.kind == REDUCE and any(uses_var(val, v) for v in outer_vars):
                raise ScheduleError(
                    f"{what}: loop {loop_var.name} is inside the reduction of producer {p}; "
                    f"its output is incomplete there")

    # 2. Map the produced regions back to the block's iteration variables.
    outer = const_dom(lloc.loops + [loop])
    narrowed: dict = {}
    produced: dict = {}
    for buf, names in produced_under.items():
        region = _region_under(func, loop, names, buf, "writes", what)
        bad = [d for d, r in enumerate(region) if r is None]
        check(not bad, f"{what}: cannot bound the region of {buf.name} produced under loop "
                       f"{loop_var.name}")
        produced[buf] = region
        patterns = {tuple(ld.indices) for ld in collect(blk.body, BufferLoad)
                    if ld.buffer is buf}
        check(len(patterns) == 1,
              f"{what}: block {block} reads {buf.name} through {len(patterns)} different index "
              f"patterns; one is needed to map the produced region onto its iteration space")
        (pattern,) = patterns
        for d, e in enumerate(pattern):
            vc = as_var_plus_const(e)
            if vc is None:
                continue
            v, c = vc
            kinds = {iv.var: iv.kind for iv in blk.iter_vars}
            if kinds.get(v) != SPATIAL:
                continue
            lo, hi = region[d]
            lo, hi = canon(binary("-", lo, c)), canon(binary("-", hi, c))
            prev = narrowed.get(v)
            narrowed[v] = (lo, hi) if prev is None else (canon(binary("max", prev[0], lo)),
                                                         canon(binary("min", prev[1], hi)))
    ranges = {v: _clip(lo, hi, B.iter_dom(blk, v), outer) for v, (lo, hi) in narrowed.items()}

    # 3. Every read of a produced buffer must lie inside the produced region.
    relax_map = {}
    for iv in blk.iter_vars:
        if iv.var in ranges:
            start, extent, end = ranges[iv.var]
            relax_map[iv.var] = (start, canon(binary("+", start, extent - 1))
                                 if end is None else end)
        else:
            relax_map[iv.var] = (iv.dom.min, canon(binary("-", binary("+", iv.dom.min,
                                                                     iv.dom.extent), 1)))
    for buf, region in produced.items():
        for ld in collect(blk.body, BufferLoad):
            if ld.buffer is not buf:
                continue
            for d, e in enumerate(ld.indices):
                vc = as_var_plus_const(e)
                if vc is not None and vc[0] in narrowed:
                    continue  # inside by construction
                bounds = relax(e, relax_map)
                ok = bounds is not None and arith.prove(
                    compare("<=", region[d][0], bounds[0])
                    & compare("<=", bounds[1], region[d][1]), outer)
                check(ok, f"{what}: block {block} reads {buf.name} outside the region produced "
                          f"in one iteration of loop {loop_var.name} (dimension {d})")

    # 4. Fresh loops placed after the last producer inside the loop.
    nest = _rebuild_nest(blk, ranges)
    consumers = {c for o in outs for c in B.readers(func, o)}
    new = B.remove(func, B.own_subtree(loc))

    def position(items):
        prods = B.child_index(items, producers_under)
        cons = B.child_index(items, consumers)
        pos = prods[-1] + 1
        check(not cons or cons[0] >= pos,
              f"{what}: under loop {loop_var.name} a consumer of block {block} comes before "
              f"its last producer")
        return pos

    return _insert_in_loop(new, loop_var, nest, position)


# ---------------------------------------------------------------------------------------------
# compute_inline / reverse_compute_inline
# ---------------------------------------------------------------------------------------------

def _injective_store(blk: Block, what: str, role: str):
    st = B.store_of(blk)
    check(B.is_complete(blk) and st is not None,
          f"{what}: {role} block {blk.name} is not a complete block with a single store "
          f"(reductions and multi-statement bodies cannot be inlined)")
    vars_ = B.spatial_store_vars(blk)
    check(vars_ is not None and len(vars_) == len(blk.iter_vars),
          f"{what}: {role} block {blk.name} does not store at exactly its iteration variables")
    return st, vars_


def _refresh(func: PrimFunc, names) -> PrimFunc:
    for name in names:
        loc = tree.find_block(func, name)
        blk = loc.node.block
        func = tree.replace(func, blk, recompute_regions(blk))
    return func


def compute_inline(func: PrimFunc, block: str) -> PrimFunc:
    """Inline an injective producer into every consumer and remove it with its buffer.

    Preconditions (ScheduleError otherwise): the block is complete with a single BufferStore
    whose indices are exactly its iteration variables; it is the only writer of its output,
    which is an intermediate buffer (not a function parameter); every writer of its inputs
    comes before it.

    Before / after::

        for i, j: B[i, j] = A[i, j] * 2
        for i, j: C[i, j] = B[i, j] + 1      =>    for i, j: C[i, j] = A[i, j] * 2 + 1
    """
    what = "compute_inline"
    loc = tree.find_block(func, block)
    blk = loc.node.block
    st, vars_ = _injective_store(blk, what, "producer")
    out = _single_output(func, blk, what)
    check(out not in func.params,
          f"{what}: block {block} writes the function parameter {out.name}, which must stay")
    order = _program_order(func)
    for buf in _ordered_reads(blk):
        for w in B.writers(func, buf):
            check(order[w] < order[block],
                  f"{what}: input {buf.name} of block {block} is written later by block {w}")
    consumers = B.readers(func, out)
    new = B.remove(func, B.own_subtree(loc))

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is out:
            return substitute(st.value, dict(zip(vars_, n.indices)))
        return None

    new = new.with_body(transform(new.body, fn))
    new = B.drop_alloc(new, out)
    return _refresh(new, consumers)


def reverse_compute_inline(func: PrimFunc, block: str) -> PrimFunc:
    """Inline an injective consumer into its single producer, which then writes the consumer's
    output directly; the intermediate buffer disappears.

    Preconditions (ScheduleError otherwise): the consumer is complete with a single store and
    reads exactly one buffer written by another block, through one index pattern that is a
    permutation of its iteration variables; that buffer is an intermediate read by this block
    only and written by one producer that is itself complete with a single store at its
    iteration variables (a reduction cannot take a consumer: its partial values would be
    transformed); the matched iteration domains agree; the consumer's other inputs are
    written before the producer.

    Before / after::

        for i, j: B[i, j] = A[i, j] * 2
        for i, j: C[i, j] = max(B[i, j], 0)    =>    for i, j: C[i, j] = max(A[i, j] * 2, 0)
    """
    what = "reverse_compute_inline"
    loc = tree.find_block(func, block)
    blk = loc.node.block
    st, c_vars = _injective_store(blk, what, "consumer")
    y = _single_output(func, blk, what)
    reads = [buf for buf in _ordered_reads(blk) if buf is not y]
    produced = [buf for buf in reads if B.writers(func, buf)]
    check(len(produced) == 1,
          f"{what}: block {block} reads {len(produced)} buffers written by other blocks; "
          f"exactly one producer is needed")
    (x,) = produced
    check(x not in func.params, f"{what}: the buffer {x.name} block {block} reads is a "
                                f"function parameter")
    check(B.readers(func, x) == [block],
          f"{what}: buffer {x.name} has other consumers than block {block}")
    pws = B.writers(func, x)
    check(len(pws) == 1, f"{what}: buffer {x.name} has several writers: {', '.join(pws)}")
    ploc = tree.find_block(func, pws[0])
    pblk = ploc.node.block
    pst, p_vars = _injective_store(pblk, what, "producer")
    patterns = {tuple(ld.indices) for ld in collect(blk.body, BufferLoad) if ld.buffer is x}
    check(len(patterns) == 1,
          f"{what}: block {block} reads {x.name} through {len(patterns)} index patterns")
    (pattern,) = patterns
    check(all(isinstance(e, Var) for e in pattern) and set(pattern) == set(c_vars)
          and len(set(pattern)) == len(pattern),
          f"{what}: block {block} reads {x.name} at indices that are not a permutation of its "
          f"iteration variables")
    for d, (cv, pv) in enumerate(zip(pattern, p_vars)):
        cd, pd = B.iter_dom(blk, cv), B.iter_dom(pblk, pv)
        check(cd == pd, f"{what}: dimension {d} of {x.name}: the domains of block {block} and "
                        f"producer {pblk.name} differ")
    order = _program_order(func)
    for buf in reads:
        if buf is x:
            continue
        for w in B.writers(func, buf):
            check(order[w] < order[pblk.name],
                  f"{what}: input {buf.name} of block {block} is written after producer "
                  f"{pblk.name} by block {w}")

    # The consumer's expression in the producer's variables, with the load replaced by the
    # producer's value.
    mapping = dict(zip(pattern, p_vars))

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is x:
            return pst.value
        return None

    value = transform(substitute(st.value, mapping), fn)
    indices = tuple(substitute(i, mapping) for i in st.indices)
    new_p = recompute_regions(dc_replace(pblk, body=BufferStore(y, value, indices)))
    new = tree.replace(func, pblk, new_p)
    new = B.remove(new, B.own_subtree(tree.find_block(new, block)))
    return B.drop_alloc(new, x)
