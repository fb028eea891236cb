"""End-to-end model latency: default schedules, after tuning budgets, and onnxruntime.

    python -m benchmarks.e2e                 # resnet18, mobilenet_v2 and bert_base_layer
    python -m benchmarks.e2e --budgets 1000,4000 --db e2e.db  # resumable: rerun to continue
    python -m benchmarks.e2e --models bert_base_layer --budgets 200
    python -m benchmarks.e2e --small --budgets 8               # shrunk models: a quick check

For each model (resnet18 and mobilenet_v2: batch 1, 3x224x224; bert_base_layer: batch 1, seq
128, hidden 768)
it prints, as one JSON document: the number of tasks; the end-to-end latency built with the
default schedules; for every budget (the model's total trials in the database, so budgets are
reached one after the other and a stopped run continues where it was) the tuning time spent,
the estimated latency (the tasks' best times) and the measured latency of the model built
from the records (``tuned_vs_tasks``: their ratio), the same ratio against the tasks' best
records re-timed alone in alternating rounds with the model (``tuned_vs_tasks_retimed``:
this host's speed drifts over a tuning run, see retime_tasks), their coverage, the largest
difference from onnxruntime's outputs, the same build exported (``export_library``) and run
by the artifact's own numpy-and-ctypes loader (``exported_ms``, timed in the same rounds),
and per task its kernels' time in the model beside its record's time alone, stored and
re-timed (``kernels``; the record the build took: the one tune_model chose inside the model
for a heavy task, listed in ``reranked`` with its rivals' in-model times, else the best by
score).  Each latency of ours (default schedules, each budget) is timed in
alternating rounds with onnxruntime on the same model (the same weights, exported from our
graph to ONNX here, its output checked against ours), so that the ratio
(``default_vs_onnxruntime``, ``tuned_vs_onnxruntime``) compares the two under the same
machine load: it is the median of the rounds' ratios (see side_by_side).  Both use
``--threads`` threads (2 by default): our target is ``llvm -num-cores N``, onnxruntime's
session has ``intra_op_num_threads=N``.  Latencies are medians of ``--repeat`` rounds of at
least 0.05 s each.

The full run (4000 trials of resnet18) takes hours; progress lines go to standard error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

MODELS = ("resnet18", "mobilenet_v2", "bert_base_layer")
SMALL_OPTIONS = {"resnet18": {"image_size": 32, "width": 8, "num_classes": 10},
                 "mobilenet_v2": {"image_size": 32, "width": 0.25, "num_classes": 10},
                 "bert_base_layer": {"seq": 16, "hidden": 64, "heads": 2, "ffn": 128}}


# ---------------------------------------------------------------------------------------------
# Our graph -> ONNX (the ops of the zoo models), so onnxruntime runs the very same model
# ---------------------------------------------------------------------------------------------

def to_onnx(model, opset: int = 17):
    """An onnx.ModelProto computing what ``model`` (an autotune graph Model) computes."""
    import onnx
    from onnx import helper, numpy_helper

    nodes, inits = [], []
    counter = [0]

    def fresh(base: str) -> str:
        counter[0] += 1
        return f"{base}__{counter[0]}"

    def const(array, base: str) -> str:
        name = fresh(base)
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def add(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, list(inputs), [output], name=fresh(op), **attrs))

    for name, array in model.constants.items():
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
    for node in model.nodes:
        a, out, x = node.attrs, node.output, node.inputs
        if node.op == "conv2d":
            add("Conv", x, out, strides=list(a["strides"]), pads=list(a["pads"]),
                dilations=list(a["dilations"]), group=a.get("groups", 1))
        elif node.op == "batch_norm":
            add("BatchNormalization", x, out, epsilon=float(a.get("epsilon", 1e-5)))
        elif node.op in ("relu", "add", "divide", "subtract", "multiply", "sigmoid", "tanh"):
            op = {"relu": "Relu", "add": "Add", "divide": "Div", "subtract": "Sub",
                  "multiply": "Mul", "sigmoid": "Sigmoid", "tanh": "Tanh"}[node.op]
            add(op, x, out)
        elif node.op == "clip":  # relu6 of MobileNetV2; opset 11+ takes the bounds as inputs
            dtype = np.dtype(model.types[x[0]].dtype)
            bounds = ["" if a.get(b) is None else const(np.array(a[b], dtype), b)
                      for b in ("min", "max")]
            while bounds and bounds[-1] == "":
                bounds.pop()
            add("Clip", [x[0], *bounds], out)
        elif node.op == "max_pool2d":
            add("MaxPool", x, out, kernel_shape=list(a["kernel"]), strides=list(a["strides"]),
                pads=list(a["pads"]))
        elif node.op == "global_avg_pool2d":
            add("GlobalAveragePool", x, out)
        elif node.op == "reshape":
            add("Reshape", [x[0], const(np.array(a["shape"], np.int64), "shape")], out)
        elif node.op == "transpose":
            add("Transpose", x, out, perm=list(a["perm"]))
        elif node.op == "matmul":
            rhs = x[1]
            if a.get("transpose_b", False):
                rank = len(model.types[rhs].shape)
                perm = list(range(rank - 2)) + [rank - 1, rank - 2]
                rhs_t = fresh("transposed")
                add("Transpose", [rhs], rhs_t, perm=perm)
                rhs = rhs_t
            add("MatMul", [x[0], rhs], out)
        elif node.op == "slice":
            axes = list(range(len(a["begin"])))
            add("Slice", [x[0], const(np.array(a["begin"], np.int64), "starts"),
                          const(np.array(a["end"], np.int64), "ends"),
                          const(np.array(axes, np.int64), "axes"),
                          const(np.array(a["step"], np.int64), "steps")], out)
        elif node.op == "softmax":
            add("Softmax", x, out, axis=int(a.get("axis", -1)))
        elif node.op == "layer_norm":
            add("LayerNormalization", x, out, axis=int(a.get("axis", -1)),
                epsilon=float(a.get("epsilon", 1e-5)))
        elif node.op == "gelu":
            # The erf form (what the graph's gelu computes): 0.5 * x * (1 + erf(x / sqrt 2)).
            scaled, erf, one_plus, half = (fresh("gelu") for _ in range(4))
            add("Div", [x[0], const(np.float32(np.sqrt(2.0)), "sqrt2")], scaled)
            add("Erf", [scaled], erf)
            add("Add", [erf, const(np.float32(1.0), "one")], one_plus)
            add("Mul", [x[0], one_plus], half)
            add("Mul", [half, const(np.float32(0.5), "half")], out)
        else:
            raise ValueError(f"to_onnx: no ONNX form for graph op {node.op!r} "
                             f"(node {node.name})")

    def value(name):
        t = model.types[name]
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape))

    graph = helper.make_graph(nodes, model.name, [value(n) for n in model.inputs],
                              [value(n) for n in model.outputs], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    return proto


def onnxruntime_session(proto, threads: int, profile_prefix: str | None = None):
    """``profile_prefix``: turn onnxruntime's profiler on, writing under that prefix."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def model_feed(model) -> dict:
    """The benchmark's inputs of ``model``: uniform in [-1, 1), seed 0."""
    rng = np.random.default_rng(0)
    return {n: rng.uniform(-1, 1, t.shape).astype(t.dtype)
            for n, t in model.input_types().items()}


def round_ratio(ours, theirs) -> float:
    """The median of the rounds' ratios of two sample lists timed in the same rounds."""
    import statistics

    return round(statistics.median(a / b for a, b in zip(ours, theirs)), 3)


def side_by_side(ours, theirs, rounds: int, min_seconds: float = 0.05, exported=None
                 ) -> dict:
    """Our executor and onnxruntime (and the exported artifact, when given) timed in
    alternating rounds (a change in the machine's load hits all alike): median milliseconds
    of each and the ratio ours / theirs, the median of the rounds' ratios.

    NOTE: this shared machine swings between a fast and a slow state for tens of seconds
    at a time (onnxruntime's MobileNetV2 2.0 ms, then 3.0 ms), and the slow state slows our
    kernels more than onnxruntime's: medians taken over the whole run then compare rounds
    of different states.  The ratio within each round compares like with like; short
    rounds (``min_seconds``) keep both sides of a round in one state."""
    from benchmarks.common import interleaved_medians

    fns = {"ours": ours, "onnxruntime": theirs}
    if exported is not None:
        fns["exported"] = exported
    times = interleaved_medians(fns, rounds=rounds, min_seconds=min_seconds)
    ours_ms = times["ours"]["median_s"] * 1e3
    theirs_ms = times["onnxruntime"]["median_s"] * 1e3

    def ratio(name: str) -> float:
        return round_ratio(times[name]["samples_s"], times["onnxruntime"]["samples_s"])

    out = {"ours_ms": ours_ms, "onnxruntime_ms": theirs_ms, "ratio": ratio("ours"),
           "ratio_of_medians": round(ours_ms / theirs_ms, 3),
           # Every round's latency, to tell a steady run from one that changed state.
           "rounds_ms": {name: [round(s * 1e3, 4) for s in t["samples_s"]]
                         for name, t in times.items()}}
    if exported is not None:
        out["exported_ms"] = times["exported"]["median_s"] * 1e3
        out["exported_ratio"] = ratio("exported")
    return out


def exported_copy(lib, folder: str):
    """``lib`` exported into ``folder`` and loaded back by the artifact's own loader (numpy
    and ctypes alone): what a deployment runs."""
    import importlib.util

    lib.export_library(folder)
    spec = importlib.util.spec_from_file_location(f"loader_{os.getpid()}",
                                                  os.path.join(folder, "loader.py"))
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    return loader.load(folder)


def kernel_table(lib, database: str, target, repeat: int = 15, alone: dict | None = None
                 ) -> list[dict]:
    """Per task of the built model, heaviest first: its kernels' median time in the model
    (``lib.profile``, summed over its calls) beside the time its best record was measured
    at alone (the tuner's measurement, times its calls), and their ratio; with ``alone``
    (ms per call by workload key, retime_tasks'), the record re-timed alone beside the model
    too (``alone_ms``, ``model_vs_alone``)."""
    from autotune.tuning.history import choose_record
    from records import Database

    rows: dict[str, dict] = {}
    for step, (name, ms) in zip(lib.steps, lib.profile(repeat=repeat)):
        row = rows.setdefault(step.key, {"task": name, "key": step.key[:12], "calls": 0,
                                         "model_ms": 0.0})
        row["calls"] += 1
        row["model_ms"] += ms
    with Database(database) as db:
        for key, row in rows.items():
            # The record the build took: the model's choice (autotune.tuning.rerank), else
            # the best by score.
            best = (choose_record(db, db.workload(key).func, target, lib.model.name).record
                    if db.has_workload(key) else None)
            seconds = None if best is None else (best.score if best.score is not None
                                                 else best.median)
            row["task_ms"] = None if seconds is None else seconds * 1e3 * row["calls"]
            row["model_vs_task"] = (round(row["model_ms"] / row["task_ms"], 3)
                                    if row["task_ms"] else None)
            if alone and key in alone:
                row["alone_ms"] = alone[key] * row["calls"]
                row["model_vs_alone"] = round(row["model_ms"] / row["alone_ms"], 3)
    return sorted(rows.values(), key=lambda r: -r["model_ms"])


def task_input(task, func, target, weights: tuple[bool, int]):
    """The MeasureInput of ``func``, a program of a model's ``task``, timed as tune_model
    times its candidates: its weights packed outside the call and in the cache state
    ``weights`` (``tune_model.weight_state``), fresh activations each call on a CPU."""
    from autotune.measure import MeasureInput

    cold_weights, cold_bytes = weights
    return MeasureInput(func, target, task.key, reference=task.func,
                        weight_params=task.weight_params, cold_weights=cold_weights,
                        cold_bytes=cold_bytes, fresh_inputs=target.kind == "llvm")


# Rounds of retime_tasks.  Each round times every task once, then the model once: one sample
# of their ratio.  On this project's 2-vCPU hosts single rounds of one ResNet-18 build read
# 0.78-1.28 (30 rounds, median 1.012); the 5 rounds used before had read 1.113 for it, and 20
# rounds in a later session 1.093, so the figure moves with the host's state, not only the
# round count.
RETIME_ROUNDS = 20


def retime_tasks(model, target, database: str, run_model, rounds: int = RETIME_ROUNDS,
                 config=None) -> dict:
    """The tasks' best records timed alone again, in the minutes the built model is timed:
    each round times every task once through the tuner's builder and runner (the tuning's
    protocol and weight state, ``tune_model.weight_state``), then the model (``run_model``,
    one inference).  Returns ``tasks_ms`` (the median round's sum of the tasks' times
    weighted by their calls), ``model_ms``, ``model_vs_tasks`` (the median of the rounds'
    ratios), ``alone_ms`` per workload key (one call, median over the rounds), and
    ``by_state``: the same three figures over the rounds of each state of the host
    (benchmarks.common.round_states, from a cross-core probe before the first round and
    after each), with ``round_trip_ns``, the probes.

    NOTE: the stored best times were measured over the tuning run, while this host's speed
    drifted by tens of percent over an hour (onnxruntime's MobileNetV2 4.9 ms in one run,
    5.8 ms in the next; the best records of ResNet-18's twelve heaviest tasks, re-timed
    alone an hour after tuning, summed to 1.56x their stored times and 1.07x the same
    kernels' times in the model profiled beside them); the model set against its tasks timed
    in the same minutes tells what the executor adds, the stored sum does not."""
    import statistics

    from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig, built
    from autotune.measure.host import CrossCoreProbe
    from autotune.tuning.tune_model import model_tasks, weight_state
    from benchmarks.common import round_states, rounds_by_state, time_once
    from autotune.tuning.history import choose_record
    from records import Database

    weights = weight_state(model, target)
    tasks, inputs = [], []
    with Database(database) as db:
        for task in model_tasks(model):
            best = choose_record(db, task.func, target, model.name)  # as the build
            if best.record is None:
                continue
            tasks.append(task)
            inputs.append(task_input(task, best.func, target, weights))
    alone: list[list[float]] = [[] for _ in tasks]
    sums, model_s = [], []
    probe = CrossCoreProbe()
    probes: list[float | None] = []
    with LocalBuilder() as builder, LocalRunner(config or MeasureConfig()) as runner:
        with built(builder, inputs) as builds:
            run_model()
            probes.append(probe())
            for _ in range(rounds):
                total = 0.0
                for i, (task, result) in enumerate(zip(tasks, runner.run(inputs, builds))):
                    if result.is_error:
                        raise RuntimeError(f"re-timing {task.name} failed: "
                                           f"{result.error_kind}: {result.error_msg}")
                    seconds = statistics.median(result.run_times)
                    alone[i].append(seconds)
                    total += seconds * task.weight
                sums.append(total)
                model_s.append(time_once(run_model, 0.2))
                probes.append(probe())
    by_state = {}
    for state, picked in rounds_by_state(round_states(probes)).items():
        mine, theirs = [model_s[k] for k in picked], [sums[k] for k in picked]
        by_state[state] = {"rounds": len(picked),
                           "tasks_ms": statistics.median(theirs) * 1e3,
                           "model_ms": statistics.median(mine) * 1e3,
                           "model_vs_tasks": round_ratio(mine, theirs)}
    return {"tasks_ms": statistics.median(sums) * 1e3,
            "model_ms": statistics.median(model_s) * 1e3,
            "model_vs_tasks": round_ratio(model_s, sums),
            "alone_ms": {t.key: statistics.median(a) * 1e3 for t, a in zip(tasks, alone)},
            "by_state": by_state,
            "round_trip_ns": [None if p is None else round(p, 1) for p in probes]}


# ---------------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------------

def bench_model(name: str, args) -> dict:
    import autotune
    from autotune.measure import MeasureConfig
    from autotune.graph.build import build_model
    from autotune.tuning.progress import Progress
    from autotune.tuning.tune_model import RunControl, model_tasks
    from search import SearchConfig

    options = SMALL_OPTIONS[name] if args.small else {}
    model = autotune.load_model(name, **options)
    target = autotune.Target(f"llvm -num-cores {args.threads}")
    feed = model_feed(model)
    out: dict = {"model": name, "options": options, "target": str(target),
                 "tasks": len(model_tasks(model)), "threads": args.threads}

    # 1. Default schedules and onnxruntime, side by side.
    default = build_model(model, target)
    ours = default.run(feed)
    sess = onnxruntime_session(to_onnx(model), args.threads)
    theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    out["onnxruntime_max_abs_diff"] = max(float(np.max(np.abs(ours[k] - theirs[k])))
                                          for k in ours)
    both = side_by_side(lambda: default.run(feed), lambda: sess.run(None, feed), args.repeat)
    out["default_ms"], out["onnxruntime_ms"] = both["ours_ms"], both["onnxruntime_ms"]
    out["default_vs_onnxruntime"] = both["ratio"]
    out["budgets"] = []

    # 2. Each budget in turn (the model's total trials: resumable from the database).
    if args.small:
        config = MeasureConfig(repeat=2, min_repeat_ms=2.0)
    elif args.min_repeat_ms is not None:
        config = MeasureConfig(min_repeat_ms=args.min_repeat_ms)
    else:
        config = MeasureConfig()
    for budget in sorted(args.budgets):
        start = time.perf_counter()
        with Progress(sys.stderr, model=name, live=False) as progress:
            result = autotune.tune_model(model, target, trials=budget, database=args.db,
                                         search=SearchConfig(batch_size=args.batch_size,
                                                             seed=args.seed,
                                                             remeasure_top=1 if args.small else 3),
                                         measure=config,
                                         control=RunControl(listener=progress.listener),
                                         log=progress.line)
        # Tuning alone: the build and the timing below are not part of it.
        tuning_seconds = round(time.perf_counter() - start, 1)
        tuned = build_model(model, target, database=args.db, warn=False)
        got = tuned.run(feed)
        diff = max(float(np.max(np.abs(got[k] - ours[k]))) for k in ours)
        with tempfile.TemporaryDirectory() as folder:
            deployed = exported_copy(tuned, os.path.join(folder, name))
            exported_out = deployed.run(feed)
            both = side_by_side(lambda lib=tuned: lib.run(feed), lambda: sess.run(None, feed),
                                args.repeat, exported=lambda m=deployed: m.run(feed))
            del deployed
        # The tasks' best records and the model timed again in the same minutes.
        retime_rounds = args.retime_rounds or (2 if args.small else RETIME_ROUNDS)
        now = retime_tasks(model, target, args.db, lambda lib=tuned: lib.run(feed),
                           rounds=retime_rounds, config=config)
        estimated_ms = result.estimated_latency * 1e3
        out["budgets"].append({
            "trials": result.trials, "budget": budget, "trials_this_run": result.trials_run,
            "tuning_seconds": tuning_seconds,
            # Candidates whose timing waited for the host's cores to be quiet, and the wait.
            "host_waits": result.host_waits[0],
            "host_wait_seconds": round(result.host_waits[1], 1),
            "stopped": result.stopped, "failed_tasks": [t.name for t in result.failed],
            # The sum of the tasks' best times (weighted by their calls) against the model.
            "estimated_ms": estimated_ms,
            "tuned_ms": both["ours_ms"], "onnxruntime_ms": both["onnxruntime_ms"],
            "tuned_vs_onnxruntime": both["ratio"],
            "tuned_vs_tasks": round(both["ours_ms"] / estimated_ms, 3) if estimated_ms else None,
            # The same, on the tasks re-timed alone beside the model (see retime_tasks).
            "tasks_retimed_ms": now["tasks_ms"], "tuned_beside_tasks_ms": now["model_ms"],
            "tuned_vs_tasks_retimed": now["model_vs_tasks"], "retime_rounds": retime_rounds,
            # Split by the host's state in each round (benchmarks.common.round_states).
            "tasks_retimed_by_state": now["by_state"],
            "retime_round_trip_ns": now["round_trip_ns"],
            "exported_ms": both["exported_ms"],
            "tuned_vs_onnxruntime_ratio_of_medians": both["ratio_of_medians"],
            "exported_vs_onnxruntime": both["exported_ratio"],
            "coverage": tuned.report.coverage, "max_abs_diff_vs_default": diff,
            "max_abs_diff_vs_onnxruntime": max(float(np.max(np.abs(got[k] - theirs[k])))
                                               for k in got),
            "exported_max_abs_diff": max(float(np.max(np.abs(exported_out[k] - got[k])))
                                         for k in got),
            "rounds_ms": both["rounds_ms"],
            # Heavy tasks whose record was chosen by its time inside the model.
            "reranked": [{"task": r["task"], "key": r["key"][:12], "share": round(r["share"], 3),
                          "chosen": r["chosen"], "best_by_score": r["best_by_score"],
                          "in_model_ms": {str(k): round(v, 4)
                                          for k, v in r["in_model_ms"].items()}}
                         for r in result.reranked],
            "kernels": kernel_table(tuned, args.db, target, alone=now["alone_ms"])})
    return out


def _budgets(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets are integers joined by commas, got "
                                         f"{text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("budgets must be >= 0")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated zoo models (default: {','.join(MODELS)})")
    parser.add_argument("--budgets", type=_budgets, default=[1000, 4000],
                        help="total trials per model, comma-separated (default: 1000,4000; "
                             "empty: no tuning)")
    parser.add_argument("--db", default="e2e.db", help="record database (default: e2e.db)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=30, help="timed rounds per latency")
    parser.add_argument("--min-repeat-ms", type=float, default=None,
                        help="shortest timed repeat of a candidate while tuning (default: "
                             "MeasureConfig's); shorter fits more trials in an hour")
    parser.add_argument("--retime-rounds", type=int, default=None,
                        help=f"rounds of the tasks re-timed beside the model (default: "
                             f"{RETIME_ROUNDS}; 2 with --small)")
    parser.add_argument("--small", action="store_true",
                        help="shrunk models and short timing: checks the command quickly")
    args = parser.parse_args(argv)
    if args.retime_rounds is not None and args.retime_rounds < 1:
        parser.error(f"--retime-rounds must be at least 1, got {args.retime_rounds}")
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    doc = {"benchmark": "e2e", "models": [bench_model(name, args) for name in names]}
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
