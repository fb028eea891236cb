"""CUDA C / OpenCL C printing: launch configuration, barriers, refusals, and every CUDA
source compiled by nvcc (skipped without it; no GPU is needed to compile)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen.gpu_c import GPUSource, gpu_source
from tensor_ir.errors import BuildError
from tensor_ir.expr import FloatImm, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import THREAD_BINDING, BufferStore, For

from benchmarks.gpu_schedules import WORKLOADS, elementwise_add, tiled_matmul


def _source(name: str, dialect: str) -> GPUSource:
    func, _, _ = WORKLOADS[name](np.random.default_rng(0))
    return gpu_source(lower(func), dialect)


def test_signatures_and_launch_indices():
    cuda = _source("add", "cuda")
    opencl = _source("add", "opencl")
    assert 'extern "C" __global__ void add(float* __restrict__ A, float* __restrict__ B, ' \
           'float* __restrict__ C)' in cuda.code
    assert "__kernel void add(__global float* restrict A, __global float* restrict B, " \
           "__global float* restrict C)" in opencl.code
    assert "blockIdx.x" in cuda.code and "threadIdx.x" in cuda.code
    assert "get_group_id(0)" in opencl.code and "get_local_id(0)" in opencl.code
    # 35 elements in blocks of 8: 5 blocks, and a predicate guards the last one.
    assert cuda.grid == opencl.grid == (5, 1, 1)
    assert cuda.block == opencl.block == (8, 1, 1)
    assert "< 35" in cuda.code
    assert [(p.name, p.shape, p.dtype, p.written) for p in cuda.params] == [
        ("A", (7, 5), "float32", False), ("B", (7, 5), "float32", False),
        ("C", (7, 5), "float32", True)]


def test_math_calls_per_dialect():
    cuda = _source("chain", "cuda").code
    opencl = _source("chain", "opencl").code
    for name in ("tanhf(", "sqrtf(", "expf(", "fmaxf("):
        assert name in cuda
    for name in ("tanh(", "sqrt(", "exp(", "fmax("):
        assert name in opencl
    assert "?" in cuda  # the select, evaluated lazily


@pytest.mark.parametrize("dialect", ["cuda", "opencl"])
def test_matmul_shared_tiles_and_barriers(dialect):
    src = _source("matmul", dialect)
    shared = "__shared__" if dialect == "cuda" else "__local"
    barrier = "__syncthreads();" if dialect == "cuda" else "barrier(CLK_LOCAL_MEM_FENCE);"
    assert f"{shared} float A_shared[32];" in src.code
    assert f"{shared} float B_shared[32];" in src.code
    assert src.grid == (2, 2, 1) and src.block == (4, 4, 1)
    lines = [line.strip() for line in src.code.splitlines()]
    # One barrier after the fetches (before the tiles are read), one at the end of the k loop
    # (before the next iteration overwrites them).
    assert lines.count(barrier) == 2
    first = lines.index(barrier)
    assert any("B_shared[" in line and "= B[" in line for line in lines[:first])
    assert lines[first + 1].startswith("for") and "k_1" in lines[first + 1]
    assert lines[lines.index(barrier, first + 1) + 1] == "}"


def test_floor_division_of_possibly_negative_operands_uses_helpers():
    a = decl_buffer((4,), "int32", "A")
    i = Var("i")
    value = IntImm(-7, "int32") // a[i]
    body = For(i, IntImm(0), IntImm(4), THREAD_BINDING, BufferStore(a, value, (i,)),
               "threadIdx.x")
    src = gpu_source(PrimFunc((a,), body, "div", (("lowered", True),)), "cuda")
    assert "floordiv_int(" in src.code
    # "div" is C's div(): the kernel takes another name rather than clash with it.
    assert "void div_v(" in src.code


def _lowered(body, *params) -> PrimFunc:
    return PrimFunc(tuple(params), body, "k", (("lowered", True),))


def test_refuses_non_constant_bound_extent():
    a = decl_buffer((16,), "float32", "A")
    n = Var("n")
    i = Var("i")
    body = For(i, IntImm(0), n, THREAD_BINDING, BufferStore(a, FloatImm(1.0), (i,)),
               "threadIdx.x")
    with pytest.raises(BuildError, match="loop i bound to threadIdx.x has a non-constant"):
        gpu_source(_lowered(body, a))


def test_refuses_two_extents_of_one_axis():
    a = decl_buffer((16,), "float32", "A")
    i, j = Var("i"), Var("j")
    from tensor_ir.stmt import seq

    body = seq(For(i, IntImm(0), IntImm(8), THREAD_BINDING,
                   BufferStore(a, FloatImm(1.0), (i,)), "threadIdx.x"),
               For(j, IntImm(0), IntImm(16), THREAD_BINDING,
                   BufferStore(a, FloatImm(2.0), (j,)), "threadIdx.x"))
    with pytest.raises(BuildError, match="loop j is bound to threadIdx.x with extent 16 but "
                                         "loop i"):
        gpu_source(_lowered(body, a), "opencl")


def test_refuses_too_many_threads():
    func, _, _ = elementwise_add(np.random.default_rng(0))
    with pytest.raises(BuildError, match="8 threads per block, above the target's 4"):
        gpu_source(lower(func), "cuda", max_threads_per_block=4)


def test_refuses_too_much_shared_memory():
    func, _, _ = tiled_matmul(np.random.default_rng(0))
    with pytest.raises(BuildError, match="A_shared"):
        gpu_source(lower(func), "cuda", max_shared_memory_per_block=128)


def test_refuses_unknown_dialect_and_unlowered_func():
    func, _, _ = elementwise_add(np.random.default_rng(0))
    with pytest.raises(BuildError, match="not lowered"):
        gpu_source(func)
    with pytest.raises(BuildError, match="dialect 'metal'"):
        gpu_source(lower(func), "metal")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_sources_compile_with_nvcc(tmp_path):
    # One translation unit per kernel; compiling for sm_80 needs no GPU.
    for name in WORKLOADS:
        path = tmp_path / f"{name}.cu"
        path.write_text(_source(name, "cuda").code)
        done = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-o", str(path.with_suffix(
            ".ptx")), str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{name}:\n{done.stderr}"
