"""Hand-written GPU schedules, each with its numpy reference: (scheduled PrimFunc, input
arrays, reference outputs).  The tests run them at their small default sizes (odd ones, so
that predicates are exercised; tests/autotune/test_gpu_schedules.py runs the staged ones at
sizes their tiles do not divide); ``python -m benchmarks.gpu_kernels`` times them at larger
ones."""
from __future__ import annotations

import numpy as np

from schedules.schedule import Schedule
from tensor_ir import te
from tensor_ir.expr import cast, maximum
from tensor_ir.ops.nn import (
    ref_conv2d_nchw,
    ref_depthwise_conv2d_nchw,
    te_conv2d_nchw,
    te_depthwise_conv2d_nchw,
)
from tensor_ir.ops.norm import ref_layer_norm, ref_softmax, te_layer_norm, te_softmax


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

    The shared tiles are computed at the k loop inside the thread loops, so they cover the
    block's tile; one of each fetch's two loops is bound, and the threads along the other axis
    write the same values (legal, and what an unbound fetch does in TVM).
    :func:`cooperative_matmul` binds both, so that each element is fetched once.
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


def _bind_threads(sch: Schedule, loops, axes) -> None:
    for loop, axis in zip(loops, axes):
        sch.bind(loop, axis)


def _stage_by_dimension(sch: Schedule, fetch, factors, axes) -> None:
    """Cooperative fetch of a shared tile: split each of the fetch block's innermost loops by
    its factor (None: leave the loop serial), serial parts outermost, and bind the inner parts
    to ``axes``.

    Each dimension is split on its own rather than fusing the tile and splitting the fused
    loop: the fused form indexes through // and %, which the dependence check behind ``bind``
    proves only by enumerating the launch grid, and that enumeration runs out of budget at
    ordinary sizes (refusing the bind)."""
    loops = sch.get_loops(fetch)[-len(factors):]
    serial, bound = [], []
    for loop, factor in zip(loops, factors):
        if factor is None:
            serial.append(loop)
        else:
            outer, inner = sch.split(loop, [None, factor])
            serial.append(outer)
            bound.append(inner)
    sch.reorder(*serial, *bound)
    _bind_threads(sch, bound, axes)


def conv2d_nchw(rng: np.random.Generator, n: int = 1, c: int = 4, h: int = 8, w: int = 8,
                k: int = 8, stride: int = 1, tile=(4, 2, 4, 2), shared: bool = True):
    """3x3 convolution, padding 1, NCHW.  ``tile`` = (output channels, output rows, output
    columns, input channels) per block: the block's threads are (z, y, x) = one output pixel of
    one output channel each; blocks run over (batch, channel tiles, pixel tiles).

    With ``shared``, per tile of input channels (the serial loop ``rc_0`` outside the thread
    loops), the padded input window and the weights of the block's output channels are staged
    in shared memory by all the block's threads, the padding folded into the fetch (the pad
    stage is inlined into it, so the border is written as zeros and never read from global).
    Without it, the pad is inlined into the convolution and every thread reads global memory.

    NOTE: the sums accumulate in the output buffer itself, not in a register.  A register
    accumulator (cache_write "local") needs the reduction loop inside the thread loops with
    the fetches computed there, as :func:`cooperative_matmul` does; that variant is not
    written yet.
    """
    tk, th, tw, tc = tile
    data = te.placeholder((n, c, h, w), name="data")
    weight = te.placeholder((k, c, 3, 3), name="weight")
    out = te_conv2d_nchw(data, weight, stride, 1, name="conv")
    sch = Schedule(te.create_prim_func([data, weight, out], name="conv2d_nchw"))
    block = sch.get_block("conv")
    nn, ff, yy, xx, rc, ry, rx = sch.get_loops(block)
    fo, fi = sch.split(ff, [None, tk])
    yo, yi = sch.split(yy, [None, th])
    xo, xi = sch.split(xx, [None, tw])
    rco, rci = sch.split(rc, [None, tc])
    sch.reorder(nn, fo, yo, xo, rco, fi, yi, xi, rci, ry, rx)
    pixels = sch.fuse(yo, xo)
    _bind_threads(sch, (nn, fo, pixels, fi, yi, xi), ("blockIdx.z", "blockIdx.y", "blockIdx.x",
                                                      "threadIdx.z", "threadIdx.y",
                                                      "threadIdx.x"))
    threads = ("threadIdx.z", "threadIdx.y", "threadIdx.x")
    if shared:
        data_tile = sch.cache_read(block, 0, "shared")
        weight_tile = sch.cache_read(block, 1, "shared")
        sch.compute_inline(sch.get_block("pad_data"))
        sch.compute_at(data_tile, rco)
        # (batch, channels, rows, columns): channels over z, rows over y, columns over x.
        _stage_by_dimension(sch, data_tile, (None, tk, th, tw), threads)
        sch.compute_at(weight_tile, rco)
        # (output channels, input channels, ry, rx): the output channels are exactly the
        # block's z threads; the 3 taps of a row over x (a few x threads idle).
        _stage_by_dimension(sch, weight_tile, (tk, th, None, tw), threads)
    else:
        sch.compute_inline(sch.get_block("pad_data"))
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    wt = rng.standard_normal((k, c, 3, 3)).astype("float32")
    want = ref_conv2d_nchw(x, wt, stride, 1)
    return sch.func, [x, wt, np.zeros(want.shape, "float32")], {2: want}


def conv2d_nchw_stride2(rng: np.random.Generator, **sizes):
    """:func:`conv2d_nchw` with stride 2 (the input window of a tile is 2x as wide)."""
    return conv2d_nchw(rng, **{"stride": 2, **sizes})


def depthwise_conv2d_nchw(rng: np.random.Generator, n: int = 1, c: int = 3, h: int = 8,
                          w: int = 8, stride: int = 1, tile=(4, 4), cached: bool = True):
    """3x3 depthwise convolution, padding 1, NCHW: one block per (image, channel, tile of
    ``tile`` output pixels), one thread per output pixel.

    With ``cached``, the block's padded input window ((rows - 1) * stride + 3 by (columns - 1)
    * stride + 3) is staged in shared memory by all its threads (each input element is read
    by up to 9 threads, once from global), and each thread accumulates its 9 products in a
    register (cache_write "local", written back once).  Without it, every thread reads global
    memory and accumulates in the output."""
    th, tw = tile
    data = te.placeholder((n, c, h, w), name="data")
    weight = te.placeholder((c, 1, 3, 3), name="weight")
    out = te_depthwise_conv2d_nchw(data, weight, stride, 1, name="depthwise")
    sch = Schedule(te.create_prim_func([data, weight, out], name="depthwise_conv2d_nchw"))
    block = sch.get_block("depthwise")
    write_back = sch.cache_write(block, 0, "local") if cached else None
    nn, cc, yy, xx, ry, rx = sch.get_loops(block)
    yo, yi = sch.split(yy, [None, th])
    xo, xi = sch.split(xx, [None, tw])
    sch.reorder(nn, cc, yo, xo, yi, xi, ry, rx)
    images = sch.fuse(nn, cc)
    pixels = sch.fuse(yo, xo)
    _bind_threads(sch, (images, pixels, yi, xi),
                  ("blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x"))
    if cached:
        sch.reverse_compute_at(write_back, xi)
        window = sch.cache_read(block, 0, "shared")
        sch.compute_inline(sch.get_block("pad_data"))
        sch.compute_at(window, pixels)
        _stage_by_dimension(sch, window, (None, None, th, tw), ("threadIdx.y", "threadIdx.x"))
    else:
        sch.compute_inline(sch.get_block("pad_data"))
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    wt = rng.standard_normal((c, 1, 3, 3)).astype("float32")
    want = ref_depthwise_conv2d_nchw(x, wt, stride, 1)
    return sch.func, [x, wt, np.zeros(want.shape, "float32")], {2: want}


def transpose_shared(rng: np.random.Generator, rows: int = 8, cols: int = 12, tile: int = 4):
    """B = A.T through shared memory: a block reads a ``tile`` x ``tile`` tile of A row by row
    (threadIdx.x along A's rows: coalesced), a barrier, then writes it to B row by row
    (threadIdx.x along B's rows: coalesced again), reading the tile by columns.  The tile's
    rows are padded to ``tile + 1`` (storage_align) so that a column of it falls in distinct
    shared-memory banks."""
    a = te.placeholder((rows, cols), name="A")
    b = te.compute((cols, rows), lambda j, i: a[i, j], name="B")
    sch = Schedule(te.create_prim_func([a, b], name="transpose"))
    block = sch.get_block("B")
    j, i = sch.get_loops(block)
    jo, ji = sch.split(j, [None, tile])
    io, ii = sch.split(i, [None, tile])
    sch.reorder(jo, io, ji, ii)
    _bind_threads(sch, (jo, io, ji, ii),
                  ("blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x"))
    staged = sch.cache_read(block, 0, "shared")
    sch.compute_at(staged, io)
    # The fetch's loops are (A's row, A's column): consecutive threads x read along a row.
    _bind_threads(sch, sch.get_loops(staged)[-2:], ("threadIdx.y", "threadIdx.x"))
    sch.storage_align(staged, 0, 0, tile, 1)
    x = rng.standard_normal((rows, cols)).astype("float32")
    return sch.func, [x, np.zeros((cols, rows), "float32")], {1: np.ascontiguousarray(x.T)}


def matmul_register_tile(rng: np.random.Generator, n: int = 8, m: int = 8, k: int = 8,
                         threads: int = 4, reg=(2, 2)):
    """C = A @ B, each of the ``threads`` x ``threads`` threads of a block computing a ``reg``
    tile of C in registers (cache_write "local", written back once at the end, by
    reverse_compute_at at the thread loop); per k-tile of ``threads``, A's and B's tiles are
    staged in shared memory, every element fetched by exactly one thread.

    As in :func:`tiled_matmul`, the shared tiles are computed at the k-tile loop inside the
    thread loops, each fetch with one loop bound (so the k-tile equals ``threads``)."""
    ri, rj = reg
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    kk = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, kk] * b[kk, j], axis=kk), name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="matmul_register_tile"))
    block = sch.get_block("C")
    write_back = sch.cache_write(block, 0, "local")
    i, j, r = sch.get_loops(block)
    by, ty, ii = sch.split(i, [None, threads, ri])
    bx, tx, ji = sch.split(j, [None, threads, rj])
    ko, ki = sch.split(r, [None, threads])
    sch.reorder(by, bx, ty, tx, ko, ki, ii, ji)
    _bind_threads(sch, (by, bx, ty, tx), ("blockIdx.y", "blockIdx.x", "threadIdx.y",
                                          "threadIdx.x"))
    sch.reverse_compute_at(write_back, tx)
    a_tile = sch.cache_read(block, 0, "shared")
    b_tile = sch.cache_read(block, 1, "shared")
    sch.compute_at(a_tile, ko)
    sch.compute_at(b_tile, ko)
    # Thread (y, x) fetches A[its rows, k-tile column x] and B[k-tile row y, its columns].
    sch.bind(sch.get_loops(a_tile)[-1], "threadIdx.x")
    sch.bind(sch.get_loops(b_tile)[-2], "threadIdx.y")
    x = rng.standard_normal((n, k)).astype("float32")
    y = rng.standard_normal((k, m)).astype("float32")
    return sch.func, [x, y, np.zeros((n, m), "float32")], {2: x @ y}


def _rows_to_threads(sch: Schedule, block_name: str, threads: int):
    """Bind the rows of ``block_name`` (its first loop) to blockIdx.x / threadIdx.x; returns
    the thread loop."""
    rows = sch.get_loops(sch.get_block(block_name))[0]
    outer, inner = sch.split(rows, [None, threads])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    return inner


def softmax_rows(rng: np.random.Generator, rows: int = 8, cols: int = 7, threads: int = 4):
    """Softmax over the last axis, one thread per row: the row's max and sum of exponentials
    are computed by that thread (serial loops, in registers: set_scope "local") right before it
    writes the row.  The exponential is inlined (recomputed in the sum and the output).
    :func:`softmax_block_rows` spreads a row over a block's threads instead."""
    x = te.placeholder((rows, cols), name="X")
    y = te_softmax(x, name="softmax")
    sch = Schedule(te.create_prim_func([x, y], name="softmax_rows"))
    sch.compute_inline(sch.get_block("softmax_exp"))
    row = _rows_to_threads(sch, "softmax", threads)
    # The sum reads the max: compute the sum at the row first, then the max in front of it.
    for name in ("softmax_expsum", "softmax_maxelem"):
        stage = sch.get_block(name)
        sch.compute_at(stage, row)
        sch.set_scope(stage, 0, "local")
    data = rng.standard_normal((rows, cols)).astype("float32")
    return sch.func, [data, np.zeros_like(data)], {1: ref_softmax(data)}


def layer_norm_rows(rng: np.random.Generator, rows: int = 8, cols: int = 7, threads: int = 4):
    """Layer norm over the last axis with gamma and beta, one thread per row: the row's sum and
    its sum of squared deviations (two passes) in registers, then the row written.
    :func:`layer_norm_block_rows` spreads a row over a block's threads instead."""
    x = te.placeholder((rows, cols), name="X")
    gamma = te.placeholder((cols,), name="gamma")
    beta = te.placeholder((cols,), name="beta")
    y = te_layer_norm(x, gamma, beta, name="layer_norm")
    sch = Schedule(te.create_prim_func([x, gamma, beta, y], name="layer_norm_rows"))
    row = _rows_to_threads(sch, "layer_norm", threads)
    for name in ("layer_norm_sqsum", "layer_norm_sum"):
        stage = sch.get_block(name)
        sch.compute_at(stage, row)
        sch.set_scope(stage, 0, "local")
    data = rng.standard_normal((rows, cols)).astype("float32")
    g = rng.standard_normal(cols).astype("float32")
    bt = rng.standard_normal(cols).astype("float32")
    return (sch.func, [data, g, bt, np.zeros_like(data)],
            {3: ref_layer_norm(data, g, bt)})


def cooperative_matmul(rng: np.random.Generator, n: int = 13, threads: int = 4,
                       k_tile: int = 4):
    """C = A @ B as GPU tuners schedule it: blocks of ``threads`` x ``threads`` threads, one
    C element each; per k-tile, A's and B's tiles are copied to shared memory by all the
    block's threads (each fetch computed at the k-tile loop inside the thread loops, its loops
    fused, split and bound to threadIdx.y / threadIdx.x: on the GPU the compute's own thread
    indices), every element fetched once.  13 is not a multiple of 4: predicates guard the
    edge blocks' fetches and stores."""
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="cooperative_matmul"))
    block = sch.get_block("C")
    i, j, kk = sch.get_loops(block)
    by, ty = sch.split(i, [None, threads])
    bx, tx = sch.split(j, [None, threads])
    ko, ki = sch.split(kk, [None, k_tile])
    sch.reorder(by, bx, ty, tx, ko, ki)
    _bind_threads(sch, (by, bx, ty, tx), ("blockIdx.y", "blockIdx.x", "threadIdx.y",
                                          "threadIdx.x"))
    for index in (0, 1):
        tile = sch.cache_read(block, index, "shared")
        sch.compute_at(tile, ko)
        # Loops by, bx, ty, tx, ko, then the tile's two: fused and spread over the threads.
        fused = sch.fuse(*sch.get_loops(tile)[5:])
        _, fy, fx = sch.split(fused, [None, threads, threads])
        _bind_threads(sch, (fy, fx), ("threadIdx.y", "threadIdx.x"))
    x = rng.standard_normal((n, n)).astype("float32")
    y = rng.standard_normal((n, n)).astype("float32")
    return sch.func, [x, y, np.zeros((n, n), "float32")], {2: x @ y}


def cross_thread_row_sum(rng: np.random.Generator, rows: int = 6, cols: int = 37,
                         threads: int = 8):
    """B[i] = sum_k A[i, k], one block per row, the k loop's inner part bound to threadIdx.x:
    each thread sums its strided share, then the block's partial sums are combined across
    threads (a shared-memory tree) and thread 0 writes the row's sum."""
    a = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    b = te.compute((rows,), lambda i: te.sum(a[i, k], axis=k), name="B")
    sch = Schedule(te.create_prim_func([a, b], name="cross_thread_row_sum"))
    i, kk = sch.get_loops(sch.get_block("B"))
    _, ki = sch.split(kk, [None, threads])
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    x = rng.standard_normal((rows, cols)).astype("float32")
    return sch.func, [x, np.zeros(rows, "float32")], {1: x.sum(axis=1)}


def _row_reductions_over_threads(sch: Schedule, out: str, stages, threads: int) -> None:
    """One block per row of ``out`` with its columns over ``threads`` threads; each of
    ``stages`` (row reductions, in the order to place them) computed at the row in shared
    memory, its reduce loop split over the same threads (a cross-thread reduction)."""
    row, col = sch.get_loops(sch.get_block(out))
    sch.bind(row, "blockIdx.x")
    _, tx = sch.split(col, [None, threads])
    sch.bind(tx, "threadIdx.x")
    for name in stages:
        stage = sch.get_block(name)
        sch.compute_at(stage, row)
        sch.set_scope(stage, 0, "shared")
        _, kt = sch.split(sch.get_loops(stage)[-1], [None, threads])
        sch.bind(kt, "threadIdx.x")


def softmax_block_rows(rng: np.random.Generator, rows: int = 5, cols: int = 37,
                       threads: int = 8):
    """Softmax over the last axis, one block per row: the row's max and sum of exponentials
    are cross-thread reductions into shared memory, read by every thread after a barrier."""
    x = te.placeholder((rows, cols), name="X")
    y = te_softmax(x, name="softmax")
    sch = Schedule(te.create_prim_func([x, y], name="softmax_block_rows"))
    sch.compute_inline(sch.get_block("softmax_exp"))
    # The sum reads the max: place the sum at the row first, then the max in front of it.
    _row_reductions_over_threads(sch, "softmax", ("softmax_expsum", "softmax_maxelem"),
                                 threads)
    data = rng.standard_normal((rows, cols)).astype("float32")
    return sch.func, [data, np.zeros_like(data)], {1: ref_softmax(data)}


def layer_norm_block_rows(rng: np.random.Generator, rows: int = 5, cols: int = 37,
                          threads: int = 8):
    """Layer norm over the last axis, one block per row: the row's sum and sum of squared
    deviations are cross-thread reductions (two passes), then every thread writes its
    columns."""
    x = te.placeholder((rows, cols), name="X")
    gamma = te.placeholder((cols,), name="gamma")
    beta = te.placeholder((cols,), name="beta")
    y = te_layer_norm(x, gamma, beta, name="layer_norm")
    sch = Schedule(te.create_prim_func([x, gamma, beta, y], name="layer_norm_block_rows"))
    _row_reductions_over_threads(sch, "layer_norm", ("layer_norm_sqsum", "layer_norm_sum"),
                                 threads)
    data = rng.standard_normal((rows, cols)).astype("float32")
    g = rng.standard_normal(cols).astype("float32")
    bt = rng.standard_normal(cols).astype("float32")
    return (sch.func, [data, g, bt, np.zeros_like(data)],
            {3: ref_layer_norm(data, g, bt)})



def sgemm_block_tile(rng: np.random.Generator, n: int = 64, m: int = 64, k: int = 32,
                     threads=(16, 16), reg=(4, 4), k_tile: int = 16, vector: int = 4,
                     unroll_k: bool = False):
    """C = A @ B with the structure of a fast SGEMM: each block computes a
    (threads[0] * reg[0]) x (threads[1] * reg[1]) tile of C, each thread a ``reg`` tile held in
    registers (cache_write "local", its loops unrolled so that the accumulators are scalar
    registers), written back once; per ``k_tile`` of the reduction, the block copies A's and
    B's tiles into shared memory, B's rows with ``vector``-wide loads (float4).

    The fetches are staged dimension by dimension (as :func:`_stage_by_dimension` explains): A's tile
    (block rows x k_tile) with its rows over threadIdx.y and its k_tile columns over
    threadIdx.x, so ``k_tile`` equals ``threads[1]``; B's tile (k_tile x block columns) with
    its rows over threadIdx.y (``k_tile`` equals ``threads[0]`` too) and its columns split
    over threadIdx.x and the vector lanes.  ``unroll_k`` unrolls the k_tile loop as well
    (more independent instructions per step, more code)."""
    ty_n, tx_n = threads
    ri, rj = reg
    if not k_tile == tx_n == ty_n:
        raise ValueError("sgemm_block_tile stages A's k columns over threadIdx.x and B's k "
                         "rows over threadIdx.y: k_tile must equal both thread counts")
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    kk = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, kk] * b[kk, j], axis=kk), name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="sgemm"))
    block = sch.get_block("C")
    write_back = sch.cache_write(block, 0, "local")
    i, j, r = sch.get_loops(block)
    by, ty, ii = sch.split(i, [None, ty_n, ri])
    bx, tx, ji = sch.split(j, [None, tx_n, rj])
    ko, ki = sch.split(r, [None, k_tile])
    sch.reorder(by, bx, ty, tx, ko, ki, ii, ji)
    _bind_threads(sch, (by, bx, ty, tx), ("blockIdx.y", "blockIdx.x", "threadIdx.y",
                                          "threadIdx.x"))
    sch.unroll(ii)
    sch.unroll(ji)
    if unroll_k:
        sch.unroll(ki)
    # The accumulators zeroed once before the k loop, not tested for k == 0 at every step.
    init = sch.decompose_reduction(block, ko)
    for loop in sch.get_loops(init)[-2:]:
        sch.unroll(loop)
    sch.reverse_compute_at(write_back, tx)
    for loop in sch.get_loops(write_back)[-2:]:
        sch.unroll(loop)
    a_tile = sch.cache_read(block, 0, "shared")
    b_tile = sch.cache_read(block, 1, "shared")
    sch.compute_at(a_tile, ko)
    sch.compute_at(b_tile, ko)
    rows_a, cols_a = sch.get_loops(a_tile)[-2:]
    _, lane_y = sch.split(rows_a, [None, ty_n])
    sch.bind(lane_y, "threadIdx.y")
    sch.bind(cols_a, "threadIdx.x")
    rows_b, cols_b = sch.get_loops(b_tile)[-2:]
    sch.bind(rows_b, "threadIdx.y")
    _, lane_x, lanes = sch.split(cols_b, [None, tx_n, vector])
    sch.bind(lane_x, "threadIdx.x")
    sch.vectorize(lanes)
    x = rng.standard_normal((n, k)).astype("float32")
    y = rng.standard_normal((k, m)).astype("float32")
    return sch.func, [x, y, np.zeros((n, m), "float32")], {2: x @ y}


WORKLOADS = {"add": elementwise_add, "chain": fused_chain, "row_sum": row_sum,
             "matmul": tiled_matmul, "conv2d": conv2d_nchw, "conv2d_s2": conv2d_nchw_stride2,
             "depthwise": depthwise_conv2d_nchw, "transpose": transpose_shared,
             "matmul_reg": matmul_register_tile, "softmax": softmax_rows,
             "layer_norm": layer_norm_rows, "matmul_coop": cooperative_matmul,
             "row_sum_xthread": cross_thread_row_sum, "softmax_xthread": softmax_block_rows,
             "layer_norm_xthread": layer_norm_block_rows, "sgemm": sgemm_block_tile}
