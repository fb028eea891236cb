"""autotune.tune_model: tune every fused function of a model under one trial budget.

    result = autotune.tune_model("resnet18", target="llvm", trials=1000, database="tuning.db")
    print(result)                       # the report: per task trials, best, share, roofline
    with autotune.apply_history_best("tuning.db"):
        lib = autotune.build(autotune.load_model("resnet18"), "llvm")

The model (a zoo name, an .onnx path, an onnx.ModelProto or a Model) is partitioned once
(autotune.graph.tasks.Partition: tasks, weight state, re-ranking and build all take it) into
tasks: one per structurally unique fused function, weighted by how often it occurs.  A
search.TaskScheduler shares the budget among them ("gradient" by default: trials go where they
are expected to lower the estimated end-to-end latency the most; "round-robin" as the simple
alternative), running one tuning loop per task (search.TuningLoop, the loop of
``autotune.tune``) on shared builder and runner processes, each task with its own cost model.
(``SchedulerConfig(share_cost_model=True)`` gives all tasks one model, as Ansor does; each
task's loop then retrains it on every task's data, which costs seconds per batch once
thousands of records have accumulated, so it is not the default.)  A pre-trained model
(``SearchConfig(cost_model="model.json")``, from ``python -m cost_models pretrain``) seeds
every task: each starts from its own copy and ranks from the first batch.

The settings travel as frozen objects, each checked when it is made: ``search=``
(search.SearchConfig), ``measure=`` (MeasureConfig), ``scheduler=`` (search.SchedulerConfig),
``build=`` (BuildConfig: re-ranking and the final build) and ``control=`` (RunControl: time
limits and the hooks of a display).

``trials`` is the model's total: records stored in the database for the model's tasks on this
target count, so a run stopped early and started again ends with the same total and never
measures a candidate twice.  ``RunControl(time_budget=...)`` (seconds, or text such as "8h",
"1h30m") and ``RunControl(deadline=...)`` (seconds since the epoch) bound the wall time as
well.  A task whose design
space cannot be built, or whose candidates keep failing, is set aside with its error; the
others go on.  At the end the best candidates of each task tuned in this run are re-measured,
the report is stored in the database (``tune-model report`` reprints it), and the model is
built from the database to report its coverage (share of FLOPs served by records);
``BuildConfig(min_coverage=...)`` makes a lower coverage an error.

``target="opencl"`` tunes the tasks on this machine's OpenCL device (the GPU design space,
kernels timed by the local runner through pyopencl) and builds the model there at the end
(autotune.runtime.gpu_executor); a target whose device is missing is refused before any work.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import cost_models
from records import Database
from search import MeasureContext, SchedulerConfig, SearchConfig, TuningLoop
from search import create as create_strategy
from search.task_scheduler import SchedulerResult, SchedulerTask, TaskScheduler
from tensor_ir.target import Target

from ..backends import backend_for
from ..runtime.executor import BuildReport
from ..frontends import load_model
from ..graph.ir import Model
from ..graph.tasks import Partition
from ..measure import MeasureConfig
from .report import ModelReport, format_report, refresh, store
from .tune import TuneError, checked_settings, measurement, tuning_loop

__all__ = ["BuildConfig", "CoverageError", "RunControl", "TuneModelResult", "model_tasks",
           "parse_duration", "tune_model"]

# Trials per task when neither a budget nor a time limit is given.
DEFAULT_TRIALS_PER_TASK = 64


class CoverageError(TuneError):
    """tune_model(build=BuildConfig(min_coverage=...)): the tuned records cover less of the
    model than asked.  ``result`` holds the run's outcome."""

    def __init__(self, message: str, result: TuneModelResult):
        super().__init__(message)
        self.result = result


@dataclass
class TuneModelResult:
    """The outcome of :func:`tune_model`.

    tasks            search.SchedulerTask per task (trials, best_seconds, status, error, ...).
    trials           the model's trials in the database (this run's and earlier ones).
    trials_run       trials measured by this call.
    stopped          why the search ended: "budget", "deadline", "interrupted", "done".
    estimated_latency  sum of weight x best time over the tasks, seconds.
    build_report     coverage of a build from the database (None when not built).
    measured_latency end-to-end seconds of that build (only with ``measure_latency``).
    report           the ModelReport (``str(result)`` formats it).
    host_waits       candidates whose timing waited for a quiet host, and the seconds
                     waited (a local CPU runner's; see autotune.measure.host).
    reranked         per heavy task, its records timed inside the model and the one chosen
                     (autotune.tuning.rerank.rerank_in_model); empty when not re-ranked.
    """

    model: str
    target: str
    tasks: list[SchedulerTask]
    trials: int
    trials_run: int
    budget: int | None
    stopped: str
    estimated_latency: float
    wall_seconds: float
    curve: list[tuple[float, int, float]] = field(default_factory=list)
    build_report: BuildReport | None = None
    measured_latency: float | None = None
    report: ModelReport | None = None
    scheduler: SchedulerResult | None = field(default=None, repr=False)
    host_waits: tuple[int, float] = (0, 0.0)
    reranked: list[dict] = field(default_factory=list)

    @property
    def coverage(self) -> float | None:
        return None if self.build_report is None else self.build_report.coverage

    @property
    def failed(self) -> list[SchedulerTask]:
        return [t for t in self.tasks if t.status == "failed"]

    def __str__(self) -> str:
        return format_report(self.report) if self.report is not None else repr(self)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms]?)")


def parse_duration(text: str | float | int) -> float:
    """Seconds from a number or text such as "8h", "1h30m", "45m", "90s", "2d", "600"."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not text > 0:
            raise TuneError(f"a time budget must be > 0 seconds, got {text!r}")
        return float(text)
    if not isinstance(text, str):
        raise TuneError(f"a time budget is a number of seconds or text like '8h', got "
                        f"{type(text).__name__}")
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise TuneError(f"cannot read the time budget {text!r}; write e.g. '8h', '1h30m', "
                        f"'45m', '90s' or a number of seconds")
    scale = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}
    seconds = sum(float(n) * scale[u] for n, u in parts)
    if not seconds > 0:
        raise TuneError(f"the time budget {text!r} is not positive")
    return seconds


def similarity_group(func, flops: float) -> str:
    """The scheduler's group of a task (SchedulerTask.group): tasks whose throughputs are
    compared, so that one far behind its siblings is expected to catch up.  The fused
    function's name alone is too coarse: a depthwise and a pointwise convolution with the
    same bias and clip are both ``fused_conv2d_add_clip``, and the depthwise one, doing ~20
    operations per output against hundreds, cannot reach the pointwise one's throughput
    (MobileNetV2's ran at 50-230 GFLOPS, its pointwise ones at 200-470), yet would be
    expected to.  So the name is qualified by the work per output element (the reduction's
    length, with what is fused around it), in powers of two."""
    per_output = flops / max(1, func.params[-1].size)
    if per_output < 1:
        return func.name
    return f"{func.name}/{1 << int(math.log2(per_output))}"


def model_tasks(model: Model | Partition) -> list[SchedulerTask]:
    """The tasks of a model or its partition as the scheduler sees them.  Tasks of one fused
    function name are told apart by a ``#n`` suffix; those of one name and a like amount of
    work per output share a group (their throughputs are compared, see similarity_group)."""
    tasks = []
    seen: dict[str, int] = {}
    for task in Partition.of(model).tasks:
        seen[task.name] = seen.get(task.name, 0) + 1
        name = task.name if seen[task.name] == 1 else f"{task.name}#{seen[task.name]}"
        tasks.append(SchedulerTask(name, task.key, task.weight, float(task.flops),
                                   float(sum(b.nbytes for b in task.func.params)),
                                   group=similarity_group(task.func, task.flops),
                                   func=task.func,
                                   weight_params=tuple(sorted(task.weight_params))))
    return tasks


def weights_read_cold(model: Model | Partition, target: Target) -> bool:
    """Whether each run of ``model`` on ``target`` reads its weights from memory, so that
    the tuner times its tasks on weights out of cache (MeasureInput.cold_weights), as the
    built model meets them.  One inference streams its weights and its activations through
    the caches, each kernel finding its own weights evicted by the others since its last
    run, once together they take more than half of the CPU's last-level cache: a victim L3
    (AMD's), shared with other cores, keeps less than its size, and holds a line only after
    the private caches evicted it.  Measured on the builds here (32 MiB L3): the BERT
    layer's 27 MiB of weights ran its matmuls in the model as slowly as alone on rotated
    weight copies and up to 1.6x slower than on warm ones; MobileNetV2's weights are only
    13.5 MiB, but with its activations (several of 4.8 MiB) its late 1x1 convolutions ran
    1.4-1.8x slower in the model than on warm weights, and like alone on a flushed cache.
    The activations count once each (each is written once per run and then read)."""
    if not backend_for(target).cpu or not target.l3_cache:
        return False
    model = model.source if isinstance(model, Partition) else model
    weights = sum(np.asarray(array).nbytes for array in model.constants.values())
    activations = sum(t.nbytes for name, t in model.types.items()
                      if name not in model.constants)
    return 2 * (weights + activations) > target.l3_cache


def streamed_bytes(model: Model | Partition, target: Target) -> int:
    """The bytes one run of ``model`` streams through the caches -- its weights and its
    planned activation buffers (autotune.graph.passes.plan_memory) -- when they exceed the
    private caches of the cores that run it, else 0.  A kernel's weights are then evicted
    from those caches by the rest of the model between two of its calls, and the tuner
    times its tasks with the weights rotated over copies of this many bytes
    (MeasureInput.cold_bytes): each call finds them where the model's call does, in the
    shared cache or in memory as the model's size decides.  Measured on MobileNetV2 on a
    2-core Xeon (2 MiB L2 per core, 300 MiB shared L3; 13.5 MiB of weights, 8 MiB of
    activations): its ten heaviest kernels, 1x1 convolutions, ran 1.06-1.68x slower in the
    model than their records alone on warm weights; re-timed alone on weight copies rotated
    over 21 MiB, all 32 kernels summed to within 2% of their times in the model (over
    600 MiB, from memory, the heaviest ran up to 1.6x slower than in the model).
    Not needed where weights_read_cold holds (read from memory anyway), nor where the
    private cache sizes are unknown (0)."""
    if not backend_for(target).cpu or not target.l2_cache:
        return 0
    total = Partition.of(model).run_bytes
    return total if total > target.l2_cache * max(1, target.num_cores) else 0


def weight_state(model: Model | Partition, target: Target) -> tuple[bool, int]:
    """How the tuner times the weights of ``model``'s tasks on ``target``: the
    ``(cold_weights, cold_bytes)`` of their MeasureInputs.  Read from memory (copies over
    twice the L3) where weights_read_cold holds, else out of the private caches by the bytes
    the model streams (streamed_bytes) where that is over 0, else warm: ``(False, 0)``."""
    if weights_read_cold(model, target):
        return True, 0
    streamed = streamed_bytes(model, target)
    return streamed > 0, streamed


@dataclass(frozen=True)
class BuildConfig:
    """What :func:`tune_model` does with the records once the search ends.

    rerank_top       on a CPU target, each heavy task's ``rerank_top`` best records are timed
                     inside the built model (``rerank_rounds`` alternating rounds) and the
                     fastest there becomes the record builds of this model take
                     (autotune.tuning.rerank; 0 or 1: none).
    rerank_rounds    see rerank_top.
    build            build the model from the database and report its coverage (the share of
                     FLOPs served by records) ...
    measure_latency  ... and time the built model end to end.
    min_coverage     raise CoverageError below this share of FLOPs (None: never).
    """

    rerank_top: int = 8
    rerank_rounds: int = 15
    build: bool = True
    measure_latency: bool = False
    min_coverage: float | None = None

    def __post_init__(self):
        for name in ("rerank_top", "rerank_rounds"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TuneError(f"tune_model: {name} must be an int >= 0, got {value!r}")
        for name in ("build", "measure_latency"):
            if not isinstance(getattr(self, name), bool):
                raise TuneError(f"tune_model: {name} must be True or False, got "
                                f"{getattr(self, name)!r}")
        coverage = self.min_coverage
        if coverage is not None and not (isinstance(coverage, (int, float))
                                         and not isinstance(coverage, bool)
                                         and 0 <= coverage <= 1):
            raise TuneError(f"tune_model: min_coverage is a share of FLOPs in [0, 1], got "
                            f"{coverage!r}")


@dataclass(frozen=True)
class RunControl:
    """When a :func:`tune_model` run stops, besides its trial budget, and who hears of it.

    time_budget  wall seconds, or text such as "8h", "1h30m" (see parse_duration), counted
                 from the call.
    deadline     seconds since the epoch; with both, the earlier one ends the run.
    listener     ``listener(event, scheduler, task)``, and ``should_stop()`` polled between
    should_stop  batches: see search.TaskScheduler (the tune-model display and its Ctrl-C
                 handling use them).
    """

    time_budget: float | str | None = None
    deadline: float | None = None
    listener: Callable | None = None
    should_stop: Callable[[], bool] | None = None

    def __post_init__(self):
        if self.time_budget is not None:
            parse_duration(self.time_budget)
        if self.deadline is not None and not (isinstance(self.deadline, (int, float))
                                              and not isinstance(self.deadline, bool)):
            raise TuneError(f"tune_model: deadline is seconds since the epoch, got "
                            f"{self.deadline!r}")
        for name in ("listener", "should_stop"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TuneError(f"tune_model: {name} must be callable, got "
                                f"{type(getattr(self, name)).__name__}")

    def end_by(self, now: float) -> float | None:
        """The time (seconds since the epoch) the run ends by, started at ``now``; None: no
        limit but the trials."""
        limits = [d for d in (self.deadline, None if self.time_budget is None
                              else now + parse_duration(self.time_budget)) if d is not None]
        return min(limits) if limits else None


def tune_model(model, target: str | Target = "llvm", trials: int | None = None,
               database: str | os.PathLike | Database | None = None, *,
               search: SearchConfig | None = None, measure: MeasureConfig | None = None,
               scheduler: SchedulerConfig | None = None, build: BuildConfig | None = None,
               control: RunControl | None = None, builder=None, runner=None, log=False
               ) -> TuneModelResult:
    """Tune ``model`` for ``target``; see the module text.

    ``model``: a zoo name, an .onnx path, an onnx.ModelProto or a Model (for input shapes or
    options, pass ``load_model(model, input_shapes, **options)``).  ``trials``: the model's
    total budget (default: 64 per task unless a time limit is given).  ``search``: a
    search.SearchConfig, the per-task search (``strategy`` and ``cost_model`` kinds as in
    ``autotune.tune``; ``cost_model`` may also be a saved model's path or a CostModel
    instance, a pre-trained model: every task then starts from a copy of it, and the file is
    never written; ``batch_size``, ``seed``, ``warm_start``, ``remeasure_top`` and
    ``remeasure_rounds``: the best candidates of each task tuned in this run re-measured at
    the end).  ``measure``: the MeasureConfig timing protocol (default: the runner's, else
    MeasureConfig()).  ``scheduler``: a search.SchedulerConfig, how the budget is shared
    (``policy`` "gradient" or "round-robin", ``patience``: trials without improvement after
    which a task stops, ``share_cost_model``: one model for all tasks, see the module text).
    ``build``: a BuildConfig, the re-ranking inside the model and the build at the end
    (``min_coverage``: raise CoverageError below this share of FLOPs).  ``control``: a
    RunControl, the time budget, deadline, listener and stop request.
    ``builder``/``runner``: measurement back-ends (defaults are made and closed here; a
    LocalBuilder(max_workers=n) given sets the build processes).  ``log``: True, False, a
    logging.Logger or a callable taking lines (the per-task loops' and the scheduler's).
    """
    # 1. Arguments, before any process starts (the settings objects checked their own
    # values when they were made; here only that each is of its kind).
    if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool)
                               or trials < 0):
        raise TuneError(f"tune_model: trials must be an int >= 0, got {trials!r}")
    settings, config = checked_settings("tune_model", search, measure, runner)
    for name, value, kind in (("scheduler", scheduler, SchedulerConfig),
                              ("build", build, BuildConfig),
                              ("control", control, RunControl)):
        if value is not None and not isinstance(value, kind):
            raise TuneError(f"tune_model: {name} must be a {kind.__name__}, got "
                            f"{type(value).__name__}")
    sharing = scheduler if scheduler is not None else SchedulerConfig()
    finish = build if build is not None else BuildConfig()
    control = control if control is not None else RunControl()
    if not isinstance(settings.strategy, str):
        raise TuneError("tune_model: search.strategy must be a kind: each task creates its "
                        "own strategy, seeded per task")
    seed = settings.seed
    target = target if isinstance(target, Target) else Target(target)
    backend = backend_for(target)
    if not backend.cpu and runner is None:
        # The local runner times every candidate on this machine's device (an OpenCL device,
        # the CUDA GPU), and the model is built on it at the end: without one, every trial
        # would fail.
        problem = backend.unavailable(target)
        if problem is not None:
            raise TuneError(f"tune_model: target {target}: {problem}")
    now = time.time()
    end_by = control.end_by(now)
    model = load_model(model)
    part = Partition.of(model)
    tasks = model_tasks(part)
    cold_weights, cold_bytes = weight_state(part, target)
    # How every task sits in the model; each task's loop adds its own weight parameters.
    # Activations as their producer leaves them (see MeasureInput.fresh_inputs) are a CPU
    # runner's protocol.
    in_model = MeasureContext(cold_weights=cold_weights, cold_bytes=cold_bytes,
                              fresh_inputs=backend.cpu)
    if not tasks:
        raise TuneError(f"tune_model: {model.name} has no fused function to tune")
    if trials is None and end_by is None:
        trials = DEFAULT_TRIALS_PER_TASK * len(tasks)
    # A kind is created per task with the task's seed; a saved (pre-trained) model is read
    # once here and each task gets its own copy, so what one task's measurements teach it
    # stays with that task, as with a fresh model per task.
    cost_model = settings.cost_model
    start_model = cost_models.from_spec(cost_model, seed=seed)
    by_kind = isinstance(cost_model, str) and cost_model in cost_models.kinds()
    shared_model = start_model if sharing.share_cost_model else None

    # 2. What is ours to open is closed at the end, whatever happens.
    with measurement(database, builder, runner, config, "tune_model") as opened:
        db, builder, runner = opened
        index = {t.key: i for i, t in enumerate(tasks)}

        def make_loop(task: SchedulerTask) -> TuningLoop:
            task_seed = seed * 1_000_003 + index[task.key]
            if shared_model is not None:
                model = shared_model
            elif by_kind:
                model = cost_models.create(cost_model, seed=task_seed)
            else:
                model = copy.deepcopy(start_model)
            return tuning_loop(task.func, target, db, builder, runner, settings,
                               create_strategy(settings.strategy, seed=task_seed), model,
                               measure_config=config, log=log,
                               context=dataclasses.replace(
                                   in_model, weight_params=task.weight_params))

        # 3. Search.
        scheduler = TaskScheduler(
            tasks, make_loop, db, target, trials=trials, deadline=end_by, config=sharing,
            search=settings, listener=control.listener, should_stop=control.should_stop,
            log=log)
        outcome = scheduler.run()

        # 4. Report, stored before the build so that an interrupted build loses nothing.
        # A copy of each task: refreshing the report from the records leaves the result's
        # tasks as the scheduler left them.
        report = ModelReport(
            model.name, str(target), [copy.copy(t) for t in tasks], budget=trials,
            trials_run=outcome.trials_run, wall_seconds=outcome.wall_seconds,
            stopped=outcome.stopped, started=now)
        refresh(db, report)   # the curve over every stored record, earlier runs included
        store(db, report)
        result = TuneModelResult(model.name, str(target), tasks, outcome.trials,
                                 outcome.trials_run, trials, outcome.stopped,
                                 outcome.estimated_latency, outcome.wall_seconds,
                                 outcome.curve, report=report, scheduler=outcome,
                                 host_waits=(getattr(runner, "host_waits", 0),
                                             getattr(runner, "host_wait_seconds", 0.0)))

        # 5. Each heavy task's record chosen by its time inside the model (CPU targets).
        if finish.rerank_top > 1 and finish.rerank_rounds > 0 and backend.cpu and \
                outcome.stopped != "interrupted":
            from .rerank import rerank_in_model

            result.reranked = rerank_in_model(part, target, db, k=finish.rerank_top,
                                              rounds=finish.rerank_rounds, seed=seed, log=log)

        # 6. Build from the records: coverage (and optionally the real latency).
        if finish.build and outcome.stopped != "interrupted":
            from ..graph.build import build_model, database_lookup

            lib = build_model(part, target, lookup=database_lookup(db, target, model.name),
                              seed=seed, warn=False)
            result.build_report = lib.report
            report.coverage = lib.report.coverage
            if finish.measure_latency:
                result.measured_latency = lib.benchmark().median_ms / 1e3
                report.measured_latency = result.measured_latency
            store(db, report)
        min_coverage = finish.min_coverage
        if min_coverage is not None and result.coverage is not None and \
                result.coverage < min_coverage:
            raise CoverageError(
                f"tune_model: tuning records cover {result.coverage:.1%} of the FLOPs of "
                f"{model.name} on {target}, below the required {min_coverage:.1%}; "
                f"untuned: " + ", ".join(f.name for f in result.build_report.fallbacks),
                result)
        return result
