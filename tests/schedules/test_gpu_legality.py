"""GPU legality of the schedule primitives: bind reasons about the threads of a GPU block (a
shared buffer and a barrier between the statements using it), compute_at gives a shared tile
the region of all the block's threads, and compaction sizes it for one k-tile.

Every accepted schedule is run through the interpreter (thread loops run serially there) and,
where PoCL is installed, through the OpenCL build (threads run side by side, barriers real),
each compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from schedules import Schedule, ScheduleError
from tensor_ir import interp, te
from tensor_ir.lower import lower
from tensor_ir.stmt import Allocate, For
from tensor_ir.visitor import collect

from ..opencl_support import RUN_TARGET, needs_opencl_run


TARGETS = ["interp", pytest.param("opencl", marks=needs_opencl_run)]


def run(func, arrays: list, expected: dict, target: str) -> None:
    arrays = [a.copy() for a in arrays]
    if target == "interp":
        interp.run(func, *arrays)
    else:
        autotune.build(func, target=RUN_TARGET)(*arrays)
    for index, reference in expected.items():
        np.testing.assert_allclose(arrays[index], reference, rtol=1e-5, atol=1e-5)


def shared_allocations(func) -> dict:
    """{name: shape} of the shared buffers the lowered function allocates."""
    return {s.buffer.name: s.buffer.const_shape for s in collect(lower(func).body, Allocate)
            if s.buffer.scope == "shared"}


def extents(sch: Schedule, loops) -> list[int]:
    return [sch.get(lp).extent.value for lp in loops]


# ---------------------------------------------------------------------------------------------
# The schedules
# ---------------------------------------------------------------------------------------------

def matmul_definition(n: int):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c], name="matmul")


def cooperative_matmul(n: int = 16, threads: int = 4, k_tile: int = 4,
                       bind_fetch: bool = True) -> Schedule:
    """C = A @ B, MetaSchedule style: blocks of threads x threads threads, one C element per
    thread; per k-tile, the A and B tiles are copied into shared memory by all the block's
    threads (a fetch computed at the k-tile loop inside the thread loops, its loops fused,
    split and bound to threadIdx.y / threadIdx.x).  ``bind_fetch``: bind the fetch loops
    (else every thread copies the whole tile)."""
    sch = Schedule(matmul_definition(n))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    by, ty = sch.split(i, [None, threads])
    bx, tx = sch.split(j, [None, threads])
    ko, ki = sch.split(k, [None, k_tile])
    sch.reorder(by, bx, ty, tx, ko, ki)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    for index in (0, 1):
        shared = sch.cache_read(block, index, "shared")
        sch.compute_at(shared, ko)
        if bind_fetch:
            fused = sch.fuse(*sch.get_loops(shared)[5:])
            _, fy, fx = sch.split(fused, [None, threads, threads])
            sch.bind(fy, "threadIdx.y")
            sch.bind(fx, "threadIdx.x")
    return sch


def matmul_arrays(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n)).astype("float32")
    y = rng.standard_normal((n, n)).astype("float32")
    return [x, y, np.zeros((n, n), "float32")], {2: x @ y}


def shared_transpose(n: int = 16, tile: int = 8, threads: int = 4) -> Schedule:
    """B = A.T through shared memory: a tile x tile block of A is read into shared memory by
    the block's threads (consecutive threads read consecutive elements of a row of A), then
    written out transposed (consecutive threads write consecutive elements of a row of B)."""
    a = te.placeholder((n, n), name="A")
    b = te.compute((n, n), lambda i, j: a[j, i], name="B")
    sch = Schedule(te.create_prim_func([a, b], name="transpose"))
    block = sch.get_block("B")
    i, j = sch.get_loops(block)
    bi, ii = sch.split(i, [None, tile])
    bj, jj = sch.split(j, [None, tile])
    sch.reorder(bi, bj, ii, jj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, bj)
    _, fy, fx = sch.split(sch.fuse(*sch.get_loops(shared)[2:]), [None, threads, threads])
    sch.bind(fy, "threadIdx.y")
    sch.bind(fx, "threadIdx.x")
    _, ty, tx = sch.split(sch.fuse(ii, jj), [None, threads, threads])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    return sch


def row_sum_definition(rows: int, cols: int):
    a = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    b = te.compute((rows,), lambda i: te.sum(a[i, k], axis=k), name="B")
    return te.create_prim_func([a, b], name="row_sum")


def stencil(scope: str | None, n: int = 8):
    """C[i] = B[i] + B[i + 1] with B = 2 * A computed at C's loop: neighbouring iterations
    need overlapping windows of B.  ``scope``: B's storage scope (None: global)."""
    a = te.placeholder((n + 1,), name="A")
    b = te.compute((n + 1,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((n,), lambda i: b[i] + b[i + 1], name="C")
    sch = Schedule(te.create_prim_func([a, c], name="stencil"))
    if scope is not None:
        sch.set_scope(sch.get_block("B"), 0, scope)
    x = np.random.default_rng(3).standard_normal(n + 1).astype("float32")
    return sch, [x, np.zeros(n, "float32")], {1: (x[:-1] + x[1:]) * 2}


# ---------------------------------------------------------------------------------------------
# Cooperative fetch: compute_at region, compaction, bind, results
# ---------------------------------------------------------------------------------------------

def test_shared_fetch_under_thread_loops_covers_the_block_tile():
    sch = cooperative_matmul(bind_fetch=False)
    # Each thread reads one row of A's tile and one column of B's; the fetch computed at the
    # k-tile loop copies what the 4 x 4 threads read together: 4 rows x 4 k, 4 k x 4 columns.
    assert extents(sch, sch.get_loops(sch.get_block("A_shared"))[5:]) == [4, 4]
    assert extents(sch, sch.get_loops(sch.get_block("B_shared"))[5:]) == [4, 4]


def test_local_cache_under_thread_loops_keeps_one_thread_region():
    sch = Schedule(matmul_definition(16))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    by, ty = sch.split(i, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(by, j, ty, ko, ki)
    sch.bind(by, "blockIdx.x")
    sch.bind(ty, "threadIdx.x")
    local = sch.cache_read(block, 0, "local")
    sch.compute_at(local, ko)
    assert extents(sch, sch.get_loops(local)[4:]) == [1, 4]


@pytest.mark.parametrize("k_tile", [4, 8])
def test_shared_tiles_are_compacted_to_one_k_tile(k_tile):
    sch = cooperative_matmul(k_tile=k_tile)
    # Not the whole K extent of the block's rows: one k-tile, refilled each k iteration.
    assert shared_allocations(sch.func) == {"A_shared": (4, k_tile), "B_shared": (k_tile, 4)}
    lowered = lower(sch.func)
    site = [f for f in collect(lowered.body, For)
            if any(isinstance(s, Allocate) and s.buffer.name == "A_shared" for s in [f.body])]
    assert site and site[0].thread_binding == "blockIdx.x"


@pytest.mark.parametrize("n", [16, 13])
@pytest.mark.parametrize("target", TARGETS)
def test_cooperative_fetch_matmul_runs(n, target):
    # 13: the last block's rows, columns and k-tile are guarded by predicates.
    sch = cooperative_matmul(n=n)
    run(sch.func, *matmul_arrays(n), target)


@pytest.mark.parametrize("target", TARGETS)
def test_compute_threads_bound_after_the_fetch_loops(target):
    # threadIdx.x bound last: the A fetch's loop is already bound to threadIdx.x inside it
    # (the same thread index from then on), and the compute reads A_shared elements other
    # threads copy -- a barrier orders them, so binding tx is accepted.
    sch = Schedule(matmul_definition(16))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    by, ty = sch.split(i, [None, 4])
    bx, tx = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(by, bx, ty, tx, ko, ki)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    a_shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(a_shared, ko)
    _, fy, fx = sch.split(sch.fuse(*sch.get_loops(a_shared)[5:]), [None, 4, 4])
    sch.bind(fy, "threadIdx.y")
    sch.bind(fx, "threadIdx.x")
    sch.bind(tx, "threadIdx.x")
    run(sch.func, *matmul_arrays(16, seed=3), target)


@pytest.mark.parametrize("target", TARGETS)
def test_cooperative_fetch_with_several_rounds_per_thread(target):
    # A 4 x 8 tile is 32 elements for 16 threads: the fused loop splits into [2, 4, 4].
    sch = cooperative_matmul(k_tile=8)
    assert extents(sch, sch.get_loops(sch.get_block("A_shared"))[5:]) == [2, 4, 4]
    run(sch.func, *matmul_arrays(16, seed=1), target)


@pytest.mark.parametrize("target", TARGETS)
def test_unbound_fetch_under_thread_loops_is_accepted(target):
    # Every thread copies the whole tile, writing each element with the same value: what TVM
    # runs for a fetch whose loops are not bound.  Binding tx once such a fetch of A sits
    # under it (every tx writes all of A's tile) is accepted too.
    sch = cooperative_matmul(bind_fetch=False)
    run(sch.func, *matmul_arrays(16, seed=2), target)
    sch = Schedule(matmul_definition(16))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    by, ty = sch.split(i, [None, 4])
    bx, tx = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(by, bx, ty, tx, ko, ki)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.compute_at(sch.cache_read(block, 0, "shared"), ko)
    sch.bind(tx, "threadIdx.x")
    assert extents(sch, sch.get_loops(sch.get_block("A_shared"))[5:]) == [4, 4]
    run(sch.func, *matmul_arrays(16, seed=4), target)


@pytest.mark.parametrize("target", TARGETS)
def test_shared_transpose_runs(target):
    sch = shared_transpose()
    assert shared_allocations(sch.func) == {"A_shared": (8, 8)}
    x = np.random.default_rng(4).standard_normal((16, 16)).astype("float32")
    run(sch.func, [x, np.zeros((16, 16), "float32")], {1: x.T}, target)


def test_fetch_loop_bound_inside_the_same_axis_must_not_use_the_outer_index():
    a = te.placeholder((4, 4), name="A")
    b = te.compute((4, 4), lambda i, j: a[i, j] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "threadIdx.x")
    func = sch.func
    # j inside i, both threadIdx.x, is the same thread index: the GPU would run only i == j.
    with pytest.raises(ScheduleError, match=r"loop j inside loop i, both bound to threadIdx.x, "
                                            r"would be the same thread index, but its body "
                                            r"uses i"):
        sch.bind(j, "threadIdx.x")
    assert sch.func is func
    # The other way round: binding i after j is refused for the same reason.
    sch2 = Schedule(te.create_prim_func([a, b]))
    i2, j2 = sch2.get_loops(sch2.get_block("B"))
    sch2.bind(j2, "threadIdx.x")
    with pytest.raises(ScheduleError, match=r"loop j inside loop i.*uses i"):
        sch2.bind(i2, "threadIdx.x")


def test_fetch_loop_bound_inside_the_same_axis_needs_the_same_extent():
    sch = cooperative_matmul(bind_fetch=False)
    fused = sch.fuse(*sch.get_loops(sch.get_block("A_shared"))[5:])
    _, fx = sch.split(fused, [None, 8])
    with pytest.raises(ScheduleError, match=r"has extent 8 but loop j_1 is already bound to "
                                            r"threadIdx.x with extent 4"):
        sch.bind(fx, "threadIdx.x")


# ---------------------------------------------------------------------------------------------
# Dependences between threads: shared with a barrier, global / local / blocks without
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_shared_window_computed_for_all_threads_is_accepted(target):
    sch, arrays, expected = stencil("shared")
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "threadIdx.x")
    sch.compute_at(sch.get_block("B"), i)
    # The window of all 8 threads (9 elements), the same for every thread.
    assert extents(sch, sch.get_loops(sch.get_block("B"))[1:]) == [9]
    run(sch.func, arrays, expected, target)


@pytest.mark.parametrize("scope", [None, "shared"])
def test_overlapping_windows_written_per_thread_are_refused(scope):
    # B computed at the loop before it is bound: each iteration writes its own 2-element
    # window, and neighbouring iterations write (and read) one element in common.  As
    # threads of a block that is a race whatever the scope: no barrier orders two writes
    # within one statement.
    sch, _, _ = stencil(scope)
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    assert extents(sch, sch.get_loops(sch.get_block("B"))[1:]) == [2]
    with pytest.raises(ScheduleError, match=r"loop i may carry a dependence: .*buffer B"):
        sch.bind(i, "threadIdx.x")


def test_overlapping_global_windows_across_blocks_are_refused():
    sch, _, _ = stencil(None)
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    with pytest.raises(ScheduleError, match=r"loop i may carry a dependence: .*buffer B"):
        sch.bind(i, "blockIdx.x")


@pytest.mark.parametrize("target", TARGETS)
def test_overlapping_shared_windows_across_blocks_are_private(target):
    # Each block has its own shared memory: every block computes its own window.
    sch, arrays, expected = stencil("shared")
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    sch.bind(i, "blockIdx.x")
    run(sch.func, arrays, expected, target)


def test_global_window_bound_first_is_refused_when_its_loop_joins_the_threads():
    # compute_at after the bind keeps one thread's region for a global B (nothing is checked
    # then); binding B's loop to the same axis makes the threads share the work, and the
    # enclosing loop's threads are asked again: through global memory, with no barrier, the
    # threads would race.
    a = te.placeholder((4,), name="A")
    b = te.compute((4,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((4, 4), lambda i, j: b[j] + a[i], name="C")
    sch = Schedule(te.create_prim_func([a, c]))
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "threadIdx.x")
    sch.compute_at(sch.get_block("B"), i)
    (ax,) = sch.get_loops(sch.get_block("B"))[1:]
    with pytest.raises(ScheduleError, match=r"loop i may carry a dependence: .*buffer B"):
        sch.bind(ax, "threadIdx.x")


@pytest.mark.parametrize("target", TARGETS)
def test_shared_copy_bound_inside_its_threads_is_accepted(target):
    # The same schedule with B in shared memory: a cooperative fetch of B.
    a = te.placeholder((4,), name="A")
    b = te.compute((4,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((4, 4), lambda i, j: b[j] + a[i], name="C")
    sch = Schedule(te.create_prim_func([a, c]))
    sch.set_scope(sch.get_block("B"), 0, "shared")
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "threadIdx.x")
    sch.compute_at(sch.get_block("B"), i)
    (ax,) = sch.get_loops(sch.get_block("B"))[1:]
    sch.bind(ax, "threadIdx.x")
    x = np.random.default_rng(5).standard_normal(4).astype("float32")
    run(sch.func, [x, np.zeros((4, 4), "float32")], {1: x[None, :] * 2 + x[:, None]}, target)


def test_local_window_is_private_to_each_thread():
    # A local B gets a copy per thread: overlapping windows are recomputed, not shared.
    sch, arrays, expected = stencil("local")
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    sch.bind(i, "threadIdx.x")
    run(sch.func, arrays, expected, "interp")


# ---------------------------------------------------------------------------------------------
# Cross-thread reduction
# ---------------------------------------------------------------------------------------------

def test_reduce_loop_bound_to_threads_is_accepted():
    sch = Schedule(row_sum_definition(6, 32))
    i, k = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(k, [None, 8])
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    assert sch.get(ki).thread_binding == "threadIdx.x"
    x = np.random.default_rng(6).standard_normal((6, 32)).astype("float32")
    run(sch.func, [x, np.zeros(6, "float32")], {1: x.sum(axis=1)}, "interp")
    # Blocks cannot combine their parts, nor can CPU threads (no lowering for them).
    with pytest.raises(ScheduleError, match=r"loop k_0 feeds reduce iteration variable v_k "
                                            r"of block B"):
        sch.bind(ko, "blockIdx.y")
    with pytest.raises(ScheduleError, match=r"feeds reduce iteration variable"):
        sch.parallel(ko)


@pytest.mark.parametrize("scope", [None, "shared"])
def test_reduction_recomputed_by_every_thread_is_refused(scope):
    # S computed at D's column loop: every column recomputes the row sum into one element of
    # S.  As threads they would all accumulate into it at once, in global or shared memory
    # alike (a reduction is no redundant copy; the exemption for a cross-thread reduction is
    # for a loop feeding the reduce variable, which j does not).
    a = te.placeholder((4, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    s = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="S")
    d = te.compute((4, 8), lambda i, j: a[i, j] - s[i], name="D")
    sch = Schedule(te.create_prim_func([a, d]))
    if scope is not None:
        sch.set_scope(sch.get_block("S"), 0, scope)
    _, j = sch.get_loops(sch.get_block("D"))
    sch.compute_at(sch.get_block("S"), j)
    kk = sch.get_loops(sch.get_block("S"))[-1]
    assert sch.get(kk).extent.value == 8
    with pytest.raises(ScheduleError, match=r"loop j may carry a dependence: .*buffer S"):
        sch.bind(j, "threadIdx.x")


# ---------------------------------------------------------------------------------------------
# One axis, several extents: separate kernels
# ---------------------------------------------------------------------------------------------

def two_stages():
    a = te.placeholder((8,), name="A")
    b = te.compute((8,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((8,), lambda i: b[i] + 1.0, name="C")
    return Schedule(te.create_prim_func([a, c]))


def test_separate_kernel_nests_may_bind_one_axis_with_other_extents():
    sch = two_stages()
    (i,) = sch.get_loops(sch.get_block("B"))
    bo, bi = sch.split(i, [None, 4])
    sch.bind(bo, "blockIdx.x")
    sch.bind(bi, "threadIdx.x")
    (j,) = sch.get_loops(sch.get_block("C"))
    co, ci = sch.split(j, [None, 2])
    sch.bind(co, "blockIdx.x")   # 4 blocks of 2 threads beside 2 blocks of 4: two launches
    sch.bind(ci, "threadIdx.x")
    x = np.arange(8, dtype="float32")
    run(sch.func, [x, np.zeros(8, "float32")], {1: x * 2 + 1}, "interp")


def test_one_kernel_nest_binds_an_axis_with_one_extent():
    sch = two_stages()
    (j,) = sch.get_loops(sch.get_block("C"))
    co, ci = sch.split(j, [None, 4])
    sch.compute_at(sch.get_block("B"), co)
    sch.bind(co, "blockIdx.x")
    sch.bind(ci, "threadIdx.x")
    (b_loop,) = sch.get_loops(sch.get_block("B"))[1:]
    # Nested in the kernel's blockIdx.x loop (2 blocks), blockIdx.x is that loop's index.
    with pytest.raises(ScheduleError, match=r"loop ax0 has extent 4 but loop i_0 is already "
                                            r"bound to blockIdx.x with extent 2"):
        sch.bind(b_loop, "blockIdx.x")
    _, bi = sch.split(b_loop, [None, 2])
    # Under one blockIdx loop, threadIdx.x has one extent: 4 threads, not 2.
    with pytest.raises(ScheduleError, match=r"loop ax0_1 has extent 2 but loop i_1 is already "
                                            r"bound to threadIdx.x with extent 4"):
        sch.bind(bi, "threadIdx.x")
    x = np.arange(8, dtype="float32")
    run(sch.func, [x, np.zeros(8, "float32")], {1: x * 2 + 1}, "interp")
