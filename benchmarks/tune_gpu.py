"""Tuning on a GPU: autotune.tune on the GPU design space against the vendor libraries.

    python -m benchmarks.tune_gpu [--ops sgemm,conv1x1,conv3x3,softmax,layer_norm]
                                  [--trials 64,256,1000] [--deadline-s 900] [--out FILE]

Per operator (SGEMM 4096^3 fp32; the ResNet-50 convolutions 1x256x56x56 -> 64 1x1 and
1x64x56x56 -> 64 3x3; softmax 4096x4096; layer_norm 4096x1024), one JSON row:

    after            {trials: best kernel ms} when that many trials were done: each stage
                     tops the same database up to the next count (a resumed run, as
                     ``tune`` does it), and its figure is the stage's best, re-measured
    vendor_ms        the same operation through torch on the same GPU (cuBLAS, cuDNN, torch's
                     softmax / layer_norm kernels), CUDA events, TF32 off
    vs_vendor        vendor time over ours at the last stage (1.0: as fast; above: faster)
    trial_reaching_90pct   the first trial whose best-so-far was within 90% of the final best
    trials_per_minute, wall_s   the tuner's pace over all stages

Stages run breadth first (every operator to the first count, then to the next), and a stage
is skipped when the time left before ``--deadline-s`` would not cover it at the pace seen so
far: on a lent GPU with minutes of time, every operator gets a figure before any gets more
trials.  The JSON is rewritten to ``--out`` after every stage, so a run cut short keeps what
it measured.  With no GPU here it prints an error document and exits.
"""
from __future__ import annotations

import json
import statistics
import sys
import time


def _ops():
    from tensor_ir import ops

    return {
        "sgemm": (lambda: ops.matmul(4096, 4096, 4096), "matmul 4096^3 fp32",
                  lambda t, a, b: a @ b),
        "conv1x1": (lambda: ops.conv2d_nchw(1, 256, 56, 56, 64, 1, 1),
                    "conv2d 1x256x56x56 -> 64, 1x1",
                    lambda t, x, w: t.nn.functional.conv2d(x, w)),
        "conv3x3": (lambda: ops.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1),
                    "conv2d 1x64x56x56 -> 64, 3x3, padding 1",
                    lambda t, x, w: t.nn.functional.conv2d(x, w, padding=1)),
        "softmax": (lambda: ops.softmax((4096, 4096)), "softmax 4096x4096",
                    lambda t, x: t.softmax(x, dim=-1)),
        "layer_norm": (lambda: ops.layer_norm((4096, 1024)), "layer_norm 4096x1024",
                       lambda t, x, g, b: t.nn.functional.layer_norm(x, (1024,), g, b,
                                                                     eps=1e-5)),
    }


def _vendor_ms(fn, func) -> float:
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    shapes = [tuple(int(getattr(d, "value", d)) for d in p.shape) for p in func.params[:-1]]
    inputs = [torch.from_numpy(rng.standard_normal(shape).astype("float32")).cuda()
              for shape in shapes]
    for _ in range(3):
        fn(torch, *inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            fn(torch, *inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 10)
    return statistics.median(times)


def main(argv=None) -> None:
    import argparse

    import autotune
    from autotune.runtime.cuda import cuda_device_facts, cuda_problem, cuda_target
    from autotune.measure import MeasureConfig
    from search import SearchConfig

    known = _ops()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tune_gpu")
    parser.add_argument("--ops", default=",".join(known))
    parser.add_argument("--trials", default="64,256,1000")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="wall seconds for the whole run; stages that would not fit are "
                             "skipped")
    parser.add_argument("--db", default="tune_gpu.db")
    parser.add_argument("--out", default=None, help="also write the JSON here after each stage")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    names = args.ops.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(known)}")
    budgets = sorted(int(t) for t in args.trials.split(","))
    out: dict = {"benchmark": "tune_gpu", "ops": {}}
    problem = cuda_problem()
    if problem is not None:
        out["error"] = problem
        print(json.dumps(out, indent=1))
        return
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    target = cuda_target()
    out["device"] = cuda_device_facts()
    out["target"] = str(target)
    out["torch"] = torch.__version__
    start = time.perf_counter()
    deadline = None if args.deadline_s is None else start + args.deadline_s
    # Candidates are timed with few repeats: the search needs an order, the re-measured best
    # of each stage is the figure.
    config = MeasureConfig(repeat=3, min_repeat_ms=10.0, timeout=10.0)
    funcs = {}
    rows = out["ops"]
    for name in names:
        make, label, fn = known[name]
        funcs[name] = make()
        rows[name] = {"op": label, "after": {}, "vendor_ms": round(_vendor_ms(fn, funcs[name]),
                                                                   4)}

    def save() -> None:
        out["wall_s"] = round(time.perf_counter() - start, 1)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1)

    history: dict[str, list] = {name: [] for name in names}
    spent: dict[str, float] = {name: 0.0 for name in names}
    for budget in budgets:
        for name in names:
            row = rows[name]
            done = len(history[name])
            if done >= budget:
                continue
            if deadline is not None and done:
                pace = spent[name] / done  # seconds a trial, this operator so far
                if time.perf_counter() + pace * (budget - done) * 1.1 > deadline:
                    row.setdefault("skipped", []).append(budget)
                    continue
            t0 = time.perf_counter()
            result = autotune.tune(funcs[name], target, trials=budget, database=args.db,
                                   measure=config,
                                   search=SearchConfig(batch_size=args.batch_size, seed=0,
                                                       remeasure_top=3, remeasure_rounds=3),
                                   log=False)
            spent[name] += time.perf_counter() - t0
            history[name] += [t.seconds if t.error_kind is None else float("inf")
                              for t in result.history]
            best_ms = 1e3 * result.best_time
            row["after"][str(budget)] = round(best_ms, 4)
            row["vs_vendor"] = round(row["vendor_ms"] / best_ms, 3)
            row["trials"] = len(history[name])
            row["errors"] = sum(1 for s in history[name] if s == float("inf"))
            row["trials_per_minute"] = round(60 * len(history[name]) / spent[name], 1)
            final = min(history[name])
            best = float("inf")
            for i, seconds in enumerate(history[name], 1):
                best = min(best, seconds)
                if best <= final / 0.9:
                    row["trial_reaching_90pct"] = i
                    break
            print(f"{name} after {budget}: {best_ms:.4f} ms (vendor {row['vendor_ms']} ms)",
                  file=sys.stderr, flush=True)
            save()
    save()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
