"""Auto-tensorize: multi-level tiling around a tensor intrinsic's tile, for targets that offer
intrinsics (``Target.intrinsics``).

A block matches an intrinsic when some of its loops can play the description's loops: a
spatial loop for each loop indexing the description's output, a reduction loop for each of
the others, each loop's extent a multiple of the tile's, the same dtypes and computation, and
every operand tile laid out as the intrinsic needs it (dense, for an LLVM implementation) --
directly or after packing a function parameter, which is what ``match`` plans::

    C[i, j] += int32(A[i, k]) * int32(B[k, j])      (uint8 x int8 -> int32, 128^3)
    dot_16x4_u8i8i32_vnni: C[i] += int32(A[k]) * int32(B[i, k]),  i < 16, k < 4
      => j plays i (16), k plays k (4); A's tile A[m, k..k+3] is dense already;
         B's tile B[k..k+3, j..j+15] is not: pack B as B[j // 16, k // 4, j % 16, k % 4]

The sketch (``tile_tensorized``) splits the tile off those loops, tiles what is left of every
loop in the multi-level structure ("SSRSRS") with sampled factors, keeps the tile innermost,
zeroes the accumulator before the outermost reduction loop (decompose_reduction: the
intrinsic only accumulates) and tensorizes the tile::

    for i0, j0, i1, j1:                         S0 S1 -- fused and parallelised by the postproc
      C_init ...                                the accumulator's zeroing, before k0
      for k0, i2, j2, k1, i3, j3:               R0 S2 R1 S3 -- sampled, j counts whole tiles
        tensor_intrin dot_16x4_u8i8i32_vnni(A[i, k * 4], B_packed[j, k, 0, 0], C[i, j * 16])

Search then tunes the outer tile sizes, the write-back level, parallel extent and unrolling.
A block that matches no intrinsic is left to plain multi-level tiling, untouched.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tensor_ir import intrinsics
from tensor_ir.arith import linear_form
from tensor_ir.expr import BufferLoad, Var
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import REDUCE, SPATIAL
from tensor_ir.target import Target
from tensor_ir.visitor import collect, uses_var

from ..errors import ScheduleError
from ..schedule import Schedule
from .analysis import BlockInfo, read_loads, single_store

__all__ = ["TensorizePack", "TensorizePlan", "finish_tensorized", "match", "resolve_intrinsics",
           "tile_tensorized"]

# Plans tried per block and intrinsic: more would only repeat one computation under another
# loop assignment (and each costs a trial schedule when the space is generated).
MAX_PLANS = 4


@dataclass(frozen=True)
class TensorizePack:
    """Pack function parameter ``buffer`` so that the intrinsic's tile of it is dense:
    ``outer`` lists (buffer dimension, tile extent or 0) in the packed order of the tiles'
    indices; ``inner`` the (buffer dimension, tile extent) pairs in the order of the
    intrinsic's operand dimensions, each becoming one innermost dimension."""

    buffer: str
    outer: tuple
    inner: tuple

    def index_map(self):
        outer, inner = self.outer, self.inner

        def mapping(*idx):
            head = tuple(idx[p] // e if e else idx[p] for p, e in outer)
            return head + tuple(idx[p] % e for p, e in inner)

        return mapping


@dataclass(frozen=True)
class TensorizePlan:
    """Tensorize with ``intrin``: the block's loop ``loops[d]`` plays the description's loop
    ``d`` (tile extent ``extents[d]``), after the ``packs``."""

    intrin: str
    loops: tuple
    extents: tuple
    packs: tuple


# ---------------------------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------------------------

def resolve_intrinsics(target: Target, names=None) -> tuple:
    """The registered intrinsics ``names`` (default: the target's), checked against the target:
    an unknown name or an LLVM implementation for another architecture or missing features is
    a ScheduleError (every candidate's build would fail)."""
    names = target.intrinsics if names is None else tuple(names)
    if not target.is_cpu:
        return ()
    arch = (target.triple or "").split("-", 1)[0]
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
    out = []
    for name in names:
        try:
            intrin = intrinsics.get(name)
        except intrinsics.IntrinsicError as err:
            raise ScheduleError(f"target {target} declares a tensor intrinsic the design space "
                                f"cannot use: {err}") from None
        impl = intrin.impl
        if isinstance(impl, intrinsics.LLVMImpl):
            archs = {{"arm64": "aarch64"}.get(a, a) for a in impl.arch}
            missing = [f for f in impl.features if not target.has_feature(f)]
            if arch not in archs or missing:
                why = (f"needs a {' or '.join(impl.arch)} target" if arch not in archs
                       else f"needs the features {', '.join(missing)}")
                raise ScheduleError(f"target {target} declares tensor intrinsic {name}, which "
                                    f"{why}")
        out.append(intrin)
    return tuple(out)


def _desc_accesses(tile) -> list:
    """(description buffer, its loop positions per dimension, written) of every access."""
    out = [(tile.store.buffer, tile.dims_of(tile.store.buffer), True)]
    for ld in collect(tile.store.value, BufferLoad):
        if ld.buffer is not tile.store.buffer:
            out.append((ld.buffer, tuple(tile.loops.index(i) for i in ld.indices), False))
    return out


def _dtypes(loads) -> list:
    return sorted(ld.buffer.dtype for ld in loads)


def match(func: PrimFunc, info: BlockInfo, intrin) -> list[TensorizePlan]:
    """Plans for tensorizing block ``info`` (trivially bound, one store) with ``intrin`` (a
    TensorIntrin); empty when it cannot match.  A plan is checked here as far as the block's
    structure tells (kinds, extents, which loops each operand moves along, layouts); the
    computation itself is compared by ``tensorize`` when the sketch is built."""
    tile = intrin.tile
    store = single_store(info.block)
    if store is None or not info.trivially_bound:
        return []
    # 1. Dtypes first: most blocks (every float32 one) stop here, before any search.
    desc = _desc_accesses(tile)
    desc_loads = [ld for ld in collect(tile.store.value, BufferLoad)
                  if ld.buffer is not tile.store.buffer]
    if store.buffer.dtype != tile.store.buffer.dtype:
        return []
    loads = read_loads(info.block)
    if _dtypes(loads) != _dtypes(desc_loads):
        return []
    # 2. The description's loop kinds: those indexing its output are spatial.
    out_dims = set(tile.dims_of(tile.store.buffer))
    kinds = [SPATIAL if d in out_dims else REDUCE for d in range(len(tile.loops))]
    extents = [lp.extent.value for lp in info.loops]
    block_vars = [iv.var for iv in info.loop_iters]
    reduce_vars = [v for v, kind in zip(block_vars, info.loop_kinds) if kind == REDUCE]
    params = set(func.params)
    plans = []
    for assign in itertools.permutations(range(len(info.loops)), len(tile.loops)):
        if any(info.loop_kinds[k] != kinds[d] or extents[k] % tile.extents[d]
               for d, k in enumerate(assign)):
            continue
        plan = _plan(intrin, assign, block_vars, reduce_vars, store, loads, desc, params)
        if plan is not None:
            plans.append(plan)
            if len(plans) >= MAX_PLANS:
                break
    return plans


def _plan(intrin, assign, block_vars, reduce_vars, store, loads, desc, params):
    tile = intrin.tile
    role = {block_vars[k]: d for d, k in enumerate(assign)}  # block var -> description loop
    unused = list(desc)
    packs = []
    accesses = [(store.buffer, store.indices, True)] + [(ld.buffer, ld.indices, False)
                                                         for ld in loads]
    for buf, indices, written in accesses:
        # Where each description loop moves this access: (buffer dimension, coefficient).
        moves: dict[int, tuple] = {}
        for p, index in enumerate(indices):
            form = linear_form(index)
            for var, d in role.items():
                coeff = form.coeff(var)
                if coeff == 0:
                    if uses_var(index, var):
                        return None  # not affine in the tile's loop (a div / mod of it)
                    continue
                if d in moves or coeff < 0:
                    return None
                moves[d] = (p, coeff)
        # The description operand it stands for: same role, dtype and tile loops.
        pick = next((e for e in unused if e[2] == written and e[0].dtype == buf.dtype
                     and set(e[1]) == set(moves)), None)
        if pick is None:
            return None
        unused.remove(pick)
        dims = pick[1]
        tile_extents = tuple(tile.extents[d] for d in dims)
        shape = buf.const_shape
        row = [1] * len(shape)
        for p in range(len(shape) - 2, -1, -1):
            row[p] = row[p + 1] * shape[p + 1]
        strides = tuple(moves[d][1] * row[moves[d][0]] for d in dims)
        if not intrin.impl.contiguous or strides == intrinsics.dense_strides(tile_extents):
            continue
        # 3. Not dense: pack it, when it is a parameter the block only reads, indexed by
        # the tile's loop variables themselves.
        if written or buf not in params:
            return None
        tiled = {}
        for d in dims:
            p, _ = moves[d]
            if not isinstance(indices[p], Var) or indices[p] not in role:
                return None
            tiled[p] = tile.extents[d]
        # The tiles' indices keep the buffer's order, those walked by reduction loops last:
        # one panel of the operand is then read contiguously along the reduction (as
        # rules/packing.py orders its panels).
        outer = sorted(((p, tiled.get(p, 0)) for p in range(len(shape))),
                       key=lambda pe: any(uses_var(indices[pe[0]], v) for v in reduce_vars))
        inner = tuple((moves[d][0], tile.extents[d]) for d in dims)
        packs.append(TensorizePack(buf.name, tuple(outer), inner))
    if unused:
        return None
    return TensorizePlan(intrin.name, tuple(assign), tuple(tile.extents), tuple(packs))


# ---------------------------------------------------------------------------------------------
# The sketch
# ---------------------------------------------------------------------------------------------

def tile_tensorized(sch: Schedule, block: str, info: BlockInfo, plan: TensorizePlan,
                    structure: str, max_innermost_factor: int) -> tuple:
    """Tile ``block`` around ``plan``'s tile in ``structure`` ("SSRSRS"), the tile innermost.
    Returns (the block, the S groups -- loops per S letter, outer to inner -- the outermost
    reduction loop, the tile's first loop) for the write-back and :func:`finish_tensorized`."""
    b = sch.get_block(block)
    loops = sch.get_loops(b)
    kinds = info.loop_kinds
    n_s, n_r = structure.count("S"), structure.count("R")
    # 1. The tile's loops, split off the loops that play the description's.
    outer_loops, inner = list(loops), {}
    for d, k in enumerate(plan.loops):
        outer_loops[k], inner[d] = sch.split(loops[k], [None, plan.extents[d]])
    # 2. What is left of every loop, in the multi-level structure with sampled factors.
    parts: dict[int, list] = {}
    for k, loop in enumerate(outer_loops):
        n = n_s if kinds[k] == SPATIAL else n_r
        if n > 1:
            tiles = sch.sample_perfect_tile(loop, n=n, max_innermost_factor=max_innermost_factor)
            parts[k] = sch.split(loop, tiles)
        else:
            parts[k] = [loop]
    order, s_groups, first_reduce = [], [], None
    s_seen = r_seen = 0
    for letter in structure:
        if letter == "S":
            group = [parts[k][s_seen] for k in range(len(kinds)) if kinds[k] == SPATIAL]
            s_groups.append(group)
            s_seen += 1
        else:
            group = [parts[k][r_seen] for k in range(len(kinds)) if kinds[k] == REDUCE]
            if first_reduce is None and group:
                first_reduce = group[0]
            r_seen += 1
        order.extend(group)
    # 3. The tile innermost, in the description's loop order.
    order.extend(inner[d] for d in range(len(plan.loops)))
    sch.reorder(*order)
    return b, s_groups, first_reduce, inner[0]


def finish_tensorized(sch: Schedule, b, plan: TensorizePlan, first_reduce, tile_loop) -> None:
    """Pack the operands the plan packs, zero the accumulator before the outermost reduction
    loop and tensorize the tile at ``tile_loop``."""
    for pack in plan.packs:
        copy = sch.pack_layout(b, pack.buffer, pack.index_map())
        _unroll_tile_copy(sch, copy, pack)
    if first_reduce is None:
        raise ScheduleError(f"auto-tensorize: {plan.intrin} has no reduction loop to zero "
                            f"its accumulator before")
    sch.decompose_reduction(b, first_reduce)
    sch.tensorize(tile_loop, plan.intrin)


# The most elements of one packed tile that are unrolled into straight-line copies (the VNNI
# tile has 64, sdot's 16): beyond this the copy code grows faster than it gains.
MAX_UNROLLED_TILE = 64


def _unroll_tile_copy(sch: Schedule, copy, pack: TensorizePack) -> None:
    """Unroll the loops of the packing copy that walk one intrinsic tile.

    A tile is packed because it is not dense in the operand, so its innermost packed dimension
    walks the operand with a stride: the packed tile is a small transpose (B[k..k+3,
    j..j+15] -> 16 x 4 bytes for VNNI).  Left as loops, the vectorize post-processor would
    vectorise the innermost one as a gather of 4 bytes (about ten instructions per 4 bytes);
    unrolled, the tile is straight-line code of whole rows of the operand that LLVM's SLP
    vectoriser turns into row loads and byte shuffles.  Measured on the 1024^3 uint8 x int8
    matmul's B (1 MiB, 2 cores): 0.35 ms gathered, 0.06 ms unrolled -- the gather was about a
    tenth of the whole tensorized matmul."""
    loops = sch.get_loops(copy)
    tile = math.prod(extent for _, extent in pack.inner)
    if tile > MAX_UNROLLED_TILE or len(loops) < len(pack.inner):
        return
    for loop in loops[len(loops) - len(pack.inner):]:
        sch.unroll(loop)
