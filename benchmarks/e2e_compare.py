"""One model built from several tuning databases, timed side by side with onnxruntime.

    python -m benchmarks.e2e_compare --model mobilenet_v2 --db a.db --db b.db
    python -m benchmarks.e2e_compare --model resnet18 --db e2e.db --small   # a quick check

Two tuning runs (two versions of the tuner, or two seeds) are compared by what their records
build, not by figures taken at different times: on a shared machine onnxruntime's own latency
moved from 4.9 to 5.8 ms between runs an hour apart.  Every build and onnxruntime are timed in
alternating rounds (benchmarks.common.interleaved_medians), each against onnxruntime by the
median of the rounds' ratios, as benchmarks.e2e does.  Prints one JSON document: per database
its latency, ratio, coverage (the FLOPs share with a record) and largest difference from
onnxruntime's outputs.

``--by-state`` also splits the rounds by the host's state.  The two vCPUs of the shared
machines here are placed near each other on the host for a while (a cache line's round trip
between them about 110 ns), then apart (about 490 ns), flipping within seconds; kernels that
read what the other core wrote slow down in the second state (autotune.measure.host).  Each
round is bracketed by two probes of the round trip: a round is "quiet" when both are under
QUIET_FACTOR times the lowest probe of the run, "slow" when both are over, else "mixed"; per
state the rounds' medians and ratios are reported, to tell whether a build loses to
onnxruntime in one state or in both.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from benchmarks.common import round_states, rounds_by_state
from benchmarks.e2e import (MODELS, SMALL_OPTIONS, model_feed, onnxruntime_session,
                            round_ratio, to_onnx)


def _by_state(states: list[str], samples: dict[str, list[float]]) -> dict:
    """Per state: its rounds, onnxruntime's median and each build's median and ratio."""
    import statistics

    out = {}
    for state, picked in rounds_by_state(states).items():
        ort = [samples["onnxruntime"][k] for k in picked]
        row = {"rounds": len(picked), "onnxruntime_ms": statistics.median(ort) * 1e3}
        for key, values in samples.items():
            if key != "onnxruntime":
                mine = [values[k] for k in picked]
                row[key] = {"ms": statistics.median(mine) * 1e3,
                            "vs_onnxruntime": round_ratio(mine, ort)}
        out[state] = row
    return out


def compare(name: str, databases: list[str], threads: int = 2, rounds: int = 30,
            small: bool = False, by_state: bool = False) -> dict:
    import autotune
    from autotune.graph.build import build_model
    from benchmarks.common import interleaved_medians

    options = SMALL_OPTIONS[name] if small else {}
    model = autotune.load_model(name, **options)
    target = autotune.Target(f"llvm -num-cores {threads}")
    feed = model_feed(model)
    sess = onnxruntime_session(to_onnx(model), threads)
    theirs = sess.run(None, feed)
    builds, rows = {}, []
    for k, db in enumerate(databases):
        lib = build_model(model, target, database=db, warn=False)
        got = lib.run(feed)
        builds[f"db{k}"] = lib
        rows.append({"db": os.path.basename(db), "coverage": lib.report.coverage,
                     "max_abs_diff_vs_onnxruntime": max(
                         float(np.max(np.abs(got[o.name] - t)))
                         for o, t in zip(sess.get_outputs(), theirs))})
    fns = {key: (lambda lib=lib: lib.run(feed)) for key, lib in builds.items()}
    fns["onnxruntime"] = lambda: sess.run(None, feed)
    probes: list[float | None] = []
    between = None
    if by_state:
        from autotune.measure.host import CrossCoreProbe

        probe = CrossCoreProbe()

        def between():
            probes.append(probe(330))
    times = interleaved_medians(fns, rounds=rounds, min_seconds=0.02 if small else 0.05,
                                between=between)
    ort = times["onnxruntime"]["samples_s"]
    for key, row in zip(builds, rows):
        row["ms"] = times[key]["median_s"] * 1e3
        row["vs_onnxruntime"] = round_ratio(times[key]["samples_s"], ort)
    out = {"benchmark": "e2e_compare", "model": name, "options": options,
           "target": str(target), "threads": threads, "rounds": rounds,
           "onnxruntime_ms": times["onnxruntime"]["median_s"] * 1e3, "builds": rows}
    if by_state:
        # Build i's figures under "db{i}", in the order of ``builds``.
        out["round_trip_ns"] = [None if p is None else round(p, 1) for p in probes]
        out["by_state"] = _by_state(round_states(probes),
                                    {key: t["samples_s"] for key, t in times.items()})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.e2e_compare",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--db", action="append", required=True,
                        help="a tuning database (repeat for each build)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30, help="timed rounds")
    parser.add_argument("--small", action="store_true",
                        help="the shrunk model and short rounds: checks the command quickly")
    parser.add_argument("--by-state", action="store_true",
                        help="also split the rounds by the host's cross-core round trip "
                             "(quiet, slow, mixed; see the module text)")
    args = parser.parse_args(argv)
    missing = [db for db in args.db if not os.path.exists(db)]
    if missing:
        parser.error(f"no such database: {', '.join(missing)}")
    print(json.dumps(compare(args.model, args.db, args.threads, args.repeat, args.small,
                             args.by_state), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
