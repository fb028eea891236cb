"""One rule picks the record a build takes (autotune.tuning.history.choose_record): the model's
chosen record, then the best by score that replays.  Every build path -- build_model with a
database, build under apply_history_best, tune's result, the rerank -- takes the same record
when the best one does not parse or replay, and a record that cannot serve is named in one
warning and left out, never the end of a build, a resumed run or its rerank."""
from __future__ import annotations

import json
import sqlite3
import warnings

import numpy as np
import pytest

import autotune
from autotune.tuning.history import choose_record
from autotune.graph.build import build_model, database_lookup
from autotune.tuning.tune_model import BuildConfig, model_tasks
from records import Database, RecordsWarning
from schedules.errors import ScheduleError
from schedules.postproc import replay
from search import SearchConfig
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir.target import Target

from .tiny_onnx import write_tiny_mlp

TARGET = Target("llvm")


def _simulated_seconds(inp) -> float:
    # Distinct, deterministic times per program, so every task has one best record.
    return 1e-4 + (int(inp.func.structural_hash()[:6], 16) % 997) * 1e-7


@pytest.fixture()
def tuned(tmp_path):
    """(model path, database path) after a simulated tune of the tiny MLP."""
    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    db_path = tmp_path / "tuning.db"
    autotune.tune_model(path, TARGET, trials=24, database=str(db_path),
                        search=SearchConfig(batch_size=4, remeasure_top=0),
                        builder=SimulationBuilder(), runner=SimulationRunner(_simulated_seconds),
                        build=BuildConfig(rerank_top=0, build=False))
    return path, db_path


def _break(db_path, record_id: int, how: str) -> None:
    """Damage a record's trace as a user's database may hold it: an instruction kind this
    release does not know ("kind": fails when the trace is parsed), or a tile decision that
    no longer fits its loop ("decision": fails when the trace is replayed)."""
    con = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        (text,) = con.execute("SELECT trace FROM records WHERE id = ?", (record_id,)).fetchone()
        data = json.loads(text)
        insts = data["instructions"]
        if how == "kind":
            insts[0]["kind"] = "a_primitive_of_a_later_release"
        else:
            tile = next(i for i in insts if i["kind"] == "sample_perfect_tile")
            tile["decision"] = [7] * len(tile["decision"])  # product never the loop's extent
        con.execute("UPDATE records SET trace = ? WHERE id = ?", (json.dumps(data), record_id))
    finally:
        con.close()


def _heaviest_task(model, db):
    """A task of the model with at least two successful records, and those records."""
    for task in model_tasks(model):
        ranked = db.best_k(task.key, str(TARGET), 4)
        if len(ranked) >= 2:
            return task, ranked
    raise AssertionError("no task of the tuned model has two records")


def _kernel_sources(lib) -> list[str]:
    return [step.kernel.get_source("ll-raw") for step in lib.steps]


@pytest.mark.parametrize("how", ["kind", "decision"])
def test_both_build_paths_take_the_same_record_when_the_best_does_not_replay(tuned, how):
    path, db_path = tuned
    model = autotune.load_model(path)
    with Database(db_path) as db:
        task, ranked = _heaviest_task(model, db)
    best, runner_up = ranked[0], ranked[1]
    _break(db_path, best.record_id, how)
    with Database(db_path) as db:
        if how == "decision":  # the damage is real: this record no longer replays
            broken = next(r for r in db.records(task.key) if r.record_id == best.record_id)
            with pytest.raises(ScheduleError):
                replay(broken.trace(), task.func, TARGET)
        with pytest.warns(RecordsWarning, match=f"record {best.record_id} .*cannot be used"):
            choice = choose_record(db, task.func, TARGET, model.name)
        assert choice.record.record_id == runner_up.record_id
        expected = replay(runner_up.trace(), task.func, TARGET).func.structural_hash()
        assert choice.func.structural_hash() == expected
        # The database lookup build_model(database=...) uses gives that program too.
        assert database_lookup(db, TARGET, model.name)(task.func).structural_hash() \
            == expected

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordsWarning)
        from_db = build_model(model, TARGET, database=str(db_path))
        with autotune.apply_history_best(str(db_path)) as ctx:
            from_context = autotune.build(model, TARGET)
    served = {e["key"]: e["record_id"] for e in ctx.coverage()["served_workloads"]}
    assert served[task.key] == runner_up.record_id
    assert _kernel_sources(from_db) == _kernel_sources(from_context)
    assert from_db.report.coverage == from_context.report.coverage == 1.0
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_array_equal(from_db.run({"x": x})["y"], from_context.run({"x": x})["y"])


def test_a_database_warns_once_per_unusable_record(tuned):
    path, db_path = tuned
    model = autotune.load_model(path)
    with Database(db_path) as db:
        task, ranked = _heaviest_task(model, db)
    _break(db_path, ranked[0].record_id, "kind")
    with Database(db_path) as db:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                assert choose_record(db, task.func, TARGET).record.record_id \
                    == ranked[1].record_id
        named = [w for w in caught if issubclass(w.category, RecordsWarning)]
        assert len(named) == 1 and f"record {ranked[0].record_id}" in str(named[0].message)
        assert list(db.unusable) == [ranked[0].record_id]


def test_no_record_that_replays_falls_back_with_the_reason(tuned):
    path, db_path = tuned
    model = autotune.load_model(path)
    with Database(db_path) as db:
        task, _ = _heaviest_task(model, db)
        ids = [r.record_id for r in db.records(task.key, include_errors=False)]
    for record_id in ids:
        _break(db_path, record_id, "kind")
    with Database(db_path) as db, warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordsWarning)
        choice = choose_record(db, task.func, TARGET)
    assert choice.record is None and choice.func is None
    assert "does not replay" in choice.reason and "a_primitive_of_a_later_release" \
        in choice.reason


def test_a_resumed_tune_model_skips_the_unusable_record_and_finishes(tuned):
    """The resume probe: one record of an unknown kind; the resumed run names it once, finishes
    its budget, reranks and builds with the other records."""
    path, db_path = tuned
    model = autotune.load_model(path)
    with Database(db_path) as db:
        task, ranked = _heaviest_task(model, db)
    bad = ranked[0].record_id
    _break(db_path, bad, "kind")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = autotune.tune_model(path, TARGET, trials=36, database=str(db_path),
                                     search=SearchConfig(batch_size=4, remeasure_top=2,
                                                         remeasure_rounds=1),
                                     builder=SimulationBuilder(),
                                     runner=SimulationRunner(_simulated_seconds),
                                     build=BuildConfig(rerank_top=2, rerank_rounds=1))
    named = [w for w in caught if issubclass(w.category, RecordsWarning)
             and f"record {bad} " in str(w.message)]
    assert len(named) == 1
    assert result.trials == 36 and result.stopped == "budget"
    assert result.coverage == 1.0
