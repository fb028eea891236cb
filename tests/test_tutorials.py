"""The tutorial notebooks run from top to bottom (their budgets are small).

Each notebook's code cells are executed in order in one namespace, in a temporary working
directory, as a kernel would run them; a cell that raises fails the test and names the cell.
(This is what nbmake does, without starting a Jupyter kernel: the notebooks use no magics
or display hooks, so plain execution is equivalent and needs no extra packages.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))


def code_cells(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    assert doc.get("nbformat") == 4, f"{path.name}: not an nbformat 4 notebook"
    cells = []
    for cell in doc["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            cells.append(source if isinstance(source, str) else "".join(source))
    return cells


def test_there_are_tutorials():
    assert any(p.name == "01_quickstart.ipynb" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for number, source in enumerate(code_cells(path), 1):
        assert not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()), \
            f"{path.name} code cell {number} uses IPython syntax, which this runner lacks"
        try:
            exec(compile(source, f"{path.name}[cell {number}]", "exec"), namespace)
        except Exception as err:
            pytest.fail(f"{path.name}: code cell {number} raised {type(err).__name__}: {err}")
