"""Shared pytest setup: the ``--update-golden`` option and the ``golden`` snapshot fixture."""
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
