"""CUDA kernels through pycuda: the hand-written GPU schedules built for the GPU here and
compared with numpy, CUDA-event timing, and the tuning pipeline (builder compiling cubins with
nvcc, runner timing them on the GPU in its worker) on a cuda target.

The tests that run kernels need pycuda and an NVIDIA GPU and skip with the reason otherwise;
the ones before them (the typed errors without a GPU, the builder's cubin artifact) run
wherever nvcc is.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import autotune
from autotune.runtime.cuda import cuda_problem
from benchmarks.gpu_schedules import WORKLOADS, elementwise_add, sgemm_block_tile
from search import SearchConfig
from tensor_ir.errors import BuildError

from .test_gpu_schedules import CASES, _params

PROBLEM = cuda_problem()
needs_gpu = pytest.mark.skipif(PROBLEM is not None, reason=f"no CUDA GPU: {PROBLEM}")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def _target() -> str:
    from autotune.runtime.cuda import cuda_target

    return str(cuda_target())


# -- without a GPU ---------------------------------------------------------------------------

@pytest.mark.skipif(PROBLEM is None, reason="a GPU is here")
def test_building_without_a_gpu_says_why():
    func, _, _ = elementwise_add(np.random.default_rng(0))
    with pytest.raises(BuildError, match="cuda target: "):
        autotune.build(func, target="cuda -arch=sm_90")


def _build(func, target: str, tmp_path=None):
    from autotune.measure import LocalBuilder, MeasureInput

    inp = MeasureInput(func, target, "wk-cuda")
    with LocalBuilder(max_workers=1, work_dir=None if tmp_path is None else str(tmp_path)) \
            as builder:
        (result,) = builder.build([inp])
        return result, inp


@needs_nvcc
def test_builder_writes_a_cubin_artifact(tmp_path):
    import base64
    import json

    from autotune.measure.gpu import load_module

    func, _, _ = sgemm_block_tile(np.random.default_rng(0))
    result, inp = _build(func, "cuda -arch=sm_90", tmp_path)
    assert result.error is None, result.error
    with open(result.artifact_path, encoding="utf-8") as f:
        data = json.load(f)
    assert data["dialect"] == "cuda" and data["target"] == str(inp.target)
    module, target_text, cubin = load_module(result.artifact_path)
    assert cubin == base64.b64decode(data["cubin"]) and cubin[:4] == b"\x7fELF"
    assert module.kernels[0].block == (16, 16, 1) and target_text == str(inp.target)


@needs_nvcc
def test_builder_refuses_what_the_verifier_refuses(tmp_path):
    func, _, _ = sgemm_block_tile(np.random.default_rng(0))
    result, _ = _build(func, "cuda -arch=sm_90 -max-threads-per-block=128", tmp_path)
    assert result.artifact_path is None and "256 threads per block" in result.error


@needs_nvcc
def test_cubins_are_cached_on_disk(tmp_path, monkeypatch):
    from tensor_ir.codegen import gpu_verify

    code = 'extern "C" __global__ void twice(float* a) { a[threadIdx.x] *= 2.0f; }\n'
    monkeypatch.setenv("AUTOTUNE_CUDA_CACHE", str(tmp_path))
    monkeypatch.setattr(gpu_verify, "_PTXAS_CACHE", {})
    cubin, usage = gpu_verify.compile_cubin(code, "sm_80")
    assert len(list(tmp_path.iterdir())) == 2 and usage["twice"].registers > 0
    monkeypatch.setattr(gpu_verify, "_PTXAS_CACHE", {})  # a new process, as it were

    def no_compiles(cmd, *args, **kwargs):
        if "--version" in cmd:
            return real_run(cmd, *args, **kwargs)
        raise AssertionError("nvcc ran again for a source cached on disk")

    real_run = gpu_verify.subprocess.run
    monkeypatch.setattr(gpu_verify.subprocess, "run", no_compiles)
    assert gpu_verify.compile_cubin(code, "sm_80") == (cubin, usage)


# -- on the GPU ------------------------------------------------------------------------------

@needs_gpu
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workloads_match_numpy(name):
    func, arrays, expected = WORKLOADS[name](np.random.default_rng(1))
    for index in expected:
        arrays[index][...] = np.nan  # every element must be written
    kernel = autotune.build(func, target=_target())
    assert type(kernel).__name__ == "CUDAKernel"
    kernel(*arrays)
    for index, want in expected.items():
        np.testing.assert_allclose(arrays[index], want, rtol=1e-5, atol=1e-5)


@needs_gpu
@pytest.mark.parametrize("make, sizes", _params())
def test_schedules_at_several_sizes_match_numpy(make, sizes):
    func, arrays, expected = make(np.random.default_rng(7), **sizes)
    for index in expected:
        arrays[index][...] = np.nan
    autotune.build(func, target=_target())(*arrays)
    for index, want in expected.items():
        atol = 1e-5 * max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(arrays[index], want, rtol=1e-5, atol=atol)


@needs_gpu
def test_source_timing_and_argument_checks():
    func, arrays, expected = sgemm_block_tile(np.random.default_rng(3), n=128, m=128, k=64)
    kernel = autotune.build(func, target=_target())
    assert kernel.get_source("cuda").startswith('extern "C" __global__ void sgemm(')
    times = kernel.time(*arrays, repeat=3, min_repeat_ms=2.0)
    assert len(times) == 3 and all(0 < t < 0.1 for t in times)
    with pytest.raises(BuildError, match="argument B must be float32"):
        kernel(arrays[0], arrays[1][:3], arrays[2])
    with pytest.raises(BuildError, match="source format 'cuda'"):
        kernel.get_source("cl")


@needs_gpu
def test_multi_kernel_function_runs_in_order():
    from tests.autotune.test_gpu_multi_kernel import three_stages

    func = three_stages(37, (8, 16, 4))
    kernel = autotune.build(func, target=_target())
    x = np.random.default_rng(5).standard_normal(37).astype("float32")
    out = np.full(37, np.nan, "float32")
    kernel(x, out)
    np.testing.assert_allclose(out, (x + 1) * (x + 1) - x, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_device_facts_name_the_gpu():
    from autotune.runtime.cuda import cuda_device_facts

    facts = cuda_device_facts()
    assert facts["name"] and facts["arch"].startswith("sm_")
    assert facts["max_threads_per_block"] >= 1024 and facts["warp_size"] == 32


def _fast():
    from autotune.measure import MeasureConfig

    return MeasureConfig(repeat=3, min_repeat_ms=2.0, timeout=10.0, check="all")


def _plain_matmul(n: int, m: int, k: int):
    from tensor_ir import te

    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c], name="sgemm")


@needs_gpu
def test_runner_times_and_checks_candidates_and_survives_a_fault(tmp_path):
    import base64
    import json

    from autotune.measure import LocalBuilder, LocalRunner, MeasureInput
    from search.measure import BuildResult
    from tensor_ir.codegen.gpu_verify import compile_cubin

    target = _target()
    plain = _plain_matmul(64, 64, 32)
    good, _, _ = sgemm_block_tile(np.random.default_rng(0), n=64, m=64, k=32)
    other, _, _ = sgemm_block_tile(np.random.default_rng(0), n=64, m=64, k=32, reg=(2, 2),
                                   threads=(8, 8), k_tile=8)
    inputs = [MeasureInput(f, target, "wk-sgemm", reference=plain) for f in (good, other)]
    with LocalBuilder(max_workers=2) as builder, LocalRunner(_fast()) as runner:
        builds = builder.build(inputs)
        results = runner.run(inputs, builds)
        assert [r.error_kind for r in results] == [None, None], \
            [r.error_msg for r in results]
        assert all(0 < r.median < 0.01 and r.checked for r in results)
        # The first candidate's artifact with its kernel replaced by one writing far out of
        # bounds: an illegal address, which leaves the worker's CUDA context unusable.
        with open(builds[0].artifact_path, encoding="utf-8") as f:
            data = json.load(f)
        code = ('extern "C" __global__ void sgemm(float* A, float* B, float* C) '
                '{ C[threadIdx.x + (1LL << 40)] = 1.0f; }\n')
        data["code"] = data["kernels"][0]["code"] = code
        data["cubin"] = base64.b64encode(compile_cubin(code, inputs[0].target.arch)[0]).decode()
        bad_path = tmp_path / "fault.gpu.json"
        bad_path.write_text(json.dumps(data))
        restarts = runner.worker_restarts
        (fault,) = runner.run(inputs[:1], [BuildResult(str(bad_path), None, 0.0)])
        assert fault.error_kind in ("runtime", "crash"), fault
        # The next candidate runs in a fresh worker, with a fresh context.
        (again,) = runner.run(inputs[1:], builds[1:])
        assert again.error_kind is None, again.error_msg
        assert runner.worker_restarts > restarts


@needs_gpu
def test_tune_finds_correct_programs_on_the_gpu():
    from records import MemoryDatabase
    
    n = 256
    func = _plain_matmul(n, n, n)
    db = MemoryDatabase()
    best = autotune.tune(func, _target(), trials=32, database=db, measure=_fast(),
                         search=SearchConfig(batch_size=16, remeasure_top=1, remeasure_rounds=1),
                         log=False)
    records = db.records(best.workload_key)
    assert len(records) == best.trials == 32
    assert best.best_schedule is not None, [r.error_msg for r in records]
    kernel = autotune.build(best.best_schedule.func, _target())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype("float32")
    y = rng.standard_normal((n, n)).astype("float32")
    out = np.full((n, n), np.nan, "float32")
    kernel(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
