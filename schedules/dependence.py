"""Loop-carried dependence and reduction checks used by parallel / vectorize / bind / reorder.

The question asked of a loop ``x``: can two different iterations of ``x`` touch the same buffer
element, with at least one of them writing it?  Accesses are taken from the loads and stores
inside the blocks under the loop, with each block's iteration variables replaced by their bound
values, so they are index expressions of loop variables.

For a writer W and an accessor R (possibly W itself) of one buffer, dimension by dimension:
``w_d = c * g(x) + rest_w`` and ``r_d = c * g(x) + rest_r`` with the same atom ``g`` of ``x``
(``x`` itself, or e.g. ``x // 8`` after a fuse).  If every value of ``rest_r - rest_w`` (R's
inner loop variables renamed apart, since R may be at another inner iteration) lies strictly
within ``(-|c|, |c|)``, an overlap forces ``g(x) == g(x')``.  When the atoms so pinned
determine ``x`` (one of them is ``x``, or they are jointly injective over x's range, which is
checked numerically), iterations are independent.  Anything not proven is reported as a
possible dependence: the check is conservative.
"""
from __future__ import annotations

from tensor_ir.analysis import const_bound
from tensor_ir.expr import And, BinOp, BufferLoad, Cast, Cmp, IntImm, Not, Or, PrimExpr, Var
from tensor_ir.stmt import REDUCE, Block, BlockRealize, BufferStore, For
from tensor_ir.visitor import children, collect, substitute, uses_var

# Largest loop extent over which atom injectivity is checked by enumeration.
_MAX_ENUMERATE = 1 << 16


def realizes_under(stmt) -> list[tuple[BlockRealize, list[For]]]:
    """Every BlockRealize under ``stmt`` with the loops between ``stmt`` and it (outer first)."""
    out = []

    def visit(n, loops):
        if isinstance(n, BlockRealize):
            out.append((n, list(loops)))
            return
        if isinstance(n, For):
            loops.append(n)
            visit(n.body, loops)
            loops.pop()
            return
        for c in children(n):
            if not isinstance(c, PrimExpr):
                visit(c, loops)

    visit(stmt, [])
    return out


def reduce_feeder(loop: For) -> tuple[str, str] | None:
    """(block name, iteration variable name) of a reduce iteration variable whose binding uses
    the loop variable, if any."""
    for realize, _ in realizes_under(loop.body):
        for iv, value in zip(realize.block.iter_vars, realize.iter_values):
            if iv.kind == REDUCE and uses_var(value, loop.loop_var):
                return realize.block.name, iv.var.name
    return None


def loop_domains(stmt) -> dict:
    """``{loop var: (lo, hi)}`` (inclusive) for every loop with constant bounds under stmt."""
    dom = {}
    for f in collect(stmt, For):
        if isinstance(f.min, IntImm) and isinstance(f.extent, IntImm):
            dom[f.loop_var] = (f.min.value, f.min.value + f.extent.value - 1)
    return dom


def _accesses(realize: BlockRealize):
    """(buffer, indices, is_write) of the block's loads and stores, in loop variables."""
    block: Block = realize.block
    mapping = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)}
    out = []
    for part in (block.body, block.init):
        if part is None:
            continue
        for st in collect(part, BufferStore):
            out.append((st.buffer, tuple(substitute(i, mapping) for i in st.indices), True))
        for ld in collect(part, BufferLoad):
            out.append((ld.buffer, tuple(substitute(i, mapping) for i in ld.indices), False))
    return out


def _pred(realize: BlockRealize):
    p = realize.predicate
    return None if isinstance(p, IntImm) and p.value else p


# -- linear forms ---------------------------------------------------------------------------

def _linear(e: PrimExpr) -> tuple[dict, int]:
    """``e`` as ({atom: coefficient}, constant); non-linear subterms are atoms."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, Cast) and isinstance(e.value, PrimExpr) and e.value.dtype.startswith("int"):
        return _linear(e.value)
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        fa, ca = _linear(e.a)
        fb, cb = _linear(e.b)
        sign = 1 if e.op == "+" else -1
        out = dict(fa)
        for k, v in fb.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v != 0}, ca + sign * cb
    if isinstance(e, BinOp) and e.op == "*":
        if isinstance(e.b, IntImm):
            f, c = _linear(e.a)
            k = e.b.value
        elif isinstance(e.a, IntImm):
            f, c = _linear(e.b)
            k = e.a.value
        else:
            return {e: 1}, 0
        return {a: v * k for a, v in f.items() if v * k != 0}, c * k
    return {e: 1}, 0


def _bound_form(form: dict, const: int, dom: dict) -> tuple[int, int] | None:
    lo = hi = const
    for atom, coef in form.items():
        b = const_bound(atom, dom)
        if b is None:
            return None
        a, c = coef * b[0], coef * b[1]
        lo += min(a, c)
        hi += max(a, c)
    return lo, hi


def _eval_int(e: PrimExpr, env: dict) -> int | None:
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env.get(e)
    if isinstance(e, Cast):
        return _eval_int(e.value, env)
    if isinstance(e, BinOp):
        a, b = _eval_int(e.a, env), _eval_int(e.b, env)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op in ("//", "%"):
            if b == 0:
                return None
            return a // b if e.op == "//" else a % b
        if e.op == "min":
            return min(a, b)
        if e.op == "max":
            return max(a, b)
    if isinstance(e, Cmp):
        a, b = _eval_int(e.a, env), _eval_int(e.b, env)
        if a is None or b is None:
            return None
        return int({"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                    ">=": a >= b}[e.op])
    if isinstance(e, (And, Or)):
        a, b = _eval_int(e.a, env), _eval_int(e.b, env)
        if a is None or b is None:
            return None
        return int(bool(a and b)) if isinstance(e, And) else int(bool(a or b))
    if isinstance(e, Not):
        a = _eval_int(e.a, env)
        return None if a is None else int(not a)
    return None


def _determines(atoms: list, x: Var, dom: dict) -> bool:
    """Whether equal values of every atom imply equal values of ``x``."""
    if any(a is x for a in atoms):
        return True
    if not atoms or x not in dom:
        return False
    lo, hi = dom[x]
    if hi - lo + 1 > _MAX_ENUMERATE:
        return False
    seen = set()
    for value in range(lo, hi + 1):
        key = tuple(_eval_int(a, {x: value}) for a in atoms)
        if None in key or key in seen:
            return False
        seen.add(key)
    return True


def _pair_independent(w_idx: tuple, r_idx: tuple, x: Var, dom: dict) -> bool:
    pinned = []
    for wd, rd in zip(w_idx, r_idx):
        fw, cw = _linear(wd)
        fr, cr = _linear(rd)
        xw = {a: c for a, c in fw.items() if uses_var(a, x)}
        xr = {a: c for a, c in fr.items() if uses_var(a, x)}
        if len(xw) != 1 or xw != xr:
            continue
        (atom, coef), = xw.items()
        diff = {a: c for a, c in fr.items() if a not in xr}
        for a, c in fw.items():
            if a not in xw:
                diff[a] = diff.get(a, 0) - c
        diff = {a: c for a, c in diff.items() if c != 0}
        bound = _bound_form(diff, cr - cw, dom)
        if bound is not None and -abs(coef) < bound[0] and bound[1] < abs(coef):
            pinned.append(atom)
    return _determines(pinned, x, dom)


# Largest number of iteration points enumerated by the exact fallback of a pair check.
_MAX_POINTS = 1 << 14


def _points(loops: list[For], env: dict, budget: list):
    """Every assignment of ``loops`` (outer first) extending ``env``; None when a bound is not
    constant or the budget of points runs out."""
    out = [dict(env)]
    for f in loops:
        lo = _eval_int(f.min, env) if not isinstance(f.min, IntImm) else f.min.value
        if not (isinstance(f.extent, IntImm)) or lo is None:
            return None
        nxt = []
        for point in out:
            for v in range(lo, lo + f.extent.value):
                q = dict(point)
                q[f.loop_var] = v
                nxt.append(q)
        budget[0] -= len(nxt)
        if budget[0] < 0:
            return None
        out = nxt
    return out


def _exact_independent(outer: list[For], loop: For, w: tuple, r: tuple) -> bool | None:
    """Enumerate the iteration space: True / False when decided, None when too large."""
    (_, widx, wpred, winner), (_, ridx, rpred, rinner) = w, r
    budget = [_MAX_POINTS]
    outer_points = _points(outer + [loop], {}, budget)
    if outer_points is None:
        return None
    x = loop.loop_var
    for env in outer_points:
        if x not in env:
            continue
        wpts = _points(winner, env, budget)
        rpts = _points(rinner, env, budget)
        if wpts is None or rpts is None:
            return None
    # Group by the values of the outer loops: iterations of x differ only within one group.
    groups: dict = {}
    for env in outer_points:
        key = tuple(env[f.loop_var] for f in outer)
        groups.setdefault(key, []).append(env)
    for envs in groups.values():
        written: dict = {}
        for env in envs:
            for p in _points(winner, env, [_MAX_POINTS]) or []:
                if wpred is not None and not _eval_int(wpred, p):
                    continue
                elem = tuple(_eval_int(i, p) for i in widx)
                if None in elem:
                    return None
                written.setdefault(elem, set()).add(env[x])
        for env in envs:
            for p in _points(rinner, env, [_MAX_POINTS]) or []:
                if rpred is not None and not _eval_int(rpred, p):
                    continue
                elem = tuple(_eval_int(i, p) for i in ridx)
                if None in elem:
                    return None
                xs = written.get(elem)
                if xs and (len(xs) > 1 or env[x] not in xs):
                    return False
    return True


def carried_dependence(func_body, loop: For, include_self: bool = True,
                       outer: list[For] | None = None) -> tuple[str, str, str] | None:
    """(writer block, accessor block, buffer) for a dependence iterations of ``loop`` may carry,
    or None when iterations are proven independent.  ``include_self`` also checks a block
    against itself (a reduction carries a dependence over its reduce loops)."""
    x = loop.loop_var
    if isinstance(loop.extent, IntImm) and loop.extent.value <= 1:
        return None  # a single iteration carries nothing
    dom = loop_domains(func_body)
    if isinstance(loop.min, IntImm) and isinstance(loop.extent, IntImm):
        dom[x] = (loop.min.value, loop.min.value + loop.extent.value - 1)
    realizes = realizes_under(loop.body)
    private = set()
    for realize, _ in realizes:
        private.update(realize.block.alloc_buffers)
    accesses = []
    for realize, inner in realizes:
        accesses.append((realize.block.name, inner, _accesses(realize), realize))
    for wname, winner, wacc, wreal in accesses:
        for rname, rinner, racc, rreal in accesses:
            if rname == wname and not include_self:
                continue
            # Rename the accessor's inner loop variables: it may be at another inner iteration.
            renamed = {}
            for f in rinner:
                fresh = Var(f.loop_var.name + "'", f.loop_var.dtype)
                renamed[f.loop_var] = fresh
                if f.loop_var in dom:
                    dom[fresh] = dom[f.loop_var]
            for wbuf, widx, is_write in wacc:
                if not is_write or wbuf in private:
                    continue
                for rbuf, ridx, _ in racc:
                    if rbuf is not wbuf:
                        continue
                    ridx2 = tuple(substitute(i, renamed) for i in ridx)
                    if _pair_independent(widx, ridx2, x, dom):
                        continue
                    if outer is not None:
                        exact = _exact_independent(
                            outer, loop, (wbuf, widx, _pred(wreal), winner),
                            (rbuf, ridx, _pred(rreal), rinner))
                        if exact:
                            continue
                    return wname, rname, wbuf.name
    return None
