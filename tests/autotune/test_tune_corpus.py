"""tune-model on every model of the ONNX corpus (tests/models) with a small budget: each run
ends with its report and 100% coverage (every task has a record).  Slow: real builds and
measurements, a minute or so for the larger models."""
from __future__ import annotations

import subprocess
import sys

import pytest

from autotune.frontends import load_model
from autotune.tuning.tune_model import model_tasks

from ..models.corpus import CORPUS, TORCH_MODELS, path_of

BATCH = 2
FAST = ["--batch-size", str(BATCH), "--repeat", "1", "--min-repeat-ms", "1", "--cost-model",
        "random", "--remeasure-top", "1", "--no-live", "--seed", "0"]


def _shapes(name: str) -> dict[str, tuple[int, ...]] | None:
    """The corpus shapes at batch 1 (tuning at the traced batch of 2 would only be slower);
    None for the static onnx.helper models."""
    if name not in TORCH_MODELS:
        return None
    return {input_name: (1, *shape[1:]) for input_name, shape, _ in CORPUS[name]}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_tune_model_on_a_corpus_model_reports_full_coverage(name, tmp_path):
    shapes = _shapes(name)
    # The warm-up visits every task with one batch: a budget of one batch per task is the
    # smallest that gives each task a record.
    trials = BATCH * len(model_tasks(load_model(path_of(name), shapes)))
    flags = [f"--input-shape={n}={'x'.join(map(str, s))}" for n, s in (shapes or {}).items()]
    report = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", path_of(name), "--db", str(tmp_path / "t.db"),
         "--trials", str(trials), "--min-coverage", "1.0", "--report", str(report), *flags,
         *FAST], check=False, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"trials: {trials} of a budget of {trials}" in proc.stdout
    assert "coverage: 100.0%" in proc.stdout
    assert "tune-model report" in (report / "report.txt").read_text()
