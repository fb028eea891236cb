"""JIT loading before and after issue 64: load time and kernel speed of each way, side by side.

    python -m benchmarks.jit_load [--candidates 3] [--loads 50] [--rounds 7] [--threads 1]
    python -m benchmarks.jit_load --smoke      # tiny shapes, one of everything: checks it runs

The ways of loading one object file, compiled once by ``compile_module``:

mcjit        the loader before issue 64: an MCJIT engine of its own per object, whose
             section-by-section placement is what could overflow a 32-bit relocation.
jitlink      ``JITModule`` now: ORC's JITLink, one LLJIT per object, all its sections in one
             allocation.  Same object bytes, so the kernel code is the same.
mcjit_large  the alternative not taken: the same optimised IR emitted with the large code model
             (64-bit references throughout, so no placement can overflow them) and loaded
             by MCJIT; its kernels pay a movabs and a register for every constant-pool access.

Kernels: design-space samples of a matmul, a conv2d (NCHW) and an elementwise GELU.  For each:
``compile_ms`` (optimise + emit the object, common to mcjit and jitlink), ``load_ms`` per way
(median over ``--loads`` loads, each freed before the next), ``build_load_ms`` (the two
summed, per way), and ``run_us`` (microseconds) per way, timed interleaved
(benchmarks.common) so that a change in machine load hits all ways alike; ``run_ratio`` is
each way's time over mcjit's.
The outputs of the three ways are compared before timing.  Prints one JSON document, with the
machine load before and after.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

WAYS = ("mcjit", "jitlink", "mcjit_large")
SHAPES = {"full": {"matmul": (256, 256, 256), "conv2d": (1, 32, 28, 28, 32, 3, 3),
                   "gelu": (64, 1024)},
          "smoke": {"matmul": (16, 16, 16), "conv2d": (1, 4, 8, 8, 4, 3, 3),
                    "gelu": (4, 32)}}


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


def _workloads(size: str) -> dict:
    from tensor_ir import ops

    shapes = SHAPES[size]
    return {"matmul": ops.matmul(*shapes["matmul"]),
            "conv2d": ops.conv2d_nchw(*shapes["conv2d"], padding=1),
            "gelu": ops.gelu(shapes["gelu"])}


def _candidates(size: str, count: int) -> dict:
    """``count`` design-space samples per workload (seeds 0..; failed samples skipped)."""
    from schedules.errors import ScheduleError
    from schedules.space import DesignSpace

    out = {}
    for name, func in _workloads(size).items():
        space = DesignSpace(func, "llvm")
        funcs = []
        for seed in range(4 * count):
            if len(funcs) == count:
                break
            try:
                funcs.append(space.sample(seed=seed).func)
            except ScheduleError:
                continue
        out[name] = funcs
    return out


class _MCJIT:
    """One object in an MCJIT engine of its own (the loader before issue 64)."""

    def __init__(self, object_code: bytes, target):
        import llvmlite.binding as llvm

        triple, cpu, features = target.resolved()
        machine = llvm.Target.from_triple(triple).create_target_machine(
            cpu=cpu, features=features, opt=target.opt_level, reloc="pic", codemodel="small")
        empty = llvm.parse_assembly("")
        empty.triple = triple
        empty.data_layout = str(machine.target_data)
        self._engine = llvm.create_mcjit_compiler(empty, machine)
        self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
        self._engine.finalize_object()

    def function_address(self, name: str) -> int:
        return self._engine.get_function_address(name)


def _large_object(compiled) -> bytes:
    """The optimised IR of ``compiled`` emitted again with the large code model."""
    import llvmlite.binding as llvm

    triple, cpu, features = compiled.target.resolved()
    machine = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=compiled.target.opt_level, reloc="pic",
        codemodel="large")
    return machine.emit_object(llvm.parse_assembly(compiled.llvm_ir))


def _median_load_seconds(load, object_code: bytes, loads: int) -> float:
    samples = []
    for _ in range(loads):
        t0 = time.perf_counter()
        loaded = load(object_code)
        samples.append(time.perf_counter() - t0)
        del loaded
    return statistics.median(samples)


def measure_kernel(func, threads: int, loads: int, rounds: int, min_seconds: float) -> dict:
    import numpy as np

    from autotune.runtime.build import codegen_options
    from benchmarks.common import interleaved_medians
    from tensor_ir.codegen import JITModule, codegen, compile_module
    from tensor_ir.codegen.llvm import symbol_name
    from tensor_ir.lower import lower

    target, options = codegen_options(f"llvm -num-cores {threads}")
    lowered = lower(func)
    t0 = time.perf_counter()
    compiled = compile_module(codegen(lowered, "kernel", options), target)
    compile_s = time.perf_counter() - t0
    objects = {"mcjit": compiled.object_code, "jitlink": compiled.object_code,
               "mcjit_large": _large_object(compiled)}
    loaders = {"mcjit": lambda obj: _MCJIT(obj, target),
               "jitlink": lambda obj: JITModule(obj, target),
               "mcjit_large": lambda obj: _MCJIT(obj, target)}
    load_s = {way: _median_load_seconds(loaders[way], objects[way], loads) for way in WAYS}

    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(b.const_shape).astype(b.dtype) for b in lowered.params]
    entry = symbol_name("kernel")
    loaded, calls, outputs = {}, {}, {}
    for way in WAYS:
        loaded[way] = loaders[way](objects[way])
        arrays = [a.copy() for a in inputs]
        proto = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays))
        fn = proto(loaded[way].function_address(entry))
        pointers = [a.ctypes.data for a in arrays]
        fn(*pointers)
        outputs[way] = arrays
        calls[way] = (lambda fn=fn, pointers=pointers: fn(*pointers))
    for way in WAYS[1:]:
        for got, want in zip(outputs[way], outputs["mcjit"]):
            if not np.allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True):
                raise RuntimeError(f"{way} computed another result than mcjit for "
                                   f"{lowered.name}")
    timed = interleaved_medians(calls, rounds=rounds, min_seconds=min_seconds,
                                cooldown=min(0.15, min_seconds))
    run_s = {way: timed[way]["median_s"] for way in WAYS}
    return {"object_bytes": {"small": len(objects["mcjit"]),
                             "large": len(objects["mcjit_large"])},
            "compile_ms": _ms(compile_s),
            "load_ms": {way: _ms(s) for way, s in load_s.items()},
            "build_load_ms": {way: _ms(compile_s + load_s[way]) for way in ("mcjit", "jitlink")},
            "run_us": {way: round(s * 1e6, 3) for way, s in run_s.items()},
            "run_ratio": {way: round(run_s[way] / run_s["mcjit"], 4) for way in WAYS[1:]}}


def _geomean(values: list[float]) -> float:
    return round(math.exp(statistics.fmean(math.log(v) for v in values)), 4)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=3,
                        help="design-space samples per workload")
    parser.add_argument("--loads", type=int, default=50, help="loads per way and kernel")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--min-seconds", type=float, default=0.2,
                        help="least duration of one timing sample")
    parser.add_argument("--threads", type=int, default=1, help="cores the kernels use")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, one candidate, one load and round: checks it runs")
    args = parser.parse_args(argv)
    size = "smoke" if args.smoke else "full"
    if args.smoke:
        args.candidates, args.loads, args.rounds, args.min_seconds = 1, 1, 1, 0.001
    import llvmlite.binding as llvm

    doc = {"python": sys.version.split()[0], "llvm": ".".join(map(str, llvm.llvm_version_info)),
           "cpu_count": os.cpu_count(), "threads": args.threads, "loads": args.loads,
           "rounds": args.rounds, "shapes": SHAPES[size],
           "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    kernels = {}
    for name, funcs in _candidates(size, args.candidates).items():
        for i, func in enumerate(funcs):
            kernels[f"{name}_{i}"] = measure_kernel(func, args.threads, args.loads,
                                                    args.rounds, args.min_seconds)
    doc["kernels"] = kernels
    rows = list(kernels.values())
    doc["summary"] = {
        "load_ms_median": {way: round(statistics.median(r["load_ms"][way] for r in rows), 4)
                           for way in WAYS},
        "geomean_run_ratio": {way: _geomean([r["run_ratio"][way] for r in rows])
                              for way in WAYS[1:]},
        "worst_run_ratio": {way: max(r["run_ratio"][way] for r in rows) for way in WAYS[1:]}}
    doc["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
