"""GPU features: the launch, shared memory, occupancy, coalescing, bank conflicts and
cross-thread reductions of hand-written GPU schedules, zeros for CPU programs, sampled GPU
candidates featurised, and an XGBoost model trained on GPU rows."""
from __future__ import annotations

import numpy as np
import pytest

import cost_models
from benchmarks import gpu_schedules as gs
from cost_models import features as F
from cost_models.base import ModelInput, pairwise_accuracy
from schedules import Schedule
from schedules.space import DesignSpace
from tensor_ir import ops, te
from tensor_ir.target import Target


def gpu(func, target=None) -> dict:
    """The GPU block of ``func``'s row, un-logged, by name (without the ``gpu_`` prefix)."""
    row = F.features(func, target)[F.GPU_OFFSET:].astype(np.float64)
    # Rounded: the row is float32, logged.
    return {name[4:]: round(float(2.0 ** v - 1.0), 3) for name, v in zip(F.GPU_FEATURES, row)}


def transpose(rows=8, cols=12, tile=4, naive=False, pad=True):
    """B = A.T in tile x tile thread blocks.  naive: threadIdx.x runs along B's rows, so the
    write to B strides by ``rows``; otherwise staged through a shared tile (padded by one
    column when ``pad``), both global accesses along threadIdx.x."""
    if not naive and pad:
        return gs.transpose_shared(np.random.default_rng(0), rows, cols, tile)[0]
    a = te.placeholder((rows, cols), name="A")
    b = te.compute((cols, rows), lambda j, i: a[i, j], name="B")
    sch = Schedule(te.create_prim_func([a, b], name="transpose"))
    block = sch.get_block("B")
    j, i = sch.get_loops(block)
    jo, ji = sch.split(j, [None, tile])
    io, ii = sch.split(i, [None, tile])
    if naive:
        sch.reorder(jo, io, ii, ji)
        for loop, axis in zip((jo, io, ii, ji), ("blockIdx.y", "blockIdx.x", "threadIdx.y",
                                                 "threadIdx.x")):
            sch.bind(loop, axis)
        return sch.func
    sch.reorder(jo, io, ji, ii)
    for loop, axis in zip((jo, io, ji, ii), ("blockIdx.y", "blockIdx.x", "threadIdx.y",
                                             "threadIdx.x")):
        sch.bind(loop, axis)
    staged = sch.cache_read(block, 0, "shared")
    sch.compute_at(staged, io)
    fy, fx = sch.get_loops(staged)[-2:]
    sch.bind(fy, "threadIdx.y")
    sch.bind(fx, "threadIdx.x")
    return sch.func


def test_layout_version_and_cpu_rows_are_zero_in_the_gpu_block():
    assert F.FEATURE_VERSION >= 3  # 3: the tensor intrinsic loop features (4: prefetch)
    assert F.FEATURE_NAMES[F.GPU_OFFSET:] == tuple(f"global.{n}" for n in F.GPU_FEATURES)
    assert F.NUM_FEATURES == 3 * F.NUM_STORE_FEATURES + len(F.GLOBAL_FEATURES)
    cpu = F.extract([ops.matmul(16, 16, 16), ops.softmax((4, 8))]
                    if hasattr(ops, "softmax") else [ops.matmul(16, 16, 16)])
    assert (cpu[:, F.GPU_OFFSET:] == 0).all() and (cpu[:, :F.GPU_OFFSET] != 0).any()
    # A GPU schedule featurised for a CPU target is a CPU program.
    func = gs.cross_thread_row_sum(np.random.default_rng(0))[0]
    assert (F.features(func, "llvm")[F.GPU_OFFSET:] == 0).all()
    assert gpu(func)["is_gpu"] == 1.0


def test_coalesced_transpose_through_shared_memory_vs_naive_transpose():
    staged, naive = gpu(transpose()), gpu(transpose(naive=True))
    assert staged["max_global_stride_max"] == 1.0 and staged["sum_global_strided"] == 0.0
    assert staged["sum_global_coalesced"] == 2.0       # the read of A, the write of B
    assert naive["max_global_stride_max"] == 8.0       # B's rows are 8 elements apart
    assert naive["sum_global_strided"] == 1.0 and naive["sum_global_coalesced"] == 1.0
    assert naive["sum_global_sectors"] > staged["sum_global_sectors"]
    assert naive["shared_bytes_per_block"] == 0.0
    assert staged["shared_bytes_per_block"] == 4 * 5 * 4   # the padded 4x5 float tile
    for v in (staged, naive):
        assert v["threads_per_block"] == 16 and v["threads_x"] == 4
        assert v["num_blocks"] == 6 and v["warps_per_block"] == 1 and v["idle_lanes"] == 16


def test_bank_conflicts_of_the_unpadded_shared_tile():
    padded, unpadded = gpu(transpose()), gpu(transpose(pad=False))
    # Reading the tile by columns: threadIdx.x strides 5 words (odd) or 4 (4 lanes a bank).
    assert padded["max_shared_conflict_degree"] == 1.0
    assert padded["sum_shared_conflict_accesses"] == 0.0
    assert unpadded["max_shared_conflict_degree"] == 4.0
    assert unpadded["sum_shared_conflict_accesses"] == 1.0
    assert unpadded["shared_bytes_per_block"] == 4 * 4 * 4


def test_matmul_threads_blocks_shared_bytes_and_arithmetic():
    rng = np.random.default_rng(0)
    coop = gpu(gs.cooperative_matmul(rng)[0])
    tiled = gpu(gs.tiled_matmul(rng)[0])
    big = gpu(gs.tiled_matmul(rng, n=16, tile=8)[0])
    assert coop["shared_bytes_per_block"] == tiled["shared_bytes_per_block"] == 2 * 16 * 4
    assert big["shared_bytes_per_block"] == 2 * 64 * 4 and big["threads_per_block"] == 64
    assert coop["num_blocks"] == 16 and tiled["num_blocks"] == 4       # ceil(13/4)^2, (8/4)^2
    assert coop["threads_per_block"] == tiled["threads_per_block"] == 16
    # The cooperative fetches re-bind the compute's thread axes: one tile element per thread
    # per k-tile (4 k-tiles each), not 16; the init runs once, the update 4 x 4 times.
    assert coop["sum_exec_per_thread"] == 4 + 4 + 1 + 16
    assert coop["max_exec_per_thread"] == 16.0
    assert coop["sum_shared_accesses_per_thread"] > 0 and coop["arith_per_global_byte"] > 0
    assert coop["cross_thread_reduction_stores"] == 0.0


def test_occupancy_follows_the_target_limits():
    func = gs.cooperative_matmul(np.random.default_rng(0))[0]   # 16 threads, 128 B shared
    sm80 = gpu(func, "cuda -arch=sm_80")
    # 16 threads take a warp's 32 slots: 2048 / 32 = 64 blocks, capped at 32 per SM.
    assert sm80["blocks_per_sm_threads"] == 32 and sm80["blocks_per_sm"] == 32
    assert sm80["occupancy"] == pytest.approx(0.5)
    opencl = Target("opencl -local-memory-size=256")
    small = gpu(func, opencl)
    assert small["blocks_per_sm_shared"] == 2 and small["blocks_per_sm"] == 2
    # OpenCL names no per-multiprocessor thread count: a common one, or the device's
    # work-group limit when that is larger.
    per_sm = max(2048, opencl.max_threads_per_block)
    assert small["occupancy"] == pytest.approx(2 * 32 / per_sm, abs=1e-3)


def test_cross_thread_reduction_is_lowered_and_marked():
    rng = np.random.default_rng(0)
    ctr = gpu(gs.cross_thread_row_sum(rng)[0])
    plain = gpu(gs.row_sum(rng)[0])
    # Init, accumulation, the write to the tree, 3 tree steps (8 threads), the result.
    assert ctr["cross_thread_reduction_stores"] == 7.0
    assert ctr["max_cross_thread_reduction"] == 1.0 and ctr["top_cross_thread_reduction"] == 1.0
    assert ctr["shared_bytes_per_block"] == 8 * 4 and ctr["local_bytes_per_thread"] == 4
    assert plain["cross_thread_reduction_stores"] == 0.0
    assert plain["shared_bytes_per_block"] == 0.0


def _gpu_samples(n: int):
    target = Target("opencl")
    funcs = []
    for func in (ops.matmul(32, 32, 32), ops.softmax((8, 64)) if hasattr(ops, "softmax")
                 else ops.matmul(8, 64, 16)):
        space = DesignSpace(func, target)
        funcs += [space.sample(seed=seed).func for seed in range(n)]
    return funcs, target


def test_sampled_gpu_candidates_featurise():
    funcs, target = _gpu_samples(4)
    x = F.extract(funcs, target)
    assert x.shape == (len(funcs), F.NUM_FEATURES) and np.isfinite(x).all()
    block = 2.0 ** x[:, F.GPU_OFFSET:].astype(np.float64) - 1.0
    names = list(F.GPU_FEATURES)
    assert (np.round(block[:, names.index("gpu_is_gpu")]) == 1).all()
    threads = block[:, names.index("gpu_threads_per_block")]
    assert (threads >= 1).all() and (threads <= target.max_threads_per_block + 1e-3).all()
    # Batched == one at a time.
    np.testing.assert_allclose(x[0], F.features(funcs[0], target), rtol=1e-6)


def test_xgboost_learns_from_gpu_rows():
    funcs, target = _gpu_samples(10)
    x = F.extract(funcs, target).astype(np.float64)
    col = {n: F.GPU_OFFSET + i for i, n in enumerate(F.GPU_FEATURES)}
    # A synthetic time in which occupancy and coalescing matter.
    times = (1.0 + x[:, col["gpu_sum_global_sectors"]]) / (0.1 + x[:, col["gpu_occupancy"]])
    groups = ["a"] * 10 + ["b"] * 10
    cands = [ModelInput(f, workload=g, target=target) for f, g in zip(funcs, groups)]
    model = cost_models.create("xgb", seed=0)
    model.update(cands, list(times))
    scores = model.predict(cands)
    assert scores.shape == (len(funcs),) and np.isfinite(scores).all()
    if len(set(np.round(times, 6))) > 2:
        assert pairwise_accuracy(scores, times, groups) > 0.6
