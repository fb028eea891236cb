"""TaskScheduler: shares one trial budget among the tasks of a model.

    tasks = [SchedulerTask(name, key, weight, flops, bytes, group) for ...]
    scheduler = TaskScheduler(tasks, make_loop, database, target, trials=1000)
    result = scheduler.run()          # SchedulerResult: per-task state, stop reason, curve

A model's end-to-end latency is estimated as ``sum(weight_i * best_i)``: each task (a
structurally unique fused function) costs its best measured time once per occurrence.  Each
measured batch goes to one task, chosen by a policy:

* ``"gradient"`` (default), in the manner of Ansor's task scheduler: every task first gets one
  batch (so that each has a measured time), then the batch goes to the task whose next trials
  are expected to lower the estimated latency the most.  For task ``i`` with ``t`` trials and
  best time ``g`` the expected change per trial is
  ``weight * (alpha * backward + (1 - alpha) * forward)``: ``backward`` is the slope of its
  best-time curve over the last ``window`` batches (what it achieved lately), ``forward`` the
  more optimistic of ``-g / t`` (improvement continuing like 1/t) and
  ``(beta * work / V - g) / (window * batch_size)`` where ``V`` is the best throughput
  reached by a similar task (same ``group``): a task far slower than its siblings has room
  to improve, expected to be made up over a window of batches.  (Ansor compares that gap
  undivided with the per-trial ``-g / t``, so that a laggard outranks every other task by
  its whole gap: in 2000 trials of MobileNetV2, its depthwise tasks, slower by nature than
  their siblings, took over 1300, one of 0.06 ms 608 of them, while its heaviest pointwise
  ones mostly kept their first 16.)  With probability ``eps`` a random task is chosen
  instead, so that no task starves on a bad estimate.
* ``"round-robin"``: the task with the fewest trials goes next.

Tasks alike but for their epilogue (a convolution ending in a residual add and the same one
without, a matmul with and without its bias) are tuned as one search: before a task's batch,
the best program of every other task whose decisions its sketches take is queued in its loop
to be measured first (``share_bests``; see :meth:`TaskScheduler._offer_bests`).  Tasks of
the same loops with other extents (a stride-2 convolution and a stride-1 one, matmuls of
other shapes) pass on their bests too, the tiles fitted to the receiver's loops, while the
donor runs at the higher throughput: one such program per batch (``fit_bests``).

A task stops when it no longer improves (its best time improved by less than
``min_improvement`` over its last ``patience`` trials: "converged"), when its design space
yields nothing new ("exhausted"), or when it fails: an exception from its design space or
search, or ``fail_after`` trials in a row that all failed to build or run while it has never
had a success ("failed", with the error kept for the report).  The other tasks go on.

The budget ``trials`` is the model's total: trials stored in the database before count, so a
run that is stopped and started again ends with the same number of trials.  A ``deadline``
(seconds since the epoch) bounds the run as well: each batch is sized from the measured
seconds per trial so that the search, and the re-measurement of the best candidates that
follows it, end by then.  ``should_stop()`` is polled between batches (a Ctrl-C handler sets
it): the batch in flight is always finished and committed, never cut in half.

The per-task tuning loop (:class:`~search.loop.TuningLoop`) comes from ``make_loop(task)``, so
this module, like the loop, never imports the builders and runners of ``autotune``.  Loops are
made when a task is first scheduled and advanced one batch at a time
(:meth:`~search.loop.TuningLoop.step`).
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from records import RecordStore
from tensor_ir.target import Target

from .config import POLICIES, SchedulerConfig, SearchConfig
from .loop import TuningLoop, make_logger
from .mutators import sampling_signature
from .strategy import SearchError

__all__ = ["POLICIES", "SchedulerResult", "SchedulerTask", "TaskScheduler", "TaskTotals",
           "estimated_latency"]

# Task states: "waiting" (nothing measured in this run yet), "tuning", and the final ones.
ACTIVE_STATES = ("waiting", "tuning")
FINAL_STATES = ("converged", "exhausted", "failed")


@dataclass
class SchedulerTask:
    """One task of a model and what the scheduler knows about it.

    ``key``: the workload key (structural hash of ``func``); ``weight``: occurrences in the
    model; ``flops`` and ``bytes``: work of one call (``bytes``, the parameters' size, stands
    in for work when a task does no floating-point arithmetic); ``group``: tasks of one group
    are similar enough to compare throughputs (e.g. the fused function's name).

    State: ``trials`` measured (stored before included), ``run_trials`` of them in this run,
    ``errors`` among them, ``best_seconds`` (math.inf before a success), ``curve`` the best
    time after each trial, ``status`` (waiting, tuning, converged, exhausted, failed),
    ``error`` why it failed, ``wall_seconds`` spent on it in this run.
    """

    name: str
    key: str
    weight: int
    flops: float
    bytes: float = 0.0
    group: str = ""
    func: object = field(default=None, repr=False)
    # Parameters of ``func`` that are the model's weights (see MeasureInput.weight_params).
    weight_params: tuple[int, ...] = ()
    trials: int = 0
    run_trials: int = 0
    errors: int = 0
    best_seconds: float = math.inf
    curve: list[float] = field(default_factory=list, repr=False)
    status: str = "waiting"
    error: str | None = None
    last_error: str | None = None
    wall_seconds: float = 0.0
    run_seconds: float = 0.0
    failing_streak: int = 0

    def __post_init__(self):
        if not isinstance(self.weight, int) or self.weight < 1:
            raise SearchError(f"task {self.name}: weight must be an int >= 1, got "
                              f"{self.weight!r}")
        if not self.flops >= 0 or not self.bytes >= 0:
            raise SearchError(f"task {self.name}: flops and bytes must be >= 0")

    @property
    def work(self) -> float:
        """What throughput is measured in: FLOPs, or bytes for tasks without arithmetic."""
        return float(self.flops) if self.flops > 0 else float(self.bytes)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATES

    @property
    def seconds_per_trial(self) -> float | None:
        """Wall seconds per trial in this run (None before its first batch)."""
        return self.wall_seconds / self.run_trials if self.run_trials else None

    def best_at(self, trials: int) -> float:
        """Best time after its first ``trials`` trials (math.inf before a success)."""
        if trials <= 0 or not self.curve:
            return math.inf
        return self.curve[min(trials, len(self.curve)) - 1]

    def add_trial(self, seconds: float) -> None:
        previous = self.curve[-1] if self.curve else math.inf
        self.curve.append(min(previous, seconds))
        self.trials += 1
        if math.isfinite(seconds):
            self.best_seconds = min(self.best_seconds, seconds)


def _throughput(task: SchedulerTask) -> float:
    """Work per second of ``task``'s best (0 before it has one, or without work)."""
    seconds = task.best_seconds
    return task.work / seconds if math.isfinite(seconds) and seconds > 0 else 0.0


def estimated_latency(tasks: Sequence[SchedulerTask]) -> tuple[float, int]:
    """``(sum of weight * best time, tasks estimated)``.  A task without a measured time is
    estimated from its work at the median throughput of the measured tasks (math.inf when no
    task has a time yet); the count says how many were estimated."""
    measured = [t for t in tasks if math.isfinite(t.best_seconds)]
    if not measured:
        return (math.inf if tasks else 0.0), len(tasks)
    rates = sorted(r for r in map(_throughput, measured) if r > 0)
    rate = rates[len(rates) // 2] if rates else 0.0
    total, estimated = 0.0, 0
    for t in tasks:
        if math.isfinite(t.best_seconds):
            total += t.weight * t.best_seconds
        else:
            estimated += 1
            if rate <= 0 or t.work <= 0:
                # NOTE: no throughput to scale by: the slowest measured task stands in, so the
                # estimate stays finite and does not pretend the task is free.
                total += t.weight * max(m.best_seconds for m in measured)
            else:
                total += t.weight * t.work / rate
    return total, estimated


class TaskTotals:
    """What a summary of a model's tasks (its ``tasks``: SchedulerTask) derives from them:
    the model's ``trials``, its ``estimated_latency`` and the ``failed`` tasks."""

    tasks: list[SchedulerTask]

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def estimated_latency(self) -> float:
        return estimated_latency(self.tasks)[0]

    @property
    def failed(self) -> list[SchedulerTask]:
        return [t for t in self.tasks if t.status == "failed"]


@dataclass
class SchedulerResult(TaskTotals):
    """What a scheduler run did: the tasks (final state), ``trials_run`` in this run,
    ``stopped`` (why it ended: "budget", "deadline", "interrupted", "done" when every task
    stopped on its own), ``wall_seconds``, and ``curve``: (seconds since the start, model
    trials so far, estimated latency) after every batch."""

    tasks: list[SchedulerTask]
    budget: int | None
    trials_run: int
    stopped: str
    wall_seconds: float
    curve: list[tuple[float, int, float]] = field(default_factory=list)
    remeasured: dict[str, list[dict]] = field(default_factory=dict)


class TaskScheduler:
    """Allocates measured batches among ``tasks``; see the module text.

    ``make_loop(task) -> TuningLoop`` makes a task's tuning loop (on the scheduler's
    ``database``, a records.RecordStore, and resolved ``target``).  ``trials``: the model's
    total budget (None: only the ``deadline`` bounds the run); ``config``: the policy and its
    parameters (SchedulerConfig); ``search``: the loops' settings (SearchConfig:
    ``batch_size`` trials per batch, the best ``remeasure_top`` candidates of each task tuned
    in this run re-timed ``remeasure_rounds`` times at the end, ``seed`` of the random
    choices);
    ``listener(event, scheduler, task)`` hears "start", "batch", "task", "remeasure" and "end";
    ``should_stop()`` is polled between batches; ``log`` takes plain lines (make_logger).
    """

    def __init__(self, tasks: Sequence[SchedulerTask],
                 make_loop: Callable[[SchedulerTask], TuningLoop], database: RecordStore,
                 target: Target, *, trials: int | None = None, deadline: float | None = None,
                 config: SchedulerConfig | None = None, search: SearchConfig | None = None,
                 listener: Callable | None = None,
                 should_stop: Callable[[], bool] | None = None, log=None,
                 clock: Callable[[], float] = time.time):
        # ``clock``: seconds since the epoch (the deadline's scale); tests pass a fake one.
        config = config if config is not None else SchedulerConfig()
        search = search if search is not None else SearchConfig()
        tasks = list(tasks)
        if not tasks:
            raise SearchError("TaskScheduler: no tasks to tune")
        for t in tasks:
            if not isinstance(t, SchedulerTask):
                raise SearchError(f"TaskScheduler takes SchedulerTasks, got {type(t).__name__}")
        keys = [t.key for t in tasks]
        if len(set(keys)) != len(keys):
            raise SearchError("TaskScheduler: two tasks share a workload key; merge them and "
                              "add up their weights")
        for name, value, kind in (("target", target, Target),
                                  ("config", config, SchedulerConfig),
                                  ("search", search, SearchConfig)):
            if not isinstance(value, kind):
                raise SearchError(f"TaskScheduler: {name} must be a {kind.__name__}, got "
                                  f"{type(value).__name__}")
        if trials is None and deadline is None:
            raise SearchError("TaskScheduler: give a trial budget, a deadline, or both")
        if trials is not None and (not isinstance(trials, int) or trials < 0):
            raise SearchError(f"TaskScheduler: trials must be an int >= 0, got {trials!r}")
        self.tasks = tasks
        self.make_loop = make_loop
        self.database = database
        self.target = target
        self.budget = trials
        self.batch_size = batch_size = search.batch_size
        self.policy = config.policy
        self.deadline = deadline
        self.patience = config.patience if config.patience is not None else 12 * batch_size
        self.min_improvement = float(config.min_improvement)
        self.fail_after = config.fail_after if config.fail_after is not None else 2 * batch_size
        self.alpha, self.beta = float(config.alpha), float(config.beta)
        self.window, self.eps = config.window, config.eps
        self.remeasure_top = search.remeasure_top
        self.remeasure_rounds = search.remeasure_rounds
        self.rng = random.Random(search.seed)
        self.listener = listener
        self.should_stop = should_stop or (lambda: False)
        self.log = make_logger(log)
        self.clock = clock
        self.loops: dict[str, TuningLoop] = {}
        self.share_bests = config.share_bests
        self.fit_bests = config.fit_bests
        # Per receiving task: (donor key, best trace hash) offered already, (donor key,
        # sampling signature) whose decisions its sketches do not take, and the donors whose
        # decisions they take only fitted (loops of other extents; see _offer_bests).
        self._offered: dict[str, set] = {}
        self._misfits: dict[str, set] = {}
        self._reshaped: dict[str, set] = {}
        self.curve: list[tuple[float, int, float]] = []
        self.trials_run = 0
        self.started: float | None = None
        self.phase = "starting"      # starting, tuning, remeasuring, done
        self.stopped: str | None = None
        self._batch_seconds = 0.0    # wall seconds of this run's batches (for the pace)
        self._run_phase_seconds = 0.0
        self._resumed = False

    # -- state ----------------------------------------------------------------------------------
    @property
    def total_trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def remaining_budget(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - self.total_trials)

    @property
    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def estimated_latency(self) -> tuple[float, int]:
        return estimated_latency(self.tasks)

    def seconds_per_trial(self, task: SchedulerTask | None = None) -> float | None:
        """Wall seconds per trial measured in this run: the task's own pace when it has one,
        else the run's (None before the first batch)."""
        if task is not None and task.seconds_per_trial is not None:
            return task.seconds_per_trial
        return self._batch_seconds / self.trials_run if self.trials_run else None

    def reserve_seconds(self) -> float:
        """Time kept back for re-measuring the best candidates at the end: per task tuned in
        this run, remeasure_top x remeasure_rounds runs at the average run time -- its first
        pass.  Later passes (TuningLoop.remeasure_top grows the group when the re-measured
        records all lose their place) are started only while the deadline is ahead, so
        they cannot carry the run past it by more than one pass."""
        if not self.remeasure_top or not self.remeasure_rounds or not self.trials_run:
            return 0.0
        tuned = sum(1 for t in self.tasks if t.run_trials and t.status != "failed")
        per_run = self._run_phase_seconds / self.trials_run
        return tuned * self.remeasure_top * self.remeasure_rounds * per_run

    def planned_trials(self) -> int | None:
        """Trials this run still expects to measure: the budget left, capped by what fits
        before the deadline at the measured pace (None: unknown yet, no budget and no pace)."""
        left = self.remaining_budget
        if self.deadline is not None:
            pace = self.seconds_per_trial()
            if pace is not None and pace > 0:
                fit = max(0, int((self.deadline - self.clock() - self.reserve_seconds())
                                 / pace))
                left = fit if left is None else min(left, fit)
            elif left is None:
                return None
        return left

    def eta_seconds(self) -> float | None:
        """Seconds until the run is expected to end (None when it cannot be told yet)."""
        planned = self.planned_trials()
        pace = self.seconds_per_trial()
        if planned is None or pace is None:
            if self.deadline is not None:
                return max(0.0, self.deadline - self.clock())
            return None
        return planned * pace + self.reserve_seconds()

    # -- resuming ---------------------------------------------------------------------------------
    def resume(self) -> None:
        """Read each task's stored records (oldest first): trial counts and best-time curves,
        so that the budget, the gradients and the convergence test continue where an earlier
        run stopped."""
        for task in self.tasks:
            task.trials, task.errors, task.best_seconds, task.curve = 0, 0, math.inf, []
            for rec in self.database.records(task.key, self.target):
                task.add_trial(math.inf if rec.is_error else float(rec.median))
                task.errors += rec.is_error
            best = self.database.best(task.key, self.target)
            if best is not None:
                # Re-measurements may have moved the best's score away from its median.
                task.best_seconds = best.score if best.score is not None else best.median
            if task.status != "failed":
                task.status = "waiting"
            self._check_converged(task)
        self._resumed = True

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> SchedulerResult:
        if not self._resumed:
            self.resume()
        self.started = self.clock()
        self.phase = "tuning"
        self._emit("start")
        self._record_curve()
        stopped = None
        while stopped is None:
            stopped = self._stop_reason()
            if stopped is not None:
                break
            task = self.choose()
            if task is None:
                stopped = "done"
                break
            count = self._batch_count(task)
            if count == 0:
                stopped = "deadline"
                break
            self._tune(task, count)
        self.stopped = stopped
        remeasured: dict[str, list[dict]] = {}
        if stopped != "interrupted":
            remeasured = self._remeasure()
        self.phase = "done"
        result = SchedulerResult(self.tasks, self.budget, self.trials_run, self.stopped,
                                 self.elapsed, list(self.curve), remeasured)
        self._emit("end")
        return result

    def _stop_reason(self) -> str | None:
        if self.should_stop():
            return "interrupted"
        if self.remaining_budget == 0:
            return "budget"
        if self._past_deadline():
            return "deadline"
        return None

    def _batch_count(self, task: SchedulerTask) -> int:
        count = self.batch_size
        left = self.remaining_budget
        if left is not None:
            count = min(count, left)
        if self.deadline is not None:
            pace = self.seconds_per_trial(task)
            if pace is not None and pace > 0:
                room = self.deadline - self.clock() - self.reserve_seconds()
                count = min(count, max(0, int(room / pace)))
        return count

    def choose(self) -> SchedulerTask | None:
        """The task the next batch goes to (None when every task has stopped)."""
        active = [t for t in self.tasks if t.active]
        if not active:
            return None
        if self.policy == "round-robin":
            return min(active, key=lambda t: t.trials)
        # Warm-up: every task is measured once before gradients are compared.
        for t in active:
            if t.trials == 0:
                return t
        if self.eps > 0 and self.rng.random() < self.eps:
            return self.rng.choice(active)
        grads = [self.gradient(t) for t in active]
        low = min(grads)
        if low == max(grads):
            return self.rng.choice(active)
        return active[grads.index(low)]

    def gradient(self, task: SchedulerTask) -> float:
        """Expected change of the estimated latency per trial given to ``task`` (<= 0)."""
        t = max(1, task.trials)
        g = task.best_seconds
        if not math.isfinite(g):
            g = self._expected_seconds(task)
        # 1. Backward: the slope of its best-time curve over the last window of batches.
        span = self.window * self.batch_size
        backward = 0.0
        if task.trials > span:
            before = task.best_at(task.trials - span)
            if math.isfinite(before) and math.isfinite(task.best_seconds):
                backward = (task.best_seconds - before) / span
        # 2. Forward: improvement continuing like 1/t, or catching up with similar tasks
        # (the gap spread over a window of batches: a rate per trial, like the others).
        forward = -g / t
        sibling = self._best_similar_rate(task)
        if sibling is not None and task.work > 0:
            forward = min(forward, (self.beta * task.work / sibling - g) / span)
        grad = task.weight * (self.alpha * backward + (1 - self.alpha) * forward)
        return min(0.0, grad)

    def _best_similar_rate(self, task: SchedulerTask) -> float | None:
        rates = [_throughput(o) for o in self.tasks if o is not task and o.group == task.group]
        return max((r for r in rates if r > 0), default=None)

    def _expected_seconds(self, task: SchedulerTask) -> float:
        """A time for a task never measured successfully: its work at the median throughput
        of the others (1 s when nothing is known, which makes it look worth trying)."""
        rates = sorted(r for r in map(_throughput, self.tasks) if r > 0)
        if rates and task.work > 0:
            return task.work / rates[len(rates) // 2]
        return 1.0

    # -- one batch ------------------------------------------------------------------------------
    def _tune(self, task: SchedulerTask, count: int) -> None:
        begin = self.clock()
        try:
            loop = self.loops.get(task.key)
            if loop is None:
                loop = self.loops[task.key] = self.make_loop(task)
                if not isinstance(loop, TuningLoop):
                    raise SearchError(f"make_loop gave a {type(loop).__name__}, not a "
                                      f"TuningLoop")
            if self.share_bests:
                self._offer_bests(task, loop)
            run_before = loop.timers["run"]
            trials = loop.step(count)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:  # noqa: BLE001 - one task's failure must not stop the others
            task.wall_seconds += self.clock() - begin
            self._set_aside(task, f"{type(err).__name__}: {err}")
            return
        seconds = self.clock() - begin
        task.wall_seconds += seconds
        if not trials:
            task.status = "exhausted"
            self.log(f"[tune-model] {task.name}: the design space gave no new candidate after "
                     f"{task.trials} trials; the task is done")
            self._emit("task", task)
            return
        task.status = "tuning"
        ran = loop.timers["run"] - run_before
        task.run_seconds += ran
        self._run_phase_seconds += ran
        self._batch_seconds += seconds
        for trial, result in trials:
            task.add_trial(trial.seconds)
            task.run_trials += 1
            self.trials_run += 1
            if trial.error_kind is not None:
                task.errors += 1
                task.failing_streak += 1
                task.last_error = f"{trial.error_kind}: {result.error_msg}"
            else:
                task.failing_streak = 0
        self._record_curve()
        self._emit("batch", task)
        if task.failing_streak >= self.fail_after and not math.isfinite(task.best_seconds):
            self._set_aside(task, f"its last {task.failing_streak} candidates all failed; "
                                  f"last error: {task.last_error}")
        elif self._check_converged(task):
            self.log(f"[tune-model] {task.name}: no improvement over {self.patience} trials; "
                     f"the task is done")
            self._emit("task", task)

    def _offer_bests(self, task: SchedulerTask, loop: TuningLoop) -> None:
        """Queue in ``task``'s loop the best program of every other task tuned in this run
        whose decisions its sketches take (TuningLoop.adopt), each best once, so that tasks
        alike but for their epilogue tune as one.  In a ResNet-18 run without this, layer4's
        two 512-channel 3x3 convolutions, one ending in a residual add and one not, kept
        bests of 2.02 and 2.83 ms after 353 and 192 trials.  A donor whose decisions do not
        fit is not tried again with that signature, so the replays this costs stay bounded
        by the pairs of tasks.

        With ``fit_bests``, a donor whose loops have other extents (the decisions replay
        only fitted, see TuningLoop.adopt) is offered while its best runs at a higher
        throughput (work per second) than the receiver's: one per batch, the fastest first,
        so that these programs take at most a few of each batch.  Measured on ResNet-18:
        layer4's stride-2 3x3 convolution (256 to 512 channels) had a best of 1.55 ms after
        112 trials of a 2000-trial run; the tiling of the stride-1 512-channel one (2.13 ms,
        108 GFLOPS), fitted to its 256 input channels, ran 1.27-1.36 ms, what 320 trials of
        the stride-2 task alone reached."""
        offered = self._offered.setdefault(task.key, set())
        misfits = self._misfits.setdefault(task.key, set())
        reshaped = self._reshaped.setdefault(task.key, set())
        fastest = None  # (throughput, donor task, its best): the one to offer fitted
        for other in self.tasks:
            donor = self.loops.get(other.key) if other is not task else None
            best = None if donor is None or donor.result is None else donor.result.best
            if best is None or (other.key, best.trace_hash) in offered:
                continue
            signature = sampling_signature(best.trace)
            if (other.key, signature) in misfits or not loop.takes(best.trace):
                misfits.add((other.key, signature))
                offered.add((other.key, best.trace_hash))
                continue
            if other.key not in reshaped:
                offered.add((other.key, best.trace_hash))
                if loop.adopt(best.trace) is not None:
                    continue
                if not self.fit_bests:
                    misfits.add((other.key, signature))
                    continue
                reshaped.add(other.key)
                offered.discard((other.key, best.trace_hash))  # offered fitted, below
            # A donor no faster than the receiver now never will be with this best: the
            # receiver's best only improves.
            rate = _throughput(other)
            if rate <= _throughput(task):
                offered.add((other.key, best.trace_hash))
            elif fastest is None or rate > fastest[0]:
                fastest = (rate, other, best)
        if fastest is not None:
            _, other, best = fastest
            offered.add((other.key, best.trace_hash))
            if loop.adopt(best.trace, fit=True) is None:
                misfits.add((other.key, sampling_signature(best.trace)))

    def _check_converged(self, task: SchedulerTask) -> bool:
        if task.trials <= self.patience or not task.active:
            return False
        before = task.best_at(task.trials - self.patience)
        if math.isfinite(before) and task.best_at(task.trials) > before * (
                1 - self.min_improvement):
            task.status = "converged"
            return True
        return False

    def _set_aside(self, task: SchedulerTask, why: str) -> None:
        task.status = "failed"
        task.error = why
        self.log(f"[tune-model] task {task.name} [{task.key[:12]}] is set aside: {why}")
        self._emit("task", task)

    def _record_curve(self) -> None:
        self.curve.append((self.elapsed, self.total_trials, self.estimated_latency()[0]))

    # -- the end ------------------------------------------------------------------------------
    def _remeasure(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        if not self.remeasure_top or not self.remeasure_rounds:
            return out
        self.phase = "remeasuring"
        self._emit("remeasure")
        for task in self.tasks:
            loop = self.loops.get(task.key)
            if loop is None or not task.run_trials or task.status == "failed":
                continue
            if self.should_stop():
                self.stopped = "interrupted"
                break
            if self._past_deadline():
                break
            try:
                out[task.key] = loop.remeasure_top(self.remeasure_top, self.remeasure_rounds,
                                                   keep_going=self._time_left)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as err:  # noqa: BLE001 - the tuned records stay valid
                self.log(f"[tune-model] re-measuring {task.name} failed "
                         f"({type(err).__name__}: {err}); its best keeps its first time")
                continue
            best = self.database.best(task.key, self.target)
            if best is not None:
                task.best_seconds = best.score if best.score is not None else best.median
        self._record_curve()
        return out

    def _past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def _time_left(self) -> bool:
        """Whether work may still start: not asked to stop, the deadline (if any) ahead."""
        return not self.should_stop() and not self._past_deadline()

    def _emit(self, event: str, task: SchedulerTask | None = None) -> None:
        if self.listener is not None:
            self.listener(event, self, task)
