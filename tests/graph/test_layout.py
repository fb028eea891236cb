"""The blocked channel layout: the library's transforms and convolutions, the graph pass and
built models."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.graph import (
    GraphBuilder, GraphError, blocked_layout, extract_tasks, fuse_ops, optimize,
)
from autotune.graph.build import build_model
from schedules.space import DesignSpace
from tensor_ir import te
from tensor_ir.errors import TEError
from tensor_ir.ops import (
    pack_conv2d_weight_nchwc, pack_depthwise_weight_nchwc, ref_conv2d_nchw, ref_conv2d_nchwc,
    ref_depthwise_conv2d_nchwc, ref_layout_from_blocked, ref_layout_to_blocked, ref_max_pool2d,
    ref_max_pool2d_nchwc, te_conv2d_nchwc, te_depthwise_conv2d_nchwc, te_layout_from_blocked,
    te_layout_to_blocked, te_max_pool2d_nchwc,
)

from .helpers import TARGET, conv_model, inverted_residual_model, random_inputs, sampled_lookup


def _check_under_schedules(func, args, want):
    """``func`` gives ``want`` unscheduled and under three sampled programs of its design
    space."""
    for seed in (None, 0, 1, 2):
        scheduled = func if seed is None else DesignSpace(func, TARGET).sample(seed=seed).func
        got = np.zeros_like(want)
        autotune.build(scheduled, TARGET)(*args, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_transforms_are_inverse_and_place_channel_c_at_c_div_b_c_mod_b():
    x = np.random.default_rng(0).standard_normal((2, 12, 3, 5)).astype(np.float32)
    blocked = ref_layout_to_blocked(x, 4)
    assert blocked.shape == (2, 3, 3, 5, 4)
    assert blocked[1, 2, 1, 3, 1] == x[1, 2 * 4 + 1, 1, 3]
    np.testing.assert_array_equal(ref_layout_from_blocked(blocked), x)
    d = te.placeholder(x.shape, "float32", name="d")
    _check_under_schedules(te.create_prim_func([d, te_layout_to_blocked(d, 4)], name="to"),
                           (x,), blocked)
    b = te.placeholder(blocked.shape, "float32", name="b")
    _check_under_schedules(te.create_prim_func([b, te_layout_from_blocked(b)], name="from"),
                           (blocked,), x)


CONV_CASES = [  # n, c, h, w, k, kernel, stride, pads, cb, kb
    (1, 16, 9, 7, 32, 3, 1, (1, 1, 1, 1), 16, 16),
    (1, 3, 11, 11, 8, 3, 2, (1, 1, 1, 1), 3, 8),       # an image: one block of 3 channels
    (2, 8, 6, 5, 12, 1, 1, (0, 0, 0, 0), 4, 4),
    (1, 8, 10, 9, 16, 3, 2, (0, 1, 1, 0), 8, 16),      # input and output blocks differ
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_nchwc_is_the_nchw_convolution_in_blocks(case):
    n, c, h, w, k, r, stride, pads, cb, kb = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, r, r)).astype(np.float32)
    want = ref_layout_to_blocked(ref_conv2d_nchw(x, wt, stride, pads), kb)
    xb, wb = ref_layout_to_blocked(x, cb), pack_conv2d_weight_nchwc(wt, cb, kb)
    assert wb.shape == (k // kb, c // cb, r, r, cb, kb)
    np.testing.assert_allclose(ref_conv2d_nchwc(xb, wb, stride, pads), want, rtol=1e-5,
                               atol=1e-5)
    # Blocked data, and NCHW data read in place as blocks of cb channels.
    np.testing.assert_allclose(ref_conv2d_nchwc(x, wb, stride, pads), want, rtol=1e-5,
                               atol=1e-5)
    for d in (xb, x):
        data = te.placeholder(d.shape, "float32", name="data")
        weight = te.placeholder(wb.shape, "float32", name="weight")
        out = te_conv2d_nchwc(data, weight, stride, pads)
        assert tuple(out.shape) == want.shape
        _check_under_schedules(te.create_prim_func([data, weight, out], name="conv"), (d, wb),
                               want)


@pytest.mark.parametrize("stride, pads", [(1, (1, 1, 1, 1)), (2, (1, 1, 1, 1)),
                                          (2, (0, 0, 1, 1))])
def test_depthwise_conv2d_nchwc_is_the_depthwise_convolution_in_blocks(stride, pads):
    rng = np.random.default_rng(2)
    c, b = 32, 16
    x = rng.standard_normal((1, c, 12, 11)).astype(np.float32)
    wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    want = ref_layout_to_blocked(ref_conv2d_nchw(x, wt, stride, pads, 1, c), b)
    xb, wb = ref_layout_to_blocked(x, b), pack_depthwise_weight_nchwc(wt, b)
    np.testing.assert_allclose(ref_depthwise_conv2d_nchwc(xb, wb, stride, pads), want,
                               rtol=1e-5, atol=1e-5)
    data = te.placeholder(xb.shape, "float32", name="data")
    weight = te.placeholder(wb.shape, "float32", name="weight")
    func = te.create_prim_func([data, weight, te_depthwise_conv2d_nchwc(data, weight, stride,
                                                                        pads)], name="dw")
    _check_under_schedules(func, (xb, wb), want)


@pytest.mark.parametrize("stride, pads", [(2, (1, 1, 1, 1)), (1, (0, 1, 2, 0))])
def test_max_pool2d_nchwc_is_the_max_pooling_in_blocks(stride, pads):
    x = np.random.default_rng(3).standard_normal((2, 32, 11, 12)).astype(np.float32)
    want = ref_layout_to_blocked(ref_max_pool2d(x, 3, stride, pads), 16)
    xb = ref_layout_to_blocked(x, 16)
    np.testing.assert_array_equal(ref_max_pool2d_nchwc(xb, 3, stride, pads), want)
    data = te.placeholder(xb.shape, "float32", name="data")
    func = te.create_prim_func([data, te_max_pool2d_nchwc(data, 3, stride, pads)], name="pool")
    _check_under_schedules(func, (xb,), want)


def test_library_shape_errors_name_the_operator():
    with pytest.raises(TEError, match="layout_to_blocked: channel count 12 is not a multiple"):
        te_layout_to_blocked(te.placeholder((1, 12, 4, 4), "float32", name="x"), 8)
    data = te.placeholder((1, 2, 5, 5, 8), "float32", name="data")
    with pytest.raises(TEError, match=r"conv2d_nchwc: weight .* does not match data"):
        te_conv2d_nchwc(data, te.placeholder((1, 2, 3, 3, 4, 8), "float32", name="w"))
    with pytest.raises(TEError, match=r"conv2d_nchwc: weight .* does not match data"):
        te_conv2d_nchwc(te.placeholder((1, 12, 5, 5), "float32", name="nchw"),
                        te.placeholder((1, 2, 3, 3, 4, 8), "float32", name="w"))
    with pytest.raises(TEError, match=r"depthwise_conv2d_nchwc: weight .* does not match"):
        te_depthwise_conv2d_nchwc(data, te.placeholder((2, 3, 3, 16), "float32", name="w"))
    with pytest.raises(TEError, match="only a channel multiplier of 1"):
        pack_depthwise_weight_nchwc(np.zeros((8, 2, 3, 3), np.float32), 8)
    with pytest.raises(TEError, match="output channel count 12 is not a multiple of the block"):
        pack_conv2d_weight_nchwc(np.zeros((12, 16, 1, 1), np.float32), 16, 16)


def test_graph_shape_errors_name_the_operator():
    b = GraphBuilder("bad")
    x = b.input("x", (1, 12, 8, 8))
    with pytest.raises(GraphError, match="layout_to_blocked: 12 channels are not a multiple"):
        b.op("layout_to_blocked", [x], block=8)
    with pytest.raises(GraphError, match=r"layout_from_blocked: data must be NCHW\[b\]c"):
        b.op("layout_from_blocked", [x])
    xb = b.op("layout_to_blocked", [x], block=4)
    conv = dict(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1))
    w = b.constant(np.zeros((2, 2, 1, 1, 4, 8), np.float32), "w")
    with pytest.raises(GraphError, match=r"conv2d_nchwc: weight \(2, 2, 1, 1, 4, 8\) does not"):
        b.op("conv2d_nchwc", [xb, w], **conv)
    with pytest.raises(GraphError, match=r"conv2d_nchwc: weight \(2, 2, 1, 1, 4, 8\) does not"):
        b.op("conv2d_nchwc", [x, w], **conv)        # NCHW data: 12 channels, not 2 x 4
    dw = b.constant(np.zeros((3, 3, 3, 8), np.float32), "dw")
    with pytest.raises(GraphError, match=r"depthwise_conv2d_nchwc: weight .* does not match"):
        b.op("depthwise_conv2d_nchwc", [xb, dw], **conv)
    with pytest.raises(GraphError, match="layout must be 'auto', 'blocked' or 'NCHW'"):
        optimize(conv_model(c=16, k=16, image=6), layout="NHWC")


def test_pass_blocks_the_convolutions_and_keeps_activations_blocked_between_them():
    model = inverted_residual_model()
    blocked = blocked_layout(optimize(model, layout="NCHW"))
    ops = [n.op for n in blocked.nodes]
    assert ops.count("conv2d_nchwc") == 3 and ops.count("depthwise_conv2d_nchwc") == 1
    assert ops.count("conv2d") == 1                       # the grouped convolution
    # The stem reads the image (one block of its 3 channels) in place; out once (before
    # the grouped conv).
    assert ops.count("layout_to_blocked") == 0 and ops.count("layout_from_blocked") == 1
    assert blocked.nodes[0].op == "conv2d_nchwc" and blocked.nodes[0].inputs[0] == "input"
    # 24 channels: one block of 24; 144: blocks of 16.
    shapes = [blocked.types[n.output].shape for n in blocked.nodes if n.op == "conv2d_nchwc"]
    assert shapes == [(1, 1, 6, 6, 24), (1, 9, 6, 6, 16), (1, 1, 6, 6, 24)]
    inputs = random_inputs(model)
    want = model.evaluate(inputs)["output"]
    np.testing.assert_allclose(blocked.evaluate(inputs)["output"], want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())
    # The epilogues (bias, clip, residual add) fuse into the blocked convolutions.
    names = [g.name for g in fuse_ops(blocked) if g.kind != "view"]
    assert names == ["fused_conv2d_nchwc_add_clip",
                     "fused_conv2d_nchwc_add_clip", "fused_depthwise_conv2d_nchwc_add_clip",
                     "fused_conv2d_nchwc_add_add", "fused_layout_from_blocked",
                     "fused_conv2d_add_clip", "fused_global_avg_pool2d"]
    # Idempotent: what is left in NCHW stays so.
    assert [n.op for n in blocked_layout(blocked).nodes] == ops


def test_layout_policy():
    model = inverted_residual_model()
    assert "conv2d_nchwc" in [n.op for n in optimize(model).nodes]          # auto: blocked
    assert "conv2d_nchwc" not in [n.op for n in optimize(model, layout="NCHW").nodes]
    # A Winograd convolution's halves are blocked too ...
    winograd = [n.op for n in optimize(conv_model()).nodes]
    assert "winograd_input_rows_nchwc" in winograd and "winograd_input_rows" not in winograd
    # ... and without Winograd the direct convolution is.
    direct = optimize(conv_model(), winograd=False)
    assert [g.name for g in fuse_ops(direct)] == [
        "fused_layout_to_blocked", "fused_conv2d_nchwc_add_add_relu",
        "fused_layout_from_blocked"]
    # The block: 16 where it divides the channels, all of them below 32 channels, else 8.
    for channels, shape in ((48, (1, 3, 6, 6, 16)), (24, (1, 1, 6, 6, 24)),
                            (40, (1, 5, 6, 6, 8))):
        model = optimize(conv_model(c=channels, k=channels, image=6))
        conv = next(n for n in model.nodes if n.op == "conv2d_nchwc")
        assert model.types[conv.output].shape == shape
    # Convolutions of fewer than 16 output channels (a block would be the whole tensor)
    # and weights given at run time stay in NCHW.
    for small in (conv_model(c=8, k=8, image=6), conv_model(c=16, k=16, image=6,
                                                            weight_input=True)):
        assert "conv2d_nchwc" not in [n.op for n in optimize(small).nodes]


def test_blocked_weights_are_task_constants():
    tasks = {t.name: t for t in extract_tasks(inverted_residual_model())}
    assert tasks["fused_depthwise_conv2d_nchwc_add_clip"].weight_params == frozenset({1, 2})
    assert tasks["fused_conv2d_nchwc_add_add"].weight_params >= frozenset({1, 2})


@pytest.mark.parametrize("lookup", [None, "sampled"])
def test_built_blocked_model_matches_numpy(lookup):
    """Built with the default schedules, and with random schedules for every kernel."""
    model = inverted_residual_model(image=14)
    inputs = random_inputs(model)
    want = model.evaluate(inputs)["output"]
    lib = build_model(model, TARGET, lookup=None if lookup is None else sampled_lookup(seed=4),
                      warn=False)
    np.testing.assert_allclose(lib.run(inputs)["output"], want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())
