"""What makes sampling and replay fast changes no answer: a candidate's trace replays to its
program, compute-location decisions mean the same loops whether candidate loops are screened
or all tried, and each shortcut (vectorised injectivity check, counted dependence budget,
path-only replace, statement-only collect, memoised primitives) agrees with the plain
computation it replaces.  No timing is asserted here."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensor_ir.ops as ops
from schedules import ScheduleError, Trace, dependence, sampling, tree
from schedules.primitives import block_primitives
from schedules.primitives import loops as loop_ops
from schedules.space import DesignSpace
from tensor_ir.expr import BinOp, Cmp, IntImm, Var
from tensor_ir import te
from tensor_ir.func import structural_equal
from tensor_ir.stmt import Evaluate, For, SeqStmt, Stmt
from tensor_ir.target import Target
from tensor_ir.visitor import children, collect, transform, uses_var, walk

TARGET = Target("llvm -num-cores 4 -vector-width 256")


def _workloads():
    return {
        "matmul": ops.matmul(64, 48, 32),
        "conv2d": ops.conv2d_nchw(1, 8, 14, 14, 8, 3, 3, padding=1),
        "softmax": ops.softmax((8, 32)),
        "layer_norm": ops.layer_norm((8, 32)),
    }


WORKLOADS = _workloads()


@pytest.fixture
def fresh_probes():
    """Location listings are cached per func: start and end each test without them."""
    sampling._PROBES.clear()
    yield
    sampling._PROBES.clear()


def _location_steps(trace: Trace) -> list[int]:
    return [k for k, inst in enumerate(trace) if inst.kind == "sample_compute_location"]


# -- replay reproduces sampling --------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_replaying_a_sampled_trace_gives_the_same_program(name):
    func = WORKLOADS[name]
    space = DesignSpace(func, TARGET)
    for seed in range(4):
        cand = space.sample(seed)
        again = space.replay(cand.trace)
        assert again is not None
        assert structural_equal(again.func, cand.func)
        assert again.trace == cand.trace
        # The final trace replays without the post-processors, also from JSON.
        final = Trace.from_json(cand.final_trace.to_json()).apply(func)
        assert structural_equal(final.func, cand.func)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_screened_and_exhaustive_sampling_agree(name, fresh_probes, monkeypatch):
    func = WORKLOADS[name]
    space = DesignSpace(func, TARGET)
    screened = [space.sample(seed) for seed in range(5)]
    sampling._PROBES.clear()
    monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", False)
    tried = [space.sample(seed) for seed in range(5)]
    for a, b in zip(screened, tried):
        assert a.trace == b.trace
        assert structural_equal(a.func, b.func)


# -- compute locations -----------------------------------------------------------------------

def _before_location(func, trace: Trace, step: int):
    """The schedule of ``trace`` replayed up to (not including) instruction ``step``."""
    return trace.truncated(step).apply(func)


def test_conv2d_has_compute_location_decisions():
    # The padding stage gets a sampled location: the tests below exercise real decisions.
    cand = DesignSpace(WORKLOADS["conv2d"], TARGET).sample(0)
    assert _location_steps(cand.trace)


@pytest.mark.parametrize("name", ["conv2d", "softmax", "layer_norm"])
def test_screen_lists_the_loops_compute_at_accepts(name, fresh_probes, monkeypatch):
    func = WORKLOADS[name]
    space = DesignSpace(func, TARGET)
    checked = 0
    for seed in range(4):
        trace = space.sample(seed).trace
        for step in _location_steps(trace):
            sch = _before_location(func, trace, step)
            block = sch._symbols[trace[step].inputs[0]]
            sampling._PROBES.clear()
            screened = sampling.compute_location_candidates(sch.func, block)
            sampling._PROBES.clear()
            monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", False)
            tried = sampling.compute_location_candidates(sch.func, block)
            monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", True)
            assert [v for v in screened[0]] == [v for v in tried[0]]
            assert screened[1] == tried[1]
            checked += 1
    if name == "conv2d":
        assert checked > 0


def test_every_location_decision_replays_to_the_unscreened_program(fresh_probes, monkeypatch):
    func = WORKLOADS["conv2d"]
    space = DesignSpace(func, TARGET)
    trace = space.sample(1).trace
    step = _location_steps(trace)[0]
    sch = _before_location(func, trace, step)
    block = sch._symbols[trace[step].inputs[0]]
    loops, can_inline = sampling.compute_location_candidates(sch.func, block)
    assert loops
    decisions = [-1] + ([-2] if can_inline else []) + list(range(len(loops))) + [len(loops)]
    for decision in decisions:
        mutated = trace.with_decision(step, decision)
        sampling._PROBES.clear()
        fast = space.replay(mutated)
        sampling._PROBES.clear()
        monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", False)
        slow = space.replay(mutated)
        monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", True)
        if decision == len(loops):
            assert fast is None and slow is None  # not a candidate: refused both ways
            continue
        assert fast is not None and slow is not None
        assert structural_equal(fast.func, slow.func)
        assert fast.final_trace == slow.final_trace


def test_a_screen_that_rejects_legal_loops_falls_back_to_trials(fresh_probes, monkeypatch):
    func = WORKLOADS["conv2d"]
    trace = DesignSpace(func, TARGET).sample(0).trace
    step = _location_steps(trace)[0]
    sch = _before_location(func, trace, step)
    block = sch._symbols[trace[step].inputs[0]]
    monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", False)
    expected = sampling.compute_location_candidates(sch.func, block)
    assert expected[0]
    sampling._PROBES.clear()
    monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", True)
    monkeypatch.setattr(sampling._LocationProbe, "_screen",
                        lambda self: [False] * len(self.loops))
    assert sampling.compute_location_candidates(sch.func, block) == expected
    sampling._PROBES.clear()
    # Recorded decisions, too, still find their loops.
    for k in (0, len(expected[0]) - 1):
        assert sampling.sample_compute_location(random.Random(0), sch.func, block, k) == (
            k, expected[0][k])


def _output_read_by_another_stage():
    """scale's output is a function parameter read by shift: the screen passes shift's loops
    (they are placed right), but compute_at refuses to move a stage that writes an output."""
    X = te.placeholder((6, 5), "float32", name="X")
    a = te.compute((6, 5), lambda i, j: X[i, j] * 2.0, name="scale")
    b = te.compute((6, 5), lambda i, j: a[i, j] + 1.0, name="shift")
    return te.create_prim_func([X, a, b])


def test_a_block_that_cannot_move_lists_no_loops(fresh_probes, monkeypatch):
    func = _output_read_by_another_stage()
    probe = sampling._probe(func, "scale")
    assert probe.loops and all(probe._screen())  # the screen alone would accept them
    assert sampling.compute_location_candidates(func, "scale") == ([], False)
    for seed in range(6):
        sampling._PROBES.clear()
        fast_rng, slow_rng = random.Random(seed), random.Random(seed)
        fast = sampling.sample_compute_location(fast_rng, func, "scale")
        sampling._PROBES.clear()
        monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", False)
        slow = sampling.sample_compute_location(slow_rng, func, "scale")
        monkeypatch.setattr(sampling, "SCREEN_LOCATIONS", True)
        assert fast == slow == (-1, "root")
        assert fast_rng.getstate() == slow_rng.getstate()
    sampling._PROBES.clear()
    with pytest.raises(ScheduleError, match="is not one of"):
        sampling.sample_compute_location(random.Random(0), func, "scale", 0)


def test_sampled_location_reuses_the_trial_result(fresh_probes):
    func = WORKLOADS["conv2d"]
    trace = DesignSpace(func, TARGET).sample(0).trace
    step = _location_steps(trace)[0]
    sch = _before_location(func, trace, step)
    block_rv = sch.get_block(sch._symbols[trace[step].inputs[0]])
    location = sch.sample_compute_location(block_rv, decision=0)
    target = sch.get(location).loop_var
    probed = sampling.probed_result(sch.func, sch._symbols[block_rv.name], target)
    assert probed is not None
    before = sch.func
    sch.compute_at(block_rv, location)
    assert sch.func is probed
    redone = block_primitives()["compute_at"](before, sch._symbols[block_rv.name], target)
    assert structural_equal(probed, redone)


def test_bad_location_decisions_are_still_refused(fresh_probes):
    func = WORKLOADS["conv2d"]
    trace = DesignSpace(func, TARGET).sample(0).trace
    step = _location_steps(trace)[0]
    sch = _before_location(func, trace, step)
    block = sch._symbols[trace[step].inputs[0]]
    loops, can_inline = sampling.compute_location_candidates(sch.func, block)
    for bad in (len(loops), -3, 1.0, "0") + (() if can_inline else (-2,)):
        with pytest.raises(ScheduleError, match="is not one of"):
            sampling.sample_compute_location(random.Random(0), sch.func, block, bad)


# -- dependence shortcuts --------------------------------------------------------------------

def _reference_determines(atoms, x, dom):
    """The point-by-point injectivity check (the definition _determines vectorises)."""
    if any(a is x for a in atoms):
        return True
    if not atoms or x not in dom:
        return False
    lo, hi = dom[x]
    if hi - lo + 1 > dependence._MAX_ENUMERATE:
        return False
    seen = set()
    for value in range(lo, hi + 1):
        key = tuple(dependence._eval_int(a, {x: value}) for a in atoms)
        if None in key or key in seen:
            return False
        seen.add(key)
    return True


def _random_atom(rng: random.Random, x: Var, depth: int = 0):
    if depth > 2 or rng.random() < 0.3:
        return x if rng.random() < 0.7 else IntImm(rng.randint(-3, 9))
    op = rng.choice(["+", "-", "*", "//", "%", "min", "max"])
    return BinOp(op, _random_atom(rng, x, depth + 1), _random_atom(rng, x, depth + 1))


def test_vectorised_injectivity_matches_enumeration():
    rng = random.Random(7)
    x, y = Var("x"), Var("y")
    for _ in range(400):
        atoms = [_random_atom(rng, x) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.05:
            atoms.append(BinOp("+", x, y))  # a free variable: no value anywhere
        lo = rng.randint(-6, 4)
        dom = {x: (lo, lo + rng.randint(-1, 70))}
        assert dependence._determines(atoms, x, dom) == _reference_determines(atoms, x, dom), \
            (atoms, dom)


def test_distinct_rows_matches_a_set():
    rng = np.random.default_rng(3)
    for _ in range(500):
        count = int(rng.integers(1, 40))
        columns = [rng.integers(-4, int(rng.integers(1, 90)), size=count).astype(np.int64)
                   for _ in range(int(rng.integers(1, 4)))]
        expected = len(set(zip(*[c.tolist() for c in columns]))) == count
        assert dependence._distinct_rows(columns, count) == expected


def test_counted_budget_matches_enumeration():
    rng = random.Random(11)
    for _ in range(300):
        loops = [For(Var(f"i{k}"), IntImm(rng.randint(0, 3)), IntImm(rng.randint(0, 9)),
                     "serial", Evaluate(IntImm(0))) for k in range(rng.randint(0, 4))]
        budget = rng.randint(0, 300)
        built, counted = [budget], [budget]
        points = dependence._points(loops, {}, built)
        fits = dependence._points_fit(loops, {}, counted)
        assert (points is not None) == fits
        if fits:
            assert built == counted
            total, last = dependence._points_cost(loops)
            assert budget - total == built[0] and last == len(points)


def _random_index(rng: random.Random, variables: list, depth: int = 0):
    if depth > 2 or rng.random() < 0.35:
        return rng.choice(variables) if rng.random() < 0.8 else IntImm(rng.randint(-2, 5))
    op = rng.choice(["+", "+", "-", "*", "//", "%", "min", "max"])
    return BinOp(op, _random_index(rng, variables, depth + 1),
                 _random_index(rng, variables, depth + 1))


def _random_nest(rng: random.Random, names: str, bound: list, extents=(0, 1, 2, 3, 4, 5)):
    loops = []
    for name in names:
        var = Var(name)
        # Some lower bounds depend on the enclosing loops, as after compute_at.
        lo = (_random_index(rng, bound, 1) if bound and rng.random() < 0.3
              else IntImm(rng.randint(0, 2)))
        loops.append(For(var, lo, IntImm(rng.choice(extents)), "serial",
                         Evaluate(IntImm(0))))
        bound = bound + [var]
    return loops, bound


def test_vectorised_exact_dependence_matches_the_pointwise_check():
    rng = random.Random(5)
    answers = []
    for _ in range(600):
        head, bound = _random_nest(rng, "abx"[3 - rng.randint(1, 3):], [])
        *outer, loop = head
        accesses = []
        for side in "wr":
            inner, names = _random_nest(rng, [f"{side}{k}" for k in range(rng.randint(0, 2))],
                                        bound)
            dims = rng.randint(0, 2)
            index = tuple(_random_index(rng, names) for _ in range(dims))
            pred = None
            if rng.random() < 0.3:
                pred = Cmp(rng.choice(["<", "!=", ">="]), _random_index(rng, names),
                           IntImm(rng.randint(0, 4)))
            accesses.append((None, index, pred, inner))
        if len(accesses[0][1]) != len(accesses[1][1]):
            accesses[1] = (None, accesses[0][1], accesses[1][2], accesses[1][3])
        w, r = accesses
        expected = dependence._exact_pointwise(outer, loop, w, r)
        assert dependence._exact_independent(outer, loop, w, r) == expected, (head, w, r)
        answers.append(expected)
    # The cases cover every answer, including conflicts and undecided points.
    assert {True, False, None} <= set(answers), answers


def test_dependence_answers_survive_caching():
    sch = DesignSpace(WORKLOADS["matmul"], TARGET).sample(2).schedule
    body = sch.func.body
    loops = collect(body, For)
    first = [dependence.carried_dependence(body, lp, outer=tree.find_loop(sch.func,
                                                                          lp.loop_var).loops)
             for lp in loops]
    dependence._DEPENDENCES._entries.clear()
    dependence._ACCESSES._entries.clear()
    dependence._RENAMINGS._entries.clear()
    again = [dependence.carried_dependence(body, lp, outer=tree.find_loop(sch.func,
                                                                          lp.loop_var).loops)
             for lp in loops]
    assert first == again


# -- tree and visitor shortcuts --------------------------------------------------------------

def _reference_replace(func, old, new):
    """tree.replace as one full transform (the general form of the path-only rebuild)."""
    replacement = new if new is not None else SeqStmt(())

    def fn(n):
        if n is old:
            return replacement
        if isinstance(n, SeqStmt) and any(isinstance(s, SeqStmt) and not s.stmts
                                          for s in n.stmts):
            return SeqStmt(tuple(s for s in n.stmts
                                 if not (isinstance(s, SeqStmt) and not s.stmts)))
        return None

    return func.with_body(transform(func.body, fn))


def test_path_replace_matches_a_full_transform():
    func = DesignSpace(WORKLOADS["conv2d"], TARGET).sample(3).func
    stmts = [n for n in collect(func.body, Stmt) if n is not func.body]
    assert len(stmts) > 20
    for node in stmts:
        for new in (None, Evaluate(IntImm(1))):
            got = tree.replace(func, node, new)
            assert structural_equal(got, _reference_replace(func, node, new))
    with pytest.raises(ScheduleError, match="not found"):
        tree.replace(func, Evaluate(IntImm(5)), None)


def test_lookups_match_a_full_walk():
    func = DesignSpace(WORKLOADS["conv2d"], TARGET).sample(2).func
    paths = {}

    def visit(n, path):
        paths.setdefault(id(n), list(path))
        for c in [c for c in children(n) if isinstance(c, Stmt)]:
            visit(c, path + [n])

    visit(func.body, [])
    for loop in collect(func.body, For):
        found = tree.find_loop(func, loop.loop_var)
        assert found.node is loop and found.path == paths[id(loop)]
    for loc in tree.all_blocks(func):
        again = tree.find_block(func, loc.node.block.name)
        assert again.node is loc.node and again.path == paths[id(loc.node)]


def test_statement_collect_and_uses_var_match_a_walk():
    func = DesignSpace(WORKLOADS["matmul"], TARGET).sample(1).func

    def walked(node, cls):
        out = []
        walk(node, lambda n: out.append(n) if isinstance(n, cls) else None)
        return out

    for cls in (For, SeqStmt, Stmt):
        got, want = collect(func.body, cls), walked(func.body, cls)
        assert len(got) == len(want) and all(a is b for a, b in zip(got, want))
    for loop in collect(func.body, For):
        var = loop.loop_var
        want = []
        walk(loop.body, lambda n: want.append(True) if n is var else None)
        assert uses_var(loop.body, var) == bool(want)
    assert not uses_var(func.body, Var("unused"))


def test_memoised_fuse_returns_the_first_result_and_still_refuses():
    sch = DesignSpace(WORKLOADS["matmul"], TARGET).sample(0).schedule
    func = sch.func
    nest = next(lp for lp in collect(func.body, For)
                if isinstance(lp.body, For) and lp.kind == "serial" and lp.body.kind == "serial")
    first = loop_ops.fuse(func, [nest.loop_var, nest.body.loop_var])
    assert loop_ops.fuse(func, [nest.loop_var, nest.body.loop_var]) is first
    for _ in range(2):
        with pytest.raises(ScheduleError):
            loop_ops.fuse(func, [nest.body.loop_var, nest.loop_var])
