"""Sampling instructions: valid draws, recorded decisions, seeding, replay, and errors."""
from __future__ import annotations

import math
import random

import pytest

from schedules import INLINE, ROOT, Schedule, ScheduleError, Trace
from schedules import sampling
from tensor_ir.func import structural_equal

from .test_loops import assert_roundtrip, assert_unchanged
from .workloads import check_interp, conv2d, elementwise_chain, matmul, matmul_relu


@pytest.mark.parametrize("extent,n,bound", [(12, 2, 4), (64, 4, 16), (7, 3, 16), (1, 3, 1),
                                            (360, 3, -1)])
def test_perfect_tile_draws(extent, n, bound):
    rng = random.Random(0)
    seen = set()
    for _ in range(50):
        f = sampling.sample_perfect_tile(rng, extent, n, bound)
        assert len(f) == n and math.prod(f) == extent and all(x >= 1 for x in f)
        assert bound == -1 or f[-1] <= bound
        seen.add(tuple(f))
    assert len(seen) > 1 or extent in (1, 7) and n <= 3 and len(seen) >= 1


def test_perfect_tile_on_schedule_records_decision():
    func, ref = matmul(8, 12, 6)
    sch = Schedule(func, seed=5)
    i, j, k = sch.get_loops(sch.get_block("C"))
    tiles = sch.sample_perfect_tile(j, n=3, max_innermost_factor=4)
    assert math.prod(tiles) == 12 and tiles[-1] <= 4
    inst = sch.trace[-1]
    assert inst.kind == "sample_perfect_tile" and list(inst.decision) == list(tiles)
    assert inst.attrs == {"n": 3, "max_innermost_factor": 4}
    sch.split(j, tiles)
    check_interp(sch.func, ref)
    same = Schedule(func, seed=5)
    i2, j2, _ = same.get_loops(same.get_block("C"))
    assert list(same.sample_perfect_tile(j2, n=3, max_innermost_factor=4)) == list(tiles)
    fixed = sch.sample_perfect_tile(i, n=2, decision=[2, 4])
    assert list(fixed) == [2, 4]


def test_perfect_tile_errors():
    func, _ = matmul()
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    assert_unchanged(sch, lambda: sch.sample_perfect_tile(i, n=2, decision=[3, 3]))
    assert_unchanged(sch, lambda: sch.sample_perfect_tile(i, n=2, decision=[8]))
    assert_unchanged(sch, lambda: sch.sample_perfect_tile(i, n=0))
    assert_unchanged(sch, lambda: sch.sample_perfect_tile(i, n=2, max_innermost_factor=0))
    state = sch.rng.getstate()
    assert_unchanged(sch, lambda: sch.sample_perfect_tile(i, n=2, decision=[1, 8],
                                                          max_innermost_factor=4))
    assert sch.rng.getstate() == state


def test_perfect_tile_inner_budget_draws():
    rng = random.Random(1)
    for _ in range(200):
        f = sampling.sample_perfect_tile(rng, 144, 4, 64, inner_budget=48, inner_levels=2,
                                         budget_used=3)
        assert math.prod(f) == 144 and f[-1] * f[-2] * 3 <= 48
    # Nothing of the budget left but 1: the inner levels are all 1.
    f = sampling.sample_perfect_tile(rng, 56, 3, 64, inner_budget=8, inner_levels=2,
                                     budget_used=8)
    assert f[1:] == [1, 1] and f[0] == 56
    with pytest.raises(ScheduleError, match="already take"):
        sampling.sample_perfect_tile(rng, 56, 3, 64, inner_budget=8, budget_used=16)
    with pytest.raises(ScheduleError, match="over the 4 left"):
        sampling.sample_perfect_tile(rng, 56, 3, 64, decision=[7, 2, 4], inner_budget=8,
                                     inner_levels=2, budget_used=2)
    with pytest.raises(ScheduleError, match="does not fit"):
        sampling.sample_perfect_tile(rng, 56, 2, 64, inner_budget=4, inner_levels=2)


def test_perfect_tile_budget_shared_through_the_trace():
    """The second loop's inner factors see the first's through the trace's inputs, in
    sampling, in replay and in the printed Python."""
    func, ref = matmul(16, 24, 8)
    sch = Schedule(func, seed=3)
    i, j, k = sch.get_loops(sch.get_block("C"))
    tj = sch.sample_perfect_tile(j, n=3, max_innermost_factor=64, inner_budget=16,
                                 inner_levels=2, budget_used=[2])
    ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=64, inner_budget=16,
                                 inner_levels=2, budget_used=[2] + list(tj[1:]))
    assert 2 * math.prod(int(x) for x in tj[1:]) * math.prod(int(x) for x in ti[1:]) <= 16
    inst = sch.trace[-1]
    assert inst.attrs == {"n": 3, "max_innermost_factor": 64, "inner_budget": 16,
                          "inner_levels": 2}
    assert len(inst.inputs) == 4 and inst.inputs[1] == 2
    text = str(sch.trace)
    assert "budget_used=[2, " in text
    sch.split(i, ti)
    sch.split(j, tj)
    check_interp(sch.func, ref)
    assert_roundtrip(sch, func)
    # A decision that breaks the shared budget does not replay.
    bad = sch.trace.with_decision(len(sch.trace) - 3, [1, 2, 8])
    bad = Trace(bad.instructions[:len(sch.trace) - 2])
    with pytest.raises(ScheduleError, match="inner_budget"):
        bad.apply(func)


def test_categorical():
    sch = Schedule(matmul()[0], seed=1)
    draws = [int(sch.sample_categorical([1, 2, 3], [0.0, 1.0, 0.0])) for _ in range(10)]
    assert draws == [2] * 10
    assert [inst.decision for inst in sch.trace] == [1] * 10
    counts = {c: 0 for c in (10, 20)}
    for _ in range(400):
        counts[int(sch.sample_categorical([10, 20], [0.25, 0.75]))] += 1
    assert 220 < counts[20] < 380
    assert int(sch.sample_categorical([10, 20], [1, 1], decision=0)) == 10
    for bad in (lambda: sch.sample_categorical([], []),
                lambda: sch.sample_categorical([1, 2], [1.0]),
                lambda: sch.sample_categorical([1, 2], [-1.0, 2.0]),
                lambda: sch.sample_categorical([1, 2], [0.0, 0.0]),
                lambda: sch.sample_categorical([1, 2], [1, 1], decision=2)):
        assert_unchanged(sch, bad)


def test_compute_location_candidates_and_replay():
    func, ref = matmul_relu()
    sch = Schedule(func, seed=0)
    loops, can_inline = sampling.compute_location_candidates(sch.func, "C")
    assert [v.name for v in loops] == ["i", "j"] and can_inline is False
    seen = set()
    for seed in range(20):
        s = Schedule(func, seed=seed)
        cb = s.get_block("C")
        loc = s.sample_compute_location(cb)
        target = s.get(loc)
        seen.add(target if isinstance(target, str) else target.loop_var.name)
        s.compute_at(cb, loc)
        check_interp(s.func, ref)
        assert_roundtrip(s, func)
    assert seen == {ROOT, "i", "j"}


def test_compute_location_inline():
    func, ref = elementwise_chain()
    sch = Schedule(func)
    b = sch.get_block("scale")
    loc = sch.sample_compute_location(b, decision=-2)
    assert sch.get(loc) == INLINE
    with pytest.raises(ScheduleError, match="not a loop"):
        sch.split(loc, [None, 2])
    sch.compute_at(b, loc)
    assert "scale" not in [sch.get(x).name for x in sch.get_child_blocks(sch.get_block("root"))]
    check_interp(sch.func, ref)
    assert_roundtrip(sch, func)
    bad = sch.trace.with_decision(1, 7)
    with pytest.raises(ScheduleError, match="decision 7"):
        bad.apply(func)


def test_conv_compute_location_and_sketch_resampling():
    func, ref = conv2d()
    sch = Schedule(func, seed=2)
    pad = sch.get_block("pad")
    loc = sch.sample_compute_location(pad)
    sch.compute_at(pad, loc)
    check_interp(sch.func, ref)
    sketch = Trace(sch.trace).without_decisions()
    for seed in range(6):
        again = sketch.apply(func, seed=seed)
        check_interp(again.func, ref)
        replay = again.trace.apply(func)
        assert structural_equal(replay.func, again.func)


# -- fitting a tile decided for another extent --------------------------------------------------

def test_fit_perfect_tile_keeps_the_inner_factors_that_divide_and_moves_the_rest_out():
    fit = sampling.fit_perfect_tile
    assert fit((32, 1), 16, 2) == [16, 1]               # 512 -> 256 input channels
    assert fit((16, 1, 1, 2), 32, 4) == [16, 1, 1, 2]   # the same extent: unchanged
    assert fit((1, 1, 7, 1), 14, 4) == [2, 1, 7, 1]     # a 7-row tile of 14 rows
    assert fit((4, 4), 8, 2) == [2, 4]
    assert fit((1, 1, 1, 7), 16, 4) == [16, 1, 1, 1]    # 7 does not divide 16
    assert fit((2, 6), 9, 2) == [3, 3]                  # the largest divisor of 6 that 9 takes


def test_fit_perfect_tile_holds_the_bounds_of_sampling():
    fit = sampling.fit_perfect_tile
    assert fit((1, 32), 64, 2, max_innermost_factor=16) == [4, 16]
    # inner_budget: the inner level times what earlier loops took stays within it.
    assert fit((1, 1, 1, 16), 32, 4, inner_budget=32, inner_levels=1, budget_used=4) == \
        [4, 1, 1, 8]
    assert fit((1, 8), 8, 2, max_innermost_factor=-1) == [1, 8]
    # No tile of a one-level loop within the budget.
    assert fit((16,), 16, 1, inner_budget=8, inner_levels=1) is None
    for bad in ((0, 16), (4,), (2.0, 8), (True, 16), None, "16"):
        assert fit(bad, 16, 2) is None


@pytest.mark.parametrize("seed", range(20))
def test_fitted_tiles_are_valid_tiles_of_the_extent(seed):
    rng = random.Random(seed)
    for _ in range(50):
        n = rng.randint(1, 4)
        decision = [rng.choice((1, 2, 3, 4, 7, 8, 16)) for _ in range(n)]
        extent = rng.choice((1, 6, 7, 12, 14, 16, 24, 49, 56, 64, 96))
        innermost = rng.choice((-1, 4, 16, 64))
        budget = rng.choice((None, 16, 64))
        levels = rng.randint(0, n)
        factors = sampling.fit_perfect_tile(decision, extent, n, innermost, budget, levels)
        if factors is None:
            continue
        # What sample_perfect_tile accepts as a decision is a valid tile.
        assert sampling.sample_perfect_tile(rng, extent, n, innermost, factors,
                                            inner_budget=budget, inner_levels=levels) == factors


def test_a_schedule_fitting_tiles_replays_a_trace_of_another_extent():
    def tiled(n, decision=None, fit=False):
        sch = Schedule(matmul(n, n, n)[0], seed=0)
        sch.fit_tiles = fit
        i, _, _ = sch.get_loops(sch.get_block("C"))
        sch.split(i, sch.sample_perfect_tile(i, n=3, decision=decision))
        return sch

    decided = tiled(32, (2, 4, 4)).trace
    with pytest.raises(ScheduleError, match="multiplies to 32, not the extent 24"):
        decided.apply(matmul(24, 24, 24)[0])
    func, ref = matmul(24, 24, 24)
    sch = decided.apply(func, fit_tiles=True)
    assert sch.fit_tiles
    k = sch.trace.sampling_indices()[0]
    assert sch.trace[k].decision == (3, 2, 4)             # inner 4 kept, 4 -> 2, 3 outside
    check_interp(sch.func, ref)
    assert sch.copy().fit_tiles
