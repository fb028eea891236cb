"""Operand packing: which input of a tiled block to copy into panels, and the panel layout.

A register tile vectorises the block's innermost spatial loop ``v`` (the columns ``j`` of a
matmul).  An input indexed by ``v`` in one dimension and by a reduction variable in another
(``B[k, j]``) is then read, at each reduction step, as one short contiguous run per row
``k`` -- runs ``N`` floats apart, so every step touches a new cache line and, for large
``N``, a new page.  Packing it into panels ``B_packed[j // W, k, j % W]`` makes the runs of
consecutive reduction steps adjacent in memory: the inner loop streams one panel.  When ``v``
indexes a dimension that is not the last (``W[j, k]`` of dense), the unpacked access is even a
gather, and packing turns it into contiguous vector loads.

Only function parameters are packed: their layout is fixed by the caller, while an
intermediate's layout could be changed where it is produced instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensor_ir.expr import Var
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import REDUCE, Block
from tensor_ir.visitor import uses_var

from .analysis import read_loads


@dataclass(frozen=True)
class PackPlan:
    """Pack buffer ``buffer`` (a name) into panels of ``width`` along its dimension ``dim``
    (indexed by the vectorised iteration variable); the panel index goes to position
    ``panel_pos`` among the remaining dimensions, the offset in the panel last."""

    buffer: str
    dim: int
    panel_pos: int
    width: int

    def index_map(self):
        dim, pos, width = self.dim, self.panel_pos, self.width

        def mapping(*idx):
            rest = [e for d, e in enumerate(idx) if d != dim]
            rest.insert(pos, idx[dim] // width)
            return tuple(rest) + (idx[dim] % width,)

        return mapping


def plan_packing(func: PrimFunc, block: Block, vector_var: Var, width: int) -> PackPlan | None:
    """The input of ``block`` worth packing for a register tile vectorised over
    ``vector_var``, or None."""
    reduce_vars = [iv.var for iv in block.iter_vars if iv.kind == REDUCE]
    params = set(func.params)
    seen = set()
    for ld in read_loads(block):
        buf = ld.buffer
        if buf not in params or buf in seen or len(ld.indices) < 2:
            continue
        seen.add(buf)
        loads = [x for x in read_loads(block) if x.buffer is buf]
        if any(x.indices != ld.indices for x in loads):
            continue  # read at several index patterns: one panel layout cannot serve all
        dims = [d for d, e in enumerate(ld.indices) if uses_var(e, vector_var)]
        if len(dims) != 1 or ld.indices[dims[0]] is not vector_var:
            continue
        dim = dims[0]
        reduce_dims = [d for d, e in enumerate(ld.indices)
                       if any(uses_var(e, r) for r in reduce_vars)]
        if not reduce_dims:
            continue  # no reduction runs along it: each element is read once per tile
        if dim == len(ld.indices) - 1 and reduce_dims[-1] != dim - 1:
            continue  # contiguous already and the reduction is not the next-outer dimension
        # The panel index goes right before the first reduction dimension, so the dimensions
        # outside the reduction (a batch) stay outermost.
        remaining = [d for d in range(len(ld.indices)) if d != dim]
        pos = remaining.index(reduce_dims[0]) if reduce_dims[0] in remaining else 0
        return PackPlan(buf.name, dim, pos, width)
    return None
