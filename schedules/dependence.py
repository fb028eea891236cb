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

Threads of a block.  For a loop about to be bound to ``threadIdx.*`` (``as_kind``), the
question is whether the GPU -- the block's threads running side by side, a barrier between
statements that share a ``shared`` buffer (tensor_ir.codegen.gpu_c) -- computes what the
interpreter computes running the threads one after another.  Two kinds of pair are not
dependences there:

* a block whose reduce iteration variable is bound through the loop, against itself: a
  cross-thread reduction, which GPU lowering turns into a combination of the threads' parts;
* a write of a ``shared`` buffer by a redundant writer (see :func:`_redundant_writers`: a
  cooperative fetch, whose element values do not depend on the thread), against any access.
  Every thread writes the same value to an element, so two threads writing one element is
  benign (TVM runs an unbound fetch under thread loops so), and a reader finds the value
  whichever thread wrote it: in the interpreter its own thread wrote it earlier in the same
  iteration (the TensorIR invariant compute_at and cache_read keep: the fetch covers what its
  consumers read, for every thread of the block -- see compute_at), on the GPU the barrier
  before the reader waits for every thread's part.

Every other pair is judged as for CPU threads: a ``global`` or ``local`` buffer, a ``shared``
one written differently by different threads, a block reading what another thread writes
within it.  Bindings to ``blockIdx.*`` are judged as CPU threads too: blocks cannot wait for
each other.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from tensor_ir.arith import Analyzer, is_index_dtype, linear_form
from tensor_ir.expr import And, BinOp, BufferLoad, Cast, Cmp, IntImm, Not, Or, PrimExpr, Var
from tensor_ir.stmt import REDUCE, THREAD_BINDING, Block, BlockRealize, BufferStore, For
from tensor_ir.visitor import children, collect, substitute, uses_var

from .tree import MISS, IdentityMemo

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
    # Statements are immutable, and the same function body is asked about again and again
    # (every loop a post-processor tries, every split): keep the last few answers.  Entries
    # hold their statements, so a live entry's id is never reused.
    key = id(stmt)
    hit = _DOMAINS.get(key)
    if hit is not None and hit[0] is stmt:
        _DOMAINS.move_to_end(key)
        return dict(hit[1])
    dom = {}
    for f in collect(stmt, For):
        if isinstance(f.min, IntImm) and isinstance(f.extent, IntImm):
            dom[f.loop_var] = (f.min.value, f.min.value + f.extent.value - 1)
    _DOMAINS[key] = (stmt, dom)
    while len(_DOMAINS) > _DOMAINS_SIZE:
        _DOMAINS.popitem(last=False)
    return dict(dom)


_DOMAINS: OrderedDict[int, tuple] = OrderedDict()
_DOMAINS_SIZE = 16


def _accesses(realize: BlockRealize):
    """(buffer, indices, is_write) of the block's loads and stores, in loop variables."""
    # Realizes outside a rewritten subtree are shared by the functions before and after it.
    found = _ACCESSES.get((realize,))
    if found is MISS:
        found = _block_accesses(realize)
        _ACCESSES.put((realize,), (), found)
    return found


_ACCESSES = IdentityMemo(256)


def _block_accesses(realize: BlockRealize):
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


class _NotExact(Exception):
    """Vectorised evaluation might differ from :func:`_eval_int` (int64 could overflow where
    Python ints do not): take the point-by-point path instead."""


# Operands are kept below this magnitude so that int64 results stay exact.
_SAFE = 1 << 62


def _magnitude(value) -> int:
    if isinstance(value, int):
        return abs(value)
    if value.size == 0:
        return 0
    return max(abs(int(value.min())), abs(int(value.max())))


def _np_eval(e: PrimExpr, env: dict):
    """:func:`_eval_int` at many points at once: ``env`` maps variables to equal-length int64
    arrays.  Returns (values, bad) -- values an array or a Python int, bad a boolean array of
    the points where _eval_int gives None (a division by zero) or None when there are none --
    or None when _eval_int gives None at every point (an unknown variable or node).  Raises
    _NotExact where int64 might overflow."""
    if isinstance(e, IntImm):
        if abs(e.value) >= _SAFE:
            raise _NotExact
        return e.value, None
    if isinstance(e, Var):
        value = env.get(e)
        return None if value is None else (value, None)
    if isinstance(e, Cast):
        return _np_eval(e.value, env)
    if isinstance(e, Not):
        a = _np_eval(e.a, env)
        if a is None:
            return None
        va, bad = a
        return (int(not va) if isinstance(va, int) else (va == 0).astype(np.int64)), bad
    if isinstance(e, (BinOp, Cmp, And, Or)):
        if isinstance(e, BinOp) and e.op not in _NP_BINOPS:
            return None
        a, b = _np_eval(e.a, env), _np_eval(e.b, env)
        if a is None or b is None:
            return None
        (va, bad_a), (vb, bad_b) = a, b
        bad = bad_a if bad_b is None else (bad_b if bad_a is None else bad_a | bad_b)
        if isinstance(va, int) and isinstance(vb, int):
            value = _scalar(e, va, vb)
            if value is None:
                return None
            if abs(value) >= _SAFE:
                raise _NotExact
            return value, bad
        if isinstance(e, BinOp):
            op = e.op
            if op in ("+", "-") and _magnitude(va) + _magnitude(vb) >= _SAFE:
                raise _NotExact
            if op == "*" and _magnitude(va) * _magnitude(vb) >= _SAFE:
                raise _NotExact
            if op in ("//", "%"):
                if isinstance(vb, int):
                    if vb == 0:
                        return None
                else:
                    zero = vb == 0
                    if zero.any():
                        bad = zero if bad is None else bad | zero
                        vb = np.where(zero, 1, vb)
            return _NP_BINOPS[op](va, vb), bad
        if isinstance(e, Cmp):
            return _NP_CMPS[e.op](va, vb).astype(np.int64), bad
        both = np.logical_and if isinstance(e, And) else np.logical_or
        return both(np.asarray(va) != 0, np.asarray(vb) != 0).astype(np.int64), bad
    return None


def _scalar(e, a: int, b: int) -> int | None:
    """Binary node ``e`` (BinOp, Cmp, And, Or) over the constants ``a`` and ``b``, as
    :func:`_eval_int` computes it."""
    if isinstance(e, BinOp):
        if e.op in ("//", "%") and b == 0:
            return None
        return int(_NP_BINOPS_PY[e.op](a, b))
    if isinstance(e, Cmp):
        return int(_NP_CMPS_PY[e.op](a, b))
    return int(bool(a and b)) if isinstance(e, And) else int(bool(a or b))


_NP_BINOPS_PY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                 "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max}
_NP_CMPS_PY = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b,
               "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
               ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


_NP_BINOPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
              "%": np.remainder, "min": np.minimum, "max": np.maximum}
_NP_CMPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}


def _determines(atoms: list, x: Var, dom: dict) -> bool:
    """Whether equal values of every atom imply equal values of ``x``."""
    if any(a is x for a in atoms):
        return True
    if not atoms or x not in dom:
        return False
    lo, hi = dom[x]
    if hi - lo + 1 > _MAX_ENUMERATE:
        return False
    if hi < lo:
        return True
    try:
        return _determines_vectorised(atoms, x, lo, hi)
    except _NotExact:
        pass
    seen = set()
    for value in range(lo, hi + 1):
        key = tuple(_eval_int(a, {x: value}) for a in atoms)
        if None in key or key in seen:
            return False
        seen.add(key)
    return True


def _determines_vectorised(atoms: list, x: Var, lo: int, hi: int) -> bool:
    """:func:`_determines` over the whole range of ``x`` at once (the same answer: False when
    an atom has no value somewhere or two values of x give equal atoms)."""
    xs = np.arange(lo, hi + 1, dtype=np.int64)
    columns = []
    for atom in atoms:
        result = _np_eval(atom, {x: xs})
        if result is None:
            return False
        values, bad = result
        if bad is not None and bad.any():
            return False
        columns.append(np.broadcast_to(np.asarray(values, dtype=np.int64), xs.shape))
    if len(xs) == 1:
        return True
    return _distinct_rows(columns, len(xs))


def _distinct_rows(columns: list, count: int) -> bool:
    """Whether the ``count`` rows of the given equal-length int64 columns are all different.

    The rows are numbered in mixed radix over each column's value range; when the numbers
    span fewer values than there are rows, two rows must coincide, and when they span a few
    times the rows at most, counting them is cheaper than sorting."""
    key = None
    span = 1
    for col in columns:
        lo, hi = int(col.min()), int(col.max())
        width = hi - lo + 1
        if span * width > 4 * count:
            key = None
            break
        shifted = col - lo
        key = shifted if key is None else key * width + shifted
        span *= width
    else:
        if span < count:
            return False
        return int(np.bincount(key, minlength=span).max()) <= 1
    if len(columns) == 1:
        return len(np.unique(columns[0])) == count
    return len(np.unique(np.stack(columns, axis=1), axis=0)) == count


def _pair_independent(w_idx: tuple, r_idx: tuple, x: Var, an: Analyzer) -> bool:
    pinned = []
    for wd, rd in zip(w_idx, r_idx):
        if not (is_index_dtype(wd.dtype) and is_index_dtype(rd.dtype)):
            continue
        # Domain-free forms: the same index expressions come back for every loop asked about,
        # and the shared analyzer keeps them.
        fw, fr = linear_form(wd), linear_form(rd)
        xw = [t for t in fw.terms if uses_var(t[0], x)]
        xr = [t for t in fr.terms if uses_var(t[0], x)]
        if len(xw) != 1 or xw != xr:
            continue
        # The terms in x are equal: only the rest of r - w remains.
        (atom, coef), = xw
        rest = [t for t in fr.terms if t is not xr[0]]
        rest += [(t[0], -t[1]) for t in fw.terms if t is not xw[0]]
        bound = an.sum_bound(rest, fr.const - fw.const)
        if bound is not None and -abs(coef) < bound[0] and bound[1] < abs(coef):
            pinned.append(atom)
    return _determines(pinned, x, an.dom)


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


def _points_cost(loops: list[For]) -> tuple[int, int]:
    """(points _points builds for ``loops`` summed over its levels, points of the last level);
    every extent must be constant."""
    total, count = 0, 1
    for f in loops:
        count *= f.extent.value
        total += count
    return total, count


def _points_fit(loops: list[For], env: dict, budget: list) -> bool:
    """Whether ``_points(loops, env, budget)`` would succeed, charging the budget as it would."""
    count = 1
    for f in loops:
        lo = _eval_int(f.min, env) if not isinstance(f.min, IntImm) else f.min.value
        if not (isinstance(f.extent, IntImm)) or lo is None:
            return False
        count *= f.extent.value
        budget[0] -= count
        if budget[0] < 0:
            return False
    return True


def _exact_independent(outer: list[For], loop: For, w: tuple, r: tuple) -> bool | None:
    """Enumerate the iteration space: True / False when decided, None when too large."""
    (_, _, _, winner), (_, _, _, rinner) = w, r
    head = outer + [loop]
    # 1. The budget: the enumeration builds, level by level, every prefix of the head loops
    #    and then of each accessor's inner loops per head point.  With constant extents that
    #    count is known up front, and over budget the answer is None whatever the loops hold
    #    -- so large nests are refused without building the (possibly huge) point lists.
    if all(isinstance(f.extent, IntImm) for f in head + winner + rinner):
        head_cost, head_count = _points_cost(head)
        total = head_cost + head_count * (_points_cost(winner)[0] + _points_cost(rinner)[0])
        if total > _MAX_POINTS:
            return None
        # 2. Within the budget, every point at once in numpy.  Up to 2**14 points one Python
        #    evaluation at a time took about 0.4 s per question, most of a candidate's replay.
        try:
            found = _exact_vectorised(outer, loop, w, r)
        except _NotExact:
            found = _UNSURE
        if found is not _UNSURE:
            return found
    return _exact_pointwise(outer, loop, w, r)


def _exact_pointwise(outer: list[For], loop: For, w: tuple, r: tuple) -> bool | None:
    """:func:`_exact_independent` one point at a time (the reference; also the path for
    bounds that are not constant and for points where an expression has no value)."""
    (_, widx, wpred, winner), (_, ridx, rpred, rinner) = w, r
    head = outer + [loop]
    budget = [_MAX_POINTS]
    outer_points = _points(head, {}, budget)
    if outer_points is None:
        return None
    x = loop.loop_var
    for env in outer_points:
        if x not in env:
            continue
        # Only whether every inner nest can be enumerated matters here (bounds that evaluate
        # and the shared budget): count instead of building the points twice.
        if not _points_fit(winner, env, budget) or not _points_fit(rinner, env, budget):
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


# What _exact_vectorised returns when a point needs _exact_pointwise's care.
_UNSURE = object()


def _np_points(loops: list[For], base: dict, base_count: int):
    """:func:`_points` for ``base_count`` points at once: ``base`` maps variables to int64
    arrays of that length; returns (``base`` extended by ``loops``, outer first, the new
    count), or _UNSURE where a lower bound has no value.  As in _points, lower bounds are
    read from ``base`` alone, and every extent must be constant."""
    env, count = dict(base), base_count
    for f in loops:
        extent = f.extent.value
        found = _np_eval(f.min, base)
        if found is None or (found[1] is not None and found[1].any()):
            return _UNSURE
        # The points stay grouped by base point: each base point's bound repeats over its own.
        lo = np.broadcast_to(np.asarray(found[0], dtype=np.int64), (base_count,))
        lo = np.repeat(lo, count // base_count if base_count else 0)
        env = {v: np.repeat(a, extent) for v, a in env.items()}
        env[f.loop_var] = (np.repeat(lo, extent)
                           + np.tile(np.arange(extent, dtype=np.int64), count))
        count *= extent
    return env, count


def _np_touched(env: dict, count: int, inner: list[For], pred, indices: tuple):
    """(points, mask of the points the predicate keeps, the index columns at those points) of
    one access under the head points ``env``; _UNSURE where a kept index has no value."""
    found = _np_points(inner, env, count)
    if found is _UNSURE:
        return _UNSURE
    points, n = found
    keep = np.ones(n, dtype=bool)
    if pred is not None:
        # A predicate without a value skips the point, as in the pointwise check.
        value = _np_eval(pred, points)
        if value is None:
            keep[:] = False
        else:
            keep &= np.broadcast_to(np.asarray(value[0]) != 0, (n,))
            if value[1] is not None:
                keep &= ~value[1]
    columns = []
    for index in indices:
        value = _np_eval(index, points)
        if value is None or (value[1] is not None and (value[1] & keep).any()):
            return _UNSURE if keep.any() else (points, keep, [])
        columns.append(np.broadcast_to(np.asarray(value[0], dtype=np.int64), (n,))[keep])
    return points, keep, columns


def _exact_vectorised(outer: list[For], loop: For, w: tuple, r: tuple):
    """:func:`_exact_pointwise`'s answer over every point at once, or _UNSURE.  Two
    iterations of the loop conflict when, at equal outer-loop values, one writes an element
    the other accesses: per (outer values, element) the writers' smallest and largest value
    of the loop variable must both equal each accessor's."""
    (_, widx, wpred, winner), (_, ridx, rpred, rinner) = w, r
    found = _np_points(outer + [loop], {}, 1)
    if found is _UNSURE:
        return _UNSURE
    head, count = found
    writes = _np_touched(head, count, winner, wpred, widx)
    reads = _np_touched(head, count, rinner, rpred, ridx)
    if writes is _UNSURE or reads is _UNSURE:
        return _UNSURE
    x = loop.loop_var
    keys, xs = [], []
    for points, keep, columns in (writes, reads):
        if not keep.any():
            return True
        if len(columns) != len(widx):
            return _UNSURE
        rows = [points[f.loop_var][keep] for f in outer] + columns
        rows.append(np.zeros(int(keep.sum()), dtype=np.int64))  # keys of no dimension
        keys.append(np.stack(rows, axis=1))
        xs.append(points[x][keep])
    _, ids = np.unique(np.concatenate(keys), axis=0, return_inverse=True)
    ids = ids.reshape(-1)
    n_writes = len(xs[0])
    w_ids, r_ids = ids[:n_writes], ids[n_writes:]
    size = int(ids.max()) + 1
    lowest = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    highest = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lowest, w_ids, xs[0])
    np.maximum.at(highest, w_ids, xs[0])
    written = highest[r_ids] >= lowest[r_ids]
    other = (lowest[r_ids] != xs[1]) | (highest[r_ids] != xs[1])
    return not bool((written & other).any())


def carried_dependence(func_body, loop: For, include_self: bool = True,
                       outer: list[For] | None = None,
                       as_kind: tuple[str, str | None] | None = None
                       ) -> tuple[str, str, str] | None:
    """(writer block, accessor block, buffer) for a dependence iterations of ``loop`` may carry,
    or None when iterations are proven independent.  ``include_self`` also checks a block
    against itself (a reduction carries a dependence over its reduce loops).

    ``as_kind`` = (loop kind, thread binding) the loop is about to get: buffers that lowering
    then allocates inside the loop body (one private copy per iteration, hence per thread;
    see tensor_ir.compact.private_buffers) carry nothing between iterations -- e.g. a padding
    stage computed at the loop, whose windows overlap from one iteration to the next."""
    # The answer depends only on these (immutable) nodes, and the same question comes back:
    # a post-processor checks a loop, then the primitive it calls checks it again.
    objects = (func_body, loop) + tuple(outer or ())
    extra = (bool(include_self), outer is None, len(outer or ()), as_kind)
    found = _DEPENDENCES.get(objects, extra)
    if found is MISS:
        found = _carried_dependence(func_body, loop, include_self, outer, as_kind)
        _DEPENDENCES.put(objects, extra, found)
    return found


_DEPENDENCES = IdentityMemo(64)
_RENAMINGS = IdentityMemo(256)


def _carried_dependence(func_body, loop: For, include_self: bool,
                        outer: list[For] | None,
                        as_kind: tuple[str, str | None] | None = None
                        ) -> tuple[str, str, str] | None:
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
    if as_kind is not None:
        from tensor_ir.compact import private_buffers

        private |= private_buffers(func_body, loop, as_kind[0], as_kind[1])
    # Threads of one GPU block (see the module text, "Threads of a block").
    threads = (as_kind is not None and as_kind[0] == THREAD_BINDING
               and (as_kind[1] or "").startswith("threadIdx"))
    reducing = _reduced_over(realizes, x) if threads else set()
    redundant = _redundant_writers(realizes, x) if threads else set()
    accesses = []
    for realize, inner in realizes:
        # Rename the accessor's inner loop variables: it may be at another inner iteration.
        # The renamed variables are private to this analysis, so one renaming (and the renamed
        # indices, made once per access when needed) serves every question about this accessor
        # under these loops.
        objects = (realize, *inner)
        renaming = _RENAMINGS.get(objects)
        if renaming is MISS:
            renaming = ({f.loop_var: Var(f.loop_var.name + "'", f.loop_var.dtype)
                         for f in inner}, {})
            _RENAMINGS.put(objects, (), renaming)
        for old_var, fresh in renaming[0].items():
            if old_var in dom:
                dom[fresh] = dom[old_var]
        accesses.append((realize.block.name, inner, _accesses(realize), realize, renaming))
    an = Analyzer(dom)
    for wname, winner, wacc, wreal, _ in accesses:
        for rname, rinner, racc, rreal, (renamed, renamed_idx) in accesses:
            if rname == wname and not include_self:
                continue
            if rname == wname and wname in reducing:
                continue  # a cross-thread reduction: lowering combines the threads' parts
            for wbuf, widx, is_write in wacc:
                if not is_write or wbuf in private:
                    continue
                if wname in redundant and wbuf.scope == "shared":
                    continue  # every thread writes the same values; a barrier orders readers
                for k, (rbuf, ridx, _) in enumerate(racc):
                    if rbuf is not wbuf:
                        continue
                    ridx2 = renamed_idx.get(k)
                    if ridx2 is None:
                        ridx2 = tuple(substitute(i, renamed) for i in ridx)
                        renamed_idx[k] = ridx2
                    if _pair_independent(widx, ridx2, x, an):
                        continue
                    if outer is not None:
                        exact = _exact_independent(
                            outer, loop, (wbuf, widx, _pred(wreal), winner),
                            (rbuf, ridx, _pred(rreal), rinner))
                        if exact:
                            continue
                    return wname, rname, wbuf.name
    return None


# ---------------------------------------------------------------------------------------------
# Threads of a block
# ---------------------------------------------------------------------------------------------

def _reduced_over(realizes: list, x: Var) -> set:
    """Names of the blocks with a reduce iteration variable bound through ``x``."""
    out = set()
    for realize, _ in realizes:
        block = realize.block
        if any(iv.kind == REDUCE and uses_var(value, x)
               for iv, value in zip(block.iter_vars, realize.iter_values)):
            out.add(block.name)
    return out


def _redundant_writers(realizes: list, x: Var) -> set:
    """Names of the blocks of ``realizes`` (those under the loop of ``x``, with the loops
    between) that write a ``shared`` buffer identically from every thread of ``x``: a
    copy-like block (no init, no reduce iteration variable, one store at exactly its own
    iteration variables, so an element names one instance), the only writer of its buffer
    under the loop, that does not read that buffer, whose bindings, predicate and loops below
    the loop do not use ``x``, and whose inputs are not written under the loop except by
    other such blocks.  Such a block writes each element
    with one value whichever thread runs it (a cooperative fetch before its loops are bound,
    or the part of a bound fetch another thread runs): see the module text."""
    writers: dict = {}
    for realize, _ in realizes:
        for st in collect(realize.block.body, BufferStore):
            writers.setdefault(st.buffer, set()).add(realize.block.name)
        if realize.block.init is not None:
            for st in collect(realize.block.init, BufferStore):
                writers.setdefault(st.buffer, set()).add(realize.block.name)
    candidates: dict = {}
    for realize, inner in realizes:
        block = realize.block
        stores = collect(block.body, BufferStore)
        if block.init is not None or any(iv.kind == REDUCE for iv in block.iter_vars) \
                or len(stores) != 1:
            continue
        (store,) = stores
        own = {id(iv.var) for iv in block.iter_vars}
        indices = {id(i) for i in store.indices if isinstance(i, Var)}
        if store.buffer.scope != "shared" or writers.get(store.buffer) != {block.name} \
                or len(store.indices) != len(own) or indices != own:
            continue
        if uses_var(realize.predicate, x) \
                or any(uses_var(v, x) for v in realize.iter_values) \
                or any(uses_var(f.min, x) or uses_var(f.extent, x) for f in inner):
            continue
        inputs = {ld.buffer for ld in collect(block.body, BufferLoad)}
        if store.buffer in inputs:
            continue
        candidates[block.name] = inputs
    # Drop, until none changes, a candidate reading what a non-candidate writes under the loop.
    changed = True
    while changed:
        changed = False
        for name, inputs in list(candidates.items()):
            if any(writers.get(buf, set()) - set(candidates) for buf in inputs):
                del candidates[name]
                changed = True
    return set(candidates)
