"""GPU multi-level tiling (schedules/rules/multi_level_tiling_gpu.py): the GPU design space of
matmul, batch matmul and conv2d has the tiled sketch; its sampled candidates stage the operands
in shared memory, accumulate in registers, pass the GPU verifier, replay from their traces and
compute what numpy computes on PoCL; a mutated tile moves the cooperative fetch with the
threads; the CUDA text of a couple compiles with nvcc where it is installed.

PoCL compiles a kernel in about half a second, so only a few candidates per workload run."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import autotune
from schedules import Schedule
from schedules.postproc import VerifyGPU, verify_gpu
from schedules.rules import default_rules
from schedules.rules.auto_bind import AutoBind
from schedules.rules.multi_level_tiling import TILING_KEY
from schedules.rules.multi_level_tiling_gpu import MultiLevelTilingGPU
from schedules.space import DesignSpace
from tensor_ir import te
from tensor_ir.codegen.gpu_c import gpu_module, split_kernels
from tensor_ir.codegen.gpu_verify import verify_gpu_kernel
from tensor_ir.expr import maximum
from tensor_ir.ops import registry
from tensor_ir.printer import to_text
from tensor_ir.stmt import THREAD_BINDING, BlockRealize, For
from tensor_ir.target import Target
from tensor_ir.thread_reduce import lower_for_gpu
from tensor_ir.visitor import collect

from ..opencl_support import RUN_TARGET, needs_opencl_run


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def assert_ptx_compiles(code: str, folder, name: str, arch: str = "sm_80") -> None:
    """``nvcc -ptx`` compiles the CUDA ``code`` (written to ``folder/name.cu``); on failure the
    assertion shows nvcc's errors and the source."""
    path = folder / f"{name}.cu"
    path.write_text(code)
    done = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", str(path), "-o",
                           str(folder / f"{name}.ptx")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + "\n" + code

CASES = {
    "matmul_square": ("matmul", {"M": 64, "N": 64, "K": 64}),
    "matmul_64x48x40": ("matmul", {"M": 64, "N": 48, "K": 40}),
    "matmul_33x17x29": ("matmul", {"M": 33, "N": 17, "K": 29}),
    "matmul_transposed": ("matmul", {"M": 24, "N": 20, "K": 18, "transpose_a": True}),
    "batch_matmul": ("batch_matmul", {"B": 3, "M": 20, "N": 12, "K": 17}),
    "conv2d": ("conv2d_nchw", {"N": 1, "C": 4, "H": 9, "W": 9, "K": 8, "R": 3, "S": 3,
                               "padding": 1}),
}
SEEDS = (0, 1, 2, 3)
RUN_SEEDS = (0, 1)


def _op(case: str):
    name, config = CASES[case]
    spec = registry.get(name)
    func = spec.func(config)
    inputs = spec.inputs(func, seed=0)
    return func, inputs, spec.expected(config, inputs)


def _tiled_sketch(space: DesignSpace) -> int:
    for k, sketch in enumerate(space.sketches):
        if any(inst.kind == "annotate" and dict(inst.attrs).get("key") == TILING_KEY
               for inst in sketch):
            return k
    pytest.fail(f"no sketch of {space.func.name} is tiled for the GPU")


def _scopes(func) -> dict[str, str]:
    return {buf.name: buf.scope for realize in collect(func.body, BlockRealize)
            for buf in realize.block.alloc_buffers}


def _thread_extents(func) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for loop in collect(func.body, For):
        if loop.kind == THREAD_BINDING:
            out.setdefault(loop.thread_binding, set()).add(loop.extent.value)
    return out


def _verify(func, target: Target) -> None:
    lowered = lower_for_gpu(func)
    module = gpu_module(lowered, "opencl", max_threads_per_block=target.max_threads_per_block,
                        max_shared_memory_per_block=target.max_shared_memory_per_block)
    _, bodies = split_kernels(lowered.body)
    for kernel, body in zip(module.kernels, bodies):
        verify_gpu_kernel(kernel, target, func=body)


def _run(func, inputs) -> np.ndarray:
    out = np.zeros(func.params[-1].const_shape, func.params[-1].dtype)
    kernel = autotune.build(func, RUN_TARGET)
    kernel(*[x.copy() for x in inputs], out)
    return out


# -- rule set ----------------------------------------------------------------------------------

def test_tiling_runs_before_auto_bind():
    names = [r.name for r in default_rules(Target("opencl"))]
    assert names.index("multi_level_tiling_gpu") < names.index("auto_bind")
    assert "multi_level_tiling_gpu" not in [r.name for r in default_rules(Target("llvm"))]


# -- structure (no OpenCL needed) ----------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_tiled_candidates_stage_operands_and_verify(case):
    func, _, _ = _op(case)
    target = Target("opencl")
    space = DesignSpace(func, target)
    sketch = _tiled_sketch(space)
    for seed in SEEDS:
        cand = space.sample(seed=seed, sketch=sketch)
        text = to_text(cand.func)
        scopes = _scopes(cand.func)
        assert sorted(s for s in scopes.values() if s == "shared") == ["shared", "shared"], text
        assert list(scopes.values()).count("local") == 1, text
        extents = _thread_extents(cand.func)
        assert "blockIdx.x" in extents and "threadIdx.x" in extents, text
        # One extent per thread axis: the fetches are bound to the compute's threads.
        assert all(len(v) == 1 for axis, v in extents.items() if axis.startswith("threadIdx"))
        _verify(cand.func, target)
        again = space.replay(cand.final_trace)
        assert again is not None and to_text(again.func) == text


def test_mutated_tile_moves_the_fetch_with_the_threads():
    """Changing the thread factor of the innermost spatial loop (a decision) replays to a
    program whose fetch loops are bound with the new extent."""
    func, _, _ = _op("matmul_64x48x40")
    space = DesignSpace(func, Target("opencl"))
    cand = space.sample(seed=0, sketch=_tiled_sketch(space))
    tiles = [k for k, inst in enumerate(cand.trace) if inst.kind == "sample_perfect_tile"]
    # The innermost spatial loop (j, extent 48) is sampled first: [block, vthread, thread,
    # S3, S4].
    first = tiles[0]
    assert len(cand.trace[first].decision) == 5
    for decision, threads in (([2, 1, 8, 3, 1], 8), ([1, 1, 16, 1, 3], 16),
                              ([1, 2, 8, 3, 1], 8)):
        mutated = space.replay(cand.trace.with_decision(first, decision))
        assert mutated is not None
        tx = [loop for loop in collect(mutated.func.body, For)
              if loop.thread_binding == "threadIdx.x"]
        assert len(tx) == 3  # the compute's and both fetches'
        assert {loop.extent.value for loop in tx} == {threads}


def test_tiled_block_left_alone_by_auto_bind_and_bound_blocks_by_tiling():
    func, _, _ = _op("matmul_64x48x40")
    target = Target("opencl")
    tiling = MultiLevelTilingGPU()
    tiling.initialize(target)
    (tiled,) = tiling.apply(Schedule(func), "C")
    assert tiled.trace is not None and len(tiled.trace) > 0
    bind = AutoBind()
    bind.initialize(target)
    assert bind.apply(tiled, "C") == [tiled]
    bound = Schedule(func)
    bound.bind(bound.get_loops(bound.get_block("C"))[0], "blockIdx.x")
    assert tiling.apply(bound, "C") == [bound]


def test_verifier_counts_compacted_shared_tiles():
    """The shared buffers are allocated with the operands' whole shapes (4 MiB each here);
    the verifier counts the tiles a block holds, so a 1024^3 matmul fits 48 KiB."""
    func = registry.get("matmul").func({"M": 1024, "N": 1024, "K": 1024})
    target = Target("cuda -arch=sm_80")
    space = DesignSpace(func, target)
    cand = space.sample(seed=0, sketch=_tiled_sketch(space))
    assert verify_gpu(cand.func, 1024, 48 * 1024) is None
    assert "shared memory" in verify_gpu(cand.func, 1024, 64)
    threads = 1
    for axis, extents in _thread_extents(cand.func).items():
        if axis.startswith("threadIdx"):
            threads *= max(extents)
    if threads > 1:
        assert "threads per block" in verify_gpu(cand.func, threads - 1, 48 * 1024)


def test_verifier_rejects_too_many_threads_along_z():
    a = te.placeholder((128, 4), name="A")
    b = te.compute((128, 4), lambda i, j: a[i, j] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b], name="scale"))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "threadIdx.z")
    sch.bind(j, "threadIdx.x")
    assert "threadIdx.z" in verify_gpu(sch.func, 1024, 48 * 1024)
    proc = VerifyGPU()
    proc.initialize(Target("cuda -arch=sm_80"))
    assert not proc.apply(sch)


# -- running on PoCL ------------------------------------------------------------------------------

@needs_opencl_run
@pytest.mark.parametrize("case", ["matmul_64x48x40", "matmul_33x17x29", "matmul_transposed",
                                  "batch_matmul", "conv2d"])
def test_tiled_candidates_match_numpy(case):
    func, inputs, expected = _op(case)
    space = DesignSpace(func, Target("opencl"))
    sketch = _tiled_sketch(space)
    for seed in RUN_SEEDS:
        cand = space.sample(seed=seed, sketch=sketch)
        np.testing.assert_allclose(_run(cand.func, inputs), expected, rtol=1e-4, atol=1e-5,
                                   err_msg=to_text(cand.func))


@needs_opencl_run
def test_elementwise_consumer_folded_into_write_back():
    """matmul then relu: the relu is applied by the write-back of the register tile (one
    kernel, no intermediate buffer in global memory)."""
    a = te.placeholder((20, 12), name="A")
    b = te.placeholder((12, 16), name="B")
    k = te.reduce_axis((0, 12), name="k")
    c = te.compute((20, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    d = te.compute((20, 16), lambda i, j: maximum(c[i, j], 0.0), name="D")
    func = te.create_prim_func([a, b, d], name="matmul_relu")
    space = DesignSpace(func, Target("opencl"))
    cand = space.sample(seed=0, sketch=_tiled_sketch(space))
    names = {realize.block.name for realize in collect(cand.func.body, BlockRealize)}
    assert "D" not in names, to_text(cand.func)
    _, bodies = split_kernels(lower_for_gpu(cand.func).body)
    assert len(bodies) == 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 12)).astype("float32")
    y = rng.standard_normal((12, 16)).astype("float32")
    np.testing.assert_allclose(_run(cand.func, [x, y]), np.maximum(x @ y, 0), rtol=1e-4,
                               atol=1e-5)


# -- CUDA text ------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("case", ["matmul_33x17x29", "conv2d"])
def test_tiled_cuda_source_compiles_with_nvcc(case, tmp_path):
    func, _, _ = _op(case)
    space = DesignSpace(func, Target("cuda -arch=sm_80"))
    cand = space.sample(seed=0, sketch=_tiled_sketch(space))
    assert_ptx_compiles(gpu_module(lower_for_gpu(cand.func), "cuda").code, tmp_path, case)


# -- filter dimensions of size 1 -----------------------------------------------------------------

def _conv1x1(c: int = 16, h: int = 6, w: int = 10, k: int = 8):
    from tensor_ir import ops

    return ops.conv2d_nchw(1, c, h, w, k, 1, 1)


def test_conv1x1_is_tiled_and_its_weight_fetch_binds_no_unit_loop():
    # The weight tile of a 1x1 convolution is (channels out, channels in, 1, 1): binding a
    # filter tap of one iteration would be refused, and the whole rule with it (the space was
    # then the untouched nest, one thread doing everything).
    func = _conv1x1(256, 56, 56, 64)
    target = Target("cuda -arch=sm_90")
    space = DesignSpace(func, target)
    k = _tiled_sketch(space)
    for seed in SEEDS:
        cand = space.sample(seed, sketch=k)
        assert cand is not None
        assert _scopes(cand.func)["weight_shared"] == "shared"
        extents = _thread_extents(cand.func)
        assert extents.get("blockIdx.x") and any(a.startswith("threadIdx") for a in extents)
        _verify(cand.func, target)


def test_conv1x1_samples_are_correct_and_race_free_under_oclgrind():
    from autotune.runtime.oclgrind import oclgrind_available, run_under_oclgrind

    if not oclgrind_available():
        pytest.skip("Oclgrind is not installed")
    func = _conv1x1()
    space = DesignSpace(func, Target("cuda -arch=sm_90"))
    k = _tiled_sketch(space)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 6, 10)).astype("float32")
    weight = rng.standard_normal((8, 16, 1, 1)).astype("float32")
    want = np.einsum("nchw,kc->nkhw", x, weight[:, :, 0, 0])
    for seed in RUN_SEEDS:
        cand = space.sample(seed, sketch=k)
        module = gpu_module(lower_for_gpu(cand.func), "opencl", max_threads_per_block=1024,
                            max_shared_memory_per_block=48 * 1024)
        (kernel,) = module.kernels
        out = np.full(want.shape, np.nan, "float32")
        result = run_under_oclgrind(kernel, [x, weight, out])
        assert not result.diagnostics, result.summary()
        np.testing.assert_allclose(result.arrays[2], want, rtol=1e-5, atol=1e-5)
