"""Generic walk / transform / substitute over IR trees.

Nodes are frozen dataclasses, so one reflective implementation serves every node kind.  ``Var``
and ``Buffer`` are definitions: they are visited but never descended into or rebuilt by the
generic machinery (a callback may still replace them).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .buffer import Buffer
from .expr import FloatImm, IntImm, Node, PrimExpr, Var

_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAVES = (Var, Buffer, IntImm, FloatImm)


def node_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        _FIELDS[cls] = names
    return names


def children(node) -> list:
    """Direct child nodes of ``node`` (nodes inside tuple fields included)."""
    out = []
    if isinstance(node, _LEAVES) or not isinstance(node, Node):
        return out
    for name in node_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Node):
            out.append(value)
        elif isinstance(value, tuple):
            _collect(value, out)
    return out


def _collect(value: tuple, out: list) -> None:
    for v in value:
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, tuple):
            _collect(v, out)


def walk(node, fn: Callable[[Node], object]) -> None:
    """Call ``fn`` on every node in pre-order.  If ``fn`` returns False, skip that subtree."""
    stack = [node]
    while stack:
        n = stack.pop()
        if fn(n) is False:
            continue
        kids = children(n)
        kids.reverse()
        stack.extend(kids)


def transform(node, fn: Callable[[Node], Node | None]):
    """Rebuild ``node`` bottom-up; ``fn(new_node)`` may return a replacement (or None to keep).

    Subtrees that do not change are returned as the same objects, so a no-op transform is cheap
    and keeps identity.
    """
    memo: dict[int, object] = {}

    def visit(n):
        if isinstance(n, tuple):
            new = tuple(visit(v) for v in n)
            return n if all(a is b for a, b in zip(new, n)) else new
        if not isinstance(n, Node):
            return n
        key = id(n)
        if key in memo:
            return memo[key]
        if isinstance(n, _LEAVES):
            rebuilt = n
        else:
            changes = {}
            for name in node_fields(type(n)):
                old = getattr(n, name)
                if isinstance(old, (Node, tuple)):
                    new = visit(old)
                    if new is not old:
                        changes[name] = new
            rebuilt = dataclasses.replace(n, **changes) if changes else n
        out = fn(rebuilt)
        result = rebuilt if out is None else out
        memo[key] = result
        return result

    return visit(node)


def substitute(node, mapping: dict):
    """Replace variables (or any node keyed by identity, such as buffers) by ``mapping``."""
    if not mapping:
        return node
    vars_only = all(isinstance(k, Var) for k in mapping)

    def fn(n):
        if isinstance(n, Var) or not vars_only:
            return mapping.get(n)
        return None

    return transform(node, fn)


def collect(node, cls) -> list:
    """All nodes of type ``cls`` in pre-order."""
    found = []

    def fn(n):
        if isinstance(n, cls):
            found.append(n)

    walk(node, fn)
    return found


def free_vars(node) -> set:
    """Variables used in ``node`` that are not defined inside it (by loops or blocks)."""
    from .stmt import Block, For, LetStmt

    used, defined = set(), set()

    def fn(n):
        if isinstance(n, Var):
            used.add(n)
        elif isinstance(n, For):
            defined.add(n.loop_var)
        elif isinstance(n, LetStmt):
            defined.add(n.var)
        elif isinstance(n, Block):
            for iv in n.iter_vars:
                defined.add(iv.var)

    walk(node, fn)
    return used - defined


def uses_var(node, var: Var) -> bool:
    found = False

    def fn(n):
        nonlocal found
        if found:
            return False
        if n is var:
            found = True
        return None

    walk(node, fn)
    return found


def is_expr(node) -> bool:
    return isinstance(node, PrimExpr)
