"""Analyses used by algorithm definitions, primitives and lowering: integer bounds of index
expressions and buffer access regions."""
from __future__ import annotations

from .arith import int_bound
from .expr import IntImm
from .stmt import Range

Interval = tuple[int, int]  # inclusive [lo, hi]


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
                bnd = int_bound(e, dom)
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
