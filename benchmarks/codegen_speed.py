"""Code generator and runtime speed: build time of tuned candidates, speed of the kernels the
pipeline produces, parallel-launch overhead, and a model end to end on 1 and 2 threads.

    python -m benchmarks.codegen_speed [--sections build,kernels,launch,model]
                                       [--candidates 30] [--kernels 8] [--rounds 7]

Sections (each prints its part of one JSON document):

build    Candidates sampled from the design spaces of matmul 1024^3 and conv2d NCHW
         64x56x56 -> 64 (3x3, padding 1): per-phase thread CPU time of a build (lowering;
         Python code generation including printing the IR; LLVM parse + optimisation + object
         emission), median and mean per candidate; and the wall time per candidate of a
         LocalBuilder with 2 workers on the same candidates (the tuning loop's build step).
kernels  The first ``--kernels`` candidates of each workload compiled twice, by this pipeline
         and by a reference process with LLVM's default options (TENSOR_IR_LLVM_OPTIONS=""),
         timed interleaved on one thread: per-candidate ratio (this / reference) of the
         minimum and of the median time, and their geometric means.
launch   A kernel with a parallel loop over 2 iterations of trivial work called 10,000 times
         through its C entry point: microseconds per call for a serial loop, a parallel loop
         on 1 thread and on 2 threads; and the CPU time the process burns in the 50 ms after a
         launch (what idle OpenMP threads spend polling for work).
model    ``autotune.build(autotune.load_model("resnet18"), target)`` for "llvm -num-cores 1"
         and "llvm -num-cores 2", ``benchmark()`` medians interleaved over ``--rounds``.

The machine load (os.getloadavg) before and after each section is part of the output: on a
shared machine compare runs only at similar load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MATMUL = (1024, 1024, 1024)
CONV = (1, 64, 56, 56, 64, 3, 3)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _workloads() -> dict:
    from tensor_ir import ops

    return {"matmul": ops.matmul(*MATMUL), "conv2d": ops.conv2d_nchw(*CONV, padding=1)}


def sample_candidates(count: int) -> dict:
    """``count`` sampled candidates (PrimFuncs) per workload, seeds 0.. (failed samples are
    skipped)."""
    from schedules.space import DesignSpace

    out = {}
    for name, func in _workloads().items():
        space = DesignSpace(func, "llvm")
        out[name] = [space.sample(seed=s).func for s in range(count)]
    return out


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------

def build_phases(cands: dict, target: str = "llvm -num-cores 2") -> dict:
    """Thread CPU time per build phase, per workload (median and mean over candidates)."""
    from autotune.runtime.build import codegen_options
    from tensor_ir.codegen import codegen, compile_module
    from tensor_ir.lower import lower

    llvm_target, options = codegen_options(target)
    clock = time.thread_time
    out = {}
    for name, funcs in cands.items():
        rows = []
        for func in funcs:
            t0 = clock()
            lowered = lower(func)
            t1 = clock()
            text = str(codegen(lowered, None, options))
            t2 = clock()
            compile_module(text, llvm_target)
            t3 = clock()
            rows.append((t1 - t0, t2 - t1, t3 - t2))
        phases = {}
        for k, label in enumerate(("lower", "codegen", "llvm")):
            phases[f"{label}_ms_median"] = _ms(statistics.median(r[k] for r in rows))
        totals = [sum(r) for r in rows]
        phases["total_ms_median"] = _ms(statistics.median(totals))
        phases["total_ms_mean"] = _ms(statistics.fmean(totals))
        phases["total_ms_max"] = _ms(max(totals))
        out[name] = phases
    return out


def builder_wall(cands: dict, workers: int = 2, target: str = "llvm -num-cores 2") -> dict:
    """Wall milliseconds per candidate of LocalBuilder.build over all candidates."""
    from autotune.measure import LocalBuilder
    from search.measure import MeasureInput

    inputs = [MeasureInput(f, target, f"bench-{name}") for name, funcs in cands.items()
              for f in funcs]
    builder = LocalBuilder(max_workers=workers)
    try:
        builder.build(inputs[:workers])  # start the workers and import LLVM there
        t0 = time.perf_counter()
        results = builder.build(inputs)
        wall = time.perf_counter() - t0
    finally:
        builder.close()
    errors = [r.error for r in results if r.error]
    return {"workers": workers, "candidates": len(inputs),
            "wall_ms_per_candidate": _ms(wall / len(inputs)),
            "worker_ms_median": _ms(statistics.median(r.build_seconds for r in results)),
            "errors": errors[:3]}


# ---------------------------------------------------------------------------------------------
# kernels: this pipeline vs LLVM defaults
# ---------------------------------------------------------------------------------------------

def _write_objects(cands: dict, directory: str) -> None:
    from autotune.runtime.build import build_object

    for name, funcs in cands.items():
        for i, func in enumerate(funcs):
            with open(os.path.join(directory, f"{name}_{i}.o"), "wb") as f:
                f.write(build_object(func, "llvm -num-cores 1", name="kernel"))


def _reference_objects(count: int, directory: str) -> None:
    """Compile the same candidates in a child process with LLVM's default options."""
    env = dict(os.environ, TENSOR_IR_LLVM_OPTIONS="")
    subprocess.run([sys.executable, "-m", "benchmarks.codegen_speed", "--emit-objects",
                    directory, "--kernels", str(count)], check=True, env=env)


def kernel_speed(count: int, rounds: int) -> dict:
    import numpy as np

    import autotune

    cands = sample_candidates(count)
    rng = np.random.default_rng(0)
    rows = {}
    with tempfile.TemporaryDirectory() as ours, tempfile.TemporaryDirectory() as ref:
        _write_objects(cands, ours)
        _reference_objects(count, ref)
        for name, funcs in cands.items():
            arrays = [rng.standard_normal(b.const_shape).astype(b.dtype)
                      for b in funcs[0].params]
            ptrs = [a.ctypes.data for a in arrays]
            for i in range(len(funcs)):
                kernels = [autotune.load_module(os.path.join(d, f"{name}_{i}.o"))
                           for d in (ours, ref)]
                calls = [k._cfunc for k in kernels]
                t0 = time.perf_counter()
                calls[1](*ptrs)
                first = time.perf_counter() - t0
                number = max(1, int(0.02 / max(first, 1e-6)))
                times = ([], [])
                for _ in range(rounds):
                    for k, call in enumerate(calls):
                        t0 = time.perf_counter()
                        for _ in range(number):
                            call(*ptrs)
                        times[k].append((time.perf_counter() - t0) / number)
                rows[f"{name}_{i}"] = {
                    "reference_ms_min": _ms(min(times[1])),
                    "ratio_min": round(min(times[0]) / min(times[1]), 3),
                    "ratio_median": round(statistics.median(times[0])
                                          / statistics.median(times[1]), 3)}
    ratios = [r["ratio_min"] for r in rows.values()]
    return {"candidates": rows,
            "geomean_ratio_min": round(float(np.exp(np.mean(np.log(ratios)))), 3),
            "geomean_ratio_median": round(float(np.exp(np.mean(np.log(
                [r["ratio_median"] for r in rows.values()])))), 3),
            "worst_ratio_min": max(ratios)}


# ---------------------------------------------------------------------------------------------
# launch overhead
# ---------------------------------------------------------------------------------------------

def _tiny(kind: str):
    from tensor_ir.buffer import decl_buffer
    from tensor_ir.expr import FloatImm, IntImm, Var
    from tensor_ir.func import PrimFunc
    from tensor_ir.stmt import BufferStore, For

    a = decl_buffer((2,), "float32", "A")
    b = decl_buffer((2,), "float32", "B")
    i = Var("i")
    body = BufferStore(b, a[i] + FloatImm(1.0, "float32"), (i,))
    return PrimFunc((a, b), For(i, IntImm(0), IntImm(2), kind, body, None, ()), "tiny",
                    (("lowered", True),))


def launch_overhead(calls: int = 10000, rounds: int = 5) -> dict:
    import numpy as np

    import autotune

    a = np.ones(2, np.float32)
    b = np.zeros(2, np.float32)
    out = {}
    for label, kind, cores in (("serial", "serial", 1), ("parallel_1_thread", "parallel", 1),
                               ("parallel_2_threads", "parallel", 2)):
        kernel = autotune.build(_tiny(kind), f"llvm -num-cores {cores}")
        call, pa, pb = kernel._cfunc, a.ctypes.data, b.ctypes.data
        for _ in range(100):
            call(pa, pb)
        samples = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                call(pa, pb)
            samples.append((time.perf_counter() - t0) / calls)
        if not np.array_equal(b, a + 1):
            raise RuntimeError(f"launch benchmark kernel {label} computed a wrong result")
        out[f"{label}_us_per_call"] = round(statistics.median(samples) * 1e6, 3)
        if cores == 2:
            idle = []
            for _ in range(5):
                call(pa, pb)
                c0 = time.process_time()
                time.sleep(0.05)
                idle.append(time.process_time() - c0)
            out["cpu_ms_in_50ms_after_launch"] = _ms(statistics.median(idle))
    out["calls"] = calls
    out["openmp_env"] = {k: v for k, v in os.environ.items() if "OMP" in k}
    return out


# ---------------------------------------------------------------------------------------------
# model end to end
# ---------------------------------------------------------------------------------------------

def model_threads(rounds: int, model: str = "resnet18") -> dict:
    import autotune

    m = autotune.load_model(model)
    t0 = time.perf_counter()
    libs = {n: autotune.build(m, f"llvm -num-cores {n}") for n in (1, 2)}
    build_s = time.perf_counter() - t0
    medians = {n: [] for n in libs}
    for _ in range(rounds):
        for n, lib in libs.items():
            medians[n].append(lib.benchmark(repeat=5, min_repeat_ms=200).median_ms)
    return {"model": model, "build_seconds_both": round(build_s, 1),
            **{f"ms_{n}_thread{'s' if n > 1 else ''}": round(statistics.median(v), 2)
               for n, v in medians.items()},
            "samples_ms": {str(n): [round(x, 2) for x in v] for n, v in medians.items()}}


# ---------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="build,kernels,launch,model")
    parser.add_argument("--candidates", type=int, default=30,
                        help="sampled candidates per workload for the build section")
    parser.add_argument("--kernels", type=int, default=8,
                        help="candidates per workload whose kernels are timed")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-builder", action="store_true",
                        help="skip the LocalBuilder wall-time measurement")
    parser.add_argument("--emit-objects", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.emit_objects:  # child of the kernels section
        _write_objects(sample_candidates(args.kernels), args.emit_objects)
        return 0
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - {"build", "kernels", "launch", "model"}
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}")
    from tensor_ir.codegen import compile as compile_mod

    # (getattr: the build and launch sections also run on trees older than the options.)
    options = getattr(compile_mod, "llvm_options", lambda: ())()
    doc = {"python": sys.version.split()[0], "cpu_count": os.cpu_count(),
           "llvm_options": list(options)}
    for section in sections:
        before = _load()
        if section == "build":
            cands = sample_candidates(args.candidates)
            result = {"phases": build_phases(cands)}
            if not args.no_builder:
                result["builder"] = builder_wall(cands)
        elif section == "kernels":
            result = kernel_speed(args.kernels, args.rounds)
        elif section == "launch":
            result = launch_overhead()
        else:
            result = model_threads(max(1, args.rounds // 2))
        result["loadavg_before"], result["loadavg_after"] = before, _load()
        doc[section] = result
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
