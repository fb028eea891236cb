"""Loop primitives and annotations: numeric checks (interpreter and LLVM), JSON round trips,
and one negative test per precondition."""
from __future__ import annotations

import pytest

import autotune

from schedules import Schedule, ScheduleError, Trace
from tensor_ir.func import structural_equal
from tensor_ir.stmt import For

from .workloads import (
    check_interp, check_llvm, conv2d, elementwise_chain, layer_norm, matmul, matmul_relu, softmax,
)


def assert_roundtrip(sch: Schedule, func) -> None:
    again = Trace.from_json(sch.trace.to_json()).apply(func)
    assert structural_equal(again.func, sch.func)
    assert again.trace.to_json() == sch.trace.to_json()


def assert_unchanged(sch: Schedule, action) -> ScheduleError:
    func, trace = sch.func, sch.trace
    with pytest.raises(ScheduleError) as info:
        action()
    assert sch.func is func
    assert sch.trace == trace
    return info.value


def loop_of(sch, rv) -> For:
    return sch.get(rv)


# -- positive schedules: name -> (workload, schedule function, use LLVM) ----------------------

def s_split_divisible(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])


def s_split_guarded(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(j, [5, None])          # 12 -> 5 x 3 = 15: guarded
    sch.split(k, [None, 2, 2])       # reduce 6 -> 2 x 2 x 2 = 8: guarded reduce loop


def s_fuse_all(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.fuse(i, j, k)


def s_reorder(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, j, i)


def s_tile_parallel_vectorize(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    (io, jo), (ii, ji) = sch.tile([i, j], [[None, 4], [3, 4]])
    sch.reorder(k, ii)
    f = sch.fuse(io, jo)
    sch.parallel(f)
    sch.vectorize(ji)
    sch.unroll(ii)
    sch.annotate(f, "pragma_auto_unroll_max_step", 16)
    sch.annotate(c, "note", [1, "two"])


def s_sampled(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=4)
    tj = sch.sample_perfect_tile(j, n=2, max_innermost_factor=4)
    i0, i1, i2 = sch.split(i, ti)
    j0, j1 = sch.split(j, tj)
    sch.reorder(i0, j0, i1, k, i2, j1)
    sch.parallel(sch.fuse(i0, j0))
    step = sch.sample_categorical([0, 16, 64], [0.2, 0.3, 0.5])
    sch.annotate(c, "pragma_auto_unroll_max_step", step)


def s_bind(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [2, None])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.x")
    sch.bind(j, "vthread")


def s_conv(sch):
    conv = sch.get_block("conv")
    b, f, y, x, rc, ry, rx = sch.get_loops(conv)
    yo, yi = sch.split(y, [None, 2])
    xo, xi = sch.split(x, [2, None])
    sch.reorder(yo, xo, rc, ry, rx, yi, xi)
    sch.parallel(sch.fuse(b, f))
    sch.vectorize(xi)
    pad = sch.get_block("pad")
    pb, pc, py, px = sch.get_loops(pad)
    sch.parallel(sch.fuse(pb, pc, py))
    sch.unroll(sch.split(px, [None, 4])[1])


def s_softmax(sch):
    for name in ("maxelem", "expsum"):
        i, k = sch.get_loops(sch.get_block(name))
        sch.parallel(i)
        sch.split(k, [None, 4])
    for name in ("exp", "norm"):
        i, j = sch.get_loops(sch.get_block(name))
        jo, ji = sch.split(j, [None, 4])
        sch.parallel(sch.fuse(i, jo))
        sch.vectorize(ji)


def s_layer_norm(sch):
    for name in ("rowsum", "rowsq"):
        i, k = sch.get_loops(sch.get_block(name))
        io, ii = sch.split(i, [None, 3])
        sch.parallel(io)
        sch.reorder(k, ii)
    i, j = sch.get_loops(sch.get_block("ln"))
    sch.reorder(j, i)
    sch.parallel(j)


def s_elementwise(sch):
    for name in ("scale", "shift", "relu"):
        i, j = sch.get_loops(sch.get_block(name))
        f = sch.fuse(i, j)
        fo, fi = sch.split(f, [None, 8])
        sch.parallel(fo)
        sch.vectorize(fi)
        sch.annotate(fo, "k", 1)
        sch.unannotate(fo, "k")


CASES = {
    "split_divisible": (matmul, s_split_divisible, True),
    "split_guarded": (matmul, s_split_guarded, True),
    "fuse_all": (matmul, s_fuse_all, True),
    "reorder": (matmul, s_reorder, True),
    "tile_parallel_vectorize": (matmul, s_tile_parallel_vectorize, True),
    "sampled": (matmul, s_sampled, True),
    "bind": (matmul, s_bind, False),  # thread axes are for GPU code; the interpreter runs them
    "conv2d": (conv2d, s_conv, True),
    "softmax": (softmax, s_softmax, True),
    "layer_norm": (layer_norm, s_layer_norm, True),
    "elementwise": (elementwise_chain, s_elementwise, True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_matches_numpy(name):
    make, schedule, use_llvm = CASES[name]
    func, ref = make()
    sch = Schedule(func, seed=3)
    schedule(sch)
    assert not structural_equal(sch.func, func)
    check_interp(sch.func, ref)
    if use_llvm:
        check_llvm(sch.func, ref)
    assert_roundtrip(sch, func)


def test_split_shapes_and_guard():
    func, _ = matmul()
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    parts = sch.split(j, [5, None])
    assert [loop_of(sch, p).extent.value for p in parts] == [5, 3]
    realize_pred = str(sch.func).count("where")
    assert realize_pred == 1
    # handles of loops the split did not replace still resolve
    assert loop_of(sch, i).extent.value == 8 and loop_of(sch, k).extent.value == 6
    with pytest.raises(ScheduleError, match="stale"):
        sch.get(j)


def test_fuse_and_reorder_structure():
    func, _ = matmul()
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    f = sch.fuse(i, j)
    assert loop_of(sch, f).extent.value == 96
    sch.reorder(k, f)
    loops = sch.get_loops(sch.get_block("C"))
    assert [loop_of(sch, lp).loop_var for lp in loops] == [sch.get(k).loop_var,
                                                           sch.get(f).loop_var]


def test_annotations_and_kinds():
    func, _ = matmul()
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.parallel(i)
    sch.vectorize(j)
    sch.unroll(k)
    sch.annotate(k, "pragma_auto_unroll_max_step", 64)
    sch.annotate(c, "schedule_rule", "none")
    assert [loop_of(sch, lp).kind for lp in (i, j, k)] == ["parallel", "vectorized", "unrolled"]
    assert loop_of(sch, k).annotation("pragma_auto_unroll_max_step") == 64
    assert sch.get(c).annotation("schedule_rule") == "none"
    sch.unannotate(c, "schedule_rule")
    assert sch.get(c).annotation("schedule_rule") is None
    assert_roundtrip(sch, func)


# -- negative tests: each precondition ----------------------------------------------------------

@pytest.fixture
def mm():
    func, _ = matmul()
    sch = Schedule(func)
    c = sch.get_block("C")
    return sch, c, sch.get_loops(c)


def test_split_factors_must_cover(mm):
    sch, c, (i, j, k) = mm
    err = assert_unchanged(sch, lambda: sch.split(i, [2, 3]))
    assert "do not cover" in str(err) and "i" in str(err)


@pytest.mark.parametrize("factors,match", [
    ([None, None], "at most one"), ([0, None], "positive"), ([2.5, None], "not an int"),
    ([8], "at least 2"), ([True, None], "not an int"),
])
def test_split_bad_factors(mm, factors, match):
    sch, c, (i, j, k) = mm
    assert_unchanged(sch, lambda: sch.split(i, factors))
    with pytest.raises(ScheduleError, match=match):
        sch.split(i, factors)


def test_fuse_not_adjacent(mm):
    sch, c, (i, j, k) = mm
    err = assert_unchanged(sch, lambda: sch.fuse(i, k))
    assert "not adjacent" in str(err)
    assert_unchanged(sch, lambda: sch.fuse(j, i))      # inner before outer
    assert_unchanged(sch, lambda: sch.fuse(i, i))      # twice
    assert_unchanged(sch, lambda: sch.fuse(i))         # a single loop


def test_fuse_across_blocks():
    func, _ = matmul_relu()
    sch = Schedule(func)
    ci = sch.get_loops(sch.get_block("C"))[0]
    di = sch.get_loops(sch.get_block("D"))[0]
    assert_unchanged(sch, lambda: sch.fuse(ci, di))


def test_reorder_not_one_nest():
    func, _ = matmul_relu()
    sch = Schedule(func)
    ci, cj, ck = sch.get_loops(sch.get_block("C"))
    di, dj = sch.get_loops(sch.get_block("D"))
    err = assert_unchanged(sch, lambda: sch.reorder(cj, di))
    assert "not in one nest" in str(err)
    assert_unchanged(sch, lambda: sch.reorder(ci, ci))


def test_reorder_imperfect_nest():
    func, _ = matmul_relu()
    sch = Schedule(func)
    d = sch.get_block("D")
    ci, cj, ck = sch.get_loops(sch.get_block("C"))
    sch.reverse_compute_at(d, ci)           # loop ci now holds C's j loop and D's loop
    inner = sch.get_loops(d)
    err = assert_unchanged(sch, lambda: sch.reorder(inner[-1], ci))
    assert "perfectly nested" in str(err)


def test_parallel_reduce_loop(mm):
    sch, c, (i, j, k) = mm
    err = assert_unchanged(sch, lambda: sch.parallel(k))
    assert "reduce" in str(err) and "block C" in str(err) and "loop k" in str(err)
    assert_unchanged(sch, lambda: sch.vectorize(k))
    # A reduce loop bound to threadIdx is a cross-thread reduction (legal on a GPU); blocks
    # cannot combine partial results.
    assert_unchanged(sch, lambda: sch.bind(k, "blockIdx.x"))
    f = sch.fuse(i, j, k)
    assert_unchanged(sch, lambda: sch.parallel(f))


def test_parallel_over_recomputed_producer_is_private():
    # A is computed at B's loop for elements i and i+1: neighbouring iterations write the same
    # elements of A, but lowering gives each iteration its own compacted copy of A, so the
    # loop may run in parallel (and the result is unchanged).
    import numpy as np

    from tensor_ir import te
    from tensor_ir.interp import evaluate

    X = te.placeholder((6,), "float32", name="X")
    A = te.compute((6,), lambda i: X[i] * 2.0, name="A")
    B = te.compute((5,), lambda i: A[i + 1] + A[i], name="B")
    func = te.create_prim_func([X, B])
    sch = Schedule(func)
    a, b = sch.get_block("A"), sch.get_block("B")
    (bi,) = sch.get_loops(b)
    sch.compute_at(a, bi)                   # A computes elements i, i+1 at iteration i
    (bi,) = sch.get_loops(b)[:1]
    sch.parallel(bi)
    x = np.arange(6, dtype="float32")
    expected = 2 * x[1:] + 2 * x[:-1]
    np.testing.assert_allclose(evaluate(sch.func, x)[0], expected)
    out = np.empty(5, "float32")
    autotune.build(sch.func)(x, out)
    np.testing.assert_allclose(out, expected)


def test_vectorize_over_recomputed_producer_carries_a_dependence():
    # The same program as above, vectorized instead: the lanes of a vectorized loop share one
    # copy of A (no allocation lives inside a vectorized loop), so neighbouring lanes write the
    # elements another lane reads -- a real dependence.
    from tensor_ir import te

    X = te.placeholder((6,), "float32", name="X")
    A = te.compute((6,), lambda i: X[i] * 2.0, name="A")
    B = te.compute((5,), lambda i: A[i + 1] + A[i], name="B")
    sch = Schedule(te.create_prim_func([X, B]))
    a, b = sch.get_block("A"), sch.get_block("B")
    (bi,) = sch.get_loops(b)
    sch.compute_at(a, bi)
    (bi,) = sch.get_loops(b)[:1]
    err = assert_unchanged(sch, lambda: sch.vectorize(bi))
    assert "dependence" in str(err) and "buffer A" in str(err)


def test_parallel_twice_and_unroll_parallel(mm):
    sch, c, (i, j, k) = mm
    sch.parallel(i)
    assert_unchanged(sch, lambda: sch.parallel(i))
    assert_unchanged(sch, lambda: sch.unroll(i))
    assert_unchanged(sch, lambda: sch.split(i, [None, 2]))   # only serial loops restructure


def test_vectorize_non_constant_extent():
    from tensor_ir.expr import IntImm, Var

    from schedules.tree import replace

    func, _ = matmul()
    # Give the j loop a symbolic extent n.
    probe = Schedule(func)
    _, j0, _ = probe.get_loops(probe.get_block("C"))
    loop = probe.get(j0)
    symbolic = replace(func, loop, For(loop.loop_var, IntImm(0), Var("n"), loop.kind, loop.body))
    sch = Schedule(symbolic)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    err = assert_unchanged(sch, lambda: sch.vectorize(j))
    assert "non-constant extent" in str(err)
    assert_unchanged(sch, lambda: sch.split(j, [None, 4]))


def test_bind_conflicting_extents(mm):
    sch, c, (i, j, k) = mm
    sch.bind(i, "threadIdx.x")
    err = assert_unchanged(sch, lambda: sch.bind(j, "threadIdx.x"))
    assert "threadIdx.x" in str(err) and "extent" in str(err)
    assert_unchanged(sch, lambda: sch.bind(j, "warp.x"))


def test_annotate_errors(mm):
    sch, c, (i, j, k) = mm
    assert_unchanged(sch, lambda: sch.unannotate(i, "missing"))
    assert_unchanged(sch, lambda: sch.annotate(i, "bad", object()))
    assert_unchanged(sch, lambda: sch.annotate(i, "", 1))
    assert_unchanged(sch, lambda: sch.unannotate(c, "missing"))


def test_handles(mm):
    sch, c, (i, j, k) = mm
    assert_unchanged(sch, lambda: sch.get_block("nope"))
    assert_unchanged(sch, lambda: sch.split(c, [None, 2]))     # a block is not a loop
    err = assert_unchanged(sch, lambda: sch.split(type(i)("l99"), [None, 2]))
    assert "not created by this schedule" in str(err)
    copy = sch.copy()
    copy.split(i, [None, 2])
    assert loop_of(sch, i).extent.value == 8      # the original is untouched by the copy


def test_navigation():
    func, _ = softmax()
    sch = Schedule(func)
    e = sch.get_block("exp")
    assert [sch.get(b).name for b in sch.get_producers(e)] == ["maxelem"]
    assert [sch.get(b).name for b in sch.get_consumers(e)] == ["expsum", "norm"]
    root = sch.get_child_blocks(sch.get_block("root"))
    assert [sch.get(b).name for b in root] == ["maxelem", "exp", "expsum", "norm"]
    (i, j) = sch.get_loops(e)
    assert [sch.get(b).name for b in sch.get_child_blocks(i)] == ["exp"]
    assert_roundtrip(sch, func)
