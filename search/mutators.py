"""Mutators: change one sampling decision of a decided trace.

Search never edits IR: a mutator reads one sampling instruction of a trace and proposes a new
decision for it; the strategy replays ``trace.with_decision(index, decision)`` and keeps the
result when the space accepts it.  One mutator per kind of decision:

    MutateTileSize         sample_perfect_tile: move a factor of one tile level to another
                           (the product stays the loop's extent; the innermost bound holds)
    MutateParallel         the sample_categorical behind ``meta_schedule.parallel``
    MutateUnroll           the sample_categorical behind ``meta_schedule.unroll_explicit``
    MutateCategorical      any other sample_categorical
    MutateComputeLocation  sample_compute_location: a neighbouring loop, the root, or inline

Besides one-decision steps, ``transplant`` carries all of a program's decisions into a sibling
sketch: one whose sampling instructions are the same kinds with the same attributes (a packed
matmul's sketches with panels two or three registers wide, say).  The search uses it so a
good tiling found in one sketch is tried in the others (see EvolutionConfig.cross_share).

A mutator proposes; it does not know whether the new decision is legal everywhere (a compute
location's candidate loops are only known while replaying).  An illegal one makes the replay
fail, which the strategy counts and moves on from.

    mutators = default_mutators()
    new = mutate(trace, rng, mutators)          # a Trace with one decision changed, or None
"""
from __future__ import annotations

import abc
import json
import random
from collections.abc import Sequence

from schedules.frozen import thaw
from schedules.rules.parallel_vectorize_unroll import PARALLEL_KEY, UNROLL_KEY
from schedules.sampling import INLINE_DECISION, ROOT_DECISION, prime_factors
from schedules.trace import Instruction, Trace

__all__ = [
    "MutateCategorical",
    "MutateComputeLocation",
    "MutateParallel",
    "MutateTileSize",
    "MutateUnroll",
    "Mutator",
    "default_mutators",
    "mutate",
    "sampling_signature",
    "transplant",
]



def _annotation_key(trace: Trace, index: int) -> str | None:
    """The annotation key a sample_categorical's value feeds (None: no annotate uses it)."""
    outputs = trace[index].outputs
    if not outputs:
        return None
    handle = outputs[0]
    for inst in trace.instructions[index + 1:]:
        if inst.kind == "annotate" and handle in inst.inputs:
            key = dict(inst.attrs).get("key")
            return key if isinstance(key, str) else None
    return None


class Mutator(abc.ABC):
    """Proposes a new decision for sampling instructions of one kind.

    ``applies(trace, index)`` says whether instruction ``index`` is one this mutator handles;
    ``propose(trace, index, rng)`` returns a decision different from the current one, or None
    when there is no other choice."""

    name: str = ""

    @abc.abstractmethod
    def applies(self, trace: Trace, index: int) -> bool:
        ...

    @abc.abstractmethod
    def propose(self, trace: Trace, index: int, rng: random.Random):
        ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MutateTileSize(Mutator):
    """Moves one prime factor of a tile level to another level (TVM's MutateTileSize in
    spirit): small steps, so a good tiling's neighbours are explored first.  Levels whose
    factors are all 1 but one cannot give anything, and a move that would break
    ``max_innermost_factor`` is not proposed."""

    name = "tile_size"

    def __init__(self, max_attempts: int = 8):
        self.max_attempts = max_attempts

    def applies(self, trace: Trace, index: int) -> bool:
        inst = trace[index]
        return (inst.kind == "sample_perfect_tile" and inst.decision is not None
                and len(inst.decision) >= 2 and any(f > 1 for f in inst.decision))

    def propose(self, trace: Trace, index: int, rng: random.Random):
        inst: Instruction = trace[index]
        factors = [int(f) for f in inst.decision]
        bound = int(dict(inst.attrs).get("max_innermost_factor", -1))
        sources = [k for k, f in enumerate(factors) if f > 1]
        for _ in range(self.max_attempts):
            src = rng.choice(sources)
            primes = prime_factors(factors[src])
            # Move one prime, or occasionally all of a level, so larger jumps happen too.
            moved = primes[rng.randrange(len(primes))] if rng.random() < 0.8 else factors[src]
            dst = rng.choice([k for k in range(len(factors)) if k != src])
            new = list(factors)
            new[src] //= moved
            new[dst] *= moved
            if bound != -1 and new[-1] > bound:
                continue
            if new != factors:
                return new
        return None


class MutateCategorical(Mutator):
    """Another candidate of a sample_categorical, drawn by the instruction's probabilities
    (the current one excluded).  Subclasses restrict it to the annotation it feeds."""

    name = "categorical"
    annotation: str | None = None

    def applies(self, trace: Trace, index: int) -> bool:
        inst = trace[index]
        if inst.kind != "sample_categorical" or inst.decision is None:
            return False
        if len(dict(inst.attrs).get("candidates", ())) < 2:
            return False
        key = _annotation_key(trace, index)
        if self.annotation is None:
            return key not in (PARALLEL_KEY, UNROLL_KEY)
        return key == self.annotation

    def propose(self, trace: Trace, index: int, rng: random.Random):
        inst = trace[index]
        attrs = dict(inst.attrs)
        probs = [float(p) for p in attrs["probs"]]
        choices = [k for k in range(len(probs)) if k != inst.decision]
        weights = [probs[k] for k in choices]
        if not choices:
            return None
        if sum(weights) <= 0:
            weights = [1.0] * len(choices)
        return rng.choices(choices, weights=weights)[0]


class MutateParallel(MutateCategorical):
    """The parallel extent (a candidate of ``meta_schedule.parallel``)."""

    name = "parallel"
    annotation = PARALLEL_KEY


class MutateUnroll(MutateCategorical):
    """The auto-unroll step (a candidate of ``meta_schedule.unroll_explicit``)."""

    name = "unroll"
    annotation = UNROLL_KEY


class MutateComputeLocation(Mutator):
    """A compute location near the current one: the next loop in or out, the root, or inline.
    The number of candidate loops is only known during replay; a proposal beyond it makes the
    replay fail, so proposals stay within the largest index seen legal at this instruction
    plus one."""

    name = "compute_location"

    def __init__(self):
        self._largest: dict[int, int] = {}

    def applies(self, trace: Trace, index: int) -> bool:
        inst = trace[index]
        return inst.kind == "sample_compute_location" and inst.decision is not None

    def propose(self, trace: Trace, index: int, rng: random.Random):
        current = int(trace[index].decision)
        largest = max(self._largest.get(index, -1), current)
        self._largest[index] = largest
        choices = {ROOT_DECISION, INLINE_DECISION, current - 1, current + 1,
                   rng.randint(0, largest + 1)}
        choices = sorted(c for c in choices if c != current and c >= INLINE_DECISION
                         and c <= largest + 1)
        return rng.choice(choices) if choices else None


def default_mutators() -> list[Mutator]:
    return [MutateTileSize(), MutateParallel(), MutateUnroll(), MutateComputeLocation(),
            MutateCategorical()]


# Relative chance of each mutator being picked when several apply (tile sizes dominate the
# space, so they get most of the attempts).
DEFAULT_WEIGHTS = {"tile_size": 0.55, "parallel": 0.15, "unroll": 0.15,
                   "compute_location": 0.1, "categorical": 0.05}


def mutate(trace: Trace, rng: random.Random, mutators: Sequence[Mutator],
           weights: dict[str, float] | None = None) -> Trace | None:
    """``trace`` with one decision changed by a mutator drawn by ``weights`` (per mutator
    name) among those that apply somewhere in it; None when none can change anything."""
    weights = DEFAULT_WEIGHTS if weights is None else weights
    sites: dict[int, list[int]] = {}  # mutator position -> instruction indices
    for index in trace.sampling_indices():
        for m, mutator in enumerate(mutators):
            if mutator.applies(trace, index):
                sites.setdefault(m, []).append(index)
                break
    order = sorted(sites)
    while order:
        w = [max(weights.get(mutators[m].name, 0.05), 1e-9) for m in order]
        m = rng.choices(order, weights=w)[0]
        index = rng.choice(sites[m])
        decision = mutators[m].propose(trace, index, rng)
        if decision is not None:
            return trace.with_decision(index, decision)
        sites[m].remove(index)
        if not sites[m]:
            order.remove(m)
    return None


def sampling_signature(trace: Trace) -> tuple:
    """What a sketch's decisions mean: the kind and attributes of each sampling instruction,
    in order.  Two sketches with one signature take each other's decisions (see transplant);
    the instructions' inputs may differ (a split by 32 in one, by 48 in the other)."""
    return tuple((trace[k].kind, json.dumps(thaw(trace[k].attrs), sort_keys=True))
                 for k in trace.sampling_indices())


def transplant(decided: Trace, sketch: Trace, differing: bool = True) -> Trace | None:
    """``sketch`` with the decisions of ``decided`` (a program of a sketch with the same
    sampling signature), position by position; None when the signatures differ.

    ``differing=False`` leaves undecided (to be sampled afresh) the instructions whose inputs
    differ between the two -- a tile of a loop split by another factor, whose old decision
    may not divide it -- and keeps the rest."""
    ours, theirs = decided.sampling_indices(), sketch.sampling_indices()
    if sampling_signature(decided) != sampling_signature(sketch):
        return None
    out = sketch
    for a, b in zip(ours, theirs):
        if differing or decided[a].inputs == sketch[b].inputs:
            out = out.with_decision(b, decided[a].decision)
    return out
