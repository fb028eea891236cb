"""How few trials the search needs: the papers' operator table against TVM, strategies side by
side, and cost models transferred from other workloads.

    python -m benchmarks.search_efficiency table [--only TBG,GMM] [--trials 64] [--seeds 0,1,2]
                                                 [--tvm ../shared/anchors/tvm_table_t64.json]
    python -m benchmarks.search_efficiency strategies [--workloads matmul_1024,conv2d]
                                                 [--trials 64] [--seeds 0,1,2]
                                                 [--strategies evolutionary,optuna,random]
    python -m benchmarks.search_efficiency transfer --pretrain-db r18.db [--models resnet50,...]

Each prints one JSON document on stdout (progress on stderr).

``table``: each operator of benchmarks/op_table.py tuned with our default strategy and
``--trials`` trials (per seed of ``--seeds``, default 0; fresh in-memory database); the best
program rebuilt and compared with numpy (``correct``); its time is the tuner's re-measured
median (a native timing loop, no Python per call).  ``tvm_ms`` is TVM MetaSchedule's time for
the same computation and budget from ``--tvm`` (the JSON that ``../shared/anchors/tvm_table.py``
writes; run it on the same machine just before, as the machine's speed drifts from day to
day): ``speedup_vs_tvm`` = tvm_ms / ours_ms (above 1: we are faster), with their geometric
mean.  With several seeds the verdict (``median_over_seeds``, the geometric mean, the slowest)
is on each operator's median run.

``strategies``: evolutionary, Optuna (TPE) and random search on the same workloads, seeds and
budget; per run the best-so-far curve (ms after each trial, as the run measured it) and its
value after 64 and ``--trials`` trials; per workload and budget the median over seeds and
which strategy is ahead.

``transfer``: a cost model pre-trained on one model's records (``--pretrain-db``), tasks of
other models tuned from a cold model and from it, side by side (see ``transfer_main``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

DEFAULT_TVM = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "anchors",
                           "tvm_table_t64.json")
STRATEGY_WORKLOADS = ("matmul_1024", "conv2d", "depthwise_conv2d", "softmax")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _ms(value: float) -> float:
    """Milliseconds to four significant digits: a fixed number of decimals left kernels of
    tens of microseconds three digits, and the median of two such rows off their mean."""
    return float(f"{value:.4g}")


def _geomean(values) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _tvm_times(path: str) -> dict[str, float]:
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        doc = json.load(f)
    return {row["workload"]: row["remeasured_ms"] for row in doc.get("results", [])
            if "remeasured_ms" in row}


def table_main(args) -> dict:
    """Every operator tuned once per seed; with several seeds, each operator's verdict is
    the median of its runs (a single 64-trial run moves by up to 20% on this machine: which
    programs the model ranks first depends on measurement noise)."""
    import autotune
    from benchmarks.op_table import TABLE, TVM_INDEX, make, relative_error, tolerance
    from search import SearchConfig

    names = [n for n in TABLE if not args.only or n in args.only.split(",")]
    seeds = [int(s) for s in str(args.seeds).split(",")]
    tvm = _tvm_times(args.tvm)
    rows = []
    runs: dict[str, list[dict]] = {}  # each operator's rows, one per seed
    for seed in seeds:
        for name in names:
            w = make(name)
            t0 = time.perf_counter()
            r = autotune.tune(w.func, "llvm", trials=args.trials, search=SearchConfig(seed=seed),
                              log=False)
            wall = time.perf_counter() - t0
            ours_ms = r.best_time * 1e3
            err = relative_error(w, r.best_schedule.func, seed=1) \
                if r.best_schedule is not None else math.inf
            key = f"{name}#{TVM_INDEX[name]}"
            tvm_ms = tvm.get(key)
            curve = _curve(r.history)  # the run's own best-so-far, trial by trial
            reach = _reaching(curve, curve[-1]) if curve else None
            row = {"workload": key, "what": w.what, "seed": seed, "trials": r.trials,
                   "ours_ms": _ms(ours_ms),
                   "gflops": round(w.flops / r.best_time / 1e9, 1) if r.best_time else None,
                   "tvm_ms": tvm_ms,
                   "speedup_vs_tvm": round(tvm_ms / ours_ms, 3) if tvm_ms else None,
                   "correct": err < tolerance(w), "rel_err": err, "spread": r.best_spread,
                   "trial_reaching_90pct": reach,
                   "trials_per_minute": round(r.trials_per_minute, 1),
                   "wall_s": round(wall, 1)}
            _log(json.dumps(row))
            rows.append(row)
            runs.setdefault(key, []).append(row)
    summary = []
    for key, mine in runs.items():
        ms = statistics.median(r["ours_ms"] for r in mine)
        tvm_ms = mine[0]["tvm_ms"]
        ratios = [r["speedup_vs_tvm"] for r in mine if r["speedup_vs_tvm"]]
        summary.append({"workload": key, "median_ours_ms": _ms(ms),
                        "tvm_ms": tvm_ms,
                        "speedup_vs_tvm": round(tvm_ms / ms, 3) if tvm_ms else None,
                        "speedup_range": [min(ratios), max(ratios)] if ratios else None,
                        "correct": all(r["correct"] for r in mine)})
    ratios = [r["speedup_vs_tvm"] for r in summary if r["speedup_vs_tvm"]]
    return {"benchmark": "search_efficiency.table", "trials": args.trials, "seeds": seeds,
            "tvm_source": os.path.basename(args.tvm) if tvm else None, "rows": rows,
            "median_over_seeds": summary,
            "all_correct": all(r["correct"] for r in rows),
            "geomean_speedup_vs_tvm": round(_geomean(ratios), 3) if ratios else None,
            "slowest_vs_tvm": min(ratios) if ratios else None}


def strategies_main(args) -> dict:
    import autotune
    from benchmarks.tune_ops import make_workload
    from search import SearchConfig

    strategies = args.strategies.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    budgets = sorted({min(64, args.trials), args.trials})
    out = {}
    for name in args.workloads.split(","):
        func, _, _ = make_workload(name)
        runs = []
        for strategy in strategies:
            for seed in seeds:
                t0 = time.perf_counter()
                r = autotune.tune(func, "llvm", trials=args.trials,
                                  search=SearchConfig(strategy=strategy, seed=seed,
                                                      remeasure_top=0),
                                  log=False)
                curve = [round(v * 1e3, 4) if math.isfinite(v) else None
                         for v in _curve(r.history)]
                run = {"strategy": strategy, "seed": seed,
                       "best_ms_after": {str(n): curve[n - 1] if len(curve) >= n else None
                                         for n in budgets},
                       "errors": sum(1 for t in r.history if t.error_kind),
                       "wall_s": round(time.perf_counter() - t0, 1), "curve_ms": curve}
                _log(json.dumps({"workload": name, **{k: v for k, v in run.items()
                                                      if k != "curve_ms"}}))
                runs.append(run)
        summary = {}
        for n in budgets:
            med = {}
            for strategy in strategies:
                vals = [r["best_ms_after"][str(n)] for r in runs if r["strategy"] == strategy]
                vals = [v for v in vals if v is not None]
                med[strategy] = round(statistics.median(vals), 4) if vals else None
            ranked = sorted((v, s) for s, v in med.items() if v is not None)
            summary[str(n)] = {"median_best_ms": med, "fastest": ranked[0][1] if ranked else None}
            if "optuna" in med and "random" in med and med["optuna"] and med["random"]:
                summary[str(n)]["optuna_beats_random"] = med["optuna"] < med["random"]
        out[name] = {"summary": summary, "runs": runs}
    beats = [v["summary"][str(min(budgets))].get("optuna_beats_random") for v in out.values()]
    return {"benchmark": "search_efficiency.strategies", "trials": args.trials, "seeds": seeds,
            "workloads": out,
            "optuna_beats_random_at_64": sum(1 for b in beats if b),
            "of": len(beats)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.search_efficiency",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("table", help="the papers' operator table against TVM")
    t.add_argument("--only", default="", help="comma-separated class names (C2D,TBG,...)")
    t.add_argument("--trials", type=int, default=64)
    t.add_argument("--seeds", "--seed", default="0",
                   help="comma-separated; several give each operator's median over them")
    t.add_argument("--tvm", default=DEFAULT_TVM, help="TVM's table JSON (tvm_table.py --out)")
    s = sub.add_parser("strategies", help="evolutionary vs Optuna vs random")
    s.add_argument("--workloads", default=",".join(STRATEGY_WORKLOADS))
    s.add_argument("--trials", type=int, default=64)
    s.add_argument("--seeds", default="0,1,2")
    s.add_argument("--strategies", default="evolutionary,optuna,random")
    x = sub.add_parser("transfer", help="pre-trained cost models on new models' tasks")
    add_transfer_args(x)
    args = ap.parse_args(argv)
    from benchmarks.common import environment

    doc = {"table": table_main, "strategies": strategies_main,
           "transfer": transfer_main}[args.what](args)
    doc["environment"] = environment()
    print(json.dumps(doc, indent=1))
    return 0


def add_transfer_args(ap) -> None:
    ap.add_argument("--pretrain-db", required=True,
                    help="database of the source model's records (tuned with tune-model)")
    ap.add_argument("--models", default="resnet50,mobilenet_v2",
                    help="zoo models whose tasks are tuned cold and warm")
    ap.add_argument("--tasks-per-model", type=int, default=3,
                    help="the heaviest tasks (FLOPs x occurrences) absent from the source")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--warm", default="retrain,blend",
                    help="how the pre-trained model is used, comma-separated: retrain (the "
                         "loaded model retrained on its source rows plus the task's), blend "
                         "(cost_models.TransferCostModel: a fading prior beside a model of "
                         "the task alone)")


def _curve(history) -> list[float]:
    """The run's own best-so-far (seconds) after each trial."""
    best, out = math.inf, []
    for t in history:
        best = min(best, t.seconds)
        out.append(best)
    return out


def _reaching(curve: list[float], target: float) -> int | None:
    """First trial (1-based) whose best-so-far is within 90% of ``target``'s speed."""
    return next((i + 1 for i, v in enumerate(curve) if v <= target / 0.9), None)


# --warm names -> the run's key in the output ("warm" kept for the retrained model, as in
# the files recorded before the blend existed).
WARM_MODES = {"retrain": "warm", "blend": "warm_blend"}


def _transfer_model(mode: str, model_path: str, seed: int):
    """A fresh cost model for one run: each run starts from the file, never from another
    run's state."""
    import cost_models

    if mode == "cold":
        return "xgb"
    if mode == "warm":
        return cost_models.load(model_path)
    return cost_models.TransferCostModel(prior=cost_models.load(model_path), seed=seed)


def transfer_main(args) -> dict:
    """Pre-train a cost model on the source database (a model's tuning records, e.g. ResNet-18),
    then tune the heaviest tasks of other models twice with the same seed and budget: from a
    cold model and from the pre-trained one.  Per task: each run's best after 64 and --trials
    trials, the trials each needs to reach 90% of the cold run's final best (its own quality
    bar) and 90% of the task's best (the best any run of it found: the issue's "256-trial
    best"), and the model's ranking accuracy on each batch before training on it (pooled over
    the run: for the warm run, the transferred model's accuracy on a workload it never saw).
    The source's held-out ranking (cost_models.evaluate, workloads held out by GroupKFold) is
    reported beside it.  Tasks whose workload is in the source database are skipped: that
    would be recall, not transfer."""
    import tempfile

    from records import Database

    warm = [w.strip() for w in args.warm.split(",") if w.strip()]
    unknown = [w for w in warm if w not in WARM_MODES]
    if unknown or not warm:
        raise SystemExit(f"--warm: unknown mode(s) {unknown or warm}; choose from "
                         f"{', '.join(WARM_MODES)}")
    with Database(args.pretrain_db, readonly=True) as db:
        source_keys = {w.key for w in db.workloads()}
        source_records = db.count()
    with tempfile.TemporaryDirectory(prefix="transfer-") as folder:
        return _transfer_in(args, warm, folder, source_keys, source_records)


def _transfer_in(args, warm: list, folder: str, source_keys: set, source_records: int) -> dict:
    """transfer_main's work, the pre-trained model kept in ``folder`` (removed after)."""
    import autotune
    import cost_models
    from autotune.frontends import get_model
    from autotune.graph.tasks import extract_tasks
    from search import SearchConfig

    model_path = os.path.join(folder, "pretrained.json")
    t0 = time.perf_counter()
    cost_models.pretrain(args.pretrain_db, out=model_path, target="llvm", seed=args.seed)
    pretrain_s = time.perf_counter() - t0
    heldout = cost_models.evaluate(args.pretrain_db, folds=args.folds, seed=args.seed,
                                   target="llvm")
    rows = []
    for model_name in args.models.split(","):
        tasks = [t for t in extract_tasks(get_model(model_name)) if t.key not in source_keys]
        tasks.sort(key=lambda t: -t.flops * t.weight)
        for task in tasks[:args.tasks_per_model]:
            runs = {}
            for mode in ["cold"] + [WARM_MODES[w] for w in warm]:
                t1 = time.perf_counter()
                r = autotune.tune(task.func, "llvm", trials=args.trials,
                                  search=SearchConfig(
                                      seed=args.seed, remeasure_top=0,
                                      cost_model=_transfer_model(mode, model_path, args.seed)),
                                  log=False)
                runs[mode] = (r, _curve(r.history), time.perf_counter() - t1)
            final = runs["cold"][1][-1]
            task_best = min(curve[-1] for _, curve, _ in runs.values())
            row = {"model": model_name, "task": task.name, "workload": task.key[:12],
                   "gflop": round(task.flops / 1e9, 3), "weight": task.weight,
                   "task_best_ms": round(task_best * 1e3, 4)}
            for mode, (r, curve, wall) in runs.items():
                row[mode] = {
                    "best_ms_after": {str(n): round(curve[n - 1] * 1e3, 4)
                                      for n in sorted({64, args.trials}) if len(curve) >= n},
                    "trials_to_90pct_of_cold_best": _reaching(curve, final),
                    "trials_to_90pct_of_task_best": _reaching(curve, task_best),
                    "model_accuracy": round(r.model_accuracy, 3)
                    if math.isfinite(r.model_accuracy) else None,
                    "wall_s": round(wall, 1)}
            cold_n = row["cold"]["trials_to_90pct_of_cold_best"]
            c64 = row["cold"]["best_ms_after"].get("64")
            for mode in (WARM_MODES[w] for w in warm):
                warm_n = row[mode]["trials_to_90pct_of_cold_best"]
                row[f"{mode}_over_cold_trials"] = round(warm_n / cold_n, 3) \
                    if cold_n and warm_n else None
                w64 = row[mode]["best_ms_after"].get("64")
                row[f"{mode}_64_speedup"] = round(c64 / w64, 3) if c64 and w64 else None
                # The bar every run of the task is judged by: 90% of the best any of them
                # found.  The cold run's own best flatters a cold run that ends poorly (it
                # reaches 90% of a weak best early).  A run that never reaches it counts as
                # the budget plus one for cold (a lower bound) and as infinite for warm.
                cold_t = row["cold"]["trials_to_90pct_of_task_best"] or args.trials + 1
                warm_t = row[mode]["trials_to_90pct_of_task_best"]
                row[f"{mode}_over_cold_trials_task_best"] = \
                    round(warm_t / cold_t, 3) if warm_t else None
            _log(json.dumps(row))
            rows.append(row)
    summary = {}
    for mode in (WARM_MODES[w] for w in warm):
        # A warm run that never reaches the bar took more than its whole budget: it counts as
        # infinitely slow in the median, not as missing (which would flatter it).
        ratios = [r[f"{mode}_over_cold_trials"] or math.inf for r in rows
                  if r["cold"]["trials_to_90pct_of_cold_best"]]
        summary[f"{mode}_never_reached_90pct"] = sum(1 for r in ratios if r == math.inf)
        speedups = [r[f"{mode}_64_speedup"] for r in rows if r[f"{mode}_64_speedup"]]
        median = statistics.median(ratios) if ratios else None
        summary[f"median_{mode}_over_cold_trials_to_90pct"] = \
            median if median is not None and math.isfinite(median) else None
        summary[f"geomean_{mode}_speedup_at_64"] = round(_geomean(speedups), 3) \
            if speedups else None
        by_task_best = [r[f"{mode}_over_cold_trials_task_best"] or math.inf for r in rows]
        median = statistics.median(by_task_best) if by_task_best else None
        summary[f"median_{mode}_over_cold_trials_to_90pct_of_task_best"] = \
            median if median is not None and math.isfinite(median) else None
    modes = ["cold"] + [WARM_MODES[w] for w in warm]
    return {"benchmark": "search_efficiency.transfer", "trials": args.trials,
            "seed": args.seed, "source": {"records": source_records,
                                          "workloads": len(source_keys),
                                          "pretrain_s": round(pretrain_s, 1),
                                          "heldout_ranking": heldout.get("pooled")},
            "tasks": rows, **summary,
            "mean_model_accuracy": {
                m: round(statistics.mean(r[m]["model_accuracy"] for r in rows
                                         if r[m]["model_accuracy"] is not None), 3)
                if any(r[m]["model_accuracy"] is not None for r in rows) else None
                for m in modes}}


if __name__ == "__main__":
    sys.exit(main())
