"""The tutorial notebooks: each runs top to bottom in a real Jupyter kernel within its time limit,
and each is stored with its outputs, so that it reads well on GitHub without running it.

A notebook runs through nbclient in a fresh ``python3`` kernel: ipykernel's own kernel spec,
which jupyter_client starts with this interpreter (``test_the_kernel_runs_this_python`` checks
that), in a temporary working directory that also holds its temporary and home folders, and
with a time-out per cell.  A cell that raises fails the test, naming the notebook and the cell.
The executed copy is thrown away; the stored outputs are refreshed by running this file as a
script after changing a notebook::

    python tests/test_tutorials.py tutorials/03_tensorize_int8.ipynb     # or no argument: all
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))

# The issue's limit for one tutorial in CI; the notebooks' budgets keep them far below it.
NOTEBOOK_SECONDS = 180
CELL_SECONDS = 150
KERNEL = "python3"
# Absolute paths of this machine have no place in stored outputs (they are shown on GitHub).
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:tmp|home|root|work|Users|private|var/folders)/")
MAX_NOTEBOOK_BYTES = 300_000


class CellFailed(Exception):
    """A cell of a tutorial raised or ran past its time-out; the message names it."""


def kernel_env(folder: Path) -> dict[str, str]:
    """The environment of a kernel working in ``folder``: this process's, with the temporary
    and home folders inside ``folder``.  The notebooks keep their databases in
    tempfile.mkdtemp() folders (a reader may look at them afterwards) and the accelerator
    compiles its model into ~/.cache/autotune/accel (the kernel is a process of its own, which
    tests/conftest.py's setting does not reach): both go with ``folder``, off the user's home
    folder, and each notebook starts as on a new machine."""
    home = folder / "home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(folder), "HOME": str(home)}


def execute(nb: nbformat.NotebookNode, name: str, cwd: Path) -> float:
    """Run the cells of ``nb`` in order, in place (their outputs replace the stored ones), in a
    fresh kernel whose working directory is ``cwd``; return the seconds it took.  Raises
    CellFailed naming the first code cell that raised or ran past CELL_SECONDS."""
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_SECONDS, startup_timeout=120,
                            resources={"metadata": {"path": str(cwd)}})
    start = time.perf_counter()
    number = 0
    with client.setup_kernel(env=kernel_env(cwd)):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            number += 1
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                raise CellFailed(f"{name}: code cell {number} ran past {CELL_SECONDS} s") \
                    from None
            except CellExecutionError as err:
                raise CellFailed(f"{name}: code cell {number} raised {err.ename}: "
                                 f"{err.evalue}") from None
    return time.perf_counter() - start


def code_cells(nb) -> list[tuple[int, nbformat.NotebookNode]]:
    """(number among the code cells, counted from 1, cell) for each code cell."""
    return list(enumerate((c for c in nb.cells if c.cell_type == "code"), 1))


def output_text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    return "\n".join(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))


# ---------------------------------------------------------------------------------------------
# The notebooks run
# ---------------------------------------------------------------------------------------------

def test_there_are_tutorials():
    names = {p.name for p in NOTEBOOKS}
    assert "01_quickstart.ipynb" in names
    assert {"02_custom_cpu_target.ipynb", "03_tensorize_int8.ipynb",
            "04_accelerator.ipynb"} <= names


def test_the_kernel_runs_this_python(tmp_path):
    # A kernel spec registered elsewhere (a user's) could start another interpreter, without
    # this checkout's packages; the tutorials must run in the environment under test.
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import os, sys; print(sys.executable); "
                                              "print(os.getcwd())"))
    NotebookClient(nb, kernel_name=KERNEL, timeout=60, startup_timeout=120,
                   resources={"metadata": {"path": str(tmp_path)}}).execute(
                       env=kernel_env(tmp_path))
    executable, cwd = nb.cells[0].outputs[0].text.split()
    assert os.path.realpath(executable) == os.path.realpath(sys.executable)
    assert os.path.realpath(cwd) == os.path.realpath(tmp_path)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    if path.name.startswith("03_"):
        from tensor_ir.target import Target

        if "dot_16x4_u8i8i32_vnni" not in Target.current_host().intrinsics:
            pytest.skip("03_tensorize_int8 teaches AVX-512 VNNI, which this CPU lacks")
    nb = nbformat.read(path, as_version=4)
    try:
        seconds = execute(nb, path.name, tmp_path)
    except CellFailed as err:
        pytest.fail(str(err), pytrace=False)
    assert seconds < NOTEBOOK_SECONDS, \
        f"{path.name} took {seconds:.0f} s, over the {NOTEBOOK_SECONDS} s a tutorial may take"


# ---------------------------------------------------------------------------------------------
# The notebooks are stored with their outputs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_with_outputs(path):
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES, f"{path.name}: outputs too large"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL, path.name
    cells = code_cells(nb)
    assert cells, f"{path.name} has no code cells"
    # Executed top to bottom in one kernel: counts 1, 2, 3, ... in cell order.
    counts = [cell.get("execution_count") for _, cell in cells]
    assert counts == list(range(1, len(cells) + 1)), \
        f"{path.name}: execution counts {counts}; store it as run top to bottom in one kernel"
    for number, cell in cells:
        where = f"{path.name} code cell {number}"
        outputs = cell.get("outputs", [])
        kinds = {o.output_type for o in outputs}
        assert "error" not in kinds, f"{where} is stored with an error output"
        if re.search(r"\bprint\(", cell.source):
            assert outputs, f"{where} prints but is stored without outputs"
        if re.search(r"\bplt\.show\(", cell.source):
            assert any("image/png" in o.get("data", {}) for o in outputs), \
                f"{where} plots but is stored without its image"
        for output in outputs:
            text = output_text(output)
            assert str(TUTORIALS.parent) not in text, \
                f"{where}: an output shows the checkout's path"
            found = MACHINE_PATH.search(text)
            assert found is None, f"{where}: an output shows a machine-specific path: " \
                                  f"{text[max(0, found.start() - 40):found.end() + 40]!r}"


def store_outputs(path: Path) -> None:
    """Run ``path`` as the test does and write it back with its outputs (what the stored-outputs
    test expects): the code untouched, cell timing metadata dropped."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="tutorial-") as cwd:
        seconds = execute(nb, path.name, Path(cwd))
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"{path.name}: {seconds:.0f} s, stored with outputs")


if __name__ == "__main__":
    for arg in sys.argv[1:] or NOTEBOOKS:
        store_outputs(Path(arg))
