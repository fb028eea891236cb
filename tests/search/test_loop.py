"""The tuning loop offline: de-duplication, reproducibility, resuming from a database, errors,
phase accounting and the re-measurement of the top candidates."""
from __future__ import annotations

import math

import pytest

import autotune
import cost_models
import search
from records import Database, MemoryDatabase, Workload, trace_hash
from schedules.space import DesignSpace
from search import SearchConfig
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir import ops

from .landscape import TARGET, FeatureDistance, small_matmul, synthetic_runner


@pytest.fixture(scope="module")
def space():
    return DesignSpace(small_matmul(64), "llvm")


@pytest.fixture(scope="module")
def runner(space):
    return synthetic_runner(space)


def make_loop(space, runner, database=None, seed=0, kind="evolutionary", batch_size=8,
              log=False, **loop_options):
    return search.TuningLoop(space, search.create(kind, seed=seed),
                             cost_models.create("xgb", seed=seed), SimulationBuilder(), runner,
                             database if database is not None else MemoryDatabase(),
                             config=search.SearchConfig(batch_size=batch_size), log=log,
                             **loop_options)


def test_never_measures_the_same_program_twice(space):
    runner = synthetic_runner(space)
    result = make_loop(space, runner).run(64)
    assert len(result.trials) == 64
    programs = [f.structural_hash() for f in runner.ran]
    assert len(programs) == len(set(programs)) == 64
    assert len({t.trace_hash for t in result.trials}) == 64


def test_small_space_is_exhausted_without_repeats():
    func = ops.relu((4,))
    sp = DesignSpace(func, "llvm")
    runner = synthetic_runner(sp, samples=8)
    result = make_loop(sp, runner, batch_size=3).run(50)
    assert result.exhausted
    programs = [f.structural_hash() for f in runner.ran]
    assert 1 <= len(programs) < 50 and len(set(programs)) == len(programs)


def test_fixed_seed_reproduces_the_search(space, runner):
    a = make_loop(space, runner, seed=11).run(24)
    b = make_loop(space, runner, seed=11).run(24)
    c = make_loop(space, runner, seed=12).run(24)
    assert [t.trace_hash for t in a.trials] == [t.trace_hash for t in b.trials]
    assert [t.seconds for t in a.trials] == [t.seconds for t in b.trials]
    assert a.best_seconds == b.best_seconds
    assert [t.trace_hash for t in a.trials] != [t.trace_hash for t in c.trials]


def test_resume_skips_measured_and_continues_from_the_best(space, runner, tmp_path):
    path = tmp_path / "tuning.db"
    with Database(path) as db:
        first = make_loop(space, runner, db, seed=0).run(24)
    with Database(path) as db:
        # The same seed: without the database the search would repeat itself exactly.
        loop = make_loop(space, runner, db, seed=0)
        second = loop.run(24)
        key = Workload(space.func).key
        assert db.count(key) == 48
        assert len(db.measured_hashes(key, "llvm")) == 48
    assert second.resumed_records == 24 and second.skipped_known == 24
    assert not {t.trace_hash for t in first.trials} & {t.trace_hash for t in second.trials}
    assert not ({t.program_hash for t in first.trials}
                & {t.program_hash for t in second.trials})
    # It starts from the stored best (best-so-far never above it) and mutates it at once.
    assert all(t.best_seconds <= first.best_seconds for t in second.trials)
    assert "mutant" in [t.origin for t in second.trials[:8]]
    assert second.best_seconds <= first.best_seconds


def test_errors_are_recorded_and_the_search_goes_on(space):
    runner = synthetic_runner(space, fail_every=5)
    db = MemoryDatabase()
    result = make_loop(space, runner, db).run(20)
    assert result.errors == 4
    assert [t.index for t in result.trials if t.error_kind == "runtime"] == [5, 10, 15, 20]
    assert math.isfinite(result.best_seconds)
    key = Workload(space.func).key
    assert db.count(key) == 20 and db.count(key, include_errors=False) == 16


def test_phases_progress_and_model_accuracy(space, runner):
    lines = []
    result = make_loop(space, runner, log=lines.append).run(32)
    for phase in ("search", "predict", "build", "run", "db", "retrain", "kernel"):
        assert phase in result.phase_seconds
    assert 0.0 <= result.overhead_share <= 1.0
    assert result.trials_per_minute > 0
    assert 0.0 <= result.model_accuracy <= 1.0  # held-out batches after the first training
    assert any("trials 32/32" in line and "GFLOPS" in line for line in lines)
    assert result.flops == 2 * 64 ** 3
    assert result.trial_reaching(0.9) is not None


def test_heldout_accuracy_judges_the_trained_model_on_unseen_programs():
    # On a fixed machine's space (see landscape.TARGET): the ranking measured depends on it.
    space = DesignSpace(small_matmul(64), TARGET)
    runner = synthetic_runner(space)
    db = MemoryDatabase()
    loop = make_loop(space, runner, database=db)
    with pytest.raises(search.SearchError, match="run"):
        loop.heldout_accuracy(8)
    loop.run(48)
    stored = db.count()
    measured = set(loop.pool.measured_programs)
    ran_before = len(runner.ran)
    held = loop.heldout_accuracy(24, seed=5)
    assert held["trained_on"] == 48
    assert held["candidates"] == 24
    # The synthetic time is a smooth function of the features: a trained model orders most
    # unseen pairs right (chance is 0.5).
    assert held["accuracy"] > 0.7
    new = runner.ran[ran_before:]
    assert len(new) == 24
    assert not {f.structural_hash() for f in new} & measured  # never seen before
    assert db.count() == stored  # kept out of the database
    with pytest.raises(search.SearchError, match="count"):
        loop.heldout_accuracy(1)


class LuckyRunner(SimulationRunner):
    """The first ``lucky`` programs it sees are measured absurdly fast once (a noise spike);
    every later run of them shows their true, slow time."""

    def __init__(self, space, lucky: int = 1):
        self.landscape = FeatureDistance(space)
        super().__init__(self.landscape)
        self.base = self.landscape.base
        self.lucky_count = lucky
        self.lucky: list[str] = []
        self.runs: dict[str, int] = {}

    @property
    def runs_of_lucky(self) -> int:
        return self.runs.get(self.lucky[0], 0) if self.lucky else 0

    def cost(self, inp):
        h = inp.func.structural_hash()
        if len(self.lucky) < self.lucky_count and h not in self.lucky:
            self.lucky.append(h)
        if h in self.lucky:
            self.runs[h] = self.runs.get(h, 0) + 1
            return self.base * (0.1 if self.runs[h] == 1 else 100.0)
        return super().cost(inp)


def tune_lucky(space, runner, trials: int = 16, rounds: int = 3):
    """``autotune.tune`` on the simulated ``runner`` with re-measurement of the top 3:
    (result, database)."""
    db = MemoryDatabase()
    result = autotune.tune(space.func, "llvm", trials=trials, database=db,
                           search=SearchConfig(batch_size=8, remeasure_top=3,
                                               remeasure_rounds=rounds),
                           builder=SimulationBuilder(), runner=runner, space=space, log=False)
    return result, db


def test_remeasuring_the_top_keeps_the_best_median(space):
    runner = LuckyRunner(space)
    result, db = tune_lucky(space, runner)
    key = Workload(space.func).key
    # Before: the lucky record ranked first.  It was re-measured (3 rounds, interleaved with
    # the two next), its pooled median became its true time, and it lost the first place.
    assert runner.runs_of_lucky == 4
    assert len(result.remeasured) == 3
    lucky = next(d for d in result.remeasured if d["before"] == pytest.approx(1e-4))
    assert lucky["after"] > 50 * lucky["before"]
    assert len(db.remeasurements(lucky["record_id"])) == 1
    best = db.best(key, "llvm")
    assert best.record_id != lucky["record_id"] and best.remeasure_count == 1
    assert result.best_time == best.score
    assert result.best_spread is not None
    assert trace_hash(result.best_trace) == best.trace_hash
    assert result.best_gflops == pytest.approx(2 * 64 ** 3 / best.score / 1e9)


def test_best_reported_is_always_re_measured(space):
    # The whole top 3 was lucky: after their re-measurement the best record is one that was
    # never re-measured, so a second pass re-times it (beside the best re-measured one).
    runner = LuckyRunner(space, lucky=3)
    result, db = tune_lucky(space, runner, rounds=2)
    best = db.best(Workload(space.func).key, "llvm")
    assert best.remeasure_count >= 1
    assert best.record_id in {d["record_id"] for d in result.remeasured}
    assert len(result.remeasured) > 3
    assert result.best_time == best.score and result.best_spread is not None
    assert all(runner.runs[h] == 3 for h in runner.lucky)  # 1 + 2 rounds, once each


def test_re_measured_groups_grow_until_the_best_was_re_measured(space):
    # Twelve records first timed in a fast spell: passes of a fixed 3 (9 records in three
    # passes) would leave one of them on top, never re-measured.  The groups double (3, then
    # the new ones among the best 6, then among the best 12): all twelve are re-timed, and
    # the best reported is a re-measured record with its true time.
    runner = LuckyRunner(space, lucky=12)
    result, db = tune_lucky(space, runner, trials=32, rounds=2)
    assert len(runner.lucky) == 12
    assert all(runner.runs[h] == 3 for h in runner.lucky)  # 1 + 2 rounds, once each
    best = db.best(Workload(space.func).key, "llvm")
    assert best.remeasure_count >= 1
    # Neither a lucky first time (0.1 x base) nor a lucky record re-timed (100 x base).
    assert 0.1 * runner.base < best.score < 50 * runner.base
    assert result.best_time == best.score
    assert 12 < len(result.remeasured) <= 3 + 6 + 12 + 24


def test_re_measure_passes_stop_when_time_is_out(space):
    # The same twelve lucky records, but keep_going says the time is out: the first pass
    # (three records) runs regardless, keep_going is asked once, before the second, and no
    # later pass runs.
    runner = LuckyRunner(space, lucky=12)
    loop = make_loop(space, runner)
    loop.run(32)
    asked = []

    def keep_going():
        asked.append(True)
        return False

    out = loop.remeasure_top(3, 2, keep_going=keep_going)
    assert len(out) == 3 and len(asked) == 1
    assert sorted(runner.runs[h] for h in runner.lucky) == [1] * 9 + [3] * 3
    # Always true: the passes go on as without it.
    runner = LuckyRunner(space, lucky=12)
    loop = make_loop(space, runner)
    loop.run(32)
    assert len(loop.remeasure_top(3, 2, keep_going=lambda: True)) > 12


def test_loop_rejects_bad_arguments(space, runner):
    with pytest.raises(search.SearchError, match="batch_size"):
        make_loop(space, runner, batch_size=0)
    with pytest.raises(search.SearchError, match="trials"):
        make_loop(space, runner).run(-1)
    with pytest.raises(search.SearchError, match="builder must be a Builder"):
        search.TuningLoop(space, search.create("random"), cost_models.create("random"),
                          object(), runner, MemoryDatabase())


def test_seed_traces_are_measured_first_and_once(space, tmp_path):
    from schedules.default_schedule import default_candidate
    from tensor_ir.func import structural_equal

    default = default_candidate(space.func, space.target).final_trace
    assert default is not None
    expected = space.replay(default).func
    runner = synthetic_runner(space)
    db = Database(str(tmp_path / "seed.db"))
    result = make_loop(space, runner, db, seed_traces=[default]).run(8)
    assert result.trials[0].origin == "seed"
    assert structural_equal(runner.ran[0], expected)
    # A second run with the same database does not measure the seed again.
    runner2 = synthetic_runner(space)
    make_loop(space, runner2, db, seed_traces=[default]).run(8)
    assert not any(structural_equal(f, expected) for f in runner2.ran)
