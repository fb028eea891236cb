"""TransposeTiling: cache-line tiles for a copy that writes along another loop than its
innermost one (attention's head split into ``K^T``: a transpose reverse-inlined into the
reshape before it, so the block iterates in the input's order).  A te transpose or relayout
on its own iterates over its output and writes along its innermost loop: the rule leaves it.

Left alone, such a block keeps its loop order: the innermost loop is vectorised, and every
vector it loads is scattered over as many output rows.  Attention's ``K^T`` (``[12, 64, 128]``
from the ``[128, 2304]`` projection) writes 768 lines per row of input, one element each;
with the next 15 rows filling the same lines, the 48 KiB of half-written lines do not stay in
L1 (0.21 ms where the two other head splits, which write along their innermost loop, took
0.03-0.05 ms).

The rule offers two sketches besides the untouched one, both with the output's contiguous
loop (the one indexing the stored buffer's last dimension) split by one vector of lanes:

    "lines"   ... for o: ... for i in lanes: for inner (vectorised)
              the vector loads stay contiguous; the ``lanes`` consecutive rows that share each
              output line run back to back, so a line is complete while it is in L1;
    "vector"  ... for o: ... for io: for ii in lanes: for i in lanes (vectorised)
              the stores are whole vectors along the output; the input is read in square
              tiles of ``lanes`` x ``lanes`` (one line of each of ``lanes`` rows).

The rule only looks at blocks that write a parameter of the function (a copy kernel's
output): a stage inside a function is placed by its consumer's rules instead.
"""
from __future__ import annotations

from tensor_ir.arith import linear_form
from tensor_ir.expr import IntImm
from tensor_ir.target import Target
from tensor_ir.visitor import uses_var

from ..schedule import Schedule
from .analysis import block_info, read_loads, single_store, writes_param
from .base import ScheduleRule, try_on_copy

TRANSPOSE_KEY = "meta_schedule.transpose_tiling"


class TransposeTiling(ScheduleRule):
    name = "transpose_tiling"

    def __init__(self):
        self.lanes = 16

    def initialize(self, target: Target) -> None:
        self.lanes = max(1, target.vector_lanes("float32"))

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        found = self._loops(sch, block)
        if found is None:
            return [sch]
        out_loop, inner, inner_extent = found
        out = [sch]
        variants = ["lines"] + (["vector"] if inner_extent % self.lanes == 0 else [])
        for variant in variants:
            done = try_on_copy(sch, lambda s, v=variant: self._tile(s, block, out_loop, inner,
                                                                    v))
            if done is not None:
                out.append(done)
        return out

    def _loops(self, sch: Schedule, block: str):
        """(index of the loop along the output's last dimension, index of the innermost loop,
        the innermost loop's extent) when the block is a copy-like stage that writes a
        parameter across its innermost loop; None otherwise."""
        info = block_info(sch.func, block)
        if (self.lanes < 2 or info is None or block == "root" or not info.trivially_bound
                or not info.is_spatial or not writes_param(sch.func, info.block)
                or info.annotation(TRANSPOSE_KEY) is not None):
            return None
        store = single_store(info.block)
        if store is None or not read_loads(info.block) or len(info.loops) < 2:
            return None
        inner = len(info.loops) - 1
        variables = [iv.var for iv in info.loop_iters]
        last = store.indices[-1]
        if uses_var(last, variables[inner]):
            return None  # the innermost loop already writes along the output's lines
        # The innermost loop must write somewhere: a loop that only repeats a store (a
        # broadcast read) is no transpose.
        if not any(uses_var(e, variables[inner]) for e in store.indices):
            return None
        along = [k for k, v in enumerate(variables) if uses_var(last, v)]
        if len(along) != 1 or linear_form(last).coeff(variables[along[0]]) != 1:
            return None
        extents = [lp.extent for lp in info.loops]
        if not all(isinstance(e, IntImm) for e in extents):
            return None
        if extents[along[0]].value % self.lanes or extents[along[0]].value < 2 * self.lanes:
            return None
        return along[0], inner, extents[inner].value

    def _tile(self, sch: Schedule, block: str, out_loop: int, inner: int, variant: str):
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        outer, lane = sch.split(loops[out_loop], [None, self.lanes])
        order = [outer if k == out_loop else lp for k, lp in enumerate(loops) if k != inner]
        if variant == "lines":
            order += [lane, loops[inner]]
        else:
            tile_outer, tile_inner = sch.split(loops[inner], [None, self.lanes])
            order += [tile_outer, tile_inner, lane]
        sch.reorder(*order)
        sch.annotate(b, TRANSPOSE_KEY, variant)
