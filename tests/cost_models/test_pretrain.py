"""Cost models trained from a database: the training set read from real tuning records, pretrain,
save and load, grouped evaluation, ``python -m cost_models``, and warm starts in tuning."""
from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autotune
import cost_models
import search
from autotune import cli
from autotune.measure import MeasureConfig
from cost_models import CostModel, CostModelError
from cost_models.__main__ import main as cost_models_main
from records import Database, MemoryDatabase, TuningRecord, Workload
from schedules.space import DesignSpace
from search import SearchConfig
from search.pool import CandidatePool
from tensor_ir import ops

from ..autotune.tiny_onnx import write_tiny_mlp

FAST_SEARCH = {"batch_size": 8, "remeasure_top": 0, "cost_model": "random"}
FAST = {"measure": MeasureConfig(repeat=1, min_repeat_ms=1), "log": False}
TRIALS = 16
CUDA = "cuda -arch=sm_80"


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def funcs():
    return [ops.matmul(32, 32, 32), ops.matmul(16, 48, 32),
            ops.conv2d_nchw(1, 4, 8, 8, 8, 3, 3, padding=1)]


@pytest.fixture(scope="module")
def db_path(tmp_path_factory, funcs):
    """Real records of three tiny workloads, plus one error record and one record of another
    target family (a CUDA target: never replayed for the CPU)."""
    path = tmp_path_factory.mktemp("pretrain") / "tuning.db"
    for i, func in enumerate(funcs):
        autotune.tune(func, "llvm", trials=TRIALS, database=str(path),
                      search=SearchConfig(seed=i, **FAST_SEARCH), **FAST)
    with Database(path) as db:
        key = Workload(funcs[0]).key
        first = db.records(key)[0]
        db.commit_records([
            TuningRecord(key, first.target, first.trace_json, error_kind="build",
                         error_msg="synthetic failure", timestamp=1.0),
            TuningRecord(key, CUDA, first.trace_json, (1e-3,), timestamp=2.0)])
    return path


@pytest.fixture(scope="module")
def model_path(db_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "model.json"
    cost_models.pretrain(db_path, out=out, target="llvm")
    return out


# -- training_set -----------------------------------------------------------------------------

def test_training_set_reads_every_record_of_the_target_family(db_path, funcs):
    data = cost_models.training_set(db_path, target="llvm")
    keys = [Workload(f).key for f in funcs]
    assert len(data) == 3 * TRIALS + 1 == len(data.times) == len(data.workloads)
    assert list(dict.fromkeys(data.workloads)) == keys
    assert data.skipped["other_target"] == 1 and data.skipped["no_replay"] == 0
    assert int(np.sum(np.isinf(data.times))) == 1          # the error record, kept as inf
    assert np.all(data.times[np.isfinite(data.times)] > 0)
    assert data.features().shape == (len(data), cost_models.features.NUM_FEATURES)
    assert data.names[keys[0]].startswith("matmul(")
    assert data.family == cost_models.target_family("llvm")
    # The features are those of the replayed programs, as the tuning loop computes them.
    c = data.candidates[0]
    np.testing.assert_array_equal(c.features, cost_models.features.features(c.func, c.target))
    assert data.summary()["errors"] == 1


def test_training_set_filters(db_path, funcs):
    keys = [Workload(f).key for f in funcs]
    only = cost_models.training_set(db_path, target=autotune.Target("llvm"),
                                    workloads=[keys[1][:12]])
    assert set(only.workloads) == {keys[1]} and len(only) == TRIALS
    rest = cost_models.training_set(db_path, exclude=[keys[0], funcs[2]], target="llvm")
    assert set(rest.workloads) == {keys[1]}
    few = cost_models.training_set(db_path, target="llvm", max_per_workload=5)
    assert [few.workloads.count(k) for k in keys] == [5, 5, 5]


def test_training_set_errors_are_typed(db_path, tmp_path):
    with pytest.raises(CostModelError, match="several target families"):
        cost_models.training_set(db_path)           # llvm and cuda records: which one?
    assert len(cost_models.training_set(db_path, target=CUDA)) == 1
    key = cost_models.training_set(db_path, target="llvm").workloads[-1]
    with pytest.raises(CostModelError, match="no usable records"):
        cost_models.training_set(db_path, target=CUDA, workloads=[key])
    with pytest.raises(CostModelError, match="unknown target"):
        cost_models.training_set(db_path, target="no-such-target")
    with pytest.raises(CostModelError, match="no workload"):
        cost_models.training_set(db_path, target="llvm", workloads=["ffffffff"])
    with pytest.raises(CostModelError, match="no database file"):
        cost_models.training_set(tmp_path / "missing.db")
    (tmp_path / "junk.db").write_text("not a database")
    with pytest.raises(CostModelError, match="cannot read tuning records"):
        cost_models.training_set(tmp_path / "junk.db")
    with pytest.raises(CostModelError, match="holds no records"):
        cost_models.training_set(MemoryDatabase())
    with pytest.raises(CostModelError, match="max_per_workload"):
        cost_models.training_set(db_path, target="llvm", max_per_workload=0)


# -- pretrain and evaluate ----------------------------------------------------------------------

def test_pretrained_model_saves_and_loads_with_identical_predictions(db_path, model_path):
    data = cost_models.training_set(db_path, target="llvm")
    model = cost_models.pretrain(data)
    assert model.is_trained and len(model.training_data()) == len(data)
    again = cost_models.load(model_path)
    assert again.is_trained
    x = data.features()
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    # Trained on every workload, it ranks their measured programs better than chance.
    assert cost_models.pairwise_accuracy(model.predict(x), data.times, data.workloads) > 0.6


def test_evaluate_holds_workloads_out(db_path):
    report = cost_models.evaluate(db_path, target="llvm", folds=5, seed=0)
    assert report["folds"] == 3 and report["workloads"] == 3    # at most one per workload
    assert report["rows"] == 3 * TRIALS + 1
    for side in ("model", "random"):
        metrics = report["pooled"][side]
        assert set(metrics) == {"accuracy", "spearman", "kendall", "ndcg"}
        assert 0.0 <= metrics["accuracy"] <= 1.0
        assert -1.0 <= metrics["spearman"] <= 1.0 and 0.0 <= metrics["ndcg"] <= 1.0
    assert len(report["per_fold"]) == 3 and len(report["per_workload"]) == 3
    assert all(len(f["test_workloads"]) == 1 for f in report["per_fold"])
    json.dumps(report)
    with pytest.raises(CostModelError, match="at least two workloads"):
        cost_models.evaluate(db_path, target="llvm", workloads=[report["per_workload"][0]
                                                                ["workload"]])
    with pytest.raises(CostModelError, match="folds"):
        cost_models.evaluate(db_path, target="llvm", folds=1)


# -- the command line -------------------------------------------------------------------------

def test_cli_pretrain_and_evaluate_print_json(db_path, tmp_path, capsys):
    out = tmp_path / "cli_model.json"
    assert cost_models_main(["pretrain", "--db", str(db_path), "--out", str(out),
                             "--target", "llvm", "--seed", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == 3 * TRIALS + 1 and doc["workloads"] == 3 and doc["trained"]
    assert cost_models.load(out).is_trained
    key = cost_models.training_set(db_path, target="llvm").workloads[0]
    assert cost_models_main(["evaluate", "--db", str(db_path), "--target", "llvm",
                             "--folds", "2", "--exclude-workload", key[:10]]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workloads"] == 2 and doc["folds"] == 2
    assert 0.0 <= doc["pooled"]["model"]["accuracy"] <= 1.0


@pytest.mark.parametrize("args, message", [
    (["evaluate", "--db", "{missing}"], "no database file"),
    (["evaluate", "--db", "{db}"], "several target families"),
    (["pretrain", "--db", "{db}", "--out", "{tmp}/no/such/folder/m.json"], "does not exist"),
    (["evaluate", "--db", "{db}", "--target", "llvm", "--folds", "0"], "folds"),
    (["evaluate", "--db", "{db}", "--kind", "nope"], "invalid choice"),
    (["pretrain", "--db", "{db}"], "--out"),
])
def test_cli_errors_are_one_line_and_exit_2(db_path, tmp_path, capsys, args, message):
    args = [a.format(db=db_path, tmp=tmp_path, missing=tmp_path / "missing.db") for a in args]
    try:
        code = cost_models_main(args)
    except SystemExit as stop:    # argparse's own usage errors
        code = stop.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1


def test_cli_runs_as_a_module(db_path):
    proc = subprocess.run([sys.executable, "-m", "cost_models", "evaluate", "--db",
                           str(db_path)], check=False, capture_output=True, text=True,
                           timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("python -m cost_models evaluate: ")


# -- warm starts in tuning ----------------------------------------------------------------------

class CountingModel(CostModel):
    """Scores by the sum of the features; counts how often search asks."""

    kind = "counting"

    def __init__(self, trained: bool):
        self.trained = trained
        self.calls = 0

    @property
    def is_trained(self) -> bool:
        return self.trained

    def update(self, candidates, results) -> None:
        pass

    def predict(self, candidates) -> np.ndarray:
        self.calls += 1
        return cost_models.feature_matrix(candidates).sum(axis=1).astype(np.float64)

    def save(self, path) -> None:
        raise NotImplementedError

    def load(self, path) -> None:
        raise NotImplementedError


@pytest.mark.parametrize("trained", [False, True])
def test_the_first_batch_is_ranked_only_by_a_trained_model(trained):
    space = DesignSpace(ops.matmul(32, 32, 32), "llvm")
    strategy = search.create("evolutionary", seed=0)
    model = CountingModel(trained)
    strategy.initialize(CandidatePool(space, "key"), model, [])
    batch = strategy.propose(8)
    assert len(batch) == 8
    if not trained:
        assert model.calls == 0 and {c.origin for c in batch} == {"random"}
        return
    # Ranked: all but the epsilon-greedy share are the best predicted of a larger population,
    # each sketch's best in turn (a model that never saw the task may misjudge a sketch).
    assert model.calls > 0
    ranked = batch[:-1]
    sketch = {c.program_hash: space.sketch_of(c.final_trace) for c in ranked}
    others = list(strategy.population.values())
    assert others
    kinds = {space.sketch_of(c.final_trace) for c in others} | set(sketch.values())
    assert len(set(sketch.values())) == min(len(kinds), len(ranked))
    for k in set(sketch.values()):
        mine = [c.predicted for c in ranked if sketch[c.program_hash] == k]
        assert mine == sorted(mine, reverse=True)
        rest = [c.predicted for c in others if space.sketch_of(c.final_trace) == k]
        assert not rest or mine[0] >= max(rest)


def test_tune_warm_starts_from_a_saved_model_and_leaves_the_file(model_path):
    before = digest(model_path)
    func = ops.matmul(24, 40, 32)                  # a workload the model never saw
    loaded = cost_models.from_spec(model_path)
    assert isinstance(loaded, cost_models.XGBCostModel) and loaded.is_trained
    result = autotune.tune(func, "llvm", trials=8,
                           search=SearchConfig(**{**FAST_SEARCH, "cost_model": str(model_path)}),
                           **FAST)
    assert result.trials == 8 and math.isfinite(result.best_time)
    # The model ranked the first batch: its held-out predictions count from trial 1.
    assert math.isfinite(result.model_accuracy)
    assert any(t.predicted not in (None, 0.0) for t in result.history)
    assert digest(model_path) == before


def test_a_cost_model_that_is_neither_kind_nor_file_is_named(tmp_path):
    func = ops.matmul(8, 8, 8)
    with pytest.raises(CostModelError, match="neither a registered kind.*nor an existing"):
        autotune.tune(func, trials=1,
                      search=SearchConfig(cost_model=str(tmp_path / "missing.json")), log=False)
    with pytest.raises(CostModelError, match="does not exist"):
        cost_models.from_spec(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(CostModelError, match="not a saved cost model"):
        autotune.tune(func, trials=1, search=SearchConfig(cost_model=tmp_path / "bad.json"),
                      log=False)


def test_tune_model_cli_starts_every_task_from_the_file(model_path, tmp_path, capsys):
    before = digest(model_path)
    model = write_tiny_mlp(tmp_path / "mlp.onnx", n=16)
    db = str(tmp_path / "model.db")
    fast = ["--batch-size", "2", "--repeat", "1", "--min-repeat-ms", "1", "--remeasure-top",
            "0", "--no-live", "--policy", "round-robin"]
    code = cli.main([model, "--db", db, "--trials", "6", "--cost-model-file", str(model_path),
                     *fast])
    assert code == 0, capsys.readouterr().err
    assert digest(model_path) == before
    with Database(db, create=False) as handle:
        assert handle.count() == 6
    capsys.readouterr()
    assert cli.main([model, "--db", db, "--cost-model-file", str(tmp_path / "none.json"),
                     *fast]) == cli.EXIT_USAGE
    assert "cannot read cost model file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main([model, "--db", db, "--cost-model", "xgb", "--cost-model-file",
                  str(model_path)])
    assert stop.value.code == cli.EXIT_USAGE
