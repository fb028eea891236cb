"""Whole models on the opencl target (PoCL: OpenCL on the CPU): a default build computes what
the CPU build and onnxruntime compute, keeps weights on the device (one host-to-device copy
per input and run), reshapes included; tune_model and the tune-model command store records
for opencl and the rebuilt model uses them; bad requests raise typed errors naming the
problem."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("pyopencl")

import pyopencl as cl

import autotune
from autotune import cli
from autotune.runtime import opencl as gpu_module
from autotune.runtime.gpu_executor import GPUExecutor
from autotune.graph.operators import VIEW
from autotune.graph.tasks import partition
from autotune.measure import LocalBuilder, MeasureConfig
from autotune.graph.build import build_model
from autotune.tuning.tune import TuneError
from records import Database
from search import SearchConfig
from tensor_ir import devices
from tensor_ir.errors import BuildError
from tensor_ir.target import TargetError

from ..graph.onnx_models import encoder_layer, run_onnxruntime, small_cnn
from ..opencl_support import RUN_TARGET, needs_opencl_run
from .tiny_onnx import write_tiny_mlp

# On the default OpenCL device, else on Oclgrind (see tests/opencl_support.py).
pytestmark = needs_opencl_run

# Short timing and a time-out: a tuning candidate with a pathological work-group shape on
# PoCL must cost one record, not the test's time.
FAST = MeasureConfig(repeat=1, min_repeat_ms=1.0, timeout=5.0)
TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory):
    return write_tiny_mlp(tmp_path_factory.mktemp("mlp") / "mlp.onnx", n=16)


@pytest.fixture(scope="module")
def mlp(mlp_path):
    return autotune.load_model(mlp_path)


@pytest.fixture(scope="module")
def lib(mlp):
    return build_model(mlp, RUN_TARGET)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32)


def test_default_build_matches_the_cpu_build_and_onnxruntime(mlp_path, mlp, lib):
    assert isinstance(lib, GPUExecutor) and lib.target == RUN_TARGET
    assert [f.source for f in lib.report.functions] == ["default"] * 3
    assert lib.report.coverage == 0.0
    cpu = build_model(mlp, "llvm")
    proto = onnx.load(mlp_path)
    for seed in (0, 1):
        x = _x(seed)
        out = lib.run({"x": x})["y"]
        np.testing.assert_allclose(out, cpu.run({"x": x})["y"], **TOL)
        np.testing.assert_allclose(out, run_onnxruntime(proto, {"x": x})["y"], **TOL)
    # Outputs are fresh host arrays; a float64 input is converted as on the CPU.
    first = lib(x=_x(0))["y"]
    kept = first.copy()
    lib.run({"x": _x(1)})
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(lib.run({"x": _x(0).astype(np.float64)})["y"], kept, **TOL)


@pytest.mark.parametrize("make", [
    # A flatten between pooling and the classifier: a view of a device buffer.
    lambda: small_cnn(image=8),
    # Two layer norms of one compiled function (its temporaries shared), storages reused.
    lambda: encoder_layer(seq=4, hidden=16, heads=2, ffn=32),
], ids=["cnn_with_view", "encoder_layer"])
def test_models_match_onnxruntime(make):
    proto = make()
    model = autotune.load_model(proto)
    lib = build_model(model, RUN_TARGET)
    _, groups, _ = partition(model)
    if proto.graph.name == "small_cnn":
        assert any(g.kind == VIEW for g in groups)
    else:
        assert max(f.count for f in lib.report.functions) >= 2
    feed = {name: np.random.default_rng(3).uniform(-1, 1, t.shape).astype(t.dtype)
            for name, t in model.input_types().items()}
    out = lib.run(feed)
    ref = run_onnxruntime(proto, feed)
    assert set(out) == set(ref)
    for name in ref:
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-4, atol=1e-4)


def test_weights_stay_on_the_device(lib, monkeypatch):
    uploads, downloads, launches = [], [], []
    copy, enqueue = cl.enqueue_copy, cl.enqueue_nd_range_kernel

    def counting_copy(queue, dest, src, **kwargs):
        (uploads if isinstance(src, np.ndarray) else downloads).append(dest)
        return copy(queue, dest, src, **kwargs)

    def counting_launch(queue, kernel, *args, **kwargs):
        launches.append(kernel)
        return enqueue(queue, kernel, *args, **kwargs)

    monkeypatch.setattr(cl, "enqueue_copy", counting_copy)
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", counting_launch)
    expected = lib.run({"x": _x(2)})["y"]
    for _ in range(3):
        np.testing.assert_array_equal(lib.run({"x": _x(2)})["y"], expected)
    runs = 4
    # Per run: one copy in per model input, one copy out per output, and every kernel of
    # every step; the weights never travel again.
    assert len(uploads) == runs * len(lib.model.inputs)
    assert len(downloads) == runs * len(lib.model.outputs)
    per_run = sum(len(step.kernel.source.kernels) for step in lib.steps)
    assert len(launches) == runs * per_run
    # w1, b1 and w2 of the ONNX file, each uploaded once at build.
    assert lib.weight_bytes == (16 * 16 + 16 + 16 * 16) * 4


def test_benchmark_and_profile(lib):
    result = lib.benchmark(repeat=2, number=3, warmup=1)
    assert result.number == 3 and len(result.times_ms) == 2
    assert all(t > 0 for t in result.times_ms)
    profile = lib.profile({"x": _x(0)}, repeat=2)
    assert [name for name, _ in profile] == [step.name for step in lib.steps]
    assert all(ms > 0 for _, ms in profile)


def test_tune_model_stores_opencl_records_that_the_build_uses(tmp_path, mlp_path, mlp, lib):
    db_path = tmp_path / "tuning.db"
    with LocalBuilder(max_workers=1) as builder:
        result = autotune.tune_model(mlp_path, RUN_TARGET, trials=9, database=str(db_path),
                                     search=SearchConfig(batch_size=3, cost_model="random",
                                                         remeasure_top=1, remeasure_rounds=1),
                                     measure=FAST, builder=builder)
    assert result.target == RUN_TARGET and result.trials_run == 9
    assert result.coverage == 1.0, str(result)
    assert [f.source for f in result.build_report.functions] == ["record"] * 3
    assert "coverage: 100.0%" in str(result)
    with Database(db_path, create=False) as db:
        for task in result.tasks:
            assert db.records(task.key, RUN_TARGET)
            assert not db.records(task.key, str(autotune.Target("llvm")))

    tuned = build_model(mlp, RUN_TARGET, database=str(db_path))
    assert isinstance(tuned, GPUExecutor) and tuned.report.coverage == 1.0
    with autotune.apply_history_best(str(db_path), strict=True):
        again = autotune.build(mlp, RUN_TARGET)
    assert again.report.coverage == 1.0
    x = _x(4)
    expected = lib.run({"x": x})["y"]
    np.testing.assert_allclose(tuned.run({"x": x})["y"], expected, **TOL)
    np.testing.assert_allclose(again.run({"x": x})["y"], expected, **TOL)


def test_tune_model_command_on_opencl(tmp_path, mlp_path, capsys):
    db = tmp_path / "cli.db"
    code = cli.main([mlp_path, "--db", str(db), "--trials", "3", "--target", RUN_TARGET,
                     "--batch-size", "3", "--repeat", "1", "--min-repeat-ms", "1",
                     "--cost-model", "random", "--remeasure-top", "1", "--no-live"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"tune-model report: mlp on {RUN_TARGET}" in out and "coverage:" in out
    with Database(db, create=False) as opened:
        assert opened.count() == 3


def test_a_missing_device_is_refused_with_its_reason(mlp, mlp_path, tmp_path, capsys,
                                                     monkeypatch):
    # A platform no device matches.
    with pytest.raises(BuildError, match="no device matches -platform=no-such-device"):
        build_model(mlp, "opencl -platform=no-such-device")
    code = cli.main([mlp_path, "--db", str(tmp_path / "x.db"), "--trials", "2", "--target",
                     "opencl -platform=no-such-device", "--no-live"])
    assert code == cli.EXIT_USAGE
    assert "no device matches -platform=no-such-device" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()
    # No OpenCL device at all: a fresh context lookup that finds nothing.
    monkeypatch.setattr(gpu_module, "_CONTEXTS", {})
    monkeypatch.setattr(devices, "_opencl_devices", lambda: ((), None))
    with pytest.raises(BuildError, match="no OpenCL device; devices: none"):
        build_model(mlp, "opencl")
    with pytest.raises(TuneError, match="tune_model: target opencl: .*no OpenCL device"):
        autotune.tune_model(mlp, "opencl", trials=1, database=str(tmp_path / "y.db"))
    assert not (tmp_path / "y.db").exists()


def test_bad_inputs_and_targets_name_the_problem(lib, mlp):
    with pytest.raises(BuildError, match="no value for input 'x'"):
        lib.run({})
    with pytest.raises(BuildError, match=r"has no input\(s\) \['z'\]"):
        lib.run({"x": _x(0), "z": _x(0)})
    with pytest.raises(BuildError, match=r"input 'x' must have shape \(4, 16\)"):
        lib.run({"x": np.zeros((4, 15), np.float32)})
    with pytest.raises(BuildError, match="input 'x' must be float32"):
        lib.run({"x": np.zeros((4, 16), np.int32)})
    # The executor is still usable after a refused call.
    assert lib.run({"x": _x(0)})["y"].shape == (4, 16)
    with pytest.raises(TargetError, match="cuda"):
        build_model(mlp, "cuda")


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_model_matches_the_direct_convolution(m):
    from ..graph.helpers import check_winograd_build

    check_winograd_build(RUN_TARGET, m)


def test_blocked_layout_model_matches_the_nchw_model():
    from ..graph.helpers import check_blocked_build

    check_blocked_build(RUN_TARGET)
