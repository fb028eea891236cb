"""Block analyses the design-space rules share: iteration kinds, trivial bindings, data reuse,
elementwise consumers.  Pure functions of a PrimFunc; none of them touches a trace."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tensor_ir.expr import BufferLoad, IntImm, Select, Var
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import REDUCE, SPATIAL, Block, BlockRealize, BufferStore, For
from tensor_ir.visitor import collect, uses_var

from .. import tree
from ..errors import ScheduleError


@dataclass
class BlockInfo:
    """What the rules need to know about one block.

    ``loop_kinds[k]`` is SPATIAL or REDUCE for the k-th enclosing loop when the nest is trivially
    bound (each loop binds exactly one iteration variable, as itself), else None."""

    name: str
    block: Block
    realize: BlockRealize
    loops: list[For]
    loop_kinds: list[str] | None
    # iteration variable bound to each loop (same order as loops) when trivially bound
    loop_iters: list | None

    @property
    def is_reduction(self) -> bool:
        return any(iv.kind == REDUCE for iv in self.block.iter_vars)

    @property
    def is_spatial(self) -> bool:
        return all(iv.kind == SPATIAL for iv in self.block.iter_vars)

    @property
    def trivially_bound(self) -> bool:
        return self.loop_kinds is not None

    def extent_product(self, kind: str) -> int:
        out = 1
        for iv in self.block.iter_vars:
            if iv.kind == kind and isinstance(iv.dom.extent, IntImm):
                out *= iv.dom.extent.value
        return out

    def annotation(self, key: str):
        for k, v in self.block.annotations:
            if k == key:
                return v
        return None


def block_info(func: PrimFunc, name: str) -> BlockInfo | None:
    """Analysis of block ``name``, or None when there is no such block."""
    try:
        loc = tree.find_block(func, name)
    except ScheduleError:
        return None
    realize: BlockRealize = loc.node
    block = realize.block
    loops = loc.loops
    kinds, iters = _trivial_binding(realize, loops)
    return BlockInfo(name, block, realize, loops, kinds, iters)


def _trivial_binding(realize: BlockRealize, loops: list[For]):
    """(kinds, iter vars) per loop when every iteration variable is bound to a distinct loop
    variable of a loop starting at 0 with the iteration domain's extent; (None, None) otherwise.
    Loops of extent 1 binding nothing are not allowed either: rules then see a non-standard
    nest and skip it."""
    if len(realize.block.iter_vars) != len(loops):
        return None, None
    by_var = {}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if not isinstance(value, Var) or value in by_var:
            return None, None
        by_var[value] = iv
    kinds, iters = [], []
    for lp in loops:
        iv = by_var.get(lp.loop_var)
        if iv is None or not (isinstance(lp.min, IntImm) and lp.min.value == 0):
            return None, None
        if not (isinstance(lp.extent, IntImm) and lp.extent == iv.dom.extent):
            return None, None
        kinds.append(iv.kind)
        iters.append(iv)
    if not (isinstance(realize.predicate, IntImm) and realize.predicate.value):
        return None, None
    return kinds, iters


def single_store(block: Block) -> BufferStore | None:
    return block.body if isinstance(block.body, BufferStore) else None


def read_loads(block: Block) -> list[BufferLoad]:
    """Loads of the block's body, without the reduction's self-read of its output."""
    written = {w.buffer for w in block.writes}
    return [ld for ld in collect(block.body, BufferLoad) if ld.buffer not in written]


def has_data_reuse(block: Block) -> bool:
    """Some input is read at the same element by different spatial iterations (the index of
    some load misses a spatial iteration variable): tiling then keeps it in cache/registers."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind == SPATIAL]
    for ld in read_loads(block):
        for v in spatial:
            if not any(uses_var(e, v) for e in ld.indices):
                return True
    return False


def streams_along_reduction(block: Block) -> bool:
    """Some input is read at a different element by every iteration (its indices use every
    iteration variable: no reuse at all) and is contiguous along a reduction axis (its last
    index uses reduction variables only) -- the weight of a batch-1 dense.  That operand's
    traffic bounds the kernel, so it must be streamed with vector loads along the reduction,
    which tiling the spatial axes (vectorised across rows, strided loads) cannot do."""
    kinds = {iv.var: iv.kind for iv in block.iter_vars}
    # an axis of extent 1 (the batch of a batch-1 dense) gives no reuse to miss
    wide = [iv.var for iv in block.iter_vars
            if not (isinstance(iv.dom.extent, IntImm) and iv.dom.extent.value == 1)]
    for ld in read_loads(block):
        if not ld.indices:
            continue
        if not all(any(uses_var(e, v) for e in ld.indices) for v in wide):
            continue
        last = [v for v in kinds if uses_var(ld.indices[-1], v)]
        if last and all(kinds[v] == REDUCE for v in last):
            return True
    return False


def has_guarded_load(block: Block) -> bool:
    """The block selects between a load and something else (a padding stage): inlining it
    puts a per-lane condition into its consumer's inner loop, which defeats vectorization, so
    the inline decision is left to the sampled compute location instead."""
    for sel in collect(block.body, Select):
        if collect(sel.true_value, BufferLoad) or collect(sel.false_value, BufferLoad):
            return True
    return False


def writes_param(func: PrimFunc, block: Block) -> bool:
    params = set(func.params)
    return any(w.buffer in params for w in block.writes)


def is_elementwise_consumer(func: PrimFunc, consumer: Block, producer: Block) -> bool:
    """Every load by ``consumer`` of a buffer ``producer`` writes uses the consumer's spatial
    iteration variables one per dimension (no reduction over the produced values)."""
    if not all(iv.kind == SPATIAL for iv in consumer.iter_vars):
        return False
    produced = {w.buffer for w in producer.writes}
    found = False
    for ld in collect(consumer.body, BufferLoad):
        if ld.buffer not in produced:
            continue
        found = True
        if not all(isinstance(e, Var) for e in ld.indices):
            return False
        if len(set(ld.indices)) != len(ld.indices):
            return False
    return found


def const_extent(loop: For) -> int | None:
    return loop.extent.value if isinstance(loop.extent, IntImm) else None


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
