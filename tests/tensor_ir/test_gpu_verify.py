"""GPU kernel verification: per-block limits (threads, shared memory, registers from
``ptxas -v``) and global stores that ignore a launch axis.  Every CUDA source of the
hand-written schedules is compiled for sm_80 and sm_90 (nvcc -cubin goes through PTX and
ptxas; skipped without nvcc, no GPU needed)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.gpu_schedules import WORKLOADS, elementwise_add, tiled_matmul
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen import gpu_verify
from tensor_ir.codegen.gpu_c import GPUSource, gpu_source
from tensor_ir.codegen.gpu_verify import (
    CudaCompileError,
    GPUResourceError,
    RedundantStoreError,
    nvcc_available,
    parse_ptxas_output,
    ptxas_usage,
    redundant_global_stores,
    verify_gpu_kernel,
)
from tensor_ir.errors import BuildError
from tensor_ir.expr import And, Cmp, FloatImm, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import (
    SERIAL,
    THREAD_BINDING,
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    seq,
)
from tensor_ir.thread_reduce import lower_for_gpu
from tensor_ir.visitor import collect

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed (CUDA "
                                "toolkit); compiling for sm_80 / sm_90 needs no GPU")
ARCHS = ("sm_80", "sm_90")


def _lowered_workload(name: str) -> PrimFunc:
    func, _, _ = WORKLOADS[name](np.random.default_rng(0))
    return lower_for_gpu(func)


# -- ptxas output ------------------------------------------------------------------------------

PTXAS_TEXT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for floordiv_long_long
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'first' for 'sm_80'
ptxas info    : Function properties for first
    16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 376 bytes cmem[0]
ptxas info    : Compile time = 11.720 ms
ptxas info    : Compiling entry function 'second' for 'sm_80'
ptxas info    : Function properties for second
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 360 bytes cmem[0]
"""


def test_parse_ptxas_output_per_entry():
    usage = parse_ptxas_output(PTXAS_TEXT, "sm_80")
    # The device function's properties are not an entry's.
    assert set(usage) == {"first", "second"}
    first, second = usage["first"], usage["second"]
    assert (first.registers, first.shared_bytes, first.stack_bytes) == (255, 4096, 16)
    assert (first.spill_store_bytes, first.spill_load_bytes) == (24, 20)
    # No smem part on the line: the kernel uses none.
    assert (second.registers, second.shared_bytes, second.spill_store_bytes) == (12, 0, 0)
    assert second.arch == "sm_80"


# -- nvcc on every workload ---------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workloads_compile_and_pass_verification(name, arch):
    func = _lowered_workload(name)
    source = gpu_source(func, "cuda")
    usage = ptxas_usage(source.code, arch)
    assert set(usage) == {source.name}
    figures = usage[source.name]
    assert figures.arch == arch
    assert 0 < figures.registers <= 255
    assert figures.spill_store_bytes == figures.spill_load_bytes == 0
    report = verify_gpu_kernel(source, f"cuda -arch={arch}", func=func, use_ptxas=True)
    assert report.ptxas == figures
    # ptxas counts the same shared bytes as the IR's shared allocations and the source text.
    assert report.shared_bytes == figures.shared_bytes
    assert verify_gpu_kernel(source, f"cuda -arch={arch}", use_ptxas=False).shared_bytes == \
        figures.shared_bytes
    warps = -(-source.threads_per_block // 32)
    assert report.registers_per_block == figures.registers * 32 * warps


@needs_nvcc
def test_registers_per_block_limit_uses_ptxas_figure():
    func = _lowered_workload("add")
    source = gpu_source(func, "cuda")
    registers = ptxas_usage(source.code, "sm_80")["add"].registers
    # 8 threads take one warp of 32: registers * 32 must fit.
    limit = registers * 32 - 1
    with pytest.raises(GPUResourceError, match=rf"needs {registers * 32} registers per block "
                       rf".*registers_per_block {limit}") as err:
        verify_gpu_kernel(source, f"cuda -arch=sm_80 -registers-per-block={limit}", func=func)
    assert (err.value.limit, err.value.figure, err.value.allowed) == (
        "registers_per_block", registers * 32, limit)
    verify_gpu_kernel(source, f"cuda -arch=sm_80 -registers-per-block={limit + 1}", func=func)


@needs_nvcc
def test_ptxas_results_are_cached_per_source_and_arch(monkeypatch):
    code = gpu_source(_lowered_workload("row_sum"), "cuda").code
    first = ptxas_usage(code, "sm_80")

    def no_compiles(*args, **kwargs):
        raise AssertionError("nvcc ran again for a cached source")

    monkeypatch.setattr(gpu_verify.subprocess, "run", no_compiles)
    assert ptxas_usage(code, "sm_80") == first
    with pytest.raises(AssertionError, match="nvcc ran again"):
        ptxas_usage(code, "sm_86")


@needs_nvcc
def test_compile_error_carries_the_compiler_message():
    broken = GPUSource("bad", "cuda", 'extern "C" __global__ void bad(float* A) { A[0] = '
                       "undeclared_name; }\n", (), (1, 1, 1), (1, 1, 1))
    with pytest.raises(CudaCompileError, match="undeclared_name"):
        verify_gpu_kernel(broken, "cuda -arch=sm_80")


def test_missing_nvcc_is_a_typed_error(monkeypatch):
    monkeypatch.setattr(gpu_verify.shutil, "which", lambda name: None)
    source = gpu_source(_lowered_workload("add"), "cuda")
    code = source.code + "// not in the cache\n"
    with pytest.raises(CudaCompileError, match="nvcc is not on PATH"):
        ptxas_usage(code, "sm_80")
    # Without use_ptxas=True, a missing nvcc only skips the register check.
    report = verify_gpu_kernel(source, "cuda -arch=sm_80")
    assert report.ptxas is None and report.registers_per_block is None
    with pytest.raises(CudaCompileError, match="nvcc is not on PATH"):
        verify_gpu_kernel(GPUSource(source.name, "cuda", code, source.params, source.grid,
                                    source.block), "cuda -arch=sm_80", use_ptxas=True)


# -- threads and shared memory ------------------------------------------------------------------

@pytest.mark.parametrize("dialect", ["cuda", "opencl"])
def test_threads_per_block_limit(dialect):
    func = lower(elementwise_add(np.random.default_rng(0))[0])
    source = gpu_source(func, dialect)
    target = ("cuda -arch=sm_80 -max-threads-per-block=4" if dialect == "cuda"
              else "opencl -max-work-group-size=4")
    with pytest.raises(GPUResourceError, match=r"8 threads per block .*max_threads_per_block "
                                               r"4") as err:
        verify_gpu_kernel(source, target, func=func, use_ptxas=False)
    assert (err.value.limit, err.value.figure, err.value.allowed) == (
        "max_threads_per_block", 8, 4)


def _shared_allocations(func: PrimFunc) -> int:
    return sum(a.buffer.nbytes for a in collect(func.body, Allocate) if a.buffer.scope == "shared")


@pytest.mark.parametrize("dialect", ["cuda", "opencl"])
@pytest.mark.parametrize("with_func", [True, False])
def test_shared_memory_limit_from_func_or_source(dialect, with_func):
    func = lower(tiled_matmul(np.random.default_rng(0))[0])
    need = _shared_allocations(func)
    assert need > 0
    source = gpu_source(func, dialect)
    option = "-max-shared-memory-per-block" if dialect == "cuda" else "-local-memory-size"
    kind = "cuda -arch=sm_80" if dialect == "cuda" else "opencl"
    with pytest.raises(GPUResourceError, match=rf"{need} bytes of shared memory .*"
                                               rf"max_shared_memory_per_block {need - 1}") as err:
        verify_gpu_kernel(source, f"{kind} {option}={need - 1}",
                          func=func if with_func else None, use_ptxas=False)
    assert (err.value.limit, err.value.figure, err.value.allowed) == (
        "max_shared_memory_per_block", need, need - 1)
    report = verify_gpu_kernel(source, f"{kind} {option}={need}",
                               func=func if with_func else None, use_ptxas=False)
    assert report.shared_bytes == need


def test_refuses_non_gpu_targets_and_ptxas_on_opencl():
    func = _lowered_workload("add")
    with pytest.raises(BuildError, match="not a GPU target"):
        verify_gpu_kernel(gpu_source(func, "cuda"), "llvm")
    with pytest.raises(BuildError, match="got a opencl source"):
        verify_gpu_kernel(gpu_source(func, "opencl"), "cuda -arch=sm_80", use_ptxas=True)


# -- stores that ignore a launch axis -----------------------------------------------------------

def _kernel(body, *params) -> PrimFunc:
    return PrimFunc(tuple(params), body, "k", (("lowered", True),))


def _bound(var, extent, axis, body):
    return For(var, IntImm(0), IntImm(extent), THREAD_BINDING, body, axis)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workloads_store_along_every_axis(name):
    assert redundant_global_stores(_lowered_workload(name)) == ()


def test_unbound_loop_repeated_by_every_thread_is_refused():
    # for tx in threadIdx.x(4): for i in range(16): A[i] = 1 -- each thread writes all of A.
    a = decl_buffer((16,), "float32", "A")
    tx, i = Var("tx"), Var("i")
    body = _bound(tx, 4, "threadIdx.x",
                  For(i, IntImm(0), IntImm(16), SERIAL, BufferStore(a, FloatImm(1.0), (i,))))
    func = _kernel(body, a)
    assert redundant_global_stores(func) == (("A", ("threadIdx.x",)),)
    source = gpu_source(func, "opencl")
    with pytest.raises(RedundantStoreError, match=r"A ignores threadIdx.x") as err:
        verify_gpu_kernel(source, "opencl", func=func)
    assert err.value.stores == (("A", ("threadIdx.x",)),)
    # The same loop bound to the thread axis is fine.
    fixed = _kernel(_bound(i, 16, "threadIdx.x", BufferStore(a, FloatImm(1.0), (i,))), a)
    assert redundant_global_stores(fixed) == ()


def test_store_ignoring_a_block_axis_and_one_of_two_thread_axes():
    a = decl_buffer((4, 4), "float32", "A")
    bx, ty, tx = Var("bx"), Var("ty"), Var("tx")
    body = _bound(bx, 2, "blockIdx.x", _bound(ty, 4, "threadIdx.y", _bound(
        tx, 4, "threadIdx.x", BufferStore(a, FloatImm(1.0), (ty, IntImm(0))))))
    assert redundant_global_stores(_kernel(body, a)) == (("A", ("blockIdx.x", "threadIdx.x")),)


def test_store_outside_the_thread_loop_is_repeated_by_every_thread():
    a = decl_buffer((8,), "float32", "A")
    b = decl_buffer((2,), "float32", "B")
    bx, tx = Var("bx"), Var("tx")
    body = _bound(bx, 2, "blockIdx.x", seq(
        _bound(tx, 4, "threadIdx.x", BufferStore(a, FloatImm(1.0), (bx * 4 + tx,))),
        BufferStore(b, FloatImm(2.0), (bx,))))
    assert redundant_global_stores(_kernel(body, a, b)) == (("B", ("threadIdx.x",)),)


def test_guard_pinning_one_thread_makes_the_store_unique():
    # The epilogue of a cross-thread reduction: one thread writes the block's result.
    b = decl_buffer((2,), "float32", "B")
    bx, tx = Var("bx"), Var("tx")

    def kernel(cond):
        return _kernel(_bound(bx, 2, "blockIdx.x", _bound(tx, 32, "threadIdx.x", IfThenElse(
            cond, BufferStore(b, FloatImm(1.0), (bx,))))), b)

    assert redundant_global_stores(kernel(Cmp("==", tx, IntImm(0)))) == ()
    assert redundant_global_stores(kernel(Cmp("==", IntImm(3), tx))) == ()
    assert redundant_global_stores(kernel(Cmp("<", tx, IntImm(1)))) == ()
    assert redundant_global_stores(kernel(And(Cmp(">=", tx, IntImm(5)),
                                              Cmp("<=", tx, IntImm(5))))) == ()
    # Guards that leave several threads writing do not make the address depend on tx.
    for cond in (Cmp("<", tx, IntImm(2)), Cmp("!=", tx, IntImm(0)),
                 Cmp("==", tx, tx * 1)):
        assert redundant_global_stores(kernel(cond)) == (("B", ("threadIdx.x",)),), cond
    # The else branch of a pinning guard runs on all the other threads.
    else_store = _kernel(_bound(bx, 2, "blockIdx.x", _bound(tx, 32, "threadIdx.x", IfThenElse(
        Cmp("==", tx, IntImm(0)), BufferStore(b, FloatImm(1.0), (bx,)),
        BufferStore(b, FloatImm(2.0), (bx,))))), b)
    assert redundant_global_stores(else_store) == (("B", ("threadIdx.x",)),)


def test_dependence_through_lets_and_thread_dependent_loop_bounds():
    a = decl_buffer((16,), "float32", "A")
    tx, base, i = Var("tx"), Var("base"), Var("i")
    # for tx: let base = tx * 4 in for i in range(base, base + 4): A[i] = 1 -- each thread its
    # own four elements.
    body = _bound(tx, 4, "threadIdx.x", LetStmt(base, tx * 4, For(
        i, base, IntImm(4), SERIAL, BufferStore(a, FloatImm(1.0), (i,)))))
    assert redundant_global_stores(_kernel(body, a)) == ()


def test_local_and_shared_stores_and_extent_one_axes_are_not_checked():
    a = decl_buffer((4,), "float32", "A")
    acc = decl_buffer((1,), "float32", "acc", scope="local")
    tile = decl_buffer((4,), "float32", "tile", scope="shared")
    tx, ty = Var("tx"), Var("ty")
    body = _bound(ty, 1, "threadIdx.y", _bound(tx, 4, "threadIdx.x", Allocate(acc, Allocate(
        tile, seq(BufferStore(acc, FloatImm(0.0), (IntImm(0),)),
                  BufferStore(tile, FloatImm(1.0), (IntImm(0),)),
                  BufferStore(a, FloatImm(2.0), (tx,)))))))
    assert redundant_global_stores(_kernel(body, a)) == ()


def test_shared_stores_checked_on_request_against_thread_axes_only():
    # A cooperative fetch whose row loop stays serial: every threadIdx.y thread fills every
    # row of the tile.
    a = decl_buffer((4, 4), "float32", "A")
    tile = decl_buffer((4, 4), "float32", "tile", scope="shared")
    bx, ty, tx, r = Var("bx"), Var("ty"), Var("tx"), Var("r")
    fetch = For(r, IntImm(0), IntImm(4), SERIAL,
                BufferStore(tile, a[r, tx], (r, tx)))
    body = _bound(bx, 2, "blockIdx.x", Allocate(tile, _bound(ty, 4, "threadIdx.y", _bound(
        tx, 4, "threadIdx.x", seq(fetch, BufferStore(a, tile[ty, tx], (ty, tx)))))))
    func = _kernel(body, a)
    # The global store ignores blockIdx.x; the shared one is reported only on request, and
    # not for blockIdx.x (each block has its own tile).
    assert redundant_global_stores(func) == (("A", ("blockIdx.x",)),)
    assert redundant_global_stores(func, ("global", "shared")) == (
        ("tile", ("threadIdx.y",)), ("A", ("blockIdx.x",)))


def test_the_verify_path_runs_the_store_check_only_with_func():
    a = decl_buffer((16,), "float32", "A")
    tx, i = Var("tx"), Var("i")
    func = _kernel(_bound(tx, 4, "threadIdx.x", For(
        i, IntImm(0), IntImm(16), SERIAL, BufferStore(a, FloatImm(1.0), (i,)))), a)
    source = gpu_source(func, "cuda")
    report = verify_gpu_kernel(source, "cuda -arch=sm_80", use_ptxas=False)
    assert report.threads_per_block == 4
    with pytest.raises(RedundantStoreError):
        verify_gpu_kernel(source, "cuda -arch=sm_80", func=func, use_ptxas=False)
    # One kernel's statement stands for the function (several kernels per function).
    with pytest.raises(RedundantStoreError, match="A ignores threadIdx.x"):
        verify_gpu_kernel(source, "cuda -arch=sm_80", func=func.body, use_ptxas=False)

