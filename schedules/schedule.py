"""Schedule: the current PrimFunc plus the trace of the primitives that produced it.

Each method resolves its handles against the symbol table, calls a pure primitive on the
current function and, only when that succeeds, swaps in the new function, binds the new handles
and appends one instruction to the trace.  A ScheduleError therefore leaves the function, the
trace and the handles exactly as they were.

    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 32])
    print(sch.trace)        # the same program as Python calls
"""
from __future__ import annotations

import math
import random

from tensor_ir.expr import Var
from tensor_ir.func import PrimFunc

from . import sampling
from . import tree
from .dependence import realizes_under
from .errors import ScheduleError, check
from .handles import INLINE, ROOT, BlockRV, ExprRV, LoopRV
from .primitives import block_primitives
from .primitives import annotate_ops as _annotate
from .primitives import loops as _loops
from .index_map import IndexMap
from .instructions import register_schedule
from .trace import Instruction, Trace


class Schedule:
    """A schedulable PrimFunc with its trace.  ``seed`` seeds the sampling instructions."""

    def __init__(self, func: PrimFunc, seed: int | None = None):
        if not isinstance(func, PrimFunc):
            raise ScheduleError(f"Schedule needs a PrimFunc, got {type(func).__name__}")
        if func.attr("lowered"):
            raise ScheduleError(f"function {func.name} is already lowered; schedule the "
                                f"function from te.create_prim_func instead")
        self._func = func
        self._insts: list[Instruction] = []
        self._symbols: dict[str, object] = {}
        self._next_id = 0
        self.seed = seed
        self.rng = random.Random(seed)
        # When set, a tile decision for a loop of another extent is fitted to this loop's
        # (sampling.fit_perfect_tile) rather than refused: a program of another workload
        # replayed on this one (see Trace.apply).
        self.fit_tiles = False

    # -- state ----------------------------------------------------------------------------------
    @property
    def func(self) -> PrimFunc:
        """The current (scheduled, not lowered) function."""
        return self._func

    @property
    def mod(self) -> PrimFunc:
        return self._func

    @property
    def trace(self) -> Trace:
        return Trace(self._insts)

    def copy(self) -> "Schedule":
        """An independent schedule in the same state (handles stay valid in both)."""
        other = Schedule.__new__(Schedule)
        other._func = self._func
        other._insts = list(self._insts)
        other._symbols = dict(self._symbols)
        other._next_id = self._next_id
        other.seed = self.seed
        other.fit_tiles = self.fit_tiles
        other.rng = random.Random()
        other.rng.setstate(self.rng.getstate())
        return other

    def __repr__(self) -> str:
        return f"Schedule({self._func.name}, {len(self._insts)} instructions)"

    # -- handles ---------------------------------------------------------------------------------
    def _fresh(self, cls, value):
        prefix = {BlockRV: "b", LoopRV: "l", ExprRV: "v"}[cls]
        name = f"{prefix}{self._next_id}"
        self._next_id += 1
        self._symbols[name] = value
        return ExprRV(value, name) if cls is ExprRV else cls(name)

    def _lookup(self, rv, cls, what: str):
        check(isinstance(rv, cls), f"{what}: expected a {cls.__name__}, got {rv!r}")
        check(rv.name in self._symbols,
              f"{what}: handle {rv.name} was not created by this schedule")
        return self._symbols[rv.name]

    def _block(self, rv, what: str) -> str:
        return self._lookup(rv, BlockRV, what)

    def _loop(self, rv, what: str) -> Var:
        value = self._lookup(rv, LoopRV, what)
        check(isinstance(value, Var), f"{what}: handle {rv.name} is the {value} compute "
                                      f"location, not a loop")
        return value

    def _input_name(self, value):
        """What a trace records for an argument: a handle name, or the literal."""
        if isinstance(value, ExprRV):
            if self._symbols.get(value.name) == int(value):
                return value.name
            return int(value)
        if isinstance(value, (BlockRV, LoopRV)):
            return value.name
        return value

    def get(self, rv):
        """What a handle stands for now: the Block, the For, an int, or "root" / "inline"."""
        if isinstance(rv, BlockRV):
            return tree.find_block(self._func, self._block(rv, "get")).node.block
        if isinstance(rv, LoopRV):
            value = self._lookup(rv, LoopRV, "get")
            if not isinstance(value, Var):
                return value
            return tree.find_loop(self._func, value).node
        if isinstance(rv, ExprRV):
            return int(self._lookup(rv, ExprRV, "get"))
        raise ScheduleError(f"get: {rv!r} is not a schedule handle")

    def _commit(self, func: PrimFunc | None, kind: str, inputs, attrs, outputs,
                decision=None) -> None:
        if func is not None:
            self._func = func
        names = [o.name for o in outputs]
        self._insts.append(Instruction(kind, [self._input_name(i) for i in inputs],
                                       attrs, names, decision))

    # -- navigation --------------------------------------------------------------------------------
    def get_block(self, name: str) -> BlockRV:
        """The block called ``name``."""
        check(isinstance(name, str), f"get_block: block name must be a str, got {name!r}")
        tree.find_block(self._func, name)
        rv = self._fresh(BlockRV, name)
        self._commit(None, "get_block", [], {"name": name}, [rv])
        return rv

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around ``block``, outermost first."""
        loc = tree.find_block(self._func, self._block(block, "get_loops"))
        out = [self._fresh(LoopRV, lp.loop_var) for lp in loc.loops]
        self._commit(None, "get_loops", [block], {}, out)
        return out

    def get_child_blocks(self, parent) -> list[BlockRV]:
        """Blocks directly under a block or a loop, in program order."""
        if isinstance(parent, LoopRV):
            loop = tree.find_loop(self._func, self._loop(parent, "get_child_blocks")).node
            names = [r.block.name for r, _ in realizes_under(loop.body)]
        else:
            name = self._block(parent, "get_child_blocks")
            tree.find_block(self._func, name)
            names = tree.child_blocks(self._func, None if name == "root" else name)
        out = [self._fresh(BlockRV, n) for n in names]
        self._commit(None, "get_child_blocks", [parent], {}, out)
        return out

    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks writing a buffer ``block`` reads, in program order."""
        names = tree.producers(self._func, self._block(block, "get_producers"))
        out = [self._fresh(BlockRV, n) for n in names]
        self._commit(None, "get_producers", [block], {}, out)
        return out

    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks reading a buffer ``block`` writes, in program order."""
        names = tree.consumers(self._func, self._block(block, "get_consumers"))
        out = [self._fresh(BlockRV, n) for n in names]
        self._commit(None, "get_consumers", [block], {}, out)
        return out

    # -- loop primitives ---------------------------------------------------------------------------
    def split(self, loop: LoopRV, factors) -> list[LoopRV]:
        """Split ``loop`` by ``factors`` (one may be None: inferred); see primitives.loops.split."""
        var = self._loop(loop, "split")
        factors = list(factors)
        plain = [None if f is None else f for f in factors]
        for f in plain:
            check(f is None or (isinstance(f, int) and not isinstance(f, bool)),
                  f"split: factor {f!r} of loop {var.name} is not an int or None")
        func, new_vars = _loops.split(self._func, var, [None if f is None else int(f)
                                                        for f in plain])
        out = [self._fresh(LoopRV, v) for v in new_vars]
        self._commit(func, "split", [loop] + factors, {}, out)
        return out

    def fuse(self, *loops) -> LoopRV:
        """Fuse adjacent, perfectly nested loops (outer to inner) into one."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        vars_ = [self._loop(lp, "fuse") for lp in loops]
        func, fused = _loops.fuse(self._func, vars_)
        out = self._fresh(LoopRV, fused)
        self._commit(func, "fuse", list(loops), {}, [out])
        return out

    def reorder(self, *loops) -> None:
        """Put the given loops, in this order, into the positions they occupy in their nest."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        vars_ = [self._loop(lp, "reorder") for lp in loops]
        func = _loops.reorder(self._func, vars_)
        self._commit(func, "reorder", list(loops), {}, [])

    def tile(self, loops, factors) -> list[list[LoopRV]]:
        """Split each loop by its factor list and reorder level by level; returns the loops of
        each level.  Recorded as the split and reorder instructions it is made of."""
        loops, factors = list(loops), [list(f) for f in factors]
        check(len(loops) == len(factors),
              f"tile: {len(loops)} loops but {len(factors)} factor lists")
        check(len(loops) >= 1 and len({len(f) for f in factors}) == 1,
              f"tile: every loop needs the same number of factors, got {factors}")
        # Validate the whole tiling on the pure function first so that a failure leaves the
        # schedule untouched (it is recorded as several instructions).
        _loops.tile(self._func, [self._loop(lp, "tile") for lp in loops],
                    [[None if f is None else int(f) for f in fs] for fs in factors])
        parts = [self.split(lp, fs) for lp, fs in zip(loops, factors)]
        levels = [[p[k] for p in parts] for k in range(len(factors[0]))]
        self.reorder(*[lp for level in levels for lp in level])
        return levels

    # -- loop kinds and annotations --------------------------------------------------------------
    def parallel(self, loop: LoopRV) -> None:
        """Run ``loop``'s iterations on several threads."""
        func = _annotate.parallel(self._func, self._loop(loop, "parallel"))
        self._commit(func, "parallel", [loop], {}, [])

    def vectorize(self, loop: LoopRV) -> None:
        """Run ``loop`` as SIMD lanes."""
        func = _annotate.vectorize(self._func, self._loop(loop, "vectorize"))
        self._commit(func, "vectorize", [loop], {}, [])

    def unroll(self, loop: LoopRV) -> None:
        """Unroll ``loop``."""
        func = _annotate.unroll(self._func, self._loop(loop, "unroll"))
        self._commit(func, "unroll", [loop], {}, [])

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind ``loop`` to a GPU thread axis (blockIdx.x, threadIdx.x, vthread, ...)."""
        func = _annotate.bind(self._func, self._loop(loop, "bind"), thread_axis)
        self._commit(func, "bind", [loop], {"thread_axis": thread_axis}, [])

    def annotate(self, target, key: str, value) -> None:
        """Attach ``key = value`` (a JSON-like value) to a loop or a block.  A sampled value
        (from sample_categorical) is recorded as that sample, so mutating it changes this
        annotation on replay."""
        resolved = self._target(target, "annotate")
        func = _annotate.annotate(self._func, resolved, key, _plain(value))
        if isinstance(value, ExprRV) and self._symbols.get(value.name) == int(value):
            self._commit(func, "annotate", [target, value], {"key": key}, [])
        else:
            self._commit(func, "annotate", [target], {"key": key, "value": _plain(value)}, [])

    def unannotate(self, target, key: str) -> None:
        """Remove annotation ``key`` from a loop or a block."""
        func = _annotate.unannotate(self._func, self._target(target, "unannotate"), key)
        self._commit(func, "unannotate", [target], {"key": key}, [])

    def _target(self, rv, what: str):
        if isinstance(rv, LoopRV):
            return self._loop(rv, what)
        if isinstance(rv, BlockRV):
            return self._block(rv, what)
        raise ScheduleError(f"{what}: expected a LoopRV or a BlockRV, got {rv!r}")

    # -- sampling ------------------------------------------------------------------------------
    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision=None, inner_budget: int | None = None,
                            inner_levels: int = 1, budget_used=()) -> list[ExprRV]:
        """``n`` factors of ``loop``'s extent (product == extent, innermost at most
        ``max_innermost_factor``), as sampled ints usable as split factors.

        ``inner_budget`` bounds a tile several loops share (a register tile): the product
        of this loop's ``inner_levels`` innermost factors times the values in
        ``budget_used`` (sampled factors of loops tiled before, or ints) stays within it."""
        var = self._loop(loop, "sample_perfect_tile")
        extent = sampling.loop_extent(self._func, var, "sample_perfect_tile")
        used = list(budget_used)
        for u in used:
            check(isinstance(u, ExprRV) or (isinstance(u, int) and not isinstance(u, bool)),
                  f"sample_perfect_tile: budget_used takes sampled factors or ints, got {u!r}")
        if decision is not None and self.fit_tiles:
            # None (nothing within the bounds): drawn afresh, as an undecided tile would be.
            decision = sampling.fit_perfect_tile(
                decision, extent, n, max_innermost_factor, inner_budget, inner_levels,
                math.prod(int(u) for u in used))
        state = self.rng.getstate()
        try:
            factors = sampling.sample_perfect_tile(
                self.rng, extent, n, max_innermost_factor, decision, where=f"loop {var.name}",
                inner_budget=inner_budget, inner_levels=inner_levels,
                budget_used=math.prod(int(u) for u in used))
        except ScheduleError:
            self.rng.setstate(state)
            raise
        out = [self._fresh(ExprRV, f) for f in factors]
        attrs = {"n": n, "max_innermost_factor": max_innermost_factor}
        if inner_budget is not None:
            attrs.update(inner_budget=inner_budget, inner_levels=inner_levels)
        self._commit(None, "sample_perfect_tile", [loop] + used, attrs, out, factors)
        return out

    def sample_categorical(self, candidates, probs, decision=None) -> ExprRV:
        """One of ``candidates`` drawn with weights ``probs``; the decision is its index."""
        candidates = [int(c) if isinstance(c, ExprRV) else c for c in candidates]
        probs = [float(p) for p in probs]
        state = self.rng.getstate()
        try:
            index = sampling.sample_categorical(self.rng, candidates, probs, decision)
        except ScheduleError:
            self.rng.setstate(state)
            raise
        out = self._fresh(ExprRV, candidates[index])
        self._commit(None, "sample_categorical", [],
                     {"candidates": candidates, "probs": probs}, [out], index)
        return out

    def sample_compute_location(self, block: BlockRV, decision=None) -> LoopRV:
        """A loop under which ``block`` may be computed (compute_at is legal there), or the root
        / inline location; pass the result to :meth:`compute_at`."""
        name = self._block(block, "sample_compute_location")
        state = self.rng.getstate()
        try:
            index, location = sampling.sample_compute_location(self.rng, self._func, name,
                                                               decision)
        except ScheduleError:
            self.rng.setstate(state)
            raise
        out = self._fresh(LoopRV, location)
        self._commit(None, "sample_compute_location", [block], {}, [out], index)
        return out

    # -- block primitives (pure functions in primitives/compute_at, cache, layout, reduction) ----
    def _block_primitive(self, name: str):
        fn = block_primitives().get(name)
        if fn is None:
            raise ScheduleError(f"primitive {name} is not available (its module in "
                                f"schedules/primitives did not import)")
        return fn

    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Move ``block`` under ``loop`` (a loop around its consumers), computing there only the
        region they need.  A root location leaves the block where it is; an inline location
        (both from sample_compute_location) inlines it."""
        name = self._block(block, "compute_at")
        location = self._lookup(loop, LoopRV, "compute_at")
        if location == ROOT:
            func = None
        else:
            # A sampled location was found by trying this very rewrite: reuse its result.
            func = sampling.probed_result(self._func, name, location)
            if func is None and location == INLINE:
                func = self._block_primitive("compute_inline")(self._func, name)
            elif func is None:
                func = self._block_primitive("compute_at")(self._func, name, location)
        self._commit(func, "compute_at", [block, loop], {}, [])

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Move ``block`` under ``loop`` (a loop around its producer), computing there the
        region the producer has just written."""
        name = self._block(block, "reverse_compute_at")
        location = self._lookup(loop, LoopRV, "reverse_compute_at")
        if location == ROOT:
            func = None
        elif location == INLINE:
            func = self._block_primitive("reverse_compute_inline")(self._func, name)
        else:
            func = self._block_primitive("reverse_compute_at")(self._func, name, location)
        self._commit(func, "reverse_compute_at", [block, loop], {}, [])

    def compute_inline(self, block: BlockRV) -> None:
        """Inline ``block`` into its consumers."""
        func = self._block_primitive("compute_inline")(
            self._func, self._block(block, "compute_inline"))
        self._commit(func, "compute_inline", [block], {}, [])

    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Inline ``block`` into its producer."""
        func = self._block_primitive("reverse_compute_inline")(
            self._func, self._block(block, "reverse_compute_inline"))
        self._commit(func, "reverse_compute_inline", [block], {}, [])

    def cache_read(self, block: BlockRV, read_buffer_index: int, scope: str) -> BlockRV:
        """Read the ``read_buffer_index``-th buffer ``block`` reads through a cache in ``scope``;
        returns the new copy block."""
        func, name = self._block_primitive("cache_read")(
            self._func, self._block(block, "cache_read"), read_buffer_index, scope)
        out = self._fresh(BlockRV, name)
        self._commit(func, "cache_read", [block],
                     {"read_buffer_index": read_buffer_index, "scope": scope}, [out])
        return out

    def cache_write(self, block: BlockRV, write_buffer_index: int, scope: str) -> BlockRV:
        """Compute ``block`` into a cache in ``scope``; returns the new write-back block."""
        func, name = self._block_primitive("cache_write")(
            self._func, self._block(block, "cache_write"), write_buffer_index, scope)
        out = self._fresh(BlockRV, name)
        self._commit(func, "cache_write", [block],
                     {"write_buffer_index": write_buffer_index, "scope": scope}, [out])
        return out

    def set_scope(self, block: BlockRV, buffer_index: int, scope: str) -> None:
        """Change the storage scope of the ``buffer_index``-th buffer ``block`` writes."""
        func = self._block_primitive("set_scope")(
            self._func, self._block(block, "set_scope"), buffer_index, scope)
        self._commit(func, "set_scope", [block], {"buffer_index": buffer_index, "scope": scope},
                     [])

    def storage_align(self, block: BlockRV, buffer_index: int, axis: int, factor: int,
                      offset: int) -> None:
        """Pad the ``buffer_index``-th buffer ``block`` writes so that dimension ``axis`` has a
        stride equal to ``offset`` modulo ``factor``."""
        func = self._block_primitive("storage_align")(
            self._func, self._block(block, "storage_align"), buffer_index, axis, factor, offset)
        self._commit(func, "storage_align", [block],
                     {"buffer_index": buffer_index, "axis": axis, "factor": factor,
                      "offset": offset}, [])

    def transform_layout(self, block: BlockRV, buffer, index_map) -> None:
        """Change the layout of an intermediate buffer of ``block`` by ``index_map`` (a function
        of the old indices returning the new ones)."""
        recorder = IndexMap.recording(index_map)
        func = self._block_primitive("transform_layout")(
            self._func, self._block(block, "transform_layout"), _buffer_arg(buffer), recorder)
        self._commit(func, "transform_layout", [block],
                     {"buffer": _plain(buffer), "index_map": recorder.to_json()}, [])

    def pack_layout(self, block: BlockRV, buffer, index_map, scope: str = "global"
                    ) -> BlockRV:
        """Read a buffer of ``block`` through a copy packed in the layout ``index_map``;
        returns the packing block."""
        recorder = IndexMap.recording(index_map)
        func, name = self._block_primitive("pack_layout")(
            self._func, self._block(block, "pack_layout"), _buffer_arg(buffer), recorder, scope)
        out = self._fresh(BlockRV, name)
        self._commit(func, "pack_layout", [block],
                     {"buffer": _plain(buffer), "index_map": recorder.to_json(),
                      "scope": scope}, [out])
        return out

    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor the reduction loop ``loop`` out of its block; returns the new ``*_rf``
        block computing partial results."""
        func, name = self._block_primitive("rfactor")(
            self._func, self._loop(loop, "rfactor"), factor_axis)
        out = self._fresh(BlockRV, name)
        self._commit(func, "rfactor", [loop], {"factor_axis": factor_axis}, [out])
        return out

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Move the init of reduction ``block`` into a new block before ``loop``; returns the
        init block."""
        func, name = self._block_primitive("decompose_reduction")(
            self._func, self._block(block, "decompose_reduction"),
            self._loop(loop, "decompose_reduction"))
        out = self._fresh(BlockRV, name)
        self._commit(func, "decompose_reduction", [block, loop], {}, [out])
        return out

    def blockize(self, loop: LoopRV) -> BlockRV:
        """Wrap the loops from ``loop`` inward and the block under them into a new block
        (``<block>_o``) whose iteration variables walk the tiles; returns it."""
        func, name = self._block_primitive("blockize")(self._func, self._loop(loop, "blockize"))
        out = self._fresh(BlockRV, name)
        self._commit(func, "blockize", [loop], {}, [out])
        return out

    def tensorize(self, block_or_loop, intrin: str) -> None:
        """Replace a tile by the tensor intrinsic ``intrin`` (a name registered in
        tensor_ir.intrinsics): a block made by :meth:`blockize`, or a loop (blockized
        first).  Raises ScheduleError naming the first difference from the intrinsic's
        description."""
        check(isinstance(intrin, str), f"tensorize: intrinsic must be a name, got {intrin!r}")
        if isinstance(block_or_loop, LoopRV):
            func = self._block_primitive("tensorize_loop")(
                self._func, self._loop(block_or_loop, "tensorize"), intrin)
        else:
            func = self._block_primitive("tensorize")(
                self._func, self._block(block_or_loop, "tensorize"), intrin)
        self._commit(func, "tensorize", [block_or_loop], {"intrin": intrin}, [])


def _buffer_arg(buffer):
    """A buffer selector as the layout primitives take it (JSON lists back to tuples)."""
    if isinstance(buffer, ExprRV):
        return int(buffer)
    if isinstance(buffer, list):
        return tuple(buffer)
    return buffer


def _plain(value):
    """Sampled ints become plain ints, tuples lists (annotation values are stored as JSON)."""
    if isinstance(value, ExprRV):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


register_schedule(Schedule)

__all__ = ["Schedule", "BlockRV", "LoopRV", "ExprRV", "IndexMap"]
