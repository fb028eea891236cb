"""OpenCL kernels run on PoCL (OpenCL on the CPU: work-groups, local memory and barriers are
real) through ``autotune.build(func, "opencl")``, each compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from benchmarks.gpu_schedules import WORKLOADS, elementwise_add
from tensor_ir.errors import BuildError
from tensor_ir.target import Target, TargetError

pytest.importorskip("pyopencl")

from autotune.backends import build_gpu
from autotune.runtime.opencl import GPUKernel

from ..opencl_support import RUN_TARGET, needs_opencl_run

# On the default OpenCL device, else on Oclgrind (see tests/opencl_support.py).
pytestmark = needs_opencl_run


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_runs_and_matches_numpy(name):
    func, arrays, expected = WORKLOADS[name](np.random.default_rng(1))
    kernel = autotune.build(func, target=RUN_TARGET)
    assert isinstance(kernel, GPUKernel)
    kernel(*arrays)
    for index, reference in expected.items():
        np.testing.assert_allclose(arrays[index], reference, rtol=1e-5, atol=1e-6)


def test_get_source_and_argument_checks():
    func, arrays, _ = elementwise_add(np.random.default_rng(2))
    kernel = build_gpu(func, RUN_TARGET)
    assert kernel.get_source().startswith("__kernel void add(")
    with pytest.raises(BuildError, match="argument B must be float32"):
        kernel(arrays[0], arrays[1][:3], arrays[2])
    with pytest.raises(BuildError, match="takes 3 arrays"):
        kernel(arrays[0])


def test_target_limits_refuse_large_work_groups():
    func, _, _ = elementwise_add(np.random.default_rng(3))
    with pytest.raises(BuildError, match="above the target's 4"):
        autotune.build(func, target=f"{RUN_TARGET} -max-work-group-size=4")


def test_build_gpu_refuses_other_targets():
    func, _, _ = elementwise_add(np.random.default_rng(4))
    with pytest.raises(TargetError, match="served by the llvm backend"):
        build_gpu(func, "llvm")


def test_opencl_target_facts():
    target = Target("opencl -local-memory-size=32K")
    assert target.kind == "opencl" and target.is_gpu and not target.is_cpu
    assert target.max_shared_memory_per_block == 32 * 1024
    assert target.max_threads_per_block >= 1
    assert str(target) == "opencl -local-memory-size=32K"
    assert Target(str(target)) == target
    with pytest.raises(TargetError, match="unknown option -arch"):
        Target("opencl -arch=sm_80")


def test_min_and_max_propagate_nan_like_numpy():
    from benchmarks.gpu_schedules import bind_flat
    from schedules.schedule import Schedule
    from tensor_ir import te

    x = te.placeholder((4, 6), name="X")
    y = te.compute((4, 6), lambda i, j: te.max(x[i, j], 0.0) + te.min(x[i, j], 1.0), name="Y")
    sch = Schedule(te.create_prim_func([x, y], name="clipped"))
    bind_flat(sch, "Y", 8)
    data = np.random.default_rng(5).standard_normal((4, 6)).astype("float32")
    data[0, :3] = [np.nan, np.inf, -np.inf]
    out = np.zeros_like(data)
    autotune.build(sch.func, target=RUN_TARGET)(data, out)
    np.testing.assert_array_equal(out, np.maximum(data, 0) + np.minimum(data, 1))


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("n,m,k,vthreads", [(16, 16, 8, 2), (13, 10, 7, 2), (8, 27, 5, 3)])
def test_vthread_matmul_matches_numpy(n, m, k, vthreads, cache):
    from tests.tensor_ir.test_gpu_c import vthread_matmul

    func = vthread_matmul(n, m, k, vthreads, cache=cache)
    rng = np.random.default_rng(n * m + k)
    x = rng.standard_normal((n, k)).astype("float32")
    y = rng.standard_normal((k, m)).astype("float32")
    out = np.zeros((n, m), "float32")
    kernel = autotune.build(func, target=RUN_TARGET)
    # The vthread loops are unrolled, inside the thread's launch indices.
    assert kernel.get_source().count("#pragma unroll") >= 2
    kernel(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,k,m", [(9, 6, 11), (8, 16, 8), (3, 37, 5)])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_int8_matmul_accumulates_in_int32(n, k, m, dtype):
    from tests.tensor_ir.test_gpu_c import typed_matmul

    func = typed_matmul(n, k, m, dtype, "int32")
    rng = np.random.default_rng(n + k + m)
    low, high = (-128, 128) if dtype == "int8" else (0, 256)
    x = rng.integers(low, high, (n, k)).astype(dtype)
    y = rng.integers(low, high, (k, m)).astype(dtype)
    out = np.zeros((n, m), "int32")
    autotune.build(func, target=RUN_TARGET)(x, y, out)
    # Products of int8 overflow int8 and their sums int16: exact only in int32.
    np.testing.assert_array_equal(out, x.astype("int32") @ y.astype("int32"))


def test_float16_needs_cl_khr_fp16():
    from autotune.runtime.opencl import _context
    from tests.tensor_ir.test_gpu_c import typed_matmul

    func = typed_matmul(9, 6, 11, "float16", "float16")
    context, _ = _context(dict(Target(RUN_TARGET).options).get("platform"))
    if "cl_khr_fp16" not in context.devices[0].extensions.split():
        with pytest.raises(BuildError, match="lacks the cl_khr_fp16 extension"):
            autotune.build(func, target=RUN_TARGET)
        return
    rng = np.random.default_rng(6)
    x = rng.standard_normal((9, 6)).astype("float16")
    y = rng.standard_normal((6, 11)).astype("float16")
    out = np.zeros((9, 11), "float16")
    autotune.build(func, target=RUN_TARGET)(x, y, out)
    want = x.astype("float32") @ y.astype("float32")
    np.testing.assert_allclose(out.astype("float32"), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("rows,cols,lanes,shift,dtype", [
    (3, 16, 4, 0, "float32"), (3, 16, 4, 1, "float32"), (3, 10, 4, 0, "float32"),
    (5, 6, 2, 0, "int32"), (4, 7, 2, 1, "float32"), (2, 32, 4, 0, "int32")])
def test_vectorized_loops_match_numpy(rows, cols, lanes, shift, dtype):
    from tests.tensor_ir.test_gpu_c import vector_add

    rng = np.random.default_rng(rows * cols)
    x = (rng.standard_normal((rows, cols + shift)) * 10).astype(dtype)
    y = (rng.standard_normal((rows, cols)) * 10).astype(dtype)
    out = np.zeros((rows, cols), dtype)
    kernel = autotune.build(vector_add(rows, cols, lanes, shift, dtype), target=RUN_TARGET)
    assert (f"vstore{lanes}" in kernel.get_source()) == (cols % lanes == 0)
    kernel(x, y, out)
    want = x[:, shift:] * np.array(2, dtype) + y + y[:, :1]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_build_refuses_a_loop_every_thread_would_repeat():
    # Rows over blocks, and a thread loop whose index the store does not use: all four threads
    # of a block would write the whole row.  No primitive makes such a loop (bind refuses a
    # loop that carries a dependence), so it is wrapped around the row by hand.
    from schedules.schedule import Schedule
    from tensor_ir import te
    from tensor_ir.codegen.gpu_verify import RedundantStoreError
    from tensor_ir.expr import IntImm, Var
    from tensor_ir.func import PrimFunc
    from tensor_ir.stmt import THREAD_BINDING, For
    from tensor_ir.visitor import transform

    a = te.placeholder((6, 5), name="A")
    c = te.compute((6, 5), lambda i, j: a[i, j] * 2.0, name="C")
    sch = Schedule(te.create_prim_func([a, c], name="repeat"))
    sch.bind(sch.get_loops(sch.get_block("C"))[0], "blockIdx.x")

    def wrap(n):
        if isinstance(n, For) and n.thread_binding == "blockIdx.x":
            threads = For(Var("tx"), IntImm(0), IntImm(4), THREAD_BINDING, n.body,
                          "threadIdx.x")
            return For(n.loop_var, n.min, n.extent, n.kind, threads, n.thread_binding)
        return None

    func = sch.func
    broken = PrimFunc(func.params, transform(func.body, wrap), func.name, func.attrs)
    with pytest.raises(RedundantStoreError, match=r"C.*threadIdx\.x"):
        build_gpu(broken, RUN_TARGET)
