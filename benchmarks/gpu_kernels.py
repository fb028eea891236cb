"""GPU kernels of the hand-written schedules (benchmarks/gpu_schedules.py), timed on the
device in use.  Prints one JSON document.

    python -m benchmarks.gpu_kernels [--only add_1M,transpose_1024_tile16]

Per schedule: each kernel's launch grid and block, the median kernel time (arrays on the
device, copies not timed) and its spread, the outputs checked against numpy, and numpy's time
for the same operation (OpenBLAS on this CPU) as ``reference_ms``.  On a machine without a GPU
the device is PoCL, OpenCL on the CPU, which runs the schedules for their results: its times
say little about a GPU's.  NOTE: the vendor-library reference on a GPU (cuBLAS through torch or
cupy) comes with the CUDA runtime (issue "GPUs, part 1").
"""
from __future__ import annotations

import json
import statistics
import time

import numpy as np

from benchmarks.gpu_schedules import (
    conv2d_nchw,
    cooperative_matmul,
    cross_thread_row_sum,
    depthwise_conv2d_nchw,
    elementwise_add,
    layer_norm_block_rows,
    layer_norm_rows,
    matmul_register_tile,
    row_sum,
    softmax_block_rows,
    softmax_rows,
    tiled_matmul,
    transpose_shared,
)
from tensor_ir.ops.nn import ref_conv2d_nchw, ref_depthwise_conv2d_nchw
from tensor_ir.ops.norm import ref_layer_norm, ref_softmax

# name -> (schedule, its sizes, numpy's version of the operation on the input arrays).
# tests/autotune/test_gpu_schedules.py checks that each of these still schedules, fits a CUDA
# block and agrees with its reference.
CASES = {
    "add_1M": (elementwise_add, {"shape": (1024, 1024), "threads": 256},
               lambda a, b: a + b),
    "row_sum_4096x1024": (row_sum, {"rows": 4096, "cols": 1024, "threads": 64},
                          lambda a: a.sum(axis=1)),
    "matmul_256_tile8": (tiled_matmul, {"n": 256, "tile": 8}, lambda a, b: a @ b),
    "matmul_reg_256_8x8x2x2": (matmul_register_tile,
                               {"n": 256, "m": 256, "k": 256, "threads": 8, "reg": (2, 2)},
                               lambda a, b: a @ b),
    "transpose_1024_tile16": (transpose_shared, {"rows": 1024, "cols": 1024, "tile": 16},
                              lambda a: np.ascontiguousarray(a.T)),
    "conv2d_32x32_c32_k64": (conv2d_nchw,
                             {"c": 32, "h": 32, "w": 32, "k": 64, "tile": (8, 4, 8, 4)},
                             lambda x, w: ref_conv2d_nchw(x, w, 1, 1)),
    "conv2d_s2_32x32_c32_k64": (conv2d_nchw, {"c": 32, "h": 32, "w": 32, "k": 64,
                                              "stride": 2, "tile": (8, 4, 8, 4)},
                                lambda x, w: ref_conv2d_nchw(x, w, 2, 1)),
    "depthwise_64x64_c64": (depthwise_conv2d_nchw, {"c": 64, "h": 64, "w": 64, "tile": (8, 16)},
                            lambda x, w: ref_depthwise_conv2d_nchw(x, w, 1, 1)),
    "softmax_4096x256": (softmax_rows, {"rows": 4096, "cols": 256, "threads": 64},
                         ref_softmax),
    "layer_norm_4096x256": (layer_norm_rows, {"rows": 4096, "cols": 256, "threads": 64},
                            ref_layer_norm),
    # The same operations with a block per row (or per C tile) and the work shared by its
    # threads: cross-thread reductions, cooperative shared-memory fetches.
    "matmul_coop_256_t8_k8": (cooperative_matmul, {"n": 256, "threads": 8, "k_tile": 8},
                              lambda a, b: a @ b),
    "row_sum_xthread_4096x1024": (cross_thread_row_sum,
                                  {"rows": 4096, "cols": 1024, "threads": 64},
                                  lambda a: a.sum(axis=1)),
    "softmax_xthread_4096x256": (softmax_block_rows, {"rows": 4096, "cols": 256, "threads": 64},
                                 ref_softmax),
    "layer_norm_xthread_4096x256": (layer_norm_block_rows,
                                    {"rows": 4096, "cols": 256, "threads": 64},
                                    ref_layer_norm),
}


def _numpy_ms(reference, inputs: list, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        reference(*inputs)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv=None) -> None:
    import argparse

    from autotune.gpu import build_gpu, opencl_problem
    from tensor_ir.target import opencl_device_facts

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_kernels")
    parser.add_argument("--only", default=None,
                        help="comma-separated case names (default: all of them)")
    args = parser.parse_args(argv)
    names = list(CASES) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    out: dict = {"benchmark": "gpu_kernels", "device": None, "schedules": {}}
    problem = opencl_problem()
    if problem is not None:
        out["error"] = f"{problem} (the test extra installs pyopencl with PoCL)"
        print(json.dumps(out, indent=1))
        return
    rng = np.random.default_rng(0)
    for name in names:
        make, sizes, reference = CASES[name]
        func, arrays, expected = make(rng, **sizes)
        inputs = [i for i in range(len(arrays)) if i not in expected]
        kernel = build_gpu(func, "opencl")
        out["device"] = opencl_device_facts(dict(kernel.target.options).get("platform")).get(
            "name", str(kernel.target))
        kernel(*arrays)
        for index, want in expected.items():
            np.testing.assert_allclose(arrays[index], want, rtol=1e-4, atol=1e-4)
        times = kernel.time(*arrays)
        median = statistics.median(times)
        out["schedules"][name] = {
            "launches": [{"kernel": k.name, "grid": list(k.grid), "block": list(k.block)}
                         for k in kernel.source.kernels],
            "kernel_ms": round(1e3 * median, 4),
            "spread": round((max(times) - min(times)) / median, 3),
            "reference": "numpy",
            "reference_ms": round(_numpy_ms(reference, [arrays[i] for i in inputs]), 4),
            "correct": True,
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
