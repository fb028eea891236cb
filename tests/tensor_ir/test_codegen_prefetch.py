"""The ``pragma_prefetch_bytes`` loop annotation: software prefetch of the contiguous vector
loads that walk along the annotated loop, never of what the loop stores to, with results
unchanged."""
from __future__ import annotations

import re

import numpy as np
import pytest

import autotune
from schedules.schedule import Schedule
from tensor_ir import ops
from tensor_ir.codegen.llvm import MAX_PREFETCH_BYTES, PREFETCH_KEY
from tensor_ir.errors import BuildError

M, N, K = 16, 64, 96


def tiled_matmul(prefetch=None, loop: str = "k_inner", unroll_rows: bool = True):
    """C[16, 64] = A @ B with B packed in 32-column panels, an 8x32 register tile over k
    blocks of 24; ``prefetch`` annotates ``loop`` (k_inner or k_outer)."""
    sch = Schedule(ops.matmul(M, N, K))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i_outer, i_inner = sch.split(i, [None, 8])
    j_outer, j_inner = sch.split(j, [None, 32])
    k_outer, k_inner = sch.split(k, [None, 24])
    sch.reorder(i_outer, j_outer, k_outer, k_inner, i_inner, j_inner)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, j_outer)
    sch.pack_layout(block, 1, lambda kk, n: (n // 32, kk, n % 32))
    sch.decompose_reduction(block, k_outer)
    if unroll_rows:
        sch.unroll(i_inner)
    sch.vectorize(j_inner)
    if prefetch is not None:
        sch.annotate(k_inner if loop == "k_inner" else k_outer, PREFETCH_KEY, prefetch)
    return sch.func


def prefetches(kernel) -> list[str]:
    return re.findall(r'call void @"?llvm\.prefetch[^\n]*', kernel.get_source("ll-raw"))


def run(func):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    out = np.full((M, N), np.nan, np.float32)
    kernel = autotune.build(func)
    kernel(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    return kernel


def test_annotated_loop_prefetches_the_panel_it_streams_and_keeps_the_result():
    plain = run(tiled_matmul())
    assert prefetches(plain) == []
    kernel = run(tiled_matmul(1024))
    calls = prefetches(kernel)
    # One per 64-byte line of the panel load (32 floats: two), none for the accumulators the
    # loop stores to, and none for A's broadcast scalars.
    assert len(calls) == 2
    raw = kernel.get_source("ll-raw")
    for ahead in (1024, 1088):
        assert re.search(rf'getelementptr i8, ptr %"?[\w.]+"?, i64 {ahead}', raw)


def test_rows_of_a_register_tile_share_one_prefetch_per_line():
    # The rows loop (i_1) left a loop: the panel's address does not use it, so the lines are
    # asked for at the top of each step of the annotated loop (k_1), where unrolling the rows
    # cannot copy them (at the load they made 8 prefetches of one line per step of an 8-row
    # tile once LLVM unrolled the rows).
    kernel = run(tiled_matmul(512, unroll_rows=False))
    blocks, block = [], None
    for line in kernel.get_source("ll-raw").split("\n"):
        label = re.match(r'^"?([\w.]+)"?:', line)
        if label:
            block = label.group(1)
        if re.search(r'call void @"?llvm\.prefetch', line):
            blocks.append(block)
    assert blocks == ["k_1.body", "k_1.body"]


def test_outer_annotation_covers_the_loads_inside_it():
    # k_outer's variable is in B's index too: the annotation on it reaches the panel load
    # in the k_inner loop nested inside.
    assert len(prefetches(run(tiled_matmul(256, loop="k_outer")))) == 2


def test_loads_that_do_not_walk_along_the_loop_are_not_prefetched():
    # Annotating the loop over the register tile's rows: B's index does not use it.
    sch = Schedule(tiled_matmul())
    rows = sch.get_loops(sch.get_block("C"))[-2]
    sch.annotate(rows, PREFETCH_KEY, 512)
    assert prefetches(run(sch.func)) == []


def test_zero_distance_prefetches_nothing_even_under_an_annotated_loop():
    # 0 is the "off" choice a schedule samples; on an inner loop it overrides an outer one.
    assert prefetches(run(tiled_matmul(0))) == []
    sch = Schedule(tiled_matmul(512, loop="k_outer"))
    k_inner = sch.get_loops(sch.get_block("C"))[3]
    sch.annotate(k_inner, PREFETCH_KEY, 0)
    assert prefetches(run(sch.func)) == []


@pytest.mark.parametrize("value", [-64, MAX_PREFETCH_BYTES + 1, 1.5, "1024", True])
def test_a_bad_distance_is_a_build_error_that_names_the_loop(value):
    with pytest.raises(BuildError, match=r"k_1 has pragma_prefetch_bytes=.*whole number"):
        autotune.build(tiled_matmul(value))


def test_a_parallel_annotated_loop_prefetches_in_each_thread():
    # The annotated loop is the parallel one: its iterations run in the outlined body, where
    # the lines of each row's vector load are asked for at the top of the iteration.
    from tensor_ir import te

    a = te.placeholder((64, 32), "float32", name="A")
    c = te.compute((64, 32), lambda i, j: a[i, j] * 2.0, name="C")
    sch = Schedule(te.create_prim_func([a, c]))
    i, j = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.vectorize(j)
    sch.annotate(i, PREFETCH_KEY, 256)
    kernel = autotune.build(sch.func, "llvm -num-cores 2")
    x = np.random.default_rng(0).standard_normal((64, 32), dtype=np.float32)
    out = np.zeros_like(x)
    kernel(x, out)
    np.testing.assert_array_equal(out, x * 2)
    assert len(prefetches(kernel)) == 2
