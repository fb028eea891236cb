"""Analyses used by algorithm definitions, primitives and lowering: integer bounds of index
expressions and buffer access regions."""
from __future__ import annotations

from .expr import BinOp, Cast, IntImm, PrimExpr, Select, Var
from .stmt import Range

Interval = tuple[int, int]  # inclusive [lo, hi]


def const_bound(e: PrimExpr, dom: dict) -> Interval | None:
    """Inclusive integer bounds of ``e`` when every variable ranges over ``dom``
    (``Var -> (lo, hi)`` inclusive).  None when unknown (a free variable, a load, ...)."""
    if isinstance(e, IntImm):
        return (e.value, e.value)
    if isinstance(e, Var):
        return dom.get(e)
    if isinstance(e, Cast):
        return const_bound(e.value, dom)
    if isinstance(e, Select):
        t, f = const_bound(e.true_value, dom), const_bound(e.false_value, dom)
        if t is None or f is None:
            return None
        return (min(t[0], f[0]), max(t[1], f[1]))
    if not isinstance(e, BinOp):
        return None
    a = const_bound(e.a, dom)
    b = const_bound(e.b, dom)
    if a is None or b is None:
        return None
    op = e.op
    if op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if op == "*":
        prods = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return (min(prods), max(prods))
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op == "//":
        if b[0] > 0:
            quots = (a[0] // b[0], a[0] // b[1], a[1] // b[0], a[1] // b[1])
            return (min(quots), max(quots))
        return None
    if op == "%":
        if b[0] > 0:
            if a[0] >= 0 and a[1] < b[0] and b[0] == b[1]:
                return a
            if a[0] // b[1] == a[1] // b[1] and b[0] == b[1]:
                return (a[0] % b[0], a[1] % b[0])
            return (0, b[1] - 1)
        return None
    return None


def dom_of_ranges(pairs) -> dict:
    """``{var: (lo, hi)}`` from ``(var, Range)`` pairs with constant min and extent."""
    out = {}
    for var, rng in pairs:
        if isinstance(rng.min, IntImm) and isinstance(rng.extent, IntImm):
            out[var] = (rng.min.value, rng.min.value + rng.extent.value - 1)
    return out


def access_region(buffer, accesses: list[tuple], dom: dict | None = None) -> tuple:
    """Region (tuple of Range) covering every index tuple in ``accesses``.

    With ``dom`` the region is in constants (the bounds over the domain, clipped to the buffer);
    without it, identical accesses give a point region in terms of their expressions and
    differing ones fall back to the whole dimension.
    """
    shape = buffer.shape
    region = []
    for d in range(len(shape)):
        exprs = [acc[d] for acc in accesses]
        if dom is not None:
            lo = hi = None
            for e in exprs:
                bnd = const_bound(e, dom)
                if bnd is None:
                    lo = None
                    break
                lo = bnd[0] if lo is None else min(lo, bnd[0])
                hi = bnd[1] if hi is None else max(hi, bnd[1])
            if lo is not None and isinstance(shape[d], IntImm):
                lo = max(lo, 0)
                hi = min(hi, shape[d].value - 1)
                region.append(Range(IntImm(lo), IntImm(max(hi - lo + 1, 0))))
                continue
            region.append(Range(IntImm(0), shape[d]))
            continue
        first = exprs[0]
        if all(e == first for e in exprs[1:]):
            region.append(Range(first, IntImm(1)))
        else:
            region.append(Range(IntImm(0), shape[d]))
    return tuple(region)
