"""Layout primitives: transform_layout (rewrite an intermediate buffer's layout everywhere) and
pack_layout (copy a function parameter into a new buffer in a blocked layout, the way operand
packing is done, keeping the function's signature)."""
from __future__ import annotations

from dataclasses import replace as dc_replace
from fractions import Fraction
from typing import Callable

import numpy as np

from tensor_ir import dtype as dt
from tensor_ir.arith import int_bound, linear_form
from tensor_ir.buffer import Buffer
from tensor_ir.expr import (
    BinOp, BufferLoad, Cast, IntImm, PrimExpr, Var, binary, const, select,
)
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BufferRegion, BufferStore, Range, seq
from tensor_ir.visitor import substitute, transform

from .. import tree
from ..errors import ScheduleError, check
from . import blocks as B
from .cache import check_scope
from .regions import canon, recompute_regions

__all__ = ["transform_layout", "pack_layout", "resolve_buffer"]


def resolve_buffer(func: PrimFunc, blk: Block, which, what: str) -> Buffer:
    """The buffer ``which`` names for ``blk``: an int (index into the block's writes), a pair
    ``("read" | "write", index)`` or a buffer name among the block's reads and writes."""
    if isinstance(which, str):
        for r in tuple(blk.writes) + tuple(blk.reads):
            if r.buffer.name == which:
                return r.buffer
        raise ScheduleError(f"{what}: block {blk.name} neither reads nor writes a buffer named "
                            f"{which!r}")
    if isinstance(which, tuple) and len(which) == 2 and which[0] in ("read", "write"):
        regions = blk.reads if which[0] == "read" else blk.writes
        idx = which[1]
    elif isinstance(which, int) and not isinstance(which, bool):
        regions, idx = blk.writes, which
    else:
        raise ScheduleError(f"{what}: buffer must be an index, ('read'|'write', index) or a "
                            f"name, got {which!r}")
    check(isinstance(idx, int) and 0 <= idx < len(regions),
          f"{what}: block {blk.name} has {len(regions)} buffers of that kind; index {idx!r} is "
          f"out of range")
    return regions[idx].buffer


def _apply_map(buf: Buffer, index_map: Callable, what: str):
    """The map applied to fresh index variables: (vars, new index exprs, new shape)."""
    shape = buf.const_shape
    vars_ = [Var(f"i{d}", dt.INDEX_DTYPE) for d in range(len(shape))]
    try:
        out = index_map(*vars_)
    except TypeError as err:
        raise ScheduleError(f"{what}: index_map does not take {len(shape)} indices of "
                            f"{buf.name}: {err}") from None
    if not isinstance(out, (tuple, list)):
        out = (out,)
    exprs = []
    for e in out:
        e = e if isinstance(e, PrimExpr) else const(e, dt.INDEX_DTYPE)
        check(dt.is_int(e.dtype) and e.dtype != "bool",
              f"{what}: index_map returned a non-integer index for {buf.name}")
        exprs.append(canon(e))
    dom = {v: (0, s - 1) for v, s in zip(vars_, shape)}
    new_shape = []
    for d, e in enumerate(exprs):
        bound = int_bound(e, dom)
        check(bound is not None, f"{what}: cannot bound new dimension {d} of {buf.name}")
        check(bound[0] >= 0, f"{what}: new dimension {d} of {buf.name} can be negative")
        new_shape.append(bound[1] + 1)
    return vars_, exprs, tuple(new_shape)


# Domains up to this many points are checked for injectivity point by point (numpy, a few
# tens of milliseconds); larger ones need a proof from the map's form.
_EXACT_CHECK_POINTS = 1 << 22

_NUMPY_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
              "%": np.mod, "min": np.minimum, "max": np.maximum}


def _evaluate(e: PrimExpr, grids: dict):
    """``e`` at every point of the domain (``grids``: Var -> broadcastable int64 array); None
    when ``e`` holds something this small evaluator does not know."""
    if isinstance(e, IntImm):
        return np.int64(e.value)
    if isinstance(e, Var):
        return grids.get(e)
    if isinstance(e, Cast) and dt.is_int(e.dtype):
        return _evaluate(e.value, grids)
    if isinstance(e, BinOp) and e.op in _NUMPY_OPS:
        a, b = _evaluate(e.a, grids), _evaluate(e.b, grids)
        if a is None or b is None:
            return None
        if e.op in ("//", "%"):
            b = np.where(b == 0, 1, b)  # a zero divisor gives 0 (numpy's integer semantics)
            out = _NUMPY_OPS[e.op](a, b)
            return np.where(_evaluate(e.b, grids) == 0, 0, out)
        return _NUMPY_OPS[e.op](a, b)
    return None


def _injective_by_points(vars_: list, exprs: list, shape: tuple, new_shape: tuple):
    """True / False when every point of the domain was checked, None when that was not done."""
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size > _EXACT_CHECK_POINTS or size == 0:
        return None if size else True
    grids = dict(zip(vars_, np.indices(shape, dtype=np.int64)))
    flat = np.zeros(shape, dtype=np.int64)
    for e, extent in zip(exprs, new_shape):
        values = _evaluate(e, grids)
        if values is None:
            return None
        flat = flat * extent + np.broadcast_to(values, shape)
    return bool(np.unique(flat.ravel()).size == size)


def _injective_affine(vars_: list, exprs: list, shape: tuple) -> bool:
    """Whether the map is affine in the old indices with a matrix of full column rank (over the
    indices that take more than one value): then no two points share an image."""
    moving = [v for v, s in zip(vars_, shape) if s > 1]
    rows = []
    for e in exprs:
        form = linear_form(e)
        if any(not isinstance(atom, Var) or atom not in vars_ for atom, _ in form.terms):
            return False
        rows.append([Fraction(form.coeff(v)) for v in moving])
    # Gaussian elimination over the rationals: the rank is the number of pivots.
    rank, cols = 0, len(moving)
    for c in range(cols):
        pivot = next((r for r in range(rank, len(rows)) if rows[r][c] != 0), None)
        if pivot is None:
            return False
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for r in range(len(rows)):
            if r != rank and rows[r][c] != 0:
                factor = rows[r][c] / rows[rank][c]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[rank])]
        rank += 1
    return rank == cols


def _check_injective(buf: Buffer, vars_: list, exprs: list, new_shape: tuple, what: str):
    """Refuse a map that sends two elements of ``buf`` to one place (the kernel would compute
    with one of them overwritten), or one that cannot be proven not to.  The proofs from the
    map's form come first: they cost microseconds, and the packing sketches of every tiled
    operator call this for every candidate; the point-by-point check is the fallback."""
    shape = buf.const_shape
    if _injective_affine(vars_, exprs, shape):
        return
    try:
        _invert(vars_, exprs, shape, new_shape, what, buf.name)
        return
    except ScheduleError:
        pass
    exact = _injective_by_points(vars_, exprs, shape, new_shape)
    if exact is None:
        raise ScheduleError(
            f"{what}: cannot prove index_map injective over the shape {shape} of {buf.name} "
            f"(too large to check point by point, and neither affine of full rank nor built "
            f"from x, x // c, x % c of single indices)")
    check(exact, f"{what}: index_map is not injective over the shape {shape} of "
                 f"{buf.name}: two elements would share one place of the new layout")


def _remap(node, old: Buffer, new: Buffer, vars_: list, exprs: list):
    def idx(indices):
        mapping = dict(zip(vars_, indices))
        return tuple(canon(substitute(e, mapping)) for e in exprs)

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is old:
            return BufferLoad(new, idx(n.indices))
        if isinstance(n, BufferStore) and n.buffer is old:
            return BufferStore(new, n.value, idx(n.indices))
        return None

    return transform(node, fn)


def transform_layout(func: PrimFunc, block: str, buffer, index_map: Callable) -> PrimFunc:
    """Change the layout of an intermediate buffer: every access ``X[idx]`` anywhere in the
    function becomes ``X'[index_map(*idx)]``, with the new shape the bounds of the map over the
    old shape; every block touching it gets its regions recomputed.

    ``buffer`` is an index into ``block``'s writes, ``("read" | "write", index)`` or a buffer
    name.  Preconditions: the buffer is allocated in the function; a function parameter keeps
    the caller's layout, so use :func:`pack_layout` (a packed copy) for it; the map returns
    integer indices that are non-negative and bounded over the old shape, and it is injective
    over the old shape (checked point by point for shapes up to about four million elements,
    otherwise proven from the map's form: affine of full rank, or built from x, x // c, x % c).

    Before / after (transform_layout(B, 0, lambda i, j: (j // 4, i, j % 4)))::

        alloc B[8, 16]; B[i, j] = ...; ... B[i, j]
          =>  alloc B[4, 8, 4]; B[j // 4, i, j % 4] = ...; ... B[j // 4, i, j % 4]
    """
    what = "transform_layout"
    loc = tree.find_block(func, block)
    blk = loc.node.block
    buf = resolve_buffer(func, blk, buffer, what)
    check(buf not in func.params,
          f"{what}: {buf.name} is a function parameter whose layout the caller fixes; use "
          f"pack_layout to read it through a packed copy")
    vars_, exprs, shape = _apply_map(buf, index_map, what)
    _check_injective(buf, vars_, exprs, shape, what)
    new_buf = Buffer(buf.name, tuple(IntImm(s) for s in shape), buf.dtype, buf.scope)
    touching = sorted(set(B.writers(func, buf)) | set(B.readers(func, buf)))
    body = _remap(func.body, buf, new_buf, vars_, exprs)
    body = B.replace_buffer(body, buf, new_buf)
    new = func.with_body(body)
    for name in touching:
        b = tree.find_block(new, name).node.block
        new = tree.replace(new, b, recompute_regions(b))
    return new


def _invert(vars_: list, exprs: list, shape: tuple, new_shape: tuple, what: str, name: str):
    """Old indices as expressions of the new ones for maps built from ``x``, ``x // c``,
    ``x % c`` and ``(x // a) % b`` of single old indices (permutations, splits, blockings).
    Returns (old index exprs in fresh new-index vars, new vars, guard vars needing a bound)."""
    new_vars = [Var(f"v{d}", dt.INDEX_DTYPE) for d in range(len(exprs))]
    parts: dict = {v: [] for v in vars_}
    for k, e in enumerate(exprs):
        stride, modulus, base = 1, None, e
        if isinstance(base, BinOp) and base.op == "%" and isinstance(base.b, IntImm):
            modulus, base = base.b.value, base.a
        if isinstance(base, BinOp) and base.op == "//" and isinstance(base.b, IntImm):
            stride, base = base.b.value, base.a
        check(isinstance(base, Var) and base in parts,
              f"{what}: cannot invert index_map dimension {k} for {name}: only x, x // c, x % c "
              f"and (x // a) % b of single indices are supported")
        parts[base].append((stride, modulus, k))
    olds = []
    padded = []
    for d, v in enumerate(vars_):
        ps = sorted(parts[v], key=lambda p: (p[0], p[1] is None, p[1] or 0))
        check(bool(ps), f"{what}: index_map drops index {d} of {name}; it is not invertible")
        expect = 1
        expr = None
        for n, (stride, modulus, k) in enumerate(ps):
            check(stride <= expect,
                  f"{what}: index_map pieces of index {d} of {name} leave gaps")
            check(stride == expect,
                  f"{what}: index_map pieces of index {d} of {name} overlap")
            last = n == len(ps) - 1
            check(modulus is not None or last,
                  f"{what}: index_map pieces of index {d} of {name} overlap")
            term = new_vars[k] if stride == 1 else binary("*", new_vars[k], IntImm(stride))
            expr = term if expr is None else binary("+", expr, term)
            if modulus is not None:
                expect = stride * modulus
        top_stride, top_mod, top_k = ps[-1]
        reach = top_stride * (top_mod if top_mod is not None else new_shape[top_k])
        check(reach >= shape[d], f"{what}: index_map does not cover index {d} of {name}")
        if reach > shape[d]:
            padded.append(d)
        olds.append(canon(expr))
    return new_vars, olds, padded


def pack_layout(func: PrimFunc, block: str, buffer, index_map: Callable,
                scope: str = "global") -> tuple[PrimFunc, str]:
    """Read a buffer of ``block`` (typically a function parameter) through a packed copy in the
    layout ``index_map``: a new buffer of the mapped shape, a packing block that fills it by
    iterating over the *new* layout (so it can be tiled and computed at like any block; points
    outside the old shape are zero padding), placed in the block's scope right before the loop
    nest holding ``block``; ``block``'s loads are redirected to the packed buffer.  Returns the
    new function and the packing block's name (``<buffer>_pack``).

    ``buffer`` is ``("read", index)``, an int index into the block's *reads*, or a name.
    Preconditions: the map is a combination of x, x // c, x % c, (x // a) % b of single indices
    that covers every old index exactly once (a permutation, split or blocking); no writer of
    the buffer sits in the same loop nest as ``block``.

    Before / after (pack_layout(C, "B", lambda k, n: (n // 16, k, n % 16)))::

        for i, j, k: C[i, j] += A[i, k] * B[k, j]
          =>  for v0, v1, v2: B_packed[v0, v1, v2] = B[v1, v0 * 16 + v2]
              for i, j, k: C[i, j] += A[i, k] * B_packed[j // 16, k, j % 16]
    """
    what = "pack_layout"
    check_scope(scope, what)
    loc = tree.find_block(func, block)
    blk = loc.node.block
    if isinstance(buffer, int) and not isinstance(buffer, bool):
        buffer = ("read", buffer)
    src = resolve_buffer(func, blk, buffer, what)
    check(all(w.buffer is not src for w in blk.writes),
          f"{what}: block {block} writes {src.name}; only a buffer it reads can be packed")
    vars_, exprs, shape = _apply_map(src, index_map, what)
    new_vars, olds, padded = _invert(vars_, exprs, src.const_shape, shape, what, src.name)
    scope_blk = B.scope_block(loc)
    items = B.seq_children(scope_blk.body)
    pos = B.child_index(items, {block})[0]
    writer_pos = B.child_index(items, set(B.writers(func, src)))
    check(not writer_pos or writer_pos[-1] < pos,
          f"{what}: buffer {src.name} is written in the same loop nest as block {block}")

    # 1. The packed buffer and the block that fills it, iterating over the new layout.
    packed = Buffer(B.unique_name([b.name for b in B.all_buffers(func)], f"{src.name}_packed"),
                    tuple(IntImm(s) for s in shape), src.dtype, scope)
    name = B.unique_name(B.block_names(func), f"{src.name}_pack")
    iter_vars = [B.spatial_iter(v.name, s) for v, s in zip(new_vars, shape)]
    rename = {v: iv.var for v, iv in zip(new_vars, iter_vars)}
    olds = [substitute(e, rename) for e in olds]
    new_idx = tuple(iv.var for iv in iter_vars)
    value: PrimExpr = BufferLoad(src, tuple(olds))
    if padded:
        cond = None
        for d in padded:
            c = olds[d] < src.const_shape[d]
            cond = c if cond is None else (cond & c)
        value = select(cond, value, const(0, src.dtype))
    store = BufferStore(packed, value, new_idx)
    reads = (BufferRegion(src, tuple(Range(e, IntImm(1)) for e in olds)),)
    writes = (BufferRegion(packed, tuple(Range(v, IntImm(1)) for v in new_idx)),)
    nest, _ = B.fresh_nest(name, iter_vars, store, reads, writes, list(shape),
                           [IntImm(0)] * len(shape), [])

    # 2. Redirect the block's loads and regions to the packed buffer.
    new_blk = recompute_regions(dc_replace(
        blk, body=_remap(blk.body, src, packed, vars_, exprs),
        init=None if blk.init is None else _remap(blk.init, src, packed, vars_, exprs)))
    items = [transform(s, lambda n: new_blk if n is blk else None) for s in items]
    items.insert(pos, nest)
    new_scope = dc_replace(scope_blk, body=seq(*items),
                           alloc_buffers=scope_blk.alloc_buffers + (packed,))
    return tree.replace(func, scope_blk, new_scope), name
