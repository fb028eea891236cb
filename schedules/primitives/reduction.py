"""Reduction primitives: rfactor (split a reduction into partial results and a final
reduction) and decompose_reduction (move a reduction's init into a block of its own)."""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir import dtype as dt
from tensor_ir.buffer import Buffer
from tensor_ir.expr import (
    And, BinOp, BufferLoad, IntImm, PrimExpr, Var, binary, logic_and, select,
)
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import (
    REDUCE, SPATIAL, TRUE, Block, BlockRealize, BufferStore, For, IterVar,
    Range, SeqStmt, seq,
)
from tensor_ir.thread_reduce import identity as reducer_identity
from tensor_ir.visitor import collect, substitute, transform, uses_var

from .. import tree
from ..errors import check
from . import blocks as B
from .regions import recompute_regions

__all__ = ["rfactor", "decompose_reduction"]

_COMBINERS = ("+", "*", "min", "max")


def _reduction_block(func: PrimFunc, block: str, what: str):
    loc = tree.find_block(func, block)
    blk = loc.node.block
    check(B.is_reduction(blk),
          f"{what}: block {block} is not a reduction block (an init and a single update store "
          f"that reads its output only at the stored element)")
    return loc, blk


def _combiner(blk: Block, what: str) -> str:
    """The combining operator of the update ``C[idx] = C[idx] op src`` (possibly under a
    Select for a ``where=`` condition)."""
    st: BufferStore = blk.body
    self_load = BufferLoad(st.buffer, st.indices)
    ops = {n.op for n in collect(st.value, BinOp)
           if n.op in _COMBINERS and (n.a == self_load or n.b == self_load)}
    check(len(ops) == 1, f"{what}: cannot recognise the combiner of reduction block "
                         f"{blk.name} (expected C = C op value with op one of + * min max)")
    return ops.pop()


def rfactor(func: PrimFunc, loop_var: Var, factor_axis: int) -> tuple[PrimFunc, str]:
    """Factor the reduction loop ``loop_var`` out of its reduction block: a new block
    ``<block>_rf`` computes partial results for each value of the loop into a new buffer
    ``<output>_rf`` (the loop's extent inserted as dimension ``factor_axis`` of the output
    shape), and the original block, in a new loop nest right after, reduces the partials.
    Returns the new function and the rf block's name.

    Preconditions: the loop encloses exactly one block, a reduction with a recognisable
    combiner (+ * min max); the loop variable appears only in the bindings of its reduce
    iteration variables, and no loop that binds a reduce variable also binds a spatial one;
    ``-(ndim + 1) <= factor_axis <= ndim``; no consumer of the output shares the block's
    top-level loop nest.

    Every partial result starts at the combiner's identity (0, 1, +inf, -inf), also those no
    iteration contributes to: when the reduction's extent is not a multiple of the split
    factor (or smaller than it) the conjuncts of the block's predicate that constrain reduce
    loops move into the update as a select, so that the rf block's init runs for every
    partial the final reduction reads.  Conjuncts over other loops (spatial guards) stay on
    the realize.

    Before / after (rfactor(ki, 0) with k = ko * 4 + ki)::

        for i, ko, ki: C[i] += A[i, ko * 4 + ki]
          =>  for i, ko, ki: C_rf[ki, i] += A[i, ko * 4 + ki]      (block C_rf)
              for ax0, ax1: C[v0] += C_rf[v1, v0]                  (block C)

    and with k = ko * 4 + ki < 10 (a split of 10 by 4)::

        for i, ko, ki: C_rf[ki, i] = select(ko * 4 + ki < 10, C_rf[ki, i] + A[..], C_rf[ki, i])
    """
    what = "rfactor"
    lloc = tree.find_loop(func, loop_var)
    loop: For = lloc.node
    inner = B.blocks_in(loop.body)
    check(len(inner) == 1, f"{what}: loop {loop_var.name} encloses {len(inner)} blocks; "
                           f"exactly one reduction block is needed")
    block = inner[0].name
    loc, blk = _reduction_block(func, block, what)
    realize: BlockRealize = loc.node
    st: BufferStore = blk.body
    op = _combiner(blk, what)
    out = st.buffer
    ndim = out.ndim
    check(-(ndim + 1) <= factor_axis <= ndim,
          f"{what}: factor_axis {factor_axis} is out of range for {out.name} of rank {ndim}")
    if factor_axis < 0:
        factor_axis += ndim + 1

    # 1. Which loops bind reduce variables; the factored loop must be one of them only.
    bindings = list(zip(blk.iter_vars, realize.iter_values))
    loops = loc.loops
    check(any(lp is loop for lp in loops), f"{what}: internal: loop not above block")
    spatial_vals = [v for iv, v in bindings if iv.kind == SPATIAL]
    reduce_vals = [v for iv, v in bindings if iv.kind == REDUCE]
    check(any(uses_var(v, loop_var) for v in reduce_vals),
          f"{what}: loop {loop_var.name} does not bind a reduce variable of block {block}")
    reduce_loops = [lp for lp in loops if any(uses_var(v, lp.loop_var) for v in reduce_vals)]
    for lp in reduce_loops:
        check(not any(uses_var(v, lp.loop_var) for v in spatial_vals),
              f"{what}: loop {lp.loop_var.name} binds both spatial and reduce variables of "
              f"block {block}")
    check(isinstance(loop.extent, IntImm),
          f"{what}: loop {loop_var.name} needs a constant extent")

    # 2. The rf block: the factored loop becomes a spatial iteration variable, the other reduce
    #    loops become reduce iteration variables; old reduce variables are rewritten in them.
    rf_var = Var(f"v{loop_var.name}", dt.INDEX_DTYPE)
    new_iters, new_values, loop_to_iter = [], [], {}
    for iv, v in bindings:
        if iv.kind == SPATIAL:
            new_iters.append(iv)
            new_values.append(v)
    for lp in reduce_loops:
        var = rf_var if lp is loop else Var(f"v{lp.loop_var.name}", dt.INDEX_DTYPE)
        kind = SPATIAL if lp is loop else REDUCE
        new_iters.append(IterVar(var, Range(lp.min, lp.extent), kind))
        new_values.append(lp.loop_var)
        loop_to_iter[lp.loop_var] = var
    old_reduce = {iv.var: substitute(v, loop_to_iter) for iv, v in bindings
                  if iv.kind == REDUCE}
    rf_dom_start = loop.min
    rf_index = rf_var if isinstance(rf_dom_start, IntImm) and rf_dom_start.value == 0 else \
        binary("-", rf_var, rf_dom_start)
    shape = list(out.shape)
    shape.insert(factor_axis, loop.extent)
    rf_buf = Buffer(B.unique_name([b.name for b in B.all_buffers(func)], f"{out.name}_rf"),
                    tuple(shape), out.dtype, "global")

    def rf_indices(indices):
        idx = list(indices)
        idx.insert(factor_axis, rf_index)
        return tuple(idx)

    def to_rf(n):
        if isinstance(n, BufferLoad) and n.buffer is out:
            return BufferLoad(rf_buf, rf_indices(n.indices))
        if isinstance(n, BufferStore) and n.buffer is out:
            return BufferStore(rf_buf, n.value, rf_indices(n.indices))
        return None

    init_value = reducer_identity(op, out.dtype)

    def to_rf_init(n):
        # NOTE: partials start at the identity, not at the block's init value: the final
        # reduction starts from that init and combines every partial, so a non-identity init
        # (te.sum(..., init=5)) must be counted once, not once per partial.
        if isinstance(n, BufferStore) and n.buffer is out:
            return BufferStore(rf_buf, init_value, rf_indices(n.indices))
        return None

    rf_body = transform(substitute(st, old_reduce), to_rf)
    rf_init = transform(blk.init, to_rf_init)

    # A predicate conjunct over reduce loops only (the guard of a non-divisible split of the
    # reduction) may be false at the reduce-min point where the init runs -- for some partials
    # at every point.  Evaluated inside the update instead, it no longer skips the init.
    kept_pred, guard = TRUE, None
    for c in _conjuncts(realize.predicate):
        used = collect(c, Var)
        if used and all(v in loop_to_iter for v in used):
            c = substitute(c, loop_to_iter)
            guard = c if guard is None else logic_and(guard, c)
        else:
            kept_pred = c if kept_pred is TRUE else logic_and(kept_pred, c)
    if guard is not None:
        current_rf = BufferLoad(rf_buf, rf_body.indices)
        rf_body = BufferStore(rf_buf, select(guard, rf_body.value, current_rf), rf_body.indices)
    rf_name = B.unique_name(B.block_names(func), f"{block}_rf")
    rf_blk = recompute_regions(Block(rf_name, tuple(new_iters), (), (), rf_body, rf_init, (),
                                     blk.annotations))
    rf_realize = BlockRealize(tuple(new_values), kept_pred, rf_blk)

    # 3. The final reduction over the partial results, in a fresh nest after the rf nest.
    spatial, rename = _fresh_iters([iv for iv in blk.iter_vars if iv.kind == SPATIAL])
    w = IterVar(Var(f"v{loop_var.name}", dt.INDEX_DTYPE), Range(loop.min, loop.extent), REDUCE)
    w_index = w.var if isinstance(loop.min, IntImm) and loop.min.value == 0 else \
        binary("-", w.var, loop.min)
    out_idx = tuple(substitute(i, rename) for i in st.indices)
    partial_idx = list(out_idx)
    partial_idx.insert(factor_axis, w_index)
    current = BufferLoad(out, out_idx)
    combined = binary(op, current, BufferLoad(rf_buf, tuple(partial_idx)))
    final = recompute_regions(Block(block, tuple(spatial) + (w,), (), (),
                                    BufferStore(out, combined, out_idx),
                                    substitute(blk.init, rename), (), blk.annotations))
    iters = list(final.iter_vars)
    nest, _ = B.fresh_nest(block, iters, final.body, final.reads, final.writes,
                           [iv.dom.extent for iv in iters], [iv.dom.min for iv in iters], [],
                           init=final.init, annotations=final.annotations)

    # 4. Splice: rf realize in place of the block, final nest after the top-level nest.
    scope_blk = B.scope_block(loc)
    items = B.seq_children(scope_blk.body)
    pos = B.child_index(items, {block})[0]
    readers = set(B.readers(func, out))
    check(pos not in B.child_index(items, readers),
          f"{what}: output {out.name} of block {block} is read in the same loop nest")
    items = [transform(s, lambda n: rf_realize if n is realize else None) for s in items]
    items.insert(pos + 1, nest)
    new_scope = dc_replace(scope_blk, body=seq(*items),
                           alloc_buffers=scope_blk.alloc_buffers + (rf_buf,))
    return tree.replace(func, scope_blk, new_scope), rf_name


def decompose_reduction(func: PrimFunc, block: str, loop_var: Var) -> tuple[PrimFunc, str]:
    """Move the init of reduction ``block`` into a new block ``<block>_init`` placed right
    before the loop ``loop_var``, in copies of the loops under it that bind spatial variables
    only.  The reduction block keeps its name and loses its init.  Returns the new function
    and the init block's name.

    Preconditions: the block is a reduction block with an init; the loop encloses it in the
    same scope; every loop that binds a reduce variable is the given loop or under it; no loop
    under it binds both spatial and reduce variables.

    Before / after (decompose_reduction(C, i))::

        for i, j, k:                        for i', j': C[i', j'] = 0          (block C_init)
          C[i, j] = 0 if k == 0       =>    for i, j, k: C[i, j] += A[i, k] * B[k, j]
          C[i, j] += A[i, k] * B[k, j]
    """
    what = "decompose_reduction"
    loc, blk = _reduction_block(func, block, what)
    lloc = tree.find_loop(func, loop_var)
    loop: For = lloc.node
    loops = loc.loops
    pos = next((i for i, lp in enumerate(loops) if lp is loop), None)
    check(pos is not None, f"{what}: loop {loop_var.name} does not enclose block {block}")
    realize: BlockRealize = loc.node
    bindings = list(zip(blk.iter_vars, realize.iter_values))
    spatial_vals = [v for iv, v in bindings if iv.kind == SPATIAL]
    reduce_vals = [v for iv, v in bindings if iv.kind == REDUCE]
    for lp in loops[:pos]:
        check(not any(uses_var(v, lp.loop_var) for v in reduce_vals),
              f"{what}: loop {lp.loop_var.name} above {loop_var.name} binds a reduce variable "
              f"of block {block}; the init would run inside the reduction")
    # A block nested in another (blockize) may take part of its reduction from the outer
    # block's iteration variables: the init cannot be hoisted out of that reduction here.
    own_loops = {lp.loop_var for lp in loops}
    for v in reduce_vals:
        outside = [u for u in collect(v, Var) if u not in own_loops]
        check(not outside,
              f"{what}: a reduce variable of block {block} is bound to {v}, which depends on "
              f"{outside[0].name if outside else ''} from outside its loop nest (an enclosing "
              f"block); decompose the reduction before blockize")

    # 1. Copies of the loops from the given one inward that bind spatial variables only.
    kept, fresh = [], {}
    for lp in loops[pos:]:
        in_spatial = any(uses_var(v, lp.loop_var) for v in spatial_vals)
        in_reduce = any(uses_var(v, lp.loop_var) for v in reduce_vals)
        check(not (in_spatial and in_reduce),
              f"{what}: loop {lp.loop_var.name} binds both spatial and reduce variables of "
              f"block {block}")
        if in_spatial:
            nv = Var(lp.loop_var.name + "_init", lp.loop_var.dtype)
            fresh[lp.loop_var] = nv
            kept.append(lp)
    dropped = {lp.loop_var for lp in loops[pos:] if lp.loop_var not in fresh}

    # 2. The init block over the spatial iteration variables, guarded by the conjuncts of the
    #    predicate that do not mention dropped loops.
    spatial = [(iv, v) for iv, v in bindings if iv.kind == SPATIAL]
    values = tuple(substitute(v, fresh) for _, v in spatial)
    pred = TRUE
    for c in _conjuncts(realize.predicate):
        if not any(uses_var(c, d) for d in dropped):
            c = substitute(c, fresh)
            pred = c if pred is TRUE else (pred & c)
    init_name = B.unique_name(B.block_names(func), f"{block}_init")
    init_iters, rename = _fresh_iters([iv for iv, _ in spatial])
    init_blk = recompute_regions(Block(init_name, tuple(init_iters), (), (),
                                       substitute(blk.init, rename), None, (), ()))
    stmt = BlockRealize(values, pred, init_blk)
    for lp in reversed(kept):
        stmt = For(fresh[lp.loop_var], substitute(lp.min, fresh), substitute(lp.extent, fresh),
                   lp.kind, stmt, lp.thread_binding, lp.annotations)

    # 3. The reduction block without its init; the init nest goes right before the loop.
    new = tree.replace(func, blk, dc_replace(blk, init=None))
    lloc = tree.find_loop(new, loop_var)
    loop = lloc.node
    parent = lloc.path[-1]
    if isinstance(parent, SeqStmt):
        items = list(parent.stmts)
        idx = next(i for i, s in enumerate(items) if s is loop)
        items.insert(idx, stmt)
        new = tree.replace(new, parent, seq(*items))
    else:
        new = tree.replace(new, loop, seq(stmt, loop))
    return new, init_name


def _fresh_iters(iters: list) -> tuple[list, dict]:
    """Copies of iteration variables with fresh Vars (a block owns its variables)."""
    rename = {iv.var: Var(iv.var.name, iv.var.dtype) for iv in iters}
    return [dc_replace(iv, var=rename[iv.var]) for iv in iters], rename


def _conjuncts(pred: PrimExpr) -> list:
    if isinstance(pred, And):
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    if isinstance(pred, IntImm) and pred.value:
        return []
    return [pred]

