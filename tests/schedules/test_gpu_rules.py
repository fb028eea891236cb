"""The GPU design space (schedules/rules/auto_bind.py, cross_thread_reduction.py): every sampled
candidate binds every block to blockIdx / threadIdx within the target's limits, passes the GPU
verifier, and computes what numpy computes on PoCL (OpenCL on the CPU); the CUDA text of a few
compiles with nvcc where it is installed.

Candidates of one space repeat (a small operator has few distinct programs), so each distinct
program is checked once.  Every distinct candidate is verified; the first RUN_LIMIT of them
(one per sketch first, then sampled ones) are also run on PoCL, whose compilation of a kernel
(about a second for softmax's several kernels on a cold cache) would otherwise dominate."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import autotune
from schedules import Schedule
from schedules.postproc import DecomposeReductions, DecomposeReductionsGPU, default_postprocs
from schedules.rules import default_rules
from schedules.rules.auto_bind import AutoBind, thread_candidates
from schedules.rules.cross_thread_reduction import CrossThreadReduction
from schedules.space import DesignSpace
from tensor_ir import te
from tensor_ir.codegen.gpu_c import gpu_module, split_kernels
from tensor_ir.codegen.gpu_verify import verify_gpu_kernel
from tensor_ir.expr import maximum
from tensor_ir.ops import registry
from tensor_ir.printer import to_text
from tensor_ir.stmt import REDUCE, THREAD_BINDING, BlockRealize, For
from tensor_ir.target import Target
from tensor_ir.thread_reduce import lower_for_gpu
from tensor_ir.visitor import collect, uses_var

from ..opencl_support import RUN_TARGET, needs_opencl_run
from .test_gpu_tiling import assert_ptx_compiles


SAMPLES = 20
RUN_LIMIT = 8


def _chain():
    """relu(tanh(A) * B - 0.25) over 5x13 elements: three stages the space inlines into one."""
    a = te.placeholder((5, 13), name="A")
    b = te.placeholder((5, 13), name="B")
    t = te.compute((5, 13), lambda i, j: te.tanh(a[i, j]) * b[i, j], name="T")
    u = te.compute((5, 13), lambda i, j: t[i, j] - 0.25, name="U")
    v = te.compute((5, 13), lambda i, j: maximum(u[i, j], 0.0), name="V")
    func = te.create_prim_func([a, b, v], name="chain")
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, (2, 5, 13)).astype("float32")
    return func, [x, y], np.maximum(np.tanh(x) * y - np.float32(0.25), np.float32(0.0))


def _op(name: str, **config):
    spec = registry.get(name)
    func = spec.func(config)
    inputs = spec.inputs(func, seed=0)
    return func, inputs, spec.expected(config, inputs)


CASES = {
    "chain": _chain,
    "broadcast_add": lambda: _op("add", a_shape=(2, 1, 5), b_shape=(4, 1)),
    "matmul": lambda: _op("matmul", M=7, N=6, K=5, transpose_a=True),
    "gemv": lambda: _op("matmul", M=1, N=5, K=40),
    "row_sum": lambda: _op("sum", shape=(6, 37), axis=1),
    "full_sum": lambda: _op("sum", shape=(3, 5)),
    "softmax": lambda: _op("softmax", shape=(3, 37)),
    "softmax_mid_axis": lambda: _op("softmax", shape=(2, 7, 3), axis=1),
    "layer_norm": lambda: _op("layer_norm", shape=(4, 6)),
    "layer_norm_2axes": lambda: _op("layer_norm", shape=(2, 3, 5), axis=(1, 2)),
}


def _candidates(func, target: Target, samples: int = SAMPLES) -> list:
    """One candidate per sketch, then ``samples`` seeds; distinct programs only."""
    space = DesignSpace(func, target)
    cands = [space.sample(seed=k, sketch=k) for k in range(len(space.sketches))]
    cands += [space.sample(seed=100 + s) for s in range(samples)]
    seen, out = set(), []
    for cand in cands:
        text = to_text(cand.func)
        if text not in seen:
            seen.add(text)
            out.append(cand)
    return out


def _unbound_blocks(func) -> list[str]:
    """Blocks (other than the root) with no thread-bound loop around them."""
    out = []

    def visit(node, bound: bool):
        if isinstance(node, For):
            visit(node.body, bound or node.kind == THREAD_BINDING)
            return
        if isinstance(node, BlockRealize):
            if node.block.name != "root" and not bound:
                out.append(node.block.name)
            for part in (node.block.init, node.block.body):
                if part is not None:
                    visit(part, bound)
            return
        for child in _children(node):
            visit(child, bound)

    visit(func.body, False)
    return out


def _children(node):
    from tensor_ir.stmt import Stmt
    from tensor_ir.visitor import children

    return [c for c in children(node) if isinstance(c, Stmt)]


def _cross_thread_blocks(func) -> set[str]:
    """Reduction blocks with a reduction loop bound to a thread axis."""
    found = set()
    for loop in collect(func.body, For):
        if loop.kind != THREAD_BINDING:
            continue
        for realize in collect(loop.body, BlockRealize):
            reduce_values = [v for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                             if iv.kind == REDUCE]
            if any(uses_var(v, loop.loop_var) for v in reduce_values):
                found.add(realize.block.name)
    return found


def _verify(func, target: Target) -> None:
    lowered = lower_for_gpu(func)
    module = gpu_module(lowered, "opencl", max_threads_per_block=target.max_threads_per_block,
                        max_shared_memory_per_block=target.max_shared_memory_per_block)
    _, bodies = split_kernels(lowered.body)
    for kernel, body in zip(module.kernels, bodies):
        verify_gpu_kernel(kernel, target, func=body)


# -- rule sets ---------------------------------------------------------------------------------

def test_default_rules_by_target_kind():
    gpu = [r.name for r in default_rules(Target("cuda -arch=sm_80"))]
    assert gpu == ["auto_inline", "cross_thread_reduction", "multi_level_tiling_gpu", "auto_bind"]
    assert [r.name for r in default_rules(Target("llvm"))] == [
        "auto_inline", "rfactor", "multi_level_tiling", "transpose_tiling",
        "parallel_vectorize_unroll", "random_compute_location"]
    gpu_procs = [type(p) for p in default_postprocs(Target("cuda -arch=sm_80"))]
    assert DecomposeReductionsGPU in gpu_procs
    cpu_procs = [type(p) for p in default_postprocs(Target("llvm"))]
    assert DecomposeReductions in cpu_procs and DecomposeReductionsGPU not in cpu_procs


def test_thread_candidates_capped_by_target_and_extent():
    assert thread_candidates(1024, 10_000) == [32, 64, 128, 256, 512, 1024]
    assert thread_candidates(4096, 10_000)[-1] == 1024
    assert thread_candidates(128, 10_000) == [32, 64, 128]
    assert thread_candidates(1024, 40) == [32, 40]
    assert thread_candidates(1024, 12) == [12]
    assert thread_candidates(16, 100) == [16]


# -- structure (no OpenCL needed) ---------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_every_block_bound_within_limits(case):
    func, _, _ = CASES[case]()
    target = Target("cuda -arch=sm_80 -max-threads-per-block=256")
    for cand in _candidates(func, target, samples=8):
        assert _unbound_blocks(cand.func) == [], to_text(cand.func)
        for loop in collect(cand.func.body, For):
            if loop.kind == THREAD_BINDING and loop.thread_binding.startswith("threadIdx"):
                assert loop.extent.value <= 256


@pytest.mark.parametrize("case", ["row_sum", "softmax", "layer_norm", "softmax_mid_axis",
                                  "gemv", "full_sum"])
def test_cross_thread_sketch_offered(case):
    func, _, _ = CASES[case]()
    space = DesignSpace(func, Target("opencl"))
    found = [_cross_thread_blocks(space.sample(seed=0, sketch=k).func)
             for k in range(len(space.sketches))]
    assert any(found), f"no sketch of {case} reduces across threads"


@pytest.mark.parametrize("case,reductions", [
    ("softmax", {"T_softmax_maxelem", "T_softmax_expsum"}),
    ("layer_norm", {"T_layer_norm_sum", "T_layer_norm_sqsum"}),
])
def test_row_consumer_form_is_one_kernel(case, reductions):
    """Some sketch computes every row reduction under the consumer's row loop (one kernel,
    the reductions in shared memory), as benchmarks/gpu_schedules.softmax_block_rows does."""
    func, _, _ = CASES[case]()
    space = DesignSpace(func, Target("opencl"))
    for k in range(len(space.sketches)):
        sampled = space.sample(seed=0, sketch=k).func
        if _cross_thread_blocks(sampled) == reductions:
            lowered = lower_for_gpu(sampled)
            _, bodies = split_kernels(lowered.body)
            if len(bodies) == 1:
                scopes = {b.name: b.scope for realize in collect(sampled.body, BlockRealize)
                          for b in realize.block.alloc_buffers}
                assert all(scopes.get(name) == "shared" for name in reductions), scopes
                return
    pytest.fail(f"no sketch of {case} puts its row reductions in the consumer's kernel")


def test_thread_count_is_a_decision_that_replays():
    func, _, _ = CASES["chain"]()
    space = DesignSpace(func, Target("opencl"))
    cand = space.sample(seed=3)
    again = space.replay(cand.trace)
    assert again is not None and to_text(again.func) == to_text(cand.func)
    decisions = [k for k, inst in enumerate(cand.trace) if inst.kind == "sample_categorical"]
    assert decisions
    extents = set()
    for choice in (0, 1):
        mutated = space.replay(cand.trace.with_decision(decisions[0], choice))
        assert mutated is not None
        extents.update(loop.extent.value for loop in collect(mutated.func.body, For)
                       if loop.thread_binding == "threadIdx.x")
    assert extents == {32, 64}  # candidates 32, 64 and 65 (all 5x13 in one block)


def test_rules_leave_bound_blocks_alone():
    func, _, _ = CASES["row_sum"]()
    sch = Schedule(func)
    row = sch.get_loops(sch.get_block("T_sum"))[0]
    sch.bind(row, "blockIdx.x")
    for rule in (AutoBind(), CrossThreadReduction()):
        rule.initialize(Target("opencl"))
        assert rule.apply(sch, "T_sum") == [sch]


# -- running on PoCL ----------------------------------------------------------------------------

@needs_opencl_run
@pytest.mark.parametrize("case", sorted(CASES))
def test_candidates_verify_and_match_numpy(case):
    func, inputs, expected = CASES[case]()
    target = Target("opencl")
    cands = _candidates(func, target)
    for cand in cands:
        _verify(cand.func, target)
    for cand in cands[:RUN_LIMIT]:
        out = np.zeros(func.params[-1].const_shape, func.params[-1].dtype)
        kernel = autotune.build(cand.func, RUN_TARGET)
        kernel(*[x.copy() for x in inputs], out)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6,
                                   err_msg=to_text(cand.func))


# -- CUDA text ------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("case", ["chain", "softmax", "layer_norm_2axes", "matmul"])
def test_cuda_source_compiles_with_nvcc(case, tmp_path):
    func, _, _ = CASES[case]()
    space = DesignSpace(func, Target("cuda -arch=sm_80"))
    # The first sketch (auto-bind alone) and the last (the most cross-thread reductions): nvcc
    # takes about half a second a kernel.
    for k in sorted({0, len(space.sketches) - 1}):
        cand = space.sample(seed=k, sketch=k)
        assert_ptx_compiles(gpu_module(lower_for_gpu(cand.func), "cuda").code, tmp_path,
                            f"{case}_{k}")


# -- blocks too large for the fused binding ------------------------------------------------------

def test_large_blocks_are_bound_dimension_by_dimension():
    # bind proves a fused loop's // and % indices only by enumerating the grid, within a
    # budget: past it (a 66x66x8 pad) the fused form is refused, and the block used to be left
    # on one thread.  The fallback binds each loop on its own.
    from tensor_ir import ops

    target = Target("cuda -arch=sm_90")
    for func in (ops.max_pool2d(1, 8, 64, 64, (3, 3), 2, 1), ops.add((1, 64, 112, 112),
                                                                     (1, 64, 112, 112))):
        space = DesignSpace(func, target)
        for seed in (0, 1):
            cand = space.sample(seed)
            lowered = lower_for_gpu(cand.func)
            module = gpu_module(lowered, "cuda", max_threads_per_block=1024)
            for kernel in module.kernels:
                assert kernel.threads_per_block > 1 and kernel.grid[0] * kernel.grid[1] > 1, \
                    (func.name, kernel.grid, kernel.block)
            assert any(k.grid[1] > 1 for k in module.kernels)  # a loop over blockIdx.y


@needs_opencl_run
def test_dimension_by_dimension_binding_matches_numpy():
    from tensor_ir import ops

    func = ops.max_pool2d(1, 8, 64, 64, (3, 3), 2, 1)
    space = DesignSpace(func, Target("cuda -arch=sm_90"))
    x = np.random.default_rng(0).standard_normal((1, 8, 64, 64)).astype("float32")
    want = ops.ref_max_pool2d(x, (3, 3), 2, 1)
    for seed in (0, 1):
        out = np.full(want.shape, np.nan, "float32")
        autotune.build(space.sample(seed).func, RUN_TARGET)(x, out)
        np.testing.assert_array_equal(out, want)
