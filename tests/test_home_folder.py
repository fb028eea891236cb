"""A test session leaves the home folder alone (the promise of tests/conftest.py): tests that
would write under it by default -- the simulated accelerator compiles its functional model
into ``~/.cache/autotune/accel``, jupyter_client and the notebooks' kernel make IPython's
folder -- run in a child pytest whose home folder is an empty temporary one, and it stays
empty."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The cheapest tests that compile the accelerator's model and build a tensorized program with
# the defaults (no cache_dir given), as a user's first calls would, and one that starts a kernel.
ACCEL = "tests/autotune/test_accelerator.py"
TESTS = [f"{ACCEL}::test_functional_model_computes_one_gemm_tile_with_strides",
         f"{ACCEL}::test_extreme_values_are_exact",
         "tests/test_tutorials.py::test_the_kernel_runs_this_python"]


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler to build the accelerator's model")
def test_a_session_writes_nothing_under_the_home_folder(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # The parent's pytest and xdist variables would tell the child it is a worker of this run;
    # the folders tests/conftest.py chose for this session are the child's to choose.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("XDG_CACHE_HOME", "MPLCONFIGDIR",
                                                        "IPYTHONDIR")}
    env["HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         *TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"{len(TESTS)} passed" in proc.stdout, proc.stdout[-4000:]
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert written == [], f"the test session wrote under the home folder: {written}"
