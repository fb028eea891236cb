"""The ``pragma_unroll_by`` loop annotation: a serial loop emitted with several copies of its
body per iteration and its remainder as straight copies, with results unchanged."""
from __future__ import annotations

import re

import pytest

import autotune
from schedules.schedule import Schedule
from tensor_ir import ops
from tensor_ir.codegen import llvm as llvm_codegen
from tensor_ir.codegen.llvm import MAX_UNROLL_BY, PREFETCH_KEY, UNROLL_BY_KEY
from tensor_ir.errors import BuildError

from .test_codegen_prefetch import K, M, N, run  # run: built, called, checked against numpy

K_BLOCK = 24


def tiled_matmul(copies=None, prefetch=None):
    """C[16, 64] = A @ B in 8x32 register tiles over k blocks of 24 (the tile's rows unrolled,
    its columns vectorised); ``copies`` annotates the k loop around the tile."""
    sch = Schedule(ops.matmul(M, N, K))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i_outer, i_inner = sch.split(i, [None, 8])
    j_outer, j_inner = sch.split(j, [None, 32])
    k_outer, k_inner = sch.split(k, [None, K_BLOCK])
    sch.reorder(i_outer, j_outer, k_outer, k_inner, i_inner, j_inner)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, j_outer)
    sch.decompose_reduction(block, k_outer)
    sch.unroll(i_inner)
    sch.vectorize(j_inner)
    if copies is not None:
        sch.annotate(k_inner, UNROLL_BY_KEY, copies)
    if prefetch is not None:
        sch.annotate(k_inner, PREFETCH_KEY, prefetch)
    return sch.func


def tile_steps(kernel) -> int:
    """Reduction steps of the register tile in the generated code: its vector multiplies
    (one row of the tile is 32 lanes, however many vectors that is) over one plain step's."""
    return len(re.findall(r"fmul[^\n]*x float>", kernel.get_source("ll-raw")))


def loop_heads(kernel) -> list[str]:
    return re.findall(r'^"?([\w.]+)\.head"?:', kernel.get_source("ll-raw"), re.M)


@pytest.mark.parametrize("copies, steps", [(1, 1), (4, 4), (8, 8), (5, 5 + 4), (24, 24),
                                           (64, 24)])
def test_copies_per_iteration_and_the_remainder_after_the_loop(copies, steps):
    # 24 = 4 x 5 + 4: five copies a trip, the four left over straight after the loop; as
    # many copies as the extent or more unroll the loop whole.
    one = tile_steps(run(tiled_matmul()))
    assert one > 0
    kernel = run(tiled_matmul(copies))
    assert tile_steps(kernel) == steps * one
    heads = loop_heads(kernel)
    if copies in (1, 24, 64):
        assert not any(f".by{copies}" in h for h in heads)
    else:
        assert any(h.endswith(f".by{copies}") for h in heads)


def test_copies_keep_within_the_unroll_budget(monkeypatch):
    # One step of the tile is 8 rows x 32 lanes of update: a budget of three steps' leaf
    # statements takes 3 copies, not the 8 asked for.
    one = tile_steps(run(tiled_matmul()))
    step = 8 * 32
    monkeypatch.setattr(llvm_codegen, "MAX_UNROLL_STEPS", 3 * step + 1)
    assert tile_steps(run(tiled_matmul(8))) == (3 + 24 % 3) * one


def test_copies_keep_the_panel_prefetches_of_each_step():
    kernel = run(tiled_matmul(4, prefetch=512))
    calls = re.findall(r'call void @"?llvm\.prefetch', kernel.get_source("ll-raw"))
    plain = re.findall(r'call void @"?llvm\.prefetch',
                       run(tiled_matmul(prefetch=512)).get_source("ll-raw"))
    assert len(calls) == 4 * len(plain) > 0


@pytest.mark.parametrize("value", [0, -2, MAX_UNROLL_BY + 1, True, 2.0, "4"])
def test_bad_copy_counts_are_refused_by_name(value):
    with pytest.raises(BuildError, match=UNROLL_BY_KEY):
        autotune.build(tiled_matmul(value))
