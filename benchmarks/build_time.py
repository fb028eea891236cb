"""Build-time benchmark: median wall time of PrimFunc creation, lowering and LLVM compilation
for every operator of the library, each checked against its numpy reference.

    python -m benchmarks.build_time [--repeat 5] [--ops matmul,softmax]

Prints one JSON document.  The headline figure is the 1024x1024x1024 matmul's LLVM build
(lowering + codegen + O3 + object + JIT), which must stay well under 150 ms.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

from tensor_ir import ops
from tensor_ir.codegen import codegen, compile_module
from tensor_ir.lower import lower


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e3, 3)


def measure(make, repeat: int) -> dict:
    """Time the three phases ``repeat`` times; return medians in ms and the last artifacts."""
    t_create, t_lower, t_llvm = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        func = make()
        t1 = time.perf_counter()
        lowered = lower(func)
        t2 = time.perf_counter()
        compiled = compile_module(codegen(lowered))
        jit = compiled.jit()
        t3 = time.perf_counter()
        t_create.append(t1 - t0)
        t_lower.append(t2 - t1)
        t_llvm.append(t3 - t2)
    return {
        "create_ms": _median_ms(t_create),
        "lower_ms": _median_ms(t_lower),
        "llvm_ms": _median_ms(t_llvm),
        "build_ms": _median_ms([a + b for a, b in zip(t_lower, t_llvm)]),
        "_func": func,
        "_jit": jit,
    }


def _check(spec, config, func) -> float:
    """Run the compiled kernel on random inputs; return the max abs error vs numpy."""
    import autotune

    kernel = autotune.build(func)
    inputs = spec.inputs(func, seed=0)
    out = spec.output(func)
    kernel(*inputs, out)
    expected = spec.expected(config, inputs)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    return float(np.max(np.abs(out - expected))) if out.size else 0.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ops", default="", help="comma-separated operator names (default all)")
    args = parser.parse_args(argv)
    wanted = set(filter(None, args.ops.split(",")))

    results = []
    for name, spec in ops.REGISTRY.items():
        if wanted and name not in wanted:
            continue
        config = (spec.large_configs or spec.configs)[0]
        row = measure(lambda: spec.func(config), args.repeat)
        func = row.pop("_func")
        row.pop("_jit")
        row.update(op=name, config=spec.config_id(config),
                   max_abs_err=_check(spec, config, func))
        results.append(row)

    headline = measure(lambda: ops.matmul(1024, 1024, 1024), max(args.repeat, 7))
    headline.pop("_func")
    headline.pop("_jit")
    doc = {
        "benchmark": "build_time",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "matmul_1024": dict(headline, limit_ms=150.0, ok=headline["build_ms"] < 150.0),
        "ops": results,
        "median_build_ms_over_ops": _median_ms([r["build_ms"] / 1e3 for r in results])
        if results else None,
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
