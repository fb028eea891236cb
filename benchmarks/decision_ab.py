"""What one sampled annotation is worth in a tuned model: each task's best record timed beside
the same trace with that decision changed.

    python -m benchmarks.decision_ab --model bert_base_layer --db bert.db
    python -m benchmarks.decision_ab --model resnet18 --db r18.db --key pragma_prefetch_bytes \\
        --value 0
    python -m benchmarks.decision_ab --model bert_base_layer --db e2e.db --small  # quick check

A search keeps a decision (the register tile's copies per reduction step, ``pragma_unroll_by``;
the panel prefetch distance, ``pragma_prefetch_bytes``) where it measured faster, but that does
not say how much the decision carries: the rest of the trace was chosen around it.  Here every
task whose best record (by score) feeds ``--key`` from a ``sample_categorical`` with another
candidate than ``--value`` is built twice -- as recorded, and with those decisions set to
``--value`` -- and both are timed in alternating rounds the way the tuner times them (weights
cold where the model's exceed the last-level cache, fresh inputs each repeat).  Prints one JSON
document: per task the candidate it chose, both medians and their ratio (recorded / changed),
and the sums weighted by each task's calls in the model.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from benchmarks.e2e import MODELS, SMALL_OPTIONS, task_input

DEFAULT_KEY = "pragma_unroll_by"


def decision_indices(trace, key: str) -> list[int]:
    """The sample_categorical instructions of ``trace`` whose value an annotation ``key``
    takes."""
    feeds = {inst.inputs[1] for inst in trace if inst.kind == "annotate"
             and len(inst.inputs) > 1 and dict(inst.attrs).get("key") == key}
    return [k for k, inst in enumerate(trace) if inst.kind == "sample_categorical"
            and inst.outputs and inst.outputs[0] in feeds]


def changed(trace, key: str, value: int):
    """``(chosen, changed trace)``: the candidates ``trace`` took for ``key`` and the trace
    with each of those decisions set to ``value``; None where no decision feeds ``key``,
    where ``value`` is not a candidate of each, or where the trace already takes it."""
    indices = decision_indices(trace, key)
    if not indices:
        return None
    chosen, out = [], trace
    for k in indices:
        candidates = list(dict(trace[k].attrs)["candidates"])
        if value not in candidates or trace[k].decision is None:
            return None
        chosen.append(candidates[trace[k].decision])
        out = out.with_decision(k, candidates.index(value))
    if all(c == value for c in chosen):
        return None
    return chosen, out


def compare(name: str, database: str, key: str = DEFAULT_KEY, value: int = 1,
            threads: int = 2, rounds: int = 15, small: bool = False) -> dict:
    import autotune
    from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig, remove_artifacts
    from autotune.tuning.tune_model import model_tasks, weight_state
    from records import Database
    from schedules.postproc import strip_postproc
    from schedules.space import DesignSpace

    options = SMALL_OPTIONS[name] if small else {}
    model = autotune.load_model(name, **options)
    target = autotune.Target(f"llvm -num-cores {threads}")
    weights = weight_state(model, target)
    inputs: dict[str, list] = {"recorded": [], "changed": []}
    rows, skipped = [], []
    with Database(database, readonly=True) as db:
        for task in model_tasks(model):
            best = db.best_k(task.key, str(target), 1)
            recorded = strip_postproc(best[0].trace()) if best else None
            pair = changed(recorded, key, value) if best else None
            if pair is None:
                skipped.append(task.name)
                continue
            chosen, other = pair
            space = DesignSpace(task.func, target)
            programs = (space.replay(recorded), space.replay(other))
            if any(p is None for p in programs):
                skipped.append(task.name)  # the trace no longer replays here
                continue
            for label, program in zip(inputs, programs):
                inputs[label].append(task_input(task, program.func, target, weights))
            rows.append({"task": task.name, "key": task.key[:12], "calls": task.weight,
                         "chosen": chosen if len(chosen) > 1 else chosen[0]})
    samples: dict[str, list] = {label: [[] for _ in rows] for label in inputs}
    if rows:
        config = MeasureConfig(min_repeat_ms=5) if small else MeasureConfig()
        with LocalBuilder() as builder, LocalRunner(config) as runner:
            built = {label: builder.build(batch) for label, batch in inputs.items()}
            try:
                for r in range(rounds):
                    # Alternate which goes first, so that a drift in the host hits both.
                    for label in (("changed", "recorded") if r % 2 == 0
                                  else ("recorded", "changed")):
                        for k, out in enumerate(runner.run(inputs[label], built[label])):
                            if out.is_error:
                                raise RuntimeError(f"{rows[k]['task']} ({label}): "
                                                   f"{out.error_msg}")
                            samples[label][k].append(statistics.median(out.run_times) * 1e3)
            finally:
                for batch in built.values():
                    remove_artifacts(batch)
    sums = {"recorded": 0.0, "changed": 0.0}
    for k, row in enumerate(rows):
        for label in sums:
            row[f"{label}_ms"] = statistics.median(samples[label][k])
            sums[label] += row[f"{label}_ms"] * row["calls"]
        row["ratio"] = round(row["recorded_ms"] / row["changed_ms"], 3)
    return {"benchmark": "decision_ab", "model": name, "options": options,
            "target": str(target), "threads": threads, "rounds": rounds, "key": key,
            "value": value, "tasks": rows, "skipped": skipped,
            "weighted_ms": sums,
            "weighted_ratio": round(sums["recorded"] / sums["changed"], 3) if rows else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decision_ab",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--db", required=True, help="the tuning database")
    parser.add_argument("--key", default=DEFAULT_KEY,
                        help=f"the annotation whose decision changes (default {DEFAULT_KEY})")
    parser.add_argument("--value", type=int, default=1,
                        help="the candidate it changes to (default 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds")
    parser.add_argument("--small", action="store_true",
                        help="the shrunk model and short repeats: checks the command quickly")
    args = parser.parse_args(argv)
    if not os.path.exists(args.db):
        parser.error(f"no such database: {args.db}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    print(json.dumps(compare(args.model, args.db, args.key, args.value, args.threads,
                             args.rounds, args.small), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
