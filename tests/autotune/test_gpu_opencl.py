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

from autotune.gpu import GPUKernel, build_gpu, opencl_available  # noqa: E402

pytestmark = pytest.mark.skipif(not opencl_available(), reason="no OpenCL device (PoCL)")


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_runs_and_matches_numpy(name):
    func, arrays, expected = WORKLOADS[name](np.random.default_rng(1))
    kernel = autotune.build(func, target="opencl")
    assert isinstance(kernel, GPUKernel)
    kernel(*arrays)
    for index, reference in expected.items():
        np.testing.assert_allclose(arrays[index], reference, rtol=1e-5, atol=1e-6)


def test_get_source_and_argument_checks():
    func, arrays, _ = elementwise_add(np.random.default_rng(2))
    kernel = build_gpu(func, "opencl")
    assert kernel.get_source().startswith("__kernel void add(")
    with pytest.raises(BuildError, match="argument B must be float32"):
        kernel(arrays[0], arrays[1][:3], arrays[2])
    with pytest.raises(BuildError, match="takes 3 arrays"):
        kernel(arrays[0])


def test_target_limits_refuse_large_work_groups():
    func, _, _ = elementwise_add(np.random.default_rng(3))
    with pytest.raises(BuildError, match="above the target's 4"):
        autotune.build(func, target="opencl -max-work-group-size=4")


def test_build_gpu_refuses_other_targets():
    func, _, _ = elementwise_add(np.random.default_rng(4))
    with pytest.raises(TargetError, match="llvm target"):
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
    autotune.build(sch.func, target="opencl")(data, out)
    np.testing.assert_array_equal(out, np.maximum(data, 0) + np.minimum(data, 1))
