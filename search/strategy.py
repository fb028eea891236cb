"""SearchStrategy: what proposes the candidates of each measured batch, and the registry.

    strategy = search.create("evolutionary", seed=0)          # or "random", or an instance
    strategy.initialize(pool, cost_model, elites)             # once, by the tuning loop
    batch = strategy.propose(16)                              # new, unmeasured programs
    ... build, run ...
    strategy.notify(batch, seconds)                           # measured medians (inf: error)

A strategy owns its random generator (seeded at construction) and reads the cost model the
loop retrains; the loop owns building, measuring, recording and retraining.  The pool
(:class:`~search.pool.CandidatePool`) is shared: it knows what was measured, here and in the
database the run resumed from, so a strategy proposes only programs never measured before.
A custom strategy subclasses :class:`SearchStrategy` and is made available by name with
:func:`register`.
"""
from __future__ import annotations

import abc
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from cost_models import CostModel

from .pool import CandidatePool, SearchCandidate

__all__ = ["SearchError", "SearchStrategy", "create", "kinds", "register"]


class SearchError(ValueError):
    """A search strategy was misused (unknown kind, bad option, used before initialize)."""


class SearchStrategy(abc.ABC):
    """Proposes batches of candidates to measure and learns from their results.

    ``initialize`` hands over the run's pool, cost model and the best programs measured
    before (replayed database records, with ``seconds`` set); ``propose(count)`` returns at
    most ``count`` new candidates (fewer when the space seems exhausted); ``notify`` gives the
    measured medians of a batch in the same order (math.inf for errors).
    """

    kind: str = ""

    def __init__(self, seed: int = 0):
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SearchError(f"{type(self).__name__}: seed must be an int, got {seed!r}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.pool: CandidatePool | None = None
        self.model: CostModel | None = None
        self.measured: list[SearchCandidate] = []

    def initialize(self, pool: CandidatePool, cost_model: CostModel,
                   elites: Sequence[SearchCandidate] = ()) -> None:
        self.pool = pool
        self.model = cost_model
        self.measured = [c for c in elites if c.seconds is not None]

    @abc.abstractmethod
    def propose(self, count: int) -> list[SearchCandidate]:
        """Up to ``count`` distinct candidates not measured before."""

    def notify(self, candidates: Sequence[SearchCandidate], seconds: Sequence[float]) -> None:
        """Results of a measured batch (the loop has already marked them measured)."""
        if len(candidates) != len(seconds):
            raise SearchError(f"notify: {len(candidates)} candidates but {len(seconds)} "
                              f"results")
        self.measured.extend(candidates)

    # -- helpers for subclasses ----------------------------------------------------------------
    def _require_pool(self) -> CandidatePool:
        if self.pool is None:
            raise SearchError(f"{type(self).__name__}.propose called before initialize()")
        return self.pool

    def _random_new(self, count: int, taken: set[str], max_failures: int) -> list[SearchCandidate]:
        """Up to ``count`` fresh random programs, new and not in ``taken`` (program hashes,
        updated).  Gives up after ``max_failures`` samples in a row that yield nothing new."""
        return self._require_pool().sample_new(self.rng, count, taken, max_failures)

    def best_measured(self, k: int) -> list[SearchCandidate]:
        """The ``k`` fastest successfully measured candidates (database elites included)."""
        ok = [c for c in self.measured if c.seconds is not None and math.isfinite(c.seconds)]
        ok.sort(key=lambda c: c.seconds)
        return ok[:k]


_REGISTRY: dict[str, Callable[..., SearchStrategy]] = {}


def register(kind: str, factory: Callable[..., SearchStrategy]) -> None:
    """Make ``create(kind, **options)`` call ``factory(**options)``."""
    if not isinstance(kind, str) or not kind:
        raise SearchError(f"a search strategy kind must be a non-empty string, got {kind!r}")
    _REGISTRY[kind] = factory


def kinds() -> list[str]:
    return sorted(_REGISTRY)


def create(kind_or_instance: str | SearchStrategy = "evolutionary",
           **options: Any) -> SearchStrategy:
    """A strategy of a registered kind ("evolutionary", "random"), or the instance given."""
    if isinstance(kind_or_instance, SearchStrategy):
        if options:
            raise SearchError(f"options {sorted(options)} were given with a ready "
                              f"{type(kind_or_instance).__name__} instance")
        return kind_or_instance
    factory = _REGISTRY.get(kind_or_instance) if isinstance(kind_or_instance, str) else None
    if factory is None:
        raise SearchError(f"unknown search strategy {kind_or_instance!r}; known kinds: "
                          f"{', '.join(kinds())}")
    try:
        strategy = factory(**options)
    except TypeError as err:
        raise SearchError(f"search strategy {kind_or_instance!r}: {err}") from None
    if not isinstance(strategy, SearchStrategy):
        raise SearchError(f"search strategy kind {kind_or_instance!r} made a "
                          f"{type(strategy).__name__}, not a SearchStrategy")
    return strategy
