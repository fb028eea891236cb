"""ONNX import: models built with onnx.helper match onnxruntime after import, fusion and
build, with default schedules and with tuning records."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from autotune.frontends import load_model  # noqa: E402
from autotune.graph import FrontendError, UnsupportedOperatorError, extract_tasks  # noqa: E402
from autotune.graph.build import build_model  # noqa: E402

from .helpers import TARGET, sampled_lookup  # noqa: E402
from .onnx_models import encoder_layer, resnet18_export, run_onnxruntime, small_cnn  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def _check_against_ort(proto, shape, lookup=None):
    model = load_model(proto)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    expected = run_onnxruntime(proto, {"x": x})
    lib = build_model(model, TARGET, lookup=lookup, warn=False)
    got = lib.run({"x": x})
    assert set(got) == set(expected)
    for name in expected:
        # The absolute part scales with the output: a full-size network's logits reach ~60,
        # and one near zero then differs by a few 1e-5 from the summation order alone.
        scale = max(1.0, float(np.max(np.abs(expected[name]))))
        np.testing.assert_allclose(got[name], expected[name], rtol=RTOL, atol=ATOL * scale)
    return model, lib


def test_small_cnn_matches_onnxruntime():
    model, lib = _check_against_ort(small_cnn(), (1, 3, 16, 16))
    assert "batch_norm" in model.summary()
    names = [s.name for s in lib.steps]
    assert "fused_conv2d_add_relu" in names  # batch norm folded, relu fused
    assert lib.report.coverage == 0.0


def test_small_cnn_with_tuning_records_matches_onnxruntime():
    lookup = sampled_lookup()
    _, lib = _check_against_ort(small_cnn(), (1, 3, 16, 16), lookup)
    assert lib.report.coverage == 1.0 and not lib.report.fallbacks
    assert lookup.calls


def test_encoder_layer_matches_onnxruntime():
    model, lib = _check_against_ort(encoder_layer(), (1, 8, 32))
    # Shape arithmetic was evaluated at import: no Shape/Gather nodes remain.
    assert set(model.summary()) <= {"matmul", "add", "slice", "reshape", "transpose",
                                    "divide", "softmax", "layer_norm", "erf", "multiply"}
    assert any(s.name == "fused_matmul_divide" for s in lib.steps)


def test_encoder_layer_with_tuning_records_matches_onnxruntime():
    _, lib = _check_against_ort(encoder_layer(), (1, 8, 32), sampled_lookup(seed=5))
    assert lib.report.coverage == 1.0


def test_resnet18_export_pattern_small():
    proto = resnet18_export(image=32, width=8, classes=10)
    model, lib = _check_against_ort(proto, (1, 3, 32, 32))
    assert len(extract_tasks(model)) < len(lib.steps)


@pytest.mark.slow
def test_resnet18_export_full_size():
    _check_against_ort(resnet18_export(), (1, 3, 224, 224))


@pytest.mark.slow
def test_bert_layer_export_full_size():
    _check_against_ort(encoder_layer(seq=128, hidden=768, heads=12, ffn=3072), (1, 128, 768))


def test_load_from_file(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    model = load_model(str(path))
    assert model.name == "cnn"
    assert model.inputs == ["x"] and model.outputs == ["probs"]
    assert load_model(path).types["probs"].shape == (1, 10)


def _single_node_model(node, inputs, outputs, opset=17):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_operator_names_operator_and_node():
    node = helper.make_node("NonMaxSuppression", ["x"], ["y"], name="nms_7")
    proto = _single_node_model(
        node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    with pytest.raises(UnsupportedOperatorError, match=r"NonMaxSuppression.*'nms_7'"):
        load_model(proto)


def test_unsupported_variant_names_node():
    node = helper.make_node("Pad", ["x", "p"], ["y"], name="runtime_pad", mode="reflect")
    proto = _single_node_model(
        node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
               helper.make_tensor_value_info("p", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])])
    with pytest.raises(UnsupportedOperatorError,
                       match=r"Pad in node 'runtime_pad'.*pads must be a constant"):
        load_model(proto)


def test_symbolic_dimension_needs_input_shapes():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    proto = _single_node_model(
        node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    with pytest.raises(FrontendError, match="symbolic dimension 'batch'.*input_shapes"):
        load_model(proto)
    model = load_model(proto, input_shapes={"x": (3, 4)})
    assert model.types["y"].shape == (3, 4)


def test_pad_concat_reduce_and_friends_match_onnxruntime():
    """Operators the three models above do not use, in one graph."""
    rng = np.random.default_rng(2)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 2, 3, 3],
                           rng.normal(size=(4, 2, 3, 3)).astype(np.float32).ravel())
    nodes = [
        helper.make_node("Pad", ["x", "pads", ""], ["p"], name="pad"),
        helper.make_node("Conv", ["p", "w"], ["c"], name="gconv", group=2, strides=[2, 2],
                         kernel_shape=[3, 3]),
        helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
        helper.make_node("Tanh", ["c"], ["t"], name="tanh"),
        helper.make_node("Concat", ["s", "t"], ["cat"], name="cat", axis=1),
        helper.make_node("ReduceMean", ["cat"], ["m"], name="mean", axes=[2, 3], keepdims=1),
        helper.make_node("Sub", ["cat", "m"], ["d"], name="sub"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="pow"),
        helper.make_node("Sqrt", ["sq"], ["r"], name="sqrt"),
        helper.make_node("Transpose", ["r"], ["y"], name="tr", perm=[0, 2, 3, 1]),
    ]
    inits = [w, helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1]),
             helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])]
    graph = helper.make_graph(nodes, "misc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 4, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 5, 8])],
                              inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8  # what onnxruntime reads
    onnx.checker.check_model(proto)
    _check_against_ort(proto, (1, 4, 9, 9))
