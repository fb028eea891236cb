"""Simplifier: constant folding, canonical affine forms and bound-aware rewriting of
expressions and statements.

The arithmetic lives in :mod:`tensor_ir.arith`; this module walks statements and gives each
expression the facts that hold where it sits:

- inside ``For(v, min, extent)`` the loop variable ranges over ``[min, min + extent - 1]``;
- inside ``LetStmt(v, value)`` the variable ranges over the bounds of ``value``;
- inside a block, each iteration variable ranges over its declared domain;
- inside the branches of ``IfThenElse`` (and of ``Select``), comparisons of a variable with a
  constant in the condition narrow that variable.

A conditional with a provable condition folds to one branch, loops whose body became empty
disappear, and index expressions come out canonical (``(io*32 + ii) // 32`` with ``ii`` in
``[0, 31]`` is ``io``).  Blocks are never removed: schedule primitives look them up by name.
"""
from __future__ import annotations

import dataclasses

from .arith import Analyzer, canonical, int_bound, is_index_dtype, linear_form, prove
from .expr import IntImm, Not, PrimExpr
from .func import PrimFunc
from .stmt import (
    Allocate, Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse, IterVar,
    LetStmt, Range, SeqStmt, Stmt, seq,
)
from .visitor import node_fields

_EMPTY = SeqStmt(())


def simplify(node, dom: dict | None = None):
    """Simplify an expression, statement or PrimFunc.

    ``dom`` maps variables to inclusive integer bounds ``(lo, hi)`` that hold for the whole of
    ``node``; loop, let and block domains inside ``node`` are collected automatically.
    """
    an = Analyzer(dom)
    return _Simplifier().visit(node, an)


def simplify_expr(e: PrimExpr, dom: dict | None = None) -> PrimExpr:
    """Simplify one expression under ``dom`` (``{Var: (lo, hi)}`` inclusive)."""
    return Analyzer(dom).simplify(e)


def _is_empty(s) -> bool:
    return isinstance(s, SeqStmt) and not s.stmts


def _range_of(an: Analyzer, min_e: PrimExpr, extent: PrimExpr):
    """Inclusive bounds of a variable iterating over ``[min_e, min_e + extent)``, or None."""
    if not is_index_dtype(min_e.dtype):
        return None
    lo_b = an.bound(min_e)
    ext_b = an.bound(extent)
    if lo_b is None or ext_b is None or ext_b[1] < 1:
        # NOTE: an empty or unknown range gives no facts (an empty loop body never runs,
        # but the loop may hold blocks that schedules still need to find).
        return None
    return (lo_b[0], lo_b[1] + ext_b[1] - 1)


class _Simplifier:
    """Statement walker; expressions are delegated to the scope's Analyzer."""

    def visit(self, node, an: Analyzer):
        if isinstance(node, PrimExpr):
            return an.simplify(node)
        if isinstance(node, Stmt):
            return self.stmt(node, an)
        if isinstance(node, tuple):
            new = tuple(self.visit(v, an) for v in node)
            return node if all(a is b for a, b in zip(new, node)) else new
        if isinstance(node, PrimFunc):
            body = self.visit(node.body, an)
            return node if body is node.body else node.with_body(body)
        if isinstance(node, (Range, BufferRegion, IterVar)):
            return self.generic(node, an)
        return node

    def generic(self, node, an: Analyzer):
        """Simplify the fields of a node kind without a rule of its own."""
        changes = {}
        for name in node_fields(type(node)):
            old = getattr(node, name)
            if isinstance(old, (PrimExpr, Stmt, tuple, Range, BufferRegion, IterVar)):
                new = self.visit(old, an)
                if new is not old:
                    changes[name] = new
        return dataclasses.replace(node, **changes) if changes else node

    def stmt(self, s, an: Analyzer):
        if isinstance(s, For):
            return self.for_(s, an)
        if isinstance(s, SeqStmt):
            stmts = tuple(self.stmt(x, an) for x in s.stmts)
            if all(a is b for a, b in zip(stmts, s.stmts)) and not any(map(_is_empty, stmts)):
                return s
            return seq(*stmts)
        if isinstance(s, IfThenElse):
            return self.if_(s, an)
        if isinstance(s, LetStmt):
            value = an.simplify(s.value)
            rng = an.bound(value) if is_index_dtype(value.dtype) else None
            # Always rebind: an outer fact about a reused variable must not leak in.
            body = self.stmt(s.body, an.scoped({s.var: rng}))
            if value is s.value and body is s.body:
                return s
            return LetStmt(s.var, value, body)
        if isinstance(s, BufferStore):
            value = an.simplify(s.value)
            indices = tuple(an.simplify(i) for i in s.indices)
            if value is s.value and all(a is b for a, b in zip(indices, s.indices)):
                return s
            return BufferStore(s.buffer, value, indices)
        if isinstance(s, Allocate):
            body = self.stmt(s.body, an)
            return s if body is s.body else Allocate(s.buffer, body)
        if isinstance(s, Evaluate):
            value = an.simplify(s.value)
            return s if value is s.value else Evaluate(value)
        if isinstance(s, BlockRealize):
            return self.realize(s, an)
        if isinstance(s, Block):
            return self.block(s, an)
        return self.generic(s, an)

    def for_(self, s: For, an: Analyzer):
        min_e = an.simplify(s.min)
        extent = an.simplify(s.extent)
        inner = an.scoped({s.loop_var: _range_of(an, min_e, extent)})
        body = self.stmt(s.body, inner)
        if _is_empty(body):
            return _EMPTY
        if min_e is s.min and extent is s.extent and body is s.body:
            return s
        return dataclasses.replace(s, min=min_e, extent=extent, body=body)

    def if_(self, s: IfThenElse, an: Analyzer):
        cond = an.simplify(s.condition)
        if isinstance(cond, IntImm):
            branch = s.then_case if cond.value else s.else_case
            return _EMPTY if branch is None else self.stmt(branch, an)
        then_an = an.assume(cond, True)
        else_an = an.assume(cond, False)
        if then_an is None:  # the condition can never hold
            return _EMPTY if s.else_case is None else self.stmt(s.else_case, else_an or an)
        if else_an is None:  # the condition always holds
            return self.stmt(s.then_case, then_an)
        then_case = self.stmt(s.then_case, then_an)
        else_case = None if s.else_case is None else self.stmt(s.else_case, else_an)
        if else_case is not None and _is_empty(else_case):
            else_case = None
        if _is_empty(then_case):
            if else_case is None:
                return _EMPTY
            return IfThenElse(an.simplify(Not(cond)), else_case, None)
        if cond is s.condition and then_case is s.then_case and else_case is s.else_case:
            return s
        return IfThenElse(cond, then_case, else_case)

    def realize(self, s: BlockRealize, an: Analyzer):
        values = tuple(an.simplify(v) for v in s.iter_values)
        predicate = an.simplify(s.predicate)
        block = self.block(s.block, an)
        if predicate is s.predicate and block is s.block and all(
                a is b for a, b in zip(values, s.iter_values)):
            return s
        return BlockRealize(values, predicate, block)

    def block(self, b: Block, an: Analyzer):
        iter_vars = tuple(self.generic(iv, an) for iv in b.iter_vars)
        inner = an.scoped({iv.var: _range_of(an, iv.dom.min, iv.dom.extent)
                           for iv in iter_vars})
        reads = tuple(self.generic(r, inner) for r in b.reads)
        writes = tuple(self.generic(w, inner) for w in b.writes)
        body = self.stmt(b.body, inner)
        init = None if b.init is None else self.stmt(b.init, inner)
        same = (body is b.body and init is b.init
                and all(x is y for x, y in zip(iter_vars, b.iter_vars))
                and all(x is y for x, y in zip(reads, b.reads))
                and all(x is y for x, y in zip(writes, b.writes)))
        if same:
            return b
        return dataclasses.replace(b, iter_vars=iter_vars, reads=reads, writes=writes,
                                   body=body, init=init)


__all__ = ["simplify", "simplify_expr", "canonical", "prove", "linear_form", "int_bound",
           "Analyzer"]
