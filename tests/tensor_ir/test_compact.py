"""Buffer compaction in lowering: allocations move to the lowest loop enclosing their accesses
and shrink to one iteration's region; programs still match numpy through the interpreter and
LLVM."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.matmul_schedule import schedule_matmul
from schedules import Schedule, tree
from tensor_ir import ops, te
from tensor_ir.compact import compact_buffer_allocation, plan_allocations, private_buffers
from tensor_ir.expr import BufferLoad, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import (
    PARALLEL, REDUCE, SPATIAL, TRUE, Allocate, Block, BlockRealize, BufferRegion, BufferStore,
    For, IterVar, Range, SeqStmt, seq,
)
from tensor_ir.buffer import decl_buffer
from tensor_ir.visitor import collect

from tests.schedules.block_workloads import check, conv2d, matmul, softmax


def allocation(lowered: PrimFunc, name: str):
    """(loop whose body holds the allocation of ``name`` or None at function level, buffer)."""
    found = []

    def visit(node, loop):
        if isinstance(node, Allocate):
            if node.buffer.name == name:
                found.append((loop, node.buffer))
            visit(node.body, loop)
        elif isinstance(node, For):
            visit(node.body, node)
        elif isinstance(node, SeqStmt):
            for s in node.stmts:
                visit(s, loop)
        elif hasattr(node, "then_case"):
            visit(node.then_case, loop)
            if node.else_case is not None:
                visit(node.else_case, loop)
        elif hasattr(node, "body"):
            visit(node.body, loop)

    visit(lowered.body, None)
    assert len(found) == 1, f"{name} allocated {len(found)} times"
    return found[0]


# ---------------------------------------------------------------------------------------------
# The hand-written matmul schedule
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [64, 1024])
def test_matmul_schedule_register_tile_is_private_8x32(n):
    sch = schedule_matmul(ops.matmul(n, n, n))
    lowered = lower(sch.func)
    loop, buf = allocation(lowered, "C_local")
    assert buf.const_shape == (8, 32)
    assert loop is not None and loop.kind == PARALLEL
    assert loop.loop_var.name == "i_0_j_0_fused"
    # Every access of the tile is in tile coordinates: no outer loop variable left in them.
    for node in collect(loop.body, BufferLoad) + collect(loop.body, BufferStore):
        if node.buffer is buf:
            for idx in node.indices:
                assert not any(v is loop.loop_var for v in collect(idx, Var))
    # B_packed is read by every block of C: it stays whole at function level.
    ploop, packed = allocation(lowered, "B_packed")
    assert ploop is None and packed.const_shape == (n // 32, n, 32)


def test_matmul_schedule_matches_numpy():
    m = n = k = 64
    func, inputs, refs = matmul(m, n, k)
    sch = schedule_matmul(func)
    check(sch.func, inputs, refs)


# ---------------------------------------------------------------------------------------------
# conv2d: padding computed under a parallel loop
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2])
def test_conv2d_pad_under_parallel_loop_is_private(depth):
    func, inputs, refs = conv2d(n=1, c=3, h=8, w=8, f=4)
    sch = Schedule(func)
    conv = sch.get_block("conv")
    loops = sch.get_loops(conv)
    sch.compute_at(sch.get_block("pad"), loops[2])  # per output row y
    par = sch.get(loops[depth]).loop_var  # the output-channel loop or the row loop itself
    pad_buf = tree.find_block(sch.func, "pad").node.block.writes[0].buffer
    par_loop = tree.find_loop(sch.func, par).node
    assert pad_buf in private_buffers(sch.func, par_loop)
    # Compaction gives every iteration its own pad window, so parallel is legal.
    sch.parallel(loops[depth])
    scheduled = sch.func
    lowered = lower(scheduled)
    loop, buf = allocation(lowered, "pad")
    assert loop.loop_var is tree.find_block(scheduled, "conv").loops[2].loop_var
    assert buf.const_shape == (1, 3, 3, 10)  # three padded rows of all channels
    check(scheduled, inputs, refs)


def test_private_buffers_excludes_shared_use_and_vectorize():
    func, _, _ = conv2d()
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block("conv"))
    sch.compute_at(sch.get_block("pad"), loops[2])
    body_loops = tree.find_block(sch.func, "conv").loops
    pad_buf = tree.find_block(sch.func, "pad").node.block.writes[0].buffer
    # Deeper than the pad nest: pad is shared by the iterations of x.
    assert pad_buf not in private_buffers(sch.func, body_loops[3])
    # A vectorized loop never holds an allocation.
    assert private_buffers(sch.func, body_loops[2], kind="vectorized") == set()
    # Thread bindings: a global buffer is never private to a thread; local copies are.
    assert pad_buf not in private_buffers(sch.func, body_loops[2], "thread_binding",
                                          "threadIdx.x")


# ---------------------------------------------------------------------------------------------
# softmax with rfactor
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [16, 6])
def test_softmax_rfactor_partials_compacted_per_row(n):
    func, inputs, refs = softmax(m=8, n=n)
    sch = Schedule(func)
    i, k = sch.get_loops(sch.get_block("maxelem"))
    ko, ki = sch.split(k, [None, 4])
    rf = sch.rfactor(ki, 0)
    final_loops = sch.get_loops(sch.get_block("maxelem"))
    sch.compute_at(rf, final_loops[0])
    sch.parallel(final_loops[0])
    lowered = lower(sch.func)
    loop, buf = allocation(lowered, "maxelem_rf")
    assert loop is not None and loop.kind == PARALLEL
    assert buf.const_shape == (4, 1)
    # maxelem itself is read by the top-level exp nest: it stays at function level.
    assert allocation(lowered, "maxelem")[0] is None
    check(sch.func, inputs, refs)


# ---------------------------------------------------------------------------------------------
# cache_read into shared / local, storage_align
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["shared", "local"])
def test_cache_read_compute_at_compacts(scope):
    func, inputs, refs = matmul(16, 16, 16)
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    a_cache = sch.cache_read(c, 0, scope)
    b_cache = sch.cache_read(c, 1, scope)
    sch.compute_at(a_cache, i)
    sch.compute_at(b_cache, j)
    lowered = lower(sch.func)
    loop_a, buf_a = allocation(lowered, f"A_{scope}")
    loop_b, buf_b = allocation(lowered, f"B_{scope}")
    assert buf_a.scope == scope and buf_a.const_shape == (1, 16)
    assert buf_b.const_shape == (16, 1)
    assert loop_a.loop_var is sch.get(i).loop_var and loop_b.loop_var is sch.get(j).loop_var
    check(sch.func, inputs, refs)


def test_cache_read_top_level_window_shrinks_in_place():
    # The copy nest stays at function level but only covers the columns the consumer reads.
    A = te.placeholder((8, 32), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j + 4] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    a = np.random.default_rng(0).standard_normal((8, 32)).astype("float32")
    sch = Schedule(func)
    sch.cache_read(sch.get_block("B"), 0, "local")
    loop, buf = allocation(lower(sch.func), "A_local")
    assert loop is None and buf.const_shape == (8, 8)
    check(sch.func, [a], [a[:, 4:12] * 2])


def test_storage_align_kept_on_compacted_shape():
    func, inputs, refs = matmul(16, 16, 16)
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, j, ko, ii, ki)
    a_shared = sch.cache_read(c, 0, "shared")
    sch.storage_align(a_shared, 0, 0, 8, 1)
    whole = tree.find_block(sch.func, "A_shared").node.block.writes[0].buffer
    assert whole.const_shape == (16, 17)
    sch.compute_at(a_shared, ko)
    lowered = lower(sch.func)
    loop, buf = allocation(lowered, "A_shared")
    assert loop.loop_var is sch.get(ko).loop_var
    # The window is 4 x 4; its row stride is padded to 9 (9 % 8 == 1), not left at 17.
    assert buf.const_shape == (4, 9)
    check(sch.func, inputs, refs)


# ---------------------------------------------------------------------------------------------
# Placement rules
# ---------------------------------------------------------------------------------------------

def test_allocation_stays_outside_vectorized_loop():
    A = te.placeholder((6, 16), "float32", name="A")
    B = te.compute((6, 16), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 16), lambda i, j: B[i, j] + 1.0, name="C")
    func = te.create_prim_func([A, C])
    a = np.random.default_rng(5).standard_normal((6, 16)).astype("float32")
    sch = Schedule(func)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), j)
    sch.vectorize(j)
    loop, buf = allocation(lower(sch.func), "B")
    assert loop.loop_var is sch.get(i).loop_var
    assert buf.const_shape == (1, 16)
    check(sch.func, [a], [a * 2 + 1])


def _prefix_sum_func(m=4, n=5):
    """for k: (for i: T[i] += A[i, k]); (for i: P[i, k] = T[i]) -- running sums, read inside the
    reduction loop.  Every access of T is under k, but T accumulates across k."""
    A = decl_buffer((m, n), name="A")
    P = decl_buffer((m, n), name="P")
    T = decl_buffer((m,), name="T")
    k, i1, i2 = Var("k", "int64"), Var("i1", "int64"), Var("i2", "int64")
    vi, vk = Var("vi", "int64"), Var("vk", "int64")
    acc = Block("T", (IterVar(vi, Range.of(0, m), SPATIAL), IterVar(vk, Range.of(0, n), REDUCE)),
                (BufferRegion(A, (Range(vi, IntImm(1)), Range(vk, IntImm(1)))),),
                (BufferRegion(T, (Range(vi, IntImm(1)),)),),
                BufferStore(T, T[vi] + A[vi, vk], (vi,)),
                init=BufferStore(T, te.const(0.0, "float32"), (vi,)))
    wi, wk = Var("wi", "int64"), Var("wk", "int64")
    copy = Block("P", (IterVar(wi, Range.of(0, m), SPATIAL), IterVar(wk, Range.of(0, n), SPATIAL)),
                 (BufferRegion(T, (Range(wi, IntImm(1)),)),),
                 (BufferRegion(P, (Range(wi, IntImm(1)), Range(wk, IntImm(1)))),),
                 BufferStore(P, T[wi], (wi, wk)))
    body = For(k, IntImm(0), IntImm(n), "serial", seq(
        For(i1, IntImm(0), IntImm(m), "serial", BlockRealize((i1, k), TRUE, acc)),
        For(i2, IntImm(0), IntImm(m), "serial", BlockRealize((i2, k), TRUE, copy))))
    root = Block("root", (), (), (), body, None, (T,))
    return PrimFunc((A, P), BlockRealize((), TRUE, root), "prefix_sum"), T


def test_accumulator_not_allocated_inside_its_reduction_loop():
    func, T = _prefix_sum_func()
    plan = plan_allocations(func)[T]
    assert plan.site is None and plan.enclosing == ()
    a = np.random.default_rng(1).standard_normal((4, 5)).astype("float32")
    check(func, [a], [np.cumsum(a, axis=1)])


def test_data_dependent_index_keeps_dimension():
    A = te.placeholder((10,), "float32", name="A")
    idx = te.placeholder((4,), "int64", name="idx")
    T = te.compute((10,), lambda i: A[i] * 3.0, name="T")
    out = te.compute((4,), lambda j: T[idx[j]], name="out")
    func = te.create_prim_func([A, idx, out])
    lowered = lower(func)
    loop, buf = allocation(lowered, "T")
    assert loop is None and buf.const_shape == (10,)
    a = np.arange(10, dtype="float32")
    ix = np.array([9, 0, 3, 3], dtype="int64")
    check(func, [a, ix], [a[ix] * 3])


def test_unchanged_function_is_returned_as_is():
    func, _, _ = matmul()
    assert compact_buffer_allocation(func) is func
    conv, _, _ = conv2d()
    # pad is read by the whole conv nest at function level: nothing to move or shrink.
    assert compact_buffer_allocation(conv) is conv


def test_compacted_block_form_keeps_regions_consistent():
    func, _, _ = conv2d()
    sch = Schedule(func)
    sch.compute_at(sch.get_block("pad"), sch.get_loops(sch.get_block("conv"))[2])
    out = compact_buffer_allocation(sch.func)
    allocs = collect(out.body, Allocate)
    assert [a.buffer.name for a in allocs] == ["pad"]
    new_pad = allocs[0].buffer
    root = out.body.block
    assert all(b.name != "pad" for b in root.alloc_buffers)
    # Every region and access of pad names the compacted buffer.
    for region in collect(out.body, BufferRegion):
        assert region.buffer.name != "pad" or region.buffer is new_pad
    for load in collect(out.body, BufferLoad):
        assert load.buffer.name != "pad" or load.buffer is new_pad


def test_clipped_producer_window_is_compacted():
    # C[i] reads B[i - 1] (for i >= 1) and B[i]: under loop i, B's nest starts at max(i - 1, 0)
    # while C reads at i - 1 and i.  The two starts differ by at most one.
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + te.if_then_else(
        i >= 1, B[i - 1], te.const(0.0, "float32")), name="C")
    func = te.create_prim_func([A, C])
    sch = Schedule(func)
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    loop, buf = allocation(lower(sch.func), "B")
    assert loop.loop_var is sch.get(i).loop_var
    assert buf.const_shape[0] <= 3
    a = np.arange(8, dtype="float32")
    ref = a * 2 + np.concatenate([[0.0], a[:-1] * 2]).astype("float32")
    check(sch.func, [a], [ref])
