"""A hand-written schedule for fp32 matmul against numpy (OpenBLAS), measured side by side.

    python -m benchmarks.matmul_schedule [--size 1024] [--rounds 9]

The schedule is the classic CPU GEMM recipe expressed with the project's primitives:

1. B is packed into panels ``B_packed[n // 32, k, n % 32]`` so the inner loop streams one
   contiguous 128-byte row of a panel per k.
2. C is tiled into 8x32 register blocks (``cache_write`` to a local buffer): 8 rows times two
   512-bit vectors give 16 accumulators that stay in registers across the whole k loop.
3. The (row-block, column-block) loops are fused and run in parallel on every core; the rows of
   a register block are unrolled and its columns vectorised, so each k step is 8 broadcasts of
   A and 16 fused multiply-adds.
4. The reduction's init is split off (decompose_reduction) and the write-back of the block is
   placed right after its k loop (reverse_compute_at), both vectorised.

Prints one JSON document with both GFLOPS figures and their ratio.  OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE are unset for this process so numpy runs its best kernel.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from benchmarks.common import environment, interleaved_medians, reexec_without_openblas_env

ROWS, COLS = 8, 32  # register block: 8 rows x 32 floats (two AVX-512 vectors)


def schedule_matmul(func, rows: int = ROWS, cols: int = COLS):
    """Apply the register-blocked, B-packed, parallel schedule to a te matmul PrimFunc."""
    from schedules import Schedule

    sch = Schedule(func)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i_outer, i_inner = sch.split(i, [None, rows])
    j_outer, j_inner = sch.split(j, [None, cols])
    sch.reorder(i_outer, j_outer, k, i_inner, j_inner)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, j_outer)
    pack = sch.pack_layout(block, 1, lambda kk, n: (n // cols, kk, n % cols))
    init = sch.decompose_reduction(block, k)
    sch.parallel(sch.fuse(i_outer, j_outer))
    annotate_register_block(sch, i_inner, j_inner, write_back, init, pack)
    return sch


def annotate_register_block(sch, i_inner, j_inner, write_back, init, pack) -> None:
    """The annotations a register-blocked, B-packed matmul schedule ends with: the block's
    rows unrolled and its columns vectorised, its write-back and its init vectorised, the
    packing of B parallel over the panels and vectorised along them."""
    sch.unroll(i_inner)
    sch.vectorize(j_inner)
    sch.vectorize(sch.get_loops(write_back)[-1])
    sch.vectorize(sch.get_loops(init)[-1])
    pack_loops = sch.get_loops(pack)
    sch.parallel(pack_loops[0])
    sch.vectorize(pack_loops[-1])


def main(argv=None) -> int:
    reexec_without_openblas_env("benchmarks.matmul_schedule")
    import numpy as np

    import autotune
    from tensor_ir import ops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    n = args.size

    sch = schedule_matmul(ops.matmul(n, n, n))
    kernel = autotune.build(sch.func, target="llvm")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ours, theirs = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
    kernel(a, b, ours)
    np.matmul(a, b, out=theirs)
    max_rel = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
    if max_rel > 1e-4:
        raise SystemExit(f"scheduled matmul is wrong: max relative error {max_rel}")

    times = interleaved_medians({
        "scheduled": lambda: kernel(a, b, ours),
        "numpy": lambda: np.matmul(a, b, out=theirs),
    }, rounds=args.rounds)
    flops = 2.0 * n ** 3
    ours_gflops = flops / times["scheduled"]["median_s"] / 1e9
    numpy_gflops = flops / times["numpy"]["median_s"] / 1e9
    doc = {
        "benchmark": "matmul_schedule",
        "size": [n, n, n],
        "threads": 2,
        "scheduled_gflops": round(ours_gflops, 1),
        "numpy_gflops": round(numpy_gflops, 1),
        "ratio": round(ours_gflops / numpy_gflops, 3),
        # The machine's speed drifts; the median of per-round ratios is robust to that drift.
        "ratio_per_round_median": round(statistics.median(
            t_np / t_ours for t_ours, t_np in zip(times["scheduled"]["samples_s"],
                                                  times["numpy"]["samples_s"])), 3),
        "target_ratio": 0.70,
        "max_rel_err": max_rel,
        "median_ms": {k: round(v["median_s"] * 1e3, 3) for k, v in times.items()},
        "environment": environment(),
        "trace": str(sch.trace),
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
