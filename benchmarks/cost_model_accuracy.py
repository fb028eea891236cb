"""Cost-model ranking accuracy on really measured matmul candidates.

    python -m benchmarks.cost_model_accuracy [--size 256] [--candidates 300] [--train 256]

Draws random tiled matmul schedules (tile sizes from sample_perfect_tile; cache_write,
parallel, vectorize, unroll and the auto-unroll pragma chosen at random), builds each with
``autotune.build`` and times it in this process: ``number`` calls per repeat grown to 20 ms,
5 repeats, the minimum kept (the least disturbed by other processes on a shared machine).
Kernels run on one thread (``-num-cores 1``) because parallel kernels on a busy 2-core machine
time too erratically to rank (two timing runs of the same candidates agreed on only ~80% of
pairs).  Trains each cost model on the first ``--train`` candidates and prints the pairwise
ranking accuracy on the rest as JSON.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time


def random_matmul_schedule(func, rng: random.Random):
    """One random candidate in a space of tiled matmul schedules, and its decisions."""
    from schedules import Schedule

    sch = Schedule(func, seed=rng.randrange(1 << 30))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ti = [int(v) for v in sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)]
    tj = [int(v) for v in sch.sample_perfect_tile(j, n=3, max_innermost_factor=32)]
    tk = [int(v) for v in sch.sample_perfect_tile(k, n=2, max_innermost_factor=16)]
    i0, i1, i2 = sch.split(i, ti)
    j0, j1, j2 = sch.split(j, tj)
    k0, k1 = sch.split(k, tk)
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    decisions = {"ti": ti, "tj": tj, "tk": tk, "cache": rng.random() < 0.5,
                 "parallel": rng.random() < 0.7, "vectorize": rng.random() < 0.7,
                 "unroll": rng.random() < 0.5, "auto_unroll": rng.choice([0, 16, 64, 512])}
    if decisions["cache"]:
        write_back = sch.cache_write(c, 0, "local")
        sch.reverse_compute_at(write_back, j1)
    if decisions["parallel"]:
        sch.parallel(sch.fuse(i0, j0))
    if decisions["vectorize"]:
        sch.vectorize(j2)
    if decisions["unroll"]:
        sch.unroll(i2)
    if decisions["auto_unroll"]:
        sch.annotate(c, "pragma_auto_unroll_max_step", decisions["auto_unroll"])
    return sch, decisions


def measure(kernel, args, min_repeat_s: float = 0.02, repeat: int = 5) -> float:
    kernel(*args)
    start = time.perf_counter()
    kernel(*args)
    once = time.perf_counter() - start
    number = max(1, int(min_repeat_s / max(once, 1e-7)))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            kernel(*args)
        best = min(best, (time.perf_counter() - start) / number)
    return best


def main(argv=None) -> int:
    import numpy as np

    import autotune
    from cost_models import create, extract, pairwise_accuracy
    from tensor_ir import ops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--candidates", type=int, default=300)
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 2 <= args.train < args.candidates:
        parser.error("--train must be at least 2 and below --candidates")
    n = args.size
    func = ops.matmul(n, n, n)
    rng = random.Random(args.seed)
    data = np.random.default_rng(args.seed)
    a = data.standard_normal((n, n), dtype=np.float32)
    b = data.standard_normal((n, n), dtype=np.float32)
    expected = a @ b
    funcs, times = [], []
    start = time.perf_counter()
    for _ in range(args.candidates):
        sch, _ = random_matmul_schedule(func, rng)
        out = np.zeros((n, n), np.float32)
        try:
            kernel = autotune.build(sch.func, target="llvm -num-cores 1")
            kernel(a, b, out)
            ok = np.allclose(out, expected, rtol=1e-3, atol=1e-3)
            seconds = measure(kernel, (a, b, out)) if ok else float("inf")
        except Exception:  # noqa: BLE001 -- a failed build is an error record, as in tuning
            seconds = float("inf")
        funcs.append(sch.func)
        times.append(seconds)
    measure_s = time.perf_counter() - start
    x = extract(funcs)
    t = np.array(times)
    train, test = slice(0, args.train), slice(args.train, None)
    results = {}
    for kind in ("xgb", "random"):
        model = create(kind, seed=args.seed)
        model.update(x[train], t[train])
        results[kind] = round(pairwise_accuracy(model.predict(x[test]), t[test]), 4)
    finite = t[np.isfinite(t)]
    doc = {
        "benchmark": "cost_model_accuracy", "size": [n, n, n], "candidates": args.candidates,
        "train": args.train, "held_out": args.candidates - args.train,
        "errors": int(np.isinf(t).sum()),
        "ms_range": [round(float(finite.min()) * 1e3, 3), round(float(finite.max()) * 1e3, 3)]
        if finite.size else None,
        "pairwise_accuracy": results, "target": 0.80, "measure_s": round(measure_s, 1),
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
