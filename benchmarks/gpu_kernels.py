"""GPU kernels of the hand-written schedules (benchmarks/gpu_schedules.py), timed on the
device in use.  Prints one JSON document.

    python -m benchmarks.gpu_kernels

Per schedule: the launch grid and block, the median kernel time (arrays on the device, copies
not timed) and its spread, the outputs checked against numpy, and numpy's time for the same
operation (OpenBLAS on this CPU) as ``reference_ms``.  On a machine without a GPU the device is
PoCL, OpenCL on the CPU, which runs the schedules for their results: its times say little
about a GPU's.  NOTE: the vendor-library reference on a GPU (cuBLAS through torch or cupy)
comes with the CUDA runtime (issue "GPUs, part 1").
"""
from __future__ import annotations

import json
import statistics
import time

import numpy as np

from benchmarks.gpu_schedules import elementwise_add, row_sum, tiled_matmul

CASES = {
    "add_1M": (elementwise_add, {"shape": (1024, 1024), "threads": 256}, "a + b"),
    "row_sum_4096x1024": (row_sum, {"rows": 4096, "cols": 1024, "threads": 64},
                          "a.sum(axis=1)"),
    "matmul_256_tile8": (tiled_matmul, {"n": 256, "tile": 8}, "a @ b"),
}


def _numpy_ms(expression: str, arrays: list, repeat: int = 5) -> float:
    a, b = arrays[0], arrays[1] if len(arrays) > 2 else None
    fn = eval(f"lambda a, b: {expression}")  # noqa: S307 - one of the three literals above
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(a, b)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    from autotune.gpu import build_gpu, opencl_available

    out: dict = {"benchmark": "gpu_kernels", "device": None, "schedules": {}}
    if not opencl_available():
        out["error"] = "no OpenCL device (install the test extra: pyopencl with PoCL)"
        print(json.dumps(out, indent=1))
        return
    rng = np.random.default_rng(0)
    for name, (make, sizes, reference) in CASES.items():
        func, arrays, expected = make(rng, **sizes)
        kernel = build_gpu(func, "opencl")
        out["device"] = kernel.target.model_name if hasattr(kernel.target, "model_name") \
            else str(kernel.target)
        kernel(*arrays)
        for index, want in expected.items():
            np.testing.assert_allclose(arrays[index], want, rtol=1e-4, atol=1e-4)
        times = kernel.time(*arrays)
        median = statistics.median(times)
        out["schedules"][name] = {
            "grid": list(kernel.source.grid), "block": list(kernel.source.block),
            "kernel_ms": round(1e3 * median, 4),
            "spread": round((max(times) - min(times)) / median, 3),
            "reference": "numpy", "reference_ms": round(_numpy_ms(reference, arrays), 4),
            "correct": True,
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
