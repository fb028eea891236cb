"""CrossThreadReduction: spread reductions with little spatial parallelism over the threads of a
GPU block.  A row sum of 64 rows bound one row per thread keeps 64 threads busy; one block per
row with the row's elements over T threads keeps 64 * T busy, and the threads' partial sums are
combined in shared memory (tensor_ir.thread_reduce lowers the bound reduction).

Two forms, each offered beside the unchanged schedule (search picks; AutoBind then binds what
is left):

* a reduction block by itself: its spatial loops fused and bound to blockIdx.x, its reduction
  loops fused, split by a sampled T and the inner part bound to threadIdx.x::

      for i in blockIdx.x(R):
        for k_0 in range(ceil(K / T)):
          for k_1 in threadIdx.x(T):          # the lowering combines the T partials
            B[i] += A[i, k_0 * T + k_1]

* a spatial block that consumes row reductions per row (softmax's division, layer norm's
  normalisation): the block's row loops (those indexing the reductions' outputs) fused and
  bound to blockIdx.x, its other loops (the columns) fused, split by T and bound to
  threadIdx.x; each reduction is computed at the row loop into shared memory, its reduction
  loop over the same T threads, so a row is read and reduced in one kernel::

      for row in blockIdx.x(R):
        maxelem_shared = max over the T threads' shares of data[row, :]
        expsum_shared  = sum over the T threads' shares of exp(data[row, :] - maxelem_shared)
        for c_0 in range(ceil(C / T)):
          for c_1 in threadIdx.x(T):
            out[row, c_0 * T + c_1] = exp(data[...] - maxelem_shared) / expsum_shared

  Spatial stages between the reductions and the consumer (softmax's exp) are inlined first:
  a stage left at the root between them would need the reductions' results before the kernel
  that computes them runs.

T is a ``sample_categorical`` decision over powers of two (see rules/auto_bind.py), capped by
the reduction's extent (and the columns', in the second form); one decision serves every
thread loop of the kernel, which must all have the same extent.
"""
from __future__ import annotations

from tensor_ir.expr import BufferLoad, Var
from tensor_ir.stmt import REDUCE, SPATIAL
from tensor_ir.visitor import collect

from .. import tree
from ..errors import ScheduleError
from ..schedule import Schedule
from .analysis import block_info, has_data_reuse, single_store, writes_param
from .auto_bind import (
    ThreadCountRule,
    bind_reduction_to_threads,
    is_thread_bound,
    leading_spatial_loops,
    reduce_extent,
    reduce_loops,
    thread_candidates,
)
from .base import try_on_copy

__all__ = ["CrossThreadReduction"]


class CrossThreadReduction(ThreadCountRule):
    """A cross-thread sketch for row reductions (see the module text); options of
    ThreadCountRule."""

    name = "cross_thread_reduction"

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        if block == "root":
            return [sch]
        info = block_info(sch.func, block)
        if info is None or single_store(info.block) is None:
            return [sch]
        loc = tree.find_block(sch.func, block)
        if is_thread_bound(loc):
            return [sch]
        if info.is_reduction:
            done = try_on_copy(sch, lambda s: self._reduction(s, block, info))
        elif info.is_spatial:
            done = try_on_copy(sch, lambda s: self._row_consumer(s, block))
        else:
            done = None
        return [sch] if done is None else [sch, done]

    # -- a reduction by itself ----------------------------------------------------------------
    def _reduction(self, sch: Schedule, block: str, info) -> None:
        loc = tree.find_block(sch.func, block)
        chain = reduce_loops(loc)
        if chain is None:
            raise ScheduleError(f"{block}: reduction loops are not innermost")
        rows = leading_spatial_loops(loc)
        if len(rows) + len(chain) != len(loc.loops):
            raise ScheduleError(f"{block}: loops other than its spatial and reduction nests")
        extent = reduce_extent(loc)
        spatial = 1
        for loop in rows:
            spatial *= loop.extent.value
        # A reduction with reuse and many outputs (a matmul) has parallelism enough in its
        # spatial loops; spreading its reduction over threads would only add the combining.
        if extent < 2 or (has_data_reuse(info.block) and spatial >= self.max_threads):
            raise ScheduleError(f"{block}: enough spatial parallelism for one thread per output")
        candidates = thread_candidates(self.max_threads, extent, self.smallest)
        threads = sch.sample_categorical(candidates, [1.0] * len(candidates))
        if rows:
            rvs = sch.get_loops(sch.get_block(block))[:len(rows)]
            fused = sch.fuse(*rvs) if len(rvs) > 1 else rvs[0]
            sch.bind(fused, "blockIdx.x")
        bind_reduction_to_threads(sch, block, threads)

    # -- a consumer of row reductions -----------------------------------------------------------
    def _row_consumer(self, sch: Schedule, block: str) -> None:
        _inline_between(sch, block)
        func = sch.func
        reductions = _row_reductions(func, block)
        if not reductions:
            raise ScheduleError(f"{block}: reads no reduction")
        info = block_info(func, block)
        if not info.trivially_bound:
            raise ScheduleError(f"{block}: loops not trivially bound")
        row_vars = _row_vars(info, reductions, func)
        row_pos = [k for k, it in enumerate(info.loop_iters) if it.var in row_vars]
        col_pos = [k for k in range(len(info.loops)) if k not in row_pos]
        if not row_pos or not col_pos:
            raise ScheduleError(f"{block}: no row / column split of its loops")
        row_extent = 1
        for k in row_pos:
            row_extent *= info.loops[k].extent.value
        col_extent = 1
        for k in col_pos:
            col_extent *= info.loops[k].extent.value
        widest = col_extent
        for name in reductions:
            red = tree.find_block(func, name)
            if writes_param(func, red.node.block):
                raise ScheduleError(f"{name} writes a parameter; it cannot move into shared "
                                    f"memory")
            red_info = block_info(func, name)
            if red_info.extent_product(SPATIAL) != row_extent:
                raise ScheduleError(f"{name} is not one value per row of {block}")
            extent = reduce_extent(red)
            if extent is None:
                raise ScheduleError(f"{name}: reduction loops are not innermost")
            widest = max(widest, extent)
        candidates = thread_candidates(self.max_threads, widest, self.smallest)
        threads = sch.sample_categorical(candidates, [1.0] * len(candidates))
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        if row_pos != list(range(len(row_pos))):
            sch.reorder(*[loops[k] for k in row_pos + col_pos])
            loops = sch.get_loops(b)
        rows, cols = loops[:len(row_pos)], loops[len(row_pos):]
        row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
        col = sch.fuse(*cols) if len(cols) > 1 else cols[0]
        _, lane = sch.split(col, [None, threads])
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        # compute_at puts a stage in front of its consumers inside the loop: the last
        # reduction first, then each earlier one in front of the ones reading it.
        for name in reversed(reductions):
            red = sch.get_block(name)
            sch.compute_at(red, row)
            sch.set_scope(red, 0, "shared")
            bind_reduction_to_threads(sch, name, threads)


def _inline_between(sch: Schedule, block: str) -> None:
    """Inline the spatial stages that feed ``block`` (directly or through reductions) and
    read a reduction: they would sit between the reductions and ``block``.  A stage that
    cannot be inlined makes the form inapplicable (ScheduleError)."""
    for _ in range(len(tree.all_blocks(sch.func))):
        func = sch.func
        feeding = _feeders(func, block)
        target = next((n for n in feeding
                       if _is_spatial(func, n) and not writes_param(func, _block(func, n))
                       and any(_is_reduction(func, p) for p in tree.producers(func, n))),
                      None)
        if target is None:
            return
        sch.compute_inline(sch.get_block(target))


def _feeders(func, block: str) -> list[str]:
    """Blocks ``block`` reads from, transitively (program order)."""
    seen: set[str] = set()
    todo = [block]
    while todo:
        for p in tree.producers(func, todo.pop()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return [loc.node.block.name for loc in tree.all_blocks(func)
            if loc.node.block.name in seen]


def _row_reductions(func, block: str) -> list[str]:
    """The reduction blocks ``block`` reads, and the reductions those read, in program
    order; reading through anything else stops the walk."""
    found: set[str] = set()
    todo = [block]
    while todo:
        for p in tree.producers(func, todo.pop()):
            if p not in found and _is_reduction(func, p):
                found.add(p)
                todo.append(p)
    return [loc.node.block.name for loc in tree.all_blocks(func)
            if loc.node.block.name in found]


def _row_vars(info, reductions: list[str], func) -> set:
    """The iteration variables of the consumer that index the reductions' outputs; each index
    must be one such variable (no arithmetic), the same ones for every reduction."""
    outputs = {w.buffer for name in reductions for w in _block(func, name).writes}
    found: set | None = None
    for ld in collect(info.block.body, BufferLoad):
        if ld.buffer not in outputs:
            continue
        if not all(isinstance(i, Var) for i in ld.indices):
            raise ScheduleError(f"{info.name} reads {ld.buffer.name} at computed indices")
        used = set(ld.indices)
        if found is not None and used != found:
            raise ScheduleError(f"{info.name} reads its reductions at different rows")
        found = used
    if found is None:
        raise ScheduleError(f"{info.name} reads no reduction output")
    return found


def _block(func, name: str):
    return tree.find_block(func, name).node.block


def _is_reduction(func, name: str) -> bool:
    return any(iv.kind == REDUCE for iv in _block(func, name).iter_vars)


def _is_spatial(func, name: str) -> bool:
    return not _is_reduction(func, name)
