"""Cross-thread reductions (tensor_ir.thread_reduce): rows reduced by the threads of a block,
run through OpenCL (PoCL where present) against numpy, and the CUDA text compiled by nvcc.

NOTE: ``bind`` refuses, for now, a loop that feeds a reduce iteration variable, so
:func:`bind_reduce` rebuilds the function with that loop thread-bound itself, after every other
primitive has run.  Once ``bind`` accepts it, ``bind_reduce`` becomes ``sch.bind``.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from schedules.schedule import Schedule
from tensor_ir import te
from tensor_ir.codegen.gpu_c import gpu_source
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import For
from tensor_ir.thread_reduce import lower_cross_thread_reductions, lower_for_gpu
from tensor_ir.visitor import collect

from ..opencl_support import pocl_or_default, require_opencl


def bind_reduce(sch: Schedule, binds) -> PrimFunc:
    """``sch.func`` after binding each (loop, axis) of ``binds`` through ``Schedule.bind``."""
    for loop, axis in binds:
        sch.bind(loop, axis)
    return sch.func


def row_reduce(rows: int, cols: int, threads: int, kind: str = "sum", dtype="float32"):
    """out[i] = reduce_k A[i, k]: rows over blockIdx.x, k split [None, threads] with the inner
    part over threadIdx.x."""
    a = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    if kind == "prod":
        reducer = te.comm_reducer(lambda x, y: x * y, lambda t: 1, name="prod")
    else:
        reducer = {"sum": te.sum, "max": te.max, "min": te.min}[kind]
    b = te.compute((rows,), lambda i: reducer(a[i, k], axis=k), name="B")
    sch = Schedule(te.create_prim_func([a, b], name=f"row_{kind}"))
    i, kk = sch.get_loops(sch.get_block("B"))
    _, ki = sch.split(kk, [None, threads])
    sch.bind(i, "blockIdx.x")
    return bind_reduce(sch, [(ki, "threadIdx.x")])


def _numpy_reduce(kind: str, x: np.ndarray) -> np.ndarray:
    return {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[kind](x, axis=1)


def _run(func: PrimFunc, arrays) -> None:
    import autotune

    autotune.build(func, target=pocl_or_default())(*arrays)


def _nvcc(code: str, tmp_path, name: str) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    path = tmp_path / f"{name}.cu"
    path.write_text(code)
    for arch in ("sm_80", "sm_90"):
        done = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-o",
                               str(path.with_suffix(f".{arch}.ptx")), str(path)],
                              check=False, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{name} ({arch}):\n{done.stderr}\n{code}"


# -- the rewrite ----------------------------------------------------------------------------------

def test_rewrite_shape_of_a_row_sum():
    func = row_reduce(5, 37, 8)
    out = lower_cross_thread_reductions(func)
    text = str(out)
    # A per-thread accumulator, a shared row of 8 partial sums, three tree steps, one write.
    assert "alloc B_red_local: local float32[1]" in text
    assert "alloc B_red_shared: shared float32[1, 8]" in text
    for half in (4, 2, 1):
        assert f"if k_1 < {half}:" in text
    assert "if k_1 == 0:" in text
    # The threadIdx loop now encloses the serial k_0 loop.
    loops = [f for f in collect(out.body, For)]
    names = [f.loop_var.name for f in loops]
    assert names.index("k_1") < names.index("k_0")
    # No reduction block is left with a thread-bound reduce loop.
    assert "init:" not in text


def test_functions_without_thread_reductions_are_unchanged():
    from benchmarks.gpu_schedules import row_sum, tiled_matmul

    for make in (row_sum, tiled_matmul):
        func, _, _ = make(np.random.default_rng(0))
        assert lower_cross_thread_reductions(func) is func


def test_lowered_functions_pass_through_lower_for_gpu_and_are_refused_by_the_pass():
    func = row_reduce(3, 10, 4)
    lowered = lower_for_gpu(func)
    assert lower_for_gpu(lowered) is lowered
    with pytest.raises(BuildError, match="already lowered"):
        lower_cross_thread_reductions(lowered)


def test_cpu_lowering_keeps_the_serial_reduction():
    # The pass belongs to the GPU build only: lower() alone leaves the accumulation in place.
    text = str(lower(row_reduce(3, 10, 4)))
    assert "_red_shared" not in text and "B[i] = B[i] + A[" in text


def test_refuses_a_non_commutative_combiner():
    a = te.placeholder((4, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    minus = te.comm_reducer(lambda x, y: x - y, lambda t: 0, name="minus")
    b = te.compute((4,), lambda i: minus(a[i, k], axis=k), name="Acc")
    sch = Schedule(te.create_prim_func([a, b], name="bad"))
    i, kk = sch.get_loops(sch.get_block("Acc"))
    sch.bind(i, "blockIdx.x")
    func = bind_reduce(sch, [(kk, "threadIdx.x")])
    with pytest.raises(BuildError, match="combiner of reduction block Acc"):
        lower_cross_thread_reductions(func)


def test_refuses_a_spatial_loop_between_reduce_loops():
    a = te.placeholder((4, 6, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    b = te.compute((4, 6), lambda i, j: te.sum(a[i, j, k], axis=k), name="B")
    sch = Schedule(te.create_prim_func([a, b], name="bad"))
    i, j, kk = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(i, ko, j, ki)
    sch.bind(i, "blockIdx.x")
    func = bind_reduce(sch, [(ki, "threadIdx.x")])
    with pytest.raises(BuildError, match="block B: loop k_0 feeds a reduce"):
        lower_cross_thread_reductions(func)


# -- on OpenCL ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("rows,cols,threads", [(5, 37, 8), (3, 64, 32), (4, 7, 16), (2, 50, 6)])
def test_row_reductions_match_numpy(kind, rows, cols, threads):
    require_opencl()
    func = row_reduce(rows, cols, threads, kind)
    rng = np.random.default_rng(rows * cols + threads)
    if kind == "prod":
        x = rng.uniform(0.8, 1.25, (rows, cols)).astype("float32")
    else:
        x = rng.standard_normal((rows, cols)).astype("float32")
    out = np.full(rows, 123.0, "float32")
    _run(func, [x, out])
    np.testing.assert_allclose(out, _numpy_reduce(kind, x), rtol=1e-5, atol=1e-5)


def test_int32_sum_across_threads():
    require_opencl()
    func = row_reduce(3, 45, 16, "sum", "int32")
    x = np.random.default_rng(3).integers(-1000, 1000, (3, 45)).astype("int32")
    out = np.zeros(3, "int32")
    _run(func, [x, out])
    np.testing.assert_array_equal(out, x.sum(axis=1))


def _rows_on_threads_y(rows: int, cols: int, ty: int, tx: int, init=None):
    """Rows split [None, ty] over blockIdx.x / threadIdx.y, k split [None, tx] with the inner
    part over threadIdx.x: several rows per block, each reduced by its own row of threads."""
    a = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    b = te.compute((rows,), lambda i: te.sum(a[i, k] * a[i, k], axis=k, init=init), name="B")
    sch = Schedule(te.create_prim_func([a, b], name="sumsq"))
    i, kk = sch.get_loops(sch.get_block("B"))
    io, ii = sch.split(i, [None, ty])
    _, ki = sch.split(kk, [None, tx])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    return bind_reduce(sch, [(ki, "threadIdx.x")])


@pytest.mark.parametrize("rows,cols,ty,tx", [(10, 33, 4, 8), (7, 5, 2, 8), (8, 64, 4, 16)])
def test_several_rows_per_block_on_threadidx_y(rows, cols, ty, tx):
    require_opencl()
    func = _rows_on_threads_y(rows, cols, ty, tx)
    assert f"shared float32[{ty}, {tx}]" in str(lower_cross_thread_reductions(func))
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype("float32")
    out = np.zeros(rows, "float32")
    _run(func, [x, out])
    np.testing.assert_allclose(out, (x * x).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_init_value_other_than_the_identity_is_combined_once():
    require_opencl()
    func = _rows_on_threads_y(5, 19, 2, 4, init=10.0)
    x = np.random.default_rng(9).standard_normal((5, 19)).astype("float32")
    out = np.zeros(5, "float32")
    _run(func, [x, out])
    np.testing.assert_allclose(out, 10.0 + (x * x).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_where_clause_max():
    require_opencl()
    a = te.placeholder((4, 30), name="A")
    k = te.reduce_axis((0, 30), name="k")
    b = te.compute((4,), lambda i: te.max(a[i, k], axis=k, where=a[i, k] < 0.5), name="B")
    sch = Schedule(te.create_prim_func([a, b], name="masked_max"))
    i, kk = sch.get_loops(sch.get_block("B"))
    _, ki = sch.split(kk, [None, 8])
    sch.bind(i, "blockIdx.x")
    func = bind_reduce(sch, [(ki, "threadIdx.x")])
    x = np.random.default_rng(4).standard_normal((4, 30)).astype("float32")
    out = np.zeros(4, "float32")
    _run(func, [x, out])
    np.testing.assert_allclose(out, np.where(x < 0.5, x, -np.inf).max(axis=1), rtol=1e-5)


def softmax(rows: int, cols: int, threads: int, scope: str) -> PrimFunc:
    """Row softmax, one row per block: the row max and the row sum are cross-thread
    reductions kept in ``scope``; the exp pass and the division read them in every thread."""
    a = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    mx = te.compute((rows,), lambda i: te.max(a[i, k], axis=k), name="M")
    k2 = te.reduce_axis((0, cols), name="k2")
    s = te.compute((rows,), lambda i: te.sum(te.exp(a[i, k2] - mx[i]), axis=k2), name="S")
    out = te.compute((rows, cols), lambda i, j: te.exp(a[i, j] - mx[i]) / s[i], name="Out")
    sch = Schedule(te.create_prim_func([a, out], name="softmax"))
    i, j = sch.get_loops(sch.get_block("Out"))
    sch.bind(i, "blockIdx.x")
    _, ji = sch.split(j, [None, threads])
    sch.bind(ji, "threadIdx.x")
    binds = []
    for name in ("S", "M"):
        block = sch.get_block(name)
        sch.compute_at(block, i)
        sch.set_scope(block, 0, scope)
        kk = sch.get_loops(block)[-1]  # (i, ax0 of extent 1, k)
        _, ki = sch.split(kk, [None, threads])
        binds.append((ki, "threadIdx.x"))
    return bind_reduce(sch, binds)


@pytest.mark.parametrize("scope", ["shared", "local"])
@pytest.mark.parametrize("rows,cols,threads", [(3, 37, 8), (2, 64, 32), (4, 5, 16)])
def test_softmax_rows(scope, rows, cols, threads):
    require_opencl()
    func = softmax(rows, cols, threads, scope)
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype("float32") * 3
    out = np.zeros((rows, cols), "float32")
    _run(func, [x, out])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


# -- CUDA -----------------------------------------------------------------------------------------

def test_cuda_sources_compile(tmp_path):
    funcs = {"row_sum": row_reduce(5, 37, 8), "row_max": row_reduce(4, 7, 16, "max"),
             "row_prod_int": row_reduce(3, 40, 6, "prod", "int32"),
             "row_max_half": row_reduce(4, 7, 16, "max", "float16"),
             "rows_y": _rows_on_threads_y(10, 33, 4, 8),
             "softmax_shared": softmax(3, 37, 32, "shared"),
             "softmax_local": softmax(3, 37, 32, "local")}
    for name, func in funcs.items():
        src = gpu_source(lower_for_gpu(func), "cuda")
        assert src.code.count("__syncthreads();") >= 2
        _nvcc(src.code, tmp_path, name)
