"""Simplifier: constant folding and algebraic identities over expressions and statements."""
from __future__ import annotations

from .expr import (
    And, BinOp, Cast, Cmp, IntImm, Not, Or, PrimExpr, Select, binary, cast, compare, logic_and,
    logic_not, logic_or, select,
)
from .stmt import IfThenElse, SeqStmt, seq
from .visitor import transform


def _rebuild(n):
    # Re-run the folding constructors on nodes whose children may have become constants.
    if isinstance(n, BinOp):
        return binary(n.op, n.a, n.b)
    if isinstance(n, Cmp):
        return compare(n.op, n.a, n.b)
    if isinstance(n, And):
        return logic_and(n.a, n.b)
    if isinstance(n, Or):
        return logic_or(n.a, n.b)
    if isinstance(n, Not):
        return logic_not(n.a)
    if isinstance(n, Select):
        return select(n.condition, n.true_value, n.false_value)
    if isinstance(n, Cast):
        return cast(n.dtype, n.value)
    if isinstance(n, IfThenElse) and isinstance(n.condition, IntImm):
        return n.then_case if n.condition.value else (n.else_case or SeqStmt(()))
    if isinstance(n, SeqStmt):
        return seq(*n.stmts)
    return None


def simplify(node, dom: dict | None = None):
    """Simplify an expression or statement.  ``dom`` maps variables to inclusive integer
    bounds ``(lo, hi)`` that the simplifier may use."""
    return transform(node, _rebuild)


def simplify_expr(e: PrimExpr, dom: dict | None = None) -> PrimExpr:
    return simplify(e, dom)
