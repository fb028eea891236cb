"""Shared pytest setup: the ``--update-golden`` option and the ``golden`` snapshot fixture."""
from __future__ import annotations

import difflib
import os
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
