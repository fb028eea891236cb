"""The design space of an int8 matmul on the accelerator, and its default (naive) schedule.

    func = matmul_int8(256, 256, 256)            # C[i, j] = sum_k int32(A[i, k]) * int32(B[k, j])
    space = design_space(func)                   # a schedules.DesignSpace (one template sketch)
    naive = default_schedule(func)               # 16x16x16 tiles, copies at the innermost level

The template (one sketch; decisions in brackets)::

    C computes into the accumulator scratchpad (cache_write, local.acc_buffer); A is read
    through the input scratchpad and B through the weight scratchpad (cache_read)
    i, j, k split into [tiles] x [16-blocks per tile] x 16
    loop order  i_tile, j_tile, k_tile, i_block, j_block, k_block, i16, j16, k16
    the accumulator is written back under j_tile (the innermost loop outside the reduction)
    and zeroed there before k_tile (decompose_reduction)
    the 16x16x16 tile is blockized and tensorized with the GEMM intrinsic
    A's and B's copies go to [a sampled compute location] each

Search tunes the three tile splits (the accumulator tile is ``16*bi x 16*bj``, the operand
tiles follow) and where each operand copy sits: higher copies are fewer and bigger and are
reused by every iteration below them.  Programs whose scratchpads overflow, or that the
accelerator cannot run (an inlined copy leaves a GEMM operand in main memory), are rejected by
the :class:`VerifyAccelerator` post-processor, so search spends no measurement on them.
"""
from __future__ import annotations

from schedules.errors import ScheduleError
from schedules.postproc import Postproc, default_postprocs
from schedules.schedule import Schedule
from schedules.space import DesignSpace
from tensor_ir import te
from tensor_ir.errors import TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from .hardware import (
    ACC_SCOPE,
    DEFAULT_ACCELERATOR,
    INP_SCOPE,
    WGT_SCOPE,
    Accelerator,
    AcceleratorError,
    accelerator_target,
)
from .intrinsic import GEMM_INTRIN
from .timing import simulate

__all__ = ["VerifyAccelerator", "default_schedule", "design_space", "gemm_template",
           "matmul_int8", "schedule_gemm"]

_TILE = 16


def matmul_int8(m: int = 256, n: int = 256, k: int = 256, name: str | None = None) -> PrimFunc:
    """``C[i, j] = sum_k int32(A[i, k]) * int32(B[k, j])``, A (m, k) and B (k, n) int8."""
    a = te.placeholder((m, k), "int8", name="A")
    b = te.placeholder((k, n), "int8", name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("int32")
                                               * b[r, j].astype("int32"), axis=r), name="C")
    return te.create_prim_func([a, b, c], name=name or f"matmul_int8_{m}_{n}_{k}")


def schedule_gemm(sch: Schedule, blocks: tuple | None = None, naive: bool = False,
                  block: str = "C") -> None:
    """Schedule the matmul ``block`` of ``sch`` for the accelerator (see the module text).

    ``blocks``: 16-blocks per tile along i, j, k (each dividing ``extent // 16``), recorded as
    the decisions of the tile samplers; None samples them.  ``naive``: the copies of A and B
    go under the innermost loop around the GEMM tile (the default schedule) instead of to a
    sampled location.  Raises ScheduleError when the block is no 16-aligned matmul."""
    c = sch.get_block(block)
    acc = sch.cache_write(c, 0, ACC_SCOPE)
    inp = sch.cache_read(c, 0, INP_SCOPE)
    wgt = sch.cache_read(c, 1, WGT_SCOPE)
    loops = sch.get_loops(c)
    if len(loops) != 3:
        raise ScheduleError(f"schedule_gemm: block {block} has {len(loops)} loops; a matmul "
                            f"has i, j and k")
    tiles, inner = [], []
    for axis, loop in enumerate(loops):
        extent = sch.get(loop).extent.value
        if extent % _TILE:
            raise ScheduleError(f"schedule_gemm: loop {sch.get(loop).loop_var.name} of block "
                                f"{block} has extent {extent}, not a multiple of {_TILE}")
        outer, sixteen = sch.split(loop, [None, _TILE])
        decision = None
        if blocks is not None:
            per_tile = blocks[axis]
            if (extent // _TILE) % per_tile:
                raise ScheduleError(f"schedule_gemm: {per_tile} blocks of {_TILE} per tile do "
                                    f"not divide the {extent // _TILE} blocks of axis {axis}")
            decision = [extent // _TILE // per_tile, per_tile]
        # max_innermost_factor=-1: a tile may span the whole axis (capacity decides).
        factors = sch.sample_perfect_tile(outer, n=2, max_innermost_factor=-1,
                                          decision=decision)
        tile, block_loop = sch.split(outer, factors)
        tiles.append(tile)
        inner.append((block_loop, sixteen))
    (ib, i16), (jb, j16), (kb, k16) = inner
    sch.reorder(*tiles, ib, jb, kb, i16, j16, k16)
    sch.reverse_compute_at(acc, tiles[1])
    sch.decompose_reduction(c, tiles[2])
    # Tensorized before the copies move: the copies' compute locations are then the loops
    # around the GEMM tile, never loops inside it.
    sch.tensorize(sch.blockize(i16), GEMM_INTRIN)
    for cache in (inp, wgt):
        where = kb if naive else sch.sample_compute_location(cache)
        sch.compute_at(cache, where)


def gemm_template(sch: Schedule) -> None:
    """The design space's template: :func:`schedule_gemm` with every decision sampled."""
    schedule_gemm(sch)


def default_schedule(func: PrimFunc, block: str = "C") -> Schedule:
    """The naive schedule: one 16x16x16 GEMM per tile, A's and B's 16x16 tiles copied in
    right before each GEMM, the accumulator tile written back after its reduction."""
    sch = Schedule(func)
    schedule_gemm(sch, blocks=(1, 1, 1), naive=True, block=block)
    return sch


class VerifyAccelerator(Postproc):
    """Rejects programs the accelerator cannot run: scratchpad overflow, or anything the
    timing model refuses (see :mod:`.timing`)."""

    rewrites = False

    def __init__(self, accelerator: Accelerator = DEFAULT_ACCELERATOR):
        self.accelerator = accelerator
        self.last_error: str | None = None

    def apply(self, sch: Schedule) -> bool:
        try:
            simulate(sch.func, self.accelerator)
        except (AcceleratorError, TensorIRError) as err:
            self.last_error = str(err)
            return False
        return True

    def __repr__(self) -> str:
        return f"VerifyAccelerator({self.accelerator})"


def design_space(func: PrimFunc, accelerator: Accelerator = DEFAULT_ACCELERATOR,
                 target: Target | str | None = None) -> DesignSpace:
    """The DesignSpace of ``func`` (a matmul like :func:`matmul_int8`) on ``accelerator``:
    the template above, the CPU post-processors of ``target`` (default: the accelerator's
    target, :func:`accelerator_target`) and :class:`VerifyAccelerator`.  Pass it to
    ``autotune.tune(func, target, space=...)``."""
    target = accelerator_target() if target is None else (
        target if isinstance(target, Target) else Target(target))
    postprocs = default_postprocs(target) + [VerifyAccelerator(accelerator)]
    return DesignSpace(func, target, template=gemm_template, postprocs=postprocs)
