"""Integer arithmetic reasoning: canonical affine forms, bounds, floordiv/floormod rules,
decisions of comparisons under known variable domains, and symbolic bounds of an expression
over ranges of its variables.  Every other module asks this one about index arithmetic.

The central object is :class:`Analyzer`, which holds a domain (``Var -> (lo, hi)`` inclusive)
and memo tables.  Index expressions (dtype int32 / int64) are brought to a canonical affine
form: a sum of ``coefficient * atom`` plus a constant, where an atom is a variable or a
non-linear sub-expression (floordiv, floormod, min, max, product of non-constants, select,
cast, load, ...) that is itself canonical.  Like terms merge, and the sum is rebuilt in a
deterministic order: positive terms first, larger coefficients first, the constant last.

Arithmetic is over the integers (no overflow), as in every index simplifier: index
expressions are int64 and tile arithmetic stays far from the limits.  Narrow integer types
(int8, int16, uint8, bool) and floats get constant folding only, because their values wrap or
round and algebraic rewriting would change them.

Floor semantics throughout: ``a // c`` rounds toward minus infinity and ``a % c`` has the sign
of ``c``, exactly as Python's operators.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import dtype as dt
from .errors import DTypeError
from .expr import (
    And, BinOp, BufferLoad, Call, Cast, Cmp, FloatImm, IntImm, Not, Or, PrimExpr, Select, Var,
    binary, cast, compare, logic_and, logic_not, logic_or, select,
)
from .visitor import uses_var

Interval = tuple  # (lo, hi) inclusive, Python ints

# Dtypes whose arithmetic the analyzer rewrites algebraically.
INDEX_DTYPES = ("int32", "int64")

_TRUE = IntImm(1, "bool")
_FALSE = IntImm(0, "bool")

# Comparison op -> op with swapped operands / logical negation.
_SWAP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}

# The recombination rules in Analyzer._recombine are applied at most this many times per sum;
# every application removes at least one atom, so the bound only guards against surprises.
_MAX_RECOMBINE = 16


def is_index_dtype(dtype: str) -> bool:
    return dtype in INDEX_DTYPES


def _imm(value: int, dtype: str) -> IntImm:
    """An integer constant wrapped into ``dtype`` (only reached by overflowing programs)."""
    nbits = dt.bits(dtype)
    lo, hi = -(1 << (nbits - 1)), (1 << (nbits - 1)) - 1
    if not lo <= value <= hi:
        value = (value - lo) % (1 << nbits) + lo
    return IntImm(value, dtype)


def _bool(value: bool) -> IntImm:
    return _TRUE if value else _FALSE


# ---------------------------------------------------------------------------------------------
# Affine sums
# ---------------------------------------------------------------------------------------------

class _Sum:
    """``sum(coeff * atom) + const`` with atoms as dict keys (insertion order is irrelevant:
    rendering sorts).  Treated as immutable once built."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict, const: int):
        self.terms = terms
        self.const = const

    def is_const(self) -> bool:
        return not self.terms


def _add(x: _Sum, y: _Sum, scale: int = 1) -> _Sum:
    """``x + scale * y``."""
    if not y.terms:
        return _Sum(x.terms, x.const + scale * y.const)
    terms = dict(x.terms)
    for atom, k in y.terms.items():
        v = terms.get(atom, 0) + scale * k
        if v:
            terms[atom] = v
        else:
            terms.pop(atom, None)
    return _Sum(terms, x.const + scale * y.const)


def _scale(x: _Sum, k: int) -> _Sum:
    if k == 0:
        return _Sum({}, 0)
    if k == 1:
        return x
    return _Sum({a: v * k for a, v in x.terms.items()}, x.const * k)


def _atom(atom: PrimExpr, coeff: int = 1) -> _Sum:
    return _Sum({atom: coeff}, 0)


def _content(x: _Sum) -> int:
    """gcd of every coefficient and the constant (0 for the zero sum)."""
    g = abs(x.const)
    for k in x.terms.values():
        g = math.gcd(g, k)
    return g


def _div_exact(x: _Sum, g: int) -> _Sum:
    return _Sum({a: v // g for a, v in x.terms.items()}, x.const // g)


@dataclass(frozen=True, slots=True)
class LinearForm:
    """The public view of a canonical affine form: ``sum(coeff * atom) + const``.

    ``terms`` is in canonical order; atoms are canonical expressions (variables or non-linear
    sub-expressions).  ``coeff(atom)`` reads one coefficient (0 when absent).
    """

    terms: tuple  # ((atom, coeff), ...)
    const: int
    dtype: str

    def coeff(self, atom: PrimExpr) -> int:
        for a, k in self.terms:
            if a is atom or (not isinstance(a, Var) and a == atom):
                return k
        return 0

    @property
    def is_const(self) -> bool:
        return not self.terms


# ---------------------------------------------------------------------------------------------
# Deterministic ordering of atoms
# ---------------------------------------------------------------------------------------------


class _KeyCache:
    """Short text of expressions, used only to order atoms deterministically.  Keys are
    object ids, so each entry keeps its expression alive."""

    __slots__ = ("table",)

    def __init__(self):
        self.table: dict[int, tuple] = {}

    def text(self, e) -> str:
        hit = self.table.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, Var):
            s = e.name
        elif isinstance(e, (IntImm, FloatImm)):
            s = repr(e.value)
        elif isinstance(e, BinOp):
            a, b = self.text(e.a), self.text(e.b)
            s = f"{e.op}({a},{b})" if e.op in ("min", "max") else f"({a}{e.op}{b})"
        elif isinstance(e, Cmp):
            s = f"({self.text(e.a)}{e.op}{self.text(e.b)})"
        elif isinstance(e, And):
            s = f"({self.text(e.a)}&&{self.text(e.b)})"
        elif isinstance(e, Or):
            s = f"({self.text(e.a)}||{self.text(e.b)})"
        elif isinstance(e, Not):
            s = f"!{self.text(e.a)}"
        elif isinstance(e, Select):
            s = (f"sel({self.text(e.condition)},{self.text(e.true_value)},"
                 f"{self.text(e.false_value)})")
        elif isinstance(e, Cast):
            s = f"{e.dtype}({self.text(e.value)})"
        elif isinstance(e, Call):
            s = f"{e.name}(" + ",".join(self.text(a) for a in e.args) + ")"
        elif isinstance(e, BufferLoad):
            s = f"{e.buffer.name}[" + ",".join(self.text(i) for i in e.indices) + "]"
        else:
            s = type(e).__name__
        self.table[id(e)] = (e, s)
        return s

    def order(self, atom) -> tuple:
        # Variables before compound atoms; then by text.  Ties (two distinct variables with one
        # name) keep the stable order of their appearance.
        return (0 if isinstance(atom, Var) else 1, self.text(atom))


# ---------------------------------------------------------------------------------------------
# The analyzer
# ---------------------------------------------------------------------------------------------

class Analyzer:
    """Simplification, bounds and proofs under a domain ``{Var: (lo, hi)}`` (inclusive).

    Results are memoised per analyzer; an analyzer's domain never changes (use
    :meth:`scoped` for an inner scope with more facts), so memoised answers stay valid.

    ``keep_order`` renders sums with their terms in order of first appearance (and min / max
    and products with their operands as written) instead of the sorted canonical order: the
    arithmetic is the same, only the spelling follows the input.  Schedule primitives use it
    so that the index expressions they build read the way the user wrote them.
    """

    __slots__ = ("dom", "keep_order", "_memo", "_lin", "_bnd", "_divs", "_keys", "_forms")

    def __init__(self, dom: dict | None = None, _keys: _KeyCache | None = None,
                 keep_order: bool = False):
        self.dom: dict = {v: (int(r[0]), int(r[1])) for v, r in dom.items()} if dom else {}
        self.keep_order = keep_order
        # id(expr) -> (expr, result): holding expr keeps the id from being reused.
        self._memo: dict[int, tuple] = {}
        self._lin: dict[int, tuple] = {}
        self._bnd: dict[int, tuple] = {}
        self._divs: dict[tuple, tuple] = {}
        self._forms: dict[int, tuple] = {}
        self._keys = _keys if _keys is not None else _KeyCache()

    def scoped(self, updates: dict) -> "Analyzer":
        """A child analyzer whose domain is this one's with ``updates`` applied; a value of
        None removes the variable (a rebinding with an unknown range)."""
        dom = dict(self.dom)
        for var, rng in updates.items():
            if rng is None:
                dom.pop(var, None)
            else:
                dom[var] = rng
        return Analyzer(dom, self._keys, self.keep_order)

    # -- public queries ---------------------------------------------------------------------
    def simplify(self, e: PrimExpr) -> PrimExpr:
        hit = self._memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._simplify(e)
        if out is not e and type(out) is type(e) and out == e:
            # Keep the caller's object when nothing changed: statements built on it keep
            # their identity too, and no-op simplification stays cheap for later passes.
            out = e
        self._memo[id(e)] = (e, out)
        if out is not e:
            # The result is already simplified; re-simplifying it is a memo hit.
            self._memo[id(out)] = (out, out)
        return out

    def bound(self, e: PrimExpr) -> Interval | None:
        """Inclusive bounds of the integer expression ``e`` (simplified first)."""
        if not (dt.is_int(e.dtype) or e.dtype == "bool"):
            return None
        if isinstance(e, Var):  # what simplifying and bounding it would give, without either
            return self.dom.get(e)
        return self._bound(self.simplify(e))

    def prove(self, cond: PrimExpr) -> bool | None:
        c = self.simplify(cond)
        if isinstance(c, IntImm):
            return bool(c.value)
        return None

    def linear_form(self, e: PrimExpr) -> LinearForm:
        hit = self._forms.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if not is_index_dtype(e.dtype):
            raise DTypeError(f"linear_form needs an int32/int64 expression, got {e.dtype}")
        s = self._linear(e)
        out = LinearForm(tuple(self._sorted_terms(s.terms)), s.const, e.dtype)
        self._forms[id(e)] = (e, out)
        return out

    def sum_bound(self, terms, const: int = 0) -> Interval | None:
        """Inclusive bounds of ``sum(coeff * atom) + const`` over ``(atom, coeff)`` pairs, as
        in a :class:`LinearForm` (like atoms merge first, so they cancel)."""
        merged: dict = {}
        for atom, k in terms:
            merged[atom] = merged.get(atom, 0) + k
        lo = hi = const
        for atom, k in merged.items():
            if not k:
                continue
            b = self.bound(atom)
            if b is None:
                return None
            lo += k * (b[0] if k > 0 else b[1])
            hi += k * (b[1] if k > 0 else b[0])
        return (lo, hi)

    def const_diff(self, a: PrimExpr, b: PrimExpr) -> int | None:
        """``a - b`` when it is a known constant (like terms cancel), else None."""
        if not (is_index_dtype(a.dtype) and is_index_dtype(b.dtype)):
            return None
        d = self._recombine(_add(self._linear(a), self._linear(b), -1))
        return None if d.terms else d.const

    def relax(self, e: PrimExpr, ranges: dict) -> Interval | None:
        """Inclusive symbolic bounds ``(lo, hi)`` of the index expression ``e`` when each
        variable in ``ranges`` (``Var -> (lo, hi)``, expressions) takes every value of its
        interval; other variables stay symbolic.  None when no bound can be stated (a load, a
        product of two relaxed expressions, ...)."""
        if not any(uses_var(e, v) for v in ranges):
            c = self.simplify(e)
            return c, c
        s = self._linear(e)
        lo = hi = _Sum({}, s.const)
        for atom, k in s.terms.items():
            if isinstance(atom, Var):
                ends = ranges.get(atom, (atom, atom))
            else:
                ends = self._relax_atom(atom, ranges)
                if ends is None:
                    return None
            low, high = ends if k > 0 else ends[::-1]
            lo = _add(lo, self._linear(low), k)
            hi = _add(hi, self._linear(high), k)
        return (self._render(self._recombine(lo), e.dtype),
                self._render(self._recombine(hi), e.dtype))

    def _relax_atom(self, atom, ranges: dict) -> Interval | None:
        if not any(uses_var(atom, v) for v in ranges):
            return atom, atom
        if isinstance(atom, BinOp):
            op, c = atom.op, atom.b
            if op in ("//", "%") and isinstance(c, IntImm) and c.value > 0:
                inner = self.relax(atom.a, ranges)
                if op == "//":
                    if inner is None:
                        return None
                    return self.simplify(BinOp("//", inner[0], c)), \
                        self.simplify(BinOp("//", inner[1], c))
                # The relaxed operand stays inside one period when its floordivs agree.
                if inner is not None:
                    span = self.const_diff(inner[1], inner[0])
                    if span is not None and span < c.value and self.const_diff(
                            BinOp("//", inner[1], c), BinOp("//", inner[0], c)) == 0:
                        return self.simplify(BinOp("%", inner[0], c)), \
                            self.simplify(BinOp("%", inner[1], c))
                return _imm(0, atom.dtype), _imm(c.value - 1, atom.dtype)
            if op in ("min", "max"):
                a, b = self.relax(atom.a, ranges), self.relax(atom.b, ranges)
                if a is None or b is None:
                    return None
                return self.simplify(BinOp(op, a[0], b[0])), self.simplify(BinOp(op, a[1], b[1]))
        if isinstance(atom, Cast) and dt.is_int(atom.value.dtype):
            inner = self.relax(atom.value, ranges)
            if inner is None:
                return None
            return Cast(atom.dtype, inner[0]), Cast(atom.dtype, inner[1])
        return None

    # -- dispatch -----------------------------------------------------------------------------
    def _simplify(self, e):
        if isinstance(e, (IntImm, FloatImm)):
            return e
        if isinstance(e, Var):
            rng = self.dom.get(e)
            if rng is not None and rng[0] == rng[1] and is_index_dtype(e.dtype):
                return _imm(rng[0], e.dtype)
            return e
        if isinstance(e, BinOp):
            if is_index_dtype(e.dtype):
                op = e.op
                if op in ("+", "-", "*"):
                    return self._render(self._linear(e), e.dtype)
                if op == "//":
                    return self._floordiv(e)
                if op == "%":
                    return self._floormod(e)
                if op in ("min", "max"):
                    return self._minmax(e)
            a, b = self.simplify(e.a), self.simplify(e.b)
            if a is e.a and b is e.b and not (
                    isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm))):
                return e
            return binary(e.op, a, b)
        if isinstance(e, Cmp):
            a, b = self.simplify(e.a), self.simplify(e.b)
            if is_index_dtype(a.dtype):
                return self._compare(e.op, a, b)
            if a is e.a and b is e.b and not (
                    isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm))):
                return e
            return compare(e.op, a, b)
        if isinstance(e, And):
            a = self.simplify(e.a)
            if isinstance(a, IntImm) and not a.value:
                return _FALSE
            b = self.simplify(e.b)
            if a == b:
                return a
            if _contradicts(a, b):
                return _FALSE
            return logic_and(a, b)
        if isinstance(e, Or):
            a = self.simplify(e.a)
            if isinstance(a, IntImm) and a.value:
                return _TRUE
            b = self.simplify(e.b)
            if a == b:
                return a
            if _contradicts(a, b):
                return _TRUE  # one of a, not-a holds
            return logic_or(a, b)
        if isinstance(e, Not):
            a = self.simplify(e.a)
            if isinstance(a, Cmp) and is_index_dtype(a.a.dtype):
                return self._compare(_NEGATE[a.op], a.a, a.b)
            return logic_not(a)
        if isinstance(e, Select):
            return self._select(e)
        if isinstance(e, Cast):
            v = self.simplify(e.value)
            if v is e.value and not isinstance(v, (IntImm, FloatImm)):
                return e
            return cast(e.dtype, v)
        if isinstance(e, Call):
            args = tuple(self.simplify(a) for a in e.args)
            if all(x is y for x, y in zip(args, e.args)):
                return e
            return Call(e.name, args, e.dtype)
        if isinstance(e, BufferLoad):
            idx = tuple(self.simplify(i) for i in e.indices)
            if all(x is y for x, y in zip(idx, e.indices)):
                return e
            return BufferLoad(e.buffer, idx)
        return e  # Reduce and other non-lowered forms are left to their owners

    # -- affine forms -------------------------------------------------------------------------
    def _linear(self, e) -> _Sum:
        """Canonical sum of the index expression ``e``."""
        hit = self._lin.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, IntImm):
            out = _Sum({}, e.value)
        elif isinstance(e, BinOp) and e.op in ("+", "-"):
            out = _add(self._linear(e.a), self._linear(e.b), 1 if e.op == "+" else -1)
            out = self._recombine(out)
        elif isinstance(e, BinOp) and e.op == "*":
            la, lb = self._linear(e.a), self._linear(e.b)
            if la.is_const():
                out = _scale(lb, la.const)
            elif lb.is_const():
                out = _scale(la, lb.const)
            else:
                out = self._product(la, lb, e.dtype)
        else:
            s = self.simplify(e)
            if isinstance(s, IntImm):
                out = _Sum({}, s.value)
            elif isinstance(s, BinOp) and s.op in ("+", "-", "*"):
                out = self._linear(s)
            else:
                out = _atom(s)
        self._lin[id(e)] = (e, out)
        return out

    def _product(self, la: _Sum, lb: _Sum, dtype: str) -> _Sum:
        """Product of two non-constant sums: one atom, with integer content pulled out so that
        ``(i*2) * (j*3)`` and ``(i*j) * 6`` meet.  Sums are not distributed (that can grow
        the expression exponentially)."""
        ga, gb = _content(la), _content(lb)
        # Keep the first term's sign positive inside the atom, so -x*y and x*-y agree.
        if self._lead_coeff(la) < 0:
            ga = -ga
        if self._lead_coeff(lb) < 0:
            gb = -gb
        fa = self._render(_div_exact(la, ga), dtype)
        fb = self._render(_div_exact(lb, gb), dtype)
        if not self.keep_order and self._keys.order(fb) < self._keys.order(fa):
            fa, fb = fb, fa
        return _atom(BinOp("*", fa, fb), ga * gb)

    def _lead_coeff(self, s: _Sum) -> int:
        first = min(s.terms, key=self._keys.order)
        return s.terms[first]

    def _sorted_terms(self, terms: dict) -> list:
        if self.keep_order:
            return list(terms.items())
        order = self._keys.order
        return sorted(terms.items(), key=lambda t: (t[1] < 0, -abs(t[1]), order(t[0])))

    def _render(self, s: _Sum, dtype: str) -> PrimExpr:
        """Deterministic expression of a sum: positive terms (larger coefficients first), then
        subtracted terms, then the constant."""
        if not s.terms:
            return _imm(s.const, dtype)

        def term(atom, k):
            return atom if k == 1 else BinOp("*", atom, _imm(k, dtype))

        items = self._sorted_terms(s.terms)
        out = None
        for atom, k in items:
            if out is None:
                if k > 0:
                    out = term(atom, k)
                elif s.const > 0 and not self.keep_order:
                    out = BinOp("-", _imm(s.const, dtype), term(atom, -k))
                else:
                    out = BinOp("-", _imm(0, dtype), term(atom, -k))
            elif k > 0:
                out = BinOp("+", out, term(atom, k))
            else:
                out = BinOp("-", out, term(atom, -k))
        lead_k = items[0][1]
        if lead_k > 0 or s.const <= 0 or self.keep_order:
            if s.const > 0:
                out = BinOp("+", out, _imm(s.const, dtype))
            elif s.const < 0:
                out = BinOp("-", out, _imm(-s.const, dtype))
        # Rendered sums are canonical: mark them so re-simplification is a lookup.
        self._memo[id(out)] = (out, out)
        self._lin[id(out)] = (out, s)
        return out

    def _recombine(self, s: _Sum) -> _Sum:
        """Apply ``(x // c) * (k*c) + (x % c) * k -> x * k`` and
        ``x * k - (x // c) * (k*c) -> (x % c) * k`` where the matched terms vanish."""
        for _ in range(_MAX_RECOMBINE):
            changed = False
            for atom, k in s.terms.items():
                if not (isinstance(atom, BinOp) and atom.op in ("//", "%")
                        and isinstance(atom.b, IntImm) and atom.b.value > 0):
                    continue
                c = atom.b.value
                if atom.op == "%":
                    div_form = self._linear(self._div_of(atom.a, atom.b))
                    if _contains(s, div_form, k * c):
                        s = _add(s, div_form, -k * c)
                        s = _add(s, _atom(atom, k), -1)
                        s = _add(s, self._linear(atom.a), k)
                        changed = True
                        break
                elif k % c == 0:
                    m = -k // c
                    x_form = self._linear(atom.a)
                    if x_form.terms and _contains(s, x_form, m):
                        s = _add(s, x_form, -m)
                        s = _add(s, _atom(atom, k), -1)
                        s = _add(s, _atom(self._mod_of(atom.a, atom.b)), m)
                        changed = True
                        break
            if not changed:
                return s
        return s

    def _div_of(self, x, c: IntImm) -> PrimExpr:
        key = ("//", id(x), c.value)
        hit = self._divs.get(key)
        if hit is None or hit[0] is not x:
            hit = (x, self.simplify(BinOp("//", x, c)))
            self._divs[key] = hit
        return hit[1]

    def _mod_of(self, x, c: IntImm) -> PrimExpr:
        key = ("%", id(x), c.value)
        hit = self._divs.get(key)
        if hit is None or hit[0] is not x:
            hit = (x, self.simplify(BinOp("%", x, c)))
            self._divs[key] = hit
        return hit[1]

    # -- bounds -------------------------------------------------------------------------------
    def _bound(self, e) -> Interval | None:
        """Bounds of a simplified integer expression."""
        hit = self._bnd.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._bound_uncached(e)
        self._bnd[id(e)] = (e, out)
        return out

    def _bound_uncached(self, e) -> Interval | None:
        if isinstance(e, IntImm):
            return (e.value, e.value)
        if isinstance(e, Var):
            return self.dom.get(e)
        if e.dtype == "bool":
            return (0, 1)
        if isinstance(e, BinOp):
            if not is_index_dtype(e.dtype):
                # Narrow integers wrap: nothing is known beyond the dtype's range.
                return None
            op = e.op
            if op in ("+", "-"):
                return self._sum_bound(self._linear(e))
            if op == "*":
                la, lb = self._linear(e.a), self._linear(e.b)
                if la.is_const() or lb.is_const():
                    return self._sum_bound(self._linear(e))
                a, b = self._bound(e.a), self._bound(e.b)
                if a is None or b is None:
                    return None
                prods = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
                return (min(prods), max(prods))
            if op == "//":
                return _div_bound(self._bound(e.a), self._bound(e.b))
            if op == "%":
                return _mod_bound(self._bound(e.a), self._bound(e.b))
            if op in ("min", "max"):
                a, b = self._bound(e.a), self._bound(e.b)
                if a is None or b is None:
                    return None
                f = min if op == "min" else max
                return (f(a[0], b[0]), f(a[1], b[1]))
            return None
        if isinstance(e, Select):
            t, f = self._bound(e.true_value), self._bound(e.false_value)
            if t is None or f is None:
                return None
            return (min(t[0], f[0]), max(t[1], f[1]))
        if isinstance(e, Cast):
            src = e.value.dtype
            if dt.is_int(src) or src == "bool":
                inner = self._bound(e.value)
                if inner is None:
                    inner = (int(dt.min_value(src)), int(dt.max_value(src)))
                lo, hi = int(dt.min_value(e.dtype)), int(dt.max_value(e.dtype))
                if lo <= inner[0] and inner[1] <= hi:
                    return inner
            return None
        if isinstance(e, BufferLoad) and e.dtype in ("bool", "int8", "int16", "uint8"):
            return (int(dt.min_value(e.dtype)), int(dt.max_value(e.dtype)))
        return None

    def _sum_bound(self, s: _Sum) -> Interval | None:
        lo = hi = s.const
        for atom, k in s.terms.items():
            b = self._bound(atom)
            if b is None:
                return None
            if k > 0:
                lo += k * b[0]
                hi += k * b[1]
            else:
                lo += k * b[1]
                hi += k * b[0]
        return (lo, hi)

    # -- floordiv / floormod ------------------------------------------------------------------
    def _floordiv(self, e) -> PrimExpr:
        b = self.simplify(e.b)
        if not isinstance(b, IntImm) or b.value == 0:
            a = self.simplify(e.a)
            if isinstance(b, IntImm):  # division by zero: keep it for the runtime to meet
                return e if a is e.a and b is e.b else BinOp("//", a, b)
            ba, bb = self._bound(a), self._bound(b)
            if ba is not None and bb is not None and bb[0] > 0 and ba[0] >= 0 \
                    and ba[1] < bb[0]:
                return _imm(0, e.dtype)
            return binary("//", a, b)
        c = b.value
        s = self._linear(e.a)
        if c < 0:  # floor(x / c) == floor(-x / -c)
            s, c = _scale(s, -1), -c
        return self._render(self._div_sum(s, c, e.dtype), e.dtype)

    def _floormod(self, e) -> PrimExpr:
        b = self.simplify(e.b)
        if not isinstance(b, IntImm) or b.value == 0:
            a = self.simplify(e.a)
            if isinstance(b, IntImm):
                return e if a is e.a and b is e.b else BinOp("%", a, b)
            ba, bb = self._bound(a), self._bound(b)
            if ba is not None and bb is not None and bb[0] > 0 and ba[0] >= 0 \
                    and ba[1] < bb[0]:
                return a
            return binary("%", a, b)
        c = b.value
        s = self._linear(e.a)
        if c < 0:  # x % c == -((-x) % -c)
            return self._render(_scale(self._mod_sum(_scale(s, -1), -c, e.dtype), -1), e.dtype)
        return self._render(self._mod_sum(s, c, e.dtype), e.dtype)

    def _div_sum(self, s: _Sum, c: int, dtype: str) -> _Sum:
        """``floor(s / c)`` as a sum, for ``c > 0``."""
        if c == 1:
            return s
        # 1. Multiples of c leave the division exactly: floor((m*c + r) / c) = m + floor(r / c).
        quot, rest = {}, {}
        for atom, k in s.terms.items():
            if k % c == 0:
                quot[atom] = k // c
            else:
                rest[atom] = k
        q_const, r_const = divmod(s.const, c)
        out = _Sum(quot, q_const)
        if rest:
            out = _add(out, self._div_rest(_Sum(rest, r_const), c, dtype))
        return out

    def _div_rest(self, r: _Sum, c: int, dtype: str) -> _Sum:
        # 2. Bounds decide the quotient outright (x // c -> 0 when 0 <= x < c).
        b = self._sum_bound(r)
        if b is not None and b[0] // c == b[1] // c:
            return _Sum({}, b[0] // c)
        # 3. A common factor of every coefficient and c cancels.
        g = math.gcd(_content(r), c)
        if g > 1:
            return self._div_sum(_div_exact(r, g), c // g, dtype)
        # 4. Small terms below the granularity of the big ones do not change the quotient.
        split = self._split_small(r, c)
        if split is not None:
            big, g = split
            return self._div_sum(_div_exact(big, g), c // g, dtype)
        # 5. Nested division: (x // a + k) // c -> (x + k*a) // (a*c) for a, c > 0.
        if len(r.terms) == 1:
            (atom, k), = r.terms.items()
            if k == 1 and isinstance(atom, BinOp) and atom.op == "//" \
                    and isinstance(atom.b, IntImm) and atom.b.value > 0:
                a = atom.b.value
                inner = _add(self._linear(atom.a), _Sum({}, r.const * a))
                return self._div_sum(inner, a * c, dtype)
        return _atom(BinOp("//", self._render(r, dtype), _imm(c, dtype)))

    def _mod_sum(self, s: _Sum, c: int, dtype: str) -> _Sum:
        """``s mod c`` (floor semantics) as a sum, for ``c > 0``."""
        if c == 1:
            return _Sum({}, 0)
        # 1. Multiples of c vanish.
        rest = {a: k for a, k in s.terms.items() if k % c != 0}
        r = _Sum(rest, s.const % c)
        if not rest:
            return r
        # 2. Bounds within one period: x % c -> x - t*c.
        b = self._sum_bound(r)
        if b is not None and b[0] // c == b[1] // c:
            return _add(r, _Sum({}, -(b[0] // c) * c))
        # 3. Common factor: (g*y) % (g*d) = g * (y % d).
        g = math.gcd(_content(r), c)
        if g > 1:
            return _scale(self._mod_sum(_div_exact(r, g), c // g, dtype), g)
        # 4. Small terms: (big + small) % c = big % c + small when small fits below big's step.
        split = self._split_small(r, c)
        if split is not None:
            big, g = split
            small = _add(r, big, -1)
            return _add(_scale(self._mod_sum(_div_exact(big, g), c // g, dtype), g), small)
        # 5. Nested modulus: (x % a) % c -> x % c when c divides a.
        if len(r.terms) == 1 and r.const == 0:
            (atom, k), = r.terms.items()
            if k == 1 and isinstance(atom, BinOp) and atom.op == "%" \
                    and isinstance(atom.b, IntImm) and atom.b.value % c == 0:
                return self._mod_sum(self._linear(atom.a), c, dtype)
        return _atom(BinOp("%", self._render(r, dtype), _imm(c, dtype)))

    def _split_small(self, r: _Sum, c: int):
        """Find ``r = big + small`` with every coefficient of ``big`` divisible by ``g`` (a
        proper divisor of ``c``, ``g > 1``) and ``0 <= small < g``.  Then
        ``floor(r / c) = floor(big / c)`` and ``r % c = big % c + small``.

        ``big`` takes the terms with the largest coefficients; the constant is shared so that
        ``small`` lands in ``[0, g)``.  Returns ``(big, g)`` or None.
        """
        if len(r.terms) < 1:
            return None
        items = sorted(r.terms.items(), key=lambda t: -abs(t[1]))
        for n_big in range(1, len(items) + 1):
            g = c
            for _, k in items[:n_big]:
                g = math.gcd(g, k)
            if g <= 1:
                return None
            small = _Sum(dict(items[n_big:]), r.const)
            b = self._sum_bound(small)
            if b is None:
                continue
            shift = b[0] // g
            if b[1] - shift * g < g:
                big = _Sum(dict(items[:n_big]), shift * g)
                return big, g
        return None

    # -- min / max ----------------------------------------------------------------------------
    def _minmax(self, e) -> PrimExpr:
        a, b = self.simplify(e.a), self.simplify(e.b)
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            return binary(e.op, a, b)
        if a == b:
            return a
        diff = self._sum_bound(_add(self._linear(a), self._linear(b), -1))
        if diff is not None:
            a_le_b = diff[1] <= 0
            b_le_a = diff[0] >= 0
            if e.op == "min":
                if a_le_b:
                    return a
                if b_le_a:
                    return b
            else:
                if a_le_b:
                    return b
                if b_le_a:
                    return a
        # min/max commute: order the operands so that equal expressions meet.
        if not self.keep_order and self._keys.order(b) < self._keys.order(a):
            a, b = b, a
        if a is e.a and b is e.b:
            return e
        return BinOp(e.op, a, b)

    # -- comparisons --------------------------------------------------------------------------
    def _compare(self, op: str, a, b) -> PrimExpr:
        """Decide or normalise ``a op b`` on simplified index expressions."""
        d = _add(self._linear(a), self._linear(b), -1)
        d = self._recombine(d)
        bnd = self._sum_bound(d)
        if bnd is not None:
            lo, hi = bnd
            decided = _decide(op, lo, hi)
            if decided is not None:
                return _bool(decided)
        dtype = a.dtype
        # Normal forms: d < 0, d == 0, d != 0.
        if op == ">":
            d, op = _scale(d, -1), "<"
        elif op == ">=":
            d, op = _add(_scale(d, -1), _Sum({}, -1)), "<"
        elif op == "<=":
            d, op = _add(d, _Sum({}, -1)), "<"
        if not d.terms:
            return _bool(_decide(op, d.const, d.const))
        g = 0
        for k in d.terms.values():
            g = math.gcd(g, k)
        if op == "<":
            # g*T + k < 0  <=>  T + floor(k / g) < 0 for integer T.
            d = _Sum({a_: k // g for a_, k in d.terms.items()}, d.const // g)
            pos = {a_: k for a_, k in d.terms.items() if k > 0}
            neg = {a_: -k for a_, k in d.terms.items() if k < 0}
            if pos:
                return Cmp("<", self._render(_Sum(pos, 0), dtype),
                           self._render(_Sum(neg, -d.const), dtype))
            return Cmp(">=", self._render(_Sum(neg, 0), dtype), _imm(d.const + 1, dtype))
        # == / !=
        if d.const % g:
            return _bool(op == "!=")
        d = _Sum({a_: k // g for a_, k in d.terms.items()}, d.const // g)
        if op == "==" and len(d.terms) > 1:
            split = self._eq_at_extreme(d, dtype)
            if split is not None:
                return split
        if self._lead_coeff(d) < 0:
            d = _scale(d, -1)
        pos = {a_: k for a_, k in d.terms.items() if k > 0}
        neg = {a_: -k for a_, k in d.terms.items() if k < 0}
        return Cmp(op, self._render(_Sum(pos, 0), dtype), self._render(_Sum(neg, -d.const), dtype))

    def _eq_at_extreme(self, d: _Sum, dtype: str):
        """``d == 0`` where 0 is d's least (or greatest) value holds exactly when every term
        sits at its own extreme: ``ko*4 + ki == 0`` with both >= 0 becomes
        ``ko == 0 && ki == 0``."""
        bounds = {}
        lo = hi = d.const
        for atom, k in d.terms.items():
            b = self._bound(atom)
            if b is None:
                return None
            bounds[atom] = b
            lo += k * (b[0] if k > 0 else b[1])
            hi += k * (b[1] if k > 0 else b[0])
        if lo != 0 and hi != 0:
            return None
        at_low = lo == 0
        out = None
        for atom, k in self._sorted_terms(d.terms):
            b = bounds[atom]
            target = b[0] if (k > 0) == at_low else b[1]
            eq = self.simplify(Cmp("==", atom, _imm(target, dtype)))
            out = eq if out is None else logic_and(out, eq)
        return out

    # -- select -------------------------------------------------------------------------------
    def _select(self, e) -> PrimExpr:
        cond = self.simplify(e.condition)
        if isinstance(cond, IntImm):
            return self.simplify(e.true_value if cond.value else e.false_value)
        t_an = self.assume(cond, True)
        f_an = self.assume(cond, False)
        # A branch that can never be taken leaves the other one (evaluating it unconditionally
        # is what the select did anyway).
        if t_an is None:
            return (f_an or self).simplify(e.false_value)
        if f_an is None:
            return t_an.simplify(e.true_value)
        t = t_an.simplify(e.true_value)
        f = f_an.simplify(e.false_value)
        if t == f:
            return t
        if cond is e.condition and t is e.true_value and f is e.false_value:
            return e
        return select(cond, t, f)

    def assume(self, cond: PrimExpr, holds: bool = True) -> "Analyzer | None":
        """An analyzer that also knows ``cond`` (or its negation when ``holds`` is False),
        narrowed from comparisons of a variable with a constant; None when that contradicts
        the domain (the branch is dead).  Returns self when nothing is learnt."""
        facts: dict = {}
        if not _collect_facts(cond, holds, facts, self.dom):
            return None
        if not facts:
            return self
        return self.scoped(facts)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _contains(s: _Sum, part: _Sum, scale: int) -> bool:
    """Every term of ``scale * part`` appears in ``s`` with exactly that coefficient."""
    if not part.terms or scale == 0:
        return False
    for atom, k in part.terms.items():
        if s.terms.get(atom) != scale * k:
            return False
    return True


def _decide(op: str, lo: int, hi: int) -> bool | None:
    """Truth of ``d op 0`` for every d in [lo, hi], when it is the same for all."""
    if op == "<":
        return True if hi < 0 else (False if lo >= 0 else None)
    if op == "<=":
        return True if hi <= 0 else (False if lo > 0 else None)
    if op == ">":
        return True if lo > 0 else (False if hi <= 0 else None)
    if op == ">=":
        return True if lo >= 0 else (False if hi < 0 else None)
    if op == "==":
        return True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None)
    if op == "!=":
        return False if lo == hi == 0 else (True if lo > 0 or hi < 0 else None)
    raise ValueError(f"unknown comparison {op!r}")


def _div_bound(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    if b[0] > 0 or b[1] < 0:
        # floor(x / y) is monotone in each argument on a sign-constant range of y.
        quots = (a[0] // b[0], a[0] // b[1], a[1] // b[0], a[1] // b[1])
        return (min(quots), max(quots))
    return None


def _mod_bound(a: Interval | None, b: Interval | None) -> Interval | None:
    if b is None:
        return None
    if b[0] > 0:
        if a is not None and b[0] == b[1] and a[0] // b[0] == a[1] // b[0]:
            return (a[0] % b[0], a[1] % b[0])
        if a is not None and a[0] >= 0 and a[1] < b[0]:
            return a
        return (0, b[1] - 1)
    if b[1] < 0:
        return (b[0] + 1, 0)
    return None


def _contradicts(a, b) -> bool:
    """``b`` is the negation of ``a`` (as written by the simplifier)."""
    if isinstance(b, Not) and b.a == a or isinstance(a, Not) and a.a == b:
        return True
    # NOTE: only for integers; with a float NaN both a < b and a >= b are false.
    if isinstance(a, Cmp) and isinstance(b, Cmp) and is_index_dtype(a.a.dtype) \
            and a.a == b.a and a.b == b.b:
        return _NEGATE[a.op] == b.op
    return False


def _collect_facts(cond, holds: bool, facts: dict, dom: dict) -> bool:
    """Add interval facts implied by ``cond`` (being ``holds``) to ``facts``; False when they
    contradict the domain."""
    if isinstance(cond, IntImm):
        return bool(cond.value) == holds
    if isinstance(cond, Not):
        return _collect_facts(cond.a, not holds, facts, dom)
    if isinstance(cond, And) and holds or isinstance(cond, Or) and not holds:
        return (_collect_facts(cond.a, holds, facts, dom)
                and _collect_facts(cond.b, holds, facts, dom))
    if not isinstance(cond, Cmp):
        return True
    op = cond.op if holds else _NEGATE[cond.op]
    if isinstance(cond.a, Var) and isinstance(cond.b, IntImm):
        var, c = cond.a, cond.b.value
    elif isinstance(cond.b, Var) and isinstance(cond.a, IntImm):
        var, c, op = cond.b, cond.a.value, _SWAP[op]
    else:
        return True
    if not is_index_dtype(var.dtype):
        return True
    cur = facts.get(var, dom.get(var))
    if op == "==":
        lo, hi = c, c
    elif cur is None or op == "!=":
        return True
    elif op == "<":
        lo, hi = cur[0], c - 1
    elif op == "<=":
        lo, hi = cur[0], c
    elif op == ">":
        lo, hi = c + 1, cur[1]
    else:  # >=
        lo, hi = c, cur[1]
    if cur is not None:
        lo, hi = max(lo, cur[0]), min(hi, cur[1])
    if lo > hi:
        return False
    if cur is None or (lo, hi) != tuple(cur):
        facts[var] = (lo, hi)
    return True


# ---------------------------------------------------------------------------------------------
# Module-level entry points
# ---------------------------------------------------------------------------------------------

# Domain-free analyzers shared by every query without a domain: schedule primitives canonicalise
# the same index expressions over and over (replaying a trace, probing compute locations), and
# the memo tables make the repeats lookups.  Past _SHARED_LIMIT entries the analyzer is dropped
# rather than pruned: the entries pin their expressions, and a fresh analyzer gives the same
# answers.  Only the two largest tables are counted: every entry of the others comes with an
# entry of one of them.
_SHARED: dict[bool, Analyzer] = {}
_SHARED_LIMIT = 1 << 15


def _analyzer(dom: dict | None, keep_order: bool = False) -> Analyzer:
    if dom:
        return Analyzer(dom, keep_order=keep_order)
    an = _SHARED.get(keep_order)
    if an is None or len(an._memo) + len(an._lin) > _SHARED_LIMIT:
        an = _SHARED[keep_order] = Analyzer(keep_order=keep_order)
    return an


def canonical(e: PrimExpr, dom: dict | None = None, keep_order: bool = False) -> PrimExpr:
    """The canonical (simplified) form of ``e`` under ``dom`` (see :class:`Analyzer` for
    ``keep_order``)."""
    return _analyzer(dom, keep_order).simplify(e)


def prove(cond: PrimExpr, dom: dict | None = None) -> bool | None:
    """True when ``cond`` provably holds over ``dom``, False when it provably fails, None
    when the analyzer cannot tell."""
    return _analyzer(dom).prove(cond)


def linear_form(e: PrimExpr, dom: dict | None = None) -> LinearForm:
    """``e`` as ``sum(coeff * atom) + const`` (canonical atoms and order)."""
    return _analyzer(dom).linear_form(e)


def int_bound(e: PrimExpr, dom: dict | None = None) -> Interval | None:
    """Inclusive integer bounds of ``e`` over ``dom`` (``Var -> (lo, hi)`` inclusive); None
    when unknown (a free variable, a load, ...).  Like terms cancel first (``i - i`` is 0)."""
    if isinstance(e, IntImm):  # no analyzer needed (loop bounds are mostly constants)
        return (e.value, e.value)
    return _analyzer(dom).bound(e)


def const_diff(a: PrimExpr, b: PrimExpr, keep_order: bool = False) -> int | None:
    """``a - b`` when it is a known constant, else None."""
    return _analyzer(None, keep_order).const_diff(a, b)


def relax(e: PrimExpr, ranges: dict, keep_order: bool = False) -> Interval | None:
    """Symbolic inclusive bounds of ``e`` over ``ranges`` (see :meth:`Analyzer.relax`)."""
    return _analyzer(None, keep_order).relax(e, ranges)


__all__ = ["Analyzer", "LinearForm", "canonical", "prove", "linear_form", "int_bound",
           "const_diff", "relax", "is_index_dtype", "INDEX_DTYPES"]
