"""CandidatePool: replayed candidates with their identities, features and scores, cached.

Every strategy works through one pool per tuning run:

    pool = CandidatePool(space, workload_key, measured_traces=db.measured_hashes(key, target))
    cand = pool.sample(rng)                 # a fresh random program (None: none found)
    child = pool.replay(mutated_trace)      # a mutated program (None: the trace is invalid)
    pool.is_new(cand)                       # never measured, here or in the database
    scores = pool.score(model, cands)       # predicted, features computed once per program

A :class:`SearchCandidate` carries two identities.  ``program_hash`` is the structural hash of
the final scheduled function: two traces that differ only in a decision with no effect on the
program (a parallel extent the post-processor clamps, say) share it, so search never measures
the same program twice.  ``trace_hash`` is the hash of the final trace as the database stores
it (``records.trace_hash``): what a resumed run reads back to skip candidates measured before.

Replays are the tuner's dominant cost in Python, so they are cached by the decided trace's text
(a mutation that lands on a program seen before costs a dictionary look-up), and features are
cached per program hash (a candidate is featurised once, however often it is re-scored after a
retrain).  Time spent on features and predictions is added to ``timers`` under "predict"; the
tuning loop counts the rest of a strategy's work (sampling, replay, mutation) as "search".
"""
from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from cost_models import CostModel, ModelInput
from cost_models import features as _features
from records.record import trace_hash
from schedules.errors import ScheduleError
from schedules.space import Candidate, DesignSpace
from schedules.trace import Trace
from tensor_ir.errors import TensorIRError

__all__ = ["CandidatePool", "PhaseTimers", "SearchCandidate"]


class PhaseTimers:
    """Wall seconds per named phase, accumulated (``timers["build"]``); unknown phases read 0."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    def __getitem__(self, name: str) -> float:
        return self.seconds.get(name, 0.0)

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)


@dataclass(eq=False)
class SearchCandidate:
    """One replayed program and what search knows about it.

    ``candidate``: the schedules Candidate (``.func``, ``.trace`` decided, ``.final_trace``);
    ``origin``: how it was found ("random", "mutant", "database", ...); ``predicted``: the
    latest cost-model score (higher = faster); ``seconds``: its measured median once measured
    (math.inf for an error)."""

    candidate: Candidate
    program_hash: str
    trace_hash: str
    origin: str = "random"
    predicted: float | None = None
    seconds: float | None = None
    features: np.ndarray | None = field(default=None, repr=False)

    @property
    def func(self):
        return self.candidate.func

    @property
    def trace(self) -> Trace:
        """The decided trace (what mutators change)."""
        return self.candidate.trace

    @property
    def final_trace(self) -> Trace:
        """The trace the database stores: replays to the program without post-processing."""
        return self.candidate.final_trace

    @property
    def measured(self) -> bool:
        return self.seconds is not None


class CandidatePool:
    """Replay cache, identities, measured set and feature cache of one tuning run."""

    def __init__(self, space: DesignSpace, workload_key: str,
                 measured_traces: Iterable[str] = (), timers: PhaseTimers | None = None,
                 max_cache: int = 20000):
        self.space = space
        self.workload_key = workload_key
        self.timers = timers if timers is not None else PhaseTimers()
        # NOTE: these sets are only ever tested for membership, never iterated: string hashing
        # is randomised per process, and a fixed seed must give the same search everywhere.
        self.measured_traces: set[str] = set(measured_traces)
        self.measured_programs: set[str] = set()
        self._replays: dict[str, SearchCandidate | None] = {}
        self._by_program: dict[str, SearchCandidate] = {}
        self._features: dict[str, np.ndarray] = {}
        self.max_cache = max_cache
        self.sampled = 0
        self.replayed = 0
        self.rejected = 0

    # -- making candidates ---------------------------------------------------------------------
    def _wrap(self, cand: Candidate, origin: str) -> SearchCandidate:
        program = cand.func.structural_hash()
        known = self._by_program.get(program)
        if known is not None:
            # The same program reached by another trace: keep one object per program so a
            # measurement or a score recorded on it is seen by every path that finds it.
            return known
        sc = SearchCandidate(cand, program, trace_hash(cand.final_trace), origin)
        if len(self._by_program) < self.max_cache:
            self._by_program[program] = sc
        return sc

    def sample(self, rng: random.Random, origin: str = "random",
               weights: Sequence[float] | None = None) -> SearchCandidate | None:
        """A fresh random program of the space (its sketch drawn by ``weights`` when given),
        or None when the space gives none."""
        self.sampled += 1
        try:
            cand = self.space.sample(rng, weights=weights)
        except (ScheduleError, TensorIRError):
            self.rejected += 1
            return None
        sc = self._wrap(cand, origin)
        self._remember(cand.trace.to_text(), sc)
        return sc

    def sample_new(self, rng: random.Random, count: int, taken: set[str] | None = None,
                   max_failures: int = 64, origin: str = "random",
                   weights: Sequence[float] | None = None) -> list[SearchCandidate]:
        """Up to ``count`` fresh random programs, never measured and not in ``taken``
        (program hashes, updated).  Gives up after ``max_failures`` samples in a row that
        yield nothing new."""
        taken = set() if taken is None else taken
        out: list[SearchCandidate] = []
        failures = 0
        while len(out) < count and failures < max_failures:
            cand = self.sample(rng, origin, weights)
            if cand is None or not self.is_new(cand) or cand.program_hash in taken:
                failures += 1
                continue
            failures = 0
            taken.add(cand.program_hash)
            out.append(cand)
        return out

    def replay(self, trace: Trace, origin: str = "mutant", seed: int | None = None,
               fit_tiles: bool = False) -> SearchCandidate | None:
        """The program of a decided (possibly mutated) trace; None when a primitive or a
        verifier rejects it.  Decisions the trace lacks are drawn from ``seed`` (pass one: a
        fixed seed keeps the search reproducible).  ``fit_tiles``: tiles decided for another
        workload's loops are fitted to these (DesignSpace.replay).  Cached by the trace's
        text, seed and fitting."""
        key = trace.to_text() if seed is None else f"{trace.to_text()}#seed={seed}"
        if fit_tiles:
            key += "#fit"
        if key in self._replays:
            return self._replays[key]
        self.replayed += 1
        cand = self.space.replay(trace, seed=seed, fit_tiles=fit_tiles)
        sc = None if cand is None else self._wrap(cand, origin)
        if sc is None:
            self.rejected += 1
        self._remember(key, sc)
        return sc

    def _remember(self, key: str, sc: SearchCandidate | None) -> None:
        if len(self._replays) < self.max_cache:
            self._replays[key] = sc

    # -- identities ----------------------------------------------------------------------------
    def is_new(self, sc: SearchCandidate) -> bool:
        """Not measured before (by program, in this run; by final trace, here or in the
        database this run resumed from)."""
        return (sc.seconds is None and sc.program_hash not in self.measured_programs
                and sc.trace_hash not in self.measured_traces)

    def mark_taken(self, sc: SearchCandidate) -> None:
        """Measured, or being measured, by another process tuning into the same database:
        never proposed again here."""
        self.measured_programs.add(sc.program_hash)
        self.measured_traces.add(sc.trace_hash)

    def mark_measured(self, sc: SearchCandidate, seconds: float) -> None:
        sc.seconds = float(seconds)
        self.measured_programs.add(sc.program_hash)
        self.measured_traces.add(sc.trace_hash)

    # -- features and scores -------------------------------------------------------------------
    def features(self, cands: Sequence[SearchCandidate]) -> np.ndarray:
        """Feature rows (``[n, NUM_FEATURES]``), extracted in one batch for those not cached.
        A program that cannot be featurised gets a row of zeros (it still ranks, last)."""
        missing = [c for c in cands if c.features is None
                   and c.program_hash not in self._features]
        if missing:
            try:
                # The target decides how a GPU program is lowered and which limits its
                # occupancy features use.
                rows = _features.extract([c.func for c in missing], self.space.target)
            except _features.FeatureError:
                rows = np.stack([_safe_features(c.func, self.space.target) for c in missing])
            for c, row in zip(missing, rows):
                self._features[c.program_hash] = row
        for c in cands:
            if c.features is None:
                c.features = self._features[c.program_hash]
        if not cands:
            return np.zeros((0, _features.NUM_FEATURES), dtype=np.float32)
        return np.stack([c.features for c in cands])

    def model_candidates(self, cands: Sequence[SearchCandidate]) -> list[ModelInput]:
        """The cost model's view: features (cached) and the workload as query group."""
        x = self.features(cands)
        return [ModelInput(workload=self.workload_key, features=row) for row in x]

    def score(self, model: CostModel, cands: Sequence[SearchCandidate]) -> np.ndarray:
        """Predicted scores (higher = faster), stored on each candidate as ``predicted``."""
        if not cands:
            return np.zeros(0)
        with self.timers.phase("predict"):
            x = self.features(cands)
            scores = np.asarray(model.predict(x), dtype=np.float64)
        for c, s in zip(cands, scores):
            c.predicted = float(s)
        return scores


def _safe_features(func, target) -> np.ndarray:
    try:
        return _features.features(func, target)
    except Exception:  # noqa: BLE001 - any failure: the candidate simply ranks last
        return np.zeros(_features.NUM_FEATURES, dtype=np.float32)
