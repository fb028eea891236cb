"""Winograd convolutions: the library's transforms, the graph pass and built models."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.graph import (
    GraphBuilder, GraphError, extract_tasks, fuse_ops, optimize, winograd_conv2d,
)
from autotune.graph.build import build_model
from schedules.space import DesignSpace
from tensor_ir import te
from tensor_ir.ops import (
    ref_conv2d_nchw, ref_layout_to_blocked, ref_winograd_input, ref_winograd_input_rows,
    ref_winograd_output, ref_winograd_output_rows, te_winograd_input, te_winograd_input_cols,
    te_winograd_input_cols_nchwc, te_winograd_input_rows, te_winograd_input_rows_nchwc,
    te_winograd_output, te_winograd_output_cols, te_winograd_output_cols_nchwc,
    te_winograd_output_rows, te_winograd_output_rows_nchwc, winograd_matrices, winograd_tiles,
    winograd_weight,
)

from .helpers import TARGET, conv_model, random_inputs, sampled_lookup

SHAPES = [  # n, c, h, w, k, pads
    (1, 8, 10, 9, 5, (1, 1, 1, 1)),
    (2, 3, 7, 7, 4, (0, 0, 0, 0)),
    (1, 4, 6, 11, 3, (2, 1, 0, 1)),
]


def _winograd_reference(x, w, m, pads):
    bt, _, at = winograd_matrices(m)
    v = ref_winograd_input(x, bt, m, pads).astype(np.float64)
    mm = v @ winograd_weight(w, m).astype(np.float64)
    n, oh, ow = x.shape[0], x.shape[2] + pads[0] + pads[2] - 2, x.shape[3] + pads[1] + pads[3] - 2
    return ref_winograd_output(mm, at, m, n, oh, ow)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_numpy_winograd_equals_the_direct_convolution(m, shape):
    n, c, h, w, k, pads = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    ref = ref_conv2d_nchw(x, wt, (1, 1), pads, (1, 1), 1)
    got = _winograd_reference(x, wt, m, pads)
    assert got.shape == ref.shape
    # F(4,3)'s larger transform entries cost some float32 precision (U is stored in float32).
    np.testing.assert_allclose(got, ref, atol=1e-4 * np.abs(ref).max())


def test_unknown_tile_size_is_a_typed_error():
    from tensor_ir.errors import TEError

    with pytest.raises(TEError, match="tile size must be one of"):
        winograd_matrices(3)


def _transform_funcs(n, c, h, w, k, pads, m):
    a = m + 2
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    tiles = winograd_tiles(n, oh, ow, m)[2]
    x = te.placeholder((n, c, h, w), "float32", name="x")
    bt = te.placeholder((a, a), "float32", name="bt")
    v = te_winograd_input(x, bt, m, pads)
    mm = te.placeholder((a * a, tiles, k), "float32", name="mm")
    at = te.placeholder((m, a), "float32", name="at")
    y = te_winograd_output(mm, at, m, n, oh, ow)
    return (te.create_prim_func([x, bt, v], name="wino_in"),
            te.create_prim_func([mm, at, y], name="wino_out"), (oh, ow, tiles))


def _check_under_schedules(func, args, want, atol):
    """``func`` gives ``want`` unscheduled and under three sampled programs of its design
    space (tiling, packing, vectorising the stages)."""
    for seed in (None, 0, 1, 2):
        scheduled = func if seed is None else DesignSpace(func, TARGET).sample(seed=seed).func
        got = np.zeros_like(want)
        autotune.build(scheduled, TARGET)(*args, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("shape", SHAPES)
def test_te_input_halves_match_numpy_under_random_schedules(shape):
    """The row and column halves as the two kernels a model runs."""
    n, c, h, w, _, pads = shape
    m = 4
    x = te.placeholder((n, c, h, w), "float32", name="x")
    bt = te.placeholder((6, 6), "float32", name="bt")
    rows = te_winograd_input_rows(x, bt, m, pads)
    f_rows = te.create_prim_func([x, bt, rows], name="rows")
    t = te.placeholder(rows.shape, "float32", name="t")
    f_cols = te.create_prim_func([t, bt, te_winograd_input_cols(t, bt, m)], name="cols")
    bt_np = winograd_matrices(m)[0].astype(np.float32)
    data = np.random.default_rng(2).standard_normal((n, c, h, w)).astype(np.float32)
    want_t = ref_winograd_input_rows(data, bt_np, m, pads)
    want_v = ref_winograd_input(data, bt_np, m, pads)
    _check_under_schedules(f_rows, (data, bt_np), want_t, atol=1e-4)
    _check_under_schedules(f_cols, (want_t, bt_np), want_v, atol=1e-4)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_te_output_halves_match_numpy_under_random_schedules(m, shape):
    """The output transform's row and column halves as the two kernels a model runs."""
    n, _, h, w, k, pads = shape
    a = m + 2
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    tiles = winograd_tiles(n, oh, ow, m)[2]
    mm = te.placeholder((a * a, tiles, k), "float32", name="mm")
    at = te.placeholder((m, a), "float32", name="at")
    rows = te_winograd_output_rows(mm, at, m)
    f_rows = te.create_prim_func([mm, at, rows], name="out_rows")
    s = te.placeholder(rows.shape, "float32", name="s")
    f_cols = te.create_prim_func([s, at, te_winograd_output_cols(s, at, m, n, oh, ow)],
                                 name="out_cols")
    at_np = winograd_matrices(m)[2].astype(np.float32)
    mm_np = np.random.default_rng(3).standard_normal((a * a, tiles, k)).astype(np.float32)
    want_s = ref_winograd_output_rows(mm_np, at_np, m)
    assert want_s.shape == (m, a, k, tiles)
    _check_under_schedules(f_rows, (mm_np, at_np), want_s, atol=1e-4)
    _check_under_schedules(f_cols, (want_s, at_np),
                           ref_winograd_output(mm_np, at_np, m, n, oh, ow), atol=1e-3)


@pytest.mark.parametrize("shape", SHAPES)
def test_te_transforms_match_numpy_under_random_schedules(shape):
    """The composed input transform and the output transform compute what the numpy
    references do."""
    n, c, h, w, k, pads = shape
    m, a = 4, 6
    f_in, f_out, (oh, ow, tiles) = _transform_funcs(n, c, h, w, k, pads, m)
    bt, _, at = (x.astype(np.float32) for x in winograd_matrices(m))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    mm = rng.standard_normal((a * a, tiles, k)).astype(np.float32)
    want_v = ref_winograd_input(x, bt, m, pads)
    want_y = ref_winograd_output(mm, at, m, n, oh, ow)
    _check_under_schedules(f_in, (x, bt), want_v, atol=1e-4)
    _check_under_schedules(f_out, (mm, at), want_y, atol=1e-3)


def _block_of(channels: int) -> int:
    return channels // 2 if channels % 2 == 0 else channels


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_te_blocked_halves_match_numpy_under_random_schedules(m, shape):
    """The blocked halves chained as a model runs them give the NCHW transforms' results:
    the same transformed tiles V from blocked data, and the blocked layout of the NCHW output
    transform's Y from the same M."""
    n, c, h, w, k, pads = shape
    a, cb, kb = m + 2, _block_of(c), _block_of(k)
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    tiles = winograd_tiles(n, oh, ow, m)[2]
    bt_np, _, at_np = (x.astype(np.float32) for x in winograd_matrices(m))
    rng = np.random.default_rng(4)
    data = rng.standard_normal((n, c, h, w)).astype(np.float32)
    mm_np = rng.standard_normal((a * a, tiles, k)).astype(np.float32)

    x = te.placeholder((n, c // cb, h, w, cb), "float32", name="x")
    bt = te.placeholder((a, a), "float32", name="bt")
    rows = te_winograd_input_rows_nchwc(x, bt, m, pads)
    t = te.placeholder(rows.shape, "float32", name="t")
    mm = te.placeholder((a * a, tiles, k), "float32", name="mm")
    at = te.placeholder((m, a), "float32", name="at")
    s_rows = te_winograd_output_rows_nchwc(mm, at, m)
    s = te.placeholder(s_rows.shape, "float32", name="s")
    funcs = [te.create_prim_func([x, bt, rows], name="rows"),
             te.create_prim_func([t, bt, te_winograd_input_cols_nchwc(t, bt, m)], name="cols"),
             te.create_prim_func([mm, at, s_rows], name="out_rows"),
             te.create_prim_func([s, at, te_winograd_output_cols_nchwc(s, at, m, n, oh, ow, kb)],
                                 name="out_cols")]
    want_t = np.moveaxis(ref_winograd_input_rows(data, bt_np, m, pads)
                         .reshape(a, n, c // cb, cb, -1, rows.shape[4]), 3, -1)
    want_s = ref_winograd_output_rows(mm_np, at_np, m).transpose(0, 1, 3, 2)
    _check_under_schedules(funcs[0], (ref_layout_to_blocked(data, cb), bt_np),
                           np.ascontiguousarray(want_t), atol=1e-4)
    _check_under_schedules(funcs[1], (np.ascontiguousarray(want_t), bt_np),
                           ref_winograd_input(data, bt_np, m, pads), atol=1e-4)
    _check_under_schedules(funcs[2], (mm_np, at_np), np.ascontiguousarray(want_s), atol=1e-4)
    _check_under_schedules(funcs[3], (np.ascontiguousarray(want_s), at_np),
                           ref_layout_to_blocked(ref_winograd_output(mm_np, at_np, m, n, oh, ow),
                                                 kb), atol=1e-3)


def test_pass_rewrites_eligible_convolutions_and_keeps_their_results():
    model = conv_model()
    rewritten = winograd_conv2d(model)
    ops = [node.op for node in rewritten.nodes]
    assert ops[:5] == ["winograd_input_rows", "winograd_input_cols", "matmul",
                       "winograd_output_rows", "winograd_output_cols"] and "conv2d" not in ops
    assert rewritten.types["output"] == model.types["output"]
    # The original weight is gone; the transformed one (36 x C x K) replaces it.
    assert "w" not in rewritten.constants
    assert any(a.shape == (36, 128, 128) for a in rewritten.constants.values())
    assert rewritten.nodes[0].attrs["tile"] == 4
    inputs = random_inputs(model)
    want = model.evaluate(inputs)["output"]
    got = rewritten.evaluate(inputs)["output"]
    np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("change", [
    dict(stride=2), dict(groups=2), dict(kernel=1), dict(weight_input=True),
    dict(c=32, k=32), dict(image=6), dict(c=512, k=512, image=14),
])
def test_pass_leaves_other_convolutions_alone(change):
    """Strided, grouped and 1x1 convolutions, weights that are not constants, too few
    channels (transforms would cost more than they save), too few tiles, or transformed
    weights too big for the cache even with F(2,3) stay direct."""
    model = conv_model(**change)
    assert winograd_conv2d(model) is model


def test_large_weights_take_the_smaller_tile():
    """256 channels: F(4,3)'s transformed weights (9 MiB) exceed the bound, F(2,3)'s (4 MiB)
    do not."""
    model = conv_model(c=256, k=256, image=14)
    rewritten = winograd_conv2d(model)
    assert [n.attrs.get("tile") for n in rewritten.nodes[:5]] == [2, 2, None, 2, 2]
    inputs = random_inputs(model)
    want = model.evaluate(inputs)["output"]
    np.testing.assert_allclose(rewritten.evaluate(inputs)["output"], want,
                               atol=1e-5 * np.abs(want).max())


def test_thresholds_are_parameters():
    model = conv_model(c=8, k=8, image=8)
    assert winograd_conv2d(model) is model
    rewritten = winograd_conv2d(model, tiles=(2,), min_channels=8, min_tiles=1)
    assert [n.op for n in rewritten.nodes][0] == "winograd_input_rows"
    inputs = random_inputs(model)
    want = model.evaluate(inputs)["output"]
    np.testing.assert_allclose(rewritten.evaluate(inputs)["output"], want,
                               atol=1e-5 * np.abs(want).max())


def test_output_transform_takes_the_convolutions_epilogue():
    groups = fuse_ops(optimize(conv_model(), layout="NCHW"))
    names = [g.name for g in groups]
    assert names == ["fused_winograd_input_rows", "fused_winograd_input_cols", "fused_matmul",
                     "fused_winograd_output_rows", "fused_winograd_output_cols_add_add_relu"]
    # In the blocked layout (the default) the same, between the layout's entry and exit.
    assert [g.name for g in fuse_ops(optimize(conv_model()))] == [
        "fused_layout_to_blocked", "fused_winograd_input_rows_nchwc",
        "fused_winograd_input_cols_nchwc", "fused_matmul", "fused_winograd_output_rows_nchwc",
        "fused_winograd_output_cols_nchwc_add_add_relu", "fused_layout_from_blocked"]
    # optimize(winograd=False) keeps the direct convolution (in NCHW when asked).
    assert [g.name for g in fuse_ops(optimize(conv_model(), winograd=False, layout="NCHW"))] \
        == ["fused_conv2d_add_add_relu"]


def test_tasks_mark_the_transformed_weights_and_matrices_as_constants():
    tasks = {t.name: t for t in extract_tasks(conv_model())}
    assert tasks["fused_winograd_input_rows_nchwc"].weight_params == frozenset({1})  # Bt
    assert tasks["fused_winograd_input_cols_nchwc"].weight_params == frozenset({1})
    assert tasks["fused_matmul"].weight_params == frozenset({1})             # U
    assert tasks["fused_winograd_output_rows_nchwc"].weight_params == frozenset({1})   # At
    assert 1 in tasks["fused_winograd_output_cols_nchwc_add_add_relu"].weight_params


def test_shape_errors_name_the_operator():
    b = GraphBuilder("bad")
    x = b.input("x", (1, 4, 8, 8))
    bt = b.constant(np.zeros((4, 4), np.float32), "bt")
    with pytest.raises(GraphError, match=r"winograd_input_rows: Bt must be float32 \(6, 6\)"):
        b.op("winograd_input_rows", [x, bt], tile=4, pads=(1, 1, 1, 1))
    t = b.input("t", (6, 1, 4, 2, 9))
    with pytest.raises(GraphError, match=r"winograd_input_cols: T must be \(6, N, C, th"):
        b.op("winograd_input_cols", [t, b.constant(np.zeros((6, 6), np.float32), "bt6")],
             tile=4)
    mm = b.input("mm", (36, 5, 4))
    at = b.constant(np.zeros((4, 6), np.float32), "at")
    with pytest.raises(GraphError, match=r"winograd_output_rows: At must be float32 \(4, 6\)"):
        b.op("winograd_output_rows", [mm, b.constant(np.zeros((2, 4), np.float32), "at2")],
             tile=4)
    rows = b.op("winograd_output_rows", [mm, at], tile=4)
    with pytest.raises(GraphError, match=r"winograd_output_cols: S must be \(4, 6, K, 4\)"):
        b.op("winograd_output_cols", [rows, at], tile=4, batch=1, height=8, width=8)
    # The blocked halves: the rank of the blocked operand, then the NCHW halves' checks.
    with pytest.raises(GraphError, match=r"winograd_input_rows_nchwc: data must be NCHW\[b\]c"):
        b.op("winograd_input_rows_nchwc", [x, bt], tile=4, pads=(1, 1, 1, 1))
    with pytest.raises(GraphError, match=r"winograd_input_cols_nchwc: T must be"):
        b.op("winograd_input_cols_nchwc", [t, bt], tile=4)
    s = b.op("winograd_output_rows_nchwc", [mm, at], tile=4)
    assert b.types[s].shape == (4, 6, 5, 4)
    with pytest.raises(GraphError, match=r"winograd_output_cols_nchwc: 4 channels are not a "
                                         r"multiple of the block 3"):
        b.op("winograd_output_cols_nchwc", [s, at], tile=4, batch=5, height=4, width=4,
             block=3)


@pytest.mark.parametrize("n", [1, 2])
def test_built_model_matches_the_direct_convolution(n):
    """Built with random schedules for every kernel (and the weights' packing done at
    build), the Winograd model gives the direct convolution's results."""
    model = conv_model(n=n, image=26)    # 26 = 6 tiles of 4 and a partial one
    inputs = random_inputs(model)
    want = optimize(model, winograd=False).evaluate(inputs)["output"]
    # Built in the blocked layout (the NCHW halves are checked as kernels above).
    assert "winograd_output_cols_nchwc" in [node.op for node in optimize(model).nodes]
    for lookup in (None, sampled_lookup(seed=5)):
        lib = build_model(model, TARGET, lookup=lookup, warn=False)
        got = lib.run(inputs)["output"]
        np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max())


def _stem_model(c: int, k: int, image: int = 16) -> autotune.graph.Model:
    """ResNet's order: a strided convolution, a max pooling, then a Winograd convolution."""
    rng = np.random.default_rng(6)
    b = GraphBuilder("stem")
    x = b.input("input", (1, 3, image, image))
    y = b.op("conv2d", [x, b.constant(rng.normal(0, 0.3, (c, 3, 3, 3)).astype(np.float32),
                                      "w0")],
             strides=(2, 2), pads=(1, 1, 1, 1), dilations=(1, 1))
    y = b.op("relu", [y])
    y = b.op("max_pool2d", [y], kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))
    y = b.op("conv2d", [y, b.constant(rng.normal(0, 0.1, (k, c, 3, 3)).astype(np.float32),
                                      "w1")],
             strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1))
    b.output(b.op("relu", [y]), "output")
    return b.build()


@pytest.mark.parametrize("c, k, halves, changes", [
    (64, 64, ("max_pool2d_nchwc", "winograd_input_rows_nchwc", "winograd_output_cols_nchwc"),
     1),
    # 66 channels have no block: the stem, the pooling and the input halves stay in NCHW,
    # the output halves are blocked (and the output laid out back) ...
    (66, 64, ("max_pool2d", "winograd_input_rows", "winograd_output_cols_nchwc"), 1),
    # ... or the input halves are blocked and the output halves write NCHW.
    (64, 66, ("max_pool2d_nchwc", "winograd_input_rows_nchwc", "winograd_output_cols"), 0),
])
def test_blocked_layout_runs_through_the_pooling_and_the_winograd_halves(c, k, halves,
                                                                           changes):
    """The activations stay blocked from the stem through the pooling and the Winograd
    halves; a half whose channels have no block stays in NCHW, with its layout changes; the
    results are the NCHW model's."""
    model = _stem_model(c, k)
    blocked = optimize(model)
    ops = [node.op for node in blocked.nodes]
    for op in halves:
        assert op in ops
    # No layout change inside the Winograd convolution: only the exit to an NCHW output.
    assert ops.count("layout_from_blocked") + ops.count("layout_to_blocked") == changes
    inputs = random_inputs(model)
    want = optimize(model, layout="NCHW").evaluate(inputs)["output"]
    np.testing.assert_allclose(blocked.evaluate(inputs)["output"], want,
                               atol=1e-4 * np.abs(want).max())
    lib = build_model(model, TARGET, lookup=sampled_lookup(seed=2), warn=False)
    np.testing.assert_allclose(lib.run(inputs)["output"], want, atol=1e-4 * np.abs(want).max())
