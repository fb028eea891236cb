"""EvolutionarySearch: mutate the decisions of good programs, keep what the cost model likes.

One batch (``propose(count)``), after the first:

1. The population (unmeasured candidates kept from earlier batches, re-scored by the
   retrained model) gets ``random_fraction * count`` fresh random samples.
2. ``generations`` times: parents are drawn by rank of predicted score from the population
   and the best measured programs (this run's and the database's: the elites); each child
   changes one sampling decision (:mod:`search.mutators`) and is replayed; children that are
   invalid, measured before, or a program already in the population are dropped.  The
   population is then cut back to ``population`` members by predicted score.
   A ``cross_share`` of the children are instead a measured elite's decisions carried whole
   into a sibling sketch (:func:`search.mutators.transplant`).  One-decision steps stay in
   the sketch they start from, and a run's elites soon all come from one sketch: tuning a
   BERT layer, every elite of its FFN1 matmul had panels two registers wide, and the
   sibling sketch with panels three wide was met only through random samples and their
   mutants, whose tilings were poor (3.2 ms at best, the elite 2.55 ms), while the elite's
   own tiling with three-wide panels, written by hand, ran 8% faster than the elite.  That
   matmul tuned alone for 600 trials (one seed, a noisy host) reached 2.60 ms with
   transplants, 3.23 ms without.
3. The batch is the population's top ``count - n_random`` by predicted score plus
   ``n_random = eps_greedy * count`` (at least one) of this batch's fresh random samples:
   the epsilon-greedy share keeps the model honest where it has seen nothing.

The first batch, before anything is measured, is random samples alone when the model is
untrained (it has no order to select by); a model trained before the run (``is_trained``: one
pre-trained on other workloads) selects it instead from ``prior_samples`` random programs
(default 16x the batch) and their mutants, taking each sketch's best predicted in turn.  That
pool is wider than the later populations on purpose: a transferred model ranks a new workload
only roughly (pairwise accuracy about 0.7), and the best of 256 roughly ranked programs is far
better than the best of 48.  It is drawn once per task: 256 programs of a ResNet-50
convolution take about 8 s to replay and score here, against about 0.6 s per measured trial.
The turn over sketches hedges the model's one blind spot: which sketch suits a workload it
never saw (see ``_across_sketches``).

Sizes default to multiples of the batch so the work per trial stays constant: a modest
population (3x the batch) and two generations cost about 2.5 replays per proposed candidate,
cached across batches (see :class:`~search.pool.CandidatePool`).  Every random choice comes
from the strategy's seeded generator, so a fixed seed (and a deterministic runner) gives the
same search.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .mutators import (DEFAULT_WEIGHTS, Mutator, default_mutators, mutate,
                       sampling_signature, transplant)
from .pool import SearchCandidate
from .strategy import SearchError, SearchStrategy, register

__all__ = ["EvolutionConfig", "EvolutionarySearch"]

# Least weight of a sketch in fresh random draws, however slow its programs measured: the
# model may have met only its poor corners.
SKETCH_WEIGHT_FLOOR = 0.05


@dataclass(frozen=True)
class EvolutionConfig:
    """The sizes and shares of an evolutionary search, checked once when made.

    population       candidates kept between batches (None: 3x the batch).
    generations      rounds of mutation and selection per batch.
    mutants          children per generation (None: the batch size).
    prior_samples    random programs a model trained before the run ranks for the first
                     batch (None: 16x the batch).
    random_fraction  share of the batch drawn fresh into the population each batch.
    eps_greedy       share of each batch measured from fresh random samples.
    num_elites       measured programs that may parent (None: the batch size).
    elite_share      chance that a child's parent is an elite rather than a population member.
    cross_share      share of the mutation attempts that carry an elite's decisions into a
                     sibling sketch instead.
    max_failures     samples in a row that give nothing new before the space is taken to be
                     exhausted.
    """

    population: int | None = None
    generations: int = 2
    mutants: int | None = None
    prior_samples: int | None = None
    random_fraction: float = 0.5
    eps_greedy: float = 0.1
    num_elites: int | None = None
    elite_share: float = 0.5
    cross_share: float = 0.1
    max_failures: int = 64

    def __post_init__(self):
        for name in ("population", "mutants", "num_elites", "prior_samples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise SearchError(f"EvolutionConfig: {name} must be a positive int or None, "
                                  f"got {value!r}")
        if not isinstance(self.generations, int) or self.generations < 0:
            raise SearchError(f"EvolutionConfig: generations must be an int >= 0, got "
                              f"{self.generations!r}")
        for name in ("random_fraction", "eps_greedy", "elite_share", "cross_share"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise SearchError(f"EvolutionConfig: {name} must be in [0, 1], got {value!r}")
        if not isinstance(self.max_failures, int) or self.max_failures < 1:
            raise SearchError(f"EvolutionConfig: max_failures must be a positive int, got "
                              f"{self.max_failures!r}")


class EvolutionarySearch(SearchStrategy):
    """Options: ``seed``; ``config``, an :class:`EvolutionConfig` (sizes and shares);
    ``mutators`` and ``mutator_weights`` (by mutator name), what changes a decision."""

    kind = "evolutionary"

    def __init__(self, seed: int = 0, config: EvolutionConfig | None = None,
                 mutators: Sequence[Mutator] | None = None,
                 mutator_weights: dict[str, float] | None = None):
        super().__init__(seed)
        if not isinstance(config, (EvolutionConfig, type(None))):
            raise SearchError(f"EvolutionarySearch: config must be an EvolutionConfig, got "
                              f"{type(config).__name__}")
        self.config = config or EvolutionConfig()
        self.mutators = list(mutators) if mutators is not None else default_mutators()
        self.mutator_weights = dict(DEFAULT_WEIGHTS if mutator_weights is None
                                    else mutator_weights)
        self._sketch_cache: dict[str, int | None] = {}  # final trace hash -> sketch index
        self._siblings: list[list[int]] | None = None  # per sketch: others of its signature
        # Unmeasured candidates carried between batches, by program hash (insertion order is
        # part of the search's determinism).
        self.population: dict[str, SearchCandidate] = {}
        self.stats = {"mutations": 0, "mutants_kept": 0, "mutants_invalid": 0,
                      "mutants_known": 0, "transplants": 0}

    # -- the batch -----------------------------------------------------------------------------
    def propose(self, count: int) -> list[SearchCandidate]:
        if not isinstance(count, int) or count < 0:
            raise SearchError(f"propose: count must be an int >= 0, got {count!r}")
        pool = self._require_pool()
        if count == 0:
            return []
        measured = bool(self.best_measured(1))
        if not measured and not self.model.is_trained:
            batch = self._random_new(count, set(), self.config.max_failures)
            for c in batch:
                c.origin = "random"
            return batch

        # 1. Drop what was measured since, top up with fresh random samples.
        size = self.config.population or 3 * count
        mutants = self.config.mutants or count
        self.population = {h: c for h, c in self.population.items() if pool.is_new(c)}
        n_fresh = max(1, math.ceil(self.config.random_fraction * count))
        if not measured:
            # A model trained before this task (pre-trained on other workloads) ranks from
            # the first batch; with no elites to mutate yet, it picks from a wide pool of
            # random programs, kept whole until the batch is chosen.
            wide = self.config.prior_samples or 16 * count
            n_fresh = max(n_fresh, size - len(self.population), wide)
        fresh = self._random_new(n_fresh, set(self.population), self.config.max_failures)
        for c in fresh:
            c.origin = "random"
            self.population[c.program_hash] = c

        # 2. Generations of mutation and truncation selection by predicted score.
        for _ in range(self.config.generations):
            parents = self.best_measured(self.config.num_elites or count) + list(
                self.population.values())
            if not parents:
                break
            pool.score(self.model, parents)
            children = self._mutate(parents, mutants)
            pool.score(self.model, children)
            for c in children:
                self.population[c.program_hash] = c
            if measured:
                self._truncate(size)
        members = list(self.population.values())
        pool.score(self.model, members)

        # 3. The batch: best predicted, plus the epsilon-greedy share of fresh random ones.
        n_random = 0
        if self.config.eps_greedy > 0 and fresh:
            n_random = min(len(fresh), count, max(1, round(self.config.eps_greedy * count)))
        # A model that has measured nothing of this task ranks programs within a sketch well
        # (tile sizes, vector widths: what its source workloads taught it) but may rank whole
        # sketches wrongly here: on a MobileNetV2 pointwise convolution a ResNet-18 model put
        # two sketches 20x slower than the best on top, and a first batch of its top picks
        # measured almost nothing else.  That batch takes each sketch's best in turn.
        ranked = _by_score(members) if measured else self._across_sketches(members)
        batch: list[SearchCandidate] = []
        chosen: set[str] = set()
        for c in ranked:
            if len(batch) >= count - n_random:
                break
            batch.append(c)
            chosen.add(c.program_hash)
        for c in fresh:
            if len(batch) >= count:
                break
            if c.program_hash not in chosen:
                batch.append(c)
                chosen.add(c.program_hash)
        for c in ranked:  # fewer fresh ones than planned: fill from the ranking
            if len(batch) >= count:
                break
            if c.program_hash not in chosen:
                batch.append(c)
                chosen.add(c.program_hash)
        for c in batch:
            self.population.pop(c.program_hash, None)
        if not measured:
            self._truncate(size)
        return batch

    def _sketch(self, c: SearchCandidate) -> int | None:
        if c.trace_hash not in self._sketch_cache:
            self._sketch_cache[c.trace_hash] = self._require_pool().space.sketch_of(
                c.final_trace)
        return self._sketch_cache[c.trace_hash]

    def _across_sketches(self, cands: list[SearchCandidate]) -> list[SearchCandidate]:
        """``cands`` ordered round-robin over their sketches: each sketch's best predicted,
        then each one's second, and so on (sketches in the order of their best score)."""
        by_sketch: dict[int | None, list[SearchCandidate]] = {}
        for c in _by_score(cands):
            by_sketch.setdefault(self._sketch(c), []).append(c)
        queues = list(by_sketch.values())  # first-seen order: by each sketch's best score
        out: list[SearchCandidate] = []
        for rank in range(max((len(q) for q in queues), default=0)):
            out.extend(q[rank] for q in queues if rank < len(q))
        return out

    def _random_new(self, count: int, taken: set[str], max_failures: int) -> list[SearchCandidate]:
        pool = self._require_pool()
        return pool.sample_new(self.rng, count, taken, max_failures,
                               weights=self._sketch_weights())

    def _sketch_weights(self) -> list[float] | None:
        """Fresh samples favour the sketches whose measured programs are fast: weight
        (best time / sketch's best time)^2, floored at SKETCH_WEIGHT_FLOOR; a sketch with
        nothing measured yet keeps weight 1.  A space whose sketches differ in kind (scalar,
        whole-register, half-register, packed) often has one or two worth sampling, and a
        short run cannot spend half its random draws on the others."""
        space = self._require_pool().space
        if len(space.sketches) < 2:
            return None
        best: dict[int, float] = {}
        for c in self.measured:
            if c.seconds is None or not math.isfinite(c.seconds):
                continue
            k = self._sketch(c)
            if k is not None:
                best[k] = min(best.get(k, math.inf), c.seconds)
        if not best:
            return None
        fastest = min(best.values())
        return [max(SKETCH_WEIGHT_FLOOR, (fastest / best[k]) ** 2) if k in best else 1.0
                for k in range(len(space.sketches))]

    def _mutate(self, parents: list[SearchCandidate], count: int) -> list[SearchCandidate]:
        """Up to ``count`` new children of parents drawn by rank of predicted score."""
        pool = self.pool
        ranked = _by_score(parents)
        weights = [len(ranked) - r for r in range(len(ranked))]
        # Measured programs parent half of the children by their measured rank: a measured
        # time is better evidence than any prediction.
        elites = self.best_measured(self.config.num_elites or count)
        elite_weights = [len(elites) - r for r in range(len(elites))]
        children: list[SearchCandidate] = []
        seen = set(self.population)
        attempts = 0
        while len(children) < count and attempts < 4 * count:
            attempts += 1
            parent, sibling = None, None
            share = self.config.cross_share
            if elites and share and self.rng.random() < share:
                parent = self.rng.choices(elites, weights=elite_weights)[0]
                sibling = self._sibling(parent)
            if sibling is not None:
                child = self._transplant(parent, sibling)
                origin = "transplant"
            else:
                origin = "mutant"
                if elites and self.rng.random() < self.config.elite_share:
                    parent = self.rng.choices(elites, weights=elite_weights)[0]
                else:
                    parent = self.rng.choices(ranked, weights=weights)[0]
                trace = mutate(parent.trace, self.rng, self.mutators, self.mutator_weights)
                if trace is None:
                    continue
                self.stats["mutations"] += 1
                child = pool.replay(trace)
            if child is None:
                self.stats["mutants_invalid"] += 1
                continue
            if not pool.is_new(child) or child.program_hash in seen:
                self.stats["mutants_known"] += 1
                continue
            seen.add(child.program_hash)
            if child.origin != "random":
                child.origin = origin
            children.append(child)
        self.stats["mutants_kept"] += len(children)
        return children

    def _sibling(self, parent: SearchCandidate) -> int | None:
        """A sketch drawn at random among those with the sampling signature of ``parent``'s
        (see search.mutators.transplant), other than its own; None when there is none."""
        space = self._require_pool().space
        if self._siblings is None:
            signatures = [sampling_signature(sketch) for sketch in space.sketches]
            by_signature: dict[tuple, list[int]] = {}
            for k, signature in enumerate(signatures):
                by_signature.setdefault(signature, []).append(k)
            self._siblings = [[j for j in by_signature[signature] if j != k]
                              for k, signature in enumerate(signatures)]
        k = self._sketch(parent)
        if k is None or not self._siblings[k]:
            return None
        return self.rng.choice(self._siblings[k])

    def _transplant(self, parent: SearchCandidate, sketch: int) -> SearchCandidate | None:
        """``parent``'s decisions replayed in sketch ``sketch``: all of them if they fit, else
        those whose instruction has the same inputs there, the rest drawn afresh (a tile of a
        loop split by another factor).  None when neither replay is valid."""
        pool = self._require_pool()
        target = pool.space.sketches[sketch]
        self.stats["transplants"] += 1
        child = pool.replay(transplant(parent.trace, target))
        if child is None:
            child = pool.replay(transplant(parent.trace, target, differing=False),
                                seed=self.rng.getrandbits(63))
        return child

    def _truncate(self, size: int) -> None:
        if len(self.population) <= size:
            return
        keep = {c.program_hash for c in _by_score(list(self.population.values()))[:size]}
        self.population = {h: c for h, c in self.population.items() if h in keep}


def _by_score(cands: list[SearchCandidate]) -> list[SearchCandidate]:
    """Highest predicted score first; ties keep their order (deterministic)."""
    return sorted(cands, key=lambda c: -(c.predicted if c.predicted is not None else -math.inf))


register("evolutionary", EvolutionarySearch)
