"""autotune.tune: a small real tuning run, and its argument checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

import autotune
from records import Database, Workload
from search import SearchConfig, SearchError
from tensor_ir import ops


def test_tune_small_matmul_for_real(tmp_path):
    func = ops.matmul(64, 64, 64)
    path = tmp_path / "tuning.db"
    lines = []
    result = autotune.tune(func, "llvm", trials=16, database=str(path),
                           search=SearchConfig(batch_size=8, seed=0), log=lines.append)
    assert result.trials == 16 and len(result.history) == 16
    assert result.best_schedule is not None and math.isfinite(result.best_time)
    assert result.best_gflops == pytest.approx(2 * 64 ** 3 / result.best_time / 1e9)
    assert result.best_spread is not None and result.remeasured
    assert 0.0 <= result.overhead_share <= 1.0
    assert result.phase_seconds["kernel"] > 0 and result.phase_seconds["build"] > 0
    assert any("trials 16/16" in line for line in lines)

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 64)).astype("float32")
    b = rng.uniform(-1, 1, (64, 64)).astype("float32")
    c = np.zeros((64, 64), "float32")
    autotune.build(result.best_func, "llvm")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)

    # The database holds every trial and the reported best, which replays to the same program.
    with Database(path) as db:
        key = Workload(func).key
        assert db.count(key) == 16
        best = db.best(key, "llvm")
        assert best.score == result.best_time
        assert best.trace().apply(func).func.structural_hash() == \
            result.best_func.structural_hash()
    with autotune.apply_history_best(str(path)):
        kernel = autotune.build(func, "llvm")
    c[:] = 0
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_tune_rejects_bad_arguments():
    func = ops.matmul(8, 8, 8)
    with pytest.raises(autotune.TuneError, match="PrimFunc"):
        autotune.tune("matmul")
    with pytest.raises(autotune.TuneError, match="trials"):
        autotune.tune(func, trials=-3)
    with pytest.raises(autotune.TuneError, match="measure must be a MeasureConfig"):
        autotune.tune(func, trials=1, measure={"repeat": 3})
    with pytest.raises(autotune.TuneError, match="search must be a search.SearchConfig"):
        autotune.tune(func, trials=1, search={"batch_size": 4})
    with pytest.raises(autotune.TuneError, match="database"):
        autotune.tune(func, trials=1, database=42, log=False)
    with pytest.raises(autotune.TargetError):
        autotune.tune(func, target="no-such-target", trials=1)


def test_search_settings_are_checked_when_made():
    # The settings tune takes are checked once, by the object, before any call starts.
    for bad, what in (({"batch_size": 0}, "batch_size"), ({"seed": 1.5}, "seed"),
                      ({"heldout": -1}, "heldout"), ({"top_up": 1}, "top_up"),
                      ({"remeasure_rounds": -2}, "remeasure_rounds"),
                      ({"strategy": "annealing"}, "unknown search strategy"),
                      ({"cost_model": 3}, "cost_model")):
        with pytest.raises(SearchError, match=what):
            SearchConfig(**bad)


def test_tune_with_zero_trials_reports_nothing_found():
    func = ops.matmul(8, 8, 8)
    result = autotune.tune(func, trials=0, log=False, search=SearchConfig(remeasure_top=0))
    assert result.best_schedule is None and result.best_time == math.inf
    assert result.trials == 0
