"""Feature-extraction speed: milliseconds per candidate for batches of scheduled programs.

    python -m benchmarks.feature_speed [--batch 200] [--rounds 3]

Workloads: the hand-written tiled matmul 1024 (benchmarks.matmul_schedule), a conv2d NCHW
64x56x56 -> 64, 3x3, both as created and with a tiled, vectorised, parallel schedule.  For
each it reports the time of ``cost_models.extract`` on a batch of scheduled functions (lowering
included, as the search pays it), on already lowered functions (the walk and the numbers
only), and lowering alone.  Prints one JSON document; the best of ``rounds`` is kept.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def tiled_conv2d(func):
    """A conv2d schedule in the style of the search's sketches: output channels and columns
    tiled, columns vectorised, the outer tiles fused and parallel."""
    from schedules import Schedule

    sch = Schedule(func)
    block = sch.get_block("conv2d_nchw")
    n, f, y, x, rc, ry, rx = sch.get_loops(block)
    fo, fi = sch.split(f, [None, 8])
    xo, xi = sch.split(x, [None, 8])
    sch.reorder(n, fo, y, xo, rc, ry, rx, fi, xi)
    sch.parallel(sch.fuse(n, fo))
    sch.vectorize(xi)
    sch.unroll(fi)
    return sch.func


def workloads() -> dict:
    from benchmarks.matmul_schedule import schedule_matmul
    from tensor_ir import ops

    conv = ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1)
    return {
        "matmul_1024_tiled": schedule_matmul(ops.matmul(1024, 1024, 1024)).func,
        "conv2d_56x56": conv,
        "conv2d_56x56_tiled": tiled_conv2d(conv),
    }


def best_of(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    from cost_models import extract
    from cost_models.features import NUM_FEATURES
    from tensor_ir.lower import lower

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    for name, func in workloads().items():
        batch = [func] * args.batch
        lowered = [lower(func)] * args.batch
        total = best_of(lambda batch=batch: extract(batch), args.rounds)
        walk = best_of(lambda lowered=lowered: extract(lowered), args.rounds)
        lowering = best_of(lambda batch=batch: [lower(f) for f in batch], args.rounds)
        rows.append({
            "workload": name,
            "ms_per_candidate": round(total / args.batch * 1e3, 3),
            "ms_per_candidate_prelowered": round(walk / args.batch * 1e3, 3),
            "ms_lowering_alone": round(lowering / args.batch * 1e3, 3),
        })
    doc = {"benchmark": "feature_speed", "batch": args.batch, "num_features": NUM_FEATURES,
           "results": rows}
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
