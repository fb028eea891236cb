"""Shared pieces of the records tests: a real tiled-matmul workload and candidate traces."""
from __future__ import annotations

import hashlib
import random
from functools import lru_cache

from benchmarks.db_write import candidate_traces, matmul_sketch
from records import TuningRecord
from search.measure import MeasureResult

HOST = "llvm"  # resolves to this machine's canonical target string


@lru_cache(maxsize=None)
def sketch(n: int = 64):
    """(workload PrimFunc, tiled trace) for an n x n x n matmul."""
    return matmul_sketch(n)


def traces(count: int, seed: int = 0, n: int = 64) -> list:
    """``count`` distinct candidate traces of the n-matmul sketch."""
    _, base = sketch(n)
    out, seen = [], set()
    extra = 0
    while len(out) < count:
        for t in candidate_traces(base, count, seed=seed * 1000 + extra, extent=n):
            if t.to_text() not in seen and len(out) < count:
                seen.add(t.to_text())
                out.append(t)
        extra += 1
    return out


def make_records(key: str, target, count: int, seed: int = 0, n: int = 64,
                 errors: int = 0, config: dict | None = None) -> list[TuningRecord]:
    """``count`` successful records (then ``errors`` crashed ones) with distinct traces and
    random run times."""
    rng = random.Random(seed)
    out = []
    for k, t in enumerate(traces(count + errors, seed, n)):
        if k < count:
            result = MeasureResult.success([rng.uniform(1e-4, 1e-3) for _ in range(3)],
                                           number=2, checked=True)
        else:
            result = MeasureResult.error("crash", "kernel killed by SIGSEGV")
        out.append(result.to_record(key, target, t, config or {"repeat": 3}))
    return out


def file_digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
