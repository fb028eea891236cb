"""Nothing from the system's toolchain: in a process whose PATH holds no cc, gcc, ld or clang
(only the Python running it) and whose library path is cleared, a small model is built,
tuned, exported and run from the export, and the system's libgomp is never loaded."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ziglang")  # the linker the export takes without a system compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import os, shutil, sys
    for tool in ("cc", "gcc", "ld", "clang", "c++"):
        assert shutil.which(tool) is None, f"{tool} is reachable"
    import numpy as np
    import autotune
    from autotune.measure import MeasureConfig
    from autotune.tuning.tune_model import BuildConfig
    from search import SearchConfig
    from tests.autotune.tiny_onnx import write_tiny_mlp

    path = write_tiny_mlp("mlp.onnx")
    result = autotune.tune_model(path, "llvm", trials=9, database="t.db",
                                 search=SearchConfig(batch_size=3, remeasure_top=0),
                                 measure=MeasureConfig(repeat=1, min_repeat_ms=1.0),
                                 build=BuildConfig(rerank_top=0))
    assert result.trials == 9 and result.coverage == 1.0, result
    model = autotune.load_model(path)
    with autotune.apply_history_best("t.db", strict=True):
        lib = autotune.build(model, "llvm")
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    want = lib.run({"x": x})["y"]
    lib.export_library("artifact")
    sys.path.insert(0, "artifact")
    from loader import load
    got = load("artifact").run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    # The kernels need no OpenMP: a libgomp in the process can only be one a wheel ships
    # for itself (scikit-learn's, which xgboost's cost model loads), never the system's.
    with open("/proc/self/maps") as f:
        gomp = {line.split()[-1] for line in f if "libgomp" in line}
    assert all("site-packages" in p or "dist-packages" in p for p in gomp), gomp
    print("OK")
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_build_tune_export_and_run_without_a_system_toolchain(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    env = {key: value for key, value in os.environ.items()
           if key not in ("LD_LIBRARY_PATH", "CC", "CXX", "LD")}
    env["PATH"] = str(bin_dir)
    env["PYTHONPATH"] = ROOT
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([str(bin_dir / "python"), "-c", SCRIPT], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
    assert shutil.which("python", path=str(bin_dir))  # the only tool there
