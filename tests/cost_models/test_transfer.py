"""TransferCostModel: a pre-trained prior that fades beside a model of the task alone."""
from __future__ import annotations

import numpy as np
import pytest

import cost_models
from cost_models import CostModelError, TransferCostModel, XGBCostModel
from cost_models.features import NUM_FEATURES


def _rows(n: int, seed: int, weights) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows whose time falls as ``weights @ x`` rises (a learnable order)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, NUM_FEATURES)).astype(np.float32)
    return x, 1e-3 / (1.0 + x @ weights)


def _accuracy(scores, times) -> float:
    return cost_models.pairwise_accuracy(scores, times)


@pytest.fixture
def prior_and_task():
    """A prior trained where feature 0 decides, and a task where feature 1 decides."""
    w_prior = np.zeros(NUM_FEATURES)
    w_prior[0] = 5.0
    w_task = np.zeros(NUM_FEATURES)
    w_task[1] = 5.0
    prior = XGBCostModel(seed=0, num_rounds=60)
    prior.update(*_rows(200, 0, w_prior))
    return prior, w_task


def test_the_prior_alone_ranks_until_the_task_has_measurements(prior_and_task):
    prior, _ = prior_and_task
    model = TransferCostModel(prior=prior, seed=0)
    assert model.is_trained and model.prior_weight == 1.0
    x, _ = _rows(50, 1, np.zeros(NUM_FEATURES))
    np.testing.assert_array_equal(model.predict(x), prior.predict(x))


def test_the_prior_fades_as_the_task_is_measured(prior_and_task):
    prior, w_task = prior_and_task
    model = TransferCostModel(prior=prior, half_rows=32, seed=0, num_rounds=60)
    test_x, test_t = _rows(200, 9, w_task)
    assert _accuracy(model.predict(test_x), test_t) < 0.6   # the prior knows the wrong order
    weights = []
    for batch in range(6):
        model.update(*_rows(32, 10 + batch, w_task))
        weights.append(model.prior_weight)
    assert model.rows == 192
    assert weights == sorted(weights, reverse=True) and weights[0] == pytest.approx(0.5)
    assert weights[-1] == pytest.approx(32 / (32 + 192))
    # With the task's own rows the blend ranks the task well, and the prior was not retrained.
    assert _accuracy(model.predict(test_x), test_t) > 0.8
    assert len(prior.training_data()) == 200


def test_without_a_prior_it_is_a_cold_model():
    model = TransferCostModel(seed=0)
    assert not model.is_trained and model.prior_weight == 0.0
    x, t = _rows(40, 3, np.eye(NUM_FEATURES)[2] * 5)
    model.update(x, t)
    np.testing.assert_allclose(model.predict(x), model.local.predict(x))


def test_save_and_load_keep_prior_local_model_and_weight(prior_and_task, tmp_path):
    prior, w_task = prior_and_task
    model = TransferCostModel(prior=prior, half_rows=16, seed=0, num_rounds=30)
    model.update(*_rows(24, 4, w_task))
    path = tmp_path / "transfer.json"
    model.save(path)
    again = cost_models.load(path)
    assert isinstance(again, TransferCostModel)
    assert again.rows == 24 and again.prior_weight == pytest.approx(model.prior_weight)
    x, _ = _rows(30, 5, w_task)
    np.testing.assert_allclose(again.predict(x), model.predict(x), rtol=1e-5, atol=1e-6)


def test_bad_options_are_named():
    with pytest.raises(CostModelError, match="half_rows must be a number > 0"):
        TransferCostModel(half_rows=0)
    with pytest.raises(CostModelError, match="prior must be a CostModel"):
        TransferCostModel(prior="model.json")
