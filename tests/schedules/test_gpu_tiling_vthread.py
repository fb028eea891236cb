"""GPU multi-level tiling, "SSSRRSRS" (schedules/rules/multi_level_tiling_gpu.py): the vthread
level and the sampled unroll step.  Every distinct sampled candidate of matmul (square and
ragged), batch matmul and conv2d passes the GPU verifier, keeps its virtual threads within the
limit and replays from its trace (and from the trace's JSON); candidates with virtual threads
and an unroll step compute what numpy computes on PoCL, and their CUDA text compiles with nvcc
where it is installed; the unroll decision survives JSON and is changed by mutation; the code
generator unrolls what fits the step; the features count the virtual threads; a cooperative
fetch with a sampled vector length copies float2 / float4 into aligned shared memory."""
from __future__ import annotations

import random

import numpy as np
import pytest

import autotune
from cost_models import features as F
from schedules import Schedule
from schedules.postproc import UNROLL_PRAGMA, VerifyGPU, verify_gpu
from schedules.rules.multi_level_tiling import TILING_KEY
from schedules.rules.multi_level_tiling_gpu import (
    MAX_VTHREAD,
    UNROLL_STEPS,
    MultiLevelTilingGPU,
)
from schedules.rules.parallel_vectorize_unroll import UNROLL_KEY
from schedules.space import DesignSpace
from schedules.trace import Trace
from search.mutators import MutateUnroll
from tensor_ir import te
from tensor_ir.codegen.gpu_c import gpu_module, gpu_source, split_kernels
from tensor_ir.codegen.gpu_verify import verify_gpu_kernel
from tensor_ir.ops import registry
from tensor_ir.printer import to_text
from tensor_ir.stmt import THREAD_BINDING, BlockRealize, For
from tensor_ir.target import Target
from tensor_ir.thread_reduce import lower_for_gpu
from tensor_ir.visitor import collect

from ..opencl_support import RUN_TARGET, needs_opencl_run
from .test_gpu_tiling import assert_ptx_compiles, needs_nvcc

CASES = {
    "matmul_square": ("matmul", {"M": 64, "N": 64, "K": 64}),
    "matmul_33x17x29": ("matmul", {"M": 33, "N": 17, "K": 29}),
    "batch_matmul": ("batch_matmul", {"B": 3, "M": 20, "N": 12, "K": 17}),
    "conv2d": ("conv2d_nchw", {"N": 1, "C": 4, "H": 9, "W": 9, "K": 8, "R": 3, "S": 3,
                               "padding": 1}),
}
SEEDS = range(10)
TARGET = Target("opencl")

_SPACES: dict[str, tuple] = {}


def _space(case: str):
    """(space, index of its tiled sketch, inputs, expected), built once per case."""
    if case not in _SPACES:
        name, config = CASES[case]
        spec = registry.get(name)
        func = spec.func(config)
        inputs = spec.inputs(func, seed=0)
        space = DesignSpace(func, TARGET)
        sketch = next(k for k, sk in enumerate(space.sketches)
                      if any(inst.kind == "annotate" and dict(inst.attrs).get("key") == TILING_KEY
                             for inst in sk))
        _SPACES[case] = (space, sketch, inputs, spec.expected(config, inputs))
    return _SPACES[case]


def _vthreads(func) -> list[int]:
    return [loop.extent.value for loop in collect(func.body, For)
            if loop.kind == THREAD_BINDING and loop.thread_binding == "vthread"]


def _unroll_steps(func) -> list[int]:
    return [loop.annotation(UNROLL_PRAGMA) for loop in collect(func.body, For)
            if loop.annotation(UNROLL_PRAGMA) is not None]


def _unroll_decision(trace: Trace) -> int:
    """Index of the sample_categorical feeding the tiled block's unroll annotation."""
    for k, inst in enumerate(trace):
        if inst.kind == "sample_categorical" and any(
                later.kind == "annotate" and dict(later.attrs).get("key") == UNROLL_KEY
                and inst.outputs[0] in later.inputs for later in trace.instructions[k + 1:]):
            return k
    pytest.fail("no unroll decision in the trace")


def _candidates(case: str) -> list:
    """The distinct candidates of the tiled sketch over SEEDS."""
    space, sketch, _, _ = _space(case)
    seen, out = set(), []
    for seed in SEEDS:
        cand = space.sample(seed=seed, sketch=sketch)
        text = to_text(cand.func)
        if text not in seen:
            seen.add(text)
            out.append(cand)
    return out


def _find(case: str, vthread: bool, steps=(16, 64), seeds=range(60)):
    """The first candidate (by seed) with more than one virtual thread (when ``vthread``, else
    one) and an unroll step among ``steps`` (0: none).  The default leaves out the steps that
    unroll whole k-loops, which PoCL takes tens of seconds to compile."""
    space, sketch, _, _ = _space(case)
    for seed in seeds:
        cand = space.sample(seed=seed, sketch=sketch)
        has_vthread = max(_vthreads(cand.func), default=1) > 1
        step = max(_unroll_steps(cand.func), default=0)
        if has_vthread == vthread and step in steps:
            return cand
    pytest.fail(f"no candidate of {case} with vthread={vthread}, unroll step in {steps}")


def _run(func, inputs) -> np.ndarray:
    out = np.zeros(func.params[-1].const_shape, func.params[-1].dtype)
    kernel = autotune.build(func, RUN_TARGET)
    kernel(*[x.copy() for x in inputs], out)
    return out


# -- structure (no OpenCL needed) ----------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_distinct_candidates_verify_and_replay(case):
    space, _, _, _ = _space(case)
    cands = _candidates(case)
    assert len(cands) >= 3
    for cand in cands:
        text = to_text(cand.func)
        notes = [dict(r.block.annotations) for r in collect(cand.func.body, BlockRealize)]
        assert any(n.get(TILING_KEY) == "SSSRRSRS" for n in notes), text
        # The post-processor consumed the block annotation.
        assert not any(UNROLL_KEY in n for n in notes), text
        vthreads = _vthreads(cand.func)
        assert len(vthreads) == 1 and vthreads[0] <= MAX_VTHREAD, text
        assert len(_unroll_steps(cand.func)) <= 1
        assert set(_unroll_steps(cand.func)) <= set(UNROLL_STEPS) - {0}
        assert verify_gpu(cand.func, TARGET.max_threads_per_block,
                          TARGET.max_shared_memory_per_block) is None
        lowered = lower_for_gpu(cand.func)
        module = gpu_module(lowered, "opencl",
                            max_threads_per_block=TARGET.max_threads_per_block,
                            max_shared_memory_per_block=TARGET.max_shared_memory_per_block)
        for kernel, body in zip(module.kernels, split_kernels(lowered.body)[1]):
            verify_gpu_kernel(kernel, TARGET, func=body)
        again = space.replay(cand.final_trace)
        assert again is not None and to_text(again.func) == text
        from_json = space.replay(Trace.from_json(cand.final_trace.to_json()))
        assert from_json is not None and to_text(from_json.func) == text


def test_samples_reach_vthreads_and_unroll_steps():
    """Over a few seeds the space offers virtual threads above 1 and several unroll steps,
    and the vthread extent is the product of the sampled level of each dimension."""
    cands = _candidates("matmul_square")
    assert max(max(_vthreads(c.func)) for c in cands) > 1
    steps = {max(_unroll_steps(c.func), default=0) for c in cands}
    assert len(steps) >= 3, steps
    for cand in cands:
        tiles = [inst.decision for inst in cand.trace if inst.kind == "sample_perfect_tile"]
        spatial = [d for d in tiles if len(d) == 5]
        assert len(spatial) == 2
        assert _vthreads(cand.func) == [spatial[0][1] * spatial[1][1]]


def test_vthread_factor_one_is_the_structure_without_the_level():
    """max_vthread=1 leaves the level out (the "SSRRSRS" program); a sampled vthread factor
    of 1 gives the same loops around the thread level plus a vthread loop of extent 1."""
    name, config = CASES["matmul_square"]
    func = registry.get(name).func(config)
    rule = MultiLevelTilingGPU(max_vthread=1, unroll_steps=())
    rule.initialize(TARGET)
    (sch,) = rule.apply(Schedule(func), "C")
    notes = [dict(r.block.annotations) for r in collect(sch.func.body, BlockRealize)]
    assert any(n.get(TILING_KEY) == "SSRRSRS" for n in notes)
    assert _vthreads(sch.func) == []
    assert not any(UNROLL_KEY in n for n in notes)
    sizes = [inst.attrs["n"] for inst in sch.trace if inst.kind == "sample_perfect_tile"]
    assert sizes == [4, 4, 3]  # j and i: [block, thread, S3, S4]; k: [R0, R1, R2]


def test_verifier_bounds_virtual_threads():
    a = te.placeholder((64, 4), name="A")
    b = te.compute((64, 4), lambda i, j: a[i, j] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b], name="scale"))
    i, _ = sch.get_loops(sch.get_block("B"))
    io, iv, it = sch.split(i, [2, 16, 2])
    sch.bind(io, "blockIdx.x")
    sch.bind(iv, "vthread")
    sch.bind(it, "threadIdx.x")
    assert "16 virtual threads" in verify_gpu(sch.func, 1024, 48 * 1024)
    assert verify_gpu(sch.func, 1024, 48 * 1024, max_vthread=16) is None
    proc = VerifyGPU()
    proc.initialize(Target("cuda -arch=sm_80"))
    assert not proc.apply(sch)


def test_unroll_decision_round_trips_and_mutates():
    cand = _find("matmul_33x17x29", vthread=False)
    space, _, _, _ = _space("matmul_33x17x29")
    trace = cand.trace
    index = _unroll_decision(trace)
    step = UNROLL_STEPS[trace[index].decision]
    assert _unroll_steps(cand.func) == [step]
    loaded = Trace.from_json(trace.to_json())
    assert loaded[index].decision == trace[index].decision
    mutator = MutateUnroll()
    assert mutator.applies(trace, index)
    proposals = {mutator.propose(trace, index, random.Random(seed)) for seed in range(20)}
    assert trace[index].decision not in proposals and len(proposals) >= 2
    for decision in proposals:
        mutated = space.replay(trace.with_decision(index, decision))
        assert mutated is not None
        new_step = UNROLL_STEPS[decision]
        assert _unroll_steps(mutated.func) == ([new_step] if new_step else [])


def test_auto_unroll_marks_the_loops_that_fit_the_step():
    """Under pragma_auto_unroll_max_step 16, of B's 4 x 8 nest under the block loop (32 leaf
    statements) only the inner loop is unrolled, C's 2 x 4 nest whole; under 64 both nests
    whole; without the pragma nothing is."""
    a = te.placeholder((8, 8), name="A")
    b = te.compute((8, 8), lambda i, j: a[i, j] * 2.0, name="B")
    c = te.compute((4, 4), lambda i, j: a[i, j] + 1.0, name="C")
    func = te.create_prim_func([a, b, c], name="two")

    def unrolled(step) -> int:
        sch = Schedule(func)
        for name in ("B", "C"):
            head, _ = sch.split(sch.get_loops(sch.get_block(name))[0], [2, None])
            sch.bind(head, "blockIdx.x")
            if step is not None:
                sch.annotate(head, UNROLL_PRAGMA, step)
        code = gpu_module(lower_for_gpu(sch.func), "cuda").code
        return sum(line.strip() == "#pragma unroll" for line in code.splitlines())

    assert unrolled(None) == 0
    assert unrolled(16) == 3
    assert unrolled(64) == 4


def test_features_count_the_virtual_threads():
    cand = _find("matmul_square", vthread=True)
    row = F.features(cand.func, TARGET)[F.GPU_OFFSET:].astype(np.float64)
    values = dict(zip(F.GPU_FEATURES, np.round(2.0 ** row - 1.0, 3)))
    assert values["gpu_vthreads"] == _vthreads(cand.func)[0]


def _vector_fetch(case: str, dialect: str, lanes: int):
    """The first candidate (by seed) whose ``dialect`` text stores ``lanes``-wide vectors into
    shared memory, and that text."""
    space, sketch, _, _ = _space(case)
    for seed in range(60):
        cand = space.sample(seed=seed, sketch=sketch)
        code = gpu_source(lower_for_gpu(cand.func), dialect).code
        marker = f"vstore{lanes}(" if dialect == "opencl" else f"*(float{lanes}*)&A_shared["
        if marker in code:
            return cand, code
    pytest.fail(f"no candidate of {case} copies float{lanes} into shared memory")


def test_fetch_vector_length_is_a_mutable_decision():
    """Each operand's fetch samples its vector length; its innermost loop is vectorised with
    that extent, and another length replays to a fetch of the new width."""
    cand, _ = _vector_fetch("matmul_square", "opencl", 4)
    space, _, _, _ = _space("matmul_square")
    widths = [k for k, inst in enumerate(cand.trace) if inst.kind == "sample_categorical"
              and list(inst.attrs["candidates"]) == [1, 2, 4]]
    assert len(widths) == 2  # A's fetch and B's

    def vector_extents(func) -> list[int]:
        return sorted(loop.extent.value for loop in collect(func.body, For)
                      if loop.kind == "vectorized")

    chosen = sorted((1, 2, 4)[cand.trace[k].decision] for k in widths)
    assert vector_extents(cand.func) == chosen
    # Decisions are indices into the candidates: 0 is a length of 1.
    mutated = space.replay(cand.trace.with_decision(widths[0], 0).with_decision(widths[1], 0))
    assert mutated is not None and vector_extents(mutated.func) == [1, 1]
    assert "vstore" not in gpu_source(lower_for_gpu(mutated.func), "opencl").code


# -- running on PoCL ------------------------------------------------------------------------------

@needs_opencl_run
@pytest.mark.parametrize("case", sorted(CASES))
def test_vthread_and_unroll_candidates_match_numpy(case):
    _, _, inputs, expected = _space(case)
    cand = _find(case, vthread=True)
    np.testing.assert_allclose(_run(cand.func, inputs), expected, rtol=1e-4, atol=1e-5,
                               err_msg=to_text(cand.func))


@needs_opencl_run
def test_vthread_without_unroll_matches_numpy():
    _, _, inputs, expected = _space("matmul_33x17x29")
    cand = _find("matmul_33x17x29", vthread=True, steps=(0,))
    np.testing.assert_allclose(_run(cand.func, inputs), expected, rtol=1e-4, atol=1e-5,
                               err_msg=to_text(cand.func))


@needs_opencl_run
def test_float4_fetch_matches_numpy():
    _, _, inputs, expected = _space("matmul_square")
    cand, code = _vector_fetch("matmul_square", "opencl", 4)
    assert "__attribute__((aligned(16)))" in code
    np.testing.assert_allclose(_run(cand.func, inputs), expected, rtol=1e-4, atol=1e-5,
                               err_msg=code)


# -- CUDA text ------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("case", ["matmul_square", "conv2d"])
def test_vthread_unroll_cuda_source_compiles_with_nvcc(case, tmp_path):
    cand = _find(case, vthread=True, steps=(512, 1024))
    code = gpu_source(lower_for_gpu(cand.func), "cuda").code
    assert "#pragma unroll" in code
    assert_ptx_compiles(code, tmp_path, case)


@needs_nvcc
def test_float4_fetch_cuda_source_compiles_with_nvcc(tmp_path):
    _, code = _vector_fetch("matmul_square", "cuda", 4)
    assert "__shared__ __align__(16) float A_shared[" in code
    assert_ptx_compiles(code, tmp_path, "fetch")
