"""Loop primitives as pure PrimFunc -> PrimFunc rewrites: split, fuse, reorder, tile.

Loops are addressed by their loop variable (``tensor_ir.Var``, compared by identity).  A
primitive creates fresh variables for the loops it makes and keeps the variables of every loop
it does not replace, which is what lets a Schedule's loop handles survive rewrites elsewhere.
Block bindings (``BlockRealize.iter_values``) are rewritten by substitution and simplified.
"""
from __future__ import annotations

from tensor_ir.expr import IntImm, Var, compare, logic_and
from tensor_ir.func import PrimFunc
from tensor_ir.simplify import simplify
from tensor_ir.stmt import SERIAL, Block, BlockRealize, BufferStore, For, Stmt
from tensor_ir.visitor import children, substitute, transform, uses_var

from ..dependence import carried_dependence, loop_domains, realizes_under
from ..errors import ScheduleError, check
from ..tree import MISS, IdentityMemo, find_loop, replace


def simplify_bindings(stmt, dom: dict):
    """Simplify every block binding and predicate under ``stmt`` given loop bounds ``dom``."""

    def fn(n):
        if isinstance(n, BlockRealize):
            values = tuple(simplify(v, dom) for v in n.iter_values)
            pred = simplify(n.predicate, dom)
            if pred is n.predicate and all(a is b for a, b in zip(values, n.iter_values)):
                return None
            return BlockRealize(values, pred, n.block)
        return None

    return transform(stmt, fn)


def _check_plain_loop(loop: For, what: str) -> None:
    check(loop.kind == SERIAL and loop.thread_binding is None,
          f"{what}: loop {loop.loop_var.name} is {loop.kind}"
          + (f" (bound to {loop.thread_binding})" if loop.thread_binding else "")
          + "; only serial loops can be restructured")


def _guard_blocks(stmt, cond, loop_name: str):
    """AND ``cond`` into the predicate of every BlockRealize under ``stmt``."""

    def check_no_bare_store(n, in_block):
        if isinstance(n, BufferStore) and not in_block:
            raise ScheduleError(f"split: loop {loop_name} holds a store outside any block; a "
                                f"non-divisible split cannot guard it")
        inside = in_block or isinstance(n, Block)
        for c in children(n):
            if isinstance(c, Stmt):
                check_no_bare_store(c, inside)

    check_no_bare_store(stmt, False)

    def fn(n):
        if isinstance(n, BlockRealize):
            return BlockRealize(n.iter_values, logic_and(n.predicate, cond), n.block)
        return None

    return transform(stmt, fn)


def split(func: PrimFunc, loop_var: Var, factors) -> tuple[PrimFunc, list[Var]]:
    """Split a loop into ``len(factors)`` nested loops, outermost first.

    Preconditions: the loop is serial with a constant extent; factors are positive ints and at
    most one is None (inferred as the ceiling of extent / product of the others); the product
    covers the extent.  A product larger than the extent guards the blocks below with a
    predicate instead of being rejected.

        for i in range(10):            for i_0 in range(3):
          C[i] = ...          ->         for i_1 in range(4):
                                           if i_0 * 4 + i_1 < 10: C[i_0 * 4 + i_1] = ...
    """
    loop: For = find_loop(func, loop_var).node
    name = loop_var.name
    _check_plain_loop(loop, "split")
    factors = list(factors)
    check(len(factors) >= 2, f"split: loop {name} needs at least 2 factors, got {factors}")
    check(isinstance(loop.extent, IntImm),
          f"split: loop {name} has a non-constant extent {loop.extent}")
    extent = loop.extent.value
    nones = [k for k, f in enumerate(factors) if f is None]
    check(len(nones) <= 1, f"split: loop {name}: at most one factor may be None, got {factors}")
    known = 1
    for f in factors:
        if f is None:
            continue
        check(isinstance(f, int) and not isinstance(f, bool) and f >= 1,
              f"split: loop {name}: factor {f!r} is not a positive int")
        known *= int(f)
    if nones:
        factors[nones[0]] = max(1, -(-extent // known))
    factors = [int(f) for f in factors]
    total = 1
    for f in factors:
        total *= f
    check(total >= extent, f"split: factors {factors} of loop {name} do not cover its extent "
                           f"{extent} (product {total})")

    new_vars = [Var(f"{name}_{k}", loop_var.dtype) for k in range(len(factors))]
    fused = new_vars[0]
    for v, f in zip(new_vars[1:], factors[1:]):
        fused = fused * f + v
    body = substitute(loop.body, {loop_var: loop.min + fused})
    if total != extent:
        body = _guard_blocks(body, compare("<", fused, extent), name)
    dom = loop_domains(func.body)
    for v, f in zip(new_vars, factors):
        dom[v] = (0, f - 1)
    body = simplify_bindings(body, dom)
    nest = body
    for k in range(len(factors) - 1, -1, -1):
        nest = For(new_vars[k], IntImm(0, loop_var.dtype), IntImm(factors[k], loop_var.dtype),
                   SERIAL, nest, None, loop.annotations if k == 0 else ())
    return replace(func, loop, nest), new_vars


def fuse(func: PrimFunc, loop_vars) -> tuple[PrimFunc, Var]:
    """Fuse perfectly nested, adjacent loops (given outer to inner) into one.

    Preconditions: at least two distinct serial loops; each loop's body is exactly the next
    loop; no loop's bounds use the variable of a loop being fused.

        for i in range(4):             for i_j_fused in range(32):
          for j in range(8):   ->        C[i_j_fused // 8, i_j_fused % 8] = ...
            C[i, j] = ...
    """
    loop_vars = list(loop_vars)
    # A post-processor tries a fusion on the pure function before recording it through the
    # Schedule: the second call returns the first one's result (and fused variable).
    objects = (func, *loop_vars)
    done = _FUSED.get(objects)
    if done is not MISS:
        return done
    done = _fuse(func, loop_vars)
    _FUSED.put(objects, (), done)
    return done


_FUSED = IdentityMemo(16)


def _fuse(func: PrimFunc, loop_vars: list) -> tuple[PrimFunc, Var]:
    check(len(loop_vars) >= 2, f"fuse needs at least 2 loops, got {len(loop_vars)}")
    check(len({id(v) for v in loop_vars}) == len(loop_vars),
          f"fuse: a loop is given twice in {[v.name for v in loop_vars]}")
    loops = [find_loop(func, v).node for v in loop_vars]
    for lp in loops:
        _check_plain_loop(lp, "fuse")
    for outer, inner in zip(loops, loops[1:]):
        check(outer.body is inner,
              f"fuse: loops {outer.loop_var.name} and {inner.loop_var.name} are not adjacent "
              f"(the body of {outer.loop_var.name} must be exactly loop {inner.loop_var.name})")
    for lp in loops[1:]:
        for other in loops:
            check(not uses_var(lp.min, other.loop_var) and not uses_var(lp.extent, other.loop_var),
                  f"fuse: the bounds of loop {lp.loop_var.name} depend on loop "
                  f"{other.loop_var.name}")
    dtype = loop_vars[0].dtype
    fused = Var("_".join(v.name for v in loop_vars) + "_fused", dtype)
    extent = loops[0].extent
    for lp in loops[1:]:
        extent = extent * lp.extent
    mapping = {}
    inner_product = IntImm(1, dtype)
    for k in range(len(loops) - 1, -1, -1):
        lp = loops[k]
        value = fused // inner_product
        if k > 0:
            value = value % lp.extent
        mapping[lp.loop_var] = lp.min + value
        inner_product = inner_product * lp.extent
    dom = loop_domains(func.body)
    if isinstance(extent, IntImm):
        dom[fused] = (0, extent.value - 1)
    body = simplify_bindings(substitute(loops[-1].body, mapping), dom)
    new = For(fused, IntImm(0, dtype), simplify(extent, dom), SERIAL, body, None,
              loops[0].annotations)
    return replace(func, loops[0], new), fused


def reorder(func: PrimFunc, loop_vars) -> PrimFunc:
    """Reorder loops of one nest: the given loops take, outer to inner, the positions the given
    loops occupy, in the order given.  Loops between them that are not given stay put.

    Preconditions: distinct serial-or-annotated loops on one path of the tree, a perfect nest
    from the outermost to the innermost given loop (each loop's body is exactly the next loop),
    no moved loop's bounds using a loop of the nest, and, when several blocks sit under the
    nest, no moved loop carrying a dependence between them.

        for i: for j: S(i, j)   --reorder(j, i)-->   for j: for i: S(i, j)
    """
    loop_vars = list(loop_vars)
    check(len(loop_vars) >= 1, "reorder needs at least one loop")
    names = [v.name for v in loop_vars]
    check(len({id(v) for v in loop_vars}) == len(loop_vars),
          f"reorder: a loop is given twice in {names}")
    locs = [find_loop(func, v) for v in loop_vars]
    deepest = max(locs, key=lambda loc: len(loc.path))
    chain_nodes = deepest.path + [deepest.node]
    ids = {id(n) for n in chain_nodes}
    for loc in locs:
        check(id(loc.node) in ids, f"reorder: loops {names} are not in one nest (loop "
                                   f"{loc.node.loop_var.name} is not an ancestor of loop "
                                   f"{deepest.node.loop_var.name})")
    top = min(locs, key=lambda loc: len(loc.path))
    start = len(top.path)
    chain = chain_nodes[start:]
    for outer, inner in zip(chain, chain[1:]):
        check(isinstance(inner, For) and outer.body is inner,
              f"reorder: loops {names} are not perfectly nested (loop {outer.loop_var.name} "
              f"holds more than the next loop)")
    given = {id(loc.node) for loc in locs}
    positions = [k for k, lp in enumerate(chain) if id(lp) in given]
    if [chain[k] for k in positions] == [loc.node for loc in locs]:
        return func  # already in this order
    chain_vars = [lp.loop_var for lp in chain]
    for loc in locs:
        lp = loc.node
        for v in chain_vars:
            check(not uses_var(lp.min, v) and not uses_var(lp.extent, v),
                  f"reorder: the bounds of loop {lp.loop_var.name} depend on loop {v.name}")
    if len(realizes_under(chain[-1].body)) > 1:
        # Every loop whose position relative to another changes must not carry a dependence
        # between two of the blocks below: their order inside one iteration is all that stays.
        for lp in chain[positions[0]:positions[-1] + 1]:
            dep = carried_dependence(func.body, lp, include_self=False,
                                     outer=find_loop(func, lp.loop_var).loops)
            if dep is not None:
                raise ScheduleError(
                    f"reorder: loop {lp.loop_var.name} may carry a dependence from block "
                    f"{dep[0]} to block {dep[1]} through buffer {dep[2]}")
    new_order = list(chain)
    for k, loc in zip(positions, locs):
        new_order[k] = loc.node
    body = chain[-1].body
    for lp in reversed(new_order):
        body = For(lp.loop_var, lp.min, lp.extent, lp.kind, body, lp.thread_binding,
                   lp.annotations)
    return replace(func, chain[0], body)


def tile(func: PrimFunc, loop_vars, factors) -> tuple[PrimFunc, list[list[Var]]]:
    """Split each loop by its factor list (all lists of one length n) and reorder the parts
    level by level; returns the loops per level: ``[[i_0, j_0], [i_1, j_1], ...]``."""
    loop_vars = list(loop_vars)
    factors = [list(f) for f in factors]
    check(len(loop_vars) == len(factors),
          f"tile: {len(loop_vars)} loops but {len(factors)} factor lists")
    check(len(loop_vars) >= 1 and len({len(f) for f in factors}) == 1,
          f"tile: every loop needs the same number of factors, got {factors}")
    parts = []
    for v, fs in zip(loop_vars, factors):
        func, new = split(func, v, fs)
        parts.append(new)
    levels = [[p[k] for p in parts] for k in range(len(factors[0]))]
    func = reorder(func, [v for level in levels for v in level])
    return func, levels
