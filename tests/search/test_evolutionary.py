"""Search strategies and mutators, offline (synthetic run times, no compilation)."""
from __future__ import annotations

import copy
import math
import random
import statistics

import pytest

import cost_models
from cost_models import features as F
import search
from records import MemoryDatabase
from schedules.sampling import INLINE_DECISION, ROOT_DECISION
from schedules.space import DesignSpace
from search.mutators import (
    MutateCategorical,
    MutateComputeLocation,
    MutateParallel,
    MutateTileSize,
    MutateUnroll,
    default_mutators,
    mutate,
    sampling_signature,
    transplant,
)
from search.simulation import SimulationBuilder, SimulationRunner
from tensor_ir import ops

from .landscape import TARGET, FeatureDistance, small_matmul, synthetic_runner


@pytest.fixture(scope="module")
def space():
    return DesignSpace(small_matmul(64), TARGET)


@pytest.fixture(scope="module")
def runner(space):
    return synthetic_runner(space)


@pytest.fixture(scope="module")
def panel_space():
    # 48 divides 96: packed sketches with panels two and three AVX-512 registers wide, whose
    # sampling instructions match one for one (siblings).
    return DesignSpace(ops.matmul(64, 96, 64), TARGET)


def _panel_width(trace) -> int | None:
    """The width of a packed sketch's column panels: its first split by a constant."""
    return next((inst.inputs[2] for inst in trace if inst.kind == "split"
                 and len(inst.inputs) == 3 and inst.inputs[1] is None), None)


def _sibling_pair(space) -> tuple[int, int]:
    """Two sketches with one sampling signature whose panels are 32 and 48 wide."""
    for a, sa in enumerate(space.sketches):
        for b, sb in enumerate(space.sketches):
            if (_panel_width(sa), _panel_width(sb)) == (32, 48) and \
                    sampling_signature(sa) == sampling_signature(sb):
                return a, b
    raise AssertionError("no sibling sketches with panels 32 and 48 wide")


def run_search(space, runner, kind, seed, trials=48, batch_size=8, **options):
    loop = search.TuningLoop(space, search.create(kind, seed=seed, **options),
                             cost_models.create("xgb", seed=seed), SimulationBuilder(), runner,
                             MemoryDatabase(), config=search.SearchConfig(batch_size=batch_size),
                             log=False)
    return loop, loop.run(trials)


# -- mutators ---------------------------------------------------------------------------------

def test_tile_mutation_keeps_product_and_innermost_bound(space):
    rng = random.Random(0)
    mutator = MutateTileSize()
    changed = 0
    for seed in range(10):
        trace = space.sample(seed).trace
        for index in trace.sampling_indices():
            if not mutator.applies(trace, index):
                continue
            inst = trace[index]
            new = mutator.propose(trace, index, rng)
            if new is None:
                continue
            changed += 1
            assert new != list(inst.decision)
            assert math.prod(new) == math.prod(inst.decision)
            bound = dict(inst.attrs)["max_innermost_factor"]
            assert bound == -1 or new[-1] <= bound
            # The space accepts it: same loop extents, valid tiles.
            assert space.replay(trace.with_decision(index, new)) is not None
    assert changed >= 10


def test_categorical_mutators_split_parallel_unroll_and_others(space):
    trace = space.sample(3).trace
    kinds = {}
    for index in trace.sampling_indices():
        for m in (MutateParallel(), MutateUnroll(), MutateCategorical()):
            if m.applies(trace, index):
                kinds.setdefault(m.name, []).append(index)
    # matmul on a multi-core target: one parallel and one unroll categorical, and the
    # register tile's copies per reduction step (and its panel prefetch where packed), which
    # the generic mutator takes.
    assert len(kinds.get("unroll", [])) == 1
    feeds = {dict(inst.attrs)["key"]: inst.inputs[1] for inst in trace
             if inst.kind == "annotate" and len(inst.inputs) > 1}
    others = {k for k in feeds if k.startswith("pragma_")}
    assert "pragma_unroll_by" in others <= {"pragma_unroll_by", "pragma_prefetch_bytes"}
    assert sorted(kinds["categorical"]) == sorted(
        k for k, inst in enumerate(trace) if inst.kind == "sample_categorical"
        and inst.outputs[0] in {feeds[key] for key in others})
    rng = random.Random(1)
    for name, indices in kinds.items():
        m = {"parallel": MutateParallel(), "unroll": MutateUnroll(),
             "categorical": MutateCategorical()}[name]
        index = indices[0]
        n = len(dict(trace[index].attrs)["candidates"])
        for _ in range(20):
            d = m.propose(trace, index, rng)
            assert d != trace[index].decision and 0 <= d < n


def test_compute_location_mutator_stays_near():
    func = ops.conv2d_nchw(1, 4, 6, 6, 4, 3, 3, padding=1)
    sp = DesignSpace(func, "llvm")
    m = MutateComputeLocation()
    rng = random.Random(0)
    seen = 0
    for seed in range(6):
        trace = sp.sample(seed).trace
        for index in trace.sampling_indices():
            if m.applies(trace, index):
                current = trace[index].decision
                for _ in range(10):
                    d = m.propose(trace, index, rng)
                    assert d != current and d >= INLINE_DECISION
                    # Within one past the largest location seen legal at this instruction.
                    assert d in (ROOT_DECISION, INLINE_DECISION) or d <= m._largest[index] + 1
                seen += 1
    assert seen >= 1


def test_mutate_changes_exactly_one_decision(space):
    rng = random.Random(5)
    trace = space.sample(7).trace
    for _ in range(20):
        new = mutate(trace, rng, default_mutators())
        assert new is not None
        diff = [k for k in trace.decisions if trace.decisions[k] != new.decisions[k]]
        assert len(diff) == 1


def test_transplant_carries_decisions_into_a_sibling_sketch(panel_space):
    space = panel_space
    a, b = _sibling_pair(space)
    source = space.sample(seed=1, sketch=a).trace
    target = space.sketches[b]
    ours, theirs = source.sampling_indices(), target.sampling_indices()
    # Into its own sketch: the same program's trace back.
    assert transplant(source, space.sketches[a]).to_text() == source.to_text()
    # Whole: every decision, position by position.
    whole = transplant(source, target)
    assert [whole[k].decision for k in theirs] == [source[k].decision for k in ours]
    # Partial: the decisions of instructions whose inputs differ (the tiles that depend on
    # the panel width) are left to be drawn; the others (the reduction's tile, the
    # categorical choices) are kept.
    partial = transplant(source, target, differing=False)
    kept = dropped = 0
    for ka, kb in zip(ours, theirs):
        if source[ka].inputs == target[kb].inputs:
            assert partial[kb].decision == source[ka].decision
            kept += 1
        else:
            assert partial[kb].decision is None
            dropped += 1
    assert kept and dropped
    got = space.replay(partial, seed=3)
    assert got is not None and space.sketch_of(got.final_trace) == b
    assert _panel_width(got.trace) == 48
    # A sketch whose sampling instructions differ takes nothing.
    other = next(k for k, sk in enumerate(space.sketches)
                 if sampling_signature(sk) != sampling_signature(target))
    assert transplant(source, space.sketches[other]) is None


# -- strategies -------------------------------------------------------------------------------

def test_evolutionary_beats_random_on_average(space, runner):
    evo, rnd = [], []
    for seed in range(6):
        evo.append(run_search(space, runner, "evolutionary", seed, trials=64)[1].best_seconds)
        rnd.append(run_search(space, runner, "random", seed, trials=64)[1].best_seconds)
    # Same budget, same seeds: the guided search ends closer to the hidden optimum.
    assert statistics.mean(evo) < statistics.mean(rnd), (evo, rnd)


def test_evolutionary_batches_mix_mutants_and_random(space, runner):
    loop, result = run_search(space, runner, "evolutionary", seed=3, trials=32)
    origins = [t.origin for t in result.trials]
    assert origins[:8] == ["random"] * 8          # first batch: nothing to select by yet
    later = origins[8:]
    assert "mutant" in later
    # The epsilon-greedy share: at least one fresh random candidate in every later batch.
    for b in range(1, 4):
        assert "random" in origins[8 * b: 8 * (b + 1)]
    assert loop.strategy.stats["mutants_kept"] > 0


def test_fresh_samples_favour_the_sketches_that_measured_fast(space, runner):
    loop, _ = run_search(space, runner, "evolutionary", seed=2, trials=16)
    strategy = loop.strategy
    assert len(space.sketches) >= 2
    # Rewrite what was measured: sketch 0's programs 4x slower than the rest.
    best = {}
    for c in strategy.measured:
        k = space.sketch_of(c.final_trace)
        assert k is not None
        c.seconds = 4e-3 if k == 0 else 1e-3
        best[k] = c.seconds
    weights = strategy._sketch_weights()
    assert len(weights) == len(space.sketches)
    for k, w in enumerate(weights):
        expected = 1.0 if k not in best else max(search.evolutionary.SKETCH_WEIGHT_FLOOR,
                                                  (1e-3 / best[k]) ** 2)
        assert w == pytest.approx(expected)
    if 0 in best:
        assert weights[0] == pytest.approx(1 / 16)
        drawn = [space.sketch_of(c.trace) for c in strategy._random_new(64, set(), 64)]
        assert drawn.count(0) < len(drawn) / len(space.sketches)
    # Random search, the comparison baseline, keeps drawing uniformly.
    assert not hasattr(search.create("random", seed=0), "_sketch_weights")


def _landscape_model(space, landscape, samples: int, seed: int):
    """An XGB model trained on ``samples`` random programs of the landscape, as a model
    pre-trained before a run would be."""
    rng = random.Random(seed)
    seen = [space.sample(rng) for _ in range(samples)]
    model = cost_models.create("xgb", seed=0)
    model.update(F.extract([c.func for c in seen]), [landscape.seconds(c.func) for c in seen])
    assert model.is_trained
    return model


def _first_batch_best(space, landscape, model, seed, prior_samples):
    """The best true cost in the first batch of 8 a run proposes with a copy of ``model``
    (the run retrains its copy; every run starts from the same model)."""
    runner = SimulationRunner(landscape)
    config = search.EvolutionConfig(prior_samples=prior_samples)
    loop = search.TuningLoop(space, search.create("evolutionary", seed=seed, config=config),
                             copy.deepcopy(model), SimulationBuilder(), runner,
                             MemoryDatabase(),
                             config=search.SearchConfig(batch_size=8), log=False)
    result = loop.run(8)
    assert len(result.trials) == 8
    return min(t.seconds for t in result.trials), loop


def test_a_model_trained_before_the_run_picks_the_first_batch_from_a_wide_pool(space):
    """A pre-trained model (here trained on other programs of the same landscape) ranks the
    first batch; drawn from 16x the batch its pick is better than from 3x the batch (the
    population size), which is what the first batch was chosen from before."""
    landscape = FeatureDistance(space)
    model = _landscape_model(space, landscape, 96, seed=11)
    narrow, wide = [], []
    for seed in range(4):
        best, _ = _first_batch_best(space, landscape, model, seed, prior_samples=24)
        narrow.append(best)
        best, loop = _first_batch_best(space, landscape, model, seed, prior_samples=128)
        wide.append(best)
        assert loop.pool.sampled >= 128
    assert statistics.mean(wide) < statistics.mean(narrow), (wide, narrow)


def test_a_pre_trained_models_first_batch_takes_each_sketch_in_turn(space):
    """A model that never measured this task may rank whole sketches wrongly: its first
    batch holds each sketch's best predicted program before any sketch's second."""
    landscape = FeatureDistance(space)
    model = _landscape_model(space, landscape, 64, seed=3)
    _, loop = _first_batch_best(space, landscape, model, 0, prior_samples=64)
    strategy_sketches = [space.sketch_of(c.final_trace) for c in loop.strategy.measured]
    assert len(space.sketches) >= 2
    assert set(strategy_sketches) == set(range(len(space.sketches))), strategy_sketches


def test_evolutionary_transplants_elites_into_sibling_sketches(panel_space):
    space = panel_space
    loop, _ = run_search(space, synthetic_runner(space), "evolutionary", seed=0, trials=16,
                         config=search.EvolutionConfig(cross_share=1.0))
    strategy = loop.strategy
    elites = strategy.best_measured(8)
    children = strategy._mutate(elites, 8)
    moved = [c for c in children if c.origin == "transplant"]
    assert moved and strategy.stats["transplants"] >= len(moved)
    for child in moved:
        k = space.sketch_of(child.final_trace)
        theirs = child.trace.sampling_indices()
        # Some elite of a sibling sketch gave it every decision its instructions share.
        assert any(
            space.sketch_of(e.final_trace) != k
            and sampling_signature(e.trace) == sampling_signature(child.trace)
            and all(e.trace[ka].decision == child.trace[kb].decision
                    for ka, kb in zip(e.trace.sampling_indices(), theirs)
                    if e.trace[ka].inputs == child.trace[kb].inputs)
            for e in elites)
    # Without the share, children only ever change one decision within their sketch.
    loop, _ = run_search(space, synthetic_runner(space), "evolutionary", seed=0, trials=16,
                         config=search.EvolutionConfig(cross_share=0.0))
    assert all(c.origin != "transplant" for c in loop.strategy._mutate(
        loop.strategy.best_measured(8), 8))
    assert loop.strategy.stats["transplants"] == 0


def test_propose_only_new_distinct_programs(space, runner):
    loop, result = run_search(space, runner, "evolutionary", seed=1, trials=24)
    strategy = loop.strategy
    batch = strategy.propose(8)
    hashes = [c.program_hash for c in batch]
    assert len(set(hashes)) == len(hashes) == 8
    measured = {t.program_hash for t in result.trials}
    assert not measured & set(hashes)
    assert all(loop.pool.is_new(c) for c in batch)


def test_create_and_options():
    assert set(search.kinds()) >= {"evolutionary", "random"}
    s = search.EvolutionarySearch(seed=1)
    assert search.create(s) is s
    with pytest.raises(search.SearchError, match="unknown search strategy 'annealing'"):
        search.create("annealing")
    with pytest.raises(search.SearchError, match="eps_greedy"):
        search.EvolutionConfig(eps_greedy=1.5)
    with pytest.raises(search.SearchError, match="population"):
        search.EvolutionConfig(population=0)
    with pytest.raises(search.SearchError, match="prior_samples"):
        search.EvolutionConfig(prior_samples=-3)
    with pytest.raises(search.SearchError, match="cross_share"):
        search.EvolutionConfig(cross_share=2)
    with pytest.raises(search.SearchError, match="config must be an EvolutionConfig"):
        search.create("evolutionary", config={"eps_greedy": 0.5})
    with pytest.raises(search.SearchError, match="eps_greedy"):
        search.create("evolutionary", eps_greedy=0.5)  # a knob belongs in the config
    with pytest.raises(search.SearchError, match="options"):
        search.create(s, seed=2)
    with pytest.raises(search.SearchError, match="before initialize"):
        search.RandomSearch().propose(4)
