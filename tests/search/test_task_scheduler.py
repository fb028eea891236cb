"""The task scheduler offline: budget sharing (gradient and round robin), resuming the budget
from the database, tasks that fail or stop improving, deadlines and interruption.

Loops are real TuningLoops on small design spaces; measurement is synthetic: a candidate's
time is its task's base time scaled by a factor in [1, 2) drawn from its program hash, so
times are deterministic and differ between tasks by orders of magnitude."""
from __future__ import annotations

import hashlib
import math

import pytest

import cost_models
import search
from records import MemoryDatabase
from schedules.space import DesignSpace
from search.config import SchedulerConfig, SearchConfig
from search.measure import MeasureResult
from search.simulation import SimulationBuilder, SimulationRunner
from search.task_scheduler import (
    SchedulerTask,
    TaskScheduler,
    estimated_latency,
)
from records import trace_hash
from schedules.postproc import strip_postproc
from tensor_ir import ops, te
from tensor_ir.ops.nn import te_matmul
from tensor_ir.target import Target

TARGET = Target("llvm")


class FakeClock:
    def __init__(self, start: float = 1_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


class TaskRunner(SimulationRunner):
    """Synthetic times per task key (see the module text).  Keys in ``fail`` always fail to
    build; keys in ``flat`` always take exactly their base time (nothing to improve); each
    candidate advances ``clock`` by ``step`` seconds."""

    def __init__(self, base: dict, fail=(), flat=(), clock: FakeClock | None = None,
                 step: float = 0.0):
        super().__init__(repeat=2)
        self.base, self.fail, self.flat = base, set(fail), set(flat)
        self.clock, self.step = clock, step

    def cost(self, inp):
        key = inp.workload_key
        if self.clock is not None:
            self.clock.now += self.step
        if key in self.fail:
            return MeasureResult.error("build", "synthetic: the compiler refused it")
        digest = hashlib.sha256(inp.func.structural_hash().encode()).digest()
        factor = 1.0 if key in self.flat else 1.0 + digest[0] / 256
        return self.base[key] * factor


def make_tasks(weights=(4, 1, 1)):
    funcs = [ops.matmul(16, 16, 16), ops.matmul(8, 24, 16), ops.softmax((8, 32), axis=-1)]
    tasks = []
    for i, (func, w) in enumerate(zip(funcs, weights)):
        tasks.append(SchedulerTask(f"task{i}", func.structural_hash(), w, 2.0 * 16 ** 3,
                                   bytes=4096.0, group="matmul" if i < 2 else "softmax",
                                   func=func))
    return tasks


def make_factory(db, runner, fail_space=(), seeds=None):
    """``seeds``: {task key: the seed of its search} (default 0 for every task)."""
    def make_loop(task):
        if task.key in fail_space:
            raise search.SearchError("synthetic: no sketch for this function")
        space = DesignSpace(task.func, TARGET)
        seed = (seeds or {}).get(task.key, 0)
        return search.TuningLoop(space, search.create("random", seed=seed),
                                 cost_models.create("random", seed=0), SimulationBuilder(),
                                 runner, db, config=SearchConfig(batch_size=4), log=False)
    return make_loop


def configs(options: dict) -> dict:
    """``options`` with the SearchConfig and SchedulerConfig fields made into the objects."""
    settings = {k: options.pop(k) for k in list(options) if k in SearchConfig.__annotations__}
    settings.setdefault("batch_size", 4)
    settings.setdefault("remeasure_top", 0)
    sharing = {k: options.pop(k) for k in list(options) if k in SchedulerConfig.__annotations__}
    return {**options, "search": SearchConfig(**settings), "config": SchedulerConfig(**sharing)}


def scheduler(tasks, db, runner, **options):
    fail_space = options.pop("fail_space", ())
    return TaskScheduler(tasks, make_factory(db, runner, fail_space), db, TARGET,
                         **configs(options))


def test_gradient_gives_the_dominant_task_most_trials():
    tasks = make_tasks(weights=(4, 1, 1))
    base = {tasks[0].key: 1e-3, tasks[1].key: 1e-6, tasks[2].key: 1e-6}
    db = MemoryDatabase()
    result = scheduler(tasks, db, TaskRunner(base), trials=48, eps=0.0).run()
    assert result.stopped == "budget" and result.trials == result.trials_run == 48
    counts = [t.trials for t in result.tasks]
    assert counts[1] >= 4 and counts[2] >= 4     # the warm-up measures every task once
    assert counts[0] >= 3 * max(counts[1], counts[2])
    assert sum(db.count(t.key) for t in tasks) == 48
    # The estimate is the weighted sum of the best times.
    expected = sum(t.weight * t.best_seconds for t in tasks)
    assert result.estimated_latency == pytest.approx(expected)
    trials_curve = [n for _, n, _ in result.curve]
    assert trials_curve == sorted(trials_curve) and trials_curve[-1] == 48


def test_round_robin_shares_evenly():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    result = scheduler(tasks, MemoryDatabase(), TaskRunner(base), trials=36,
                       policy="round-robin").run()
    assert [t.trials for t in result.tasks] == [12, 12, 12]


def test_budget_counts_stored_records_and_resumes():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    db = MemoryDatabase()
    first = scheduler(tasks, db, TaskRunner(base), trials=20).run()
    assert first.trials == 20
    again = make_tasks()
    sched = scheduler(again, db, TaskRunner(base), trials=30)
    second = sched.run()
    assert second.trials_run == 10 and second.trials == 30
    assert sum(db.count(t.key) for t in again) == 30
    # Resumed state: per-task trials and best times as the database has them.
    for old, new in zip(first.tasks, second.tasks):
        assert new.trials >= old.trials
        assert new.best_seconds <= old.best_seconds
    # Nothing is left to do a third time.
    third = scheduler(make_tasks(), db, TaskRunner(base), trials=30).run()
    assert third.stopped == "budget" and third.trials_run == 0


def test_a_task_whose_space_fails_is_set_aside_and_the_others_go_on():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    lines = []
    result = scheduler(tasks, MemoryDatabase(), TaskRunner(base), trials=24,
                       fail_space={tasks[1].key}, log=lines.append).run()
    assert result.stopped == "budget" and result.trials == 24
    bad = result.tasks[1]
    assert bad.status == "failed" and "no sketch" in bad.error and bad.trials == 0
    assert result.failed == [bad]
    assert any("set aside" in line and bad.name in line for line in lines)


def test_a_task_whose_builds_keep_failing_is_set_aside():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    runner = TaskRunner(base, fail={tasks[0].key})
    result = scheduler(tasks, MemoryDatabase(), runner, trials=40, fail_after=8,
                       policy="round-robin").run()
    bad = result.tasks[0]
    assert bad.status == "failed" and bad.trials == 8 and bad.errors == 8
    assert "compiler refused" in bad.error
    assert result.trials == 40 and [t.trials for t in result.tasks[1:]] == [16, 16]


def test_a_task_that_stops_improving_is_done():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    runner = TaskRunner(base, flat={t.key for t in tasks})
    result = scheduler(tasks, MemoryDatabase(), runner, trials=200, patience=8).run()
    assert result.stopped == "done"
    assert all(t.status == "converged" for t in result.tasks)
    assert all(t.trials == 12 for t in result.tasks)   # 4 to find the time, then 8 in vain


def test_small_space_is_exhausted():
    func = ops.relu((4,))
    task = SchedulerTask("relu", func.structural_hash(), 1, 4.0, 32.0, func=func)
    result = scheduler([task], MemoryDatabase(), TaskRunner({task.key: 1e-6}), trials=400,
                       patience=1000).run()
    assert task.status == "exhausted" and result.stopped == "done"
    assert 0 < task.trials < 400


def test_deadline_bounds_the_run():
    clock = FakeClock()
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    runner = TaskRunner(base, clock=clock, step=1.0)        # one second per candidate
    sched = scheduler(tasks, MemoryDatabase(), runner, deadline=clock.now + 30.5, clock=clock)
    assert sched.eta_seconds() == pytest.approx(30.5)       # nothing measured yet: the deadline
    result = sched.run()
    assert result.stopped == "deadline"
    assert clock.now <= sched.started + 30.5
    assert 26 <= result.trials <= 30
    assert result.wall_seconds == pytest.approx(clock.now - sched.started)


def test_planned_trials_and_eta_follow_the_pace():
    clock = FakeClock()
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    runner = TaskRunner(base, clock=clock, step=2.0)
    sched = scheduler(tasks, MemoryDatabase(), runner, trials=100, deadline=clock.now + 1000,
                      clock=clock)
    seen = []

    def listener(event, s, task):
        if event == "batch" and len(seen) < 1:
            seen.append((s.total_trials, s.seconds_per_trial(), s.planned_trials(),
                         s.eta_seconds()))
    sched.listener = listener
    sched.should_stop = lambda: bool(seen)
    sched.run()
    done, pace, planned, eta = seen[0]
    assert done == 4 and pace == pytest.approx(2.0)
    assert planned == 96                                    # the budget binds, not the clock
    assert eta == pytest.approx(96 * 2.0)


def test_should_stop_interrupts_between_batches():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    db = MemoryDatabase()
    batches = []
    sched = scheduler(tasks, db, TaskRunner(base), trials=100, remeasure_top=2,
                      listener=lambda e, s, t: batches.append(e) if e == "batch" else None,
                      should_stop=lambda: len(batches) >= 2)
    result = sched.run()
    assert result.stopped == "interrupted" and result.trials == 8
    assert result.remeasured == {}                           # no re-measurement after a stop
    assert sum(db.count(t.key) for t in tasks) == 8          # whole batches only


def test_remeasure_at_the_end_updates_the_best():
    tasks = make_tasks()
    base = {t.key: 1e-4 for t in tasks}
    result = scheduler(tasks, MemoryDatabase(), TaskRunner(base), trials=12,
                       remeasure_top=1, remeasure_rounds=2).run()
    assert set(result.remeasured) == {t.key for t in tasks}
    for t in result.tasks:
        assert math.isfinite(t.best_seconds)


def test_re_measure_passes_stop_at_the_deadline(monkeypatch):
    # The loops are asked before each pass after the first whether time is left: yes while
    # the deadline is ahead, no once it has passed (here during the first task's first
    # pass), and the tasks after it are not re-measured at all.
    clock = FakeClock()
    tasks = make_tasks()
    runner = TaskRunner({t.key: 1e-4 for t in tasks}, clock=clock, step=1.0)
    sched = scheduler(tasks, MemoryDatabase(), runner, trials=12, deadline=clock.now + 1000,
                      clock=clock, remeasure_top=1, remeasure_rounds=1)
    answers = []
    real = search.TuningLoop.remeasure_top

    def spy(loop, k, rounds, max_passes=4, keep_going=None):
        answers.append(keep_going())
        clock.now = sched.deadline
        answers.append(keep_going())
        return real(loop, k, rounds, max_passes, keep_going)

    monkeypatch.setattr(search.TuningLoop, "remeasure_top", spy)
    result = sched.run()
    assert answers == [True, False]
    assert len(result.remeasured) == 1


def test_gradient_prefers_heavy_slow_and_recently_improving_tasks():
    sched = TaskScheduler(make_tasks(), lambda t: None, MemoryDatabase(), TARGET,
                          **configs({"trials": 10, "batch_size": 2, "window": 1, "eps": 0.0}))
    a, b, c = sched.tasks
    for t, seconds in ((a, [4.0, 2.0, 2.0, 1.0]), (b, [1.0, 1.0, 1.0, 1.0]),
                       (c, [1.0, 1.0, 1.0, 1.0])):
        for s in seconds:
            t.add_trial(s)
    # a: weight 4, best 1.0, improved by 1.0 over the last 2 trials (window 1 x batch 2).
    assert sched.gradient(a) == pytest.approx(4 * (0.2 * -0.5 + 0.8 * -0.25))
    # b: a sibling of a (group "matmul") with the same work and time: 1/t wins.
    assert sched.gradient(b) == pytest.approx(1 * (0.8 * -0.25))
    assert sched.choose() is a
    # A task never measured comes first (warm-up).
    fresh = SchedulerTask("fresh", "k" * 64, 1, 10.0)
    sched.tasks.append(fresh)
    assert sched.choose() is fresh


def test_a_laggard_among_siblings_catches_up_at_a_rate_per_trial():
    sched = TaskScheduler(make_tasks(weights=(1, 1, 2)), lambda t: None, MemoryDatabase(),
                          TARGET, **configs({"trials": 10, "batch_size": 2, "window": 2,
                                             "eps": 0.0}))
    a, b, c = sched.tasks
    for t, seconds in ((a, [1.0] * 40), (b, [0.1] * 40), (c, [1.0] * 8)):
        for s in seconds:
            t.add_trial(s)
    # a runs at a tenth of its sibling b's throughput (same work): its gap to beta (2) times
    # b's time, 0.2 - 1.0, counts per trial over the window (2 batches of 2 trials).
    assert sched.gradient(a) == pytest.approx(0.8 * (0.2 - 1.0) / 4)
    # c, alone in its group, heavier and less tuned, still comes first: the laggard's whole
    # gap (-0.8, Ansor's term) would have outranked it.
    assert sched.gradient(c) == pytest.approx(2 * 0.8 * -1.0 / 8)
    assert sched.choose() is c


def test_estimated_latency_fills_in_unmeasured_tasks():
    measured = SchedulerTask("a", "a", 2, 1e6, best_seconds=1e-3)      # 1 GFLOP/s
    unmeasured = SchedulerTask("b", "b", 1, 5e5)
    total, estimated = estimated_latency([measured, unmeasured])
    assert estimated == 1 and total == pytest.approx(2e-3 + 0.5e-3)
    assert estimated_latency([unmeasured]) == (math.inf, 1)
    assert estimated_latency([]) == (0.0, 0)


def test_loop_run_steps_match_the_loop():
    func = ops.matmul(16, 16, 16)
    runner = TaskRunner({func.structural_hash(): 1e-4})
    db = MemoryDatabase()
    loop = make_factory(db, runner)(SchedulerTask("m", func.structural_hash(), 1, 1.0,
                                                  func=func))
    first = loop.step(3)
    second = loop.step(5)
    assert [t.index for t, _ in first + second] == list(range(1, 9))
    assert db.count(func.structural_hash()) == 8
    assert loop.result.best_seconds == min(t.seconds for t, _ in first + second)


def test_bad_arguments_are_named():
    tasks = make_tasks()
    db = MemoryDatabase()
    with pytest.raises(search.SearchError, match="policy"):
        SchedulerConfig(policy="fastest")
    with pytest.raises(search.SearchError, match="budget"):
        TaskScheduler(tasks, lambda t: None, db, TARGET)
    with pytest.raises(search.SearchError, match="batch_size"):
        SearchConfig(batch_size=0)
    with pytest.raises(search.SearchError, match="target must be a Target"):
        TaskScheduler(tasks, lambda t: None, db, "llvm", trials=4)
    with pytest.raises(search.SearchError, match="no tasks"):
        TaskScheduler([], lambda t: None, db, TARGET, trials=4)
    with pytest.raises(search.SearchError, match="share a workload key"):
        TaskScheduler([tasks[0], tasks[0]], lambda t: None, db, TARGET, trials=4)
    with pytest.raises(search.SearchError, match="weight"):
        SchedulerTask("x", "k", 0, 1.0)
    for name in ("share_bests", "fit_bests"):
        with pytest.raises(search.SearchError, match=f"{name} must be True or False"):
            SchedulerConfig(**{name: 1})


def _matmul_then(n: int, epilogue: str):
    """An n x n matmul ending in a relu, or in a residual add and a relu: two tasks alike but
    for their epilogue, as ResNet's convolutions with and without the shortcut."""
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    c = te_matmul(a, b, name="C")
    params = [a, b]
    if epilogue == "add_relu":
        r = te.placeholder((n, n), "float32", name="R")
        params.append(r)
        c = te.compute((n, n), lambda i, j: c[i, j] + r[i, j], name="add")
    out = te.compute((n, n), lambda i, j: te.max(c[i, j], 0.0), name="relu")
    return te.create_prim_func(params + [out], name=f"matmul_{epilogue}")


def _sampled(trace):
    trace = strip_postproc(trace)
    return [trace[k].decision for k in trace.sampling_indices()]


def test_a_loop_adopts_the_decisions_of_a_task_alike_but_for_its_epilogue():
    donor_f, twin_f, other_f = (_matmul_then(32, "relu"), _matmul_then(32, "add_relu"),
                                _matmul_then(16, "relu"))
    runner = TaskRunner({f.structural_hash(): 1e-4 for f in (donor_f, twin_f, other_f)})
    db = MemoryDatabase()
    # Searches of one seed would sample the twin the donor's decisions themselves.
    make_loop = make_factory(db, runner, seeds={twin_f.structural_hash(): 1})
    donor, twin, other = (make_loop(SchedulerTask(f.name, f.structural_hash(), 1, 1.0, func=f))
                          for f in (donor_f, twin_f, other_f))
    donor.step(4)
    best = donor.result.best.trace
    queued = twin.adopt(best)
    assert queued >= 1
    trials = twin.step(4)
    adopted = [t for t, _ in trials if t.origin == "sibling"]
    assert len(adopted) == queued
    stored = {trace_hash(r.trace()): r.trace() for r in db.records(twin_f.structural_hash())}
    # The residual add changes the trace's blocks and names, not the decisions it carries.
    assert all(_sampled(stored[t.trace_hash]) == _sampled(best) for t in adopted)
    assert twin.adopt(best) == 0                # measured now: nothing new to queue
    assert other.adopt(best) is None            # 16 x 16: the 32-wide tiles do not fit


def test_a_loop_adopts_a_program_of_other_extents_with_its_tiles_fitted():
    donor_f, other_f = _matmul_then(32, "relu"), _matmul_then(24, "relu")
    runner = TaskRunner({f.structural_hash(): 1e-4 for f in (donor_f, other_f)})
    db = MemoryDatabase()
    make_loop = make_factory(db, runner, seeds={other_f.structural_hash(): 1})
    donor, other = (make_loop(SchedulerTask(f.name, f.structural_hash(), 1, 1.0, func=f))
                    for f in (donor_f, other_f))
    donor.step(4)
    best = donor.result.best.trace
    assert other.adopt(best) is None            # as they are, the 32-wide tiles do not fit
    queued = other.adopt(best, fit=True)
    assert queued >= 1
    trials = other.step(4)
    adopted = [t for t, _ in trials if t.origin == "sibling"]
    assert len(adopted) == queued
    stored = {trace_hash(r.trace()): r.trace() for r in db.records(other_f.structural_hash())}
    theirs = strip_postproc(best)
    for t in adopted:
        ours = strip_postproc(stored[t.trace_hash])
        for a, b in zip(theirs.sampling_indices(), ours.sampling_indices()):
            if theirs[a].kind != "sample_perfect_tile":
                assert ours[b].decision == theirs[a].decision
                continue
            # Each factor of the fitted tile divides the donor's at its level, but the
            # outermost, which takes the rest of the loop of 24.
            assert all(f % g == 0 for f, g in zip(theirs[a].decision[1:], ours[b].decision[1:]))
            assert math.prod(ours[b].decision) in (24, 1, 2, 3, 4, 6, 8, 12)
    assert other.adopt(best, fit=True) == 0     # measured now


@pytest.mark.parametrize("share", [True, False])
def test_the_scheduler_offers_each_task_the_bests_of_its_twins(share):
    funcs = [_matmul_then(32, "relu"), _matmul_then(32, "add_relu"), _matmul_then(16, "relu")]
    tasks = [SchedulerTask(name, f.structural_hash(), 1, 2.0 * 32 ** 3, func=f)
             for name, f in zip(("donor", "twin", "other"), funcs)]
    runner = TaskRunner({t.key: 1e-4 for t in tasks})
    db = MemoryDatabase()
    seeds = {t.key: k for k, t in enumerate(tasks)}
    config = SchedulerConfig(policy="round-robin", share_bests=share, fit_bests=False)
    scheduler = TaskScheduler(tasks, make_factory(db, runner, seeds=seeds), db, TARGET, trials=36,
                              config=config, search=SearchConfig(batch_size=4, remeasure_top=0))
    scheduler.run()
    origins = {t.name: [trial.origin for trial in scheduler.loops[t.key].result.trials]
               for t in tasks}
    assert ("sibling" in origins["donor"] + origins["twin"]) == share
    assert "sibling" not in origins["other"]


@pytest.mark.parametrize("other_fast", [False, True])
def test_the_scheduler_offers_fitted_bests_of_faster_tasks_one_a_batch(other_fast):
    # Two tasks of other extents: each gets the other's bests, fitted, while the other runs
    # at the higher throughput, never from the slower one (a task measured nothing yet
    # takes what there is: the donor's best seeds the other's first batch).
    funcs = [_matmul_then(32, "relu"), _matmul_then(24, "relu")]
    tasks = [SchedulerTask(name, f.structural_hash(), 1, 2.0 * f.params[0].shape[0].value ** 3,
                           func=f) for name, f in zip(("donor", "other"), funcs)]
    runner = TaskRunner({tasks[0].key: 1e-4, tasks[1].key: 1e-6 if other_fast else 1e-3})
    db = MemoryDatabase()
    seeds = {t.key: k for k, t in enumerate(tasks)}
    scheduler = TaskScheduler(tasks, make_factory(db, runner, seeds=seeds), db, TARGET, trials=40,
                              config=SchedulerConfig(policy="round-robin"),
                              search=SearchConfig(batch_size=4, remeasure_top=0))
    scheduler.run()
    loops = {t.name: scheduler.loops[t.key] for t in tasks}
    assert ("sibling" in [t.origin for t in loops["donor"].result.trials]) == other_fast
    origins = [t.origin for t in loops["other"].result.trials]
    assert origins[0] == "sibling"
    if other_fast:
        assert "sibling" not in origins[4:]
    # One donor best per batch, each queued in the sketches that take it.
    per_batch = len(loops["other"].space.sketches)
    batches = [origins[k:k + 4] for k in range(0, len(origins), 4)]
    assert all(b.count("sibling") <= per_batch for b in batches)
