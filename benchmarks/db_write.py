"""Tuning-record write cost: ``python -m benchmarks.db_write``.

Commits batches of tuning records (64 by default, as a tuning round measures them) into a
file-backed WAL database and prints one JSON object:

    ms_per_record          wall time per candidate of making its TuningRecord (trace hash,
                           JSON) plus its share of the batch commit, median over batches
    commit_ms_per_batch    the commit_records call alone, median over batches
    limit_ms_per_record    5.0, the budget the tuner allows itself
    query_ms               measured_hashes / best_k / has_record after all batches
    synchronous            the SQLite synchronous level measured ("full": fsync per commit)

Each candidate is a real tiled-matmul trace (split into four levels, reorder, fuse,
parallel, vectorise, unroll annotation) with freshly sampled tile-size decisions, as search
produces them.  The database lives in a temporary directory unless ``--dir`` is given.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

from records import Database, Workload
from schedules import Schedule
from schedules.sampling import sample_categorical, sample_perfect_tile
from search.measure import MeasureResult
from tensor_ir import ops

LIMIT_MS = 5.0


def matmul_sketch(n: int = 512):
    """The workload and a tiled-matmul trace whose decisions search would mutate."""
    func = ops.matmul(n, n, n)
    sch = Schedule(func, seed=0)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i_tiles = sch.split(i, sch.sample_perfect_tile(i, n=4, max_innermost_factor=16))
    j_tiles = sch.split(j, sch.sample_perfect_tile(j, n=4, max_innermost_factor=64))
    k_tiles = sch.split(k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=16))
    i0, i1, i2, i3 = i_tiles
    j0, j1, j2, j3 = j_tiles
    k0, k1 = k_tiles
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    sch.parallel(sch.fuse(i0, j0))
    sch.vectorize(j3)
    step = sch.sample_categorical([0, 16, 64, 512], [0.25] * 4)
    sch.annotate(c, "pragma_auto_unroll_max_step", step)
    return func, sch.trace


def candidate_traces(trace, count: int, seed: int, extent: int = 512) -> list:
    """``count`` traces that differ from ``trace`` in their sampling decisions (as mutated
    candidates do), drawn without replaying the schedule."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        t = trace
        for index in t.sampling_indices():
            inst = t[index]
            if inst.kind == "sample_perfect_tile":
                decision = sample_perfect_tile(rng, extent, inst.attrs["n"],
                                               inst.attrs["max_innermost_factor"], None)
            else:
                decision = sample_categorical(rng, list(inst.attrs["candidates"]),
                                              list(inst.attrs["probs"]), None)
            t = t.with_decision(index, decision)
        out.append(t)
    return out


def run(directory: str, batches: int, batch_size: int, synchronous: str) -> dict:
    func, sketch = matmul_sketch()
    traces = candidate_traces(sketch, batches * batch_size, seed=1)
    rng = random.Random(2)
    config = {"number": 1, "repeat": 5, "min_repeat_ms": 20.0, "timeout": 10.0}
    path = os.path.join(directory, "db_write.db")
    per_record, commit_ms = [], []
    with Database(path, synchronous=synchronous) as db:
        key = db.commit_workload(Workload(func))
        target = "llvm"
        for b in range(batches):
            results = [MeasureResult.success([rng.uniform(1e-3, 2e-3) for _ in range(5)],
                                             number=1, checked=True)
                       for _ in range(batch_size)]
            chunk = traces[b * batch_size:(b + 1) * batch_size]
            t0 = time.perf_counter()
            batch = [r.to_record(key, target, t, config)
                     for t, r in zip(chunk, results)]
            t1 = time.perf_counter()
            db.commit_records(batch)
            t2 = time.perf_counter()
            per_record.append((t2 - t0) * 1e3 / batch_size)
            commit_ms.append((t2 - t1) * 1e3)
        queries = {}
        t0 = time.perf_counter()
        hashes = db.measured_hashes(key, target)
        queries["measured_hashes"] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        best = db.best_k(key, target, k=16)
        queries["best_k_16"] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        db.has_record(key, target, batch[0].trace_hash)
        queries["has_record"] = (time.perf_counter() - t0) * 1e3
        stored = db.count(key)
        journal = db.journal_mode
    assert len(hashes) == len(set(t.to_text() for t in traces)) and len(best) == 16
    return {
        "batch_size": batch_size,
        "batches": batches,
        "records_stored": stored,
        "trace_json_bytes": len(sketch.to_text()),
        "journal_mode": journal,
        "synchronous": synchronous,
        "ms_per_record": round(statistics.median(per_record), 4),
        "ms_per_record_max": round(max(per_record), 4),
        "commit_ms_per_batch": round(statistics.median(commit_ms), 3),
        "limit_ms_per_record": LIMIT_MS,
        "within_limit": statistics.median(per_record) < LIMIT_MS,
        "query_ms": {k: round(v, 3) for k, v in queries.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.db_write",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--synchronous", default="full", choices=("normal", "full"))
    parser.add_argument("--dir", help="directory for the database file (default: a temporary "
                                      "one, removed afterwards)")
    args = parser.parse_args(argv)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            # A fresh file each run, so the numbers do not depend on an earlier run's size.
            try:
                os.remove(os.path.join(args.dir, "db_write.db" + suffix))
            except FileNotFoundError:
                pass
        result = run(args.dir, args.batches, args.batch_size, args.synchronous)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(tmp, args.batches, args.batch_size, args.synchronous)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if result["within_limit"] else 1


if __name__ == "__main__":
    sys.exit(main())
