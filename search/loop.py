"""TuningLoop: generate -> build -> run -> record -> retrain, batch after batch.

    loop = TuningLoop(space, strategy, cost_model, builder, runner, database)
    result = loop.run(trials=256)              # LoopResult: history, phase times, best
    loop.remeasure_top(k=3, rounds=3)          # noise-robust best before it is reported

    loop.step(16)                              # or one batch at a time (the task scheduler)

The builder and runner implement the measurement contract of :mod:`search.measure`; the loop
wraps each candidate program into a ``MeasureInput`` of the space's target and workload, with
the workload's own definition as the reference its outputs are checked against.

One batch:

1. The strategy proposes ``batch_size`` new programs (never measured: the pool tracks program
   hashes of this run and the final-trace hashes in the database).
2. The cost model scores them before it has seen them: these held-out predictions against the
   measured times give the model's ranking accuracy (``LoopResult.model_accuracy``).
3. The builder builds them, the runner times them; artifacts are deleted afterwards.
4. One database transaction stores the batch (final traces, which replay without
   post-processing -- what ``apply_history_best`` and a resumed run read back).
5. The model is retrained on the new results.  Retraining restarts from scratch on all data,
   so it is deferred until the new data reach ``retrain_ratio`` of what the model has seen
   (never fewer than one batch): the retraining cost then grows with the data only
   logarithmically in the number of batches.

``run(trials)`` is a loop over :meth:`TuningLoop.step`, which measures one batch.

Resuming: the first step (and every ``run``) first reads the database: every measured
final-trace hash is excluded, and the ``warm_start`` best records are replayed, given to the
cost model as training data and to the strategy as elites (parents), and their best time
seeds the runner (its slow-candidate cut and output checks start from it).
``run(trials)`` measures ``trials`` new candidates; ``run(trials, top_up=True)`` treats
``trials`` as the workload's total and measures only what the database lacks of it (what
``autotune.tune`` does by default).

Time is accounted per phase (``LoopResult.phase_seconds``): "warm_start", "search" (sampling,
replay, mutation), "predict" (features, predictions), "build", "run" (runner wall time, of
which "kernel" is inside kernels), "db", "retrain", "remeasure".  ``overhead_share`` is the
share of the run's wall time spent outside kernels.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cost_models import CostModel, pairwise_accuracy
from cost_models import features as _features
from records import RecordStore, Workload
from schedules.postproc import replay
from schedules.space import DesignSpace
from schedules.trace import Trace
from tensor_ir.func import PrimFunc

from .config import SearchConfig
from .measure import Builder, MeasureContext, MeasureInput, MeasureResult, Runner, built
from .mutators import sampling_signature, transplant
from .pool import CandidatePool, PhaseTimers, SearchCandidate
from .strategy import SearchError, SearchStrategy

__all__ = ["LoopResult", "TrialResult", "TuningLoop", "make_logger", "workload_cost"]

_LOGGER = logging.getLogger("search")


def workload_cost(func: PrimFunc) -> tuple[float, float]:
    """(floating-point operations, bytes of the parameters) of one call of ``func``: the
    work and the least memory traffic, for GFLOPS and GB/s figures.  Taken from the cost
    model's program features of the unscheduled function (counted analytically, never by
    running it)."""
    row = _features.features(func).astype(np.float64)
    names = _features.FEATURE_NAMES
    flops = 2.0 ** row[names.index("global.total_flops")] - 1.0
    nbytes = 2.0 ** row[names.index("global.param_bytes")] - 1.0
    # Features are log2(1 + x) in float32: round away the representation error.
    return float(round(flops)), float(round(nbytes))


def make_logger(log) -> Callable[[str], None]:
    """``log`` as a line sink: True prints to stderr, False/None is silent, a
    ``logging.Logger`` gets ``info``, a callable is called with each line."""
    if log is True:
        import sys

        return lambda line: print(line, file=sys.stderr, flush=True)
    if log is False or log is None:
        return lambda line: None
    if isinstance(log, logging.Logger):
        return log.info
    if callable(log):
        return log
    raise SearchError(f"log must be True, False, a logging.Logger or a callable taking a "
                      f"line, got {log!r}")


@dataclass(frozen=True)
class TrialResult:
    """One measured candidate of a run: its 1-based ``index``; ``seconds`` (median, math.inf
    for an error) and ``error_kind``; how the strategy found it (``origin``); the model's
    score before measuring (``predicted``); the best time so far (database included) and the
    wall seconds since the run started when its batch finished."""

    index: int
    seconds: float
    error_kind: str | None
    origin: str
    predicted: float | None
    best_seconds: float
    elapsed: float
    trace_hash: str
    program_hash: str


@dataclass
class LoopResult:
    """What a run did.  ``best`` is the fastest candidate known at the end of the search (a
    database elite when nothing faster was found); ``best_seconds`` its median, before any
    re-measurement."""

    workload_key: str
    target: str
    trials: list[TrialResult] = field(default_factory=list)
    best: SearchCandidate | None = None
    best_seconds: float = math.inf
    phase_seconds: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    kernel_seconds: float = 0.0
    resumed_records: int = 0
    skipped_known: int = 0
    model_accuracy: float = math.nan
    exhausted: bool = False
    flops: float = 0.0
    bytes: float = 0.0

    @property
    def overhead_share(self) -> float:
        """Share of wall time spent outside kernels (search, build, bookkeeping, ...)."""
        if self.wall_seconds <= 0:
            return math.nan
        return max(0.0, 1.0 - self.kernel_seconds / self.wall_seconds)

    @property
    def trials_per_minute(self) -> float:
        return 60.0 * len(self.trials) / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def errors(self) -> int:
        return sum(1 for t in self.trials if t.error_kind is not None)

    def trial_reaching(self, fraction: float = 0.9) -> int | None:
        """The first trial whose best-so-far throughput was at least ``fraction`` of the final
        best's (None when the run measured nothing that reached it)."""
        if not math.isfinite(self.best_seconds):
            return None
        for t in self.trials:
            if t.best_seconds <= self.best_seconds / fraction:
                return t.index
        return None


class TuningLoop:
    """Runs the search for one workload (``space.func``) on ``space.target``.

    ``builder``/``runner``: a :class:`~search.measure.Builder` and a
    :class:`~search.measure.Runner`; ``database``: a records.RecordStore (a records.Database,
    or a MemoryDatabase when nothing is to be kept); ``config``: a SearchConfig
    (``batch_size`` candidates per measured batch, ``warm_start`` best records to resume from,
    ``retrain_ratio``: see the module text); ``measure_config``: the settings stored with each
    record; ``log``: see :func:`make_logger`; ``seed_traces``: decided traces measured first
    (e.g. the default schedule); ``context``: a MeasureContext, how the workload sits in its
    model (default: on its own)."""

    def __init__(self, space: DesignSpace, strategy: SearchStrategy, cost_model: CostModel,
                 builder: Builder, runner: Runner, database: RecordStore, *,
                 config: SearchConfig | None = None, measure_config=None, log=None,
                 seed_traces: Sequence[Trace] = (), context: MeasureContext | None = None):
        config = config if config is not None else SearchConfig()
        context = context if context is not None else MeasureContext()
        for name, obj, kind in (("space", space, DesignSpace),
                                ("strategy", strategy, SearchStrategy),
                                ("cost_model", cost_model, CostModel),
                                ("builder", builder, Builder), ("runner", runner, Runner),
                                ("database", database, RecordStore),
                                ("config", config, SearchConfig),
                                ("context", context, MeasureContext)):
            if not isinstance(obj, kind):
                raise SearchError(f"TuningLoop: {name} must be a {kind.__name__}, got "
                                  f"{type(obj).__name__}")
        self.config = config
        self.space = space
        self.strategy = strategy
        self.model = cost_model
        self.builder = builder
        self.runner = runner
        self.database = database
        self.batch_size = config.batch_size
        self.measure_config = measure_config
        self.warm_start = config.warm_start
        self.retrain_ratio = float(config.retrain_ratio)
        self.log = make_logger(log)
        self.timers = PhaseTimers()
        self.workload = Workload(space.func)
        self.target = space.target
        self.flops, self.bytes = workload_cost(space.func)
        self.pool: CandidatePool | None = None
        self.result: LoopResult | None = None
        self._trained_rows = 0
        self._pending: list[tuple[SearchCandidate, float]] = []
        # Seeds are measured first, so that a short tuning run never ends worse than the
        # schedule a build would use without a record.
        self.seed_traces = tuple(seed_traces)
        # How the task sits in its model (weights, their cache state, fresh activations):
        # copied into every MeasureInput, so candidates are timed as the model runs them.
        self.context = context
        self._seeds: list[SearchCandidate] = []
        self._signatures: list[tuple] | None = None  # per sketch, once adopt needs them
        self._start = 0.0
        self._batches = 0
        self._predictions: list[tuple[np.ndarray, np.ndarray, int]] = []

    def propose(self, count: int) -> list[SearchCandidate]:
        """The next candidates: the seed traces not measured yet, then the strategy's."""
        seeds = [c for c in self._seeds if self.pool.is_new(c)][:count]
        self._seeds = [c for c in self._seeds if c not in seeds and self.pool.is_new(c)]
        rest = count - len(seeds)
        return seeds + (list(self.strategy.propose(rest)) if rest > 0 else [])

    def adopt(self, trace: Trace, origin: str = "sibling", fit: bool = False) -> int | None:
        """Queue another workload's program, a decided ``trace`` (e.g. a sibling task's best),
        to be measured first: its decisions carried whole into each sketch of this space with
        the same sampling signature (search.mutators.transplant), so a convolution takes the
        tiling of one with the same loops and another epilogue.  Returns how many new
        programs were queued (0: all measured or queued already); None when nothing here
        takes the decisions (no sketch has the signature, or every replay is rejected: loops
        of other extents), which no other trace of that signature will change.

        ``fit``: where no replay of the decisions as they are is valid, replay them with
        their tiles fitted to this workload's loop extents (sampling.fit_perfect_tile), so
        that a stride-2 convolution takes the tiling of a stride-1 one with twice the input
        channels.  None then only when the fitted replays are rejected too."""
        if self.result is None:
            self.start()
        sketches = self._sketches_taking(trace)
        valid, queued = False, 0
        with self.timers.phase("search"):
            for fitted in (False, True) if fit else (False,):
                for sketch in sketches:
                    # A fixed seed: a tile that cannot be fitted is drawn, reproducibly.
                    sc = self.pool.replay(transplant(trace, sketch), origin=origin,
                                          seed=0 if fitted else None, fit_tiles=fitted)
                    if sc is None:
                        continue
                    valid = True
                    if self.pool.is_new(sc) and all(sc is not c for c in self._seeds):
                        self._seeds.append(sc)
                        queued += 1
                if valid:
                    break
        return queued if valid else None

    def takes(self, trace: Trace) -> bool:
        """Whether a sketch of this space has the sampling signature of ``trace`` (another
        workload's program), so that adopt can carry its decisions."""
        return bool(self._sketches_taking(trace))

    def _sketches_taking(self, trace: Trace) -> list[Trace]:
        if self._signatures is None:
            self._signatures = [sampling_signature(sk) for sk in self.space.sketches]
        wanted = sampling_signature(trace)
        return [sk for sk, signature in zip(self.space.sketches, self._signatures)
                if signature == wanted]

    def measure_input(self, func: PrimFunc) -> MeasureInput:
        """A candidate program of this loop as the builder and runner take it."""
        return self.context.measure_input(func, self.target, self.workload.key,
                                          reference=self.space.func)

    # -- the run -------------------------------------------------------------------------------
    def start(self) -> LoopResult:
        """Begin a run: read the database (see the module text) and reset the run's result.
        :meth:`step` starts the loop itself when needed; :meth:`run` always starts afresh."""
        self._start = time.perf_counter()
        key = self.database.commit_workload(self.workload)
        self.result = LoopResult(key, str(self.target), flops=self.flops, bytes=self.bytes)
        self._batches = 0
        self._predictions = []
        elites = self._resume(key, self.result)
        best = min(elites, key=lambda c: c.seconds, default=None)
        self.result.best = best
        self.result.best_seconds = best.seconds if best is not None else math.inf
        return self.result

    def step(self, count: int | None = None) -> list[tuple[TrialResult, MeasureResult]]:
        """Measure one batch of up to ``count`` new candidates (default ``batch_size``):
        propose, score (held-out predictions), build and run, record in one transaction,
        notify the strategy, retrain when enough new data came in.  Returns a (trial, result)
        pair per candidate, empty when the design space gave nothing new (the run's result
        is then marked ``exhausted``)."""
        if self.result is None:
            self.start()
        count = self.batch_size if count is None else count
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise SearchError(f"step: count must be a positive int, got {count!r}")
        result, key = self.result, self.result.workload_key
        # 1. Propose (search), 2. score before measuring (held-out predictions).
        batch = self._claimed_batch(count)
        if not batch:
            result.exhausted = True
            return []
        scores = self.pool.score(self.model, batch)
        # Held-out predictions count once the model has learned something: from this run, or
        # before it (a pre-trained model is judged from the first batch).
        informed = bool(self._trained_rows) or self.model.is_trained
        # 3. Build and run.
        measured = self._measure(batch)
        result.kernel_seconds += sum(r.kernel_seconds for r in measured)
        # 4. Record, one transaction.
        with self.timers.phase("db"):
            self.database.commit_records([
                r.to_record(key, self.target, c.final_trace, self.measure_config)
                for c, r in zip(batch, measured)])
        seconds = [math.inf if r.is_error else float(r.median) for r in measured]
        for c, s in zip(batch, seconds):
            self.pool.mark_measured(c, s)
        self.strategy.notify(batch, seconds)
        if informed:
            self._predictions.append((scores, np.asarray(seconds), self._batches))
        # 5. Retrain (deferred; see the module text).
        self._pending.extend(zip(batch, seconds))
        if len(self._pending) >= max(len(batch), self.retrain_ratio * self._trained_rows):
            self._retrain()
        elapsed = time.perf_counter() - self._start
        out = []
        best = result.best
        for c, r, s in zip(batch, measured, seconds):
            if math.isfinite(s) and (best is None or s < best.seconds):
                best = c
            trial = TrialResult(len(result.trials) + 1, s, r.error_kind, c.origin, c.predicted,
                                best.seconds if best is not None else math.inf, elapsed,
                                c.trace_hash, c.program_hash)
            result.trials.append(trial)
            out.append((trial, r))
        self._batches += 1
        result.best = best
        result.best_seconds = best.seconds if best is not None else math.inf
        result.wall_seconds = elapsed
        return out

    def run(self, trials: int, *, top_up: bool = False) -> LoopResult:
        """Measure up to ``trials`` new candidates (fewer when the space is exhausted).

        With ``top_up=True``, ``trials`` is the workload's total budget on this target
        instead: the distinct candidates the database already holds for it (measured on
        this hardware, errors included: ``LoopResult.skipped_known``) count toward it, and
        only the rest are measured -- none once the budget is met.  A run killed and started
        again with the same budget thus ends with as many stored candidates as one that was
        never interrupted."""
        if not isinstance(trials, int) or isinstance(trials, bool) or trials < 0:
            raise SearchError(f"trials must be an int >= 0, got {trials!r}")
        result = self.start()
        # Progress lines count toward the budget what was stored before when topping up.
        stored = result.skipped_known if top_up else 0
        budget = max(0, trials - stored)
        while len(result.trials) < budget:
            measured = self.step(min(self.batch_size, budget - len(result.trials)))
            if not measured:
                self.log(f"[tune {self.workload.name}] the design space gave no new candidate; "
                         f"stopping after {len(result.trials)} trials")
                break
            self._log_progress(result, [r for _, r in measured], trials, stored)
        if self._pending:
            self._retrain()
        result.wall_seconds = time.perf_counter() - self._start
        result.phase_seconds = self.timers.as_dict()
        result.phase_seconds["kernel"] = result.kernel_seconds
        if self._predictions:
            s = np.concatenate([p[0] for p in self._predictions])
            t = np.concatenate([p[1] for p in self._predictions])
            g = np.concatenate([[p[2]] * len(p[0]) for p in self._predictions])
            result.model_accuracy = pairwise_accuracy(s, t, g.astype(str))
        return result

    def _resume(self, key: str, result: LoopResult) -> list[SearchCandidate]:
        """Read the database: exclude measured traces, replay the best records as elites,
        train the model on them, seed the runner's best."""
        with self.timers.phase("warm_start"):
            measured = self.database.measured_hashes(key, self.target)
            self.pool = CandidatePool(self.space, key, measured, self.timers)
            elites: list[SearchCandidate] = []
            records = self.database.best_k(key, self.target, self.warm_start) \
                if self.warm_start and measured else []
            for rec in records:
                try:
                    sc = self.pool.replay(rec.trace(), origin="database")
                except Exception as err:  # noqa: BLE001 - a damaged record is skipped, said so
                    self.database.skip_unusable(rec, f"{type(err).__name__}: {err}")
                    continue
                if sc is None or sc.seconds is not None:
                    continue  # no longer valid in this library version, or a duplicate
                seconds = rec.score if rec.score is not None else rec.median
                self.pool.mark_measured(sc, seconds)
                elites.append(sc)
            result.resumed_records = len(elites)
            result.skipped_known = len(measured)
            if elites:
                self._pending.extend((c, c.seconds) for c in elites)
                self._retrain()
                self.runner.seed_best(key, min(c.seconds for c in elites))
        self.strategy.initialize(self.pool, self.model, elites)
        for trace in self.seed_traces:
            sc = self.pool.replay(trace, origin="seed")
            if sc is not None and self.pool.is_new(sc):
                self._seeds.append(sc)
        if elites:
            self.log(f"[tune {self.workload.name}] resuming: {len(measured)} candidates "
                     f"measured before are skipped; best of {len(elites)} stored: "
                     f"{self._perf(min(c.seconds for c in elites))}")
        return elites

    def _claimed_batch(self, count: int, tries: int = 4) -> list[SearchCandidate]:
        """Up to ``count`` new candidates, claimed in the database for this run
        (``RecordStore.claim``): what another process tuning the same workload into the same
        file is measuring, or has measured, is set aside and the strategy proposes again."""
        for _ in range(tries):
            t0, p0 = time.perf_counter(), self.timers["predict"]
            batch = self._checked_batch(self.propose(count), count)
            self.timers.add("search", time.perf_counter() - t0 - (self.timers["predict"] - p0))
            if not batch:
                return []
            with self.timers.phase("db"):
                granted = self.database.claim(self.workload.key, self.target,
                                              [c.trace_hash for c in batch])
            for c in batch:
                if c.trace_hash not in granted:
                    self.pool.mark_taken(c)
            batch = [c for c in batch if c.trace_hash in granted]
            if batch:
                return batch
        return []

    def _checked_batch(self, batch: Sequence[SearchCandidate], count: int
                       ) -> list[SearchCandidate]:
        """The strategy's batch, with the guarantees the loop relies on enforced."""
        if len(batch) > count:
            raise SearchError(f"{type(self.strategy).__name__} proposed {len(batch)} "
                              f"candidates for a batch of {count}")
        out, seen = [], set()
        for c in batch:
            if not isinstance(c, SearchCandidate):
                raise SearchError(f"{type(self.strategy).__name__} proposed a "
                                  f"{type(c).__name__}, not a SearchCandidate")
            if self.pool.is_new(c) and c.program_hash not in seen:
                seen.add(c.program_hash)
                out.append(c)
        return out

    def _measure(self, batch: Sequence[SearchCandidate]) -> list[MeasureResult]:
        inputs = [self.measure_input(c.func) for c in batch]
        with contextlib.ExitStack() as stack:
            with self.timers.phase("build"):
                builds = stack.enter_context(built(self.builder, inputs))
            with self.timers.phase("run"):
                results = self.runner.run(inputs, builds)
        if len(results) != len(batch):
            raise SearchError(f"the runner returned {len(results)} results for "
                              f"{len(batch)} candidates")
        return results

    def _retrain(self) -> None:
        if not self._pending:
            return
        cands = [c for c, _ in self._pending]
        seconds = [s for _, s in self._pending]
        with self.timers.phase("retrain"):
            self.model.update(self.pool.model_candidates(cands), seconds)
        self._trained_rows += len(cands)
        self._pending = []

    # -- judging the cost model ----------------------------------------------------------------
    def heldout_accuracy(self, count: int = 48, seed: int = 0) -> dict:
        """The cost model's pairwise ranking accuracy on ``count`` fresh random programs of the
        space that it has never seen (none measured in this run or stored before), measured
        now with the loop's builder and runner and kept out of the database and out of the
        model's training data.  Call it after :meth:`run`; returns ``accuracy`` (NaN when
        fewer than two candidates could be timed), ``candidates`` (measured without error)
        and ``trained_on`` (rows the model was trained on)."""
        if not isinstance(count, int) or count < 2:
            raise SearchError(f"heldout_accuracy: count must be an int >= 2, got {count!r}")
        if self.pool is None:
            raise SearchError("heldout_accuracy: run() the loop first (the model is untrained)")
        cands = self.pool.sample_new(random.Random(seed), count, origin="heldout")
        if len(cands) < 2:
            return {"accuracy": math.nan, "candidates": len(cands),
                    "trained_on": self._trained_rows}
        scores = np.asarray(self.model.predict(self.pool.features(cands)), dtype=np.float64)
        results = self._measure(cands)
        times = np.array([math.inf if r.is_error else float(r.median) for r in results])
        return {"accuracy": pairwise_accuracy(scores, times),
                "candidates": int(np.isfinite(times).sum()), "trained_on": self._trained_rows}

    # -- re-measuring the best -----------------------------------------------------------------
    def remeasure_top(self, k: int = 3, rounds: int = 3, max_passes: int = 4,
                      keep_going=None) -> list[dict]:
        """Re-time the ``k`` best records of the workload ``rounds`` times, interleaved (each
        round runs every candidate once, in turn, so a change in machine load hits them
        alike), and store each one's re-measurement; the database's ranking score becomes the
        median of all its runs.  When that demotes them all below a record that was never
        re-measured, the next ones are re-measured too, beside the best re-measured one: the
        records not yet re-measured among the best ``2 k``, then ``4 k`` (up to
        ``max_passes`` passes), so the best reported has been re-measured.

        NOTE: the groups grow because the first times of a task's best records are not
        independent draws: a tuning run's candidates are timed over half an hour on a host
        whose speed drifts, and its best few are mostly those timed in its fastest minutes.
        On a 2-core Xeon VM, 7 of ResNet-18's 30 tasks, the heaviest among them, reported a
        best never re-measured after three passes of 3: their re-measured records had risen
        by a median 13-47% over their first times, and 19-36 records still sat between the
        top and the best re-measured one in five of them.  The estimate summed to 15.1 ms
        against 18.2 ms for the same records re-timed an hour later.
        ``keep_going``: None, or a callable asked before each pass after the first; when it
        returns false (a deadline has passed, the run was asked to stop) no further pass is
        started, and the best reported may then be a record never re-measured.
        Returns per record (latest pass): ``record_id``, ``before`` (its score before),
        ``after``, ``spread`` ((max - min) / median of the new runs), ``runs``."""
        for name, value in (("k", k), ("rounds", rounds), ("max_passes", max_passes)):
            if not isinstance(value, int) or value < 0:
                raise SearchError(f"remeasure_top: {name} must be an int >= 0, got {value!r}")
        if k == 0 or rounds == 0 or max_passes == 0:
            return []
        key = self.workload.key
        done: dict[int, dict] = {}
        attempted: set[int] = set()
        champion = None  # the best re-measured record so far
        with self.timers.phase("remeasure"):
            for pass_no in range(max_passes):
                top = self.database.best_k(key, self.target, k << pass_no)
                if not top or (pass_no and top[0].record_id in attempted):
                    break
                if pass_no and keep_going is not None and not keep_going():
                    self.log(f"[tune {self.workload.name}] re-measuring stopped after "
                             f"{pass_no} passes ({len(attempted)} records), out of time: "
                             f"the best stored may be a record not re-measured")
                    break
                group = [r for r in top if r.record_id not in attempted]
                if champion is not None:
                    group.append(champion)
                attempted.update(r.record_id for r in group)
                for entry in self._remeasure_group(group, rounds):
                    done[entry["record_id"]] = entry
                ranked = self.database.best_k(key, self.target, k + len(attempted))
                champion = next((r for r in ranked if r.record_id in done), None)
        out = sorted(done.values(), key=lambda d: d["after"])
        if out:
            best = out[0]
            self.log(f"[tune {self.workload.name}] re-measured the top {len(out)} "
                     f"({rounds} interleaved rounds): best {self._perf(best['after'])}, "
                     f"spread {100 * best['spread']:.1f}%")
        return out

    def _remeasure_group(self, records, rounds: int) -> list[dict]:
        funcs, kept = [], []
        for rec in records:
            try:
                funcs.append(replay(rec.trace(), self.space.func, self.target).func)
                kept.append(rec)
            except Exception as err:  # noqa: BLE001 - a stale record is skipped, said so
                self.database.skip_unusable(rec, f"{type(err).__name__}: {err}")
        if not kept:
            return []
        inputs = [self.measure_input(f) for f in funcs]
        samples: list[list[float]] = [[] for _ in kept]
        failed: list[str | None] = [None] * len(kept)
        kernel = 0.0
        with built(self.builder, inputs) as builds:
            for _ in range(rounds):
                for i, r in enumerate(self.runner.run(inputs, builds)):
                    kernel += r.kernel_seconds
                    if r.is_error:
                        failed[i] = failed[i] or f"{r.error_kind}: {r.error_msg}"
                    else:
                        samples[i].extend(r.run_times)
        self.timers.add("kernel_remeasure", kernel)
        out = []
        for rec, times, why in zip(kept, samples, failed):
            before = rec.score if rec.score is not None else rec.median
            if not times:
                self.log(f"[tune {self.workload.name}] re-measuring record "
                         f"{rec.record_id} failed ({why}); its score stays")
                continue
            after = self.database.update_best_remeasure(rec.record_id, times,
                                                        self.measure_config)
            spread = (max(times) - min(times)) / statistics.median(times)
            out.append({"record_id": rec.record_id, "before": before, "after": after,
                        "spread": spread, "runs": len(times)})
        return out

    # -- reporting -----------------------------------------------------------------------------
    def _perf(self, seconds: float) -> str:
        if not math.isfinite(seconds):
            return "none"
        if self.flops > 0:
            return f"{self.flops / seconds / 1e9:.2f} GFLOPS ({seconds * 1e3:.3f} ms)"
        return f"{seconds * 1e3:.3f} ms"

    def _log_progress(self, result: LoopResult, measured: Sequence[MeasureResult], trials: int,
                      stored: int = 0) -> None:
        phases = self.timers.as_dict()
        names = ("search", "predict", "build", "run", "db", "retrain")
        shown = "  ".join(f"{n} {phases.get(n, 0.0):.1f}s" for n in names)
        errors = sum(1 for r in measured if r.is_error)
        done = stored + len(result.trials)
        self.log(f"[tune {self.workload.name}] trials {done}/{trials}  best "
                 f"{self._perf(result.best_seconds)}  batch: "
                 f"{len(measured) - errors} ok, {errors} errors  |  {shown}  |  outside kernels "
                 f"{100 * result.overhead_share:.0f}% of {result.wall_seconds:.1f}s")
