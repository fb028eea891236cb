"""Hand-written GPU schedules, each with its numpy reference: (scheduled PrimFunc, input
arrays, reference outputs).  The tests run them at their small default sizes (odd ones, so
that predicates are exercised); ``python -m benchmarks.gpu_kernels`` times them at larger
ones."""
from __future__ import annotations

import numpy as np

from schedules.schedule import Schedule
from tensor_ir import te
from tensor_ir.expr import cast, maximum


def bind_flat(sch: Schedule, block_name: str, threads: int) -> None:
    """Fuse every loop of the block, split by ``threads`` and bind to blockIdx.x/threadIdx.x."""
    loops = sch.get_loops(sch.get_block(block_name))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    outer, inner = sch.split(fused, [None, threads])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")


def elementwise_add(rng: np.random.Generator, shape=(7, 5), threads: int = 8):
    """7x5 = 35 elements in blocks of 8 threads: the last block is guarded by a predicate."""
    a = te.placeholder(shape, name="A")
    b = te.placeholder(shape, name="B")
    c = te.compute(shape, lambda i, j: a[i, j] + b[i, j], name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="add"))
    bind_flat(sch, "C", threads)
    x, y = rng.standard_normal((2, *shape)).astype("float32")
    return sch.func, [x, y, np.zeros(shape, "float32")], {2: x + y}


def fused_chain(rng: np.random.Generator):
    """Three stages inlined into one: tanh, sqrt, a select, a cast and max, 3x11 elements over
    blocks of 4 threads (non-divisible)."""
    a = te.placeholder((3, 11), name="A")
    b = te.placeholder((3, 11), name="B")
    t = te.compute((3, 11), lambda i, j: te.tanh(a[i, j]) * 2.0 + te.sqrt(b[i, j]), name="T")
    u = te.compute((3, 11), lambda i, j: te.if_then_else(
        t[i, j] > 0.5, te.exp(t[i, j] * 0.25), t[i, j]), name="U")
    v = te.compute((3, 11), lambda i, j: maximum(u[i, j], 0.1)
                   + cast("float32", te.floormod(j, 3)), name="V")
    sch = Schedule(te.create_prim_func([a, b, v], name="chain"))
    sch.compute_inline(sch.get_block("T"))
    sch.compute_inline(sch.get_block("U"))
    bind_flat(sch, "V", 4)
    x = rng.standard_normal((3, 11)).astype("float32")
    y = rng.uniform(0.1, 2.0, (3, 11)).astype("float32")
    tt = np.tanh(x) * np.float32(2.0) + np.sqrt(y)
    uu = np.where(tt > 0.5, np.exp(tt * np.float32(0.25)), tt)
    jj = np.arange(11, dtype="int64")[None, :]
    vv = np.maximum(uu, np.float32(0.1)) + (jj % 3).astype("float32")
    return sch.func, [x, y, np.zeros((3, 11), "float32")], {2: vv.astype("float32")}


def row_sum(rng: np.random.Generator, rows: int = 10, cols: int = 6, threads: int = 4):
    """B[i] = sum_k A[i, k], one thread per row: 10 rows in blocks of 4 threads."""
    a = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    b = te.compute((rows,), lambda i: te.sum(a[i, k], axis=k), name="B")
    sch = Schedule(te.create_prim_func([a, b], name="row_sum"))
    i, _ = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, threads])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    x = rng.standard_normal((rows, cols)).astype("float32")
    return sch.func, [x, np.zeros(rows, "float32")], {1: x.sum(axis=1)}


def tiled_matmul(rng: np.random.Generator, n: int = 8, tile: int = 4):
    """C = A @ B with 4x4 thread blocks; per k-tile, A and B tiles are staged in shared memory
    by a cooperative fetch whose loops are bound to the block's threads.

    NOTE: the shared tiles are computed at the k loop *inside* the thread loops, so each
    thread's region is one row of A's tile and one column of B's; its fetch loop of extent
    ``tile`` is bound to the thread axis the other threads of that row / column differ in.
    Binding the extent-1 fetch loop as well is refused by ``bind`` (extent 1 against 4).
    """
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="matmul"))
    block = sch.get_block("C")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, tile])
    ko, ki = sch.split(kk, [None, tile])
    sch.reorder(io, jo, ii, ji, ko, ki)
    sch.bind(io, "blockIdx.y")
    sch.bind(jo, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    sch.bind(ji, "threadIdx.x")
    a_shared = sch.cache_read(block, 0, "shared")
    b_shared = sch.cache_read(block, 1, "shared")
    sch.compute_at(a_shared, ko)
    sch.compute_at(b_shared, ko)
    sch.bind(sch.get_loops(a_shared)[-1], "threadIdx.x")
    sch.bind(sch.get_loops(b_shared)[-2], "threadIdx.y")
    x = rng.standard_normal((n, n)).astype("float32")
    y = rng.standard_normal((n, n)).astype("float32")
    return sch.func, [x, y, np.zeros((n, n), "float32")], {2: x @ y}


WORKLOADS = {"add": elementwise_add, "chain": fused_chain, "row_sum": row_sum,
             "matmul": tiled_matmul}
