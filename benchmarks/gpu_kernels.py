"""GPU kernels of the hand-written schedules (benchmarks/gpu_schedules.py), timed on the
device in use.  Prints one JSON document.

    python -m benchmarks.gpu_kernels [--target cuda|opencl] [--only add_1M,sgemm_4096]

Per schedule: each kernel's launch grid and block, the median kernel time (arrays on the
device, copies not timed) and its spread, the outputs checked against numpy, and a reference
time for the same operation as ``reference_ms``.  On a CUDA GPU (the default target when
pycuda sees one) kernels are timed with CUDA events and the reference is the vendor library
through torch (cuBLAS, cuDNN, torch's own softmax / layer_norm kernels), timed with CUDA events
on the same device, TF32 off so that both compute in float32; ``vs_reference`` is reference
time over ours (above 1: ours is faster).  Elsewhere the device is OpenCL (PoCL on the CPU
when no GPU is here, which runs the schedules for their results: its times say little about a
GPU's) and the reference is numpy on this CPU.
"""
from __future__ import annotations

import json
import statistics
import sys
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
    sgemm_block_tile,
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
    # SGEMM 4096^3: 128 x 128 tiles of C per block of 16 x 16 threads, 8 x 8 per thread.
    "sgemm_4096": (sgemm_block_tile, {"n": 4096, "m": 4096, "k": 4096, "reg": (8, 8)},
                   lambda a, b: a @ b),
    "sgemm_4096_unroll_k": (sgemm_block_tile, {"n": 4096, "m": 4096, "k": 4096, "reg": (8, 8),
                                               "unroll_k": True}, lambda a, b: a @ b),
    "sgemm_1024": (sgemm_block_tile, {"n": 1024, "m": 1024, "k": 1024, "reg": (8, 8)},
                   lambda a, b: a @ b),
}


def _torch_reference(make, sizes: dict):
    """The torch version of a schedule's operation on its input tensors (on the GPU), or
    None where torch has none worth timing."""
    import torch
    import torch.nn.functional as F

    if make in (tiled_matmul, matmul_register_tile, cooperative_matmul, sgemm_block_tile):
        return lambda a, b: a @ b
    if make is elementwise_add:
        return lambda a, b: a + b
    if make in (row_sum, cross_thread_row_sum):
        return lambda a: a.sum(dim=1)
    if make is transpose_shared:
        return lambda a: a.t().contiguous()
    if make is conv2d_nchw:
        stride = sizes.get("stride", 1)
        return lambda x, w: F.conv2d(x, w, stride=stride, padding=1)
    if make is depthwise_conv2d_nchw:
        stride = sizes.get("stride", 1)
        return lambda x, w: F.conv2d(x, w.reshape(w.shape[0], 1, 3, 3), stride=stride,
                                     padding=1, groups=w.shape[0])
    if make in (softmax_rows, softmax_block_rows):
        return lambda x: torch.softmax(x, dim=1)
    if make in (layer_norm_rows, layer_norm_block_rows):
        return lambda x, g, b: F.layer_norm(x, (x.shape[1],), g, b, eps=1e-5)
    return None


def _torch_ms(fn, arrays: list, repeat: int = 7, number: int = 20) -> float:
    import torch

    tensors = [torch.from_numpy(a).cuda() for a in arrays]
    for _ in range(3):
        fn(*tensors)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn(*tensors)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / number)
    return statistics.median(times)


def _numpy_ms(reference, inputs: list, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        reference(*inputs)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv=None) -> None:
    import argparse

    from autotune.backends import build_gpu
    from autotune.runtime.opencl import opencl_problem

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_kernels")
    parser.add_argument("--only", default=None,
                        help="comma-separated case names (default: all of them)")
    parser.add_argument("--target", default="auto", choices=("auto", "cuda", "opencl"),
                        help="cuda (the GPU here, through pycuda), opencl, or auto: cuda "
                             "when pycuda sees a GPU, else opencl")
    args = parser.parse_args(argv)
    names = list(CASES) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    out: dict = {"benchmark": "gpu_kernels", "device": None, "schedules": {}}
    kind = args.target
    if kind in ("auto", "cuda"):
        from autotune.runtime.cuda import cuda_device_facts, cuda_problem, cuda_target

        problem = cuda_problem()
        if problem is None:
            kind = "cuda"
        elif kind == "cuda":
            out["error"] = problem
            print(json.dumps(out, indent=1))
            return
        else:
            kind = "opencl"
    if kind == "opencl":
        problem = opencl_problem()
        if problem is not None:
            out["error"] = f"{problem} (the test extra installs pyopencl with PoCL)"
            print(json.dumps(out, indent=1))
            return
        target = "opencl"
    else:
        import torch

        # float32 on both sides: no TF32 in cuBLAS or cuDNN.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        target = str(cuda_target())
        out["device"] = cuda_device_facts()
        out["target"] = target
    rng = np.random.default_rng(0)
    for name in names:
        make, sizes, reference = CASES[name]
        func, arrays, expected = make(rng, **sizes)
        inputs = [i for i in range(len(arrays)) if i not in expected]
        kernel = build_gpu(func, target)
        if kind == "opencl":
            from tensor_ir.target import opencl_device_facts

            out["device"] = opencl_device_facts(
                dict(kernel.target.options).get("platform")).get("name", str(kernel.target))
        for index in expected:
            arrays[index][...] = np.nan  # every element must be written
        kernel(*arrays)
        for index, want in expected.items():
            # Sums of thousands of products: the tolerance scales with the largest output.
            atol = 1e-4 * max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(arrays[index], want, rtol=1e-4, atol=atol,
                                       err_msg=name)
        times = kernel.time(*arrays)
        median = statistics.median(times)
        row = {
            "launches": [{"kernel": k.name, "grid": list(k.grid), "block": list(k.block)}
                         for k in kernel.source.kernels],
            "kernel_ms": round(1e3 * median, 4),
            "spread": round((max(times) - min(times)) / median, 3),
            "correct": True,
        }
        fn = _torch_reference(make, sizes) if kind == "cuda" else None
        if fn is not None:
            row["reference"] = "torch " + __import__("torch").__version__
            row["reference_ms"] = round(_torch_ms(fn, [arrays[i] for i in inputs]), 4)
        else:
            row["reference"] = "numpy"
            row["reference_ms"] = round(_numpy_ms(reference, [arrays[i] for i in inputs]), 4)
        row["vs_reference"] = round(row["reference_ms"] / row["kernel_ms"], 3)
        if make in (tiled_matmul, matmul_register_tile, cooperative_matmul, sgemm_block_tile):
            n, k = arrays[0].shape
            m = arrays[1].shape[1]
            row["gflops"] = round(2 * n * m * k / median / 1e9, 1)
        out["schedules"][name] = row
        print(f"{name}: {row['kernel_ms']} ms, reference {row['reference_ms']} ms",
              file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
