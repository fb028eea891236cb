"""Design-space rules and post-processors, one at a time, on small workloads."""
from __future__ import annotations

import re

import numpy as np
import pytest

import autotune

from schedules import Schedule, ScheduleError, Trace, tree
from schedules.postproc import (
    POSTPROC_MARKER, DecomposeReductions, RewriteParallelVectorizeUnroll, VerifyCPU,
    apply_postprocs, default_postprocs, strip_postproc, verify_cpu, verify_gpu,
)
from schedules.rules import create, default_rules
from schedules.rules.auto_inline import AutoInline
from schedules.rules.multi_level_tiling import (
    PREFETCH_BYTES, PREFETCH_KEY, TILING_KEY, UNROLL_BY, UNROLL_BY_KEY, MultiLevelTiling,
)
from schedules.rules.packing import plan_packing
from schedules.rules.parallel_vectorize_unroll import (
    PARALLEL_KEY, UNROLL_KEY, VECTORIZE_KEY, ParallelVectorizeUnroll,
)
from schedules.rules.random_compute_location import RandomComputeLocation
from schedules.rules.rfactor import AddRFactor
from schedules.rules.transpose_tiling import TRANSPOSE_KEY, TransposeTiling
from schedules.space import DesignSpace
from tensor_ir import interp, ops, te
from tensor_ir.func import structural_equal
from tensor_ir.stmt import PARALLEL, VECTORIZED, Block, For
from tensor_ir.target import Target
from tensor_ir.visitor import collect

from .workloads import (
    check_interp, conv2d, elementwise_chain, matmul, matmul_relu, random_inputs,
)

TARGET = Target("llvm -num-cores 2 -vector-width 512")


def _init(rule):
    rule.initialize(TARGET)
    return rule


def _blocks(func) -> list[str]:
    return [loc.node.block.name for loc in tree.all_blocks(func)]


def _loops(func, block: str) -> list[For]:
    return tree.find_block(func, block).loops


# -- AutoInline ------------------------------------------------------------------------------
def test_auto_inline_folds_an_elementwise_chain():
    func, ref = elementwise_chain(4, 5)
    sch = Schedule(func)
    rule = _init(AutoInline())
    for name in reversed(_blocks(func)):
        (sch,) = rule.apply(sch, name)
    # Visiting from the output, each stage folds into its producer: one nest remains.
    assert len(_blocks(sch.func)) == 1
    check_interp(sch.func, ref)


def test_auto_inline_leaves_reductions_and_padding_alone():
    func, _ = conv2d(n=1, c=2, h=4, w=4, f=2, r=3, pad=1)
    sch = Schedule(func)
    rule = _init(AutoInline())
    for name in ("conv", "pad"):
        out = rule.apply(sch, name)
        assert out == [sch] and len(sch.trace) == 0
    assert AutoInline(inline_padding=True).apply(sch, "pad")[0] is not sch


def test_auto_inline_keeps_a_costly_stage_read_by_two_consumers():
    # softmax: exp feeds both the sum and the division; inlined it would be evaluated twice.
    func = ops.softmax((4, 10))
    rule = _init(AutoInline())
    sch = Schedule(func)
    assert rule.apply(sch, "T_softmax_exp") == [sch] and len(sch.trace) == 0
    # One consumer: nothing is recomputed, so it is inlined as any elementwise stage.
    A = te.placeholder((4, 3), "float32", name="A")
    B = te.compute((4, 3), lambda i, j: te.exp(A[i, j]), name="B")
    C = te.compute((4, 3), lambda i, j: B[i, j] + 1.0, name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    (out,) = rule.apply(sch, "B")
    assert _blocks(out.func) == ["C"]


def test_auto_inline_bias_add_into_relu_output():
    A = te.placeholder((4, 3), "float32", name="A")
    B = te.placeholder((3, 5), "float32", name="B")
    bias = te.placeholder((5,), "float32", name="bias")
    k = te.reduce_axis(3, name="k")
    C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((4, 5), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute((4, 5), lambda i, j: te.max(D[i, j], 0.0), name="E")
    func = te.create_prim_func([A, B, bias, E])
    sch = Schedule(func)
    rule = _init(AutoInline())
    for name in reversed(_blocks(func)):
        (sch,) = rule.apply(sch, name)
    assert _blocks(sch.func) == ["C", "D"]  # E folded into D, which now writes E


# -- MultiLevelTiling -------------------------------------------------------------------------
def test_multi_level_tiling_ssrsrs_order_and_sketches():
    func, ref = matmul(64, 64, 32)
    rule = _init(MultiLevelTiling())
    out = rule.apply(Schedule(func, seed=0), "C")
    assert len(out) == 4  # write-back after S0 / after S1, packed or not
    for sch in out:
        names = [lp.loop_var.name for lp in _loops(sch.func, "C")]
        kinds = ["R" if n.startswith("k") else "S" for n in names]
        collapsed = "".join(kinds)
        # S0 (i0 j0) S1 (i1 j1) R0 S2 (i2 j2) R1 S3 (i3 j3)
        assert collapsed == "SSSSRSSRSS", names
        block = tree.find_block(sch.func, "C").node.block
        assert dict(block.annotations)[TILING_KEY] == "SSRSRS"
        assert "C_local" in _blocks(sch.func)
        check_interp(sch.func, ref)
    packed = [s for s in out if any(i.kind == "pack_layout" for i in s.trace)]
    assert len(packed) == 2


def _panel_widths(out) -> list[int]:
    """The panel width of each packed sketch (the packed buffer's last dimension)."""
    widths = []
    for sch in out:
        for stmt in tree.find_block(sch.func, "root").node.block.alloc_buffers:
            if stmt.name.endswith("_packed"):
                widths.append(stmt.shape[-1].value)
    return widths


@pytest.mark.parametrize("n, widths", [(96, [32, 32, 48, 48]), (64, [32, 32]),
                                       (768, [32, 32, 48, 48])])
def test_multi_level_tiling_offers_three_register_panels_where_they_divide(n, widths):
    # Panels two AVX-512 registers wide always; three wide (8 rows x 48: 24 accumulators,
    # MLAS's register count) where 48 divides the columns.  Each samples correct programs
    # whose register tile is one panel wide.
    func, ref = matmul(16, n, 32)
    out = _init(MultiLevelTiling()).apply(Schedule(func, seed=0), "C")
    assert sorted(_panel_widths(out)) == widths
    for sch in out:
        if 48 in _panel_widths([sch]):
            assert _loops(sch.func, "C")[-1].extent.value == 48
            check_interp(sch.func, ref)


def _prefetch_samples(trace, candidates=PREFETCH_BYTES) -> list[int]:
    return [k for k, inst in enumerate(trace) if inst.kind == "sample_categorical"
            and list(dict(inst.attrs)["candidates"]) == list(candidates)]


def test_multi_level_tiling_samples_the_panel_prefetch_of_packed_sketches():
    from tensor_ir.codegen.llvm import PREFETCH_KEY as CODEGEN_KEY
    assert PREFETCH_KEY == CODEGEN_KEY
    func, ref = matmul(64, 96, 64)
    space = DesignSpace(func, TARGET)
    packed = [k for k, sk in enumerate(space.sketches)
              if any(i.kind == "pack_layout" for i in sk)]
    assert packed and len(packed) < len(space.sketches)
    for k, sketch in enumerate(space.sketches):
        assert len(_prefetch_samples(sketch)) == (k in packed)
    a, b = random_inputs(func, 3)
    for k in packed:
        # A candidate whose innermost reduction level walks (a level of one iteration is
        # folded away, leaving the annotation nothing to prefetch along).
        for distance, kernel, _ in _built_with_each(space, k, _prefetch_samples, PREFETCH_KEY,
                                                    PREFETCH_BYTES, 2, (a, b), ref):
            calls = len(re.findall(r'call void @"?llvm\.prefetch', kernel.get_source("ll-raw")))
            assert (calls > 0) == (distance > 0), (distance, calls)


def _built_with_each(space, k: int, samples, key: str, values, min_extent: int, args, ref):
    """Sketch ``k``'s first candidate whose innermost reduction loop has ``min_extent``
    iterations or more, built with each of ``values`` for the decision ``samples`` finds in
    its trace: checks that the annotation ``key`` sits on that loop (R1 of SSRSRS) with the
    value, and the results; yields ``(value, kernel, the loop's name)``."""
    cand = next(c for c in (space.sample(seed=k + 100 * s, sketch=k) for s in range(30))
                if [lp for lp in _loops(c.func, "C")
                    if lp.loop_var.name[0] == "k"][-1].extent.value >= min_extent)
    (index,) = samples(cand.trace)
    for decision, value in enumerate(values):
        got = space.replay(cand.trace.with_decision(index, decision))
        marked = [lp for lp in _loops(got.func, "C") if key in dict(lp.annotations)]
        assert [lp.annotation(key) for lp in marked] == [value]
        reduce_loops = [lp for lp in _loops(got.func, "C") if lp.loop_var.name[0] == "k"]
        assert marked[0] is reduce_loops[-1]
        kernel = autotune.build(got.func, TARGET)
        out = np.full((64, 96), np.nan, np.float32)
        kernel(*args, out)
        np.testing.assert_allclose(out, ref(*args), rtol=1e-4, atol=1e-4)
        yield value, kernel, reduce_loops[-1].loop_var.name


def test_multi_level_tiling_prefetch_options():
    func, _ = matmul(64, 64, 32)
    for rule, target in ((MultiLevelTiling(prefetch_bytes=()), TARGET),
                         (MultiLevelTiling(prefetch_bytes=(0,)), TARGET),
                         (MultiLevelTiling(), Target("opencl"))):
        rule.initialize(target)
        for sch in rule.apply(Schedule(func, seed=0), "C"):
            assert not _prefetch_samples(sch.trace)
    rule = _init(MultiLevelTiling(prefetch_bytes=(0, 4096)))
    sketches = rule.apply(Schedule(func, seed=0), "C")
    assert not any(_prefetch_samples(sch.trace) for sch in sketches)
    assert sum(len(_prefetch_samples(sch.trace, (0, 4096))) for sch in sketches) == 2
    for bad in ((-512,), (1.5,), (True,), ("1024",)):
        with pytest.raises(ScheduleError, match="prefetch_bytes"):
            MultiLevelTiling(prefetch_bytes=bad)


def _unroll_samples(trace, candidates=UNROLL_BY) -> list[int]:
    feeds = {inst.inputs[1]: dict(inst.attrs)["key"] for inst in trace
             if inst.kind == "annotate" and len(inst.inputs) > 1}
    return [k for k, inst in enumerate(trace) if inst.kind == "sample_categorical"
            and feeds.get(inst.outputs[0]) == UNROLL_BY_KEY
            and list(dict(inst.attrs)["candidates"]) == list(candidates)]


def test_multi_level_tiling_samples_copies_of_the_register_tile_step():
    from tensor_ir.codegen.llvm import UNROLL_BY_KEY as CODEGEN_KEY
    assert UNROLL_BY_KEY == CODEGEN_KEY
    func, ref = matmul(64, 96, 64)
    space = DesignSpace(func, TARGET)
    assert all(len(_unroll_samples(sketch)) == 1 for sketch in space.sketches)
    a, b = random_inputs(func, 3)
    for k in range(len(space.sketches)):
        # A candidate whose innermost reduction level has a few iterations to copy.
        for copies, kernel, name in _built_with_each(space, k, _unroll_samples, UNROLL_BY_KEY,
                                                     UNROLL_BY, 4, (a, b), ref):
            heads = re.findall(r'^"?([\w.]+)\.head"?:', kernel.get_source("ll-raw"), re.M)
            if copies == 1:
                assert not any(".by" in h for h in heads)
            else:
                # Copied, or unrolled whole where the candidate's auto-unroll step covers it.
                assert f"{name}.by{copies}" in heads or name not in heads, (copies, heads)


def test_multi_level_tiling_copies_the_last_reduction_that_walks():
    # A 1x1 convolution's window loops have one iteration each: the channel loop is the one
    # around the register tile once they fold away.
    func, ref = conv2d(c=64, h=8, w=8, f=16, r=1, pad=0)
    rule = _init(MultiLevelTiling())
    for sch in rule.apply(Schedule(func, seed=0), "conv"):
        (index,) = _unroll_samples(sch.trace)
        marked = [lp for lp in _loops(sch.func, "conv") if UNROLL_BY_KEY in dict(lp.annotations)]
        assert len(marked) == 1 and marked[0].loop_var.name.startswith("rc")
    # A 3x3 window walks: its last loop (rx) carries it.
    func, ref = conv2d(c=8, h=8, w=8, f=16)  # 72 steps: a long reduction
    for sch in rule.apply(Schedule(func, seed=0), "conv"):
        marked = [lp for lp in _loops(sch.func, "conv") if UNROLL_BY_KEY in dict(lp.annotations)]
        assert len(marked) == 1 and marked[0].loop_var.name.startswith("rx")


def test_multi_level_tiling_unroll_options():
    func, _ = matmul(64, 64, 64)
    assert all(_unroll_samples(sch.trace)
               for sch in _init(MultiLevelTiling()).apply(Schedule(func, seed=0), "C"))
    for rule, target in ((MultiLevelTiling(unroll_by=()), TARGET),
                         (MultiLevelTiling(unroll_by=(1,)), TARGET),
                         (MultiLevelTiling(), Target("opencl"))):
        rule.initialize(target)
        for sch in rule.apply(Schedule(func, seed=0), "C"):
            assert not _unroll_samples(sch.trace)
    # A short reduction (a pooling or depthwise window) has its tile in registers already.
    short, _ = matmul(64, 64, 9)
    assert not any(_unroll_samples(sch.trace)
                   for sch in _init(MultiLevelTiling()).apply(Schedule(short, seed=0), "C"))
    rule = _init(MultiLevelTiling(unroll_by=(2, 16)))
    sketches = rule.apply(Schedule(func, seed=0), "C")
    assert all(len(_unroll_samples(sch.trace, (2, 16))) == 1 for sch in sketches)
    for bad in ((0,), (1.5,), (True,), ("4",)):
        with pytest.raises(ScheduleError, match="unroll_by"):
            MultiLevelTiling(unroll_by=bad)


def test_multi_level_tiling_fuses_an_elementwise_consumer():
    func, ref = matmul_relu(8, 8, 4)
    out = _init(MultiLevelTiling(pack=False)).apply(Schedule(func, seed=1), "C")
    assert len(out) == 2
    for sch in out:
        assert "C_local" not in _blocks(sch.func)  # no cache: D is computed under the tile
        d_loops = {lp.loop_var for lp in _loops(sch.func, "D")}
        c_loops = [lp.loop_var for lp in _loops(sch.func, "C")]
        assert c_loops[0] in d_loops
        check_interp(sch.func, ref)


def test_multi_level_tiling_skips_blocks_without_reuse():
    rule = _init(MultiLevelTiling())
    func = ops.sum((6, 40), axis=1)
    sch = Schedule(func)
    name = _blocks(func)[0]
    assert rule.apply(sch, name) == [sch]
    func, _ = elementwise_chain()
    sch = Schedule(func)
    assert rule.apply(sch, "relu") == [sch]
    with pytest.raises(ScheduleError, match="structure"):
        MultiLevelTiling(structure="SXR")


def test_pack_plans():
    func = ops.matmul(8, 64, 8)
    blk = tree.find_block(func, "C").node.block
    j = blk.iter_vars[1].var
    plan = plan_packing(func, blk, j, 32)
    assert (plan.buffer, plan.dim, plan.panel_pos, plan.width) == ("B", 1, 0, 32)
    assert plan.index_map()(3, 70) == (2, 3, 6)
    dense = ops.dense(4, 64, 16)
    blk = tree.find_block(dense, _blocks(dense)[0]).node.block
    spatial = [iv.var for iv in blk.iter_vars if iv.kind == "spatial"]
    plan = plan_packing(dense, blk, spatial[-1], 16)
    assert plan is not None and plan.dim == 0  # W[j, k]: the gather becomes contiguous
    conv = ops.conv2d_nchw(1, 4, 8, 8, 8, 3, 3, padding=1)
    name = [n for n in _blocks(conv) if "pad" not in n][0]
    blk = tree.find_block(conv, name).node.block
    spatial = [iv.var for iv in blk.iter_vars if iv.kind == "spatial"]
    assert plan_packing(conv, blk, spatial[-1], 16) is None  # the weight does not use x


def _attention_scores(seq: int = 32, heads: int = 2, dim: int = 8):
    """O[b, h, i, j] = sum_d Q[b, i, h, d] * K[b, j, h, d] with the transposes as stages of
    their own (the attention-score batch matmul of the papers' operator table)."""
    q = te.placeholder((1, seq, heads, dim), "float32", name="query")
    k = te.placeholder((1, seq, heads, dim), "float32", name="value")
    q_t = te.compute((1, heads, seq, dim), lambda b, h, s, d: q[b, s, h, d], name="query_T")
    k_t = te.compute((1, heads, dim, seq), lambda b, h, d, s: k[b, s, h, d], name="value_T")
    r = te.reduce_axis(dim, "r")
    out = te.compute((1, heads, seq, seq), lambda b, h, i, j: te.sum(
        q_t[b, h, i, r] * k_t[b, h, r, j], axis=r), name="C")
    func = te.create_prim_func([q, k, out], name="attention_scores")
    return func, lambda a, b: np.einsum("bihd,bjhd->bhij", a, b)


def test_multi_level_tiling_packs_an_operand_read_through_a_transpose_stage():
    # Tiled before AutoInline reaches them, the block read the transposes (intermediates,
    # which packing leaves alone) and vectorised j over K[b, j, h, d]: a gather.  The rule
    # inlines such layout copies first, so K itself is packed into panels along j.
    func, ref = _attention_scores()
    rule = _init(MultiLevelTiling())
    out = rule.apply(Schedule(func, seed=1), "C")
    packed = [s for s in out if "value_pack" in _blocks(s.func)]
    assert packed, "no sketch packs the transposed operand"
    for sch in out:
        assert "value_T" not in _blocks(sch.func) and "query_T" not in _blocks(sch.func)
        check_interp(sch.func, ref)
    # AutoInline, reaching the (gone) transpose stages afterwards, leaves the schedule alone.
    inline = _init(AutoInline())
    assert inline.apply(packed[0], "value_T") == [packed[0]]


def _conv_bias_relu(stride: int, width: int, channels: int = 32):
    """NCHW 3x3 convolution (padding 1) + per-channel bias + relu, as a model's fused task."""
    X = te.placeholder((1, 8, width, width), "float32", name="X")
    W = te.placeholder((channels, 8, 3, 3), "float32", name="W")
    bias = te.placeholder((channels,), "float32", name="bias")
    P = te.compute((1, 8, width + 2, width + 2), lambda b, c, y, x: te.if_then_else(
        te.all(y >= 1, y <= width, x >= 1, x <= width), X[b, c, y - 1, x - 1], 0.0),
        name="pad")
    out = (width - 1) // stride + 1
    rc, ry, rx = te.reduce_axis(8, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    Y = te.compute((1, channels, out, out), lambda b, f, y, x: te.sum(
        P[b, rc, y * stride + ry, x * stride + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv")
    R = te.compute(Y.shape, lambda b, f, y, x: te.max(Y[b, f, y, x] + bias[f], 0.0),
                   name="relu")
    return te.create_prim_func([X, W, bias, R], name="conv_bias_relu")


def _vector_loop_of(func, block: str):
    loops = _loops(func, block)
    return loops[-1].loop_var.name


@pytest.mark.parametrize("stride, width", [(2, 9), (1, 7)])
def test_multi_level_tiling_vectorises_output_channels_of_a_poor_pixel_axis(stride, width):
    # A strided (gathering) or narrow (7 pixels) x loop is a poor vector axis: two more
    # sketches tile the output channels innermost, through packed weights.
    func = _conv_bias_relu(stride, width)
    rule = _init(MultiLevelTiling())
    out = rule.apply(Schedule(func, seed=2), "conv")
    assert len(out) == 4  # two write levels x (x innermost | channels innermost, packed)
    channel = [s for s in out if _vector_loop_of(s.func, "conv").startswith("f")]
    assert len(channel) == 2
    inputs = random_inputs(func, 0)
    (expected,) = interp.evaluate(func, *inputs)
    for sch in channel:
        assert any(i.kind == "pack_layout" for i in sch.trace)
        # Accumulators are whole vectors: the channel dimension of the local buffer is last.
        local = [buf for blk in collect(sch.func.body, Block) for buf in blk.alloc_buffers
                 if buf.name == "conv_local"]
        assert local and local[0].const_shape[-1] == 32
        # relu(+ bias) is folded into the write-back: no separate pass over the output.
        assert "relu" not in _blocks(sch.func)
        (got,) = interp.evaluate(sch.func, *inputs)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_multi_level_tiling_channel_sketches_sample_correct_programs():
    func = _conv_bias_relu(2, 9)
    space = DesignSpace(func, TARGET)
    inputs = random_inputs(func, 1)
    (expected,) = interp.evaluate(func, *inputs)
    channel_sketches = 0
    for k in range(len(space.sketches)):
        cand = space.sample(seed=k, sketch=k)
        if not _vector_loop_of(cand.func, "conv").startswith("f"):
            continue
        channel_sketches += 1
        assert any(lp.kind == VECTORIZED for lp in _loops(cand.func, "conv"))
        out = np.full(func.params[-1].const_shape, np.nan, np.float32)
        autotune.build(cand.func, TARGET)(*inputs, out)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert channel_sketches == 2


def test_multi_level_tiling_half_register_tiles_for_a_depthwise_row():
    # 24 pixels are no whole number of 16-lane registers: two more sketches fix the register
    # tile's width at 8 lanes.  Depthwise reads the input along the channels too, so no
    # channel-vectorised sketch is offered.
    func = ops.depthwise_conv2d_nchw(1, 16, 6, 24, 3, 3, padding=1)
    name = [n for n in _blocks(func) if "pad" not in n][0]
    for seed in range(4):
        out = _init(MultiLevelTiling()).apply(Schedule(func, seed=seed), name)
        assert len(out) == 4
        # Sketches come as (free width, half registers) x (write level 1, 2).
        assert [_loops(s.func, name)[-1].extent.value for s in out[2:]] == [8, 8]
    assert all(_vector_loop_of(s.func, name).startswith("x") for s in out)
    inputs = random_inputs(func, 0)
    (expected,) = interp.evaluate(func, *inputs)
    for sch in out:
        (got,) = interp.evaluate(sch.func, *inputs)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _accumulator_tiles(trace, n_s=4):
    """Per spatial loop of an MLT trace: the product of its factors inside the register budget
    (the accumulator tile of a short reduction, the register tile of a long one), as the
    sample instructions' budget attributes say."""
    out = []
    for inst in trace:
        if inst.kind == "sample_perfect_tile" and "inner_budget" in inst.attrs:
            levels = inst.attrs["inner_levels"]
            out.append(int(np.prod(inst.decision[len(inst.decision) - levels:])))
    return out


def test_multi_level_tiling_bounds_the_accumulator_of_a_short_reduction():
    # A 3x3 window cannot amortise accumulators in memory: every sample's accumulator tile
    # (write-back levels, fixed register width included) fits the 32 x 16-lane registers.
    func = ops.depthwise_conv2d_nchw(1, 144, 14, 56, 3, 3, padding=1)
    space = DesignSpace(func, TARGET)
    assert len(space.sketches) == 4
    inputs = random_inputs(func, 0)
    (expected,) = interp.evaluate(func, *inputs)
    for seed in range(24):
        cand = space.sample(seed=seed)
        tiles = _accumulator_tiles(cand.trace)
        assert len(tiles) == 4  # n, c, y, x
        widths = [inst.inputs[2] for inst in cand.trace if inst.kind == "split"
                  and len(inst.inputs) == 3 and inst.inputs[1] is None]
        assert int(np.prod(tiles)) * int(np.prod(widths or [1])) <= 32 * 16
        # Innermost loop first: x is sampled before c.
        order = [inst.inputs[0] for inst in cand.trace if inst.kind == "sample_perfect_tile"
                 and "inner_budget" in inst.attrs]
        assert order[0] != order[-1]
        if seed < 3:
            (got,) = interp.evaluate(cand.func, *inputs)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_multi_level_tiling_bounds_only_the_register_tile_of_a_long_reduction():
    # A long reduction amortises its accumulators in L1 over many steps: the levels inside the
    # write-back stay free, but the innermost S level (vectorised and unrolled inside the
    # innermost reduction loop) fits the 32 x 16-lane registers.  Unbounded, most samples of
    # a 1x1x1 conv3d (five spatial loops) spilled.
    func = ops.matmul(64, 128, 1024)
    space = DesignSpace(func, TARGET)
    inputs = random_inputs(func, 0)
    # numpy's product and compiled candidates: the interpreter takes seconds per run of this
    # 8M-step nest, and the check is of the samples' programs, not of the interpreter.
    expected = inputs[0] @ inputs[1]
    seen_outer_tiles = set()
    for seed in range(24):
        cand = space.sample(seed=seed)
        budgeted = [inst for inst in cand.trace if inst.kind == "sample_perfect_tile"
                    and "inner_budget" in inst.attrs]
        assert {inst.attrs["inner_levels"] for inst in budgeted} <= {0, 1}
        register_tile = _accumulator_tiles(cand.trace)
        widths = [inst.inputs[2] for inst in cand.trace if inst.kind == "split"
                  and len(inst.inputs) == 3 and inst.inputs[1] is None]
        assert int(np.prod(register_tile)) * int(np.prod(widths or [1])) <= 32 * 16
        # The level outside the register tile is not bounded: some samples' two innermost
        # levels together hold more than the registers do.
        seen_outer_tiles.add(int(np.prod([np.prod(inst.decision[-2:]) for inst in budgeted
                                          if inst.attrs["inner_levels"] == 1])))
        if seed < 3:
            got = np.full(func.params[-1].const_shape, np.nan, np.float32)
            autotune.build(cand.func, TARGET)(*inputs, got)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert max(seen_outer_tiles) > 32 * 16


def test_multi_level_tiling_keeps_two_sketches_per_level_for_a_good_vector_axis():
    # 1024-wide unit-stride columns vectorise well: no channel sketches for a matmul.
    func = ops.matmul(64, 128, 1024)
    out = _init(MultiLevelTiling()).apply(Schedule(func, seed=0), "C")
    assert len(out) == 4
    assert all(_vector_loop_of(s.func, "C").startswith("j") for s in out)


# -- AddRFactor ----------------------------------------------------------------------------
def test_rfactor_inner_for_contiguous_row_reductions():
    func = ops.sum((64, 256), axis=1)
    name = _blocks(func)[0]
    out = _init(AddRFactor()).apply(Schedule(func, seed=0), name)
    assert len(out) == 2 and len(out[0].trace) == 0
    rf = out[1]
    assert any(n.endswith("_rf") for n in _blocks(rf.func))
    x = np.random.default_rng(0).uniform(-1, 1, (64, 256)).astype("float32")
    (got,) = interp.evaluate(rf.func, x)
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_rfactor_outer_for_full_reductions():
    func = ops.sum((8, 64))  # to a scalar: no spatial parallelism at all
    name = _blocks(func)[0]
    out = _init(AddRFactor()).apply(Schedule(func, seed=0), name)
    variants = [dict(tree.find_block(s.func, n).node.block.annotations).get(
        "meta_schedule.rfactor") for s in out[1:] for n in _blocks(s.func) if n.endswith("_rf")]
    assert "outer" in variants


def _rf_variants(out):
    return [dict(tree.find_block(s.func, n).node.block.annotations).get("meta_schedule.rfactor")
            for s in out[1:] for n in _blocks(s.func) if n.endswith("_rf")]


def test_rfactor_outer_inner_spreads_a_full_reduction_over_cores_and_lanes():
    # A sum to a scalar of streamed data: chunks in parallel, each chunk's partials
    # vectorised (C_rf_rf[chunk, lanes]), then the two short serial sums.
    func = ops.sum((64, 1024))
    name = _blocks(func)[0]
    out = _init(AddRFactor()).apply(Schedule(func, seed=0), name)
    both = [s for s in out if name + "_rf_rf" in _blocks(s.func)]
    assert len(both) == 1
    sch = both[0]
    block = tree.find_block(sch.func, name + "_rf_rf").node.block
    assert dict(block.annotations)["meta_schedule.rfactor"] == "outer_inner"
    spatial = [iv for iv in block.iter_vars if iv.kind == "spatial"]
    lanes = spatial[-1].dom.extent.value
    assert lanes % 16 == 0 and 2 <= spatial[-2].dom.extent.value <= 32
    check_interp(sch.func, lambda x: np.asarray(x, np.float64).sum().reshape(()))
    # In the whole design space, its programs run the chunks in parallel and the lanes as
    # vectors.
    space = DesignSpace(func, TARGET)
    index = next(i for i, t in enumerate(space.sketches) if "outer_inner" in t.to_text())
    program = space.sample(seed=0, sketch=index).schedule.func
    kinds = {lp.kind for lp in tree.find_block(program, name + "_rf_rf").loops}
    assert PARALLEL in kinds and VECTORIZED in kinds


def test_rfactor_stream_for_batch1_dense():
    func = ops.dense(1, 48, 128)  # the weight is read once, contiguous along k
    name = [n for n in _blocks(func)][0]
    out = _init(AddRFactor()).apply(Schedule(func, seed=0), name)
    assert "stream" in _rf_variants(out)
    sch = [s for s in out[1:] if "stream" in _rf_variants([None, s])][0]
    loops = tree.find_block(sch.func, name + "_rf").loops
    width = loops[-1].extent.value
    assert width % 16 == 0 and 128 % width == 0  # whole vector registers
    # computed at the row-group loop: batch, row groups, rows of a group, lanes' sum
    assert len(tree.find_block(sch.func, name).loops) == 4
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 128)).astype("float32")
    w = rng.uniform(-1, 1, (48, 128)).astype("float32")
    (got,) = interp.evaluate(sch.func, x, w)
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-4)


def test_rfactor_no_stream_with_reuse():
    func = ops.matmul(32, 32, 64)  # B is reused across rows, read along the spatial axis
    name = _blocks(func)[0]
    assert "stream" not in _rf_variants(_init(AddRFactor()).apply(Schedule(func), name))
    func = ops.dense(8, 48, 128)  # the weight is reused by 8 rows: tiling's job
    name = _blocks(func)[0]
    assert "stream" not in _rf_variants(_init(AddRFactor()).apply(Schedule(func), name))


def test_rfactor_sketches_survive_an_unlucky_draw_while_generating():
    # Sketch generation used to draw the split with the rule's random state: a draw that left
    # the factored part one iteration long made rfactor refuse, and softmax's row maximum
    # lost its vectorised sketch (2 sketches: only the row sum's variants).  Both row
    # reductions now offer theirs, and a program with both factored computes softmax.
    func = ops.softmax((1, 12, 128, 128))
    space = DesignSpace(func, TARGET)
    assert len(space.sketches) == 4
    both = [k for k, t in enumerate(space.sketches)
            if t.to_text().count('"meta_schedule.rfactor"') >= 4]
    assert len(both) == 1
    cand = space.sample(seed=0, sketch=both[0])
    names = _blocks(cand.func)
    assert "T_softmax_maxelem_rf" in names and "T_softmax_expsum_rf" in names
    x = np.random.default_rng(0).uniform(-4, 4, (1, 12, 128, 128)).astype("float32")
    got = np.full_like(x, np.nan)
    autotune.build(cand.func, TARGET)(x, got)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_rfactor_skips_short_reductions():
    func = ops.sum((64, 8), axis=1)
    sch = Schedule(func)
    assert _init(AddRFactor()).apply(sch, _blocks(func)[0]) == [sch]


# -- TransposeTiling -----------------------------------------------------------------------
def _head_split_kt():
    """Attention's K^T as the model's fused kernel has it: the projection's K columns split
    into heads (a reshape) and transposed, one block after inlining that iterates in the
    input's order and writes out[h, d, s]."""
    a = te.placeholder((128, 2304), "float32", name="A")
    heads = te.compute((1, 128, 12, 64), lambda b, s, h, d: a[s, 768 + h * 64 + d], name="R")
    out = te.compute((1, 12, 64, 128), lambda b, h, d, s: heads[b, s, h, d], name="T")
    return te.create_prim_func([a, out], name="kt")


def test_transpose_tiling_offers_line_and_vector_tiles_of_a_head_split():
    func = _head_split_kt()
    sch = Schedule(func, seed=0)
    sch.reverse_compute_inline(sch.get_block("T"))  # what AutoInline does first
    out = _init(TransposeTiling()).apply(sch, "R")
    variants = [dict(tree.find_block(s.func, "R").node.block.annotations).get(TRANSPOSE_KEY)
                for s in out]
    assert variants == [None, "lines", "vector"]
    by = dict(zip(variants, out))
    # "lines": the 16 rows (s) that share an output line run just outside the vector loop
    # (d); "vector": 16 x 16 tiles, the output's lanes (s) innermost.
    assert [lp.extent.value for lp in _loops(by["lines"].func, "R")][-2:] == [16, 64]
    assert [lp.extent.value for lp in _loops(by["vector"].func, "R")][-3:] == [4, 16, 16]
    x = np.random.default_rng(0).uniform(-1, 1, (128, 2304)).astype("float32")
    expected = x[:, 768:1536].reshape(1, 128, 12, 64).transpose(0, 2, 3, 1)
    space = DesignSpace(func, TARGET)
    seen = set()
    for k in range(len(space.sketches)):
        cand = space.sample(seed=k, sketch=k)
        seen.add(dict(tree.find_block(cand.func, "R").node.block.annotations).get(
            TRANSPOSE_KEY))
        got = np.full((1, 12, 64, 128), np.nan, np.float32)
        autotune.build(cand.func, TARGET)(x, got)
        np.testing.assert_array_equal(got, expected)
    assert seen == {None, "lines", "vector"}


def test_transpose_tiling_leaves_copies_that_write_along_their_innermost_loop():
    rule = _init(TransposeTiling())
    # A transpose as te writes it iterates over its output; softmax's stages write along j.
    for func in (ops.transpose((64, 32, 48), axes=(2, 0, 1)), ops.softmax((4, 64))):
        sch = Schedule(func, seed=0)
        for name in _blocks(func):
            assert rule.apply(sch, name) == [sch]


# -- ParallelVectorizeUnroll and RandomComputeLocation ---------------------------------------
def test_parallel_vectorize_unroll_annotates_root_with_samples():
    func, _ = elementwise_chain()
    rule = _init(ParallelVectorizeUnroll())
    sch = Schedule(func, seed=0)
    assert rule.apply(sch, "relu") == [sch]
    (new,) = rule.apply(sch, "root")
    notes = dict(tree.find_block(new.func, "root").node.block.annotations)
    assert set(notes) == {PARALLEL_KEY, VECTORIZE_KEY, UNROLL_KEY}
    assert notes[VECTORIZE_KEY] == 64
    kinds = [i.kind for i in new.trace]
    assert kinds.count("sample_categorical") == 2
    # The annotation follows a mutated decision on replay.
    index = kinds.index("sample_categorical")
    replayed = new.trace.with_decision(index, 0).apply(func)
    notes = dict(tree.find_block(replayed.func, "root").node.block.annotations)
    assert notes[PARALLEL_KEY] == 1


def test_random_compute_location_samples_the_padding_stage():
    func, ref = conv2d(n=1, c=2, h=4, w=4, f=2, r=3, pad=1)
    rule = _init(RandomComputeLocation())
    (sch,) = rule.apply(Schedule(func, seed=0), "pad")
    assert [i.kind for i in sch.trace][-2:] == ["sample_compute_location", "compute_at"]
    for seed in range(4):
        check_interp(sch.trace.without_decisions().apply(func, seed=seed).func, ref)
    sch = Schedule(func)
    assert rule.apply(sch, "conv") == [sch]  # writes the output


def test_create_and_default_rules():
    assert [r.name for r in default_rules(TARGET)] == [
        "auto_inline", "rfactor", "multi_level_tiling", "transpose_tiling",
        "parallel_vectorize_unroll", "random_compute_location"]
    with pytest.raises(ScheduleError, match="unknown schedule rule"):
        create("tile_everything")
    rule = AutoInline()
    assert create(rule) is rule
    # GPU targets have their own set (schedules.rules: auto_bind, cross_thread_reduction).
    assert [r.name for r in default_rules(Target("cuda -arch=sm_80"))] == [
        "auto_inline", "cross_thread_reduction", "multi_level_tiling_gpu", "auto_bind"]


# -- post-processors -------------------------------------------------------------------------
def _annotated_matmul():
    func, ref = matmul(32, 48, 16)
    sch = Schedule(func, seed=3)
    (sch,) = _init(MultiLevelTiling(pack=False, write_levels=(1,))).apply(sch, "C")
    root = sch.get_block("root")
    sch.annotate(root, PARALLEL_KEY, 8)
    sch.annotate(root, VECTORIZE_KEY, 64)
    sch.annotate(root, UNROLL_KEY, 64)
    return func, ref, sch


def test_postprocs_realise_annotations():
    func, ref, sch = _annotated_matmul()
    decided = sch.trace
    assert apply_postprocs(sch, default_postprocs(TARGET))
    loops = collect(sch.func.body, For)
    assert any(lp.kind == PARALLEL for lp in loops)
    assert any(lp.kind == VECTORIZED for lp in loops)
    assert any(dict(lp.annotations).get("pragma_auto_unroll_max_step") == 64 for lp in loops)
    root = tree.find_block(sch.func, "root").node.block
    assert set(dict(root.annotations)) == {POSTPROC_MARKER}
    assert "C_init" in _blocks(sch.func)
    check_interp(sch.func, ref)
    # The final trace replays without post-processors; stripping gives the decided trace.
    full = Trace.from_json(sch.trace.to_json())
    assert structural_equal(full.apply(func).func, sch.func)
    assert strip_postproc(full) == decided
    # Post-processing twice changes nothing (only the verifiers run again).
    before = len(sch.trace)
    assert apply_postprocs(sch, default_postprocs(TARGET))
    assert len(sch.trace) == before


def test_decompose_reductions_alone():
    func, ref = matmul(4, 6, 5)
    sch = Schedule(func)
    assert DecomposeReductions().apply(sch)
    assert _blocks(sch.func) == ["C_init", "C"]
    check_interp(sch.func, ref)


def test_rewrite_without_annotations_is_a_no_op():
    func, _ = matmul(4, 6, 5)
    sch = Schedule(func)
    proc = RewriteParallelVectorizeUnroll()
    proc.initialize(TARGET)
    assert proc.apply(sch) and len(sch.trace) == 0


def test_vectorize_splits_long_loops_by_a_register_multiple():
    func, ref = elementwise_chain(3, 96)
    sch = Schedule(func)
    for name in ("scale", "shift"):
        sch.compute_inline(sch.get_block(name))
    sch.annotate(sch.get_block("root"), VECTORIZE_KEY, 64)
    proc = RewriteParallelVectorizeUnroll()
    proc.initialize(TARGET)
    assert proc.apply(sch)
    vec = [lp for lp in collect(sch.func.body, For) if lp.kind == VECTORIZED]
    assert [lp.extent.value for lp in vec] == [48]
    check_interp(sch.func, ref)


def test_verify_cpu_limits():
    func, _ = matmul(8, 8, 4)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.parallel(j)
    assert "nested" in verify_cpu(sch.func)
    assert not VerifyCPU().apply(sch)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.vectorize(j)
    assert verify_cpu(sch.func) is None
    assert "extent 8 > 4" in verify_cpu(sch.func, max_vector_extent=4)
    sch = Schedule(func)
    sch.bind(sch.get_loops(sch.get_block("C"))[0], "threadIdx.x")
    assert "bound to threadIdx.x" in verify_cpu(sch.func)
    assert verify_gpu(sch.func, max_threads=1024, max_shared=1024) is None
    assert "threads per block" in verify_gpu(sch.func, max_threads=4, max_shared=1024)


def _conv1x1_nchwc(width: int, blocks_in: int = 4, blocks_out: int = 2, block: int = 16):
    """A 1x1 convolution in 16-channel blocks with bias and relu6, as MobileNetV2's late
    pointwise tasks (7x7 and 14x14 pixels)."""
    from tensor_ir.ops.layout import te_conv2d_nchwc

    X = te.placeholder((1, blocks_in, width, width, block), "float32", name="X")
    W = te.placeholder((blocks_out, blocks_in, 1, 1, block, block), "float32", name="W")
    bias = te.placeholder((blocks_out, block), "float32", name="bias")
    Y = te_conv2d_nchwc(X, W)
    R = te.compute(Y.shape, lambda i, k, y, x, kk: te.min(
        te.max(Y[i, k, y, x, kk] + bias[k, kk], 0.0), 6.0), name="relu6")
    return te.create_prim_func([X, W, bias, R], name="conv1x1_nchwc")


@pytest.mark.parametrize("width, rows", [(7, 4), (14, 5), (28, None), (56, None)])
def test_multi_level_tiling_offers_remainder_rows_where_no_divisor_fits_avx2(width, rows):
    # AVX2 holds 6 rows of two-register accumulators beside a panel and a broadcast.  7 and
    # 14 pixels have no divisor near that (1 or 7, 2 or 7): a sketch more takes 4 + 3 and
    # 5 + 5 + 4 rows through a split that guards its last iteration.  28 and 56 have 4.
    avx2 = Target("llvm -num-cores 2 -vector-width 256")
    func = _conv1x1_nchwc(width)
    rule = MultiLevelTiling()
    rule.initialize(avx2)
    out = rule.apply(Schedule(func, seed=0), "conv2d_nchwc")
    def splits_rows(trace):
        return any(inst.kind == "split" and tuple(inst.inputs[1:]) == (None, rows)
                   for inst in trace)

    remainder = [s for s in out if splits_rows(s.trace)]
    if rows is None:
        assert not remainder
        return
    assert len(remainder) == 2  # one per write-back level
    # With 32 registers 7 and 14 rows fit as they are: nothing changes there.
    wide = _init(MultiLevelTiling()).apply(Schedule(func, seed=0), "conv2d_nchwc")
    assert not [s for s in wide if splits_rows(s.trace)]
    inputs = random_inputs(func, 0)
    (expected,) = interp.evaluate(func, *inputs)
    space = DesignSpace(func, avx2)
    picked = [k for k, sketch in enumerate(space.sketches) if splits_rows(sketch)]
    assert len(picked) == 2
    for seed in range(4):
        cand = space.sample(seed=seed, sketch=picked[seed % 2])
        got = np.full(func.params[-1].const_shape, np.nan, np.float32)
        autotune.build(cand.func, avx2)(*inputs, got)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
