"""The acceptance matrix: every Schedule primitive on matmul, conv2d, softmax and layer_norm.

Each row of the matrix is one small function that schedules a workload through the public
Schedule API.  A legal row is checked five ways:

1. the reference interpreter matches the numpy reference;
2. an LLVM build matches it too (a loop bound to a GPU thread axis must instead make
   ``autotune.build`` raise ``BuildError``: bind is checked through the interpreter only);
3. ``Trace.from_json`` of the trace's JSON text, replayed on the original function, gives a
   structurally equal function (and records the same trace again);
4. ``str(trace)`` executed as Python on a fresh Schedule gives a structurally equal function;
5. the printed scheduled function equals its golden snapshot ``tests/golden/matrix_*.txt``
   (regenerate with ``pytest --update-golden``, then review the diff).

A row whose combination is not legal instead does its legal setup, then asserts that the illegal
step raises ``ScheduleError`` with a message naming what was wrong, and that the schedule (its
function and its trace) is left exactly as it was.

The workloads come from ``tensor_ir.ops`` (matmul, NCHW conv2d with padding, softmax,
layer_norm).  The block primitives that need an injective stage around a matmul use
``matmul_bias_relu``, written with te: C = A @ B (reduction), D = C + bias (injective),
E = max(D, 0) (injective, the output).  Sizes are tiny and deliberately not all powers of two,
so non-divisible splits and padded layouts are exercised.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import autotune
from schedules import Schedule, ScheduleError, Trace
from schedules.instructions import kinds
from tensor_ir import interp, intrinsics, ops, te
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc, structural_equal
from tensor_ir.printer import to_text
from tensor_ir.stmt import THREAD_BINDING, For
from tensor_ir.visitor import collect

# fp32 everywhere.  The longest reduction is conv2d's 2 * 3 * 3 = 18 terms of products of
# numbers in [-1, 1]: its rounding error stays below 1e-6, so 1e-5 holds for every row.
RTOL = ATOL = 1e-5


# ---------------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """A PrimFunc maker with its numpy reference.  ``family`` is the column of the matrix the
    workload stands for (matmul_bias_relu is a matmul)."""

    name: str
    family: str
    make: Callable[[], PrimFunc]
    reference: Callable[..., np.ndarray]

    @functools.cached_property
    def func(self) -> PrimFunc:
        # One function object per workload: replays must start from the very same function.
        return self.make()

    @functools.cached_property
    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(sum(map(ord, self.name)))
        return [rng.uniform(-1.0, 1.0, buf.const_shape).astype(buf.dtype)
                for buf in self.func.params[:-1]]

    @functools.cached_property
    def expected(self) -> np.ndarray:
        return np.asarray(self.reference(*self.inputs))


def _matmul_bias_relu() -> PrimFunc:
    a = te.placeholder((8, 6), "float32", name="A")
    b = te.placeholder((6, 12), "float32", name="B")
    bias = te.placeholder((12,), "float32", name="bias")
    c = ops.te_matmul(a, b, name="C")
    d = te.compute((8, 12), lambda i, j: c[i, j] + bias[j], name="bias_add")
    e = te.compute((8, 12), lambda i, j: te.max(d[i, j], te.const(0.0, "float32")),
                   name="relu")
    return te.create_prim_func([a, b, bias, e], name="matmul_bias_relu")


CONV_PADDING = 1

WORKLOADS = {w.name: w for w in [
    Workload("matmul", "matmul", lambda: ops.matmul(8, 12, 6), ops.ref_matmul),
    Workload("matmul_bias_relu", "matmul", _matmul_bias_relu,
             lambda a, b, bias: np.maximum(a @ b + bias, 0)),
    Workload("conv2d", "conv2d",
             lambda: ops.conv2d_nchw(1, 2, 5, 5, 3, 3, 3, padding=CONV_PADDING),
             lambda x, w: ops.ref_conv2d_nchw(x, w, padding=CONV_PADDING)),
    Workload("softmax", "softmax", lambda: ops.softmax((4, 6)), ops.ref_softmax),
    Workload("layer_norm", "layer_norm", lambda: ops.layer_norm((4, 8)), ops.ref_layer_norm),
]}

FAMILIES = ("matmul", "conv2d", "softmax", "layer_norm")

# Every primitive of the Schedule API that the matrix must cover on every family.
PRIMITIVES = (
    "split", "fuse", "reorder", "tile", "parallel", "vectorize", "unroll", "bind", "annotate",
    "compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline",
    "cache_read", "cache_write", "set_scope", "storage_align", "transform_layout",
    "pack_layout", "rfactor", "decompose_reduction", "sample_perfect_tile",
    "sample_categorical", "sample_compute_location", "blockize", "tensorize",
)
# Instruction kinds that navigate instead of rewriting; every other kind must be in the matrix.
NAVIGATION = {"get_block", "get_loops", "get_child_blocks", "get_producers", "get_consumers"}


# ---------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One row.  ``schedule(sch)`` applies the primitive; for an illegal row (``raises`` set to
    a regex the message must match) it does the legal setup and returns the illegal step as a
    zero-argument callable.  ``xfail`` maps a check name to the reason it is a known bug."""

    primitive: str
    workload: str
    schedule: Callable
    variant: str = ""
    raises: str | None = None
    xfail: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.primitive, self.workload, self.variant) if p)

    @property
    def golden_name(self) -> str:
        return "matrix_" + self.id.replace("-", "_")


CASES: list[Case] = []


def case(primitive: str, workload: str, variant: str = "", raises: str | None = None,
         xfail: dict | None = None):
    def register(fn):
        CASES.append(Case(primitive, workload, fn, variant, raises, dict(xfail or {})))
        return fn

    return register


def loops_of(sch: Schedule, block: str):
    return sch.get_loops(sch.get_block(block))


def read_index(sch: Schedule, block, buffer: str) -> int:
    """Position of ``buffer`` among the block's read regions (what cache_read takes)."""
    names = [r.buffer.name for r in sch.get(block).reads]
    assert buffer in names, f"block reads {names}, not {buffer}"
    return names.index(buffer)


# -- split ------------------------------------------------------------------------------------

@case("split", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.split(j, [None, 5])          # 12 = 3 * 5 - 3: a guarded, non-divisible split
    sch.split(k, [2, 3])


@case("split", "conv2d")
def _(sch):
    nn, ff, yy, xx, rc, ry, rx = loops_of(sch, "conv2d_nchw")
    sch.split(yy, [None, 2])         # 5 -> 3 x 2, guarded
    sch.split(rc, [1, 2])
    i0, i1, i2, i3 = loops_of(sch, "pad_data")
    sch.split(i2, [None, 4])


@case("split", "softmax")
def _(sch):
    sch.split(loops_of(sch, "T_softmax_exp")[1], [2, 3])
    sch.split(loops_of(sch, "T_softmax_expsum")[1], [None, 4])   # a guarded reduction loop


@case("split", "layer_norm")
def _(sch):
    sch.split(loops_of(sch, "T_layer_norm_sum")[1], [None, 3])   # 8 -> 3 x 3, guarded
    sch.split(loops_of(sch, "T_layer_norm")[1], [2, 2, 2])


@case("split", "matmul", "too_small", raises=r"do not cover its extent 12")
def _(sch):
    i, j, k = loops_of(sch, "C")
    return lambda: sch.split(j, [2, 5])


# -- fuse -------------------------------------------------------------------------------------

@case("fuse", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.fuse(i, j)


@case("fuse", "conv2d")
def _(sch):
    nn, ff, yy, xx, *_ = loops_of(sch, "conv2d_nchw")
    sch.fuse(nn, ff, yy, xx)
    sch.fuse(*loops_of(sch, "pad_data"))


@case("fuse", "softmax")
def _(sch):
    sch.fuse(*loops_of(sch, "T_softmax_exp"))
    sch.fuse(*loops_of(sch, "T_softmax"))


@case("fuse", "layer_norm")
def _(sch):
    sch.fuse(*loops_of(sch, "T_layer_norm"))
    sch.fuse(*loops_of(sch, "T_layer_norm_sum"))   # a spatial and a reduce loop in one


@case("fuse", "matmul", "not_adjacent", raises=r"loops i and k are not adjacent")
def _(sch):
    i, j, k = loops_of(sch, "C")
    return lambda: sch.fuse(i, k)


# -- reorder ----------------------------------------------------------------------------------

@case("reorder", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.reorder(k, i)                # k, j, i


@case("reorder", "conv2d")
def _(sch):
    nn, ff, yy, xx, rc, ry, rx = loops_of(sch, "conv2d_nchw")
    sch.reorder(rc, ry, rx, yy, xx)


@case("reorder", "softmax")
def _(sch):
    i0, i1 = loops_of(sch, "T_softmax_exp")
    sch.reorder(i1, i0)


@case("reorder", "layer_norm")
def _(sch):
    i0, k0 = loops_of(sch, "T_layer_norm_sqsum")
    sch.reorder(k0, i0)


@case("reorder", "softmax", "two_nests", raises=r"not in one nest")
def _(sch):
    a = loops_of(sch, "T_softmax_maxelem")[0]
    b = loops_of(sch, "T_softmax_exp")[0]
    return lambda: sch.reorder(b, a)


# -- tile -------------------------------------------------------------------------------------

@case("tile", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.tile([i, j], [[2, 4], [3, 4]])


@case("tile", "conv2d")
def _(sch):
    nn, ff, yy, xx, *_ = loops_of(sch, "conv2d_nchw")
    sch.tile([yy, xx], [[None, 2], [None, 3]])     # both non-divisible


@case("tile", "softmax")
def _(sch):
    sch.tile(loops_of(sch, "T_softmax"), [[2, 2], [2, 3]])


@case("tile", "layer_norm")
def _(sch):
    sch.tile(loops_of(sch, "T_layer_norm"), [[2, 2], [2, 4]])


@case("tile", "layer_norm", "ragged_factors", raises=r"same number of factors")
def _(sch):
    loops = loops_of(sch, "T_layer_norm")
    return lambda: sch.tile(loops, [[2, 2], [2, 2, 2]])


# -- parallel ---------------------------------------------------------------------------------

@case("parallel", "matmul")
def _(sch):
    sch.parallel(loops_of(sch, "C")[0])


@case("parallel", "conv2d")
def _(sch):
    nn, ff, *_ = loops_of(sch, "conv2d_nchw")
    sch.parallel(sch.fuse(nn, ff))
    sch.parallel(loops_of(sch, "pad_data")[1])


@case("parallel", "softmax")
def _(sch):
    for name in ("T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax"):
        sch.parallel(loops_of(sch, name)[0])


@case("parallel", "layer_norm")
def _(sch):
    for name in ("T_layer_norm_sum", "T_layer_norm_sqsum", "T_layer_norm"):
        sch.parallel(loops_of(sch, name)[0])


@case("parallel", "matmul", "reduction_loop", raises=r"loop k feeds reduce iteration variable")
def _(sch):
    target = loops_of(sch, "C")[2]
    return lambda: sch.parallel(target)


# -- vectorize --------------------------------------------------------------------------------

@case("vectorize", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(k, j1)
    sch.vectorize(j1)


@case("vectorize", "conv2d")
def _(sch):
    nn, ff, yy, xx, rc, ry, rx = loops_of(sch, "conv2d_nchw")
    sch.reorder(rc, ry, rx, xx)
    sch.vectorize(xx)                                 # 5 lanes
    sch.vectorize(loops_of(sch, "pad_data")[3])       # a lazy select over 7 lanes


@case("vectorize", "softmax")
def _(sch):
    sch.vectorize(loops_of(sch, "T_softmax_exp")[1])
    sch.vectorize(loops_of(sch, "T_softmax")[1])


@case("vectorize", "layer_norm")
def _(sch):
    sch.vectorize(loops_of(sch, "T_layer_norm")[1])


@case("vectorize", "softmax", "reduction_loop", raises=r"loop k feeds reduce iteration variable")
def _(sch):
    target = loops_of(sch, "T_softmax_maxelem")[1]
    return lambda: sch.vectorize(target)


# -- unroll -----------------------------------------------------------------------------------

@case("unroll", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.unroll(k)
    sch.unroll(j)


@case("unroll", "conv2d")
def _(sch):
    *_, ry, rx = loops_of(sch, "conv2d_nchw")
    sch.unroll(ry)
    sch.unroll(rx)


@case("unroll", "softmax")
def _(sch):
    sch.unroll(loops_of(sch, "T_softmax_expsum")[1])
    sch.unroll(loops_of(sch, "T_softmax_exp")[1])


@case("unroll", "layer_norm")
def _(sch):
    sch.unroll(loops_of(sch, "T_layer_norm_sum")[1])


@case("unroll", "matmul", "parallel_loop", raises=r"unroll: loop i is parallel")
def _(sch):
    i = loops_of(sch, "C")[0]
    sch.parallel(i)
    return lambda: sch.unroll(i)


# -- bind (interpreter only; the CPU build must refuse it) --------------------------------------

@case("bind", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")


@case("bind", "conv2d")
def _(sch):
    nn, ff, yy, xx, *_ = loops_of(sch, "conv2d_nchw")
    sch.bind(sch.fuse(nn, ff), "blockIdx.x")
    sch.bind(yy, "vthread")


@case("bind", "softmax")
def _(sch):
    for name in ("T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax"):
        sch.bind(loops_of(sch, name)[0], "blockIdx.x")


@case("bind", "layer_norm")
def _(sch):
    for name in ("T_layer_norm_sum", "T_layer_norm_sqsum", "T_layer_norm"):
        sch.bind(loops_of(sch, name)[0], "threadIdx.x")


@case("bind", "softmax", "extent_mismatch", raises=r"already bound to blockIdx.x with extent 4")
def _(sch):
    # Within one kernel nest: separate top-level nests are separate launches and may differ.
    sch.bind(loops_of(sch, "T_softmax")[0], "blockIdx.x")
    target = loops_of(sch, "T_softmax")[1]
    return lambda: sch.bind(target, "blockIdx.x")


# -- annotate ---------------------------------------------------------------------------------

@case("annotate", "matmul")
def _(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.annotate(i, "pragma_auto_unroll_max_step", 16)
    sch.annotate(c, "meta_schedule.tiling_structure", "SSRSRS")


@case("annotate", "conv2d")
def _(sch):
    sch.annotate(loops_of(sch, "conv2d_nchw")[0], "pragma_auto_unroll_max_step", 64)
    sch.annotate(sch.get_block("pad_data"), "pragma_note", [1, 2, "three"])


@case("annotate", "softmax")
def _(sch):
    for name in ("T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax"):
        sch.annotate(loops_of(sch, name)[0], "pragma_auto_unroll_max_step", 8)


@case("annotate", "layer_norm")
def _(sch):
    i0, k0 = loops_of(sch, "T_layer_norm_sum")
    sch.annotate(i0, "pragma_auto_unroll_max_step", 512)
    sch.annotate(i0, "pragma_unroll_explicit", True)
    sch.unannotate(i0, "pragma_unroll_explicit")
    sch.annotate(sch.get_block("T_layer_norm"), "scale", 0.5)


@case("annotate", "layer_norm", "not_json", raises=r"annotation value .* is not JSON-like")
def _(sch):
    i0 = loops_of(sch, "T_layer_norm")[0]
    return lambda: sch.annotate(i0, "pragma_auto_unroll_max_step", object())


@case("annotate", "matmul", "unannotate_missing", raises=r"loop i has no annotation 'nope'")
def _(sch):
    i = loops_of(sch, "C")[0]
    return lambda: sch.unannotate(i, "nope")


# -- compute_at -------------------------------------------------------------------------------

@case("compute_at", "matmul_bias_relu")
def _(sch):
    i, j = loops_of(sch, "relu")
    sch.compute_at(sch.get_block("bias_add"), j)
    sch.compute_at(sch.get_block("C"), j)       # its consumer now sits under j too


@case("compute_at", "conv2d")
def _(sch):
    nn, ff, yy, *_ = loops_of(sch, "conv2d_nchw")
    sch.compute_at(sch.get_block("pad_data"), yy)   # rows yy .. yy + 2 of the padded input


@case("compute_at", "softmax")
def _(sch):
    i0, i1 = loops_of(sch, "T_softmax_exp")
    sch.compute_at(sch.get_block("T_softmax_maxelem"), i0)


@case("compute_at", "layer_norm")
def _(sch):
    i0, i1 = loops_of(sch, "T_layer_norm")
    sch.compute_at(sch.get_block("T_layer_norm_sqsum"), i0)


@case("compute_at", "softmax", "consumer_outside",
      raises=r"loop i0 does not enclose consumer\(s\) T_softmax of block T_softmax_exp")
def _(sch):
    i0 = loops_of(sch, "T_softmax_expsum")[0]
    target = sch.get_block("T_softmax_exp")
    return lambda: sch.compute_at(target, i0)


# -- reverse_compute_at -------------------------------------------------------------------------

@case("reverse_compute_at", "matmul_bias_relu")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.reverse_compute_at(sch.get_block("bias_add"), i)
    sch.reverse_compute_at(sch.get_block("relu"), i)


@case("reverse_compute_at", "conv2d")
def _(sch):
    i0 = loops_of(sch, "pad_data")[0]
    sch.reverse_compute_at(sch.get_block("conv2d_nchw"), i0)


@case("reverse_compute_at", "softmax")
def _(sch):
    i0, k = loops_of(sch, "T_softmax_expsum")
    sch.reverse_compute_at(sch.get_block("T_softmax"), i0)


@case("reverse_compute_at", "layer_norm")
def _(sch):
    i0, k0 = loops_of(sch, "T_layer_norm_sqsum")
    sch.reverse_compute_at(sch.get_block("T_layer_norm"), i0)


@case("reverse_compute_at", "conv2d", "channel_loop",
      raises=r"reads pad_data outside the region produced in one iteration of loop i1")
def _(sch):
    # conv reduces over every input channel; one iteration of pad's channel loop has one.
    i1 = loops_of(sch, "pad_data")[1]
    target = sch.get_block("conv2d_nchw")
    return lambda: sch.reverse_compute_at(target, i1)


@case("reverse_compute_at", "softmax", "inside_reduction",
      raises=r"loop k is inside the reduction of producer T_softmax_maxelem")
def _(sch):
    k = loops_of(sch, "T_softmax_maxelem")[1]
    target = sch.get_block("T_softmax_exp")
    return lambda: sch.reverse_compute_at(target, k)


# -- compute_inline ---------------------------------------------------------------------------

@case("compute_inline", "matmul_bias_relu")
def _(sch):
    sch.compute_inline(sch.get_block("bias_add"))


@case("compute_inline", "matmul")
def _(sch):
    # matmul alone has no injective stage; make one with cache_read and inline it again.
    c = sch.get_block("C")
    copy = sch.cache_read(c, read_index(sch, c, "A"), "local")
    sch.compute_inline(copy)


@case("compute_inline", "conv2d")
def _(sch):
    sch.compute_inline(sch.get_block("pad_data"))


@case("compute_inline", "softmax")
def _(sch):
    sch.compute_inline(sch.get_block("T_softmax_exp"))     # into both of its consumers


@case("compute_inline", "layer_norm")
def _(sch):
    out = sch.get_block("T_layer_norm")
    copy = sch.cache_read(out, read_index(sch, out, "data"), "local")
    sch.compute_inline(copy)


@case("compute_inline", "matmul_bias_relu", "reduction",
      raises=r"producer block C is not a complete block")
def _(sch):
    target = sch.get_block("C")
    return lambda: sch.compute_inline(target)


@case("compute_inline", "layer_norm", "reduction",
      raises=r"producer block T_layer_norm_sum is not a complete block")
def _(sch):
    target = sch.get_block("T_layer_norm_sum")
    return lambda: sch.compute_inline(target)


@case("compute_inline", "layer_norm", "output",
      raises=r"writes the function parameter T_layer_norm")
def _(sch):
    target = sch.get_block("T_layer_norm")
    return lambda: sch.compute_inline(target)


# -- reverse_compute_inline ---------------------------------------------------------------------

@case("reverse_compute_inline", "matmul_bias_relu")
def _(sch):
    sch.reverse_compute_inline(sch.get_block("relu"))


@case("reverse_compute_inline", "conv2d")
def _(sch):
    # conv's only injective consumer-producer pair: the padding stage and its write-back.
    back = sch.cache_write(sch.get_block("pad_data"), 0, "local")
    sch.reverse_compute_inline(back)


@case("reverse_compute_inline", "softmax")
def _(sch):
    back = sch.cache_write(sch.get_block("T_softmax_exp"), 0, "local")
    sch.reverse_compute_inline(back)


@case("reverse_compute_inline", "layer_norm")
def _(sch):
    back = sch.cache_write(sch.get_block("T_layer_norm"), 0, "local")
    sch.reverse_compute_inline(back)


@case("reverse_compute_inline", "matmul_bias_relu", "reduction_producer",
      raises=r"producer block C is not a complete block")
def _(sch):
    target = sch.get_block("bias_add")
    return lambda: sch.reverse_compute_inline(target)


@case("reverse_compute_inline", "conv2d", "reduction_consumer",
      raises=r"consumer block conv2d_nchw is not a complete block")
def _(sch):
    target = sch.get_block("conv2d_nchw")
    return lambda: sch.reverse_compute_inline(target)


@case("reverse_compute_inline", "softmax", "two_producers",
      raises=r"block T_softmax reads 2 buffers written by other blocks")
def _(sch):
    target = sch.get_block("T_softmax")
    return lambda: sch.reverse_compute_inline(target)


@case("reverse_compute_inline", "layer_norm", "two_producers",
      raises=r"block T_layer_norm reads 2 buffers written by other blocks")
def _(sch):
    target = sch.get_block("T_layer_norm")
    return lambda: sch.reverse_compute_inline(target)


# -- cache_read -------------------------------------------------------------------------------

@case("cache_read", "matmul")
def _(sch):
    c = sch.get_block("C")
    sch.cache_read(c, read_index(sch, c, "A"), "local")
    sch.cache_read(c, read_index(sch, c, "B"), "shared")


@case("cache_read", "conv2d")
def _(sch):
    conv = sch.get_block("conv2d_nchw")
    sch.cache_read(conv, read_index(sch, conv, "weight"), "local")
    sch.cache_read(conv, read_index(sch, conv, "pad_data"), "shared")


@case("cache_read", "softmax")
def _(sch):
    out = sch.get_block("T_softmax")
    sch.cache_read(out, read_index(sch, out, "T_softmax_expsum"), "local")


@case("cache_read", "layer_norm")
def _(sch):
    out = sch.get_block("T_layer_norm")
    sch.cache_read(out, read_index(sch, out, "gamma"), "local")
    sch.cache_read(out, read_index(sch, out, "data"), "local")


@case("cache_read", "matmul", "index_out_of_range",
      raises=r"block C reads 3 buffers; index 3 is out of range")
def _(sch):
    c = sch.get_block("C")
    return lambda: sch.cache_read(c, 3, "local")


@case("cache_read", "matmul", "own_output", raises=r"block C also writes C; use cache_write")
def _(sch):
    c = sch.get_block("C")
    return lambda: sch.cache_read(c, read_index(sch, c, "C"), "local")


# -- cache_write ------------------------------------------------------------------------------

@case("cache_write", "matmul")
def _(sch):
    sch.cache_write(sch.get_block("C"), 0, "local")


@case("cache_write", "conv2d")
def _(sch):
    sch.cache_write(sch.get_block("conv2d_nchw"), 0, "local")


@case("cache_write", "softmax")
def _(sch):
    sch.cache_write(sch.get_block("T_softmax_expsum"), 0, "local")


@case("cache_write", "layer_norm")
def _(sch):
    sch.cache_write(sch.get_block("T_layer_norm_sum"), 0, "local")


@case("cache_write", "matmul_bias_relu", "reader_in_nest",
      raises=r"buffer C is read in the same loop nest as block C")
def _(sch):
    i = loops_of(sch, "C")[0]
    sch.reverse_compute_at(sch.get_block("bias_add"), i)
    target = sch.get_block("C")
    return lambda: sch.cache_write(target, 0, "local")


# -- set_scope --------------------------------------------------------------------------------

@case("set_scope", "matmul_bias_relu")
def _(sch):
    sch.set_scope(sch.get_block("C"), 0, "local")
    sch.set_scope(sch.get_block("bias_add"), 0, "shared")


@case("set_scope", "conv2d")
def _(sch):
    sch.set_scope(sch.get_block("pad_data"), 0, "shared")


@case("set_scope", "softmax")
def _(sch):
    sch.set_scope(sch.get_block("T_softmax_exp"), 0, "local")
    sch.set_scope(sch.get_block("T_softmax_maxelem"), 0, "shared")


@case("set_scope", "layer_norm")
def _(sch):
    sch.set_scope(sch.get_block("T_layer_norm_sum"), 0, "local")


@case("set_scope", "matmul", "parameter", raises=r"C is a function parameter")
def _(sch):
    target = sch.get_block("C")
    return lambda: sch.set_scope(target, 0, "local")


@case("set_scope", "softmax", "unknown_scope", raises=r"unknown storage scope 'texture'")
def _(sch):
    target = sch.get_block("T_softmax_exp")
    return lambda: sch.set_scope(target, 0, "texture")


# -- storage_align ----------------------------------------------------------------------------

@case("storage_align", "matmul")
def _(sch):
    c = sch.get_block("C")
    copy = sch.cache_read(c, read_index(sch, c, "A"), "shared")
    sch.storage_align(copy, 0, axis=0, factor=8, offset=1)       # rows of 6 -> 9


@case("storage_align", "conv2d")
def _(sch):
    sch.storage_align(sch.get_block("pad_data"), 0, axis=2, factor=4, offset=1)   # 7 -> 9


@case("storage_align", "softmax")
def _(sch):
    sch.storage_align(sch.get_block("T_softmax_exp"), 0, axis=0, factor=8, offset=1)


@case("storage_align", "layer_norm")
def _(sch):
    out = sch.get_block("T_layer_norm")
    copy = sch.cache_read(out, read_index(sch, out, "data"), "shared")
    sch.storage_align(copy, 0, axis=0, factor=16, offset=4)


@case("storage_align", "layer_norm", "innermost", raises=r"axis 0 of T_layer_norm_sum is the "
                                                         r"innermost dimension")
def _(sch):
    target = sch.get_block("T_layer_norm_sum")
    return lambda: sch.storage_align(target, 0, 0, 8, 1)


# -- transform_layout -------------------------------------------------------------------------

@case("transform_layout", "matmul_bias_relu")
def _(sch):
    sch.transform_layout(sch.get_block("C"), 0, lambda i, j: (j // 4, i, j % 4))


@case("transform_layout", "conv2d")
def _(sch):
    sch.transform_layout(sch.get_block("pad_data"), 0, lambda n, c, h, w: (n, h, w, c))


@case("transform_layout", "softmax")
def _(sch):
    sch.transform_layout(sch.get_block("T_softmax_exp"), 0, lambda i, j: (j, i))


@case("transform_layout", "layer_norm")
def _(sch):
    sch.transform_layout(sch.get_block("T_layer_norm_sum"), 0, lambda i: (i // 2, i % 2))


@case("transform_layout", "matmul", "parameter", raises=r"C is a function parameter")
def _(sch):
    target = sch.get_block("C")
    return lambda: sch.transform_layout(target, 0, lambda i, j: (j, i))


# -- pack_layout ------------------------------------------------------------------------------

@case("pack_layout", "matmul")
def _(sch):
    sch.pack_layout(sch.get_block("C"), "B", lambda k, n: (n // 4, k, n % 4))


@case("pack_layout", "conv2d")
def _(sch):
    # 3 output channels in blocks of 2: the packed weight is zero-padded to 4.
    sch.pack_layout(sch.get_block("conv2d_nchw"), "weight",
                    lambda f, c, r, s: (f // 2, c, r, s, f % 2))


@case("pack_layout", "softmax")
def _(sch):
    sch.pack_layout(sch.get_block("T_softmax_maxelem"), "data",
                    lambda i, j: (j // 4, i, j % 4))


@case("pack_layout", "layer_norm")
def _(sch):
    sch.pack_layout(sch.get_block("T_layer_norm"), "gamma", lambda i: (i // 4, i % 4))


@case("pack_layout", "softmax", "not_invertible", raises=r"cannot invert index_map")
def _(sch):
    target = sch.get_block("T_softmax_exp")
    return lambda: sch.pack_layout(target, "data",
                                   lambda i, j: (i + j,))


# -- rfactor ----------------------------------------------------------------------------------

@case("rfactor", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    ko, ki = sch.split(k, [2, None])
    sch.rfactor(ki, 1)


@case("rfactor", "conv2d")
def _(sch):
    *_, rc, ry, rx = loops_of(sch, "conv2d_nchw")
    sch.rfactor(rc, 0)


@case("rfactor", "softmax")
def _(sch):
    i0, k = loops_of(sch, "T_softmax_maxelem")
    k0, k1 = sch.split(k, [2, 3])
    sch.rfactor(k1, 0)                   # a max reduction


@case("rfactor", "layer_norm")
def _(sch):
    i0, k0 = loops_of(sch, "T_layer_norm_sqsum")
    sch.rfactor(k0, -1)


@case("rfactor", "matmul", "spatial_loop",
      raises=r"loop i does not bind a reduce variable of block C")
def _(sch):
    target = loops_of(sch, "C")[0]
    return lambda: sch.rfactor(target, 0)


# -- decompose_reduction ----------------------------------------------------------------------

@case("decompose_reduction", "matmul")
def _(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, i)


@case("decompose_reduction", "conv2d")
def _(sch):
    conv = sch.get_block("conv2d_nchw")
    *_, rc, ry, rx = sch.get_loops(conv)
    sch.decompose_reduction(conv, rc)


@case("decompose_reduction", "softmax")
def _(sch):
    mx = sch.get_block("T_softmax_maxelem")
    sch.decompose_reduction(mx, sch.get_loops(mx)[0])
    total = sch.get_block("T_softmax_expsum")
    sch.decompose_reduction(total, sch.get_loops(total)[1])


@case("decompose_reduction", "layer_norm")
def _(sch):
    s = sch.get_block("T_layer_norm_sum")
    i0, k0 = sch.get_loops(s)
    sch.decompose_reduction(s, k0)


@case("decompose_reduction", "softmax", "not_reduction",
      raises=r"block T_softmax_exp is not a reduction block")
def _(sch):
    e = sch.get_block("T_softmax_exp")
    i0 = sch.get_loops(e)[0]
    return lambda: sch.decompose_reduction(e, i0)


# -- blockize ---------------------------------------------------------------------------------

@case("blockize", "matmul")
def _(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 2])
    sch.reorder(i, jo, ko, ji, ki)
    sch.blockize(ji)


@case("blockize", "conv2d")
def _(sch):
    nn, ff, yy, xx, rc, ry, rx = loops_of(sch, "conv2d_nchw")
    sch.blockize(ry)                 # the tile: ry and rx, a 3 x 3 window
    i0, i1, i2, i3 = loops_of(sch, "pad_data")
    sch.blockize(i2)


@case("blockize", "softmax")
def _(sch):
    sch.blockize(loops_of(sch, "T_softmax_exp")[1])
    sch.blockize(loops_of(sch, "T_softmax_expsum")[0])


@case("blockize", "layer_norm")
def _(sch):
    i0, i1 = loops_of(sch, "T_layer_norm")
    _, i1o = sch.split(i1, [None, 4])
    sch.blockize(i1o)


@case("blockize", "matmul_bias_relu", "two_blocks", raises=r"chain of loops around one block")
def _(sch):
    i, j = loops_of(sch, "relu")
    sch.compute_at(sch.get_block("bias_add"), j)
    return lambda: sch.blockize(i)


# -- tensorize --------------------------------------------------------------------------------
# float32 intrinsics whose implementation is their own description (ReferenceImpl): the
# matrix checks matching, the trace and the lowering of the tile on every family; the int8
# hardware intrinsics have their own tests (test_tensorize.py).

def _intrinsic(name: str, make) -> str:
    intrinsics.register(name, make(), intrinsics.ReferenceImpl(), override=True)
    return name


def _dot_3x2(dtype: str = "float32"):
    a = te.placeholder((2,), dtype, name="A")
    b = te.placeholder((2, 3), dtype, name="B")
    k = te.reduce_axis(2, name="k")
    c = te.compute((3,), lambda i: te.sum(a[k] * b[k, i], axis=k), name="C")
    return te.create_prim_func([a, b, c])


def _window_5x3():
    a = te.placeholder((5, 3), "float32", name="A")
    w = te.placeholder((3,), "float32", name="W")
    k = te.reduce_axis(3, name="k")
    c = te.compute((5,), lambda i: te.sum(a[i, k] * w[k], axis=k), name="C")
    return te.create_prim_func([a, w, c])


def _exp_shift_4x6():
    a = te.placeholder((4, 6), "float32", name="A")
    m = te.placeholder((4,), "float32", name="M")
    c = te.compute((4, 6), lambda i, j: te.exp(a[i, j] - m[i]), name="C")
    return te.create_prim_func([a, m, c])


def _row_sum_4x8():
    a = te.placeholder((4, 8), "float32", name="A")
    k = te.reduce_axis(8, name="k")
    c = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="C")
    return te.create_prim_func([a, c])


MATRIX_DOT = _intrinsic("matrix_dot_3x2_f32", _dot_3x2)
MATRIX_WINDOW = _intrinsic("matrix_window_5x3_f32", _window_5x3)
MATRIX_EXP = _intrinsic("matrix_exp_shift_4x6_f32", _exp_shift_4x6)
MATRIX_ROW_SUM = _intrinsic("matrix_row_sum_4x8_f32", _row_sum_4x8)
MATRIX_DOT_INT = _intrinsic("matrix_dot_3x2_i32", lambda: _dot_3x2("int32"))


@case("tensorize", "matmul")
def _(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 3])
    ko, ki = sch.split(k, [None, 2])
    sch.reorder(i, jo, ko, ji, ki)
    sch.decompose_reduction(c, ko)
    sch.tensorize(ji, MATRIX_DOT)


@case("tensorize", "conv2d")
def _(sch):
    conv = sch.get_block("conv2d_nchw")
    nn, ff, yy, xx, rc, ry, rx = sch.get_loops(conv)
    sch.reorder(rc, ry, xx)          # the tile: xx (5) around rx (3), a sliding window
    sch.decompose_reduction(conv, rc)
    outer = sch.blockize(xx)
    sch.tensorize(outer, MATRIX_WINDOW)


@case("tensorize", "softmax")
def _(sch):
    sch.tensorize(loops_of(sch, "T_softmax_exp")[0], MATRIX_EXP)


@case("tensorize", "layer_norm")
def _(sch):
    s = sch.get_block("T_layer_norm_sum")
    i0, k0 = sch.get_loops(s)
    sch.decompose_reduction(s, i0)
    sch.tensorize(i0, MATRIX_ROW_SUM)


@case("tensorize", "matmul", "dtype", raises=r"C has dtype float32, the intrinsic expects int32")
def _(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 3])
    ko, ki = sch.split(k, [None, 2])
    sch.reorder(i, jo, ko, ji, ki)
    sch.decompose_reduction(c, ko)
    return lambda: sch.tensorize(ji, MATRIX_DOT_INT)


@case("tensorize", "softmax", "extent",
      raises=r"extent of loop i0 is 4, the intrinsic matrix_dot_3x2_f32 expects 3 "
             r"\(its loop i\)")
def _(sch):
    e = sch.get_block("T_softmax_expsum")
    i0, k = sch.get_loops(e)
    sch.decompose_reduction(e, i0)
    exp_outer = loops_of(sch, "T_softmax_exp")[0]
    return lambda: sch.tensorize(exp_outer, MATRIX_DOT)


# -- sample_perfect_tile ----------------------------------------------------------------------

@case("sample_perfect_tile", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=4))
    j0, j1, j2 = sch.split(j, sch.sample_perfect_tile(j, n=3, max_innermost_factor=4))
    sch.reorder(i0, j0, k, i1, j1, j2)


@case("sample_perfect_tile", "conv2d")
def _(sch):
    nn, ff, yy, xx, *_ = loops_of(sch, "conv2d_nchw")
    sch.split(ff, sch.sample_perfect_tile(ff, n=2, max_innermost_factor=3))
    sch.split(yy, sch.sample_perfect_tile(yy, n=2))


@case("sample_perfect_tile", "softmax")
def _(sch):
    i0, i1 = loops_of(sch, "T_softmax_exp")
    sch.split(i1, sch.sample_perfect_tile(i1, n=2, max_innermost_factor=3))


@case("sample_perfect_tile", "layer_norm")
def _(sch):
    i0, k0 = loops_of(sch, "T_layer_norm_sum")
    sch.split(k0, sch.sample_perfect_tile(k0, n=3, max_innermost_factor=2))


@case("sample_perfect_tile", "matmul", "bad_decision", raises=r"multiplies to")
def _(sch):
    i = loops_of(sch, "C")[0]
    return lambda: sch.sample_perfect_tile(i, n=2, decision=[3, 3])


# -- sample_categorical -----------------------------------------------------------------------

@case("sample_categorical", "matmul")
def _(sch):
    i, j, k = loops_of(sch, "C")
    sch.split(j, [None, sch.sample_categorical([2, 3, 4], [0.3, 0.3, 0.4])])
    sch.annotate(i, "pragma_auto_unroll_max_step",
                 sch.sample_categorical([0, 16, 64], [0.5, 0.25, 0.25]))


@case("sample_categorical", "conv2d")
def _(sch):
    nn = loops_of(sch, "conv2d_nchw")[0]
    sch.annotate(nn, "pragma_auto_unroll_max_step",
                 sch.sample_categorical([0, 16, 64, 512], [0.25] * 4))


@case("sample_categorical", "softmax")
def _(sch):
    step = sch.sample_categorical([0, 16], [0.5, 0.5])
    for name in ("T_softmax_exp", "T_softmax"):
        sch.annotate(loops_of(sch, name)[0], "pragma_auto_unroll_max_step", step)


@case("sample_categorical", "layer_norm")
def _(sch):
    i0, i1 = loops_of(sch, "T_layer_norm")
    sch.split(i1, [None, sch.sample_categorical([2, 4, 8], [1.0, 1.0, 1.0], decision=1)])


@case("sample_categorical", "softmax", "bad_decision", raises=r"decision 5 is not an index")
def _(sch):
    return lambda: sch.sample_categorical([0, 16], [0.5, 0.5], decision=5)


# -- sample_compute_location ------------------------------------------------------------------

@case("sample_compute_location", "matmul_bias_relu")
def _(sch):
    c = sch.get_block("C")
    sch.compute_at(c, sch.sample_compute_location(c, decision=1))    # bias_add's j loop
    d = sch.get_block("bias_add")
    sch.compute_at(d, sch.sample_compute_location(d, decision=-2))   # inline


@case("sample_compute_location", "conv2d")
def _(sch):
    pad = sch.get_block("pad_data")
    sch.compute_at(pad, sch.sample_compute_location(pad))           # seeded draw


@case("sample_compute_location", "softmax")
def _(sch):
    mx = sch.get_block("T_softmax_maxelem")
    sch.compute_at(mx, sch.sample_compute_location(mx, decision=0))  # exp's i0
    e = sch.get_block("T_softmax_exp")
    sch.compute_at(e, sch.sample_compute_location(e, decision=-1))   # root: stays


@case("sample_compute_location", "layer_norm")
def _(sch):
    sq = sch.get_block("T_layer_norm_sqsum")
    sch.compute_at(sq, sch.sample_compute_location(sq, decision=0))  # ln's i0


@case("sample_compute_location", "layer_norm", "bad_decision",
      raises=r"decision 7 is not one of \[-1, 0, 1\]")
def _(sch):
    sq = sch.get_block("T_layer_norm_sqsum")
    return lambda: sch.sample_compute_location(sq, decision=7)


# -- combinations: primitives composed the way a tuned schedule composes them ---------------------

@case("compute_at", "conv2d", "tiled_guarded")
def _(sch):
    nn, ff, yy, xx, *_ = loops_of(sch, "conv2d_nchw")
    (y0, x0), (y1, x1) = sch.tile([yy, xx], [[None, 2], [None, 2]])    # 5 = 3 * 2 - 1
    sch.compute_at(sch.get_block("pad_data"), x0)     # a 4 x 4 window, clipped at the border


@case("reverse_compute_at", "matmul_bias_relu", "tiled")
def _(sch):
    sch.compute_inline(sch.get_block("bias_add"))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    (i0, j0), (i1, j1) = sch.tile([i, j], [[2, 4], [3, 4]])
    sch.reverse_compute_at(sch.get_block("relu"), j0)
    sch.decompose_reduction(c, i1)
    sch.parallel(i0)


@case("vectorize", "matmul", "guarded")
def _(sch):
    i, j, k = loops_of(sch, "C")
    j0, j1 = sch.split(j, [None, 5])                  # guarded lanes
    sch.reorder(k, j1)
    sch.vectorize(j1)


@case("parallel", "softmax", "after_compute_at")
def _(sch):
    i0, i1 = loops_of(sch, "T_softmax_exp")
    sch.compute_at(sch.get_block("T_softmax_maxelem"), i0)
    sch.parallel(i0)                                  # two blocks under one parallel loop
    sch.vectorize(i1)


@case("rfactor", "matmul", "guarded")
def _(sch):
    i, j, k = loops_of(sch, "C")
    ko, ki = sch.split(k, [None, 4])                  # 6 = 2 * 4 - 2
    rf = sch.rfactor(ki, 0)
    sch.parallel(sch.get_loops(rf)[0])


@case("decompose_reduction", "conv2d", "tiled")
def _(sch):
    conv = sch.get_block("conv2d_nchw")
    nn, ff, yy, xx, rc, ry, rx = sch.get_loops(conv)
    (y0, x0), (y1, x1) = sch.tile([yy, xx], [[None, 2], [None, 2]])
    sch.reorder(rc, ry, rx, y1, x1)
    sch.decompose_reduction(conv, rc)
    sch.unroll(rx)


@case("transform_layout", "matmul_bias_relu", "after_compute_at")
def _(sch):
    i, j = loops_of(sch, "relu")
    sch.compute_at(sch.get_block("bias_add"), j)
    sch.compute_at(sch.get_block("C"), j)
    sch.transform_layout(sch.get_block("C"), 0, lambda a, b: (b, a))
    sch.set_scope(sch.get_block("bias_add"), 0, "local")


@case("cache_read", "matmul", "packed_and_tiled")
def _(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    pack = sch.pack_layout(c, "B", lambda kk, n: (n // 4, kk, n % 4))
    copy = sch.cache_read(c, read_index(sch, c, "A"), "local")
    sch.storage_align(copy, 0, axis=0, factor=4, offset=1)
    (i0, j0), (i1, j1) = sch.tile([i, j], [[4, 2], [3, 4]])
    sch.vectorize(sch.get_loops(pack)[-1])
    sch.annotate(i0, "pragma_auto_unroll_max_step", 16)


@case("sample_compute_location", "conv2d", "after_split")
def _(sch):
    conv = sch.get_block("conv2d_nchw")
    nn, ff, yy, xx, *_ = sch.get_loops(conv)
    sch.split(xx, sch.sample_perfect_tile(xx, n=2, max_innermost_factor=5))
    pad = sch.get_block("pad_data")
    sch.compute_at(pad, sch.sample_compute_location(pad, decision=3))


LEGAL = [c for c in CASES if c.raises is None]
ILLEGAL = [c for c in CASES if c.raises is not None]


# ---------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------

def _params(cases, check: str):
    out = []
    for c in cases:
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail[check])] if check in c.xfail \
            else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@functools.cache
def scheduled(case_id: str) -> Schedule:
    """The schedule of a legal row, built once and shared by its checks (which never mutate
    it: replays run on fresh schedules)."""
    c = next(c for c in LEGAL if c.id == case_id)
    sch = Schedule(WORKLOADS[c.workload].func, seed=0)
    result = c.schedule(sch)
    assert result is None, f"legal row {c.id} returned {result!r}; only illegal rows return"
    return sch


def _bound_axes(func: PrimFunc) -> set[str]:
    return {lp.thread_binding for lp in collect(func.body, For) if lp.kind == THREAD_BINDING}


@pytest.mark.parametrize("c", _params(LEGAL, "interp"))
def test_interpreter_matches_numpy(c: Case):
    w = WORKLOADS[c.workload]
    (got,) = interp.evaluate(scheduled(c.id).func, *w.inputs)
    np.testing.assert_allclose(got, w.expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("c", _params(LEGAL, "llvm"))
def test_llvm_matches_numpy(c: Case):
    w = WORKLOADS[c.workload]
    func = scheduled(c.id).func
    if c.primitive == "bind":
        assert _bound_axes(func), f"bind row {c.id} bound no loop"
        with pytest.raises(BuildError, match=r"bound to \w+\.?\w*; thread binding is a GPU"):
            autotune.build(func)
        return
    out = np.zeros_like(w.expected)
    autotune.build(func)(*[np.array(a) for a in w.inputs], out)
    np.testing.assert_allclose(out, w.expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("c", _params(LEGAL, "json"))
def test_json_round_trip_replays(c: Case):
    sch = scheduled(c.id)
    original = WORKLOADS[c.workload].func
    text = json.dumps(sch.trace.to_json())
    replay = Trace.from_json(text).apply(original)
    assert structural_equal(replay.func, sch.func)
    assert replay.trace == sch.trace
    # The row really exercises its primitive (tile is recorded as its splits and reorder).
    recorded = {inst.kind for inst in sch.trace}
    expected = {"split", "reorder"} if c.primitive == "tile" else {c.primitive}
    assert expected <= recorded, f"row {c.id} never applied {c.primitive}: {sorted(recorded)}"


@pytest.mark.parametrize("c", _params(LEGAL, "python"))
def test_printed_trace_replays_as_python(c: Case):
    sch = scheduled(c.id)
    again = Schedule(WORKLOADS[c.workload].func)
    exec(str(sch.trace), {"sch": again, "te": te})
    assert structural_equal(again.func, sch.func)


@pytest.mark.parametrize("c", _params(LEGAL, "golden"))
def test_golden_snapshot(c: Case, golden):
    sch = scheduled(c.id)
    trace = "\n".join("# " + line for line in str(sch.trace).splitlines())
    golden.check(c.golden_name, f"{trace}\n{to_text(sch.func)}")


@pytest.mark.parametrize("c", _params(ILLEGAL, "raises"))
def test_illegal_combination_raises_and_leaves_schedule(c: Case):
    w = WORKLOADS[c.workload]
    sch = Schedule(w.func, seed=0)
    step = c.schedule(sch)
    assert callable(step), f"illegal row {c.id} must return the illegal step"
    func, trace, text = sch.func, sch.trace, to_text(sch.func)
    with pytest.raises(ScheduleError, match=c.raises):
        step()
    assert sch.func is func
    assert sch.trace == trace
    assert to_text(sch.func) == text
    # The schedule is still usable and still correct after the refusal.
    (got,) = interp.evaluate(sch.func, *w.inputs)
    np.testing.assert_allclose(got, w.expected, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# Coverage of the matrix itself
# ---------------------------------------------------------------------------------------------

def test_matrix_covers_every_primitive_on_every_workload():
    covered = {(c.primitive, WORKLOADS[c.workload].family) for c in LEGAL}
    missing = [(p, f) for p in PRIMITIVES for f in FAMILIES if (p, f) not in covered]
    assert not missing, f"matrix rows missing for {missing}"


def test_matrix_covers_every_instruction_kind():
    # A new primitive registered as an instruction kind must join the matrix.
    in_matrix = set(PRIMITIVES) | {"unannotate"}
    assert set(kinds()) - NAVIGATION <= in_matrix, sorted(set(kinds()) - NAVIGATION - in_matrix)
    assert len({c.id for c in CASES}) == len(CASES), "two rows share an id"


def test_every_golden_snapshot_belongs_to_a_row(golden):
    names = {c.golden_name for c in LEGAL}
    stale = sorted(p.stem for p in golden.directory.glob("matrix_*.txt") if p.stem not in names)
    assert not stale, f"golden files without a matrix row (delete them): {stale}"
