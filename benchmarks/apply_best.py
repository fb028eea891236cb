"""Applying tuning records at build time: ``python -m benchmarks.apply_best``.

    python -m benchmarks.apply_best [--n 256] [--trials 32] [--batch-size 8] [--rounds 11]
                                    [--target "llvm"] [--db tuning.db]

1. ``autotune.tune`` tunes an n x n x n float32 matmul into a database file (a temporary one
   unless ``--db`` is given; an existing file is topped up to ``--trials``).
2. Under ``autotune.apply_history_best(db)``, ``autotune.build`` builds the workload; the
   kernel is exported to an object file, as the LocalBuilder exports candidates.
3. A fresh LocalRunner with the tuning run's MeasureConfig times that kernel (its output
   checked against the reference on the first run) in ``--rounds`` rounds, each beside a
   control: the best record's trace replayed and built by the LocalBuilder, i.e. exactly what
   the tuning run measured.  Interleaving lets load changes on a shared machine hit both; the
   order within a round alternates, so neither always runs right after the other's threads.
   ``--target "llvm -num-cores 1"`` tunes single-threaded kernels, far less disturbed by
   other processes on a small shared machine than kernels that need every core.

It prints one JSON object:

    stored_median_ms     the best record's median as measured during tuning
    stored_score_ms      its ranking score (median pooled with its re-measurements)
    applied_ms           median over the rounds of the kernel built under apply_history_best
    control_ms           the same for the control (``*_min_ms``: the fastest round of each,
                         the figure least touched by other processes' load)
    ratio                applied_ms / stored_median_ms (the issue's check: within 10%)
    ratio_vs_control     applied_ms / control_ms: near 1 when a gap to the stored median is
                         machine noise between then and now rather than a different program
    same_program         the applied kernel's lowered func equals the replayed record's
    checked              the applied kernel's output was compared with the reference
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.common import environment
from search import SearchConfig


def main(argv=None) -> int:
    import autotune
    from autotune.measure import (
        BuildResult,
        LocalBuilder,
        LocalRunner,
        MeasureConfig,
        MeasureInput,
    )
    from records import Database, Workload
    from tensor_ir import ops
    from tensor_ir.func import structural_equal
    from tensor_ir.lower import lower

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="matmul size (n x n x n)")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=11,
                        help="interleaved timing rounds of the applied kernel and the control")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--db", default=None, help="database file (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.trials < 1 or args.n < 1:
        parser.error("--n, --trials and --rounds must be >= 1")

    func = ops.matmul(args.n, args.n, args.n)
    key = Workload(func).key
    config = MeasureConfig()
    target = str(autotune.Target(args.target))
    doc: dict = {"benchmark": "apply_best", "workload": f"matmul_{args.n}", "target": target,
                 "trials": args.trials, "measure_config": {
                     "number": config.number, "repeat": config.repeat,
                     "min_repeat_ms": config.min_repeat_ms, "flush_cache": config.flush_cache},
                 "environment": environment()}
    with tempfile.TemporaryDirectory(prefix="apply-best-") as tmp:
        path = args.db or os.path.join(tmp, "tuning.db")
        # 1. Tune into the database.
        t0 = time.perf_counter()
        result = autotune.tune(func, target, trials=args.trials, database=path,
                               search=SearchConfig(batch_size=args.batch_size, seed=args.seed),
                               measure=config, log=True)
        doc["tune_wall_s"] = round(time.perf_counter() - t0, 1)
        doc["trials_measured_now"] = result.trials
        with Database(path) as db:
            best = db.best(key, target)
        if best is None:
            doc["error"] = "the tuning run stored no successful record"
            json.dump(doc, sys.stdout, indent=2)
            sys.stdout.write("\n")
            return 1
        doc["best_record_id"] = best.record_id
        doc["stored_median_ms"] = best.median * 1e3
        doc["stored_score_ms"] = best.score * 1e3 if best.score is not None else None

        # 2. Build under apply_history_best and export the kernel.
        with autotune.apply_history_best(path) as ctx:
            kernel = autotune.build(func, target=target)
        doc["served"] = ctx.coverage()["served"] == 1
        replayed = best.trace().apply(func).func
        doc["same_program"] = structural_equal(kernel.func, lower(replayed))
        applied_path = os.path.join(tmp, "applied.o")
        kernel.export_library(applied_path)

        # 3. Time it beside the control, same runner, same protocol, interleaved.
        applied = MeasureInput(kernel.func, target, key, reference=func)
        control = MeasureInput(replayed, target, key, reference=func)
        samples: dict[str, list[float]] = {"applied": [], "control": []}
        checked = False
        with LocalBuilder(max_workers=1) as builder, LocalRunner(config) as runner:
            builds = [BuildResult(applied_path, None, 0.0), builder.build([control])[0]]
            for round_no in range(args.rounds):
                order = [0, 1] if round_no % 2 == 0 else [1, 0]
                results = runner.run([(applied, control)[i] for i in order],
                                     [builds[i] for i in order])
                named = sorted(zip([("applied", "control")[i] for i in order], results),
                               key=lambda pair: pair[0])
                for name, r in named:
                    if r.is_error:
                        doc["error"] = f"{name}: {r.error_kind}: {r.error_msg}"
                        break
                    samples[name].append(r.median)
                    checked = checked or (name == "applied" and bool(r.checked))
                if "error" in doc:
                    break
    if "error" not in doc:
        applied_s = statistics.median(samples["applied"])
        control_s = statistics.median(samples["control"])
        doc.update({
            "applied_ms": applied_s * 1e3, "control_ms": control_s * 1e3,
            "applied_min_ms": min(samples["applied"]) * 1e3,
            "control_min_ms": min(samples["control"]) * 1e3,
            "applied_samples_ms": [round(s * 1e3, 4) for s in samples["applied"]],
            "control_samples_ms": [round(s * 1e3, 4) for s in samples["control"]],
            "ratio": applied_s / best.median,
            "ratio_vs_score": applied_s / best.score if best.score else None,
            "ratio_vs_control": applied_s / control_s,
            "within_10pct": abs(applied_s / best.median - 1.0) <= 0.10,
            "checked": checked,
        })
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if "error" not in doc else 1


if __name__ == "__main__":
    raise SystemExit(main())
