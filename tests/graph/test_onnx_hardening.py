"""Hostile and degenerate ONNX files: typed errors naming the node and attribute, size limits
before anything is allocated, and NaN / Inf carried through every elementwise and pooling
operator as onnxruntime carries them."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autotune  # noqa: E402
from autotune.frontends import DEFAULT_MAX_ELEMENTS, load_model  # noqa: E402
from autotune.graph import FrontendError  # noqa: E402

from .helpers import TARGET  # noqa: E402
from .onnx_models import run_onnxruntime  # noqa: E402

OPSET = 17


def _model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hardening", inputs, outputs, list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    return proto


def _value(name: str, shape, elem_type=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _relu_model(shape) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [_value("x", shape)], [_value("y", None)])


# ---------------------------------------------------------------------------------------------
# sizes: refused before anything is allocated
# ---------------------------------------------------------------------------------------------

def test_constant_of_shape_too_large_is_refused_before_allocating():
    proto = _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], [],
                   [_value("y", None)], [_init("s", np.array([100000, 100000], np.int64))])
    with pytest.raises(FrontendError, match=r"'fill' \(ConstantOfShape\).*10000000000 "
                                            r"elements.*max_elements"):
        load_model(proto)


def test_max_elements_can_be_raised_and_lowered():
    proto = _model([helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
                    helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                   [_value("x", [4, 8])], [_value("y", None)],
                   [_init("s", np.array([4, 8], np.int64))])
    with pytest.raises(FrontendError, match="limit of 16"):
        load_model(proto, max_elements=16)
    # 34: the 32 elements of the filled constant and the 2 of its shape.
    assert load_model(proto, max_elements=34).types["y"].shape == (4, 8)
    with pytest.raises(FrontendError, match="constants of the model reach 34 elements"):
        load_model(proto, max_elements=33)
    with pytest.raises(FrontendError, match="max_elements must be a positive int"):
        load_model(proto, max_elements=0)


def test_input_of_1e15_elements_is_refused_at_import():
    with pytest.raises(FrontendError, match=r"graph input 'x' of shape \(100000, 100000, "
                                            r"100000\).*limit of 2147483648"):
        load_model(_relu_model([100000, 100000, 100000]))
    assert DEFAULT_MAX_ELEMENTS == 2 ** 31


def test_input_shapes_beyond_the_limit_are_refused():
    with pytest.raises(FrontendError, match="graph input 'x'.*above the limit"):
        load_model(_relu_model(["n", 4]), input_shapes={"x": (2 ** 40, 4)})


def test_expand_to_a_huge_shape_is_refused():
    proto = _model([helper.make_node("Expand", ["x", "s"], ["y"], name="grow")],
                   [_value("x", [1, 1])], [_value("y", None)],
                   [_init("s", np.array([1 << 20, 1 << 20], np.int64))])
    with pytest.raises(FrontendError, match=r"'grow' \(Expand\).*above the limit"):
        load_model(proto)


def test_total_constants_are_bounded():
    # Each constant alone fits; together they pass the limit.
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"c{k}"], name=f"fill{k}")
             for k in range(3)]
    nodes.append(helper.make_node("Identity", ["c2"], ["y"]))
    proto = _model(nodes, [], [_value("y", None)], [_init("s", np.array([10, 10], np.int64))])
    with pytest.raises(FrontendError, match="constants of the model reach 302 elements"):
        load_model(proto, max_elements=250)


# ---------------------------------------------------------------------------------------------
# attributes: typed errors naming the node and the attribute
# ---------------------------------------------------------------------------------------------

def _conv_model(**attrs) -> onnx.ModelProto:
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", **attrs)],
                  [_value("x", [1, 2, 6, 6])], [_value("y", None)],
                  [_init("w", np.ones((3, 2, 3, 3), np.float32))])


@pytest.mark.parametrize("attrs, pattern", [
    ({"strides": [0, 0]}, r"attribute strides=\[0, 0\] must have every entry at least 1"),
    ({"strides": [-1, 1]}, r"attribute strides=\[-1, 1\]"),
    ({"strides": [1]}, r"attribute strides=\[1\] must have 2 entries"),
    ({"dilations": [0, 1]}, r"attribute dilations=\[0, 1\]"),
    ({"pads": [-1, 0, 0, 0]}, r"attribute pads=\[-1, 0, 0, 0\]"),
    ({"pads": [1, 1]}, r"attribute pads=\[1, 1\] must have 4 entries"),
    ({"group": 0}, r"attribute group=0 must be at least 1"),
    ({"kernel_shape": [2, 2]}, r"attribute kernel_shape=\[2, 2\] does not match"),
    ({"auto_pad": "SAME_UPPER", "strides": [0, 1]}, r"attribute strides=\[0, 1\]"),
])
def test_conv_with_invalid_attributes_names_node_and_attribute(attrs, pattern):
    with pytest.raises(FrontendError, match=r"node 'conv1' \(Conv\): " + pattern):
        load_model(_conv_model(**attrs))


@pytest.mark.parametrize("op, attrs, pattern", [
    ("MaxPool", {}, "attribute kernel_shape is required"),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 2]}, r"attribute strides=\[0, 2\]"),
    ("AveragePool", {"kernel_shape": [0, 2]}, r"attribute kernel_shape=\[0, 2\]"),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]},
     r"attribute pads=\[2, 0, 0, 0\] must be smaller than kernel_shape"),
    ("AveragePool", {"kernel_shape": [2, 2], "ceil_mode": 3}, "attribute ceil_mode=3"),
])
def test_pool_with_invalid_attributes_names_node_and_attribute(op, attrs, pattern):
    proto = _model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)],
                   [_value("x", [1, 1, 4, 4])], [_value("y", None)])
    with pytest.raises(FrontendError, match=rf"node 'pool' \({op}\): " + pattern):
        load_model(proto)


@pytest.mark.parametrize("node, pattern", [
    (helper.make_node("Softmax", ["x"], ["y"], name="n", axis=2),
     "attribute axis 2 is out of range for a rank-2"),
    (helper.make_node("Concat", ["x", "x"], ["y"], name="n"), "attribute axis is required"),
    (helper.make_node("Concat", ["x", "x"], ["y"], name="n", axis=-3), "axis -3 is out of"),
    (helper.make_node("Flatten", ["x"], ["y"], name="n", axis=3), "axis 3 is out of range"),
    (helper.make_node("Transpose", ["x"], ["y"], name="n", perm=[0, 0]),
     r"attribute perm=\[0, 0\] is not a permutation"),
    (helper.make_node("Cast", ["x"], ["y"], name="n"), "attribute to is required"),
    (helper.make_node("Cast", ["x"], ["y"], name="n", to=TensorProto.STRING),
     "attribute to: element type object is not supported"),
    (helper.make_node("Relu", ["x", "x"], ["y"], name="n"), "takes 1 inputs, got 2"),
    (helper.make_node("Add", ["x"], ["y"], name="n"), "takes 2 inputs, got 1"),
    (helper.make_node("Split", ["x"], ["y", "z"], name="n", axis=5), "axis 5 is out of range"),
    (helper.make_node("Gemm", ["x", "x"], ["y"], name="n", transB=2), "attribute transB=2"),
])
def test_invalid_nodes_raise_frontend_error_naming_the_node(node, pattern):
    proto = _model([node], [_value("x", [2, 2])], [_value("y", None)])
    with pytest.raises(FrontendError, match=rf"node 'n' \({node.op_type}\): .*" + pattern):
        load_model(proto)


@pytest.mark.parametrize("node, initializers, pattern", [
    (helper.make_node("Gather", ["d", "i"], ["y"], name="n"),
     [_init("d", np.arange(3)), _init("i", np.array([5]))], "indices .* out of range"),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"], name="n"),
     [_init("a", np.array([0, 0], np.int64))], r"axes \[0, 0\] repeat an axis"),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"], name="n"),
     [_init("a", np.array([7], np.int64))], "axes input entry 7 is out of range"),
    (helper.make_node("Squeeze", ["x", "a"], ["y"], name="n"),
     [_init("a", np.array([4], np.int64))], "axes input entry 4 is out of range"),
    (helper.make_node("Reshape", ["x", "s"], ["y"], name="n"),
     [_init("s", np.array([-2, -2], np.int64))], "entry below -1"),
    (helper.make_node("Slice", ["x", "b", "e", "a"], ["y"], name="n"),
     [_init("b", np.array([0], np.int64)), _init("e", np.array([1], np.int64)),
      _init("a", np.array([3], np.int64))], "axes entry 3 is out of range"),
    (helper.make_node("Clip", ["x", "lo"], ["y"], name="n"),
     [_init("lo", np.zeros(2, np.float32))], "min must be a single number"),
    (helper.make_node("ConstantOfShape", ["s"], ["y"], name="n"),
     [_init("s", np.array([-3], np.int64))], "negative dimension"),
    (helper.make_node("Div", ["a", "b"], ["y"], name="n"),
     [_init("a", np.array([4], np.int64)), _init("b", np.array([0], np.int64))],
     "integer division by zero"),
])
def test_invalid_constant_arguments_raise_frontend_error(node, initializers, pattern):
    proto = _model([node], [_value("x", [2, 2])], [_value("y", None)], initializers)
    with pytest.raises(FrontendError, match=rf"node 'n' \({node.op_type}\): .*" + pattern):
        load_model(proto)


# ---------------------------------------------------------------------------------------------
# inputs and sources
# ---------------------------------------------------------------------------------------------

def test_input_without_shape_needs_input_shapes():
    with pytest.raises(FrontendError, match=r"graph input 'x' declares no shape; pass "
                                            r"input_shapes="):
        load_model(_relu_model(None))
    model = load_model(_relu_model(None), input_shapes={"x": (2, 3)})
    assert model.types["x"].shape == (2, 3)
    # A shape with no dimensions is a scalar, and stays one.
    assert load_model(_relu_model([])).types["x"].shape == ()


@pytest.mark.parametrize("shapes, pattern", [
    ({"x": "abc"}, r"input_shapes\['x'\] must be a tuple of ints, got 'abc'"),
    ({"x": (2, "3")}, r"input_shapes\['x'\] must be a tuple of ints"),
    ({"x": (2, 0)}, r"input_shapes\['x'\] = \(2, 0\) has a dimension below 1"),
    ({"x": 5}, r"input_shapes\['x'\] must be a tuple of ints, got 5"),
    ({"y": (2, 2)}, r"input_shapes names \['y'\], which are not inputs"),
    ({"x": (2, 2, 2)}, r"input_shapes\['x'\] = \(2, 2, 2\) has rank 3; the graph declares"),
    ([("x", (2, 2))], "input_shapes must be a dict"),
])
def test_bad_input_shapes_raise_frontend_error(shapes, pattern):
    with pytest.raises(FrontendError, match=pattern):
        load_model(_relu_model(["n", 2]), input_shapes=shapes)


def test_load_model_parses_serialized_bytes():
    model = load_model(_relu_model([2, 3]).SerializeToString())
    assert model.types["y"].shape == (2, 3)
    with pytest.raises(FrontendError, match="bytes given are not a serialized ONNX model"):
        load_model(b"\xff\x00 certainly not protobuf")


def test_non_positive_declared_dimension_is_refused():
    with pytest.raises(FrontendError, match="graph input 'x' has dimension -4"):
        load_model(_relu_model([2, -4]))


# ---------------------------------------------------------------------------------------------
# NaN and +/-Inf through every elementwise and pooling operator
# ---------------------------------------------------------------------------------------------

# NOTE: the cases marked True in the last column compile to min/max (or compares) in the LLVM
# code generator, which must propagate NaN as onnxruntime does; they fail on a codegen that
# lowers min/max to ordered compares or minnum/maxnum.

_SHAPE = (1, 2, 4, 4)


def _special_values(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, _SHAPE).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.permutation(flat.size)
    flat[picks[:5]] = np.nan
    flat[picks[5:9]] = np.inf
    flat[picks[9:13]] = -np.inf
    return x


# (op type, attributes, extra inputs: "name" a second graph input or a constant, uses min/max)
_NAN_CASES = [
    ("Relu", {}, [], True),
    ("Sigmoid", {}, [], False),
    ("Tanh", {}, [], False),
    ("Erf", {}, [], False),
    ("Sqrt", {}, [], False),
    ("Exp", {}, [], False),
    ("Log", {}, [], False),
    ("Abs", {}, [], False),
    ("Neg", {}, [], False),
    ("Identity", {}, [], False),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, [], True),
    ("Clip", {}, [np.float32(-1.0), np.float32(1.5)], True),
    ("Clip", {}, [np.float32(0.0)], True),
    ("Add", {}, ["second"], False),
    ("Sub", {}, ["second"], False),
    ("Mul", {}, ["second"], False),
    ("Div", {}, ["second"], False),
    ("Pow", {}, [np.float32(2.0)], False),
    ("Pow", {}, [np.float32(3.0)], False),
    ("Max", {}, ["second"], True),
    ("Min", {}, ["second"], True),
    ("MaxPool", {"kernel_shape": [2, 2]}, [], True),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, [], True),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [], False),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [], False),
    ("GlobalAveragePool", {}, [], False),
    ("GlobalMaxPool", {}, [], True),
]


def _nan_case_id(case) -> str:
    op, attrs, extra, _ = case
    return op + "".join(f"-{k}{v}" for k, v in attrs.items()) + f"-{len(extra)}"


def _one_node_model(op: str, attrs: dict, extra: list) -> tuple[onnx.ModelProto, dict]:
    inputs, names, initializers = [_value("x", _SHAPE)], ["x"], []
    feed = {"x": _special_values(0)}
    for k, value in enumerate(extra):
        if isinstance(value, str):
            inputs.append(_value(value, _SHAPE))
            names.append(value)
            feed[value] = _special_values(k + 1)
        else:
            names.append(f"c{k}")
            initializers.append(_init(f"c{k}", np.asarray(value)))
    node = helper.make_node(op, names, ["y"], name=op.lower(), **attrs)
    return _model([node], inputs, [_value("y", None)], initializers), feed


def _max_pool_reference(x: np.ndarray, op: str, attrs: dict) -> np.ndarray:
    """Max pooling in which a NaN anywhere in a window makes the window's result NaN."""
    if op == "GlobalMaxPool":
        return np.max(x, axis=(2, 3), keepdims=True)
    (kh, kw), (sh, sw) = attrs["kernel_shape"], attrs.get("strides", (1, 1))
    pt, pl, pb, pr = attrs.get("pads", (0, 0, 0, 0))
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    oh, ow = (padded.shape[2] - kh) // sh + 1, (padded.shape[3] - kw) // sw + 1
    out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = np.max(padded[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw],
                                     axis=(2, 3))
    return out


def _expected(op: str, attrs: dict, proto, feed) -> np.ndarray:
    """onnxruntime's result, except for max pooling: its vectorised max keeps or drops a NaN
    depending on where in the window it sits, so there the oracle is the NaN-propagating
    reference, checked to agree with onnxruntime on every NaN it does give and on every
    window without a NaN."""
    ort = run_onnxruntime(proto, feed)["y"]
    if op not in ("MaxPool", "GlobalMaxPool"):
        return ort
    with np.errstate(invalid="ignore"):
        reference = _max_pool_reference(feed["x"], op, attrs)
    assert np.isnan(reference)[np.isnan(ort)].all()
    clean = ~np.isnan(reference)
    np.testing.assert_array_equal(ort[clean], reference[clean])
    return reference


@pytest.mark.parametrize("case", _NAN_CASES, ids=[_nan_case_id(c) for c in _NAN_CASES])
def test_nan_and_inf_propagate_like_onnxruntime(case):
    op, attrs, extra, _ = case
    proto, feed = _one_node_model(op, attrs, extra)
    expected = _expected(op, attrs, proto, feed)
    lib = autotune.build(load_model(proto), target=TARGET)
    got = lib.run(feed)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("case", _NAN_CASES, ids=[_nan_case_id(c) for c in _NAN_CASES])
def test_reference_evaluator_propagates_nan_like_onnxruntime(case):
    """The graph's own numpy evaluator (constant folding uses it too) is the reference of
    every build: it must carry NaN and Inf where onnxruntime does."""
    op, attrs, extra, _ = case
    proto, feed = _one_node_model(op, attrs, extra)
    expected = _expected(op, attrs, proto, feed)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        got = load_model(proto).evaluate(feed)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
