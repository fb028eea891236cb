"""Tuning benchmark: autotune.tune on the issue's operators, against the naive loop nest, numpy
and random search.

    python -m benchmarks.tune_ops [--workloads matmul_1024,conv2d] [--trials 64,256]
                                  [--random-for matmul_1024,conv2d] [--batch-size 16]

For each workload it prints (one JSON document on stdout; progress lines go to stderr):

    gflops / gbps_after      best throughput when N trials were done (the best-so-far of the
                             run's first N trials; the last entry is the final, re-measured
                             best).  GB/s counts the parameters' bytes once (least traffic):
                             the figure for memory-bound operators (softmax, layer_norm,
                             depthwise conv2d)
    numpy_gflops             numpy in the same process (matmul, dense), OPENBLAS_CORETYPE and
                             OPENBLAS_L2_SIZE unset so it runs its best kernel
    naive_ms, speedup_vs_naive_after_first   the unscheduled loop nest and the speed-up of
                             the best program of the first N trials (N the smallest trial
                             count: the ">= 3x after 64 trials" check) over it, both from
                             side_by_side
    side_by_side             after tuning, the naive nest, the best program of the first N
                             trials and the final best timed by one runner in interleaved
                             rounds (each round runs all three in turn, so a change in machine
                             load hits them alike): medians and speed-ups.  The figures of
                             the run itself are each a single measurement taken minutes
                             apart, and the best of N such is biased low by the noise
    trial_reaching_90pct     the first trial whose best-so-far reached 90% of the final best
    wall_s, outside_kernels_share, trials_per_minute, phase_s   the tuner's own cost
    model_pairwise_accuracy  the cost model's ranking accuracy on each batch before it was
                             trained on it, pooled over the run (the search's own picks: close
                             in speed, so the hardest pairs to order)
    model_heldout            after the run, the model trained on every measured candidate
                             ranks --heldout fresh random programs of the space that it never
                             saw (measured then, kept out of its training data): accuracy,
                             candidates timed, rows it was trained on.  For the evolutionary
                             run its training data crowd around the best programs, for the
                             random one they spread over the space like the held-out ones
    random_search            the same figures with strategy="random" (for --random-for)

The machine may be shared: timings carry that noise.  A short run: ``--workloads matmul_1024
--trials 64``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from benchmarks.common import environment, interleaved_medians, reexec_without_openblas_env
from search import SearchConfig

# name -> (maker, primary metric, numpy callable maker or None)
WORKLOADS = ("matmul_1024", "matmul_128x768x3072", "dense_1x768x3072", "conv2d",
             "depthwise_conv2d", "softmax", "layer_norm")


def make_workload(name: str):
    """(func, primary metric "gflops" | "gbps", numpy reference maker or None)."""
    import numpy as np

    from tensor_ir import ops

    if name == "matmul_1024":
        return ops.matmul(1024, 1024, 1024), "gflops", _numpy_matmul(1024, 1024, 1024, np)
    if name == "matmul_128x768x3072":
        return ops.matmul(128, 3072, 768), "gflops", _numpy_matmul(128, 3072, 768, np)
    if name == "dense_1x768x3072":
        return ops.dense(1, 3072, 768), "gflops", _numpy_dense(1, 3072, 768, np)
    if name == "conv2d":
        return ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1), "gflops", None
    if name == "depthwise_conv2d":
        return ops.depthwise_conv2d_nchw(1, 144, 56, 56, 3, 3, padding=1), "gbps", None
    if name == "softmax":
        return ops.softmax((128, 1000)), "gbps", None
    if name == "layer_norm":
        return ops.layer_norm((128, 768)), "gbps", None
    raise SystemExit(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


def _numpy_matmul(m, n, k, np):
    def make():
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        return lambda: np.matmul(a, b, out=out)
    return make


def _numpy_dense(m, n, k, np):
    def make():
        rng = np.random.default_rng(0)
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        return lambda: np.matmul(x, w.T, out=out)
    return make


def side_by_side(programs: dict, workload_key: str, builder, rounds: int) -> dict:
    """Median seconds of each program (name -> PrimFunc; None: skipped) over ``rounds``
    interleaved rounds of one runner, None for a program that failed every time.  Their
    outputs were checked while tuning; none is cut short for being slow (the naive nest is
    hundreds of times slower than the tuned matmul)."""
    import statistics

    from autotune.measure import LocalRunner, MeasureConfig, MeasureInput, remove_artifacts

    names = [n for n, f in programs.items() if f is not None]
    inputs = [MeasureInput(programs[n], "llvm", workload_key, reference=None) for n in names]
    builds = builder.build(inputs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    config = MeasureConfig(timeout=120.0, repeat=3, slow_factor=math.inf)
    try:
        with LocalRunner(config) as runner:
            for _ in range(rounds):
                for name, result in zip(names, runner.run(inputs, builds)):
                    if not result.is_error:
                        samples[name].append(result.median)
    finally:
        remove_artifacts(builds)
    return {n: statistics.median(samples[n]) if samples.get(n) else None for n in programs}


def tune_figures(func, trials: list[int], strategy: str, args, flops: float, nbytes: float,
                 builder, runner, heldout: int = 0) -> dict:
    import autotune
    from records import MemoryDatabase

    total = max(trials)
    db = MemoryDatabase()
    result = autotune.tune(func, "llvm", trials=total,
                           search=SearchConfig(batch_size=args.batch_size, seed=args.seed,
                                               heldout=heldout, strategy=strategy),
                           builder=builder, runner=runner, database=db, log=True)
    history = result.history
    after: dict[str, dict] = {}
    for n in trials:
        if n < total:
            best = history[min(n, len(history)) - 1].best_seconds if history else math.inf
        else:
            best = result.best_time
        after[str(n)] = _rates(best, flops, nbytes)
    loop = result.loop
    out = {
        "strategy": strategy,
        "trials_done": result.trials,
        "after": after,
        "best_ms": _ms(result.best_time),
        "best_spread": result.best_spread,
        "trial_reaching_90pct": loop.trial_reaching(0.9) if loop else None,
        "wall_s": round(result.wall_seconds, 1),
        "outside_kernels_share": round(result.overhead_share, 3),
        "trials_per_minute": round(result.trials_per_minute, 1),
        "phase_s": {k: round(v, 2) for k, v in sorted(result.phase_seconds.items())},
        "model_pairwise_accuracy": None if math.isnan(result.model_accuracy)
        else round(result.model_accuracy, 3),
        "errors": loop.errors if loop else None,
    }
    held = result.model_heldout
    if held is not None:
        acc = held["accuracy"]
        out["model_heldout"] = {"accuracy": None if math.isnan(acc) else round(acc, 3),
                                "candidates": held["candidates"],
                                "trained_on": held["trained_on"]}
    programs = {"after_first": _best_program_of_first(func, result, db, trials[0]),
                "final": result.best_schedule.func if result.best_schedule else None}
    return out, programs


def _best_program_of_first(func, result, db, n: int):
    """The program of the fastest of the run's first ``n`` trials (None: none succeeded)."""
    ok = [t for t in result.history[:n] if math.isfinite(t.seconds)]
    if not ok:
        return None
    best = min(ok, key=lambda t: t.seconds)
    for rec in db.records(result.workload_key, result.target, include_errors=False):
        if rec.trace_hash == best.trace_hash:
            return rec.trace().apply(func).func
    return None


def _ms(seconds):
    return None if seconds is None or not math.isfinite(seconds) else round(seconds * 1e3, 4)


def _rates(seconds: float, flops: float, nbytes: float) -> dict:
    if not math.isfinite(seconds) or seconds <= 0:
        return {"gflops": None, "gbps": None, "ms": None}
    return {"gflops": round(flops / seconds / 1e9, 2), "gbps": round(nbytes / seconds / 1e9, 2),
            "ms": _ms(seconds)}


def main(argv=None) -> int:
    reexec_without_openblas_env("benchmarks.tune_ops")
    from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig
    from records import Workload
    from search import workload_cost

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, from: {', '.join(WORKLOADS)}")
    parser.add_argument("--trials", default="64,256",
                        help="comma-separated trial counts to report; the largest is run")
    parser.add_argument("--random-for", default="matmul_1024,conv2d",
                        help="workloads also tuned with random search ('' for none)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of the side-by-side timing after tuning")
    parser.add_argument("--heldout", type=int, default=48,
                        help="fresh random programs measured after each tuning run to judge "
                             "the trained cost model (0: none)")
    args = parser.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    trials = sorted({int(t) for t in args.trials.split(",") if t})
    random_for = {n for n in args.random_for.split(",") if n}

    doc = {"benchmark": "tune_ops", "trials": trials, "batch_size": args.batch_size,
           "seed": args.seed, "environment": environment(), "workloads": {}}
    config = MeasureConfig()
    with LocalBuilder() as builder:
        for name in names:
            func, metric, numpy_maker = make_workload(name)
            flops, nbytes = workload_cost(func)
            entry: dict = {"metric": metric, "flops": flops, "param_bytes": nbytes}
            print(f"== {name}", file=sys.stderr, flush=True)
            # A fresh runner per workload: its best-so-far (slow-candidate cut) is per run.
            with LocalRunner(config) as runner:
                entry["tuned"], programs = tune_figures(func, trials, "evolutionary", args,
                                                        flops, nbytes, builder, runner,
                                                        heldout=args.heldout)
            t0 = time.perf_counter()
            times = side_by_side({"naive": func, **programs}, Workload(func).key, builder,
                                 args.rounds)
            naive, first = times["naive"], times["after_first"]
            entry["side_by_side"] = {
                "rounds": args.rounds, "seconds": round(time.perf_counter() - t0, 1),
                **{f"{name}_ms": _ms(t) for name, t in times.items()},
                **{f"speedup_{name}": round(naive / t, 2) if naive and t else None
                   for name, t in times.items() if name != "naive"}}
            entry["naive_ms"] = _ms(naive)
            entry["speedup_vs_naive_after_first"] = (
                round(naive / first, 2) if naive and first else None)
            if numpy_maker is not None:
                times = interleaved_medians({"numpy": numpy_maker()}, rounds=5)
                entry["numpy_gflops"] = round(flops / times["numpy"]["median_s"] / 1e9, 2)
            if name in random_for:
                with LocalRunner(config) as runner:
                    entry["random_search"], _ = tune_figures(func, trials, "random", args, flops,
                                                          nbytes, builder, runner,
                                                          heldout=args.heldout)
            doc["workloads"][name] = entry
            json.dump({name: entry}, sys.stderr)
            sys.stderr.write("\n")
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
