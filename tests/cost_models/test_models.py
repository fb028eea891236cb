"""Cost models offline: a hidden synthetic cost over random matmul schedules, save/load round
trips, determinism, the registry and the ranking helpers."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import cost_models
from cost_models import (
    CostModel,
    CostModelError,
    ModelInput,
    RandomCostModel,
    XGBCostModel,
    create,
    normalized_throughput,
    pairwise_accuracy,
)
from cost_models import features as F
from tensor_ir import ops

from .workloads import matmul_candidates, synthetic_time

TRAIN = 256


@pytest.fixture(scope="module")
def synthetic():
    """300 random 64^3 matmul schedules, their features and hidden synthetic run times."""
    funcs, decisions = matmul_candidates(300, size=64, seed=0)
    rng = np.random.default_rng(0)
    times = np.array([synthetic_time(d, rng) for d in decisions])
    return funcs, F.extract(funcs), times


@pytest.fixture(scope="module")
def trained(synthetic):
    funcs, x, times = synthetic
    model = XGBCostModel(seed=0)
    model.update([ModelInput(f, features=row) for f, row in zip(funcs[:TRAIN], x[:TRAIN])],
                 times[:TRAIN].tolist())
    return model


def test_xgb_ranks_held_out_candidates_of_a_seen_workload(synthetic, trained):
    _, x, times = synthetic
    accuracy = pairwise_accuracy(trained.predict(x[TRAIN:]), times[TRAIN:])
    assert accuracy > 0.8
    # The random baseline is near chance on the same pairs.
    baseline = pairwise_accuracy(RandomCostModel(seed=0).predict(x[TRAIN:]), times[TRAIN:])
    assert 0.25 < baseline < 0.75
    assert accuracy > baseline + 0.15


def test_regression_objective_also_ranks(synthetic):
    _, x, times = synthetic
    model = create("xgb", objective="reg:squarederror", num_rounds=100)
    model.update(x[:TRAIN], times[:TRAIN])
    assert pairwise_accuracy(model.predict(x[TRAIN:]), times[TRAIN:]) > 0.8


def test_predict_accepts_funcs_candidates_and_matrices(synthetic, trained):
    funcs, x, _ = synthetic
    from_matrix = trained.predict(x[TRAIN:TRAIN + 5])
    np.testing.assert_array_equal(trained.predict(funcs[TRAIN:TRAIN + 5]), from_matrix)
    cands = [ModelInput(f) for f in funcs[TRAIN:TRAIN + 5]]
    np.testing.assert_array_equal(trained.predict(cands), from_matrix)
    assert cands[0]._features is not None           # features are cached on the candidate
    assert trained.predict([]).shape == (0,)


def test_training_is_deterministic(synthetic):
    _, x, times = synthetic
    a, b = XGBCostModel(seed=3, num_rounds=30), XGBCostModel(seed=3, num_rounds=30)
    for model in (a, b):
        model.update(x[:100], times[:100])
        model.update(x[100:200], times[100:200])       # retrains on all 200 rows
    np.testing.assert_array_equal(a.predict(x[200:]), b.predict(x[200:]))
    assert len(a.training_data()) == 200


def test_xgb_save_load_round_trip(tmp_path, synthetic, trained):
    _, x, times = synthetic
    path = tmp_path / "model.json"
    trained.save(path)
    doc = json.loads(path.read_text())
    assert doc["cost_model"] == "xgb" and doc["feature_version"] == F.FEATURE_VERSION
    again = XGBCostModel()
    again.load(path)
    np.testing.assert_array_equal(again.predict(x), trained.predict(x))
    assert again.options == trained.options
    data, back = trained.training_data(), again.training_data()
    np.testing.assert_array_equal(data.features, back.features)
    np.testing.assert_array_equal(data.times, back.times)
    assert data.workloads == back.workloads
    # The kind is read from the file.
    generic = cost_models.load(path)
    assert isinstance(generic, XGBCostModel)
    np.testing.assert_array_equal(generic.predict(x[:10]), trained.predict(x[:10]))
    # Training continues from the loaded data.
    generic.update(x[TRAIN:TRAIN + 4], times[TRAIN:TRAIN + 4])
    assert len(generic.training_data()) == TRAIN + 4


def test_untrained_models_save_and_predict_zeros(tmp_path):
    model = XGBCostModel()
    x = F.extract([ops.matmul(8, 8, 8)])
    assert not model.is_trained
    np.testing.assert_array_equal(model.predict(x), [0.0])
    model.save(tmp_path / "empty.json")
    again = cost_models.load(tmp_path / "empty.json")
    assert not again.is_trained and len(again.training_data()) == 0


def test_errors_become_zero_throughput_and_survive_save(tmp_path, synthetic):
    _, x, times = synthetic
    results = [float(t) for t in times[:60]]
    results[3] = None
    results[7] = math.inf
    model = XGBCostModel(num_rounds=20)
    model.update(x[:60], results)
    data = model.training_data()
    assert math.isinf(data.times[3]) and math.isinf(data.times[7])
    model.save(tmp_path / "m.json")
    again = cost_models.load(tmp_path / "m.json")
    assert math.isinf(again.training_data().times[3])
    np.testing.assert_array_equal(again.predict(x), model.predict(x))


def test_random_model_round_trip_continues_the_sequence(tmp_path):
    x = F.extract([ops.matmul(8, 8, 8)] * 4)
    model = RandomCostModel(seed=5)
    model.predict(x)
    model.update(x, [1e-3, 2e-3, None, 1e-3])
    model.save(tmp_path / "r.json")
    expected = model.predict(x)
    again = cost_models.load(tmp_path / "r.json")
    assert isinstance(again, RandomCostModel) and again.seen == 4
    np.testing.assert_array_equal(again.predict(x), expected)
    np.testing.assert_array_equal(RandomCostModel(seed=5).predict(x),
                                  RandomCostModel(seed=5).predict(x))


def test_workloads_are_ranked_within_their_own_group():
    """Two workloads whose run times differ by 1000x: the ranking target is per workload."""
    times = np.array([1.0, 2.0, 4.0, 1e-3, 2e-3, 4e-3])
    groups = ["big"] * 3 + ["small"] * 3
    np.testing.assert_allclose(normalized_throughput(times, groups),
                               [1.0, 0.5, 0.25, 1.0, 0.5, 0.25])
    # Cross-group pairs are not counted: scoring the slow workload higher is not wrong.
    scores = np.array([30.0, 20.0, 10.0, 3.0, 2.0, 1.0])
    assert pairwise_accuracy(scores, times, groups) == 1.0
    assert pairwise_accuracy(scores, times) < 1.0
    assert math.isnan(pairwise_accuracy([1.0], [1.0]))
    assert pairwise_accuracy([1.0, 1.0], [1.0, 2.0]) == 0.5        # ties count half
    assert pairwise_accuracy([2.0, 1.0, 0.0], [1.0, math.inf, 2.0]) == 1.0  # errors skipped


def test_candidate_workload_keys_separate_query_groups():
    a, b = ops.matmul(8, 8, 8), ops.matmul(16, 8, 8)
    assert ModelInput(a).workload != ModelInput(b).workload
    assert ModelInput(a, workload="w1").workload == "w1"
    with pytest.raises(CostModelError, match="features have shape"):
        ModelInput(a, features=np.zeros(3))
    with pytest.raises(CostModelError, match="needs a func"):
        ModelInput()


def test_create_register_and_plug_in_a_user_model():
    assert isinstance(create(), XGBCostModel)
    assert isinstance(create("random", seed=1), RandomCostModel)
    instance = RandomCostModel()
    assert create(instance) is instance
    with pytest.raises(CostModelError, match="options"):
        create(instance, seed=2)
    with pytest.raises(CostModelError, match="unknown cost model 'nope'.*random.*xgb"):
        create("nope")
    with pytest.raises(CostModelError, match="objective"):
        create("xgb", objective="rank:magic")

    class FlopsModel(CostModel):
        """Scores by fewer innermost-loop iterations: a user's hand-written heuristic."""

        kind = "fewer_iterations"

        def update(self, candidates, results):
            pass

        def predict(self, candidates):
            x = cost_models.feature_matrix(candidates)
            return -x[:, F.FEATURE_NAMES.index("sum.executions")].astype(np.float64)

        def save(self, path):
            pass

        def load(self, path):
            pass

    cost_models.register("fewer_iterations", FlopsModel)
    assert "fewer_iterations" in cost_models.kinds()
    model = create("fewer_iterations")
    scores = model.predict([ops.matmul(4, 4, 4), ops.matmul(32, 32, 32)])
    assert scores[0] > scores[1]


def test_misuse_raises_typed_errors(tmp_path, synthetic):
    _, x, times = synthetic
    model = XGBCostModel(num_rounds=5)
    with pytest.raises(CostModelError, match="3 results for 4 candidates"):
        model.update(x[:4], times[:3])
    with pytest.raises(CostModelError, match="result 1"):
        model.update(x[:2], [1e-3, "fast"])
    with pytest.raises(CostModelError, match="candidate 0 is a str"):
        model.predict(["matmul"])
    with pytest.raises(CostModelError, match="feature matrix"):
        model.predict(np.zeros((2, 3)))
    RandomCostModel().save(tmp_path / "r.json")
    with pytest.raises(CostModelError, match="holds a 'random' cost model"):
        model.load(tmp_path / "r.json")
    model.update(x[:20], times[:20])
    model.save(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    doc["feature_version"] = F.FEATURE_VERSION + 1
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(CostModelError, match="feature version"):
        XGBCostModel().load(tmp_path / "old.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(CostModelError, match="not JSON"):
        cost_models.load(tmp_path / "junk.json")
    with pytest.raises(CostModelError, match="cannot read"):
        cost_models.load(tmp_path / "missing.json")


def test_accuracy_benchmark_measures_and_reports():
    """A tiny real run: builds and times a dozen 32^3 matmul candidates."""
    import io
    from contextlib import redirect_stdout

    from benchmarks import cost_model_accuracy

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cost_model_accuracy.main(["--size", "32", "--candidates", "12",
                                         "--train", "8"]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["held_out"] == 4 and doc["errors"] == 0
    assert set(doc["pairwise_accuracy"]) == {"xgb", "random"}
