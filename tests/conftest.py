"""Shared pytest setup: the ``--update-golden`` option, the ``golden`` snapshot fixture, and the
settings that keep the suite off the home folder and off a quiet-host wait."""
from __future__ import annotations

import atexit
import difflib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"

# No cubin cache on disk in the tests (tensor_ir.codegen.gpu_verify.compile_cubin): a test that
# counts nvcc runs must not find kernels a run before it compiled, and the suite must leave
# nothing in the home folder.  The test of the disk cache names a folder of its own.
os.environ["AUTOTUNE_CUDA_CACHE"] = ""
# No waiting for a quiet host before timing (MeasureConfig.quiet_wait): the suite's timings
# need none, and on a machine whose cores change placement a wait would only stretch runs
# that tests bound in time (the CLI's and the Ray cluster's, in child processes too).  The
# tests of the wait ask for it.
os.environ["AUTOTUNE_QUIET_WAIT"] = "0"
# Compiled bytecode for the processes the suite starts (measurement workers, the CLI in child
# processes), kept in a folder of the session's own that goes at its end.  A machine set not
# to write bytecode (PYTHONDONTWRITEBYTECODE) would otherwise have every worker compile the
# whole package from source before it does anything: about 1.5 s of each 3.5 s tuning call
# of a small kernel.  The suite's own process keeps the machine's setting.
if sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE"):
    _PYCACHE = tempfile.mkdtemp(prefix="autotune-tests-pycache-")
    atexit.register(shutil.rmtree, _PYCACHE, ignore_errors=True)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE

# Third-party caches under the home folder: PoCL's kernels (~/.cache/pocl), zig's C library
# stubs for cross-linking (~/.cache/zig), onnxruntime's device id (~/.cache/Microsoft),
# pyopencl's (~/.cache/pytools), matplotlib's font list and config folder (~/.cache/matplotlib,
# ~/.config/matplotlib), IPython's folder that jupyter_client makes when it looks up the
# notebooks' kernel (~/.ipython) go to a folder of the session's own, unless the machine names
# its own.  Set before xdist starts its workers, so that they share it.
_UNSET = [name for name in ("XDG_CACHE_HOME", "MPLCONFIGDIR", "IPYTHONDIR")
          if not os.environ.get(name)]
if _UNSET:
    _CACHES = tempfile.mkdtemp(prefix="autotune-tests-caches-")
    atexit.register(shutil.rmtree, _CACHES, ignore_errors=True)
    for _name in _UNSET:
        os.environ[_name] = os.path.join(_CACHES, _name.lower())
        os.mkdir(os.environ[_name])

# The simulated accelerator compiles its functional model into a cache folder, by default
# ~/.cache/autotune/accel: here a folder of this process's own that goes at its end
# (autotune.accel.set_cache_dir).  Imported after the settings above, which the packages read.
# Child processes that import autotune.accel by themselves (the tutorial notebooks' kernels)
# get a home folder of their own instead (tests/test_tutorials.py).  tests/test_home_folder.py
# checks that a session leaves the home folder empty.
try:
    from autotune import accel
except Exception:  # noqa: BLE001
    # NOTE: a package that does not import fails the tests that import it, with their names;
    # failing here would stop the collection of every test, tensor_ir's too.
    accel = None
if accel is not None:
    _ACCEL_CACHE = tempfile.mkdtemp(prefix="autotune-tests-accel-")
    atexit.register(shutil.rmtree, _ACCEL_CACHE, ignore_errors=True)
    accel.set_cache_dir(_ACCEL_CACHE)


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="rewrite the snapshot files under tests/golden/ instead of comparing with them")


class Golden:
    """Compare text with ``tests/golden/<name>.txt`` (or rewrite it under --update-golden)."""

    def __init__(self, update: bool, directory: Path = GOLDEN_DIR):
        self.update = update
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.txt"

    def check(self, name: str, text: str) -> None:
        path = self.path(name)
        text = text.rstrip("\n") + "\n"
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"golden snapshot {path} is missing; run pytest with --update-golden "
                        f"to create it, then review it")
        expected = path.read_text()
        if expected != text:
            diff = "".join(difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True),
                fromfile=f"{path} (stored)", tofile="current output"))
            pytest.fail(f"output differs from golden snapshot {path.name} "
                        f"(rerun with --update-golden if the change is intended):\n{diff}")


@pytest.fixture
def golden(request) -> Golden:
    return Golden(request.config.getoption("--update-golden"))
