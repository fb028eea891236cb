"""Index-range proofs for algorithm definitions: every load of a stage stays inside its buffer.

``te.create_prim_func`` runs :func:`check_loads` on each stage body.  For every index of every
load the range of values it takes over the stage's domain is bounded with
:class:`tensor_ir.arith.Analyzer`, and

1. an index proven inside ``[0, extent)`` needs nothing;
2. an index proven to leave the buffer is refused with a :class:`TEError` naming the stage, the
   buffer, the dimension and the index range against the extent -- the interpreter would raise
   ``OutOfBoundsError`` there, and compiled code would read garbage or crash;
3. an index computed from the loop variables that can be proven neither way (a guard the
   analyzer does not follow) gets a guard: the load reads zero when it would leave the
   buffer, so compiled code and the interpreter agree and never touch memory outside it;
4. an index read from memory (``A[I[i]]``) is the caller's data, not the program's: it is left
   to the runtime check (tensor_ir/codegen/checks.py: the LLVM kernel returns an error naming
   the buffer, the index and the extent; the interpreter raises ``OutOfBoundsError``).  A
   zero there would be a wrong answer given silently.

A load under a lazy ``Select`` (``te.if_then_else``, a reduction's ``where=``) is bounded under
the branch's condition: padding written as ``if_then_else(i >= p, A[i - p], 0)`` is in range.
Conditions become facts in two ways: a comparison that involves one variable (``y - 2 >= 0``)
narrows that variable's interval, so the domain stays a box; any other comparison of affine
expressions (``h * 2 + r - 1 >= 0``) bounds every index that differs from it by a constant.
"""
from __future__ import annotations

from . import dtype as dt
from .arith import Analyzer, is_index_dtype
from .errors import TEError
from .expr import (
    And, BufferLoad, Cmp, IntImm, Not, Or, PrimExpr, Select, Var, binary, compare, const,
    logic_and,
)
from .visitor import map_children, substitute, walk

__all__ = ["check_loads"]

_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
# ``a op b`` as an interval of ``a - b`` (None: unbounded on that side).
_DIFF_RANGE = {"<": (None, -1), "<=": (None, 0), ">": (1, None), ">=": (0, None),
               "==": (0, 0)}


class _Context:
    """What holds at one point of an expression: the variables' box, facts about affine
    expressions, and whether the box alone describes the points reached (``exact``)."""

    __slots__ = ("analyzer", "facts", "exact")

    def __init__(self, analyzer: Analyzer, facts: tuple, exact: bool):
        self.analyzer, self.facts, self.exact = analyzer, facts, exact


def check_loads(stage: str, body, dom: dict, display: dict | None = None):
    """Check (and guard where needed) every load in ``body`` over ``dom`` (``Var -> (lo, hi)``
    inclusive).  Returns ``body``, rebuilt only where a guard was added.  ``display`` maps
    variables to the ones to print in messages (the stage's axes)."""
    if any(lo > hi for lo, hi in dom.values()):
        return body  # an empty domain runs nothing
    ctx = _Context(Analyzer(dom), (), True)
    return _Checker(stage, display or {}).visit(body, ctx)


class _Checker:
    def __init__(self, stage: str, display: dict):
        self.stage, self.display = stage, display

    def visit(self, node, ctx: _Context):
        if isinstance(node, Select):
            cond = self.visit(node.condition, ctx)
            taken = _narrow(ctx, cond, True)
            skipped = _narrow(ctx, cond, False)
            # A branch that can never run is left as written: nothing in it executes.
            t = node.true_value if taken is None else self.visit(node.true_value, taken)
            f = node.false_value if skipped is None else self.visit(node.false_value, skipped)
            if cond is node.condition and t is node.true_value and f is node.false_value:
                return node
            return Select(cond, t, f)
        if isinstance(node, BufferLoad):
            indices = tuple(self.visit(i, ctx) for i in node.indices)
            load = node if all(a is b for a, b in zip(indices, node.indices)) \
                else BufferLoad(node.buffer, indices)
            return self.load(load, ctx)
        return map_children(node, lambda child: self.visit(child, ctx))

    def load(self, load: BufferLoad, ctx: _Context) -> PrimExpr:
        buf = load.buffer
        guards = []
        for d, (index, extent) in enumerate(zip(load.indices, buf.shape)):
            if not isinstance(extent, IntImm) or not dt.is_int(index.dtype) \
                    or _reads_memory(index):
                continue
            ext = extent.value
            lo, hi, exact = _index_range(ctx, index)
            if lo is not None and hi is not None and lo >= 0 and hi < ext:
                continue
            outside = (hi is not None and hi < 0) or (lo is not None and lo >= ext)
            if outside or (exact and lo is not None and hi is not None):
                self.refuse(load, d, index, lo, hi, ext)
            if lo is None or lo < 0:
                guards.append(compare("<=", IntImm(0, index.dtype), index))
            if hi is None or hi >= ext:
                guards.append(compare("<", index, IntImm(ext, index.dtype)))
        if not guards:
            return load
        cond = guards[0]
        for g in guards[1:]:
            cond = logic_and(cond, g)
        return Select(cond, load, const(0, buf.dtype))

    def refuse(self, load: BufferLoad, d: int, index, lo, hi, ext: int) -> None:
        shown = substitute(load, self.display) if self.display else load
        text = f"{shown.buffer.name}[{', '.join(str(i) for i in shown.indices)}]"
        span = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
        raise TEError(
            f"stage {self.stage}: load {text} is out of bounds in dimension {d} of buffer "
            f"{load.buffer.name}: the index {shown.indices[d]} ranges over {span} but the "
            f"extent is {ext} (valid indices [0, {ext - 1}]); guard it with te.if_then_else "
            f"or fix the index")


def _reads_memory(index: PrimExpr) -> bool:
    found = []
    walk(index, lambda n: found.append(n) if isinstance(n, BufferLoad) else None)
    return bool(found)


def _index_range(ctx: _Context, index: PrimExpr):
    """(lo, hi, exact) of ``index`` at this point; lo / hi None when unbounded; exact when
    both ends are values the index really takes (an affine index over an exact box)."""
    an = ctx.analyzer
    bound = an.bound(index)
    lo, hi = bound if bound is not None else (None, None)
    for expr, flo, fhi in ctx.facts:
        diff = an.const_diff(index, expr)
        if diff is None:
            continue
        if flo is not None:
            lo = flo + diff if lo is None else max(lo, flo + diff)
        if fhi is not None:
            hi = fhi + diff if hi is None else min(hi, fhi + diff)
    exact = ctx.exact and bound is not None and _affine(an, index) and (lo, hi) == tuple(bound)
    return lo, hi, exact


def _affine(an: Analyzer, index: PrimExpr) -> bool:
    """Whether ``index`` is a linear function of variables: over a box, such a function
    reaches both ends of its bound."""
    if not is_index_dtype(index.dtype):
        return False
    return all(isinstance(atom, Var) for atom, _ in an.linear_form(index).terms)


def _conjuncts(cond: PrimExpr, holds: bool, out: list) -> bool:
    """Append ``(a, op, b)`` for each comparison that must hold when ``cond`` is ``holds``
    (None for a part that is not such a comparison); False when ``cond`` is a constant that
    contradicts ``holds``."""
    if isinstance(cond, IntImm):
        return bool(cond.value) == holds
    if isinstance(cond, Not):
        return _conjuncts(cond.a, not holds, out)
    if isinstance(cond, And) and holds or isinstance(cond, Or) and not holds:
        return _conjuncts(cond.a, holds, out) and _conjuncts(cond.b, holds, out)
    if isinstance(cond, Cmp) and is_index_dtype(cond.a.dtype) and is_index_dtype(cond.b.dtype):
        out.append((cond.a, cond.op if holds else _NEGATE[cond.op], cond.b))
    else:
        out.append(None)
    return True


def _narrow(ctx: _Context, cond: PrimExpr, holds: bool) -> _Context | None:
    """The context where ``cond`` is ``holds``; None when that is impossible (a dead branch)."""
    parts: list = []
    if not _conjuncts(cond, holds, parts):
        return None
    an = ctx.analyzer
    box = dict(an.dom)
    updates: dict = {}
    facts = list(ctx.facts)
    exact = ctx.exact
    for part in parts:
        if part is None or part[1] == "!=":
            exact = False  # a point set the box cannot describe
            continue
        a, op, b = part
        diff = binary("-", a, b)
        lo, hi = _DIFF_RANGE[op]
        form = an.linear_form(diff)
        if len(form.terms) == 1 and isinstance(form.terms[0][0], Var):
            var, k = form.terms[0]
            current = updates.get(var, box.get(var))
            if current is not None:
                # k * var + c in [lo, hi]  =>  var in [ceil((lo - c) / k), floor((hi - c) / k)]
                # for k > 0, the ends swapped for k < 0.
                ends = [None if e is None else e - form.const for e in (lo, hi)]
                if k < 0:
                    ends.reverse()
                low = current[0] if ends[0] is None else max(current[0], -(-ends[0] // k))
                high = current[1] if ends[1] is None else min(current[1], ends[1] // k)
                if low > high:
                    return None
                updates[var] = (low, high)
                continue
        facts.append((diff, lo, hi))
        exact = False
    return _Context(an.scoped(updates) if updates else an, tuple(facts), exact)
