"""ONNX coverage: every unsupported operator reported at once, the check command, and the
operators of today's vision and language families (activations, masks, comparisons, Trilu,
Tile, Range, ArgMax, reductions, instance/group norm, Resize, ConvTranspose, Einsum), each a
one-node model imported, built with default schedules and compared with onnxruntime."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.frontends import load_model  # noqa: E402
from autotune.frontends.check import main  # noqa: E402
from autotune.frontends.onnx import UnsupportedOperatorsError, operator_report  # noqa: E402
from autotune.graph import FrontendError, UnsupportedOperatorError  # noqa: E402
from autotune.graph.passes import fuse_ops, optimize  # noqa: E402
from autotune.graph.build import build_model  # noqa: E402

from .helpers import TARGET  # noqa: E402
from .onnx_models import run_onnxruntime  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
_ELEM = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("int64"): TensorProto.INT64,
         np.dtype("bool"): TensorProto.BOOL, np.dtype("int32"): TensorProto.INT32}


def _model(op, feeds, attrs=None, constants=None, opset=17, outputs=1, inputs=None):
    """A one-node model: ``feeds`` are graph inputs (name -> array), ``constants``
    initializers; ``inputs`` orders the node's inputs ("" for an omitted one)."""
    constants = constants or {}
    names = inputs if inputs is not None else list(feeds) + list(constants)
    outs = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _ELEM[a.dtype], a.shape) for n, a in feeds.items()],
        [onnx.ValueInfoProto(name=o) for o in outs],
        [numpy_helper.from_array(a, n) for n, a in constants.items()])
    return _typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _typed(proto):
    """The model with its outputs' types filled in by ONNX's shape inference (onnxruntime
    needs an element type on every graph output)."""
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    for out in inferred.graph.output:
        if not out.type.tensor_type.elem_type:
            # ONNX infers no type for some function operators (GroupNormalization): theirs
            # is the first input's.
            first = inferred.graph.input[0].type.tensor_type.elem_type
            out.CopyFrom(helper.make_tensor_value_info(out.name, first, None))
    return inferred


def _check(proto, feeds, rtol=RTOL, atol=ATOL):
    """Import, build with default schedules, run, and compare every output with onnxruntime
    (the dtype too: a comparison must give bool, ArgMax int64)."""
    expected = run_onnxruntime(proto, feeds)
    model = load_model(proto)
    lib = build_model(model, TARGET, warn=False)
    got = lib.run(feeds)
    assert set(got) == set(expected)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, name
        assert got[name].shape == want.shape, name
        if want.dtype == np.bool_ or want.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], want)
        else:
            np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol)
    return model, lib


def _rand(*shape, low=-3.0, high=3.0, seed=0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# every unsupported operator at once; the checker
# ---------------------------------------------------------------------------------------------

def _unsupported_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("NonMaxSuppression", ["a"], ["b"], name="nms_1"),
             helper.make_node("Det", ["b"], ["c"], name="det_a"),
             helper.make_node("Det", ["c"], ["d"], name="det_b"),
             helper.make_node("FancyOp", ["d"], ["e"], name="custom", domain="com.example"),
             helper.make_node("Relu", ["e"], ["y"], name="r1")]
    graph = helper.make_graph(nodes, "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example", 1)])


def test_every_unsupported_operator_is_listed_with_its_nodes():
    with pytest.raises(UnsupportedOperatorsError) as info:
        load_model(_unsupported_model())
    err = info.value
    assert isinstance(err, UnsupportedOperatorError)
    assert err.operators == {"NonMaxSuppression": ["nms_1"], "Det": ["det_a", "det_b"],
                             "com.example.FancyOp": ["custom"]}
    text = str(err)
    for piece in ("NonMaxSuppression", "'nms_1'", "Det: 2 node(s): 'det_a', 'det_b'",
                  "com.example.FancyOp", "'custom'"):
        assert piece in text
    assert "Relu:" not in text


def test_operator_report_counts_and_flags():
    report = operator_report(_unsupported_model())
    assert report == [("Relu", 2, True), ("NonMaxSuppression", 1, False), ("Det", 2, False),
                      ("com.example.FancyOp", 1, False)]


def test_check_command_exit_codes(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    onnx.save(_unsupported_model(), str(bad))
    assert main([str(bad)]) == 1
    text = capsys.readouterr().out
    assert "NonMaxSuppression" in text and "NO" in text and "3 of 4" in text
    good = tmp_path / "good.onnx"
    onnx.save(_model("HardSwish", {"x": _rand(2, 3)}), str(good))
    assert main([str(good)]) == 0
    text = capsys.readouterr().out
    assert "HardSwish" in text and "yes" in text and "all 1 operator types" in text
    assert main([str(tmp_path / "missing.onnx")]) == 2


def test_check_command_runs_as_a_module(tmp_path):
    bad = tmp_path / "bad.onnx"
    onnx.save(_unsupported_model(), str(bad))
    done = subprocess.run([sys.executable, "-m", "autotune.frontends.check",
                           str(bad)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "com.example.FancyOp" in done.stdout


# ---------------------------------------------------------------------------------------------
# elementwise: activations, comparisons, logic, where
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op, attrs", [
    ("HardSwish", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Elu", {}), ("Elu", {"alpha": 0.5}),
    ("Softplus", {}), ("Mish", {}),
])
def test_activation_matches_onnxruntime(op, attrs):
    x = _rand(2, 3, 5, 4, low=-6, high=6)
    model, lib = _check(_model(op, {"x": x}, attrs, opset=18), {"x": x})
    assert len(model.nodes) == 1 and len(lib.steps) == 1


def test_softplus_and_mish_do_not_overflow():
    x = np.array([[-100.0, -20.0, 0.0, 20.0, 95.0]], dtype=np.float32)
    for op in ("Softplus", "Mish"):
        _check(_model(op, {"x": x}, opset=18), {"x": x})


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (1,), (4,), (2, 3, 5, 4)])
def test_prelu_broadcasts_the_slope(slope_shape):
    x = _rand(2, 3, 5, 4)
    slope = _rand(*slope_shape, low=0.0, high=0.5, seed=1)
    _check(_model("PRelu", {"x": x}, constants={"s": slope}), {"x": x})
    _check(_model("PRelu", {"x": x, "s": slope}), {"x": x, "s": slope})


def test_prelu_slope_that_would_grow_the_input_is_an_error():
    x = _rand(3, 1)
    with pytest.raises(FrontendError, match="prelu_node.*slope of shape"):
        load_model(_model("PRelu", {"x": x}, constants={"s": _rand(3, 4)}))


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                    ((3, 1), (1, 5))])
def test_comparison_gives_bool_with_broadcasting(op, shapes):
    a = np.round(_rand(*shapes[0], seed=2))  # rounded: many ties, so == is exercised
    b = np.round(_rand(*shapes[1], seed=3))
    _check(_model(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_integer_equal_against_a_constant():
    a = np.arange(12, dtype=np.int64).reshape(3, 4) % 3
    _check(_model("Equal", {"a": a}, constants={"b": np.array([1], dtype=np.int64)}),
           {"a": a})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_with_broadcasting(op):
    rng = np.random.default_rng(4)
    a, b = rng.random((2, 3, 4)) > 0.5, rng.random((3, 1)) > 0.5
    _check(_model(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_not():
    a = np.random.default_rng(5).random((4, 5)) > 0.5
    _check(_model("Not", {"a": a}), {"a": a})


@pytest.mark.parametrize("shapes", [((2, 3, 4),) * 3, ((1, 1, 4, 4), (2, 3, 4, 4), (1,)),
                                    ((4, 1), (1, 5), (4, 5))])
def test_where_broadcasts_all_three(shapes):
    rng = np.random.default_rng(6)
    cond = rng.random(shapes[0]) > 0.4
    a, b = _rand(*shapes[1], seed=7), _rand(*shapes[2], seed=8)
    _check(_model("Where", {"c": cond, "a": a, "b": b}), {"c": cond, "a": a, "b": b})


def test_attention_mask_chain_fuses_into_one_kernel():
    """Less -> Not -> Where -> HardSwish: one injective group, as the existing elementwise
    operators fuse."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    m = helper.make_tensor_value_info("m", TensorProto.FLOAT, [4])
    nodes = [helper.make_node("Less", ["x", "m"], ["c"]), helper.make_node("Not", ["c"], ["n"]),
             helper.make_node("Where", ["n", "x", "m"], ["w"]),
             helper.make_node("HardSwish", ["w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x, m],
                              [onnx.ValueInfoProto(name="y")])
    proto = _typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = {"x": _rand(2, 3, 4), "m": _rand(4, seed=1)}
    model, _ = _check(proto, feeds)
    assert [g.name for g in fuse_ops(optimize(model))] == \
        ["fused_less_logical_not_where_hard_swish"]


def test_conv_followed_by_hard_swish_is_one_kernel():
    x = _rand(1, 3, 8, 8)
    w = _rand(4, 3, 3, 3, low=-0.5, high=0.5, seed=1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(w, "w")])
    proto = _typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    _, lib = _check(proto, {"x": x})
    assert [s.name for s in lib.steps] == ["fused_conv2d_hard_swish"]


# ---------------------------------------------------------------------------------------------
# Trilu, Tile, Range
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -2])
def test_trilu(upper, k):
    x = _rand(2, 5, 6)
    constants = {} if k is None else {"k": np.array(k, dtype=np.int64)}
    _check(_model("Trilu", {"x": x}, {"upper": upper}, constants), {"x": x})


@pytest.mark.parametrize("shape, repeats", [((2, 3), (2, 3)), ((1, 3, 1), (4, 1, 2)),
                                            ((2, 3, 4), (1, 1, 1))])
def test_tile(shape, repeats):
    x = _rand(*shape)
    _check(_model("Tile", {"x": x}, constants={"r": np.array(repeats, dtype=np.int64)}),
           {"x": x})


@pytest.mark.parametrize("start, limit, delta, dtype", [
    (0, 7, 1, np.int64), (10, 1, -3, np.int64), (0.5, 3.0, 0.75, np.float32),
    (3, 10, 2, np.int32)])
def test_range_of_constants(start, limit, delta, dtype):
    """Range on constants folds at import; added to an input so that the model computes."""
    count = int(np.ceil((limit - start) / delta))
    proto = _range_model(start, limit, delta, dtype, count)
    x = np.ones((2, count), dtype=dtype)
    _check(proto, {"x": x})


def _range_model(start, limit, delta, dtype, count):
    consts = [numpy_helper.from_array(np.array(v, dtype=dtype), n)
              for n, v in (("s", start), ("l", limit), ("d", delta))]
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"], name="range"),
             helper.make_node("Add", ["x", "r"], ["y"])]
    elem = _ELEM[np.dtype(dtype)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem,
                                                                         [2, count])],
                              [helper.make_tensor_value_info("y", elem, None)], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_range_of_a_computed_input_is_unsupported():
    s = np.array(0, dtype=np.int64)
    proto = _model("Range", {"s": s}, constants={"l": np.array(4, dtype=np.int64),
                                                 "d": np.array(1, dtype=np.int64)})
    with pytest.raises(UnsupportedOperatorError, match="range_node.*start must be a constant"):
        load_model(proto)


# ---------------------------------------------------------------------------------------------
# ArgMax, ReduceL2, ReduceProd
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1, "keepdims": 0}, {"axis": -1},
                                   {"axis": 2, "select_last_index": 1}])
def test_arg_reduce_with_ties(op, attrs):
    x = np.round(_rand(2, 4, 5, seed=9))  # rounded: ties decide select_last_index
    _check(_model(op, {"x": x}, attrs), {"x": x})


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceProd"])
@pytest.mark.parametrize("attrs", [{}, {"axes": [1], "keepdims": 0}, {"axes": [0, -1]}])
def test_l2_and_prod_reductions(op, attrs):
    x = _rand(2, 3, 4, low=0.5, high=1.5, seed=10)
    _check(_model(op, {"x": x}, attrs, opset=17), {"x": x})


def test_reduce_l2_with_axes_input_at_opset_18():
    x = _rand(2, 3, 4, seed=11)
    proto = _model("ReduceL2", {"x": x}, {"keepdims": 1}, {"axes": np.array([2], np.int64)},
                   opset=18)
    _check(proto, {"x": x})


# ---------------------------------------------------------------------------------------------
# InstanceNormalization, GroupNormalization
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 4, 7)])
def test_instance_norm(shape):
    x = _rand(*shape)
    c = shape[1]
    consts = {"s": _rand(c, low=0.5, high=1.5, seed=1), "b": _rand(c, seed=2)}
    _check(_model("InstanceNormalization", {"x": x}, {"epsilon": 1e-3}, consts), {"x": x})


@pytest.mark.parametrize("groups, opset", [(2, 21), (1, 21), (6, 21), (3, 18)])
def test_group_norm(groups, opset):
    x = _rand(2, 6, 4, 5)
    width = 6 if opset >= 21 else groups  # opset 18 scales per group, 21 per channel
    consts = {"s": _rand(width, low=0.5, high=1.5, seed=1), "b": _rand(width, seed=2)}
    proto = _model("GroupNormalization", {"x": x}, {"num_groups": groups}, consts, opset=opset)
    _check(proto, {"x": x})


def test_group_norm_groups_must_divide_channels():
    x = _rand(1, 6, 2, 2)
    consts = {"s": _rand(6), "b": _rand(6)}
    with pytest.raises(FrontendError, match="num_groups=4 does not divide the 6 channels"):
        load_model(_model("GroupNormalization", {"x": x}, {"num_groups": 4}, consts,
                          opset=21))


# ---------------------------------------------------------------------------------------------
# Resize
# ---------------------------------------------------------------------------------------------

_NO_ROI = np.zeros(0, dtype=np.float32)


@pytest.mark.parametrize("mode, coordinate, rounding", [
    ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "half_pixel", "round_prefer_ceil"), ("nearest", "align_corners", "ceil"),
    ("nearest", "pytorch_half_pixel", "round_prefer_floor"),
    ("linear", "half_pixel", None), ("linear", "align_corners", None),
    ("linear", "asymmetric", None), ("linear", "pytorch_half_pixel", None),
])
@pytest.mark.parametrize("scales", [(2.0, 2.0), (0.5, 1.5), (3.0, 1.0)])
def test_resize_with_scales(mode, coordinate, rounding, scales):
    x = _rand(1, 2, 6, 4)
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinate}
    if rounding:
        attrs["nearest_mode"] = rounding
    consts = {"roi": _NO_ROI, "scales": np.array((1.0, 1.0) + scales, dtype=np.float32)}
    _check(_model("Resize", {"x": x}, attrs, consts, opset=13), {"x": x})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sizes", [(9, 7), (3, 2), (1, 5)])
def test_resize_with_sizes(mode, sizes):
    x = _rand(2, 3, 6, 4)
    consts = {"roi": _NO_ROI, "scales": np.zeros(0, dtype=np.float32),
              "sizes": np.array((2, 3) + sizes, dtype=np.int64)}
    _check(_model("Resize", {"x": x}, {"mode": mode}, consts, opset=13), {"x": x})


def test_resize_with_omitted_roi_and_axes_at_opset_18():
    x = _rand(1, 2, 5, 5)
    proto = _model("Resize", {"x": x}, {"mode": "linear", "axes": [2, 3]},
                   {"scales": np.array([2.0, 0.6], dtype=np.float32)}, opset=18,
                   inputs=["x", "", "scales"])
    _check(proto, {"x": x})


@pytest.mark.parametrize("attrs, match", [
    ({"mode": "cubic"}, "mode='cubic'"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, "tf_crop_and_resize"),
])
def test_resize_unsupported_variants_name_the_node(attrs, match):
    x = _rand(1, 1, 4, 4)
    consts = {"roi": _NO_ROI, "scales": np.array([1, 1, 2, 2], dtype=np.float32)}
    with pytest.raises(UnsupportedOperatorError, match=f"resize_node.*{match}"):
        load_model(_model("Resize", {"x": x}, attrs, consts, opset=13))


# ---------------------------------------------------------------------------------------------
# ConvTranspose
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    {}, {"strides": [2, 2]}, {"strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    {"strides": [2, 1], "pads": [0, 1, 1, 0]},
    {"strides": [2, 2], "output_shape": [10, 9]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(attrs, bias):
    x = _rand(1, 3, 5, 4)
    consts = {"w": _rand(3, 2, 3, 3, low=-0.5, high=0.5, seed=1)}
    if bias:
        consts["b"] = _rand(2, seed=2)
    model, lib = _check(_model("ConvTranspose", {"x": x}, attrs, consts), {"x": x})
    assert "conv2d_transpose" in model.summary()
    assert len(lib.steps) == 1  # the bias add fuses into the transposed convolution


def test_conv_transpose_groups_match_onnxruntime():
    x = _rand(1, 4, 3, 3)
    feeds = {"x": x}
    _check(_model("ConvTranspose", feeds, {"group": 2, "strides": [2, 2]},
                  {"w": _rand(4, 3, 3, 3)}), feeds)


# ---------------------------------------------------------------------------------------------
# Einsum
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 5, 8)]),   # attention scores
    ("bhij,bhjd->bhid", [(2, 3, 4, 5), (2, 3, 5, 8)]),   # attention context
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ik,kj", [(3, 4), (4, 5)]),                          # implicit output
    ("bnd,bmd->bnm", [(2, 3, 4), (2, 5, 4)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ijk,k->ji", [(2, 3, 4), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("bij->bj", [(2, 3, 4)]),
])
def test_einsum(equation, shapes):
    feeds = {f"x{k}": _rand(*s, seed=k) for k, s in enumerate(shapes)}
    _check(_model("Einsum", feeds, {"equation": equation}, opset=12), feeds)


def test_einsum_diagonal_is_unsupported():
    with pytest.raises(UnsupportedOperatorError, match="einsum_node.*diagonals"):
        load_model(_model("Einsum", {"x": _rand(3, 3)}, {"equation": "ii->i"}, opset=12))


def test_conv_transpose_output_shape_with_same_upper():
    x = _rand(1, 2, 4, 4)
    proto = _model("ConvTranspose", {"x": x}, {"strides": [2, 2], "output_shape": [8, 9],
                                               "auto_pad": "SAME_UPPER"},
                   {"w": _rand(2, 3, 3, 3, seed=1)})
    _check(proto, {"x": x})
