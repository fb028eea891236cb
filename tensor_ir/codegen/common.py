"""What every code generator (LLVM, GPU C) needs: a buffer's constant shape, the row-major
element offset of an access, and the size of a nest once unrolled (the unroll budget)."""
from __future__ import annotations

from ..buffer import Buffer
from ..errors import BuildError
from ..expr import IntImm, PrimExpr, binary, cast
from ..stmt import Allocate, For, IfThenElse, LetStmt, SeqStmt

__all__ = ["const_shape", "flat_index", "unrolled_steps"]

# What a loop of non-constant extent counts as: more than any unroll budget.
UNBOUNDED_STEPS = 1 << 40


def const_shape(buf: Buffer, backend: str, what: str = "") -> tuple[int, ...]:
    """The shape as ints; a BuildError naming the backend when a dimension is not constant."""
    shape = []
    for s in buf.shape:
        if not isinstance(s, IntImm):
            raise BuildError(f"{backend}: {what + ' ' if what else ''}buffer {buf.name}: shape "
                             f"{s} is not a constant; dynamic shapes are not supported")
        shape.append(s.value)
    return tuple(shape)


def flat_index(buf: Buffer, indices: tuple, backend: str) -> PrimExpr:
    """Row-major element offset of ``buf[indices]`` as an int64 expression."""
    if len(indices) != len(buf.shape):
        raise BuildError(f"{backend}: buffer {buf.name} of rank {len(buf.shape)} accessed "
                         f"with {len(indices)} indices")
    flat = IntImm(0)
    for idx, ext in zip(indices, buf.shape):
        flat = binary("+", binary("*", flat, cast("int64", ext)), cast("int64", idx))
    return flat


def unrolled_steps(s, memo: dict, runs_once=None) -> int:
    """Leaf statements ``s`` executes when every constant loop in it is unrolled (what an
    unroll budget is compared with).  A loop of non-constant extent counts UNBOUNDED_STEPS;
    a loop for which ``runs_once(loop)`` holds counts one iteration (a GPU thread runs one
    iteration of a loop bound to its thread index).  ``memo`` maps id(stmt) -> (stmt, count)
    across calls; it keeps each statement alive so that its id stays unique."""
    key = id(s)
    if key in memo:
        return memo[key][1]
    if isinstance(s, SeqStmt):
        n = sum(unrolled_steps(x, memo, runs_once) for x in s.stmts)
    elif isinstance(s, For):
        body = unrolled_steps(s.body, memo, runs_once)
        if runs_once is not None and runs_once(s):
            n = body
        else:
            n = body * s.extent.value if isinstance(s.extent, IntImm) else UNBOUNDED_STEPS
    elif isinstance(s, IfThenElse):
        n = unrolled_steps(s.then_case, memo, runs_once) + (
            unrolled_steps(s.else_case, memo, runs_once) if s.else_case else 0)
    elif isinstance(s, (LetStmt, Allocate)):
        n = unrolled_steps(s.body, memo, runs_once)
    else:
        n = 1
    memo[key] = (s, n)
    return n
