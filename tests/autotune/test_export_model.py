"""Exported models: one library, the weights and a loader that needs numpy alone."""
from __future__ import annotations

import copy
import ctypes
import dataclasses
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from autotune.runtime.build import load_module
from autotune.graph import GraphBuilder
from autotune.graph.build import build_model
from schedules.space import DesignSpace
from tensor_ir.errors import BuildError
from tensor_ir.target import TargetError

from ..graph.helpers import TARGET, conv_bn_relu_model, random_inputs


def two_output_model():
    """x[4, 32] -> matmul + bias -> relu = h; outputs: h reshaped (a view) and
    softmax(h @ w2)."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("two_outputs")
    x = b.input("x", (4, 32))
    h = b.op("matmul", [x, b.constant(rng.normal(0, 0.3, (32, 16)).astype(np.float32))])
    h = b.op("add", [h, b.constant(rng.normal(0, 0.3, 16).astype(np.float32))])
    h = b.op("relu", [h])
    b.output(b.op("reshape", [h], shape=(64,)), "hidden")
    y = b.op("matmul", [h, b.constant(rng.normal(0, 0.3, (16, 8)).astype(np.float32))])
    b.output(b.op("softmax", [y], axis=-1), "probs")
    return b.build()


def _packing_lookup(func):
    """Records for the convolutions that pack their weights (so the build pre-packs them)."""
    if "conv2d" not in func.name:
        return None
    space = DesignSpace(func, TARGET)
    for sketch in range(len(space.sketches)):
        for seed in range(8):
            cand = space.sample(seed=seed, sketch=sketch)
            if any(i.kind == "pack_layout" for i in cand.final_trace):
                return cand.final_trace
    raise AssertionError(f"no sketch of {func.name} packs its weights")


def _load_loader(folder):
    """The loader.py of an export, imported from its file under a name of its own."""
    path = os.path.join(folder, "loader.py")
    spec = importlib.util.spec_from_file_location(f"loader_{abs(hash(str(folder)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (model, executor, export folder) for the three models of these tests."""
    out = {}
    packed_model = conv_bn_relu_model(channels=16, image=7)
    cases = {
        "conv": (conv_bn_relu_model(), {}),
        "packed": (packed_model, {"lookup": _packing_lookup, "warn": False}),
        "two_outputs": (two_output_model(), {}),
    }
    for name, (model, options) in cases.items():
        lib = build_model(model, TARGET, **options)
        folder = str(tmp_path_factory.mktemp(f"export_{name}") / "artifact")
        assert lib.export_library(folder) == folder
        out[name] = (model, lib, folder)
    return out


def test_layout_of_an_export(built):
    _, lib, folder = built["packed"]
    names = sorted(os.listdir(folder))
    assert names[0] == "loader.py" and names[2:] == ["model.json", "weights.bin"]
    assert names[1].startswith("model-") and names[1].endswith(".so")
    with open(os.path.join(folder, "model.json")) as f:
        meta = json.load(f)
    assert meta["format_version"] == 1 and meta["entry"] == "model_run"
    assert meta["inputs"] == [{"name": "input", "shape": [1, 16, 7, 7], "dtype": "float32",
                               "offset": meta["inputs"][0]["offset"]}]
    assert [o["name"] for o in meta["outputs"]] == ["output"]
    assert meta["alignment"] == 64 and meta["workspace_bytes"] == lib.memory_bytes
    assert os.path.getsize(os.path.join(folder, "weights.bin")) == meta["weights_bytes"]
    assert all(w["offset"] % 64 == 0 for w in meta["weights"])
    # The pre-packed weights are what the kernels read, and they are in the file.
    packed = [a for s in lib.steps for a in s.args if "@" in a]
    assert len(packed) == 2 and {w["name"] for w in meta["weights"]} >= set(packed)
    assert [k["step"] for k in meta["kernels"]] == [s.name for s in lib.steps]
    # One exported symbol: the kernels and their metadata constants are internal.
    so = ctypes.CDLL(_library(folder))
    assert hasattr(so, "model_run")
    for step in lib.steps:
        assert not hasattr(so, step.kernel.entry_name)


@pytest.mark.parametrize("name", ["conv", "packed", "two_outputs"])
def test_loaded_export_gives_the_built_models_outputs(built, name):
    model, lib, folder = built[name]
    deployed = _load_loader(folder).load(folder, verify=True)
    for seed in (0, 1):
        inputs = random_inputs(model, seed)
        expected = lib.run(inputs)
        got = deployed.run(inputs)
        assert list(got) == list(model.outputs)
        for key, value in expected.items():
            # The same machine code on the same data: the same bits.
            np.testing.assert_array_equal(got[key], value)
            assert got[key].dtype == value.dtype
        reference = model.evaluate(inputs)
        for key, value in reference.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5)
    # Outputs are fresh arrays; keyword arguments work as in Executor.run.
    first = deployed.run(random_inputs(model, 0))
    kept = {k: v.copy() for k, v in first.items()}
    again = deployed(**random_inputs(model, 1))
    for key, value in kept.items():
        np.testing.assert_array_equal(first[key], value)
        assert not np.shares_memory(first[key], again[key])


def test_export_runs_where_only_numpy_is_installed(built, tmp_path):
    model, lib, folder = built["packed"]
    # A site folder holding numpy alone (and the shared libraries of its wheel).
    site = tmp_path / "site"
    site.mkdir()
    numpy_dir = os.path.dirname(np.__file__)
    os.symlink(numpy_dir, site / "numpy")
    if os.path.isdir(numpy_dir + ".libs"):
        os.symlink(numpy_dir + ".libs", site / "numpy.libs")
    inputs = random_inputs(model, 3)
    np.save(tmp_path / "input.npy", inputs["input"])
    script = tmp_path / "deploy.py"
    script.write_text(textwrap.dedent("""
        import sys
        site, artifact, work = sys.argv[1:4]
        sys.path[:0] = [site, artifact]
        try:
            import llvmlite  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("llvmlite is importable: the test environment is not bare")
        for name in ("onnx", "xgboost", "sklearn", "autotune", "tensor_ir"):
            try:
                __import__(name)
            except ImportError:
                continue
            raise SystemExit(f"{name} is importable: the test environment is not bare")
        import numpy as np
        from loader import load
        model = load(artifact)
        outputs = model.run({"input": np.load(work + "/input.npy")})
        np.save(work + "/output.npy", outputs["output"])
        timing = model.benchmark(repeat=2, min_repeat_ms=5)
        assert timing["median_ms"] > 0, timing
        assert "autotune" not in sys.modules and "llvmlite" not in sys.modules
    """))
    proc = subprocess.run([sys.executable, "-I", "-S", str(script), str(site), folder,
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "output.npy"), lib.run(inputs)["output"])


def test_run_rejects_inputs_that_do_not_fit(built):
    model, lib, folder = built["conv"]
    loader = _load_loader(folder)
    deployed = loader.load(folder)
    good = random_inputs(model, 0)["input"]
    with pytest.raises(loader.InputError, match="no value for input 'input'"):
        deployed.run({})
    with pytest.raises(loader.InputError, match=r"has no input\(s\) \['x'\]"):
        deployed.run({"input": good, "x": good})
    with pytest.raises(loader.InputError, match=r"must have shape \(1, 8, 12, 12\)"):
        deployed.run({"input": good[..., :11]})
    with pytest.raises(loader.InputError, match="must be float32, got int64"):
        deployed.run({"input": good.astype(np.int64)})
    with pytest.raises(loader.InputError, match="takes a dict"):
        deployed.run([good])
    # Another precision of the same kind is converted, as the built model does; and a
    # non-contiguous input is copied.
    np.testing.assert_array_equal(deployed.run({"input": good.astype(np.float64)})["output"],
                                  lib.run({"input": good})["output"])
    strided = np.asfortranarray(good)
    np.testing.assert_array_equal(deployed.run(input=strided)["output"],
                                  lib.run({"input": good})["output"])


_COPIES = itertools.count()


def _broken_copy(folder, tmp_path):
    # A new path each time: a library once loaded stays loaded for its path.
    copied = tmp_path / f"copy{next(_COPIES)}"
    shutil.copytree(folder, copied)
    return copied


def _library(folder) -> str:
    with open(os.path.join(folder, "model.json")) as f:
        return os.path.join(folder, json.load(f)["library"])


def test_load_errors_name_what_is_wrong(built, tmp_path):
    _, _, folder = built["conv"]
    loader = _load_loader(folder)
    with pytest.raises(loader.LoadError, match="not a folder"):
        loader.load(tmp_path / "nowhere")
    with pytest.raises(loader.LoadError, match="has no model.json"):
        loader.load(tmp_path)

    broken = _broken_copy(folder, tmp_path)
    os.remove(broken / "weights.bin")
    with pytest.raises(loader.LoadError, match="weights file .* is missing"):
        loader.load(broken)
    shutil.rmtree(broken)

    broken = _broken_copy(folder, tmp_path)
    with open(broken / "weights.bin", "ab") as f:
        f.write(b"\0" * 64)
    with pytest.raises(loader.LoadError, match="bytes, the metadata says"):
        loader.load(broken)
    shutil.rmtree(broken)

    broken = _broken_copy(folder, tmp_path)
    data = bytearray((broken / "weights.bin").read_bytes())
    data[0] ^= 0xFF
    (broken / "weights.bin").write_bytes(bytes(data))
    loader.load(broken)  # the checksum is only read when asked for
    with pytest.raises(loader.LoadError, match="does not match its checksum"):
        loader.load(broken, verify=True)
    shutil.rmtree(broken)

    broken = _broken_copy(folder, tmp_path)
    meta = json.loads((broken / "model.json").read_text())
    meta["format_version"] = 99
    (broken / "model.json").write_text(json.dumps(meta))
    with pytest.raises(loader.LoadError, match="format version 99; this loader reads "
                                               "version 1"):
        loader.load(broken)
    meta["format_version"] = 1
    meta["byteorder"] = "big" if sys.byteorder == "little" else "little"
    (broken / "model.json").write_text(json.dumps(meta))
    with pytest.raises(loader.LoadError, match="-endian weights; this machine is"):
        loader.load(broken)
    meta["format"] = "something-else"
    (broken / "model.json").write_text(json.dumps(meta))
    with pytest.raises(loader.LoadError, match="does not describe an exported model"):
        loader.load(broken)
    (broken / "model.json").write_text("{not json")
    with pytest.raises(loader.LoadError, match="cannot read"):
        loader.load(broken)
    shutil.rmtree(broken)

    broken = _broken_copy(folder, tmp_path)
    with open(_library(broken), "wb") as f:
        f.write(b"not a shared library")
    with pytest.raises(loader.LoadError, match="cannot load"):
        loader.load(broken)
    os.remove(_library(broken))
    with pytest.raises(loader.LoadError, match="library .* is missing"):
        loader.load(broken)
    shutil.rmtree(broken)


def test_entry_refuses_unaligned_buffers(built):
    # The C entry as a C program would call it: the workspace and the weights must be
    # 64-byte aligned (the kernels were compiled and tuned for aligned buffers).
    folder = built["conv"][2]
    deployed = _load_loader(folder).load(folder)
    entry = ctypes.CDLL(_library(folder)).model_run
    entry.restype = ctypes.c_int32
    entry.argtypes = [ctypes.c_void_p] * 4
    workspace = deployed._workspace.ctypes.data
    weights = deployed._weights.ctypes.data
    assert entry(None, weights, None, None) == 1
    assert entry(workspace + 8, weights, None, None) == 1
    assert entry(workspace, weights + 4, None, None) == 2
    assert entry(workspace, None, None, None) == 2
    assert entry(workspace, weights, None, None) == 0


def test_export_refuses_what_it_cannot_write(built, tmp_path):
    _, lib, folder = built["conv"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(BuildError, match="not empty and holds no earlier export"):
        lib.export_library(tmp_path / "other")
    (tmp_path / "file").write_text("")
    with pytest.raises(BuildError, match="exists and is not a folder"):
        lib.export_library(tmp_path / "file")
    # A kernel reloaded from a file has no LLVM module left to link.
    lib.steps[0].kernel.export_library(tmp_path / "kernel.so")
    reloaded = copy.copy(lib)
    reloaded.steps = [dataclasses.replace(lib.steps[0],
                                          kernel=load_module(tmp_path / "kernel.so")),
                      *lib.steps[1:]]
    with pytest.raises(BuildError, match="holds no compiled module"):
        reloaded.export_library(tmp_path / "reloaded")
    gpu_like = copy.copy(lib)
    gpu_like.target = "opencl"
    with pytest.raises(TargetError, match="CPU .llvm. models"):
        gpu_like.export_library(tmp_path / "gpu")
    # Exporting another model over an earlier export, loaded in this process already,
    # replaces it: loading again gives the new model.
    again = shutil.copytree(folder, tmp_path / "again")
    loader = _load_loader(again)
    loader.load(again)
    model, packed_lib, _ = built["packed"]
    packed_lib.export_library(again)
    assert len([n for n in os.listdir(again) if n.endswith(".so")]) == 1
    inputs = random_inputs(model, 0)
    np.testing.assert_array_equal(loader.load(again).run(inputs)["output"],
                                  packed_lib.run(inputs)["output"])
