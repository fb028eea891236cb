"""MultiLevelTilingGPU: MetaSchedule's CUDA tiling of reductions with data reuse (matmul, batch
matmul, convolutions), "SSRRSRS" -- the "SSSRRSRS" structure without its vthread level.

Each spatial loop is split into 4 sampled levels and each reduction loop into 3, interleaved
as S0 S1 R0 R1 S2 R2 S3::

    for b in blockIdx.x(...):                  S0 of every spatial loop, fused
      for ty in threadIdx.y(Ty):               S1: one thread axis per spatial loop
        for tx in threadIdx.x(Tx):
          for k0 in range(...):                R0
            A_shared <- A[block's rows, k-tile]     cooperative fetch: every thread of the
            B_shared <- B[k-tile, block's cols]     block copies a share (see below)
            for k1:                            R1
              for i2, j2:                      S2  -- the thread's register tile
                for k2:                        R2
                  for i3, j3:                  S3
                    C_local[...] += A_shared[...] * B_shared[...]
          C[...] <- C_local[...]               write-back at the thread loop

The thread level of the last (up to) three spatial loops is bound per dimension, innermost
to threadIdx.x, then threadIdx.y and threadIdx.z; the other spatial loops (the batch of an NCHW
convolution) have no thread level.  Per-dimension binding keeps the fetch mutation-safe: each
operand's tile is copied by the fetch's own loops, the innermost split by the sampled Tx, the
next by Ty (and Tz), the split parts bound to the same axes -- the split factors are the
sampled values themselves, so a mutated tile moves the compute and the fetch together.  (A
fetch fused into one loop and split by the thread count would index through // and %, which
the dependence check behind ``bind`` cannot prove at ordinary sizes.)

The accumulator lives in a ``local`` buffer (cache_write) written back at the innermost thread
loop; a single elementwise consumer (a bias add, a relu) is folded into that write-back.  A
padding stage feeding an operand is inlined into its fetch, so the border is written as zeros
in shared memory and the padded tensor never exists.

Tile sizes are ``sample_perfect_tile`` decisions; the register tile (the S2 and S3 levels of
all spatial loops) is bounded by ``max_register_tile`` accumulators per thread, the k-tile (the
R1 and R2 levels of all reduction loops) by ``max_reduce_tile``.  Threads per
block and shared memory are not bounded here: candidates over the target's limits are
rejected by the VerifyGPU post-processor (MetaSchedule does the same), which search then
never measures.  The block is annotated ``meta_schedule.tiling_structure`` so later rules
(auto_bind) leave it alone.
"""
from __future__ import annotations

from tensor_ir.stmt import SPATIAL
from tensor_ir.target import Target

from .. import tree
from ..errors import ScheduleError
from ..schedule import Schedule
from .analysis import block_info, has_data_reuse, is_elementwise_consumer, single_store
from .auto_bind import is_thread_bound
from .base import ScheduleRule, try_on_copy
from .multi_level_tiling import TILING_KEY

__all__ = ["THREAD_AXES", "MultiLevelTilingGPU"]

STRUCTURE = "SSRRSRS"
# Innermost spatial loop first: consecutive threads of a warp walk the innermost dimension of
# the output (coalesced stores) and of each fetched tile (coalesced loads).
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class MultiLevelTilingGPU(ScheduleRule):
    """Options: ``max_innermost_factor`` (bound of each loop's innermost sampled factor),
    ``max_register_tile`` (accumulators per thread: the product of the S2 and S3 factors),
    ``max_reduce_tile`` (reduction iterations per staged tile: the product of the R1 and R2
    factors), ``fetch`` (stage the operands in shared memory; without it every thread reads global
    memory)."""

    name = "multi_level_tiling_gpu"

    def __init__(self, max_innermost_factor: int = 64, max_register_tile: int = 64,
                 max_reduce_tile: int = 32, fetch: bool = True):
        if min(max_innermost_factor, max_register_tile, max_reduce_tile) < 1:
            raise ScheduleError(f"MultiLevelTilingGPU: max_innermost_factor "
                                f"{max_innermost_factor}, max_register_tile "
                                f"{max_register_tile} and max_reduce_tile {max_reduce_tile} "
                                f"must be positive")
        self.max_innermost_factor = max_innermost_factor
        self.max_register_tile = max_register_tile
        self.max_reduce_tile = max_reduce_tile
        self.fetch = fetch

    def initialize(self, target: Target) -> None:
        if not target.is_gpu:
            raise ScheduleError(f"MultiLevelTilingGPU: target {target} is not a GPU target")

    # -- applicability ---------------------------------------------------------------------
    def applicable(self, sch: Schedule, block: str):
        """The block's analysis when the rule tiles it, else None."""
        if block == "root":
            return None
        info = block_info(sch.func, block)
        if info is None or not info.trivially_bound:
            return None
        if not info.is_reduction or single_store(info.block) is None:
            return None
        if info.block.init is None or info.annotation(TILING_KEY) is not None:
            return None
        if not has_data_reuse(info.block) or info.extent_product(SPATIAL) <= 1:
            return None
        if is_thread_bound(tree.find_block(sch.func, block)):
            return None  # another GPU rule (a cross-thread reduction) took it
        parent = tree.find_block(sch.func, block).parent_block
        if parent is not None and parent.name != "root":
            return None  # nested in another block's nest: its kernel is not this block's
        return info

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        info = self.applicable(sch, block)
        if info is None:
            return [sch]
        done = try_on_copy(sch, lambda s: self._tile(s, block, info))
        return [done] if done is not None else [sch]

    # -- the rule's instructions -----------------------------------------------------------
    def _tile(self, sch: Schedule, block: str, info) -> None:
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        kinds = info.loop_kinds
        spatial = [k for k, kind in enumerate(kinds) if kind == SPATIAL]
        reduce = [k for k, kind in enumerate(kinds) if kind != SPATIAL]
        threaded = spatial[-len(THREAD_AXES):]
        # Spatial loops: [block, thread, S2, S3]; those without a thread level [block, S2, S3]
        # with None standing for the missing level.  Sampled innermost loop first, so that the
        # loops along which memory is contiguous get the first claim on the register tile.
        parts: dict[int, list] = {}
        thread_factor: dict[int, object] = {}
        used: list = []
        for k in reversed(spatial):
            n = 4 if k in threaded else 3
            tiles = sch.sample_perfect_tile(loops[k], n=n,
                                            max_innermost_factor=self.max_innermost_factor,
                                            inner_budget=self.max_register_tile,
                                            inner_levels=2, budget_used=list(used))
            used.extend(tiles[-2:])
            split = sch.split(loops[k], tiles)
            if k in threaded:
                thread_factor[k] = tiles[1]
                parts[k] = split
            else:
                parts[k] = [split[0], None, split[1], split[2]]
        # The reduction's inner levels (R1, R2) are the k-tile each fetch stages: bounded, so
        # that the operands' tiles fit shared memory more often than not.
        used = []
        for k in reversed(reduce):
            tiles = sch.sample_perfect_tile(loops[k], n=3,
                                            max_innermost_factor=self.max_innermost_factor,
                                            inner_budget=self.max_reduce_tile,
                                            inner_levels=2, budget_used=list(used))
            used.extend(tiles[-2:])
            parts[k] = sch.split(loops[k], tiles)

        def s_level(lv: int) -> list:
            return [parts[k][lv] for k in spatial if parts[k][lv] is not None]

        def r_level(lv: int) -> list:
            return [parts[k][lv] for k in reduce]

        blocks, threads = s_level(0), s_level(1)
        sch.reorder(*blocks, *threads, *r_level(0), *r_level(1), *s_level(2), *r_level(2),
                    *s_level(3))
        grid = sch.fuse(*blocks) if len(blocks) > 1 else blocks[0]
        sch.bind(grid, "blockIdx.x")
        # threaded is outer to inner; the innermost gets threadIdx.x.
        axis_of = {k: THREAD_AXES[len(threaded) - 1 - n] for n, k in enumerate(threaded)}
        for k in threaded:
            sch.bind(parts[k][1], axis_of[k])
        sch.annotate(b, TILING_KEY, STRUCTURE)
        self._write(sch, b, block, parts[threaded[-1]][1])
        if self.fetch:
            # At the outermost R0 loop: the tiles cover the R1 / R2 levels of the first
            # reduction loop and the whole of the others (every filter tap of a convolution).
            # MetaSchedule stages at the innermost R0 loop (smaller tiles); here the bind of a
            # convolution's weight fetch there is refused by the dependence check.
            k_outer = parts[reduce[0]][0]
            # The fetch's dimensions, innermost first, take the thread axes innermost first.
            factors = [thread_factor[k] for k in reversed(threaded)]
            for index in _operand_indices(sch, block):
                self._fetch(sch, block, index, k_outer, factors)

    def _write(self, sch: Schedule, b, block: str, at) -> None:
        """Accumulate in a ``local`` buffer written back at loop ``at`` (the innermost thread
        loop); fold a single elementwise consumer into the write-back."""
        user = _elementwise_consumer(sch.func, block)  # asked before the cache changes it
        write_back = sch.cache_write(b, 0, "local")
        sch.reverse_compute_at(write_back, at)
        if user is not None:
            try:
                sch.reverse_compute_inline(sch.get_block(user))
            except ScheduleError:
                pass  # a refused inline records nothing; the consumer keeps its own kernel

    def _fetch(self, sch: Schedule, block: str, index: int, at, factors: list) -> None:
        """Stage read ``index`` of ``block`` in shared memory at loop ``at``: the copy's loops,
        innermost first, split by the thread factors (innermost by Tx) and the split parts
        bound to the same axes, every serial part outside them."""
        b = sch.get_block(block)
        outer = len(tree.find_loop(sch.func, sch.get(at).loop_var).loops) + 1
        stage = sch.cache_read(b, index, "shared")
        sch.compute_at(stage, at)
        _inline_padding(sch, stage)
        loops = sch.get_loops(stage)[outer:]
        serial, bound = [], []
        for n, loop in enumerate(reversed(loops)):
            if n < len(factors):
                head, lane = sch.split(loop, [None, factors[n]])
                serial.insert(0, head)
                bound.insert(0, (lane, THREAD_AXES[n]))
            else:
                serial.insert(0, loop)
        sch.reorder(*serial, *[lane for lane, _ in bound])
        for lane, axis in bound:
            sch.bind(lane, axis)


def _operand_indices(sch: Schedule, block: str) -> list[int]:
    """Indices into the block's reads of the buffers it does not write (its operands).  A
    cache_read keeps the positions of the others, so the indices stay valid one after the
    other."""
    node = tree.find_block(sch.func, block).node.block
    written = {w.buffer for w in node.writes}
    return [k for k, region in enumerate(node.reads) if region.buffer not in written]


def _inline_padding(sch: Schedule, stage) -> None:
    """Inline the fetch's producer when it is a stage computing the operand elementwise from
    its own inputs (a padding select), so that the fetch reads the unpadded input."""
    name = sch.get(stage).name
    producers = tree.producers(sch.func, name)
    if len(producers) != 1:
        return
    parent = tree.find_block(sch.func, producers[0]).parent_block
    if parent is None or parent.name != "root" or tree.consumers(sch.func,
                                                                 producers[0]) != [name]:
        return
    try:
        sch.compute_inline(sch.get_block(producers[0]))
    except ScheduleError:
        pass  # not inlinable (a reduction): it stays a kernel of its own


def _elementwise_consumer(func, block: str) -> str | None:
    """The name of ``block``'s only consumer when that consumer is elementwise in it."""
    users = tree.consumers(func, block)
    if len(users) != 1:
        return None
    producer = tree.find_block(func, block).node.block
    consumer = tree.find_block(func, users[0]).node.block
    return users[0] if is_elementwise_consumer(func, consumer, producer) else None
