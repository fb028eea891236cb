"""CUDA C / OpenCL C printing: launch configuration, barriers, refusals, and every CUDA
source compiled by nvcc (skipped without it; no GPU is needed to compile)."""
from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

from benchmarks.gpu_schedules import WORKLOADS, elementwise_add, tiled_matmul
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen.gpu_c import GPUSource, gpu_source
from tensor_ir.errors import BuildError
from tensor_ir.expr import FloatImm, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import THREAD_BINDING, Allocate, BufferStore, For
from tensor_ir.thread_reduce import lower_for_gpu
from tensor_ir.visitor import collect


def _source(name: str, dialect: str) -> GPUSource:
    func, _, _ = WORKLOADS[name](np.random.default_rng(0))
    return gpu_source(lower_for_gpu(func), dialect)


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
    func, _, _ = WORKLOADS["matmul"](np.random.default_rng(0))
    lowered = lower(func)
    src = gpu_source(lowered, dialect)
    shared = "__shared__" if dialect == "cuda" else "__local"
    barrier = "__syncthreads();" if dialect == "cuda" else "barrier(CLK_LOCAL_MEM_FENCE);"
    # The tiles' sizes are the compacted allocations' (hoisted to the top of the kernel).
    sizes = {a.buffer.name: math.prod(d.value for d in a.buffer.shape)
             for a in collect(lowered.body, Allocate)}
    assert f"{shared} float A_shared[{sizes['A_shared']}];" in src.code
    assert f"{shared} float B_shared[{sizes['B_shared']}];" in src.code
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

    b = Var("b")
    # Under one blockIdx loop, so one kernel (top-level statements are kernels of their own).
    body = For(b, IntImm(0), IntImm(1), THREAD_BINDING, seq(
        For(i, IntImm(0), IntImm(8), THREAD_BINDING, BufferStore(a, FloatImm(1.0), (i,)),
            "threadIdx.x"),
        For(j, IntImm(0), IntImm(16), THREAD_BINDING, BufferStore(a, FloatImm(2.0), (j,)),
            "threadIdx.x")), "blockIdx.x")
    with pytest.raises(BuildError, match="loop j is bound to threadIdx.x with extent 16 but "
                                         "loop i"):
        gpu_source(_lowered(body, a), "opencl")


def test_refuses_too_many_threads():
    func, _, _ = elementwise_add(np.random.default_rng(0))
    with pytest.raises(BuildError, match="8 threads per block, above the target's 4"):
        gpu_source(lower(func), "cuda", max_threads_per_block=4)


def test_refuses_too_much_shared_memory():
    func, _, _ = tiled_matmul(np.random.default_rng(0))
    lowered = lower(func)
    total = sum(a.buffer.nbytes for a in collect(lowered.body, Allocate))
    with pytest.raises(BuildError, match="A_shared"):
        gpu_source(lowered, "cuda", max_shared_memory_per_block=total - 1)
    gpu_source(lowered, "cuda", max_shared_memory_per_block=total)


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
            ".ptx")), str(path)], check=False, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{name}:\n{done.stderr}"


def vthread_matmul(n: int, m: int, k: int, vthreads: int = 2, threads: int = 4,
                   cache: bool = True):
    """C = A @ B: each thread of a ``threads`` x ``threads`` block computes ``vthreads`` x
    ``vthreads`` elements of C strided by ``threads`` (loops bound to vthread), with a register
    accumulator (cache_write "local") when ``cache``."""
    from schedules.schedule import Schedule
    from tensor_ir import te

    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="vthread_matmul"))
    block = sch.get_block("C")
    write_back = sch.cache_write(block, 0, "local") if cache else None
    i, j, kk = sch.get_loops(block)
    by, vy, ty = sch.split(i, [None, vthreads, threads])
    bx, vx, tx = sch.split(j, [None, vthreads, threads])
    sch.reorder(by, bx, vy, vx, ty, tx, kk)
    for loop, axis in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (vy, "vthread"),
                       (vx, "vthread"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        sch.bind(loop, axis)
    if cache:
        sch.reverse_compute_at(write_back, tx)
    return sch.func


def test_vthread_loops_unroll_and_integer_min_compiles(tmp_path):
    # 13 x 10 over blocks of 2 x 4 x 4: the write-back's predicate holds an integer min.
    lowered = lower(vthread_matmul(13, 10, 7))
    for dialect in ("cuda", "opencl"):
        src = gpu_source(lowered, dialect)
        lines = [line.strip() for line in src.code.splitlines()]
        loops = [n for n, line in enumerate(lines) if line.startswith("for (")]
        assert lines[loops[0] - 1] == lines[loops[1] - 1] == "#pragma unroll"
        assert src.block == (4, 4, 1) and src.grid == (2, 2, 1)
        int_type = "int"  # indices of a small kernel: 32-bit (see _index_fits_32)
        # Both operands of the result's type: min(long, int) is ambiguous in C.
        assert f"min(({int_type})(" in src.code and f"({int_type})12)" in src.code
    if shutil.which("nvcc") is not None:
        path = tmp_path / "vthread.cu"
        path.write_text(gpu_source(lowered, "cuda").code)
        for arch in ("sm_80", "sm_90"):
            done = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-o",
                                   str(path.with_suffix(f".{arch}.ptx")), str(path)],
                                  check=False, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr


def typed_matmul(n: int, k: int, m: int, dtype: str, acc: str, tile: int = 4):
    """Z = X @ Y over ``dtype`` inputs, each product and the sum in ``acc``, in
    ``tile`` x ``tile`` thread blocks."""
    from schedules.schedule import Schedule
    from tensor_ir import te
    from tensor_ir.expr import cast

    x = te.placeholder((n, k), dtype, name="X")
    y = te.placeholder((k, m), dtype, name="Y")
    r = te.reduce_axis((0, k), name="k")
    z = te.compute((n, m), lambda i, j: te.sum(cast(acc, x[i, r]) * cast(acc, y[r, j]),
                                                axis=r), name="Z")
    sch = Schedule(te.create_prim_func([x, y, z], name=f"matmul_{dtype}"))
    i, j, _ = sch.get_loops(sch.get_block("Z"))
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, tile])
    sch.reorder(io, jo, ii, ji)
    for loop, axis in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"),
                       (ji, "threadIdx.x")):
        sch.bind(loop, axis)
    return sch.func


def half_and_int8_kernels() -> dict:
    """Scheduled functions in float16 and in int8 with int32 accumulation, by name."""
    from benchmarks.gpu_schedules import bind_flat
    from schedules.schedule import Schedule
    from tensor_ir import te
    from tensor_ir.expr import cast

    out = {}
    a = te.placeholder((7, 5), "float16", name="A")
    b = te.placeholder((7, 5), "float16", name="B")
    c = te.compute((7, 5), lambda i, j: te.exp(a[i, j]) * 0.5 + te.max(b[i, j], 0.25)
                   + cast("float16", cast("int32", b[i, j] * 4.0)), name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="half_chain"))
    bind_flat(sch, "C", 8)
    out["half_chain"] = sch.func
    out["matmul_float16"] = typed_matmul(9, 6, 11, "float16", "float16")
    out["matmul_int8"] = typed_matmul(9, 6, 11, "int8", "int32")
    return out


def test_half_and_int8_types_per_dialect(tmp_path):
    funcs = half_and_int8_kernels()
    half_cuda = gpu_source(lower(funcs["half_chain"]), "cuda").code
    half_cl = gpu_source(lower(funcs["half_chain"]), "opencl").code
    assert half_cuda.startswith("#include <cuda_fp16.h>\n")
    assert "half* __restrict__ A" in half_cuda and "__float2half(0.5f)" in half_cuda
    assert half_cl.startswith("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n")
    assert "__global half* restrict A" in half_cl and "((half)0.5f)" in half_cl
    # Half math goes through float (expf on the widened value, rounded back).
    assert "__float2half(expf((float)A[" in half_cuda
    int8_cuda = gpu_source(lower(funcs["matmul_int8"]), "cuda").code
    int8_cl = gpu_source(lower(funcs["matmul_int8"]), "opencl").code
    assert "signed char* __restrict__ X" in int8_cuda and "int* __restrict__ Z" in int8_cuda
    assert "__global char* restrict X" in int8_cl and "(int)X[" in int8_cl
    assert "cuda_fp16" not in int8_cuda and "cl_khr_fp16" not in int8_cl
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    for name, func in funcs.items():
        path = tmp_path / f"{name}.cu"
        path.write_text(gpu_source(lower(func), "cuda").code)
        for arch in ("sm_80", "sm_90"):
            done = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-o",
                                   str(path.with_suffix(f".{arch}.ptx")), str(path)],
                                  check=False, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{name} ({arch}):\n{done.stderr}"


def vector_add(rows: int, cols: int, lanes: int, shift: int = 0, dtype: str = "float32"):
    """C[i, j] = 2 A[i, j + shift] + B[i, j] + B[i, 0]: rows over blocks, each thread
    ``lanes`` consecutive columns in a vectorized loop."""
    from schedules.schedule import Schedule
    from tensor_ir import te

    a = te.placeholder((rows, cols + shift), dtype, name="A")
    b = te.placeholder((rows, cols), dtype, name="B")
    c = te.compute((rows, cols), lambda i, j: a[i, j + shift] * 2 + b[i, j] + b[i, 0],
                   name="C")
    sch = Schedule(te.create_prim_func([a, b, c], name="vector_add"))
    i, j = sch.get_loops(sch.get_block("C"))
    jo, ji = sch.split(j, [None, lanes])
    sch.bind(i, "blockIdx.x")
    sch.bind(jo, "threadIdx.x")
    sch.vectorize(ji)
    return sch.func


def test_vector_loads_and_stores(tmp_path):
    four = lower(vector_add(3, 16, 4))
    cuda = gpu_source(four, "cuda").code
    opencl = gpu_source(four, "opencl").code
    assert "const float4 A_v = *(float4*)&A[i * 16 + j_0 * 4];" in cuda
    assert "*(float4*)&C[i * 16 + j_0 * 4] = make_float4(" in cuda
    assert "const float4 B_v = vload4(0, B + i * 16 + j_0 * 4);" in opencl
    assert "vstore4((float4)(" in opencl and "0, C + i * 16 + j_0 * 4);" in opencl
    # B[i, 0] is the same in every lane: a scalar load, not a vector one.
    assert "B[i * 16]" in cuda and "for (" not in cuda
    two = gpu_source(lower(vector_add(5, 6, 2, dtype="int32")), "opencl").code
    assert "const int2 A_v = vload2(0, A + i * 6 + j_0 * 2);" in two and "vstore2((int2)(" in two
    # Shifted by one, A's lanes start at an offset not known to be aligned: lane by lane,
    # while B and C stay vectors.
    shifted = gpu_source(lower(vector_add(3, 16, 4, shift=1)), "cuda").code
    assert "A_v" not in shifted and "*(float4*)&B[" in shifted
    assert "A[i * 17 + (j_0 * 4 + 1)]" in shifted
    # 10 columns in fours: a predicate guards the store, so an unrolled scalar loop.
    ragged = gpu_source(lower(vector_add(3, 10, 4)), "cuda").code
    assert "float4" not in ragged
    assert "#pragma unroll\n  for (int j_1 = 0; j_1 < 4; ++j_1) {" in ragged
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    for name, func in {"four": four, "shifted": lower(vector_add(3, 16, 4, shift=1)),
                       "two_int": lower(vector_add(5, 6, 2, dtype="int32")),
                       "ragged": lower(vector_add(3, 10, 4))}.items():
        path = tmp_path / f"{name}.cu"
        path.write_text(gpu_source(func, "cuda").code)
        for arch in ("sm_80", "sm_90"):
            done = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-o",
                                   str(path.with_suffix(f".{arch}.ptx")), str(path)],
                                  check=False, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{name} ({arch}):\n{done.stderr}"
