"""autotune.tune: search schedules for one operator and return the fastest one measured.

    best = autotune.tune(func, target="llvm", trials=256, database="tuning.db")
    best.best_time, best.best_gflops          # seconds per call (re-measured), GFLOPS
    kernel = autotune.build(best.best_schedule.func, target="llvm")
    best.best_trace                           # replays with best_trace.apply(func)

The run (search.TuningLoop): the design space of ``func`` (schedules.DesignSpace), a search
strategy ("evolutionary" by default, or "random"), a cost model ("xgb" by default) retrained
as results come in, candidates built by a LocalBuilder and timed by a LocalRunner (or the
builder and runner given), every result stored in the database in one transaction per batch.
With a database file, a second run continues from the best stored records and never measures
a candidate measured before for that target.  ``trials`` is the workload's total budget on the
target: candidates already stored for it count, so the same call run again after a kill (or
after it finished) measures only what is missing -- nothing once the budget is met.
``SearchConfig(top_up=False)`` measures ``trials`` new candidates on top of the stored ones
instead.  At the end the top few candidates are re-measured interleaved and the best median
over those runs is what is reported (its spread is stored in the database beside it).  A
fixed ``seed`` gives a reproducible search (the measured times, and so the choices that follow
them, still carry the machine's noise).
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field

import cost_models
from records import Database, MemoryDatabase
from schedules.schedule import Schedule
from schedules.space import DesignSpace
from schedules.trace import Trace
from search import MeasureContext, SearchConfig, SearchStrategy, TuningLoop
from search import create as create_strategy
from search.loop import LoopResult, TrialResult
from tensor_ir.errors import TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from ..backends import backend_for
from .history import choose_record
from ..measure import Builder, LocalBuilder, LocalRunner, MeasureConfig, Runner

__all__ = ["TuneError", "TuneResult", "tune"]


class TuneError(TensorIRError, ValueError):
    """autotune.tune was given something it cannot tune with (named in the message)."""


@dataclass
class TuneResult:
    """The outcome of :func:`tune`.

    best_schedule  the best program as a Schedule (``.func`` to build, ``.trace``), or None
                   when no candidate ran successfully.
    best_trace     its final trace (``best_trace.apply(func)`` gives the program again).
    best_time      seconds per call: the median over its first measurement and the
                   interleaved re-measurements; math.inf when nothing succeeded.
    best_gflops    ``flops / best_time / 1e9`` (0 when the operator does no float work).
    best_gbps      parameter bytes / best_time / 1e9: the throughput figure of memory-bound
                   operators.
    best_spread    (max - min) / median of its re-measured runs (None: not re-measured).
    workload_key, target   what was tuned and for which target (canonical string).
    trials         candidates measured by this call; ``history`` one TrialResult each.
    previous_trials  distinct candidates of the workload and target (on this hardware) the
                   database held before this call; with ``top_up`` they counted toward the
                   budget, so ``previous_trials + trials`` is the stored total.
    phase_seconds  wall seconds per phase (search, predict, build, run, kernel, db,
                   retrain, warm_start, remeasure).
    wall_seconds, overhead_share, trials_per_minute, model_accuracy   see search.LoopResult.
    model_heldout  with ``heldout``: the trained model's pairwise accuracy on unseen random
                   programs (see search.TuningLoop.heldout_accuracy), else None.
    """

    best_schedule: Schedule | None
    best_trace: Trace | None
    best_time: float
    best_gflops: float
    best_gbps: float
    best_spread: float | None
    workload_key: str
    target: str
    trials: int
    history: list[TrialResult] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    overhead_share: float = math.nan
    trials_per_minute: float = 0.0
    model_accuracy: float = math.nan
    resumed_records: int = 0
    previous_trials: int = 0
    remeasured: list[dict] = field(default_factory=list)
    loop: LoopResult | None = field(default=None, repr=False)
    model_heldout: dict | None = None

    @property
    def best_func(self) -> PrimFunc | None:
        return self.best_schedule.func if self.best_schedule is not None else None


def tune(func: PrimFunc, target: str | Target = "llvm", trials: int = 64,
         database: str | os.PathLike | Database | None = None, *,
         search: SearchConfig | None = None, measure: MeasureConfig | None = None,
         builder=None, runner=None, space: DesignSpace | None = None, log=True
         ) -> TuneResult:
    """Tune ``func`` for ``target`` until ``trials`` candidates are measured.

    ``trials`` counts the candidates already in the database for this workload and target
    (``search.top_up``, the default): a run resumed after an interruption, or repeated, tops
    the stored total up to ``trials`` and measures nothing when it is there already.
    ``SearchConfig(top_up=False)`` measures ``trials`` new candidates whatever is stored.

    ``database``: a file path (opened, created if needed, closed at the end), a
    records.Database, or None (an in-memory one: nothing is kept).  ``search``: a
    search.SearchConfig (default ``SearchConfig()``): the ``strategy`` and ``cost_model``
    (a registered kind or an instance; kinds are created with the ``seed``; ``cost_model``
    may also be the path of a saved model, which ``cost_models.pretrain`` writes from another
    database's records: loaded, it ranks candidates from the first batch and is retrained
    with this run's measurements in memory; the file is never written), ``batch_size``
    candidates per measured batch, the ``warm_start`` best stored records a resumed run
    starts from, the ``remeasure_top`` candidates re-timed ``remeasure_rounds`` times,
    interleaved, before the best is reported (0: not), ``top_up``, and ``heldout``: after the
    search, that many fresh random programs of the space are measured (kept out of the
    database and of the model's training data) to judge the trained cost model's ranking on
    candidates it never saw (``TuneResult.model_heldout``; 0: not).  ``measure``: the
    runner's timing protocol, a MeasureConfig (when no ``runner`` is given; default: the
    runner's, else MeasureConfig()) and what is stored with each record.
    ``builder``/``runner``: measurement back-ends (default LocalBuilder / LocalRunner, closed
    at the end; those given are left open).  ``space``: a ready DesignSpace of ``func`` (for
    custom rules or templates).
    ``log``: True prints progress to stderr, False is silent, a logging.Logger or a callable
    takes the lines.
    """
    # 1. Check the arguments before starting any process (the settings objects checked
    # their own values when they were made).
    if not isinstance(func, PrimFunc):
        raise TuneError(f"autotune.tune needs a PrimFunc, got {type(func).__name__}")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 0:
        raise TuneError(f"autotune.tune: trials must be an int >= 0, got {trials!r}")
    settings, config = checked_settings("autotune.tune", search, measure, runner)
    target = target if isinstance(target, Target) else Target(target)
    if space is not None and (not isinstance(space, DesignSpace) or space.func is not func):
        raise TuneError("autotune.tune: space must be a DesignSpace made from the same func")
    seed = settings.seed
    strategy = create_strategy(settings.strategy, seed=seed) \
        if isinstance(settings.strategy, str) else settings.strategy
    # A kind, a CostModel, or a saved model's file: a pre-trained model ranks from trial 0.
    cost_model = cost_models.from_spec(settings.cost_model, seed=seed)

    # 2. Open what is ours to open (and close it, whatever happens).
    with measurement(database, builder, runner, config, "autotune.tune") as opened:
        db, builder, runner = opened
        # 3. Search, then re-measure the top before anything is reported.
        loop = tuning_loop(func, target, db, builder, runner, settings, strategy, cost_model,
                           measure_config=config, log=log, space=space)
        result = loop.run(trials, top_up=settings.top_up)
        remeasured = loop.remeasure_top(settings.remeasure_top, settings.remeasure_rounds)
        out = _result(func, loop, result, remeasured, db, target)
        if settings.heldout >= 2 and result.trials:
            out.model_heldout = loop.heldout_accuracy(settings.heldout, seed=seed + 1)
        return out


def checked_settings(caller: str, search: SearchConfig | None, measure: MeasureConfig | None,
                     runner) -> tuple[SearchConfig, MeasureConfig]:
    """The settings objects ``tune`` and ``tune_model`` were given, or their defaults: the
    SearchConfig (default ``SearchConfig()``), and the MeasureConfig to time with
    (``measure``, else the given runner's, else the default).  Their values were checked when
    they were made; an object of another type is a TuneError naming ``caller``."""
    if search is not None and not isinstance(search, SearchConfig):
        raise TuneError(f"{caller}: search must be a search.SearchConfig, got "
                        f"{type(search).__name__}")
    if measure is not None and not isinstance(measure, MeasureConfig):
        raise TuneError(f"{caller}: measure must be a MeasureConfig, got "
                        f"{type(measure).__name__}")
    return search or SearchConfig(), measure or (
        runner.config if isinstance(runner, Runner) and runner.config is not None
        else MeasureConfig())


def tuning_loop(func: PrimFunc, target: Target, database: Database, builder: Builder,
                runner: Runner, settings: SearchConfig, strategy: SearchStrategy,
                cost_model: cost_models.CostModel, *, measure_config: MeasureConfig, log=None,
                space: DesignSpace | None = None, context: MeasureContext | None = None
                ) -> TuningLoop:
    """The tuning loop of one workload, as ``tune`` and ``tune_model`` run it: the function's
    design space (or ``space``), with the default schedule -- what a build uses without a
    record -- measured first, so that a short run never ends slower than no tuning at all.
    ``context``: how the workload sits in its model (its weights, their cache state, fresh
    activations; see search.MeasureContext), None for a workload timed on its own."""
    seeds = []
    if space is None:
        space = DesignSpace(func, target)
        # The first candidates measured: the backend's (on a CPU the default schedule; a GPU
        # backend seeds none, see autotune.backends.gpu).
        seeds = backend_for(target).tuning_seeds(func, target)
    return TuningLoop(space, strategy, cost_model, builder, runner, database, config=settings,
                      measure_config=measure_config, log=log, seed_traces=seeds,
                      context=context)


def _result(func: PrimFunc, loop: TuningLoop, result: LoopResult, remeasured, db,
            target: Target) -> TuneResult:
    """The best record in the database (after re-measurement) as a TuneResult."""
    choice = choose_record(db, func, target)
    best_rec = choice.record
    phases = loop.timers.as_dict()
    phases["kernel"] = result.kernel_seconds + phases.pop("kernel_remeasure", 0.0)
    common = {"workload_key": result.workload_key, "target": result.target,
              "trials": len(result.trials), "history": list(result.trials),
              "phase_seconds": phases, "wall_seconds": result.wall_seconds,
              "overhead_share": result.overhead_share,
              "trials_per_minute": result.trials_per_minute,
              "model_accuracy": result.model_accuracy,
              "resumed_records": result.resumed_records,
              "previous_trials": result.skipped_known, "remeasured": list(remeasured),
              "loop": result}
    if best_rec is None:
        return TuneResult(None, None, math.inf, 0.0, 0.0, None, **common)
    trace, schedule = best_rec.trace(), choice.schedule
    seconds = best_rec.score if best_rec.score is not None else best_rec.median
    spread = next((d["spread"] for d in remeasured if d["record_id"] == best_rec.record_id),
                  None)
    gflops = result.flops / seconds / 1e9 if seconds > 0 else 0.0
    gbps = result.bytes / seconds / 1e9 if seconds > 0 else 0.0
    return TuneResult(schedule, trace, seconds, gflops, gbps, spread, **common)


@contextlib.contextmanager
def measurement(database, builder, runner, config: MeasureConfig, caller: str):
    """(database, builder, runner) for a tuning call: those given are used as they are, the
    others are opened here (open_database; a LocalBuilder; a LocalRunner with ``config``)
    and closed on the way out, whatever happens."""
    with contextlib.ExitStack() as stack:
        db, own_db = open_database(database, caller)
        if own_db:
            stack.callback(db.close)
        if builder is None:
            builder = LocalBuilder()
            stack.callback(builder.close)
        if runner is None:
            runner = LocalRunner(config)
            stack.callback(runner.close)
        yield db, builder, runner


def open_database(database, caller: str):
    """(database, whether the caller opened it and must close it) for a path, a
    records.Database or None (an in-memory database)."""
    if database is None:
        return MemoryDatabase(), True
    if isinstance(database, Database):
        return database, False
    if isinstance(database, (str, os.PathLike)):
        return Database(database), True
    raise TuneError(f"{caller}: database must be a path, a records.Database or None, "
                    f"got {type(database).__name__}")
