"""The hand-written GPU schedules of benchmarks/gpu_schedules.py at several shapes: run on an
OpenCL device (PoCL or Oclgrind, both on the CPU) against numpy, their OpenCL text checked for
the memory they stage and the barriers they need, and their CUDA text compiled by nvcc
(skipped without it; no GPU is needed to compile).

Every schedule also runs at sizes its tiles do not divide ("ragged"): the predicates that
split and compute_at / reverse_compute_at leave (region bounds such as
``i < min(i_0 * 4 + 3, 5) + 1``) must print and compile in both dialects.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import autotune
from benchmarks.gpu_schedules import (
    WORKLOADS,
    conv2d_nchw,
    depthwise_conv2d_nchw,
    layer_norm_rows,
    matmul_register_tile,
    sgemm_block_tile,
    softmax_rows,
    transpose_shared,
)
from tensor_ir.codegen.gpu_c import gpu_source
from tensor_ir.thread_reduce import lower_for_gpu

from ..opencl_support import RUN_TARGET, needs_opencl_run

# (schedule, sizes, whether the sizes leave partial tiles)
CASES = [
    (conv2d_nchw, {}, False),
    (conv2d_nchw, {"stride": 2}, False),
    (conv2d_nchw, {"n": 2, "c": 6, "h": 8, "w": 12, "k": 4}, False),
    (conv2d_nchw, {"c": 8, "h": 8, "w": 16, "k": 16, "tile": (8, 2, 8, 4), "stride": 2}, False),
    (conv2d_nchw, {"c": 3, "h": 7, "w": 9, "k": 6, "shared": False}, True),
    (conv2d_nchw, {"c": 3, "h": 9, "w": 7, "k": 6, "stride": 2, "shared": False}, True),
    (conv2d_nchw, {"c": 3, "h": 7, "w": 9, "k": 6}, True),
    (conv2d_nchw, {"n": 2, "c": 5, "h": 9, "w": 11, "k": 5, "stride": 2}, True),
    (depthwise_conv2d_nchw, {}, False),
    (depthwise_conv2d_nchw, {"stride": 2}, False),
    (depthwise_conv2d_nchw, {"n": 2, "c": 2, "h": 16, "w": 12}, False),
    (depthwise_conv2d_nchw, {"h": 7, "w": 9, "cached": False}, True),
    (depthwise_conv2d_nchw, {"h": 9, "w": 6, "stride": 2, "cached": False}, True),
    (depthwise_conv2d_nchw, {"h": 7, "w": 9}, True),
    (depthwise_conv2d_nchw, {"c": 2, "h": 11, "w": 5, "stride": 2}, True),
    (transpose_shared, {}, False),
    (transpose_shared, {"rows": 16, "cols": 24, "tile": 8}, False),
    (transpose_shared, {"rows": 6, "cols": 9}, True),
    (transpose_shared, {"rows": 19, "cols": 13, "tile": 8}, True),
    (matmul_register_tile, {}, False),
    (matmul_register_tile, {"n": 16, "m": 8, "k": 12}, False),
    (matmul_register_tile, {"n": 16, "m": 8, "k": 8, "reg": (4, 1)}, False),
    (matmul_register_tile, {"n": 10, "m": 9, "k": 7}, True),
    (matmul_register_tile, {"n": 13, "m": 6, "k": 9, "reg": (4, 1)}, True),
    (softmax_rows, {}, False),
    (softmax_rows, {"rows": 32, "cols": 5, "threads": 8}, False),
    (softmax_rows, {"rows": 10}, True),
    (layer_norm_rows, {}, False),
    (layer_norm_rows, {"rows": 32, "cols": 33, "threads": 8}, False),
    (layer_norm_rows, {"rows": 10}, True),
    (sgemm_block_tile, {}, False),
    (sgemm_block_tile, {"n": 128, "m": 64, "k": 48, "reg": (8, 4), "unroll_k": True}, False),
    (sgemm_block_tile, {"n": 40, "m": 72, "k": 21}, True),
    (sgemm_block_tile, {"n": 37, "m": 45, "k": 33, "reg": (2, 2), "threads": (8, 8),
                        "k_tile": 8}, True),
]


def _params(cases=CASES):
    out = []
    for make, sizes, _ in cases:
        label = make.__name__ + "-" + ",".join(f"{k}={v}" for k, v in sizes.items())
        out.append(pytest.param(make, sizes, id=label.rstrip("-")))
    return out


@needs_opencl_run
@pytest.mark.parametrize("make, sizes", _params())
def test_runs_and_matches_numpy(make, sizes):
    func, arrays, expected = make(np.random.default_rng(7), **sizes)
    for index in expected:
        arrays[index][...] = np.nan  # every element must be written
    autotune.build(func, target=RUN_TARGET)(*arrays)
    for index, want in expected.items():
        # Sums of many products (C * 9 in a convolution): rounding grows with the size of the
        # terms, so the absolute tolerance scales with the largest output.
        atol = 1e-5 * max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(arrays[index], want, rtol=1e-5, atol=atol)


def _opencl(make, **sizes) -> str:
    func, _, _ = make(np.random.default_rng(0), **sizes)
    return gpu_source(lower_for_gpu(func), "opencl").code


def _lines(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines()]


BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"


def test_transpose_reads_and_writes_along_threadidx_x_through_a_padded_tile():
    code = _opencl(transpose_shared)
    # A 4x4 tile with rows padded to 5 floats: column reads hit distinct banks.
    assert "__local float A_shared[20];" in code
    lines = _lines(code)
    assert lines.count(BARRIER) == 1
    read = next(line for line in lines if line.startswith("A_shared["))
    write = next(line for line in lines if line.startswith("B["))
    # Consecutive threads x read consecutive elements of A and write consecutive ones of B.
    assert read.endswith("= A[(i_0 * 4 + ax0) * 12 + (j_0 * 4 + ax1)];")
    assert "ax1 = (int)get_local_id(0)" in code and "i_1 = (int)get_local_id(0)" in code
    assert write.startswith("B[(j_0 * 4 + j_1) * 8 + (i_0 * 4 + i_1)] = A_shared[i_1 * 5 + j_1]")


def test_matmul_register_tile_accumulates_in_registers():
    code = _opencl(matmul_register_tile)
    assert "float C_local[4];" in code
    assert "__local float A_shared[" in code and "__local float B_shared[" in code
    lines = _lines(code)
    # One barrier before the tiles are read, one before the next k-tile overwrites them.
    assert lines.count(BARRIER) == 2
    # C is written once per element, after the k loop, from the register tile.
    stores = [line for line in lines if line.startswith("C[")]
    assert stores == ["C[(i_1 * 2 + ax0_2) * 8 + (j_1 * 2 + ax1_2)] = C_local[ax0_2 * 2 + ax1_2];"]


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_stages_input_window_and_weights(stride):
    code = _opencl(conv2d_nchw, stride=stride)
    assert "__local float pad_data_shared[" in code and "__local float weight_shared[" in code
    lines = _lines(code)
    assert lines.count(BARRIER) == 2
    # The padding is folded into the fetch: the convolution itself reads no global data.
    compute = [line for line in lines if line.startswith("conv[") and "+" in line.split("=")[1]]
    assert compute and all("data[" not in line and "weight[" not in line for line in compute)
    assert "pad_data[" not in code  # no padded copy in global memory


def test_depthwise_stages_window_and_accumulates_in_a_register():
    code = _opencl(depthwise_conv2d_nchw)
    assert "__local float pad_data_shared[" in code
    assert "float depthwise_local[1];" in code
    assert _lines(code).count(BARRIER) == 1
    plain = _opencl(depthwise_conv2d_nchw, cached=False)
    assert "__local" not in plain and BARRIER not in plain


@pytest.mark.parametrize("make", [softmax_rows, layer_norm_rows])
def test_row_reductions_stay_in_registers(make):
    code = _opencl(make)
    assert "__local" not in code and BARRIER not in code
    # Two per-row scalars (max and sum / sum and squares), private to the thread.
    assert len([line for line in _lines(code) if line.startswith("float ")
                and line.endswith("[1];")]) == 2


def test_workloads_hold_the_new_schedules():
    for name in ("conv2d", "conv2d_s2", "depthwise", "transpose", "matmul_reg", "softmax",
                 "layer_norm"):
        assert name in WORKLOADS
    _, arrays, expected = WORKLOADS["conv2d_s2"](np.random.default_rng(0))
    assert arrays[-1].shape == (1, 8, 4, 4) and set(expected) == {2}


def test_benchmark_sizes_schedule_within_cuda_limits_and_references_agree():
    # benchmarks.gpu_kernels times these sizes (not run here): each must still be scheduled
    # (bind's dependence checks grow with the grid), fit a CUDA block (1024 threads, 48 KiB
    # of shared memory), and its numpy reference must be the schedule's.
    from benchmarks.gpu_kernels import CASES as BENCHMARK_CASES

    for name, (make, sizes, reference) in BENCHMARK_CASES.items():
        func, arrays, expected = make(np.random.default_rng(0), **sizes)
        gpu_source(lower_for_gpu(func), "cuda", max_threads_per_block=1024,
                   max_shared_memory_per_block=48 * 1024)
        inputs = [a for i, a in enumerate(arrays) if i not in expected]
        (want,) = expected.values()
        np.testing.assert_allclose(reference(*inputs), want, rtol=1e-5, atol=1e-5,
                                   err_msg=name)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("make, sizes", _params([
    # Each form once (nvcc takes about half a second a kernel): the default sizes, the plain
    # variants, and ragged sizes.
    case for case in CASES if not case[1] or case[2]]))
def test_cuda_source_compiles_with_nvcc(make, sizes, tmp_path):
    func, _, _ = make(np.random.default_rng(0), **sizes)
    path = tmp_path / "kernel.cu"
    path.write_text(gpu_source(lower_for_gpu(func), "cuda").code)
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-o", str(path.with_suffix(".ptx")),
                           str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
