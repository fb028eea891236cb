"""Lowering: a (scheduled) PrimFunc with blocks -> a lowered PrimFunc of plain loops.

The lowered form holds only For, SeqStmt, IfThenElse, BufferStore, LetStmt, Allocate and
Evaluate statements; it is what the interpreter and the code generators consume.

0. Buffers blocks allocate are compacted (:mod:`tensor_ir.compact`): each moves to the lowest
   loop enclosing all its accesses -- so under a parallel loop every thread gets its own --
   and shrinks to the region one iteration of that loop touches.
1. Each BlockRealize is replaced by its block's body with the block iteration variables
   substituted by their bound values, guarded by the realize predicate.
2. A reduction block's init runs when every reduce iteration value is at its domain's start.
3. Buffers a block allocates become Allocate statements around the block's body.
4. The result is simplified.
"""
from __future__ import annotations

from .compact import compact_buffer_allocation
from .expr import IntImm, equal, logic_and
from .func import PrimFunc
from .stmt import (
    REDUCE, Allocate, Block, BlockRealize, IfThenElse, seq,
)
from .simplify import simplify
from .visitor import substitute, transform


def _lower_realize(n: BlockRealize):
    block: Block = n.block
    mapping = {iv.var: val for iv, val in zip(block.iter_vars, n.iter_values)}
    body = substitute(block.body, mapping)
    if block.init is not None:
        cond = IntImm(1, "bool")
        for iv, val in zip(block.iter_vars, n.iter_values):
            if iv.kind == REDUCE:
                cond = logic_and(cond, equal(val, iv.dom.min))
        init = substitute(block.init, mapping)
        body = seq(init if isinstance(cond, IntImm) and cond.value else IfThenElse(cond, init),
                   body)
    if not (isinstance(n.predicate, IntImm) and n.predicate.value):
        body = IfThenElse(n.predicate, body)
    for buf in reversed(block.alloc_buffers):
        body = Allocate(buf, body)
    return body


def lower(func: PrimFunc) -> PrimFunc:
    """Lower ``func``; a function that is already lowered is returned simplified."""
    if func.attr("lowered"):
        return func

    def fn(n):
        if isinstance(n, BlockRealize):
            return _lower_realize(n)
        return None

    func = compact_buffer_allocation(func)
    body = transform(func.body, fn)
    body = simplify(body)
    return PrimFunc(func.params, body, func.name, func.attrs + (("lowered", True),))
