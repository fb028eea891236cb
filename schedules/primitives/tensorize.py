"""blockize (wrap the loops under a loop into a block of their own) and tensorize (replace such
a tile by a tensor intrinsic after checking that it computes what the intrinsic describes)."""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir import arith, intrinsics
from tensor_ir import dtype as dt
from tensor_ir.expr import (
    And,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Select,
    Var,
    binary,
    logic_and,
)
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import (
    THREAD_BINDING,
    TRUE,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    IterVar,
    Range,
    TensorIntrinCall,
)
from tensor_ir.visitor import substitute, uses_var

from .. import tree
from ..errors import ScheduleError, check
from . import blocks as B
from .regions import canon, relax

__all__ = ["blockize", "tensorize", "tensorize_loop"]


# ---------------------------------------------------------------------------------------------
# blockize
# ---------------------------------------------------------------------------------------------

def _tile_chain(loop: For, what: str) -> tuple[list, BlockRealize]:
    """The loops from ``loop`` inward and the one realize at the bottom of that chain."""
    loops, node = [], loop
    while isinstance(node, For):
        check(node.kind != THREAD_BINDING,
              f"{what}: loop {node.loop_var.name} is bound to {node.thread_binding}")
        check(isinstance(node.min, IntImm) and node.min.value == 0
              and isinstance(node.extent, IntImm),
              f"{what}: loop {node.loop_var.name} needs a constant extent starting at 0")
        loops.append(node)
        node = node.body
    check(isinstance(node, BlockRealize),
          f"{what}: loop {loop.loop_var.name} must hold a chain of loops around one block, "
          f"found {type(node).__name__} under loop {loops[-1].loop_var.name}")
    return loops, node


def _conjuncts(pred) -> list:
    if isinstance(pred, And):
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    if isinstance(pred, IntImm) and pred.value:
        return []
    return [pred]


def blockize(func: PrimFunc, loop_var: Var) -> tuple[PrimFunc, str]:
    """Wrap the loops from ``loop_var`` inward and the block under them into a new block
    ``<block>_o`` whose iteration variables walk the tiles; the inner block keeps computing
    one tile's elements.  Returns the new function and the outer block's name.

    Preconditions: the loop holds a chain of loops (constant extents from 0, none thread
    bound) around exactly one block; each binding of that block is affine in the chain's
    loops with non-negative coefficients, and its part outside the chain is a multiple of the
    tile's extent in that binding (the split factor).

    Before / after (blockize(ii) with i = io * 16 + ii)::

        for io, ii:                           for io:
          C[vi] = ... (vi = io * 16 + ii)  =>   block C_o (vio = io):
                                                  for ii: C[vi] = ... (vi = vio * 16 + ii)
    """
    what = "blockize"
    loop: For = tree.find_loop(func, loop_var).node
    loops, realize = _tile_chain(loop, what)
    blk: Block = realize.block
    inner_vars = [lp.loop_var for lp in loops]
    extents = {lp.loop_var: lp.extent.value for lp in loops}

    # 1. Split every binding into the part outside the chain and the part inside it.
    outer_iters, outer_values, inner_values = [], [], []
    for iv, value in zip(blk.iter_vars, realize.iter_values):
        check(arith.is_index_dtype(value.dtype),
              f"{what}: binding of {iv.var.name} in block {blk.name} is not an index")
        form = arith.linear_form(value)
        inner_terms = []
        for atom, coeff in form.terms:
            if isinstance(atom, Var) and atom in extents:
                check(coeff > 0, f"{what}: binding {value} of {iv.var.name} in block "
                                 f"{blk.name} steps backwards along loop {atom.name}")
                inner_terms.append((atom, coeff))
            else:
                check(not any(uses_var(atom, v) for v in inner_vars),
                      f"{what}: binding {value} of {iv.var.name} in block {blk.name} is not "
                      f"affine in the loops under {loop_var.name}")
        name = f"{iv.var.name}_o"
        if not inner_terms:
            var = Var(name, iv.var.dtype)
            outer_iters.append(IterVar(var, iv.dom, iv.kind))
            outer_values.append(value)
            inner_values.append(var)
            continue
        span = sum(c * (extents[a] - 1) for a, c in inner_terms) + 1
        inner_part = IntImm(0, value.dtype)
        for atom, coeff in inner_terms:
            inner_part = binary("+", inner_part, binary("*", atom, IntImm(coeff, value.dtype)))
        outer_part = canon(binary("-", value, inner_part))
        quotient = canon(binary("//", outer_part, IntImm(span, outer_part.dtype)))
        check(arith.const_diff(binary("*", quotient, IntImm(span, quotient.dtype)),
                               outer_part) == 0,
              f"{what}: binding {value} of {iv.var.name} in block {blk.name} is not a "
              f"multiple of the tile's extent {span} plus the tile's loops")
        check(isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0
              and isinstance(iv.dom.extent, IntImm),
              f"{what}: iteration variable {iv.var.name} of block {blk.name} needs a "
              f"constant domain starting at 0")
        var = Var(name, iv.var.dtype)
        tiles = -(-iv.dom.extent.value // span)
        outer_iters.append(IterVar(var, Range(IntImm(0, iv.var.dtype),
                                              IntImm(tiles, iv.var.dtype)), iv.kind))
        outer_values.append(quotient)
        inner_values.append(canon(binary("+", binary("*", var, IntImm(span, var.dtype)),
                                         canon(inner_part))))

    # 2. Conjuncts of the predicate that do not involve the chain guard the whole tile.
    outer_pred, inner_pred = TRUE, TRUE
    for c in _conjuncts(realize.predicate):
        if any(uses_var(c, v) for v in inner_vars):
            inner_pred = logic_and(inner_pred, c)
        else:
            outer_pred = logic_and(outer_pred, c)

    # 3. The tile's regions: the inner block's, relaxed over the chain.
    inner_realize = BlockRealize(tuple(inner_values), inner_pred, blk)
    binding = {iv.var: v for iv, v in zip(blk.iter_vars, inner_values)}
    ranges = {lp.loop_var: (IntImm(0, lp.loop_var.dtype),
                            IntImm(lp.extent.value - 1, lp.loop_var.dtype)) for lp in loops}
    reads = tuple(_relaxed(r, binding, ranges) for r in blk.reads)
    writes = tuple(_relaxed(w, binding, ranges) for w in blk.writes)

    body = inner_realize
    for lp in reversed(loops):
        body = dc_replace(lp, body=body)
    name = B.unique_name(B.block_names(func), f"{blk.name}_o")
    outer = Block(name, tuple(outer_iters), reads, writes, body)
    new = BlockRealize(tuple(outer_values), outer_pred, outer)
    return tree.replace(func, loop, new), name


def _relaxed(region: BufferRegion, binding: dict, ranges: dict) -> BufferRegion:
    out = []
    for rng, size in zip(region.region, region.buffer.shape):
        lo_e = substitute(rng.min, binding)
        hi_e = substitute(binary("-", binary("+", rng.min, rng.extent), 1), binding)
        lo, hi = relax(lo_e, ranges), relax(hi_e, ranges)
        width = None if lo is None or hi is None else arith.const_diff(hi[1], lo[0])
        if width is None:
            out.append(Range(IntImm(0, size.dtype), size))
        else:
            out.append(Range(canon(lo[0]), IntImm(width + 1, dt.INDEX_DTYPE)))
    return BufferRegion(region.buffer, tuple(out))


# ---------------------------------------------------------------------------------------------
# tensorize
# ---------------------------------------------------------------------------------------------

class _Match:
    """Structural comparison of the program's tile with the description's, collecting each
    description buffer's program buffer, origin and steps; ``reason`` says what differed."""

    def __init__(self, intrin, loops: list, block: str, dom: dict):
        self.intrin = intrin
        # Index arithmetic is simplified knowing the ranges of the tile's loops and of the
        # outer block's iteration variables: (v_o * 16 + j) // 16 of a packed layout is v_o.
        self.analyzer = arith.Analyzer(dom)
        self.tile = intrin.tile
        self.loops = loops                      # program tile loop vars, by position
        self.var_map = dict(zip(self.tile.loops, loops))
        self.block = block
        self.bound: dict = {}                   # desc Buffer -> (program Buffer, origin, steps)
        self.reason: str | None = None

    def fail(self, message: str) -> bool:
        if self.reason is None:
            self.reason = message
        return False

    def expr(self, d: PrimExpr, p: PrimExpr) -> bool:
        if isinstance(d, BufferLoad):
            if not isinstance(p, BufferLoad):
                return self.fail(f"the intrinsic loads {d.buffer.name} where block "
                                 f"{self.block} computes {p}")
            return self.access(d.buffer, d.indices, p.buffer, p.indices)
        if type(d) is not type(p):
            return self.fail(f"block {self.block} computes {p} where the intrinsic computes {d}")
        if isinstance(d, Var):
            if self.var_map.get(d) is not p:
                return self.fail(f"block {self.block} uses {p} where the intrinsic uses {d}")
            return True
        if isinstance(d, (IntImm, FloatImm)):
            if d.dtype != p.dtype or d.value != p.value:
                return self.fail(f"block {self.block} has the constant {p} ({p.dtype}) where "
                                 f"the intrinsic has {d} ({d.dtype})")
            return True
        if isinstance(d, Cast):
            if d.dtype != p.dtype:
                return self.fail(f"block {self.block} casts to {p.dtype} where the intrinsic "
                                 f"casts to {d.dtype}")
            return self.expr(d.value, p.value)
        if isinstance(d, (BinOp, Cmp)):
            if d.op != p.op:
                return self.fail(f"block {self.block} computes '{p.op}' where the intrinsic "
                                 f"computes '{d.op}' ({p} vs {d})")
            if self.expr(d.a, p.a) and self.expr(d.b, p.b):
                return True
            if isinstance(d, BinOp) and d.op in ("+", "*", "min", "max"):
                # Commutative: try the operands the other way round, from the same state.
                saved, reason = dict(self.bound), self.reason
                self.reason = None
                if self.expr(d.a, p.b) and self.expr(d.b, p.a):
                    self.reason = None
                    return True
                self.bound, self.reason = saved, reason
            return False
        if isinstance(d, Call):
            if d.name != p.name or d.dtype != p.dtype or len(d.args) != len(p.args):
                return self.fail(f"block {self.block} calls {p.name} ({p.dtype}) where the "
                                 f"intrinsic calls {d.name} ({d.dtype})")
            return all(self.expr(x, y) for x, y in zip(d.args, p.args))
        if isinstance(d, (And, Or)):
            return self.expr(d.a, p.a) and self.expr(d.b, p.b)
        if isinstance(d, Not):
            return self.expr(d.a, p.a)
        if isinstance(d, Select):
            return (self.expr(d.condition, p.condition) and self.expr(d.true_value, p.true_value)
                    and self.expr(d.false_value, p.false_value))
        if d == p:
            return True
        return self.fail(f"block {self.block} computes {p} where the intrinsic computes {d}")

    def access(self, dbuf, dindices: tuple, pbuf, pindices: tuple) -> bool:
        """Map description buffer ``dbuf`` (indexed by ``dindices``, loop variables) to the
        program's ``pbuf[pindices]``: dtypes agree, the indices are affine in the tile loops,
        and a description dimension moves the program indices by constant steps."""
        if dbuf.dtype != pbuf.dtype:
            return self.fail(f"{pbuf.name} has dtype {pbuf.dtype}, the intrinsic expects "
                             f"{dbuf.dtype} (its {dbuf.name})")
        coeffs, origin = [], []
        for index in pindices:
            index = self.analyzer.simplify(index)
            form = self.analyzer.linear_form(index)
            row = {}
            for atom, coeff in form.terms:
                if isinstance(atom, Var) and atom in self.loops:
                    row[atom] = coeff
                elif any(uses_var(atom, v) for v in self.loops):
                    return self.fail(f"index {index} of {pbuf.name} in block {self.block} is "
                                     f"not affine in the tile's loops")
            coeffs.append(row)
            origin.append(canon(substitute(index, {v: IntImm(0, v.dtype)
                                                   for v in self.loops})))
        used = set()
        steps = []
        for dvar in dindices:
            pvar = self.var_map[dvar]
            used.add(pvar)
            steps.append(tuple(row.get(pvar, 0) for row in coeffs))
        for pvar in self.loops:
            if pvar not in used and any(row.get(pvar, 0) for row in coeffs):
                dvar = self.tile.loops[self.loops.index(pvar)]
                return self.fail(f"{pbuf.name} varies with loop {pvar.name} in block "
                                 f"{self.block}, but the intrinsic's {dbuf.name} does not depend "
                                 f"on its loop {dvar.name}")
        steps = tuple(steps)
        entry = (pbuf, tuple(origin), steps)
        known = self.bound.get(dbuf)
        if known is None:
            for other, (obuf, _, _) in self.bound.items():
                if obuf is pbuf and (self.tile.written[self.tile.params.index(dbuf)]
                                     or self.tile.written[self.tile.params.index(other)]):
                    return self.fail(f"{pbuf.name} stands for both {other.name} and "
                                     f"{dbuf.name} of the intrinsic, and one is written")
            self.bound[dbuf] = entry
            return True
        if known[0] is not pbuf or known[2] != steps or any(
                arith.const_diff(a, b) != 0 for a, b in zip(known[1], origin)):
            return self.fail(f"the intrinsic's {dbuf.name} is accessed twice and block "
                             f"{self.block} accesses {known[0].name} and {pbuf.name} at "
                             f"different places there")
        return True


def _tile_of(func: PrimFunc, block: str, intrin, what: str):
    """The outer block's realize, its tile loops and the inner realize, checked against the
    description's loop nest."""
    loc = tree.find_block(func, block)
    outer: Block = loc.node.block
    tile = intrin.tile
    expected = ", ".join(f"{v.name}: {e}" for v, e in zip(tile.loops, tile.extents))
    body, loops = outer.body, []
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    check(isinstance(body, BlockRealize),
          f"{what}: block {block} must hold a loop nest around one block (what blockize "
          f"makes); its body holds {type(body).__name__}")
    check(len(loops) == len(tile.loops),
          f"{what}: block {block} has {len(loops)} loops in its tile "
          f"({', '.join(lp.loop_var.name for lp in loops) or 'none'}), the intrinsic "
          f"{intrin.name} expects {len(tile.loops)} ({expected})")
    for lp, dvar, extent in zip(loops, tile.loops, tile.extents):
        check(isinstance(lp.min, IntImm) and lp.min.value == 0,
              f"{what}: loop {lp.loop_var.name} starts at {lp.min}, the intrinsic expects 0")
        check(isinstance(lp.extent, IntImm) and lp.extent.value == extent,
              f"{what}: extent of loop {lp.loop_var.name} is {lp.extent}, the intrinsic "
              f"{intrin.name} expects {extent} (its loop {dvar.name})")
    return loc, outer, loops, body


def tensorize(func: PrimFunc, block: str, intrin_name: str) -> PrimFunc:
    """Replace the body of ``block`` (a tile: a loop nest around one block, as blockize makes
    it) by the tensor intrinsic ``intrin_name``.

    Preconditions: the tile's loops have the description's extents, in its order; the inner
    block has no init (run decompose_reduction first: the accumulator is zeroed outside the
    intrinsic) and no predicate; it computes the description's update with the same
    operations and dtypes (the operands of + * min max may be swapped); every access is
    affine in the tile's loops and moves along exactly the loops the description's access
    moves along; an output tile does not alias an input; an implementation that takes plain
    pointers (LLVM) needs every operand tile dense in its buffer.

    Before / after (tensorize(C_o, "dot_16x4_u8i8i32_vnni"))::

        block C_o (vm, vn_o, vk_o):           block C_o (vm, vn_o, vk_o):
          for n_1 in 16, k_1 in 4:      =>      tensor_intrin dot_16x4_u8i8i32_vnni(
            C[vm, vn] += A[vm, vk] * B[..]          A[vm, vk_o * 4], B[...], C[vm, vn_o * 16])
    """
    what = "tensorize"
    try:
        intrin = intrinsics.get(intrin_name)
    except intrinsics.IntrinsicError as err:
        raise ScheduleError(f"{what}: {err}") from None
    tile = intrin.tile
    _, outer, loops, inner = _tile_of(func, block, intrin, what)
    blk: Block = inner.block
    check(blk.init is None,
          f"{what}: block {blk.name} still zeroes its accumulator (it has an init); run "
          f"decompose_reduction first so the init stays outside the intrinsic")
    check(isinstance(inner.predicate, IntImm) and inner.predicate.value,
          f"{what}: block {blk.name} is guarded by {inner.predicate}; a partial tile cannot "
          f"be tensorized (choose split factors that divide the extents)")
    check(isinstance(blk.body, BufferStore),
          f"{what}: block {blk.name} must be one store to match {intrin.name}")
    store = substitute(blk.body, {iv.var: v for iv, v in zip(blk.iter_vars, inner.iter_values)})

    loop_vars = [lp.loop_var for lp in loops]
    dom = {lp.loop_var: (0, lp.extent.value - 1) for lp in loops}
    for iv in outer.iter_vars:
        lo = arith.int_bound(iv.dom.min)
        ext = arith.int_bound(iv.dom.extent)
        if lo is not None and ext is not None and ext[0] >= 1:
            dom[iv.var] = (lo[0], lo[1] + ext[1] - 1)
    match = _Match(intrin, loop_vars, blk.name, dom)
    ok = (match.access(tile.store.buffer, tile.store.indices, store.buffer, store.indices)
          and match.expr(tile.store.value, store.value))
    check(ok, f"{what}: block {blk.name} does not match {intrin.name}: {match.reason}")

    operands, steps, extents = [], [], []
    for q, dbuf in enumerate(tile.params):
        pbuf, origin, step = match.bound[dbuf]
        shape = dbuf.const_shape
        if intrin.impl.contiguous:
            _check_dense(pbuf, step, shape, dbuf, intrin.name, what)
        if tile.written[q]:
            for d, s in enumerate(step):
                check(any(s), f"{what}: {pbuf.name} does not move along the intrinsic's "
                              f"dimension {d} of {dbuf.name}; the intrinsic would write one "
                              f"element several times")
        operands.append(BufferLoad(pbuf, origin))
        steps.append(step)
        extents.append(tuple(shape))
    call = TensorIntrinCall(intrin.name, tuple(operands), tuple(steps), tuple(extents),
                            tuple(tile.written))
    return tree.replace(func, outer, dc_replace(outer, body=call))


def _check_dense(pbuf, steps: tuple, extents: tuple, dbuf, intrin: str, what: str) -> None:
    check(all(isinstance(s, IntImm) for s in pbuf.shape),
          f"{what}: {pbuf.name} has a non-constant shape")
    shape = pbuf.const_shape
    row = [1] * len(shape)
    for p in range(len(shape) - 2, -1, -1):
        row[p] = row[p + 1] * shape[p + 1]
    strides = tuple(sum(s * r for s, r in zip(step, row)) for step in steps)
    dense = intrinsics.dense_strides(extents)
    check(strides == dense,
          f"{what}: the tile of {pbuf.name} has element strides {strides}, the intrinsic "
          f"{intrin} needs its {dbuf.name} dense with strides {dense}; pack {pbuf.name} "
          f"(pack_layout) so that the tile is contiguous")


def tensorize_loop(func: PrimFunc, loop_var: Var, intrin_name: str) -> PrimFunc:
    """blockize ``loop_var``, then tensorize the new block (one step: it fails as a whole)."""
    func, name = blockize(func, loop_var)
    return tensorize(func, name, intrin_name)
