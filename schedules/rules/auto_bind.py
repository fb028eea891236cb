"""AutoBind: give every block a GPU launch grid.  A GPU kernel has no host loop to run a serial
nest on, so a block left with no thread binding would run on one thread of one block.

For a block whose enclosing loops bind no thread axis (an elementwise or injective stage, the
spatial loops of a reduction no other GPU rule took), the leading spatial loops of its nest
(perfectly nested, serial, feeding no reduction iteration variable) are fused, split by a
sampled threads-per-block T and bound::

    for i, j in range(M), range(N):            for b in blockIdx.x(ceil(M*N / T)):
      C[i, j] = A[i, j] + B[i, j]      =>        for t in threadIdx.x(T):
                                                   if b * T + t < M * N:
                                                     C[(b*T+t) // N, (b*T+t) % N] = ...

T is a ``sample_categorical`` decision over powers of two from MIN_THREADS up to the target's
threads per block (at most MAX_THREADS), each capped by the fused extent (a 12-element stage is
offered 12 threads, not 32 of which 20 idle).  The split is not required to divide the extent:
the last block is guarded by a predicate.

Where ``bind`` refuses the fused form (its dependence check proves the // and % indices of a
fused loop only by enumerating the grid, within a budget that ordinary sizes exceed), the
loops are bound one by one instead: the innermost split by T over blockIdx.x / threadIdx.x,
the next two over blockIdx.y / blockIdx.z.

A reduction with no spatial loop at all (a sum to a scalar) has nothing to spread over blocks;
its reduction loops are spread over the threads of one block instead (a cross-thread reduction,
see rules/cross_thread_reduction.py).  A block with no loops (a scalar store) is left as it is:
one thread is all it needs.
"""
from __future__ import annotations

from tensor_ir.expr import IntImm
from tensor_ir.stmt import REDUCE, SERIAL, THREAD_BINDING, For
from tensor_ir.target import Target
from tensor_ir.visitor import uses_var

from .. import tree
from ..errors import ScheduleError
from ..schedule import Schedule
from .base import ScheduleRule, try_on_copy

__all__ = [
    "MAX_THREADS",
    "MIN_THREADS",
    "AutoBind",
    "ThreadCountRule",
    "bind_reduction_to_threads",
    "is_thread_bound",
    "leading_spatial_loops",
    "reduce_extent",
    "reduce_loops",
    "thread_candidates",
]

# Fewer threads than a warp leave lanes of every warp idle; more than 1024 no CUDA GPU allows
# (OpenCL CPU devices report larger work-groups, which buy nothing there either).
MIN_THREADS = 32
MAX_THREADS = 1024


def thread_candidates(max_threads: int, extent: int, smallest: int = MIN_THREADS) -> list[int]:
    """Threads-per-block choices for a loop of ``extent`` iterations: the powers of two from
    ``smallest`` to ``max_threads``, each capped by ``extent``, without repeats (ascending)."""
    limit = min(max_threads, MAX_THREADS)
    out, t = set(), smallest
    while t <= limit:
        out.add(min(t, extent))
        t *= 2
    if not out:
        out.add(min(limit, extent))
    return sorted(out)


def is_thread_bound(loc: tree.Located) -> bool:
    """Whether some loop around the block (up to the root) is bound to a launch axis."""
    return any(isinstance(n, For) and n.kind == THREAD_BINDING for n in loc.path)


def leading_spatial_loops(loc: tree.Located) -> list[For]:
    """The outermost loops of the block's nest that can be fused and bound: perfectly nested,
    serial, with a constant extent, none feeding a reduction iteration variable.  Empty when
    the block does not sit directly under the root block (its nest belongs to another)."""
    parent = loc.parent_block
    if parent is not None and parent.name != "root":
        return []
    realize = loc.node
    reduce_values = [v for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                     if iv.kind == REDUCE]
    out: list[For] = []
    for loop in loc.loops:
        if out and out[-1].body is not loop:
            break
        if loop.kind != SERIAL or loop.thread_binding is not None:
            break
        if not isinstance(loop.extent, IntImm):
            break
        if any(uses_var(v, loop.loop_var) for v in reduce_values):
            break
        out.append(loop)
    return out


def reduce_loops(loc: tree.Located) -> list[For] | None:
    """The loops feeding the block's reduction iteration variables when they are the innermost
    loops of its nest, perfectly nested, serial, with constant extents and feeding no spatial
    variable (what a cross-thread reduction can fuse and spread over threads); None otherwise
    (and for a block that is no reduction)."""
    realize = loc.node
    pairs = list(zip(realize.block.iter_vars, realize.iter_values))
    reduce_values = [v for iv, v in pairs if iv.kind == REDUCE]
    spatial_values = [v for iv, v in pairs if iv.kind != REDUCE]
    if not reduce_values:
        return None
    loops = loc.loops
    feeding = [k for k, lp in enumerate(loops)
               if any(uses_var(v, lp.loop_var) for v in reduce_values)]
    if not feeding or feeding != list(range(feeding[0], len(loops))):
        return None
    chain = loops[feeding[0]:]
    for k, loop in enumerate(chain):
        if k and chain[k - 1].body is not loop:
            return None
        if loop.kind != SERIAL or loop.thread_binding is not None:
            return None
        if not isinstance(loop.extent, IntImm):
            return None
        if any(uses_var(v, loop.loop_var) for v in spatial_values):
            return None
    # The innermost loop must hold the block alone (nothing else runs per iteration).
    if chain[-1].body is not realize:
        return None
    return chain


def reduce_extent(loc: tree.Located) -> int | None:
    """The iterations of :func:`reduce_loops` together, or None when there are none."""
    chain = reduce_loops(loc)
    if chain is None:
        return None
    out = 1
    for loop in chain:
        out *= loop.extent.value
    return out


def bind_reduction_to_threads(sch: Schedule, block: str, threads) -> None:
    """Fuse the reduction loops of ``block`` (see :func:`reduce_loops`), split the fused loop
    by ``threads`` (an int or a sampled value) and bind the inner part to threadIdx.x: each
    thread accumulates a strided share and the GPU lowering combines the shares across the
    threads (tensor_ir.thread_reduce).  Raises ScheduleError when the loops do not qualify."""
    loc = tree.find_block(sch.func, block)
    chain = reduce_loops(loc)
    if chain is None:
        raise ScheduleError(f"cross-thread reduction: the reduction loops of block {block} are "
                            f"not the innermost serial loops of its nest")
    rvs = sch.get_loops(sch.get_block(block))[-len(chain):]
    fused = sch.fuse(*rvs) if len(rvs) > 1 else rvs[0]
    _, inner = sch.split(fused, [None, threads])
    sch.bind(inner, "threadIdx.x")


class ThreadCountRule(ScheduleRule):
    """A rule that samples a thread count.  Options: ``max_threads`` (a cap below the
    target's threads per block), ``smallest`` (the fewest threads offered)."""

    def __init__(self, max_threads: int | None = None, smallest: int = MIN_THREADS):
        self.cap = max_threads
        self.smallest = smallest
        self.max_threads = max_threads or MAX_THREADS

    def initialize(self, target: Target) -> None:
        limit = target.max_threads_per_block or MAX_THREADS
        self.max_threads = min(limit, self.cap) if self.cap else limit


class AutoBind(ThreadCountRule):
    """Bind every block left unbound (see the module text); options of ThreadCountRule."""

    name = "auto_bind"

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        if block == "root":
            return [sch]
        try:
            loc = tree.find_block(sch.func, block)
        except ScheduleError:
            return [sch]  # inlined by an earlier rule
        if is_thread_bound(loc):
            return [sch]
        loops = leading_spatial_loops(loc)
        if not loops:
            extent = reduce_extent(loc)
            if extent is None:
                return [sch]  # no loops at all: one thread is all the block needs
            candidates = thread_candidates(self.max_threads, extent, self.smallest)

            def spread(s: Schedule) -> None:
                threads = s.sample_categorical(candidates, [1.0] * len(candidates))
                bind_reduction_to_threads(s, block, threads)

            done = try_on_copy(sch, spread)
            return [done if done is not None else sch]
        extent = 1
        for loop in loops:
            extent *= loop.extent.value
        candidates = thread_candidates(self.max_threads, extent, self.smallest)

        def bind(s: Schedule) -> None:
            rvs = s.get_loops(s.get_block(block))[:len(loops)]
            fused = s.fuse(*rvs) if len(rvs) > 1 else rvs[0]
            threads = s.sample_categorical(candidates, [1.0] * len(candidates))
            outer, inner = s.split(fused, [None, threads])
            s.bind(outer, "blockIdx.x")
            s.bind(inner, "threadIdx.x")

        done = try_on_copy(sch, bind)
        if done is None and len(loops) > 1:
            done = try_on_copy(sch, lambda s: self._bind_by_dimension(s, block, loops))
        return [done if done is not None else sch]

    def _bind_by_dimension(self, s: Schedule, block: str, loops) -> None:
        """The fallback when the fused form is refused: ``bind`` proves the fused loop's
        // and % indices independent only by enumerating the launch grid, which runs out of
        budget at ordinary sizes (a 64x56x56 pooling, a 1M-element pad), and the block would
        be left to one thread.  Here each loop is bound on its own, every index affine in the
        launch indices: the innermost split by a sampled T over blockIdx.x / threadIdx.x, the
        next two over blockIdx.y and blockIdx.z; loops outside those (a batch of one, mostly)
        stay serial in each thread."""
        rvs = s.get_loops(s.get_block(block))[:len(loops)]
        candidates = thread_candidates(self.max_threads, loops[-1].extent.value, self.smallest)
        threads = s.sample_categorical(candidates, [1.0] * len(candidates))
        outer, inner = s.split(rvs[-1], [None, threads])
        s.bind(outer, "blockIdx.x")
        s.bind(inner, "threadIdx.x")
        for rv, axis in zip(reversed(rvs[:-1]), ("blockIdx.y", "blockIdx.z")):
            s.bind(rv, axis)
