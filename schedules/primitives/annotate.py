"""Loop kinds and annotations as pure rewrites: parallel, vectorize, unroll, bind, annotate,
unannotate.

Changing a loop's kind never changes which iterations run, only how; the legality checks make
sure running iterations concurrently cannot change the result.
"""
from __future__ import annotations

import math

from tensor_ir.expr import IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import (
    PARALLEL, SERIAL, THREAD_AXES, THREAD_BINDING, UNROLLED, VECTORIZED, Block, For,
)
from tensor_ir.visitor import collect, uses_var

from ..dependence import carried_dependence, reduce_feeder
from ..errors import ScheduleError, check
from ..tree import MISS, IdentityMemo, find_block, find_loop, replace


def _with_kind(func: PrimFunc, loop: For, kind: str, thread: str | None = None) -> PrimFunc:
    new = For(loop.loop_var, loop.min, loop.extent, kind, loop.body, thread, loop.annotations)
    return replace(func, loop, new)


def _check_concurrent(func: PrimFunc, loop: For, what: str,
                      as_kind: tuple[str, str | None] | None = None,
                      cross_thread_reduce: bool = False) -> None:
    """Iterations of ``loop`` may run at the same time: no reduction over it (unless
    ``cross_thread_reduce``: the threads of a GPU block combine their parts), no dependence
    carried between its iterations."""
    name = loop.loop_var.name
    check(loop.kind == SERIAL and loop.thread_binding is None,
          f"{what}: loop {name} is already {loop.kind}"
          + (f" (bound to {loop.thread_binding})" if loop.thread_binding else ""))
    feeder = None if cross_thread_reduce else reduce_feeder(loop)
    if feeder is not None:
        raise ScheduleError(f"{what}: loop {name} feeds reduce iteration variable {feeder[1]} "
                            f"of block {feeder[0]}; its iterations accumulate into one element")
    _check_independent(func, loop, what, as_kind)


def _check_independent(func: PrimFunc, loop: For, what: str,
                       as_kind: tuple[str, str | None] | None) -> None:
    outer = find_loop(func, loop.loop_var).loops
    dep = carried_dependence(func.body, loop, outer=outer, as_kind=as_kind)
    if dep is not None:
        writer, reader, buf = dep
        raise ScheduleError(
            f"{what}: loop {loop.loop_var.name} may carry a dependence: block {reader} can "
            f"access, at one iteration, elements of buffer {buf} that block {writer} writes at "
            f"another")


def parallel(func: PrimFunc, loop_var: Var) -> PrimFunc:
    """Run the loop's iterations on several CPU threads.

    Preconditions: a serial loop; its variable feeds no reduce iteration variable of a block
    under it; no block under it accesses at one iteration what a block writes at another.

        for i in range(n): ...   ->   for i in parallel(n): ...
    """
    # A post-processor tries a loop on the pure function before recording it through the
    # Schedule: the second call returns the first one's result.
    done = _PARALLEL.get((func, loop_var))
    if done is not MISS:
        return done
    loop = find_loop(func, loop_var).node
    _check_concurrent(func, loop, "parallel", (PARALLEL, None))
    done = _with_kind(func, loop, PARALLEL)
    _PARALLEL.put((func, loop_var), (), done)
    return done


_PARALLEL = IdentityMemo(16)


def vectorize(func: PrimFunc, loop_var: Var) -> PrimFunc:
    """Run the loop as SIMD lanes.  Preconditions: those of :func:`parallel` and a constant
    extent.

        for j in range(8): ...   ->   for j in vectorized(8): ...
    """
    loop = find_loop(func, loop_var).node
    check(isinstance(loop.extent, IntImm),
          f"vectorize: loop {loop_var.name} has a non-constant extent {loop.extent}")
    _check_concurrent(func, loop, "vectorize")
    return _with_kind(func, loop, VECTORIZED)


def unroll(func: PrimFunc, loop_var: Var) -> PrimFunc:
    """Unroll the loop.  Always legal for a serial loop (the iteration order is kept).

        for k in range(4): ...   ->   for k in unroll(4): ...
    """
    loop = find_loop(func, loop_var).node
    check(loop.kind in (SERIAL, UNROLLED) and loop.thread_binding is None,
          f"unroll: loop {loop_var.name} is {loop.kind}; only a serial loop can be unrolled")
    return _with_kind(func, loop, UNROLLED)


def bind(func: PrimFunc, loop_var: Var, thread_axis: str) -> PrimFunc:
    """Bind the loop to a GPU thread axis (blockIdx.x/y/z, threadIdx.x/y/z, vthread).

    Preconditions (ScheduleError otherwise), for ``blockIdx.*`` and ``threadIdx.*``: those of
    :func:`parallel`, as the threads of a GPU block see them (see schedules.dependence,
    "Threads of a block"): for ``threadIdx.*`` a loop feeding a reduce iteration variable is
    accepted (a cross-thread reduction), and a cooperative fetch into a ``shared`` buffer is
    no dependence; ``blockIdx.*`` iterations must be independent outright.  Every other loop
    bound to the axis in the same kernel (under the same outermost blockIdx / threadIdx
    loop; separate nests are separate launches) has the same extent.  For ``vthread``, whose
    "threads" run one after another in one real thread: a serial loop, and every vthread loop
    of the function has the same extent.

    A loop bound to the axis of an enclosing loop is the same thread index, not a nested
    one (the GPU code runs the one iteration equal to the thread's index), as a cooperative
    fetch under the compute's thread loops is bound::

        for ty in thread_binding(4, "threadIdx.y"):        # the compute's threads
          for ko in range(4):
            for f0 in thread_binding(4, "threadIdx.y"):    # f0 == ty on the GPU
              A_shared[f0, ...] = A[...]

    The interpreter runs thread loops serially, so there every ty runs the whole fetch: the
    two agree only when the inner loop's subtree does not use the outer loop's variable, which
    is checked, and the enclosing loop's iterations are checked again as threads.

        for i in range(64): ...   ->   for i in thread_binding(64, "threadIdx.x"): ...
    """
    check(thread_axis in THREAD_AXES,
          f"bind: unknown thread axis {thread_axis!r}; expected one of {', '.join(THREAD_AXES)}")
    loop = find_loop(func, loop_var).node
    name = loop_var.name
    if thread_axis == "vthread":
        check(loop.kind == SERIAL and loop.thread_binding is None,
              f"bind: loop {name} is already {loop.kind}")
        for other in collect(func.body, For):
            if other.thread_binding == thread_axis and other is not loop:
                _check_extent(loop, other, thread_axis)
        return _with_kind(func, loop, THREAD_BINDING, thread_axis)
    as_kind = (THREAD_BINDING, thread_axis)
    what = f"bind({thread_axis})"
    _check_concurrent(func, loop, what, as_kind,
                      cross_thread_reduce=thread_axis.startswith("threadIdx"))
    same_axis = _same_kernel_axis(func, loop, thread_axis)
    for other, relation in same_axis:
        _check_extent(loop, other, thread_axis)
        outer, inner = (other, loop) if relation == "outer" else (loop, other)
        if uses_var(inner, outer.loop_var):
            raise ScheduleError(
                f"{what}: loop {inner.loop_var.name} inside loop {outer.loop_var.name}, both "
                f"bound to {thread_axis}, would be the same thread index, but its body uses "
                f"{outer.loop_var.name}; on the GPU it would run only where the two are equal")
    new = _with_kind(func, loop, THREAD_BINDING, thread_axis)
    # The enclosing loop's threads now split the work of this loop between them: they are
    # asked again, as threads, whether they can run side by side.
    for other, relation in same_axis:
        if relation == "outer":
            _check_independent(new, find_loop(new, other.loop_var).node,
                               f"{what} of loop {name}", as_kind)
    return new


def _check_extent(loop: For, other: For, axis: str) -> None:
    check(other.extent == loop.extent,
          f"bind: loop {loop.loop_var.name} has extent {loop.extent} but loop "
          f"{other.loop_var.name} is already bound to {axis} with extent {other.extent}")


def _enclosing_fors(func: PrimFunc, loop: For) -> list[For]:
    return [n for n in find_loop(func, loop.loop_var).path if isinstance(n, For)]


def _kernel_root(chain: list[For], loop: For) -> For | None:
    """The outermost loop of ``chain`` (a loop and its enclosing loops, outer first) bound to
    blockIdx / threadIdx, ``loop`` counting as bound: the loop whose nest is one kernel."""
    for f in chain:
        if f is loop or (f.thread_binding is not None and f.thread_binding != "vthread"):
            return f
    return None


def _same_kernel_axis(func: PrimFunc, loop: For, axis: str) -> list[tuple[For, str]]:
    """(loop, relation) for every other loop bound to ``axis`` in the kernel ``loop`` would be
    part of once bound: relation "outer" when it encloses ``loop``, "inner" when ``loop``
    encloses it, "apart" otherwise.  Loops bound to the axis under another outermost thread
    loop belong to another kernel launch, where the axis may have another extent."""
    enclosing = _enclosing_fors(func, loop)
    root = _kernel_root(enclosing + [loop], loop)
    out = []
    for other in collect(func.body, For):
        if other.thread_binding != axis or other is loop:
            continue
        chain = _enclosing_fors(func, other) + [other]
        if _kernel_root(chain, loop) is not root:
            continue
        if any(f is other for f in enclosing):
            out.append((other, "outer"))
        elif any(f is loop for f in chain):
            out.append((other, "inner"))
        else:
            out.append((other, "apart"))
    return out


def _json_value(value, where: str):
    """Annotation values are JSON-like; lists become tuples so IR nodes stay hashable."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ScheduleError(f"{where}: annotation value {value!r} is not finite")
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_json_value(v, where) for v in value)
    raise ScheduleError(f"{where}: annotation value {value!r} of type {type(value).__name__} "
                        f"is not JSON-like (int, float, str, bool, None or lists of them)")


# Annotations whose value the post-processor and lowering read as a count: a non-negative int.
# NOTE: the keys are spelled here rather than imported from rules/ and postproc, which sit
# above the primitives.
COUNT_ANNOTATIONS = ("pragma_auto_unroll_max_step", "meta_schedule.unroll_explicit",
                     "meta_schedule.parallel", "meta_schedule.vectorize")


def _check_count(key: str, value, where: str) -> None:
    if key in COUNT_ANNOTATIONS:
        check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
              f"{where}: annotation {key} takes a non-negative int (a step or extent), got "
              f"{value!r}")


def _set_annotation(annotations: tuple, key: str, value) -> tuple:
    return tuple((k, v) for k, v in annotations if k != key) + ((key, value),)


def annotate(func: PrimFunc, target, key: str, value) -> PrimFunc:
    """Attach ``key = value`` to a loop (``target`` a loop Var) or a block (a block name),
    replacing an earlier value of the same key.

        for k in range(64): ...  --annotate(k, "pragma_auto_unroll_max_step", 16)-->
        for k in range(64) [pragma_auto_unroll_max_step=16]: ...
    """
    check(isinstance(key, str) and key != "", f"annotate: key must be a non-empty str, got {key!r}")
    if isinstance(target, Var):
        loop = find_loop(func, target).node
        value = _json_value(value, f"annotate loop {target.name}")
        _check_count(key, value, f"annotate loop {target.name}")
        new = For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                  loop.thread_binding, _set_annotation(loop.annotations, key, value))
        return replace(func, loop, new)
    realize = find_block(func, target).node
    value = _json_value(value, f"annotate block {target}")
    _check_count(key, value, f"annotate block {target}")
    block: Block = realize.block
    new_block = Block(block.name, block.iter_vars, block.reads, block.writes, block.body,
                      block.init, block.alloc_buffers,
                      _set_annotation(block.annotations, key, value))
    return replace(func, block, new_block)


def unannotate(func: PrimFunc, target, key: str) -> PrimFunc:
    """Remove annotation ``key`` from a loop (a loop Var) or a block (a block name).
    Precondition: the annotation is there."""
    if isinstance(target, Var):
        loop = find_loop(func, target).node
        check(any(k == key for k, _ in loop.annotations),
              f"unannotate: loop {target.name} has no annotation {key!r}")
        new = For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                  loop.thread_binding, tuple((k, v) for k, v in loop.annotations if k != key))
        return replace(func, loop, new)
    block = find_block(func, target).node.block
    check(any(k == key for k, _ in block.annotations),
          f"unannotate: block {target} has no annotation {key!r}")
    new_block = Block(block.name, block.iter_vars, block.reads, block.writes, block.body,
                      block.init, block.alloc_buffers,
                      tuple((k, v) for k, v in block.annotations if k != key))
    return replace(func, block, new_block)
