"""The rfactor "stream" variant for batch-1 dense (GEMV): every decision combination of its
sketch builds through LLVM and matches numpy, for divisible and non-divisible shapes; its
programs keep R vector accumulators in registers (reduction loop outside R unrolled rows,
lanes innermost, rows in one parallel loop); batch > 1 gets no stream sketch."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import autotune
from schedules import Schedule, tree
from schedules.rules.rfactor import MAX_STREAM_ROWS, AddRFactor
from schedules.space import DesignSpace
from tensor_ir import interp, ops, te
from tensor_ir.lower import lower
from tensor_ir.stmt import PARALLEL, UNROLLED, VECTORIZED, Allocate, For
from tensor_ir.target import Target
from tensor_ir.visitor import collect

TARGET = Target("llvm -num-cores 2 -vector-width 512")


def _stream_sketch(space: DesignSpace) -> int:
    found = [i for i, t in enumerate(space.sketches) if '"stream"' in t.to_text()]
    assert len(found) == 1, f"expected one stream sketch, found {len(found)}"
    return found[0]


def _categoricals(trace) -> dict[int, tuple]:
    return {k: tuple(dict(inst.attrs)["candidates"]) for k, inst in enumerate(trace)
            if inst.kind == "sample_categorical"}


def _stream_decisions(space: DesignSpace, n: int, k: int):
    """(trace, index of the width decision, index of the row-count decision) of a sample of
    the stream sketch, found by their candidate lists."""
    rule = AddRFactor()
    rule.initialize(TARGET)
    cand = space.sample(0, sketch=_stream_sketch(space))
    cats = _categoricals(cand.trace)
    widths = tuple(rule._stream_factors(k))
    rows = tuple(rule._stream_rows(n))
    w_idx = [i for i, c in cats.items() if c == widths]
    r_idx = [i for i, c in cats.items() if c == rows and i not in w_idx]
    assert w_idx and r_idx, (cats, widths, rows)
    return cand.trace, w_idx[0], r_idx[0], widths, rows


def _dense_inputs(n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (1, k)).astype("float32")
    w = rng.uniform(-1, 1, (n, k)).astype("float32")
    return x, w


def _run(func, x, w, n):
    out = np.zeros((1, n), "float32")
    autotune.build(func)(x, w, out)
    return out


# (N rows, K reduction): divisible, row counts 3/5/6, prime rows (R = 1 only), a reduction
# with no whole-register divisor (half/quarter-register widths)
SHAPES = [(48, 128), (30, 96), (7, 64), (12, 100), (40, 48)]


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_every_stream_decision_matches_numpy(n, k):
    func = ops.dense(1, n, k)
    space = DesignSpace(func, TARGET)
    trace, w_idx, r_idx, widths, rows = _stream_decisions(space, n, k)
    assert all(n % r == 0 and r <= MAX_STREAM_ROWS for r in rows)
    assert all(k % w == 0 and w < k for w in widths)
    x, w = _dense_inputs(n, k)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    for wi, ri in itertools.product(range(len(widths)), range(len(rows))):
        cand = space.replay(trace.with_decision(w_idx, wi).with_decision(r_idx, ri))
        assert cand is not None, (widths[wi], rows[ri])
        np.testing.assert_allclose(_run(cand.func, x, w, n), ref, rtol=1e-4, atol=1e-4,
                                   err_msg=f"width {widths[wi]}, rows {rows[ri]}")


def test_no_stream_for_a_prime_reduction_but_the_space_stays_correct():
    n, k = 10, 67  # no divisor of 67 is a whole, half or quarter register
    func = ops.dense(1, n, k)
    space = DesignSpace(func, TARGET)
    assert not any('"stream"' in t.to_text() for t in space.sketches)
    x, w = _dense_inputs(n, k, seed=1)
    for index in range(len(space.sketches)):
        cand = space.sample(0, sketch=index)
        np.testing.assert_allclose(_run(cand.func, x, w, n), x @ w.T, rtol=1e-4, atol=1e-4)


def test_batched_dense_keeps_tiling():
    m, n, k = 4, 32, 64  # the weight is reused by 4 rows: no stream sketch
    func = ops.dense(m, n, k)
    space = DesignSpace(func, TARGET)
    assert not any('"stream"' in t.to_text() for t in space.sketches)
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (m, k)).astype("float32")
    w = rng.uniform(-1, 1, (n, k)).astype("float32")
    for index in range(len(space.sketches)):
        cand = space.sample(0, sketch=index)
        out = np.zeros((m, n), "float32")
        autotune.build(cand.func)(x, w, out)
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-4, atol=1e-4)


def _body_functions(ll: str) -> list[str]:
    """The text of each outlined parallel-loop body function of an LLVM module."""
    out = []
    for m in re.finditer(r"^define [^\n]*__par\d+_body\(", ll, flags=re.MULTILINE):
        end = ll.index("\n}\n", m.start())
        out.append(ll[m.start():end])
    return out


def test_space_produces_register_accumulators_for_gemv():
    n, k = 3072, 768
    func = ops.dense(1, n, k)
    space = DesignSpace(func, TARGET)
    trace, w_idx, r_idx, widths, rows = _stream_decisions(space, n, k)
    cand = space.replay(trace.with_decision(w_idx, widths.index(16))
                        .with_decision(r_idx, rows.index(4)))
    assert cand is not None
    lowered = lower(cand.func)
    # One parallel loop over row groups, the whole kernel inside it.
    top = [lp for lp in collect(lowered.body, For) if lp.kind == PARALLEL]
    assert len(top) == 1 and top[0].extent.value == n // 4
    # The partials are a [.., 4 rows, 16 lanes] buffer local to each row group ...
    (alloc,) = [a for a in collect(top[0].body, Allocate) if a.buffer.name.endswith("_rf")]
    assert [int(d.value) for d in alloc.buffer.shape][-2:] == [4, 16]
    # ... updated by: the reduction loop, then the 4 rows unrolled, the lanes vectorised.
    update = [lp for lp in collect(alloc.body, For)
              if lp.kind == UNROLLED and isinstance(lp.body, For)
              and lp.body.kind == VECTORIZED and lp.extent.value == 4]
    assert update, "no unrolled row loop around a vectorised lane loop"
    reduce_loops = [lp for lp in collect(alloc.body, For)
                    if lp.kind not in (UNROLLED, VECTORIZED) and lp.extent.value == k // 16]
    assert any(isinstance(lp.body, For) and lp.body in update for lp in reduce_loops)
    # In the compiled body the accumulators are SSA vector values (registers), not memory:
    # no stack slot, and one <16 x float> loop-carried value per row.
    kernel = autotune.build(cand.func)
    bodies = _body_functions(kernel.get_source("ll"))
    assert len(bodies) == 1
    assert "alloca" not in bodies[0]
    assert len(re.findall(r"phi <16 x float>", bodies[0])) >= 4
    x, w = _dense_inputs(n, k)
    np.testing.assert_allclose(_run(cand.func, x, w, n), x @ w.T, rtol=1e-3, atol=1e-3)


def test_stream_sketch_structure_in_the_rule():
    func = ops.dense(1, 48, 128)
    name = tree.all_blocks(func)[0].node.block.name
    rule = AddRFactor()
    rule.initialize(TARGET)

    out = rule.apply(Schedule(func, seed=0), name)
    streams = [s for s in out[1:]
               if any(dict(loc.node.block.annotations).get("meta_schedule.rfactor") == "stream"
                      for loc in tree.all_blocks(s.func))]
    assert len(streams) == 1
    sch = streams[0]
    final = tree.find_block(sch.func, name)
    # batch, row groups, rows of a group, lanes' sum
    assert len(final.loops) == 4
    rf = tree.find_block(sch.func, name + "_rf")
    inner = rf.loops[2:]  # under the row-group loop: batch copy, reduction, rows, lanes
    assert [lp.kind for lp in inner[-2:]] == [UNROLLED, "serial"]
    assert 128 % inner[-1].extent.value == 0 and inner[-1].extent.value % 16 == 0


def _batched_gemv(b: int, n: int, k: int):
    """y[b, n] = sum_k W[b, n, k] * x[k]: two spatial axes, one weight per batch entry (no
    reuse of W, x shared)."""
    W = te.placeholder((b, n, k), "float32", name="W")
    X = te.placeholder((k,), "float32", name="X")
    r = te.reduce_axis(k, name="k")
    Y = te.compute((b, n), lambda i, j: te.sum(W[i, j, r] * X[r], axis=r), name="Y")
    return te.create_prim_func([W, X, Y])


def _gemv_two_reductions(n: int, a: int, c: int):
    """y[n] = sum_{p, q} W[n, p, q] * X[p, q]: the reduction loops are fused first."""
    W = te.placeholder((n, a, c), "float32", name="W")
    X = te.placeholder((a, c), "float32", name="X")
    p = te.reduce_axis(a, name="p")
    q = te.reduce_axis(c, name="q")
    Y = te.compute((n,), lambda i: te.sum(W[i, p, q] * X[p, q], axis=[p, q]), name="Y")
    return te.create_prim_func([W, X, Y])


@pytest.mark.parametrize("case", ["batched", "two_reductions"])
def test_stream_on_other_nests(case):
    rng = np.random.default_rng(4)
    if case == "batched":
        func = _batched_gemv(3, 20, 64)
        w = rng.uniform(-1, 1, (3, 20, 64)).astype("float32")
        x = rng.uniform(-1, 1, (64,)).astype("float32")
        ref = np.einsum("bnk,k->bn", w, x)
    else:
        func = _gemv_two_reductions(12, 4, 24)
        w = rng.uniform(-1, 1, (12, 4, 24)).astype("float32")
        x = rng.uniform(-1, 1, (4, 24)).astype("float32")
        ref = np.einsum("npq,pq->n", w, x)
    space = DesignSpace(func, TARGET)
    index = _stream_sketch(space)
    for seed in range(4):
        cand = space.sample(seed, sketch=index)
        (got,) = interp.evaluate(cand.func, w, x)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        out = np.zeros(ref.shape, "float32")
        autotune.build(cand.func)(w, x, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
