"""MultiLevelTilingGPU: MetaSchedule's CUDA tiling of reductions with data reuse (matmul, batch
matmul, convolutions), "SSSRRSRS".

Each spatial loop with a thread level is split into 5 sampled levels and each reduction loop
into 3, interleaved as S0 S1 S2 R0 R1 S3 R2 S4::

    for b in blockIdx.x(...):                  S0 of every spatial loop, fused
      for v in vthread(V):                     S1 of every spatial loop, fused
        for ty in threadIdx.y(Ty):             S2: one thread axis per spatial loop
          for tx in threadIdx.x(Tx):
            for k0 in range(...):              R0
              A_shared <- A[block's rows, k-tile]     cooperative fetch: every thread of the
              B_shared <- B[k-tile, block's cols]     block copies a share (see below)
              for k1:                          R1
                for i3, j3:                    S3  -- the thread's register tile
                  for k2:                      R2
                    for i4, j4:                S4
                      C_local[...] += A_shared[...] * B_shared[...]
            C[...] <- C_local[...]             write-back at the thread loop

The vthread level (virtual threads) spaces a thread's elements V apart: consecutive threads
step the tile's contiguous dimension, each thread covering V strided shares of it.  The code
generator runs the virtual threads one after another in each real thread (an unrolled loop
around the thread's whole k-loop, fetches included: TVM's vthread injection, which would
interleave the virtual threads inside the k-loop and fetch once, is not done here, so V > 1
costs V fetches of the block's tiles, which the cost model sees in the features).
Its extent is not bounded here: the VerifyGPU post-processor rejects more than
``max_vthread`` virtual threads per kernel (8, MetaSchedule's limit), as it does with threads.
``max_vthread=1`` leaves the level out: "SSRRSRS", every spatial loop split into 4 levels.

The thread level of the last (up to) three spatial loops is bound per dimension, innermost
to threadIdx.x, then threadIdx.y and threadIdx.z; the other spatial loops (the batch of an NCHW
convolution) have no vthread or thread level.  Per-dimension binding keeps the fetch
mutation-safe: each operand's tile is copied by the fetch's own loops, the innermost split by
the sampled Tx, the next by Ty (and Tz), the split parts bound to the same axes -- the split
factors are the sampled values themselves, so a mutated tile moves the compute and the fetch
together.  (A fetch fused into one loop and split by the thread count would index through //
and %, which the dependence check behind ``bind`` cannot prove at ordinary sizes.)  The
virtual threads need no such care: a fetch computed under the vthread loop covers every
virtual thread's share (compute_at relaxes vthread loops as it relaxes thread loops).

The accumulator lives in a ``local`` buffer (cache_write) written back at the innermost thread
loop; a single elementwise consumer (a bias add, a relu) is folded into that write-back.  A
padding stage feeding an operand is inlined into its fetch, so the border is written as zeros
in shared memory and the padded tensor never exists.

Tile sizes are ``sample_perfect_tile`` decisions; the register tile (the S3 and S4 levels of
all spatial loops) is bounded by ``max_register_tile`` accumulators per thread, the k-tile (the
R1 and R2 levels of all reduction loops) by ``max_reduce_tile``.  Threads per
block and shared memory are not bounded here: candidates over the target's limits are
rejected by the VerifyGPU post-processor (MetaSchedule does the same), which search then
never measures.  The block is annotated ``meta_schedule.tiling_structure`` so later rules
(auto_bind) leave it alone.

Vectorised copies: each operand's fetch samples a vector length V from ``vector_lengths``
(a ``sample_categorical`` decision); its innermost loop is split by Tx and V and the V part
vectorised, so a thread copies V consecutive elements, printed as one float2 / float4 load
and store where the offsets are provably aligned (a guarded or unaligned copy prints lane by
lane).

Unrolling: the block is annotated ``meta_schedule.unroll_explicit`` with a step sampled from
``unroll_steps`` (a ``sample_categorical`` decision, mutated by search like the CPU's);
the GPU post-processing turns it into ``pragma_auto_unroll_max_step`` on the outermost loop
of the block's nest, and the code generator unrolls the loops under it whose iterations fit
the step (0: none).
"""
from __future__ import annotations

from tensor_ir.expr import IntImm
from tensor_ir.stmt import SPATIAL
from tensor_ir.target import Target

from .. import tree
from ..errors import ScheduleError
from ..schedule import Schedule
from .analysis import block_info, has_data_reuse, is_elementwise_consumer, single_store
from .auto_bind import is_thread_bound
from .base import ScheduleRule, try_on_copy
from .multi_level_tiling import TILING_KEY
from .parallel_vectorize_unroll import UNROLL_KEY

__all__ = ["MAX_VTHREAD", "THREAD_AXES", "UNROLL_STEPS", "MultiLevelTilingGPU"]

# With and without the vthread level.
STRUCTURE = "SSSRRSRS"
STRUCTURE_NO_VTHREAD = "SSRRSRS"
# MetaSchedule's bound on the virtual threads of a kernel (checked by VerifyGPU) and its CUDA
# auto-unroll steps.
MAX_VTHREAD = 8
UNROLL_STEPS = (0, 16, 64, 512, 1024)
# Elements a thread copies at once in a cooperative fetch (2 and 4: one float2 / float4).
VECTOR_LENGTHS = (1, 2, 4)
# Draws tried for the sketch before the block is left untiled.
SKETCH_ATTEMPTS = 8
# Innermost spatial loop first: consecutive threads of a warp walk the innermost dimension of
# the output (coalesced stores) and of each fetched tile (coalesced loads).
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class MultiLevelTilingGPU(ScheduleRule):
    """Options: ``max_innermost_factor`` (bound of each loop's innermost sampled factor),
    ``max_register_tile`` (accumulators per thread: the product of the S3 and S4 factors),
    ``max_reduce_tile`` (reduction iterations per staged tile: the product of the R1 and R2
    factors), ``fetch`` (stage the operands in shared memory; without it every thread reads global
    memory), ``max_vthread`` (1: no vthread level; otherwise the level is sampled and VerifyGPU
    bounds it), ``unroll_steps`` with their probabilities ``unroll_probs`` (uniform when None;
    an empty tuple samples no unroll step), ``vector_lengths`` (the elements each thread copies
    at once in a cooperative fetch, sampled per operand; ``(1,)`` or empty: one)."""

    name = "multi_level_tiling_gpu"

    def __init__(self, max_innermost_factor: int = 64, max_register_tile: int = 64,
                 max_reduce_tile: int = 32, fetch: bool = True, max_vthread: int = MAX_VTHREAD,
                 unroll_steps=UNROLL_STEPS, unroll_probs=None, vector_lengths=VECTOR_LENGTHS):
        if min(max_innermost_factor, max_register_tile, max_reduce_tile, max_vthread) < 1:
            raise ScheduleError(f"MultiLevelTilingGPU: max_innermost_factor "
                                f"{max_innermost_factor}, max_register_tile "
                                f"{max_register_tile}, max_reduce_tile {max_reduce_tile} and "
                                f"max_vthread {max_vthread} must be positive")
        unroll_steps = tuple(unroll_steps)
        if unroll_probs is None:
            unroll_probs = tuple(1.0 / len(unroll_steps) for _ in unroll_steps)
        unroll_probs = tuple(unroll_probs)
        if len(unroll_probs) != len(unroll_steps) or any(step < 0 for step in unroll_steps):
            raise ScheduleError(f"MultiLevelTilingGPU: unroll_steps {unroll_steps} must be "
                                f"non-negative, one probability each (got {unroll_probs})")
        self.max_innermost_factor = max_innermost_factor
        self.max_register_tile = max_register_tile
        self.max_reduce_tile = max_reduce_tile
        self.fetch = fetch
        self.max_vthread = max_vthread
        self.unroll_steps = unroll_steps
        self.unroll_probs = unroll_probs
        self.vector_lengths = tuple(vector_lengths)
        if any(n < 1 for n in self.vector_lengths):
            raise ScheduleError(f"MultiLevelTilingGPU: vector_lengths {self.vector_lengths} "
                                f"must be positive")

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
        # The sketch is recorded with the values drawn while it is built, and some draws are
        # refused (a fetch dimension shorter than its thread factor cannot be bound): draw
        # again rather than lose the sketch.  Its decisions are sampled anew when it is used.
        for attempt in range(SKETCH_ATTEMPTS):
            def tile(s: Schedule, attempt: int = attempt) -> None:
                if attempt:
                    s.rng.seed(s.rng.getrandbits(63) + attempt)
                self._tile(s, block, info)

            done = try_on_copy(sch, tile)
            if done is not None:
                return [done]
        return [sch]

    # -- the rule's instructions -----------------------------------------------------------
    def _tile(self, sch: Schedule, block: str, info) -> None:
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        kinds = info.loop_kinds
        spatial = [k for k, kind in enumerate(kinds) if kind == SPATIAL]
        reduce = [k for k, kind in enumerate(kinds) if kind != SPATIAL]
        threaded = spatial[-len(THREAD_AXES):]
        vthread = self.max_vthread > 1
        # Spatial loops: [block, vthread, thread, S3, S4], None standing for a missing level
        # (the vthread level without one, both for loops with no thread level).  Sampled
        # innermost loop first, so that the loops along which memory is contiguous get the
        # first claim on the register tile.
        parts: dict[int, list] = {}
        thread_factor: dict[int, object] = {}
        used: list = []
        for k in reversed(spatial):
            levels = [0, 1, 2, 3, 4] if k in threaded and vthread else \
                [0, 2, 3, 4] if k in threaded else [0, 3, 4]
            tiles = sch.sample_perfect_tile(loops[k], n=len(levels),
                                            max_innermost_factor=self.max_innermost_factor,
                                            inner_budget=self.max_register_tile,
                                            inner_levels=2, budget_used=list(used))
            used.extend(tiles[-2:])
            split = sch.split(loops[k], tiles)
            parts[k] = [None] * 5
            for level, loop in zip(levels, split):
                parts[k][level] = loop
            if k in threaded:
                thread_factor[k] = tiles[-3]
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

        blocks, virtual, threads = s_level(0), s_level(1), s_level(2)
        sch.reorder(*blocks, *virtual, *threads, *r_level(0), *r_level(1), *s_level(3),
                    *r_level(2), *s_level(4))
        grid = sch.fuse(*blocks) if len(blocks) > 1 else blocks[0]
        sch.bind(grid, "blockIdx.x")
        if virtual:
            # One virtual-thread loop per kernel: bind requires every vthread loop of a
            # function to have one extent, so the levels of all dimensions are fused.
            sch.bind(sch.fuse(*virtual) if len(virtual) > 1 else virtual[0], "vthread")
        # threaded is outer to inner; the innermost gets threadIdx.x.
        axis_of = {k: THREAD_AXES[len(threaded) - 1 - n] for n, k in enumerate(threaded)}
        for k in threaded:
            sch.bind(parts[k][2], axis_of[k])
        sch.annotate(b, TILING_KEY, STRUCTURE if vthread else STRUCTURE_NO_VTHREAD)
        if self.unroll_steps:
            step = sch.sample_categorical(list(self.unroll_steps), list(self.unroll_probs))
            sch.annotate(b, UNROLL_KEY, step)
        self._write(sch, b, block, parts[threaded[-1]][2])
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
        bound to the same axes, every serial part outside them.  With vector lengths to sample,
        the innermost loop is split by Tx and a sampled length V too, and its V part (each
        thread's V consecutive elements) vectorised inside the thread loops."""
        b = sch.get_block(block)
        outer = len(tree.find_loop(sch.func, sch.get(at).loop_var).loops) + 1
        operand = tree.find_block(sch.func, block).node.block.reads[index].buffer
        stage = sch.cache_read(b, index, "shared")
        sch.compute_at(stage, at)
        _inline_padding(sch, stage)
        loops = sch.get_loops(stage)[outer:]
        # A dimension of size 1 (a 1x1 convolution's filter taps) is a loop of one iteration
        # whatever the tile sizes: binding it would leave all but one thread idle, and the
        # dependence check refuses the bind.  The thread factors go to the other dimensions,
        # innermost first; the outermost of them takes the factors left over.
        unit = [False] * len(loops)
        if len(operand.shape) == len(loops):
            unit = [isinstance(d, IntImm) and d.value == 1 for d in operand.shape]
        if all(unit):
            unit = [False] * len(loops)
        wide = [loop for loop, one in zip(loops, unit) if not one]
        serial, bound, vector = [], [], None
        lengths = list(self.vector_lengths)
        n = 0  # thread factors given out so far
        for loop, one in zip(reversed(loops), reversed(unit)):
            if one or n >= len(factors):
                serial.insert(0, loop)
                continue
            last = loop is wide[0]
            take = list(range(n, len(factors))) if last else [n]
            width = None
            if n == 0 and len(lengths) > 1:
                # NOTE: sampled even when the split below cannot be perfect; a guarded
                # vector loop is printed lane by lane, which is still correct.
                width = sch.sample_categorical(lengths, [1.0 / len(lengths)] * len(lengths))
            parts = sch.split(loop, [None, *[factors[t] for t in reversed(take)]]
                              + ([width] if width is not None else []))
            if width is not None:
                vector = parts[-1]
                parts = parts[:-1]
            serial.insert(0, parts[0])
            bound[0:0] = [(lane, THREAD_AXES[t]) for lane, t in zip(parts[1:], reversed(take))]
            n += len(take)
        sch.reorder(*serial, *[lane for lane, _ in bound], *([vector] if vector else []))
        for lane, axis in bound:
            sch.bind(lane, axis)
        if vector is not None:
            sch.vectorize(vector)


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
