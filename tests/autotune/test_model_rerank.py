"""Choosing a task's record by its time inside the built model (autotune.tuning.rerank), and
builds of that model taking the choice."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.measure import MeasureConfig
from autotune.graph.build import build_model, database_lookup
from autotune.tuning.rerank import rerank_in_model
from autotune.tuning.tune_model import BuildConfig
from records import Database
from schedules.postproc import replay
from search import SearchConfig
from tensor_ir.errors import BuildError
from tensor_ir.target import Target

from .tiny_onnx import write_tiny_mlp

FAST = MeasureConfig(repeat=1, min_repeat_ms=1.0)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The tiny MLP tuned into a file with several records per task, re-ranked by
    tune_model itself (three best records, two rounds)."""
    folder = tmp_path_factory.mktemp("rerank")
    path = write_tiny_mlp(folder / "mlp.onnx")
    db_path = folder / "tuning.db"
    result = autotune.tune_model(path, "llvm", trials=12, database=str(db_path),
                                 search=SearchConfig(batch_size=4, remeasure_top=0), measure=FAST,
                                 build=BuildConfig(rerank_top=3, rerank_rounds=2))
    return path, db_path, result


def test_tune_model_stores_the_fastest_in_the_model_as_the_choice(tuned):
    path, db_path, result = tuned
    model = autotune.load_model(path)
    target = str(Target("llvm"))
    assert result.reranked, "no task was re-ranked"
    with Database(db_path, create=False) as db:
        for entry in result.reranked:
            times = entry["in_model_ms"]
            assert len(times) >= 2 and entry["chosen"] == min(times, key=times.get)
            assert entry["best_by_score"] == db.best(entry["key"], target).record_id
            assert db.chosen(entry["key"], target, model.name).record_id == entry["chosen"]


def test_a_build_of_the_model_takes_the_choice_and_others_the_score(tuned):
    path, db_path, _ = tuned
    model = autotune.load_model(path)
    target = Target("llvm")
    with Database(db_path, create=False) as db:
        key = next(iter({s.key for s in build_model(model, target, database=db).steps}))
        func = next(w.func for w in db.workloads() if w.key == key)
        ranked = db.best_k(key, str(target), 3)
        assert len(ranked) >= 2
        db.choose(key, str(target), ranked[-1].record_id, model.name)
        in_model = database_lookup(db, target, model.name)(func)
        by_score = database_lookup(db, target)(func)
        elsewhere = database_lookup(db, target, "another_model")(func)
    assert ranked[-1].trace() != ranked[0].trace()
    programs = [replay(r.trace(), func, target).func.structural_hash() for r in ranked]
    assert in_model.structural_hash() == programs[-1]
    assert by_score.structural_hash() == elsewhere.structural_hash() == programs[0]
    # apply_history_best building the model takes the choice too; the outputs are the same.
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    with autotune.apply_history_best(str(db_path), strict=True) as ctx:
        tuned_lib = autotune.build(model, "llvm")
    served = {e["key"]: e["record_id"] for e in ctx.coverage()["served_workloads"]}
    assert served[key] == ranked[-1].record_id
    np.testing.assert_allclose(tuned_lib.run({"x": x})["y"],
                               autotune.build(model, "llvm").run({"x": x})["y"],
                               rtol=1e-4, atol=1e-5)


def test_rerank_refuses_gpu_targets_and_bad_arguments(tuned):
    path, db_path, _ = tuned
    with pytest.raises(BuildError, match="CPU build"):
        rerank_in_model(path, "opencl", str(db_path))
    with pytest.raises(ValueError, match="k must be"):
        rerank_in_model(path, "llvm", str(db_path), k=0)
    with pytest.raises(ValueError, match="min_share"):
        rerank_in_model(path, "llvm", str(db_path), min_share=1.5)
    with pytest.raises(autotune.TuneError, match="rerank_top"):
        autotune.tune_model(path, "llvm", trials=1, build=BuildConfig(rerank_top=-1))
