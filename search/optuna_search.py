"""OptunaSearch: the sampling decisions of the design space searched by an Optuna sampler.

Each sketch of the design space has a fixed sequence of sampling instructions; every one of
them becomes an Optuna parameter over the decisions it can legally take:

    sample_perfect_tile      the factorizations of the loop's extent into ``n`` factors that
                             respect ``max_innermost_factor`` (and the inner budget's bound)
    sample_categorical       the candidates with a non-zero probability (unroll steps,
                             parallel extents, ...)
    sample_compute_location  root, inline where legal, and the legal loops

and the sketch itself is one more categorical parameter ("sketch").  The domains are read once
per run from a few random programs of each sketch (a tile's extent is the product of its
sampled factors; a block's compute locations are listed on the schedule just before the
instruction).  A tile's domain is exactly its sampler's; a block's locations are the union
over the samples read (a location legal only under tiles none of them drew is not offered; one
that the tiles of a trial make illegal fails that trial).  A parameter is shared
by the sketches whose decision at the same position has the same domain (sketches from the
same rules usually differ in one place only), so what one sketch teaches the sampler about the
unroll step is not lost on the others.

A batch is asked of the study one trial at a time (``study.ask`` with define-by-run
suggestions) and replayed through the run's :class:`~search.pool.CandidatePool`:

* a combination the space refuses (a tile over the inner budget, a location the tiles made
  illegal) is told as a failed trial, and the next one is asked;
* a program measured before is told its known time without being measured again (a failed
  trial when only the database this run resumed from knows it, without its time, or when its
  measurement was an error);
* a program already in this batch waits and is told the same time as its twin;
* a new program goes into the batch and its trial is told the measured median (a measurement
  error: a failed trial) when the loop calls :meth:`notify`.

The loop's other candidates (seed schedules, the best records of the database a run resumes
from) are added to the study as completed trials, so the sampler starts from what is known.
When the sampler keeps proposing known programs (``max_failures`` asks in a row), the batch is
filled with fresh random programs of the space, which the study also learns from.

Screening (``screen``, default 4): once the run's cost model is trained, a batch of ``count``
is chosen from ``screen * count`` new programs the sampler proposes: the cost model ranks them,
the top ``count`` are measured, and the others are told as failed trials (so the sampler learns
nothing false about them: it neither counts them good nor bad, and may propose them again).  At
a few dozen trials TPE has too few observations to model a space of tens of decisions, while
the cost model has learnt from every measurement of the run; the two together find better
programs per measurement than either the sampler alone or random sampling.  ``screen=1`` is
the plain sampler.

Samplers: "tpe" (default: Optuna's TPE, multivariate and grouped so that the decisions of one
sketch are modelled together), "random", and "cmaes" (Optuna's CMA-ES over the decisions
common to every trial, with TPE for the rest; it needs the ``cmaes`` package, and parameters
are then encoded as indices into their ordered domains instead of categories).  Any
``optuna.samplers.BaseSampler`` instance may be given instead.  Everything is seeded from the
strategy's seed: a fixed seed and a deterministic runner give the same search.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schedules.errors import ScheduleError
from schedules.handles import BlockRV
from schedules.sampling import compute_location_candidates, sample_perfect_tile
from schedules.space import DesignSpace
from schedules.trace import Trace
from tensor_ir.errors import TensorIRError

from .pool import CandidatePool, SearchCandidate
from .strategy import SearchError, SearchStrategy, register

__all__ = ["SAMPLERS", "OptunaSearch"]

SAMPLERS = ("tpe", "random", "cmaes")
ENCODINGS = ("categorical", "ordinal")

# Above this many legal factorizations a tile's domain would dwarf any trial budget; such a
# loop gets no parameter, its factors are drawn by the space's own tile sampler from the
# strategy's generator (see _Decision.free).
MAX_TILE_CHOICES = 4096


@dataclass
class _Decision:
    """One sampling instruction of one sketch as an Optuna parameter.

    ``choices``: the legal decisions in a fixed order (tiles as factor tuples, categorical
    and location decisions as ints); ``labels``: the same as Optuna category values;
    ``free``: no parameter (a tile domain too large to list): the factors are sampled from
    the strategy's generator, for one of the loop's ``extents`` seen."""

    index: int
    kind: str
    name: str
    choices: list
    labels: list
    free: bool = False
    extents: tuple = ()


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _factorizations(extent: int, n: int, bound: int, inner_budget: int | None,
                    inner_levels: int) -> list[tuple[int, ...]] | None:
    """Ordered ``n``-tuples of positive ints multiplying to ``extent``, innermost at most
    ``bound`` (-1: none), the ``inner_levels`` innermost within ``inner_budget`` when given;
    None when there are more than MAX_TILE_CHOICES.  Sorted innermost factor first, so that
    neighbours in the order share their inner tiles (what the ordinal encoding relies on)."""
    out: list[tuple[int, ...]] = []

    def legal(f: tuple[int, ...]) -> bool:
        if bound != -1 and f[-1] > bound:
            return False
        return inner_budget is None or not inner_levels or \
            math.prod(f[n - inner_levels:]) <= inner_budget

    def extend(prefix: tuple[int, ...], rest: int, levels: int) -> bool:
        if levels == 1:
            f = prefix + (rest,)
            if legal(f):
                out.append(f)
            return len(out) <= MAX_TILE_CHOICES
        return all(extend(prefix + (d,), rest // d, levels - 1) for d in _divisors(rest))

    if not extend((), extent, n):
        return None
    out.sort(key=lambda f: tuple(reversed(f)))
    return out


class OptunaSearch(SearchStrategy):
    """Options (keywords): ``seed``; ``sampler``: "tpe" (default), "random", "cmaes" or an
    ``optuna.samplers.BaseSampler``; ``encoding``: "categorical" (default, except for
    CMA-ES) or "ordinal" (an int index into each ordered domain); ``n_startup_trials``:
    trials TPE draws at random before modelling (default 10); ``max_failures``: asks in a row
    that give nothing new before a batch is filled with random programs; ``discovery_samples``:
    random programs per sketch read to list the domains; ``screen``: programs asked per
    measured one once the cost model is trained (1: no screening; see the module's notes)."""

    kind = "optuna"

    def __init__(self, seed: int = 0, sampler: Any = "tpe", encoding: str | None = None,
                 n_startup_trials: int = 10, max_failures: int = 64,
                 discovery_samples: int = 8, screen: int = 4):
        super().__init__(seed)
        import optuna  # a dependency of record, imported here to keep `import search` fast

        self._optuna = optuna
        if isinstance(sampler, str):
            if sampler not in SAMPLERS:
                raise SearchError(f"OptunaSearch: sampler must be one of {', '.join(SAMPLERS)} "
                                  f"or an optuna sampler, got {sampler!r}")
        elif not isinstance(sampler, optuna.samplers.BaseSampler):
            raise SearchError(f"OptunaSearch: sampler must be one of {', '.join(SAMPLERS)} or "
                              f"an optuna.samplers.BaseSampler, got {type(sampler).__name__}")
        if encoding is None:
            # CMA-ES models numbers only: categories would all go to its fallback sampler.
            encoding = "ordinal" if sampler == "cmaes" else "categorical"
        if encoding not in ENCODINGS:
            raise SearchError(f"OptunaSearch: encoding must be one of {', '.join(ENCODINGS)}, "
                              f"got {encoding!r}")
        for name, value in (("n_startup_trials", n_startup_trials),
                            ("max_failures", max_failures),
                            ("discovery_samples", discovery_samples), ("screen", screen)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SearchError(f"OptunaSearch: {name} must be a positive int, got {value!r}")
        if sampler == "cmaes":
            try:
                import cmaes  # noqa: F401 - Optuna's CMA-ES sampler is built on it
            except ImportError:
                raise SearchError("OptunaSearch: sampler 'cmaes' needs the cmaes package "
                                  "(pip install cmaes)") from None
        self.sampler_option = sampler
        self.encoding = encoding
        self.n_startup_trials = n_startup_trials
        self.max_failures = max_failures
        self.discovery_samples = discovery_samples
        self.screen = screen
        self.study = None
        self.sketches: list[int] = []               # sketch indices the study may choose
        self.decisions: dict[int, list[_Decision]] = {}
        self._distributions: dict[str, Any] = {}    # parameter name -> distribution
        self._pending: dict[str, list[Any]] = {}    # program hash -> trials awaiting its time
        self.stats = {"asked": 0, "invalid": 0, "known": 0, "twins": 0, "random_fill": 0,
                      "added": 0, "screened_out": 0}

    # -- setup ---------------------------------------------------------------------------------
    def initialize(self, pool: CandidatePool, cost_model, elites: Sequence[SearchCandidate] = ()
                   ) -> None:
        super().initialize(pool, cost_model, elites)
        self._pending = {}
        self.stats = dict.fromkeys(self.stats, 0)
        self._discover(pool.space)
        with self._quiet():
            self.study = self._optuna.create_study(direction="minimize",
                                                   sampler=self._make_sampler())
        for c in self.measured:
            self._add_known(c, c.seconds)

    def _make_sampler(self):
        optuna = self._optuna
        if not isinstance(self.sampler_option, str):
            return self.sampler_option
        if self.sampler_option == "random":
            return optuna.samplers.RandomSampler(seed=self.seed)
        with warnings.catch_warnings():
            # multivariate / group / constant_liar are marked experimental in Optuna 3.x.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            tpe = optuna.samplers.TPESampler(
                seed=self.seed, n_startup_trials=self.n_startup_trials, multivariate=True,
                group=True, constant_liar=True)
            if self.sampler_option == "tpe":
                return tpe
            return optuna.samplers.CmaEsSampler(
                seed=self.seed, n_startup_trials=self.n_startup_trials, independent_sampler=tpe,
                warn_independent_sampling=False)

    @contextlib.contextmanager
    def _quiet(self):
        """Optuna logs every trial at INFO, and at WARNING each parameter a multivariate
        sampler leaves to its independent one (routine in a space of several sketches); a
        tuning run has its own progress lines."""
        logger = logging.getLogger("optuna")
        level = logger.level
        if level < logging.ERROR:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            logger.setLevel(level)

    def _discover(self, space: DesignSpace) -> None:
        """The domain of every sampling decision of every sketch (see the module text)."""
        rng = random.Random(self.seed)
        self.sketches, self.decisions, self._distributions = [], {}, {}
        failures = []
        for k, sketch in enumerate(space.sketches):
            samples = []
            for _ in range(self.discovery_samples):
                try:
                    samples.append(space.sample(rng, sketch=k).trace)
                except (ScheduleError, TensorIRError) as err:
                    failures.append(f"sketch {k}: {err}")
                    break
            if not samples:
                continue  # the space never yields a program of this sketch
            decisions = []
            for j, index in enumerate(sketch.sampling_indices()):
                decision = self._domain(space, sketch, index, samples)
                self._name(decision, j, k)
                decisions.append(decision)
            self.sketches.append(k)
            self.decisions[k] = decisions
        if not self.sketches:
            raise SearchError(f"OptunaSearch: no sketch of {space.func.name} gives a valid "
                              f"program; {failures[0] if failures else 'the space is empty'}")
        self._distributions["sketch"] = self._distribution(self.sketches)

    def _domain(self, space: DesignSpace, sketch: Trace, index: int,
                samples: list[Trace]) -> _Decision:
        inst = sketch[index]
        attrs = dict(inst.attrs)
        if inst.kind == "sample_perfect_tile":
            n = int(attrs["n"])
            bound = int(attrs.get("max_innermost_factor", 16))
            budget = attrs.get("inner_budget")
            levels = int(attrs.get("inner_levels", 1))
            extents = sorted({math.prod(t[index].decision) for t in samples})
            choices: list = []
            free = False
            for extent in extents:
                found = _factorizations(extent, n, bound, budget, levels)
                if found is None:
                    free = True
                    break
                choices.extend(found)
            choices = sorted(set(choices), key=lambda f: tuple(reversed(f)))
            free = free or len(choices) > MAX_TILE_CHOICES or not choices
            return _Decision(index, "tile", "", [] if free else choices,
                             [] if free else ["x".join(map(str, f)) for f in choices], free,
                             tuple(extents))
        if inst.kind == "sample_categorical":
            probs = [float(p) for p in attrs["probs"]]
            choices = [i for i, p in enumerate(probs) if p > 0]
            values = list(attrs["candidates"])
            return _Decision(index, "categorical", "", choices, [int(values[i]) for i in choices]
                             if len({values[i] for i in choices}) == len(choices) else choices)
        if inst.kind == "sample_compute_location":
            legal: set[int] = set()
            for trace in samples:
                sch = trace.truncated(index).apply(space.func, seed=0)
                block = sch.get(BlockRV(inst.inputs[0])).name
                loops, inline = compute_location_candidates(sch.func, block)
                legal.update([-1] + ([-2] if inline else []) + list(range(len(loops))))
            choices = sorted(legal)
            return _Decision(index, "location", "", choices, list(choices))
        raise SearchError(f"OptunaSearch: sampling instruction {index} of kind {inst.kind!r} "
                          f"has no Optuna domain")

    def _distribution(self, labels: list):
        optuna = self._optuna
        if self.encoding == "ordinal":
            return optuna.distributions.IntDistribution(0, max(0, len(labels) - 1))
        return optuna.distributions.CategoricalDistribution(list(labels))

    def _name(self, decision: _Decision, position: int, sketch: int) -> None:
        """Share a parameter with earlier sketches when the domain at this position is the
        same; otherwise give it this sketch's own name."""
        if decision.free:
            return
        dist = self._distribution(decision.labels)
        name = f"{position}.{decision.kind}"
        if name in self._distributions and self._distributions[name] != dist:
            name = f"{position}.{decision.kind}@{sketch}"
        self._distributions[name] = dist
        decision.name = name

    # -- asking ----------------------------------------------------------------------------------
    def _suggest(self, trial, name: str, labels: list) -> int:
        """The position in ``labels`` the trial picks for parameter ``name``."""
        if self.encoding == "ordinal":
            return trial.suggest_int(name, 0, len(labels) - 1)
        return labels.index(trial.suggest_categorical(name, labels))

    def _ask(self) -> tuple[Any, Trace | None]:
        """A new trial and its decided trace; None for the trace when a decision without a
        parameter could not be drawn (the trial is then invalid)."""
        trial = self.study.ask()
        self.stats["asked"] += 1
        sketch_labels = list(self.sketches)
        k = sketch_labels[self._suggest(trial, "sketch", sketch_labels)]
        trace = self.pool.space.sketches[k]
        for d in self.decisions[k]:
            if d.free:
                choice = self._free_tile(trace, d)
            else:
                choice = d.choices[self._suggest(trial, d.name, d.labels)]
            if choice is None:
                return trial, None
            trace = trace.with_decision(d.index, list(choice) if d.kind == "tile" else choice)
        return trial, trace

    def _free_tile(self, sketch: Trace, d: _Decision) -> list[int] | None:
        attrs = dict(sketch[d.index].attrs)
        budget = attrs.get("inner_budget")
        try:
            return sample_perfect_tile(self.rng, self.rng.choice(d.extents), int(attrs["n"]),
                                       int(attrs.get("max_innermost_factor", 16)),
                                       inner_budget=budget,
                                       inner_levels=int(attrs.get("inner_levels", 1)))
        except ScheduleError:
            return None

    def _params(self, cand: SearchCandidate) -> dict[str, Any] | None:
        """The study's parameters of a decided program, None when a decision is outside the
        domains (a program of a hand-written trace, or a sketch the study does not choose)."""
        k = cand.candidate.sketch
        if k not in self.decisions:
            k = self.pool.space.sketch_of(cand.trace)
            if k not in self.decisions:
                return None
        trace = cand.trace
        params = {"sketch": self._encode(self.sketches, k)}
        for d in self.decisions[k]:
            if d.free:
                continue
            value = trace[d.index].decision if d.index < len(trace) else None
            if d.kind == "tile":
                value = tuple(value) if value is not None else None
            if value not in d.choices:
                return None
            params[d.name] = self._encode(d.labels, d.labels[d.choices.index(value)])
        return params

    def _encode(self, labels: list, label):
        return labels.index(label) if self.encoding == "ordinal" else label

    def _add_known(self, cand: SearchCandidate, seconds: float | None) -> None:
        """Tell the study about a program it did not propose, measured ``seconds``."""
        if seconds is None or not math.isfinite(seconds):
            return  # an error teaches the sampler nothing it can use
        params = self._params(cand)
        if params is None:
            return
        optuna = self._optuna
        trial = optuna.trial.create_trial(
            params=params, distributions={name: self._distributions[name] for name in params},
            value=float(seconds))
        with self._quiet():
            self.study.add_trial(trial)
        self.stats["added"] += 1

    def _tell(self, trial, seconds: float | None) -> None:
        state = self._optuna.trial.TrialState
        with self._quiet():
            if seconds is None or not math.isfinite(seconds):
                self.study.tell(trial, state=state.FAIL)
            else:
                self.study.tell(trial, float(seconds))

    def propose(self, count: int) -> list[SearchCandidate]:
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SearchError(f"propose: count must be an int >= 0, got {count!r}")
        pool = self._require_pool()
        if self.study is None:
            raise SearchError("OptunaSearch.propose called before initialize()")
        # Trials of an earlier batch that was never notified (the loop set it aside) will
        # not be measured by this run: failed, so the sampler stops counting them as running.
        for trials in self._pending.values():
            for trial in trials:
                self._tell(trial, None)
        self._pending = {}
        batch: list[SearchCandidate] = []
        twins: list[tuple[Any, str]] = []
        failures = 0
        screening = self.screen > 1 and self.model.is_trained  # set by initialize()
        wanted = count * self.screen if screening else count
        while len(batch) < wanted and failures < self.max_failures:
            with self._quiet():
                trial, trace = self._ask()
            cand = pool.replay(trace, origin="optuna") if trace is not None else None
            if cand is None:
                self.stats["invalid"] += 1
                self._tell(trial, None)
                failures += 1
                continue
            if cand.program_hash in self._pending:
                # The same program as one in this batch: its time will answer both.
                self.stats["twins"] += 1
                twins.append((trial, cand.program_hash))
                failures += 1
                continue
            if not pool.is_new(cand):
                self.stats["known"] += 1
                self._tell(trial, cand.seconds)
                failures += 1
                continue
            failures = 0
            if cand.origin != "random":
                cand.origin = "optuna"
            self._pending[cand.program_hash] = [trial]
            batch.append(cand)
        for trial, program in twins:
            self._pending[program].append(trial)
        if screening and len(batch) > count:
            batch = self._screen(pool, batch, count)
        if len(batch) < count:
            # The sampler keeps to known ground: fresh random programs fill the batch (the
            # study learns them on notify, as programs it did not propose).
            fill = self._random_new(count - len(batch), set(self._pending), self.max_failures)
            for c in fill:
                c.origin = "random"
            self.stats["random_fill"] += len(fill)
            batch.extend(fill)
        return batch

    def _screen(self, pool: CandidatePool, batch: list[SearchCandidate],
                count: int) -> list[SearchCandidate]:
        """The ``count`` programs of ``batch`` the cost model ranks fastest (ties keep the
        sampler's order); the others' trials are told as failed: not measured."""
        scores = pool.score(self.model, batch)
        order = sorted(range(len(batch)), key=lambda i: (-scores[i], i))
        keep = sorted(order[:count])
        for i in order[count:]:
            for trial in self._pending.pop(batch[i].program_hash):
                self._tell(trial, None)
            self.stats["screened_out"] += 1
        return [batch[i] for i in keep]

    def notify(self, candidates: Sequence[SearchCandidate], seconds: Sequence[float]) -> None:
        super().notify(candidates, seconds)
        for cand, s in zip(candidates, seconds):
            trials = self._pending.pop(cand.program_hash, None)
            if trials is None:
                self._add_known(cand, s)
                continue
            for trial in trials:
                self._tell(trial, s)

    # -- reading ---------------------------------------------------------------------------------
    def parameters(self) -> dict[str, list]:
        """The study's parameters and their domains (labels), for inspection."""
        out: dict[str, list] = {"sketch": list(self.sketches)}
        for k in self.sketches:
            for d in self.decisions[k]:
                if not d.free:
                    out.setdefault(d.name, list(d.labels))
        return out


register("optuna", OptunaSearch)
