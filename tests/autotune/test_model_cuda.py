"""Whole models on a cuda target: a default build computes what the CPU build and onnxruntime
compute, with weights on the GPU; tune_model stores cuda records that the rebuilt model uses.
Without pycuda or a GPU, building and tuning say so with typed errors (the tests that run
kernels skip with the reason)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import autotune
from autotune import cli
from autotune.runtime.cuda import cuda_problem
from autotune.measure import LocalBuilder, MeasureConfig
from autotune.graph.build import build_model
from autotune.tuning.tune import TuneError
from records import Database
from search import SearchConfig
from tensor_ir.errors import BuildError

from ..graph.onnx_models import encoder_layer, run_onnxruntime, small_cnn
from .tiny_onnx import write_tiny_mlp

PROBLEM = cuda_problem()
needs_gpu = pytest.mark.skipif(PROBLEM is not None, reason=f"no CUDA GPU: {PROBLEM}")
FAST = MeasureConfig(repeat=1, min_repeat_ms=1.0, timeout=10.0)
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _target() -> str:
    from autotune.runtime.cuda import cuda_target

    return str(cuda_target())


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory):
    return write_tiny_mlp(tmp_path_factory.mktemp("mlp") / "mlp.onnx", n=16)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32)


@pytest.mark.skipif(PROBLEM is None, reason="a GPU is here")
def test_without_a_gpu_building_and_tuning_say_why(mlp_path, tmp_path, capsys):
    model = autotune.load_model(mlp_path)
    with pytest.raises(BuildError, match="cuda target: "):
        build_model(model, "cuda -arch=sm_90")
    with pytest.raises(TuneError, match="tune_model: target cuda -arch=sm_90: cuda target"):
        autotune.tune_model(model, "cuda -arch=sm_90", trials=1,
                            database=str(tmp_path / "y.db"))
    assert not (tmp_path / "y.db").exists()
    code = cli.main([mlp_path, "--db", str(tmp_path / "x.db"), "--trials", "2", "--target",
                     "cuda -arch=sm_90", "--no-live"])
    assert code == cli.EXIT_USAGE and "cuda target: " in capsys.readouterr().err


@needs_gpu
def test_default_build_matches_the_cpu_build_and_onnxruntime(mlp_path):
    from autotune.runtime.gpu_executor import GPUExecutor

    model = autotune.load_model(mlp_path)
    lib = build_model(model, _target())
    assert isinstance(lib, GPUExecutor) and "NVIDIA" in lib.device
    cpu = build_model(model, "llvm")
    proto = onnx.load(mlp_path)
    for seed in (0, 1):
        x = _x(seed)
        out = lib.run({"x": x})["y"]
        np.testing.assert_allclose(out, cpu.run({"x": x})["y"], **TOL)
        np.testing.assert_allclose(out, run_onnxruntime(proto, {"x": x})["y"], **TOL)
    assert lib.weight_bytes == (16 * 16 + 16 + 16 * 16) * 4
    result = lib.benchmark(repeat=2, number=3, warmup=1)
    assert len(result.times_ms) == 2 and all(t > 0 for t in result.times_ms)
    profile = lib.profile({"x": _x(0)}, repeat=2)
    assert [name for name, _ in profile] == [step.name for step in lib.steps]


@needs_gpu
@pytest.mark.parametrize("make", [
    lambda: small_cnn(image=8),
    lambda: encoder_layer(seq=4, hidden=16, heads=2, ffn=32),
], ids=["cnn_with_view", "encoder_layer"])
def test_models_match_onnxruntime(make):
    proto = make()
    model = autotune.load_model(proto)
    lib = build_model(model, _target())
    feed = {name: np.random.default_rng(3).uniform(-1, 1, t.shape).astype(t.dtype)
            for name, t in model.input_types().items()}
    out = lib.run(feed)
    ref = run_onnxruntime(proto, feed)
    assert set(out) == set(ref)
    for name in ref:
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-4, atol=1e-4)


@needs_gpu
def test_tune_model_stores_cuda_records_that_the_build_uses(tmp_path, mlp_path):
    target = _target()
    db_path = tmp_path / "tuning.db"
    with LocalBuilder(max_workers=1) as builder:
        result = autotune.tune_model(mlp_path, target, trials=9, database=str(db_path),
                                     search=SearchConfig(batch_size=3, cost_model="random",
                                                         remeasure_top=1, remeasure_rounds=1),
                                     measure=FAST, builder=builder)
    assert result.trials_run == 9 and result.coverage == 1.0, str(result)
    with Database(db_path, create=False) as db:
        for task in result.tasks:
            assert db.records(task.key, target)
    model = autotune.load_model(mlp_path)
    tuned = build_model(model, target, database=str(db_path))
    assert tuned.report.coverage == 1.0
    x = _x(4)
    np.testing.assert_allclose(tuned.run({"x": x})["y"],
                               build_model(model, "llvm").run({"x": x})["y"], **TOL)


@needs_gpu
@pytest.mark.parametrize("m", [2, 4])
def test_winograd_model_matches_the_direct_convolution(m):
    from ..graph.helpers import check_winograd_build

    check_winograd_build(_target(), m)


@needs_gpu
def test_blocked_layout_model_matches_the_nchw_model():
    from ..graph.helpers import check_blocked_build

    check_blocked_build(_target())
