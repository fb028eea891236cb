"""Block-level queries and rewrites shared by the block primitives (compute_at, cache, layout,
reduction): block kinds, writers and readers of a buffer, scopes and insertion points, fresh
loop nests and buffer replacement."""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir import dtype as dt
from tensor_ir.buffer import Buffer
from tensor_ir.expr import BufferLoad, IntImm, Var, binary
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import (
    REDUCE, SERIAL, SPATIAL, TRUE, Block, BlockRealize, BufferStore, For, IterVar, Range,
    SeqStmt, Stmt,
)
from tensor_ir.visitor import collect, transform, walk

from .. import tree
from ..errors import ScheduleError

# ---------------------------------------------------------------------------------------------
# Block kinds
# ---------------------------------------------------------------------------------------------


def store_of(block: Block) -> BufferStore | None:
    """The block's body when it is a single BufferStore."""
    return block.body if isinstance(block.body, BufferStore) else None


def is_complete(block: Block) -> bool:
    """Every iteration variable is spatial, there is no init, and the block does not read what
    it writes."""
    if block.init is not None or any(iv.kind != SPATIAL for iv in block.iter_vars):
        return False
    written = {w.buffer for w in block.writes}
    loads = {ld.buffer for ld in collect(block.body, BufferLoad)}
    return not (written & (loads | {r.buffer for r in block.reads}))


def is_reduction(block: Block) -> bool:
    """A block with an init whose body is one store that reads its own output only at the
    stored element, with no reduce variable in the stored indices."""
    st = store_of(block)
    if block.init is None or st is None:
        return False
    reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == REDUCE}
    if any(isinstance(i, Var) and i in reduce_vars for i in st.indices):
        return False
    for idx in st.indices:
        if any(v in reduce_vars for v in collect(idx, Var)):
            return False
    for ld in collect(block.body, BufferLoad):
        if ld.buffer is st.buffer and ld.indices != st.indices:
            return False
    return True


def spatial_store_vars(block: Block) -> list[Var] | None:
    """The stored indices when each is a distinct spatial iteration variable, else None."""
    st = store_of(block)
    if st is None:
        return None
    spatial = {iv.var for iv in block.iter_vars if iv.kind == SPATIAL}
    out = []
    for i in st.indices:
        if not (isinstance(i, Var) and i in spatial) or i in out:
            return None
        out.append(i)
    return out


def iter_dom(block: Block, var: Var) -> Range:
    for iv in block.iter_vars:
        if iv.var is var:
            return iv.dom
    raise ScheduleError(f"internal: {var.name} is not an iteration variable of {block.name}")


# ---------------------------------------------------------------------------------------------
# Program structure
# ---------------------------------------------------------------------------------------------


def block_names(func: PrimFunc) -> list[str]:
    return [loc.node.block.name for loc in tree.all_blocks(func)]


def unique_name(existing, base: str) -> str:
    existing = set(existing)
    name, k = base, 1
    while name in existing:
        name = f"{base}_{k}"
        k += 1
    return name


def all_buffers(func: PrimFunc) -> list:
    out = list(func.params)
    for blk in collect(func.body, Block):
        out.extend(blk.alloc_buffers)
    return out


def writers(func: PrimFunc, buffer) -> list[str]:
    return [loc.node.block.name for loc in tree.all_blocks(func)
            if any(w.buffer is buffer for w in loc.node.block.writes)]


def readers(func: PrimFunc, buffer) -> list[str]:
    """Blocks that read ``buffer`` and are not its writers (in program order)."""
    out = []
    for loc in tree.all_blocks(func):
        blk = loc.node.block
        if any(w.buffer is buffer for w in blk.writes):
            continue
        if buffer in tree.block_reads(blk):
            out.append(blk.name)
    return out


def scope_block(loc: tree.Located) -> Block:
    parent = loc.parent_block
    if parent is None:
        raise ScheduleError("internal: block without a scope")
    return parent


def own_subtree(loc: tree.Located) -> Stmt:
    """The highest ancestor (up to the scope block) whose subtree holds this block only: the
    statement to remove when the block moves or disappears."""
    node: Stmt = loc.node
    for anc in reversed(loc.path):
        if isinstance(anc, (Block, BlockRealize)):
            break
        if isinstance(anc, For):
            node = anc
            continue
        break  # a SeqStmt or IfThenElse holds other statements too
    return node


def blocks_in(node) -> list[Block]:
    out = []

    def fn(n):
        if isinstance(n, Block):
            out.append(n)
            return False
        return None

    walk(node, fn)
    return out


def seq_children(stmt: Stmt) -> list:
    return list(stmt.stmts) if isinstance(stmt, SeqStmt) else [stmt]


def child_index(items: list, names: set) -> list[int]:
    """Indices of the statements in ``items`` that contain a block named in ``names``."""
    return [i for i, s in enumerate(items)
            if any(b.name in names for b in blocks_in(s))]


def remove(func: PrimFunc, node) -> PrimFunc:
    """Remove ``node`` from the statement sequence that holds it (a sequence left with one
    statement collapses to that statement)."""
    new = tree.replace(func, node, None)

    def fn(n):
        if isinstance(n, SeqStmt) and len(n.stmts) == 1:
            return n.stmts[0]
        return None

    return new.with_body(transform(new.body, fn))


def allocator(func: PrimFunc, buffer) -> Block | None:
    for blk in collect(func.body, Block):
        if any(b is buffer for b in blk.alloc_buffers):
            return blk
    return None


def drop_alloc(func: PrimFunc, buffer) -> PrimFunc:
    owner = allocator(func, buffer)
    if owner is None:
        return func
    return tree.replace(func, owner, dc_replace(
        owner, alloc_buffers=tuple(b for b in owner.alloc_buffers if b is not buffer)))


def replace_buffer(node, old: Buffer, new: Buffer):
    """Replace buffer ``old`` by ``new`` everywhere in ``node`` (loads, stores, regions,
    allocations)."""
    return transform(node, lambda n: new if n is old else None)


def fresh_nest(name: str, iter_vars: list, body: Stmt, reads: tuple, writes: tuple,
               extents: list, starts: list, guards: list, init: Stmt | None = None,
               annotations: tuple = ()) -> tuple[Stmt, list[Var]]:
    """A loop nest ``for ax_d in range(extents[d])`` around a realize binding iteration
    variable ``d`` to ``starts[d] + ax_d``, guarded by the conjunction of ``guards`` (each a
    function of the binding expressions)."""
    loop_vars = [Var(f"ax{d}", dt.INDEX_DTYPE) for d in range(len(iter_vars))]
    values = tuple(lv if _is_zero(s) else binary("+", s, lv) for s, lv in zip(starts, loop_vars))
    pred = TRUE
    for g in guards:
        cond = g(values)
        if cond is not None:
            pred = cond if pred is TRUE else (pred & cond)
    block = Block(name, tuple(iter_vars), reads, writes, body, init, (), annotations)
    stmt: Stmt = BlockRealize(values, pred, block)
    for lv, ext in reversed(list(zip(loop_vars, extents))):
        stmt = For(lv, IntImm(0), ext if not isinstance(ext, int) else IntImm(ext), SERIAL, stmt)
    return stmt, loop_vars


def _is_zero(e) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def spatial_iter(name: str, extent) -> IterVar:
    ext = extent if not isinstance(extent, int) else IntImm(extent)
    return IterVar(Var(name, dt.INDEX_DTYPE), Range(IntImm(0), ext), SPATIAL)

