"""Functions printed as several kernels (one per top-level nest, each with its own launch
configuration), launched in order on the same device buffers, against numpy; the CUDA text of
every kernel compiled by nvcc.

NOTE: ``bind`` refuses, for now, two loops bound to one axis with different extents anywhere in
the function, even in nests that become different kernels; :func:`_rebind` binds the second
stage's loops by rebuilding the function.  Once ``bind`` accepts it, it becomes ``sch.bind``.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from benchmarks.gpu_schedules import bind_flat
from schedules.schedule import Schedule
from tensor_ir import te
from tensor_ir.codegen.gpu_c import GPUModule, gpu_module, gpu_source
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import THREAD_BINDING, For
from tensor_ir.thread_reduce import lower_for_gpu

from ..opencl_support import pocl_or_default, require_opencl


def _rebind(sch: Schedule, binds) -> PrimFunc:
    """``sch.func`` after binding each (loop, axis) of ``binds`` through ``Schedule.bind``."""
    for loop, axis in binds:
        sch.bind(loop, axis)
    return sch.func


def scale_then_row_sum(rows: int, cols: int, flat_threads: int, row_threads: int) -> PrimFunc:
    """T = 2 A (flattened over blocks of ``flat_threads``), then B[i] = sum_k T[i, k] (rows over
    blocks of ``row_threads``): two kernels, T a device temporary between them."""
    a = te.placeholder((rows, cols), name="A")
    t = te.compute((rows, cols), lambda i, j: a[i, j] * 2.0, name="T")
    k = te.reduce_axis((0, cols), name="k")
    b = te.compute((rows,), lambda i: te.sum(t[i, k], axis=k), name="B")
    sch = Schedule(te.create_prim_func([a, b], name="scale_sum"))
    bind_flat(sch, "T", flat_threads)
    i, _ = sch.get_loops(sch.get_block("B"))
    io, ii = sch.split(i, [None, row_threads])
    return _rebind(sch, [(io, "blockIdx.x"), (ii, "threadIdx.x")])


def three_stages(n: int, threads) -> PrimFunc:
    """C = A + 1, D = C * C, E = D - A: three kernels, two temporaries, each stage bound with
    its own thread count."""
    a = te.placeholder((n,), name="A")
    c = te.compute((n,), lambda i: a[i] + 1.0, name="C")
    d = te.compute((n,), lambda i: c[i] * c[i], name="D")
    e = te.compute((n,), lambda i: d[i] - a[i], name="E")
    sch = Schedule(te.create_prim_func([a, e], name="three"))
    binds = []
    for name, count in zip("CDE", threads):
        (loop,) = sch.get_loops(sch.get_block(name))
        outer, inner = sch.split(loop, [None, count])
        binds += [(outer, "blockIdx.x"), (inner, "threadIdx.x")]
    return _rebind(sch, binds)


def test_module_structure():
    module = gpu_module(lower_for_gpu(scale_then_row_sum(7, 9, 16, 4)), "opencl")
    assert isinstance(module, GPUModule)
    assert [k.name for k in module.kernels] == ["scale_sum_kernel0", "scale_sum_kernel1"]
    first, second = module.kernels
    assert first.grid == (4, 1, 1) and first.block == (16, 1, 1)  # 63 elements by 16
    assert second.grid == (2, 1, 1) and second.block == (4, 1, 1)  # 7 rows by 4
    assert [(p.name, p.written) for p in module.params] == [("A", False), ("B", True)]
    assert [(t.name, t.shape, t.dtype) for t in module.temps] == [("T", (7, 9), "float32")]
    # Kernel 0 reads A and writes T; kernel 1 reads T and writes B.
    names = [b.name for b in module.buffers]
    assert [names[i] for i in first.buffers] == ["A", "T"]
    assert [names[i] for i in second.buffers] == ["B", "T"]
    assert [p.name for p in second.params] == ["B", "T"]
    # Each kernel's code stands alone; the module's holds both.
    assert "__kernel void scale_sum_kernel0(" in first.code and "kernel1" not in first.code
    assert module.code.count("__kernel void") == 2


def test_gpu_source_refuses_a_multi_kernel_function():
    with pytest.raises(BuildError, match="function scale_sum is 2 kernels with global "
                                         "temporaries T; print it with gpu_module"):
        gpu_source(lower_for_gpu(scale_then_row_sum(7, 9, 16, 4)), "cuda")


def test_single_kernel_functions_are_one_kernel_modules():
    from benchmarks.gpu_schedules import elementwise_add

    func, _, _ = elementwise_add(np.random.default_rng(0))
    module = gpu_module(lower_for_gpu(func), "cuda")
    assert len(module.kernels) == 1 and module.temps == ()
    assert module.kernels[0] == gpu_source(lower_for_gpu(func), "cuda")
    assert module.kernels[0].buffers == ()


@pytest.mark.parametrize("rows,cols,flat,row", [(7, 9, 16, 4), (16, 3, 8, 16), (5, 33, 32, 2)])
def test_two_kernels_match_numpy(rows, cols, flat, row):
    require_opencl()
    import autotune

    kernel = autotune.build(scale_then_row_sum(rows, cols, flat, row), target=pocl_or_default())
    assert "scale_sum_kernel1" in kernel.get_source()
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype("float32")
    out = np.zeros(rows, "float32")
    kernel(x, out)
    np.testing.assert_allclose(out, 2 * x.sum(axis=1), rtol=1e-5, atol=1e-5)
    # A second call starts over (the accumulation is into B, re-initialised by the kernel).
    kernel(x, out)
    np.testing.assert_allclose(out, 2 * x.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert len(kernel.time(x, out, repeat=2, min_repeat_ms=1.0)) == 2


@pytest.mark.parametrize("n,threads", [(37, (8, 16, 4)), (64, (32, 8, 64)), (5, (2, 4, 8))])
def test_three_kernels_match_numpy(n, threads):
    require_opencl()
    import autotune

    func = three_stages(n, threads)
    module = gpu_module(lower_for_gpu(func), "opencl")
    assert [k.block[0] for k in module.kernels] == list(threads)
    assert [t.name for t in module.temps] == ["C", "D"]
    x = np.random.default_rng(n).standard_normal(n).astype("float32")
    out = np.zeros(n, "float32")
    autotune.build(func, target=pocl_or_default())(x, out)
    np.testing.assert_allclose(out, (x + 1) * (x + 1) - x, rtol=1e-5, atol=1e-6)


def test_refuses_a_shared_buffer_used_by_two_kernels():
    from tensor_ir.buffer import decl_buffer
    from tensor_ir.expr import FloatImm, IntImm, Var
    from tensor_ir.stmt import Allocate, BufferStore, seq

    a = decl_buffer((4,), "float32", "A")
    s = decl_buffer((4,), "float32", "S", scope="shared")
    i, j = Var("i"), Var("j")
    body = Allocate(s, seq(
        For(i, IntImm(0), IntImm(4), THREAD_BINDING, BufferStore(s, FloatImm(1.0), (i,)),
            "threadIdx.x"),
        For(j, IntImm(0), IntImm(4), THREAD_BINDING, BufferStore(a, s[j], (j,)),
            "threadIdx.x")))
    func = PrimFunc((a,), body, "k", (("lowered", True),))
    with pytest.raises(BuildError, match="buffer S \\(scope shared\\) is used by 2 kernels"):
        gpu_module(func, "opencl")


def test_cuda_kernels_compile(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    for name, func in {"scale_sum": scale_then_row_sum(7, 9, 16, 4),
                       "three": three_stages(37, (8, 16, 4))}.items():
        module = gpu_module(lower_for_gpu(func), "cuda")
        path = tmp_path / f"{name}.cu"
        path.write_text(module.code)
        for arch in ("sm_80", "sm_90"):
            done = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-o",
                                   str(path.with_suffix(f".{arch}.ptx")), str(path)],
                                  check=False, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{name} ({arch}):\n{done.stderr}\n{module.code}"
