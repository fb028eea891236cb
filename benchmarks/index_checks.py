"""What the runtime index checks cost on an embedding lookup (tensor_ir/codegen/checks.py).

    python -m benchmarks.index_checks                  # BERT-base and GPT-2 word embeddings
    python -m benchmarks.index_checks --rounds 5       # fewer rounds

Per table (BERT-base: 30522 x 768, GPT-2: 50257 x 768; 128 tokens, batch 1), one lookup
``out[t, :] = table[ids[t], :]`` is built three ways with the same default schedule:

``checked``     as every build is now: the index is checked, a bad one is a typed error;
``unchecked``   the checks left out (``CodegenOptions(index_checks=False)``): what the loop
                costs with no test at all (unsafe: a bad index reads outside the table);
``zero_guard``  the lookup written as the old guard was, ``if_then_else(0 <= i < n,
                table[i, :], 0)``: what an unprovable index cost before (read zero).

Each is called through the measurement harness's native loop (no Python between calls), on
the same aligned arrays, in alternating rounds (benchmarks.common.interleaved_medians); the
ratios to ``unchecked`` are the cost.  Prints one JSON document.
"""
from __future__ import annotations

import argparse
import ctypes
import json

import numpy as np

from autotune.backends import backend_for
from autotune.runtime.build import codegen_options
from autotune.measure.cpu import _Harness, aligned_empty
from benchmarks.common import environment, interleaved_medians
from tensor_ir import te
from tensor_ir.codegen import codegen, compile_module
from tensor_ir.lower import lower
from tensor_ir.target import Target

TABLES = {"bert_base_word_embeddings": (30522, 768), "gpt2_word_embeddings": (50257, 768)}
TOKENS = 128
CALLS = 200   # kernel calls per timed sample (the harness loop)


def lookup(rows: int, width: int, guarded: bool):
    table = te.placeholder((rows, width), "float32", name="table")
    ids = te.placeholder((TOKENS,), "int64", name="ids")
    if guarded:
        def fcompute(t, j):
            i = ids[t]
            inside = te.all(i >= 0, i < rows)
            return te.if_then_else(inside, table[i, j], 0.0)
    else:
        def fcompute(t, j):
            return table[ids[t], j]
    out = te.compute((TOKENS, width), fcompute, name="out")
    return te.create_prim_func([table, ids, out], name="lookup")


def compiled(func, target: Target, checks: bool):
    """(JIT, entry address) of ``func`` under the CPU backend's default schedule."""
    scheduled = backend_for(target).default_schedule(func, target)
    scheduled = getattr(scheduled, "mod", scheduled)
    llvm_target, options = codegen_options(target)
    options = type(options)(**{**options.__dict__, "index_checks": checks})
    lowered = lower(scheduled)
    jit = compile_module(codegen(lowered, "lookup", options), llvm_target).jit()
    return jit, jit.function_address("lookup")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    target = Target.current_host()
    harness = _Harness()
    loop = harness.loop(3)
    rng = np.random.default_rng(0)
    results = {}
    for name, (rows, width) in TABLES.items():
        table = aligned_empty((rows, width), "float32")
        table[...] = rng.standard_normal((rows, width), dtype=np.float32)
        ids = aligned_empty((TOKENS,), "int64")
        ids[...] = rng.integers(0, rows, TOKENS)
        expected = table[ids]
        argv = (ctypes.c_void_p * 3)(table.ctypes.data, ids.ctypes.data, 0)
        variants = {"checked": (False, True), "unchecked": (False, False),
                    "zero_guard": (True, False)}
        calls, keep = {}, []
        for variant, (guarded, checks) in variants.items():
            jit, address = compiled(lookup(rows, width, guarded), target, checks)
            out = aligned_empty((TOKENS, width), "float32")
            argv_v = (ctypes.c_void_p * 3)(argv[0], argv[1], out.ctypes.data)
            out[...] = np.nan
            loop(address, argv_v, 1, 1)
            np.testing.assert_array_equal(out, expected)
            keep.append((jit, out, argv_v))
            calls[variant] = (lambda a=address, v=argv_v: loop(a, v, 1, CALLS))
        timed = interleaved_medians(calls, rounds=args.rounds, min_seconds=0.2)
        per_call = {v: timed[v]["median_s"] / CALLS * 1e6 for v in calls}
        results[name] = {
            "rows": rows, "width": width, "tokens": TOKENS,
            "us_per_lookup": {v: round(t, 3) for v, t in per_call.items()},
            "checked_over_unchecked": round(per_call["checked"] / per_call["unchecked"], 3),
            "zero_guard_over_unchecked": round(per_call["zero_guard"] / per_call["unchecked"],
                                               3),
            "samples_us": {v: [round(s / CALLS * 1e6, 3) for s in timed[v]["samples_s"]]
                           for v in calls},
        }
        del keep
    print(json.dumps({"benchmark": "index_checks", "environment": environment(),
                      "target": str(target), "rounds": args.rounds, "results": results},
                     indent=1))


if __name__ == "__main__":
    main()
