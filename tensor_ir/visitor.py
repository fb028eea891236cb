"""Generic walk / transform / substitute over IR trees.

Nodes are frozen dataclasses, so one reflective implementation serves every node kind.  ``Var``
and ``Buffer`` are definitions: they are visited but never descended into or rebuilt by the
generic machinery (a callback may still replace them).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Callable

from .buffer import Buffer
from .expr import FloatImm, IntImm, Node, PrimExpr, Var

_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAVES = (Var, Buffer, IntImm, FloatImm)
# Per node class: a function returning its field values as a tuple (in field order).
_GETTERS: dict[type, Callable] = {}
# Per node class: whether dataclasses.replace may be done by a positional constructor call.
_POSITIONAL: dict[type, bool] = {}


def node_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        # Fields outside __init__ are caches, not structure (Cmp's truth from Python's ==).
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        _FIELDS[cls] = names
    return names


def field_values(cls: type) -> Callable:
    """A function returning the field values of a ``cls`` node as a tuple, in field order."""
    # NOTE: the traversals below run over every node of a function many times per schedule
    # primitive; one attrgetter call per node is much cheaper than a getattr per field.
    getter = _GETTERS.get(cls)
    if getter is None:
        names = node_fields(cls)
        if not names:
            getter = _no_values
        elif len(names) == 1:
            single = operator.attrgetter(names[0])
            getter = lambda n: (single(n),)  # noqa: E731 -- a tuple, like attrgetter(a, b)
        else:
            getter = operator.attrgetter(*names)
        _GETTERS[cls] = getter
    return getter


def _no_values(node) -> tuple:
    return ()


def _rebuild(node, changes: dict):
    """``dataclasses.replace(node, **changes)``, by a positional call when every field is a
    plain init field (the common case, and several times faster)."""
    cls = type(node)
    positional = _POSITIONAL.get(cls)
    if positional is None:
        positional = all(not f.kw_only for f in dataclasses.fields(cls) if f.init)
        _POSITIONAL[cls] = positional
    if not positional:
        return dataclasses.replace(node, **changes)
    values = field_values(cls)(node)
    return cls(*[changes[name] if name in changes else value
                 for name, value in zip(node_fields(cls), values)])


def map_children(node, fn: Callable):
    """``node`` with ``fn`` applied to each direct child node (inside tuple fields too); the
    same object when nothing changes.  For rewrites that carry context down the tree, which
    the bottom-up :func:`transform` cannot."""
    if isinstance(node, _LEAVES) or not isinstance(node, Node):
        return node
    cls = type(node)

    def visit_tuple(values: tuple) -> tuple:
        new = tuple(fn(v) if isinstance(v, Node) else visit_tuple(v) if isinstance(v, tuple)
                    else v for v in values)
        return values if all(a is b for a, b in zip(new, values)) else new

    changes = {}
    for name, old in zip(node_fields(cls), field_values(cls)(node)):
        if isinstance(old, Node):
            new = fn(old)
        elif isinstance(old, tuple):
            new = visit_tuple(old)
        else:
            continue
        if new is not old:
            changes[name] = new
    return _rebuild(node, changes) if changes else node


def children(node) -> list:
    """Direct child nodes of ``node`` (nodes inside tuple fields included)."""
    out = []
    if isinstance(node, _LEAVES) or not isinstance(node, Node):
        return out
    for value in field_values(type(node))(node):
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
    pop, push = stack.pop, stack.extend
    while stack:
        n = pop()
        if fn(n) is False:
            continue
        kids = children(n)
        if kids:
            kids.reverse()
            push(kids)


def transform(node, fn: Callable[[Node], Node | None]):
    """Rebuild ``node`` bottom-up; ``fn(new_node)`` may return a replacement (or None to keep).

    Subtrees that do not change are returned as the same objects, so a no-op transform is cheap
    and keeps identity.
    """
    memo: dict[int, object] = {}

    def visit_tuple(n: tuple):
        new = [visit(v) if isinstance(v, (Node, tuple)) else v for v in n]
        for a, b in zip(new, n):
            if a is not b:
                return tuple(new)
        return n

    def visit(n):
        if isinstance(n, tuple):
            return visit_tuple(n)
        if not isinstance(n, Node):
            return n
        key = id(n)
        if key in memo:
            return memo[key]
        if isinstance(n, _LEAVES):
            rebuilt = n
        else:
            cls = type(n)
            changes = None
            for name, old in zip(node_fields(cls), field_values(cls)(n)):
                if isinstance(old, Node):
                    new = visit(old)
                elif isinstance(old, tuple):
                    new = visit_tuple(old)
                else:
                    continue
                if new is not old:
                    if changes is None:
                        changes = {}
                    changes[name] = new
            rebuilt = _rebuild(n, changes) if changes else n
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
    from .stmt import Stmt

    found = []
    if isinstance(cls, type) and issubclass(cls, Stmt):
        # No expression node has a statement inside it, so a search for statements (loops,
        # blocks, stores -- the common case) need not enter the expressions, which are most
        # of the nodes.  Same nodes, same order.
        stack = [node]
        pop, push = stack.pop, stack.extend
        while stack:
            n = pop()
            if isinstance(n, cls):
                found.append(n)
            if isinstance(n, (PrimExpr, Buffer)) or not isinstance(n, Node):
                continue
            kids = [k for k in children(n) if not isinstance(k, PrimExpr)]
            if kids:
                kids.reverse()
                push(kids)
        return found

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
    """Whether ``var`` occurs in ``node`` (the nodes :func:`walk` visits)."""
    stack = [node]
    pop, push = stack.pop, stack.extend
    while stack:
        n = pop()
        if n is var:
            return True
        if isinstance(n, _LEAVES) or not isinstance(n, Node):
            continue
        for value in field_values(type(n))(n):
            if value is var:
                return True
            if isinstance(value, Node):
                if not isinstance(value, _LEAVES):
                    stack.append(value)
            elif isinstance(value, tuple):
                push(_tuple_nodes(value))
    return False


def _tuple_nodes(value: tuple) -> list:
    out: list = []
    _collect(value, out)
    return out
