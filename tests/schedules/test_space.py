"""The design space: every operator of the registry and a few fused te functions sample into
programs that match numpy (interpreter and LLVM), traces round-trip through JSON, sampling is
reproducible, and the matmul space can express the hand-written benchmark schedule."""
from __future__ import annotations

import math

import numpy as np
import pytest

import autotune
from schedules import Schedule, ScheduleError, Trace, tree
from schedules.postproc import strip_postproc
from schedules.space import DesignSpace, generate_design_space
from tensor_ir import interp, te
from tensor_ir.func import structural_equal
from tensor_ir.ops import registry
from tensor_ir.stmt import PARALLEL, VECTORIZED, For
from tensor_ir.target import Target
from tensor_ir.visitor import collect

TARGET = Target("llvm -num-cores 2 -vector-width 512")
CASES = list(registry.cases())


def _run_llvm(func, inputs):
    out = np.zeros(func.params[-1].const_shape, func.params[-1].dtype)
    autotune.build(func)(*inputs, out)
    return out


@pytest.mark.parametrize("spec,config", CASES,
                         ids=[f"{s.name}-{s.config_id(c)}" for s, c in CASES])
def test_every_operator_samples_correct_programs(spec, config):
    func = spec.func(config)
    space = DesignSpace(func, TARGET)
    assert space.sketches
    inputs = spec.inputs(func, seed=0)
    expected = spec.expected(config, inputs)
    for index in range(len(space.sketches)):
        for seed in (0, 1):
            cand = space.sample(seed, sketch=index)
            (got,) = interp.evaluate(cand.func, *inputs)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
            if seed == 0:
                np.testing.assert_allclose(_run_llvm(cand.func, inputs), expected,
                                           rtol=1e-4, atol=1e-4)


def _fused_matmul_bias_relu(m=24, n=40, k=20):
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    bias = te.placeholder((n,), "float32", name="bias")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute((m, n), lambda i, j: te.max(D[i, j], 0.0), name="E")
    return te.create_prim_func([A, B, bias, E]), lambda a, b, c: np.maximum(a @ b + c, 0)


def _fused_conv_bias_relu(c=3, h=10, w=9, f=4):
    X = te.placeholder((1, c, h, w), "float32", name="X")
    W = te.placeholder((f, c, 3, 3), "float32", name="W")
    bias = te.placeholder((f,), "float32", name="bias")
    P = te.compute((1, c, h + 2, w + 2), lambda b, ci, y, x: te.if_then_else(
        te.all(y >= 1, y < h + 1, x >= 1, x < w + 1), X[b, ci, y - 1, x - 1], 0.0), name="pad")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    Y = te.compute((1, f, h, w), lambda b, fo, y, x: te.sum(
        P[b, rc, y + ry, x + rx] * W[fo, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    Z = te.compute((1, f, h, w), lambda b, fo, y, x: te.max(Y[b, fo, y, x] + bias[fo], 0.0),
                   name="out")

    def ref(x, wt, bs):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((1, f, h, w), np.float32)
        for dy in range(3):
            for dx in range(3):
                out += np.einsum("bchw,fc->bfhw", xp[:, :, dy:dy + h, dx:dx + w],
                                 wt[:, :, dy, dx])
        return np.maximum(out + bs[None, :, None, None], 0)

    return te.create_prim_func([X, W, bias, Z]), ref


def _fused_softmax_of_matmul(m=6, n=40, k=8):
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    r1 = te.reduce_axis(n, name="r1")
    mx = te.compute((m,), lambda i: te.max(C[i, r1], axis=r1), name="mx")
    e = te.compute((m, n), lambda i, j: te.exp(C[i, j] - mx[i]), name="e")
    r2 = te.reduce_axis(n, name="r2")
    s = te.compute((m,), lambda i: te.sum(e[i, r2], axis=r2), name="s")
    y = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="y")

    def ref(a, b):
        z = a @ b
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    return te.create_prim_func([A, B, y]), ref


FUSED = {"matmul_bias_relu": _fused_matmul_bias_relu,
         "conv_bias_relu": _fused_conv_bias_relu,
         "softmax_of_matmul": _fused_softmax_of_matmul}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_te_functions(name):
    func, ref = FUSED[name]()
    space = DesignSpace(func, TARGET)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, b.const_shape).astype(b.dtype) for b in func.params[:-1]]
    expected = ref(*inputs)
    for index in range(len(space.sketches)):
        for seed in (0, 1, 2):
            cand = space.sample(seed, sketch=index)
            (got,) = interp.evaluate(cand.func, *inputs)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(_run_llvm(cand.func, inputs), expected, rtol=1e-4,
                                   atol=1e-4)


def test_traces_round_trip_and_sampling_is_reproducible():
    func, _ = _fused_matmul_bias_relu()
    space = DesignSpace(func, TARGET)
    for seed in range(3):
        cand = space.sample(seed)
        again = space.sample(seed)
        assert cand.final_trace == again.final_trace
        assert structural_equal(cand.func, again.func)
        # The final trace alone rebuilds the program (no post-processors needed) ...
        final = Trace.from_json(cand.final_trace.to_text())
        assert structural_equal(final.apply(func).func, cand.func)
        # ... and the decided trace, post-processed, does too.
        decided = Trace.from_json(cand.trace.to_json())
        assert decided == strip_postproc(final)
        replayed = space.replay(decided)
        assert structural_equal(replayed.func, cand.func)
        # A final trace given to replay is cut back at the marker first.
        assert structural_equal(space.replay(final).func, cand.func)
    texts = {space.sample(seed).final_trace.to_text() for seed in range(6)}
    assert len(texts) > 1


def test_mutated_decisions_replay():
    func, _ = _fused_matmul_bias_relu()
    space = DesignSpace(func, TARGET)
    cand = space.sample(0)
    # The rows of C (extent 24).  The 20-long reduction is short, so the tiles share an
    # accumulator budget: the new decision keeps the rows out of it.
    index = next(k for k, inst in enumerate(cand.trace) if inst.kind == "sample_perfect_tile"
                 and math.prod(inst.decision) == 24)
    mutated = cand.trace.with_decision(index, [2, 12, 1, 1])
    out = space.replay(mutated)
    assert out is not None
    assert out.trace[index].decision == (2, 12, 1, 1)
    # An impossible decision is refused, not raised.
    assert space.replay(cand.trace.with_decision(index, [5, 1, 1, 1])) is None
    # A dropped decision is sampled afresh.
    fresh = space.replay(cand.trace.with_decision(index, None), seed=7)
    assert fresh is not None and fresh.trace[index].decision is not None


def test_hand_written_template():
    func, ref = _fused_matmul_bias_relu()

    def template(sch: Schedule):
        c = sch.get_block("C")
        i, j, k = sch.get_loops(c)
        io, ii = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8))
        jo, ji = sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=16))
        sch.reorder(io, jo, k, ii, ji)
        root = sch.get_block("root")
        sch.annotate(root, "meta_schedule.vectorize", 16)
        sch.annotate(root, "meta_schedule.parallel",
                     sch.sample_categorical([1, 4], [0.5, 0.5]))

    space = DesignSpace(func, TARGET, template=template)
    assert len(space.sketches) == 1
    assert all(inst.decision is None for inst in space.sketches[0])
    rng = np.random.default_rng(1)
    inputs = [rng.uniform(-1, 1, b.const_shape).astype(b.dtype) for b in func.params[:-1]]
    seen = set()
    for seed in range(4):
        cand = space.sample(seed)
        seen.add(cand.trace.to_text())
        (got,) = interp.evaluate(cand.func, *inputs)
        np.testing.assert_allclose(got, ref(*inputs), rtol=1e-4, atol=1e-4)
    assert len(seen) > 1
    assert len(generate_design_space(func, TARGET, template=[template, template])) == 2

    def broken(sch):
        sch.get_block("nope")

    with pytest.raises(ScheduleError, match="template broken failed"):
        DesignSpace(func, TARGET, template=broken)
    with pytest.raises(ScheduleError, match="rules or a template"):
        DesignSpace(func, TARGET, rules=[], template=template)


def test_sample_gives_up_with_a_message():
    func, _ = _fused_matmul_bias_relu()

    def gpu_only(sch):
        # Every program of this template binds a thread axis, which a CPU target rejects.
        i, _, _ = sch.get_loops(sch.get_block("C"))
        sch.bind(sch.split(i, sch.sample_perfect_tile(i, n=2))[0], "threadIdx.x")

    space = DesignSpace(func, TARGET, template=gpu_only, max_tries=3)
    with pytest.raises(ScheduleError, match="could not sample .* in 3 tries.*rejected"):
        space.sample(0)
    assert space.replay(space.sketches[0], seed=0) is None
    with pytest.raises(ScheduleError, match="no sketch 5"):
        space.sample(0, sketch=5)


def _hand_structure_decisions(sketch: Trace, m: int, n: int, k: int):
    """Decisions that give the benchmark's schedule: 8-row x 32-column register tile, the
    row and column blocks as S0, k unsplit, parallel extent 32, unroll step 512."""
    decisions = {}
    # The loops are told apart by their number of levels (sampled innermost loop first).
    tiles = {inst.attrs["n"]: i for i, inst in enumerate(sketch)
             if inst.kind == "sample_perfect_tile"}
    # The categorical samples are told apart by the annotation each feeds.
    feeds = {inst.inputs[1]: inst.attrs["key"] for inst in sketch
             if inst.kind == "annotate" and len(inst.inputs) > 1}
    cats = {feeds[inst.outputs[0]]: i for i, inst in enumerate(sketch)
            if inst.kind == "sample_categorical"}
    decisions[tiles[4]] = [m // 8, 1, 1, 8]        # i
    decisions[tiles[3]] = [n // 32, 1, 1]          # j // 32 (the lanes split off: 32)
    decisions[tiles[2]] = [k, 1]                   # k
    decisions[cats["meta_schedule.parallel"]] = 3  # parallel extent 16 * cores = 32
    decisions[cats["meta_schedule.unroll_explicit"]] = 3  # unroll step 512
    decisions[cats["pragma_prefetch_bytes"]] = 0   # no software prefetch
    trace = sketch
    for index, decision in decisions.items():
        trace = trace.with_decision(index, decision)
    return trace


def _write_back_level(sketch: Trace) -> int:
    """1 when the write-back sits right after the S0 loops (the benchmark's choice)."""
    reorder = next(inst for inst in sketch if inst.kind == "reorder")
    at = next(inst for inst in sketch if inst.kind == "reverse_compute_at")
    return 1 if at.inputs[1] == reorder.inputs[1] else 2


def test_matmul_space_expresses_the_benchmark_schedule():
    m = n = k = 512
    func = registry.get("matmul").func(dict(M=m, N=n, K=k))
    space = DesignSpace(func, TARGET)
    packed = [i for i, s in enumerate(space.sketches)
              if any(inst.kind == "pack_layout" for inst in s) and _write_back_level(s) == 1]
    assert len(packed) == 1
    trace = _hand_structure_decisions(space.sketches[packed[0]], m, n, k)
    cand = space.replay(trace)
    assert cand is not None
    final = cand.func
    root = tree.find_block(final, "root").node.block
    allocs = {b.name: b for b in root.alloc_buffers}
    assert allocs["B_packed"].const_shape == (n // 32, k, 32)       # packed B panels
    assert allocs["C_local"].scope == "local"                       # register accumulator
    loc = tree.find_block(final, "C")
    loops = loc.loops
    assert loops[0].kind == PARALLEL                                # parallel outer loop
    assert loops[0].extent.value >= 32
    assert loops[-1].kind == VECTORIZED and loops[-1].extent.value == 32  # vector columns
    assert loops[-2].extent.value == 8                              # 8 rows per tile
    assert any(dict(lp.annotations).get("pragma_auto_unroll_max_step") == 512
               for lp in collect(final.body, For))                  # rows unrolled
    # The write-back and the init are vectorised too, under the same parallel loop.
    for name in ("C_local", "C_init"):
        inner = tree.find_block(final, name).loops
        assert inner[0] is loops[0] and inner[-1].kind == VECTORIZED
    # And the same decisions on a small matmul compute the right thing (a reduction long
    # enough that the accumulator tile is not bounded by the registers).
    small = registry.get("matmul").func(dict(M=64, N=64, K=96))
    small_space = DesignSpace(small, TARGET)
    index = [i for i, s in enumerate(small_space.sketches)
             if any(inst.kind == "pack_layout" for inst in s) and _write_back_level(s) == 1][0]
    cand = small_space.replay(_hand_structure_decisions(small_space.sketches[index], 64, 64, 96))
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 96)).astype("float32")
    b = rng.uniform(-1, 1, (96, 64)).astype("float32")
    np.testing.assert_allclose(_run_llvm(cand.func, [a, b]), a @ b, rtol=1e-4, atol=1e-4)
