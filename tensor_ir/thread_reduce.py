"""Cross-thread reductions for the GPU build: a reduction whose reduce iteration variable is fed
by a loop bound to ``threadIdx.*`` becomes a per-thread accumulation, a tree over the threads'
partial values in shared memory, and one write of the result.

    kernel_func = lower_for_gpu(sch.func)      # this pass, then tensor_ir.lower.lower

On the CPU a thread-bound loop runs serially, so the reduction block accumulating into its
output element is already right; on a GPU its iterations run at once and would race on that
element.  The pass runs on the scheduled function *before* lowering, while the block still says
what the reduction is (its init value, its combiner, its output element), as TVM's
LowerCrossThreadReduction does.  For a row sum with ``k`` split [None, 32] and the inner part
bound to ``threadIdx.x``::

    for i in blockIdx.x(R):                       for i in blockIdx.x(R):
      for k_0 in range(K0):                         alloc B_red_shared: shared[1, 32]
        for k_1 in threadIdx.x(32):        =>       for k_1 in threadIdx.x(32):
          block B(v_i = i,                            alloc B_red_local: local[1]
                  v_k = k_0 * 32 + k_1):              B_red_local[0] = 0
            where k_0 * 32 + k_1 < K                  for k_0 in range(K0):
            init: B[v_i] = 0                            if k_0 * 32 + k_1 < K:
            B[v_i] = B[v_i] + A[v_i, v_k]                 B_red_local[0] += A[i, k_0 * 32 + k_1]
                                                      B_red_shared[0, k_1] = B_red_local[0]
                                                      if k_1 < 16: B_red_shared[0, k_1] +=
                                                                     B_red_shared[0, k_1 + 16]
                                                      ...                      (log2(32) steps)
                                                      if k_1 == 0: B[i] = B_red_shared[0, 0]

The shared buffer has one row per group of threads reducing together (the extents of the
``threadIdx`` loops enclosing the nest, which are spatial) and one column per thread of the
reduction.  Each tree step halves the active count ``m`` (rounding up, so any thread count
works): threads below ``m - ceil(m / 2)`` fold in the element ``ceil(m / 2)`` further on; the
printer puts a barrier between the steps (each reads what the previous one wrote).  Threads
whose iterations the block's predicate excludes keep the identity element in their
accumulator, so they contribute nothing.

The write of the result reads the tree's root.  Into a ``local`` output every thread writes it
(each thread holds its own copy, as a later per-thread stage reading it needs); into a
``shared`` or ``global`` output only thread 0 of the reduction does, and a later stage of the
kernel reading a shared output is separated from it by the printer's barrier rule.

The nest rewritten is the chain of loops from the outermost loop feeding a reduce iteration
variable down to the block, each loop holding only the next; every loop of the chain must feed
a reduce variable and none may feed a spatial one.  Serial (or unrolled) chain loops stay, per
thread, in their order; the ``threadIdx`` loops of the chain move above them (a thread-bound
loop is the thread's index wherever it sits).  Commutative combiners only: ``+``, ``*``,
``min``, ``max``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from . import dtype as dt
from .buffer import Buffer
from .errors import BuildError
from .expr import (
    And,
    BinOp,
    BufferLoad,
    IntImm,
    PrimExpr,
    Select,
    Var,
    binary,
    compare,
    const,
    equal,
    logic_and,
)
from .func import PrimFunc
from .stmt import (
    REDUCE,
    SERIAL,
    THREAD_BINDING,
    TRUE,
    UNROLLED,
    Allocate,
    BlockRealize,
    BufferStore,
    For,
    IfThenElse,
    SeqStmt,
    seq,
)
from .visitor import collect, free_vars, substitute, transform

__all__ = ["COMBINERS", "lower_cross_thread_reductions", "lower_for_gpu"]

THREAD_IDX = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
COMBINERS = ("+", "*", "min", "max")


def lower_for_gpu(func: PrimFunc) -> PrimFunc:
    """The GPU build's lowering: cross-thread reductions (this module), then
    :func:`tensor_ir.lower.lower`.  An already lowered function is returned unchanged (its
    blocks, and with them the reductions' identity, are gone)."""
    from .lower import lower

    if func.attr("lowered"):
        return func
    return lower(lower_cross_thread_reductions(func))


def lower_cross_thread_reductions(func: PrimFunc) -> PrimFunc:
    """Rewrite every reduction block whose reduce iteration variables are fed by a loop bound
    to ``threadIdx.*`` (see the module docstring); other statements are kept as they are.

    Raises BuildError, naming the block, for such a reduction the rewrite cannot express: a
    combiner other than + * min max, a loop between the block and a thread-bound reduce loop
    that feeds no reduce variable (or also feeds a spatial one), a reduce loop of another kind
    (parallel, vectorized, blockIdx, vthread) in the chain, a predicate mixing reduce and
    spatial loops in one condition, a non-constant thread extent.
    """
    if func.attr("lowered"):
        raise BuildError(f"cross-thread reduction: function {func.name} is already lowered; "
                         "the pass needs its blocks")
    body = _Rewriter().stmt(func.body, ())
    if body is func.body:
        return func
    return PrimFunc(func.params, body, func.name, func.attrs)


def _thread_loop(loop: For) -> bool:
    return loop.kind == THREAD_BINDING and loop.thread_binding in THREAD_IDX


def _reduce_vars(realize: BlockRealize) -> tuple[set, set]:
    """Loop variables used by the reduce bindings and by the spatial bindings."""
    reduce_used, spatial_used = set(), set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        (reduce_used if iv.kind == REDUCE else spatial_used).update(collect(value, Var))
    return reduce_used, spatial_used


def _conjuncts(pred: PrimExpr) -> list:
    if isinstance(pred, And):
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    if isinstance(pred, IntImm) and pred.value:
        return []
    return [pred]


def _all(conds) -> PrimExpr:
    out = TRUE
    for c in conds:
        out = logic_and(out, c)
    return out


def _guard(cond: PrimExpr, body):
    return body if isinstance(cond, IntImm) and cond.value else IfThenElse(cond, body)


def combine(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a op b`` for a combiner of :data:`COMBINERS`."""
    return BinOp(op, a, b) if op in ("min", "max") else binary(op, a, b)


def identity(op: str, dtype: str) -> PrimExpr:
    """The identity element of ``op`` in ``dtype`` (+-inf for a float min / max)."""
    if op == "+":
        return const(0, dtype)
    if op == "*":
        return const(1, dtype)
    return const(dt.max_value(dtype) if op == "min" else dt.min_value(dtype), dtype)


def _combiner(block, value: PrimExpr, acc: PrimExpr) -> str:
    """The combiner of an update whose self-load is already replaced by ``acc``:
    ``acc op x``, ``x op acc``, or either under a ``where=`` select ``select(c, ..., acc)``."""
    if isinstance(value, Select) and bool(value.false_value == acc):
        value = value.true_value
    if isinstance(value, BinOp) and value.op in COMBINERS:
        if bool(value.a == acc):
            other = value.b
        elif bool(value.b == acc):
            other = value.a
        else:
            other = None
        if other is not None and not any(bool(ld == acc) for ld in collect(other, BufferLoad)):
            return value.op
    raise BuildError(f"cross-thread reduction: cannot recognise the combiner of reduction block "
                     f"{block.name} (expected C = C op x with op one of + * min max, "
                     "commutative and associative, so the threads' partial results can be "
                     f"combined in any order); its update is {value}")


class _Rewriter:
    def __init__(self):
        self.count = 0

    def stmt(self, s, path: tuple):
        """``s`` rewritten; ``path`` holds the loops enclosing it, outermost first."""
        if isinstance(s, For):
            chain = _chain(s)
            if chain is not None:
                return self.rewrite(chain[0], chain[1], path)
            body = self.stmt(s.body, path + (s,))
            return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body,
                                                s.thread_binding, s.annotations)
        if isinstance(s, SeqStmt):
            stmts = tuple(self.stmt(x, path) for x in s.stmts)
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else SeqStmt(stmts)
        if isinstance(s, BlockRealize):
            self.check_unmatched(s, path)
            blk = s.block
            body = self.stmt(blk.body, path)
            return s if body is blk.body else replace(s, block=replace(blk, body=body))
        if isinstance(s, Allocate):
            body = self.stmt(s.body, path)
            return s if body is s.body else replace(s, body=body)
        if isinstance(s, IfThenElse):
            then = self.stmt(s.then_case, path)
            other = None if s.else_case is None else self.stmt(s.else_case, path)
            if then is s.then_case and other is s.else_case:
                return s
            return replace(s, then_case=then, else_case=other)
        return s

    def check_unmatched(self, realize: BlockRealize, path: tuple) -> None:
        """A reduction block with a thread-bound reduce loop that did not form a chain."""
        reduce_used, _ = _reduce_vars(realize)
        for loop in path:
            if _thread_loop(loop) and loop.loop_var in reduce_used:
                raise BuildError(
                    f"cross-thread reduction: block {realize.block.name} has its reduce "
                    f"iteration variables fed by loop {loop.loop_var.name} bound to "
                    f"{loop.thread_binding}, but the loops from there down to the block are not "
                    "a chain of reduce loops each holding only the next (a spatial loop or "
                    "another statement sits in between); reorder the loops so the reduce "
                    "loops are innermost")

    def rewrite(self, loops: list, realize: BlockRealize, path: tuple):
        block = realize.block
        name = block.name
        reduce_used, spatial_used = _reduce_vars(realize)
        for loop in path:
            if loop.loop_var in reduce_used:
                raise BuildError(
                    f"cross-thread reduction: block {name}: loop {loop.loop_var.name} feeds a "
                    "reduce iteration variable but sits outside the chain of reduce loops "
                    "above the block (a spatial loop or another statement is in between)")
        for loop in loops:
            var = loop.loop_var.name
            if loop.loop_var in spatial_used:
                raise BuildError(f"cross-thread reduction: block {name}: loop {var} feeds both "
                                 "a reduce and a spatial iteration variable")
            if not (_thread_loop(loop) or (loop.kind in (SERIAL, UNROLLED)
                                           and loop.thread_binding is None)):
                raise BuildError(
                    f"cross-thread reduction: block {name}: reduce loop {var} is "
                    f"{loop.thread_binding or loop.kind}; a reduction across threadIdx can only "
                    "have serial or unrolled loops besides its thread loops")
            if _thread_loop(loop) and not (isinstance(loop.extent, IntImm)
                                           and isinstance(loop.min, IntImm)):
                raise BuildError(f"cross-thread reduction: block {name}: loop {var} bound to "
                                 f"{loop.thread_binding} has a non-constant extent or start")
        if block.alloc_buffers:
            raise BuildError(f"cross-thread reduction: block {name} allocates buffers "
                             f"({', '.join(b.name for b in block.alloc_buffers)}); move them "
                             "out of the reduction block")
        update = block.body
        if not (isinstance(update, BufferStore) and isinstance(block.init, BufferStore)
                and block.init.buffer is update.buffer
                and bool(tuple(block.init.indices) == tuple(update.indices))):
            raise BuildError(f"cross-thread reduction: block {name} is not a reduction block "
                             "(an init store and one update store of the same element)")
        out = update.buffer
        dtype = out.dtype
        self.count += 1

        threads = [lp for lp in loops if _thread_loop(lp)]
        serial = [lp for lp in loops if not _thread_loop(lp)]
        groups = [lp for lp in path if _thread_loop(lp)]
        n_red = math.prod(lp.extent.value for lp in threads)
        n_group = math.prod(lp.extent.value for lp in groups) if groups else 1
        red_index = _flat(threads)
        group_index = _flat(groups)

        acc = Buffer(f"{name}_red_local", (const(1),), dtype, "local")
        red = Buffer(f"{name}_red_shared", (const(n_group), const(n_red)), dtype, "shared")
        acc_load = BufferLoad(acc, (const(0),))
        self_load = BufferLoad(out, tuple(update.indices))

        # The update with its self-load turned into the accumulator, then the bindings
        # substituted: what one thread does at one of its iterations.
        value = transform(update.value, lambda n: acc_load if isinstance(n, BufferLoad)
                          and n.buffer is out and bool(n == self_load) else None)
        if any(ld.buffer is out for ld in collect(value, BufferLoad)):
            raise BuildError(f"cross-thread reduction: block {name} reads its output {out.name} "
                             "at another element than the one it accumulates into")
        op = _combiner(block, value, acc_load)
        mapping = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)}
        value = substitute(value, mapping)
        out_index = tuple(substitute(i, mapping) for i in update.indices)
        init_value = substitute(block.init.value, mapping)

        chain_vars = {lp.loop_var for lp in loops}
        reduce_conds, spatial_conds = [], []
        for cond in _conjuncts(realize.predicate):
            used = free_vars(cond)
            if not used & chain_vars:
                spatial_conds.append(cond)
            elif used & (spatial_used - chain_vars):
                raise BuildError(f"cross-thread reduction: block {name}: predicate {cond} "
                                 "mixes reduce and spatial loops in one condition")
            else:
                reduce_conds.append(cond)

        ident = identity(op, dtype)
        step = _guard(_all(spatial_conds + reduce_conds), BufferStore(acc, value, (const(0),)))
        for lp in reversed(serial):
            step = For(lp.loop_var, lp.min, lp.extent, lp.kind, step, None, lp.annotations)

        def red_at(offset) -> BufferLoad:
            return BufferLoad(red, (group_index, binary("+", red_index, offset)
                                    if offset else red_index))

        stmts = [BufferStore(acc, ident, (const(0),)), step,
                 BufferStore(red, acc_load, (group_index, red_index))]
        active = n_red
        while active > 1:
            half = (active + 1) // 2
            fold = BufferStore(red, combine(op, red_at(0), red_at(half)),
                               (group_index, red_index))
            stmts.append(IfThenElse(compare("<", red_index, const(active - half)), fold))
            active = half
        root = BufferLoad(red, (group_index, const(0)))
        result = root if bool(init_value == ident) else combine(op, init_value, root)
        write_conds = list(spatial_conds)
        if out.scope != "local":
            write_conds.append(equal(red_index, const(0)))
        stmts.append(_guard(_all(write_conds), BufferStore(out, result, out_index)))

        body = Allocate(acc, seq(*stmts))
        for lp in reversed(threads):
            body = For(lp.loop_var, lp.min, lp.extent, THREAD_BINDING, body, lp.thread_binding,
                       lp.annotations)
        return Allocate(red, body)


def _chain(loop: For):
    """(loops, realize) when ``loop`` starts a chain of loops, each holding only the next,
    down to a reduction block whose reduce variables every loop of the chain feeds and one
    loop bound to threadIdx does; else None."""
    loops = []
    node = loop
    while isinstance(node, For):
        loops.append(node)
        node = node.body
    if not isinstance(node, BlockRealize) or node.block.init is None:
        return None
    reduce_used, _ = _reduce_vars(node)
    if not all(lp.loop_var in reduce_used for lp in loops):
        return None
    if not any(_thread_loop(lp) for lp in loops):
        return None
    return loops, node


def _flat(loops: list) -> PrimExpr:
    """Row-major flat index of the thread loops ``loops`` (outermost first), from 0."""
    index: PrimExpr = const(0)
    for lp in loops:
        offset = lp.loop_var if isinstance(lp.min, IntImm) and lp.min.value == 0 \
            else binary("-", lp.loop_var, lp.min)
        index = binary("+", binary("*", index, lp.extent), offset)
    return index
