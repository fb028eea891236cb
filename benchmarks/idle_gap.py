"""The first inferences after an idle gap, ours beside onnxruntime: what a server that answers
one request at a time sees, where benchmarks.e2e times inferences back to back.

    python -m benchmarks.idle_gap --model mobilenet_v2 --db e2e.db
    python -m benchmarks.idle_gap --model bert_base_layer --small      # a quick check
    python -m benchmarks.idle_gap --model mobilenet_v2 --db e2e.db --runtime ab

``--runtime`` picks what our kernels' parallel loops launch on: ``pool`` (default, our thread
pool, tensor_ir/codegen/threadpool.py), ``gomp`` (libgomp), or ``ab``: the model built with
each, timed as two sides (``ours_pool``, ``ours_gomp``) in the same rounds.  With ``ab`` each
of the two runs in a process of its own, started here and driven round by round: in one
process the two runtimes' threads shared the cores (libgomp's hot latency read 3x its own).

Each round, per side (the sides take turns within a round, the first one rotating from
round to round): a pause (the other side's threads park), five back-to-back inferences
(hot), the gap, then three inferences timed one by one.  Per gap and side the medians over the
rounds of the three, so the first one after the gap stands beside the two after it; gap 0 is
the hot latency.

What we read in the figures with libgomp (``--runtime gomp``; a reading, not yet a profile):
the built model's kernels each launch a libgomp parallel region with a static partition of
the work, and the calling thread waits at the region's end for every thread of the team.
An idle worker polls for GOMP_SPINCOUNT rounds (tensor_ir.codegen.compile) and then sleeps;
when it is slow to wake, the first kernels wait for it.  A longer poll
(GOMP_SPINCOUNT=300000) made a 2 ms gap hot and left 20 and 150 ms as slow.  Prints one JSON
document.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from benchmarks.e2e import MODELS, SMALL_OPTIONS, model_feed, onnxruntime_session, to_onnx

GAPS = (0.0, 0.002, 0.02, 0.15)   # seconds of idle before the timed inferences
HOT_RUNS = 5
TIMED_RUNS = 3
PARK = 0.3   # seconds: longer than either side's threads poll after a run


RUNTIMES = {"pool": ("pool",), "gomp": ("gomp",), "ab": ("pool", "gomp")}


def one_round(fn, gap: float, sleep=time.sleep) -> list[float]:
    """Milliseconds of each of the TIMED_RUNS inferences of ``fn`` after a pause, HOT_RUNS
    inferences and ``gap`` seconds idle (see the module text)."""
    sleep(PARK)
    for _ in range(HOT_RUNS):
        fn()
    if gap:
        sleep(gap)
    times = []
    for _ in range(TIMED_RUNS):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def first_runs(fn, gap: float, rounds: int, sleep=time.sleep) -> list[float]:
    """Median milliseconds of each of the TIMED_RUNS inferences of ``fn`` after ``gap``
    seconds idle, over ``rounds`` rounds (see the module text)."""
    rows = [one_round(fn, gap, sleep) for _ in range(rounds)]
    return [statistics.median(column) for column in zip(*rows)]


def alternating_rounds(sides: dict, gap: float, rounds: int, sleep=time.sleep) -> dict:
    """{side: median milliseconds of each timed inference} over ``rounds`` rounds in which
    every side has its turn, the first side rotating from round to round.  A side is an
    inference to time here, or a _Remote one (its round runs in its own process)."""
    names = list(sides)
    rows: dict = {side: [] for side in names}
    for r in range(rounds):
        k = r % len(names)
        for side in names[k:] + names[:k]:
            fn = sides[side]
            rows[side].append(fn.round(gap) if isinstance(fn, _Remote)
                              else one_round(fn, gap, sleep))
    return {side: [statistics.median(column) for column in zip(*rows[side])]
            for side in names}


class _Remote:
    """One side in a child process: the model built there with one parallel runtime, its
    rounds run there on request (see the module text)."""

    def __init__(self, name: str, options: dict, target: str, database, runtime: str):
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # no LLVM or thread pool to fork
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, daemon=True,
                                        args=(child, name, options, target, database, runtime))
        self._process.start()
        self.info = self._conn.recv()   # after the build and a first run

    def round(self, gap: float) -> list[float]:
        self._conn.send(gap)
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(timeout=30)


def _serve(conn, name: str, options: dict, target: str, database, runtime: str) -> None:
    import autotune

    model = autotune.load_model(name, **options)
    lib = _build(model, autotune.Target(target), database, runtime)
    feed = model_feed(model)
    lib.run(feed)
    conn.send({"coverage": lib.report.coverage,
               "parallel_kernels": parallel_kernels(lib, runtime)})
    while True:
        gap = conn.recv()
        if gap is None:
            return
        conn.send(one_round(lambda: lib.run(feed), gap))


def _build(model, target, database, runtime: str):
    """The model built with its parallel loops on ``runtime``; the process's compiled
    kernels are forgotten first, so the other runtime's are not reused."""
    from autotune.graph.build import build_model, clear_caches
    from tensor_ir.codegen import parallel

    clear_caches()
    with parallel.using_runtime(runtime):
        return build_model(model, target, database=database, warn=False)


def parallel_kernels(lib, runtime: str) -> int:
    """How many of ``lib``'s kernels launch parallel loops on ``runtime`` (so the output
    shows that each side runs the kernels it names)."""
    symbol = "GOMP_parallel" if runtime == "gomp" else "tir_parallel_launch"
    sources = {id(step.kernel): step.kernel.get_source("ll-raw") for step in lib.steps}
    return sum(symbol in text for text in sources.values())


def measure(name: str, database: str | None, threads: int = 2, rounds: int = 15,
            gaps=GAPS, small: bool = False, runtime: str = "pool") -> dict:
    import autotune
    from tensor_ir.codegen import threadpool

    options = SMALL_OPTIONS[name] if small else {}
    model = autotune.load_model(name, **options)
    target = autotune.Target(f"llvm -num-cores {threads}")
    feed = model_feed(model)
    runtimes = RUNTIMES[runtime]
    sides: dict = {}
    if len(runtimes) == 1:
        lib = _build(model, target, database, runtimes[0])
        sides["ours"] = lambda: lib.run(feed)
        coverage = lib.report.coverage
        kernels = {runtimes[0]: parallel_kernels(lib, runtimes[0])}
    else:
        for rt in runtimes:
            sides[f"ours_{rt}"] = _Remote(name, options, str(target), database, rt)
        coverage = sides[f"ours_{runtimes[0]}"].info["coverage"]
        kernels = {rt: sides[f"ours_{rt}"].info["parallel_kernels"] for rt in runtimes}
    sess = onnxruntime_session(to_onnx(model), threads)
    sides["onnxruntime"] = lambda: sess.run(None, feed)
    for fn in sides.values():
        if not isinstance(fn, _Remote):
            fn()  # pages, thread pools, packed weights
    out = {"benchmark": "idle_gap", "model": name, "options": options,
           "target": str(target), "threads": threads, "rounds": rounds,
           "database": os.path.basename(database) if database else None,
           "coverage": coverage, "runtime": runtime,
           "processes": "one per side of ours" if len(runtimes) > 1 else "one",
           "pool_spin_count": threadpool.spin_count(),
           "parallel_kernels": kernels,
           "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"), "gaps": []}
    try:
        for gap in gaps:
            row: dict = {"gap_s": gap}
            for side, ms in alternating_rounds(sides, gap, rounds).items():
                row[f"{side}_ms"] = [round(v, 4) for v in ms]
            out["gaps"].append(row)
    finally:
        for fn in sides.values():
            if isinstance(fn, _Remote):
                fn.close()
    # The first inference after each gap against the side's own hot latency (gap 0's
    # median of its three runs).
    hot = {side: statistics.median(out["gaps"][0][f"{side}_ms"]) for side in sides}
    for row in out["gaps"]:
        for side in sides:
            row[f"{side}_first_vs_hot"] = round(row[f"{side}_ms"][0] / hot[side], 3)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle_gap", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--db", help="a tuning database (default: default schedules)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gaps", default=",".join(str(g) for g in GAPS),
                        help="idle seconds before the timed inferences, comma-separated; "
                             "the first is the hot reference (default: %(default)s)")
    parser.add_argument("--small", action="store_true",
                        help="the shrunk model: checks the command quickly")
    parser.add_argument("--runtime", choices=sorted(RUNTIMES), default="pool",
                        help="what our parallel loops launch on: pool (ours), gomp "
                             "(libgomp), or ab (both, as two sides; default: %(default)s)")
    args = parser.parse_args(argv)
    if args.db is not None and not os.path.exists(args.db):
        parser.error(f"no such database: {args.db}")
    try:
        gaps = [float(g) for g in args.gaps.split(",")]
    except ValueError:
        gaps = []
    if not gaps or min(gaps) < 0:
        parser.error(f"--gaps takes non-negative seconds, comma-separated, not {args.gaps!r}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    print(json.dumps(measure(args.model, args.db, args.threads, args.rounds, gaps,
                             args.small, args.runtime), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
