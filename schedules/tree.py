"""Navigation of scheduled PrimFuncs: find blocks and loops, their ancestors, and replace
subtrees by identity.  Shared by every primitive."""
from __future__ import annotations

from dataclasses import dataclass

from tensor_ir.expr import BufferLoad, Var
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BlockRealize, For, SeqStmt, Stmt
from tensor_ir.visitor import children, collect, transform

from .errors import ScheduleError


@dataclass
class Located:
    """A node and its ancestors (outermost first, starting at func.body)."""

    node: object
    path: list

    @property
    def loops(self) -> list[For]:
        """Enclosing loops, outer to inner, below the nearest enclosing block."""
        out = []
        for n in reversed(self.path):
            if isinstance(n, Block):
                break
            if isinstance(n, For):
                out.append(n)
        out.reverse()
        return out

    @property
    def parent_block(self) -> Block | None:
        for n in reversed(self.path):
            if isinstance(n, Block):
                return n
        return None


def _find(func: PrimFunc, pred) -> list[Located]:
    found = []
    path: list = []

    def visit(n):
        if pred(n):
            found.append(Located(n, list(path)))
        path.append(n)
        for c in children(n):
            if isinstance(c, Stmt):
                visit(c)
        path.pop()

    visit(func.body)
    return found


def find_block(func: PrimFunc, name: str) -> Located:
    """The BlockRealize of the block called ``name`` (located, with its ancestors)."""
    found = _find(func, lambda n: isinstance(n, BlockRealize) and n.block.name == name)
    if not found:
        raise ScheduleError(f"no block named {name!r} in {func.name}")
    if len(found) > 1:
        raise ScheduleError(f"block name {name!r} is not unique in {func.name}")
    return found[0]


def find_loop(func: PrimFunc, loop_var: Var) -> Located:
    """The For whose loop variable is ``loop_var``."""
    found = _find(func, lambda n: isinstance(n, For) and n.loop_var is loop_var)
    if not found:
        raise ScheduleError(f"loop {loop_var.name} is not in {func.name} (stale handle?)")
    return found[0]


def all_blocks(func: PrimFunc) -> list[Located]:
    """Every BlockRealize except the root's, in program order."""
    return _find(func, lambda n: isinstance(n, BlockRealize) and n.block.name != "root"
                 and n is not func.body)


def child_blocks(func: PrimFunc, parent: str | None = None) -> list[str]:
    """Names of the blocks directly under block ``parent`` (the root when None)."""
    out = []
    for loc in all_blocks(func):
        pb = loc.parent_block
        pname = pb.name if pb is not None else None
        if (parent is None and pname in (None, "root")) or pname == parent:
            out.append(loc.node.block.name)
    return out


def replace(func: PrimFunc, old, new) -> PrimFunc:
    """Replace the node ``old`` (by identity) with ``new`` (a node, or None to delete it from a
    sequence)."""
    hit = False

    def fn(n):
        nonlocal hit
        if n is old:
            hit = True
            return new if new is not None else SeqStmt(())
        if isinstance(n, SeqStmt) and any(isinstance(s, SeqStmt) and not s.stmts
                                          for s in n.stmts):
            return SeqStmt(tuple(s for s in n.stmts
                                 if not (isinstance(s, SeqStmt) and not s.stmts)))
        return None

    body = transform(func.body, fn)
    if not hit:
        raise ScheduleError("internal: node to replace not found")
    return func.with_body(body)


def block_reads(block: Block) -> set:
    bufs = {r.buffer for r in block.reads}
    for ld in collect(block.body, BufferLoad):
        bufs.add(ld.buffer)
    return bufs


def block_writes(block: Block) -> set:
    return {w.buffer for w in block.writes}


def producers(func: PrimFunc, name: str) -> list[str]:
    """Blocks (in program order) that write a buffer block ``name`` reads."""
    target = find_block(func, name).node.block
    reads = block_reads(target) - block_writes(target)
    return [loc.node.block.name for loc in all_blocks(func)
            if loc.node.block is not target and block_writes(loc.node.block) & reads]


def consumers(func: PrimFunc, name: str) -> list[str]:
    """Blocks (in program order) that read a buffer block ``name`` writes."""
    target = find_block(func, name).node.block
    writes = block_writes(target)
    return [loc.node.block.name for loc in all_blocks(func)
            if loc.node.block is not target
            and (block_reads(loc.node.block) - block_writes(loc.node.block)) & writes]
