"""ONNX patterns that PyTorch's exporters write for the anchor models (shared/anchors/
e2e_models.py: ResNet-18 and a BERT-base encoder layer) and that the hand-built models of
onnx_models.py do not contain.  Each graph is small and built node by node with onnx.helper the
way the exporter writes it (node names, attribute spellings, operand order), then imported,
built with default schedules and compared with onnxruntime.

Exporters and settings whose output these tests follow:
- legacy TorchScript exporter (``dynamo=False``), opset 17, constant folding on: weights shared
  by several modules become ``Identity`` nodes of one initializer; attention reshapes get
  constant targets and the key is transposed straight to (0, 2, 3, 1);
- the same exporter with ``do_constant_folding=False``: BatchNormalization nodes whose
  statistics are Identity aliases of other modules' initializers;
- the same exporter with ``dynamic_axes`` (symbolic batch): Shape -> Gather -> Unsqueeze ->
  Concat chains compute every reshape target;
- the same exporter at opset 11 and 13: LayerNorm decomposed into ReduceMean / Sub / Pow /
  Sqrt / Div, Split sizes as an attribute (11) or input (13), Softmax with an explicit axis;
- the torch.export-based exporter (``dynamo=True``, opset 20): Split with ``num_outputs``,
  Reshape with ``allowzero=1``, a Gelu node, LayerNormalization with ``stash_type``, bias added
  after the MatMul, and ResNet's pooling as ReduceMean over axes (-1, -2) plus a Reshape.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

from autotune.frontends import load_model
from autotune.graph import FrontendError, UnsupportedOperatorError
from autotune.graph.build import build_model

from .helpers import TARGET
from .onnx_models import run_onnxruntime

RTOL, ATOL = 1e-4, 1e-5


class _Export:
    """Collects nodes and initializers under the exporter's naming scheme."""

    def __init__(self, seed: int = 0):
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.counts: dict[str, int] = {}

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def rand(self, name: str, shape, scale: float = 0.3) -> str:
        return self.init(name, self.rng.normal(0, scale, shape).astype(np.float32))

    def node(self, op: str, inputs, scope: str = "", outputs: int = 1, **attrs):
        k = self.counts.get(scope + op, 0)
        self.counts[scope + op] = k + 1
        base = f"{scope}/{op}" + (f"_{k}" if k else "")
        outs = [f"{base}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=base, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, value, dtype=np.int64, scope: str = "") -> str:
        return self.node("Constant", [], scope,
                         value=numpy_helper.from_array(np.array(value, dtype=dtype)))

    def model(self, name: str, x_shape, y_shape, opset: int = 17, y_dtype=TensorProto.FLOAT):
        # The final node writes the graph output "y", as the exporters name it when asked.
        self.nodes[-1].output[0] = "y"
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info("y", y_dtype, y_shape)], self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        proto.ir_version = 9  # readable by onnxruntime for every opset used here (<= 20)
        onnx.checker.check_model(proto, full_check=True)
        return proto


def _check(proto, shape, input_shapes=None):
    model = load_model(proto, input_shapes=input_shapes)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = run_onnxruntime(proto, {"x": x})["y"]
    got = build_model(model, TARGET).run({"x": x})["y"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    return model


# ------------------------------------------------------------------------------- ResNet-18


def test_identity_aliased_weights_and_unfolded_batch_norm():
    """do_constant_folding=False: BatchNormalization kept, and parameters equal between
    modules (fresh BN: weight 1, bias 0, mean 0, var 1) exported once, the other modules
    reading them through Identity nodes, which come first in the graph."""
    g = _Export()
    c = 6
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    g.init("bn1.weight", ones * 1.3)
    g.init("bn1.bias", zeros + 0.1)
    g.init("bn1.running_mean", zeros - 0.2)
    g.init("bn1.running_var", ones * 0.7)
    for param, source in (("weight", "bn1.weight"), ("bias", "bn1.bias"),
                          ("running_mean", "bn1.running_mean"),
                          ("running_var", "bn1.running_var")):
        g.nodes.append(helper.make_node("Identity", [source], [f"bn2.{param}"],
                                        name=f"Identity_bn2_{param}"))
    y = g.node("Conv", ["x", g.rand("conv1.weight", (c, 3, 3, 3))], "/conv1",
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1],
               group=1)
    y = g.node("BatchNormalization", [y, "bn1.weight", "bn1.bias", "bn1.running_mean",
                                      "bn1.running_var"], "/bn1", epsilon=1e-5,
               momentum=0.9)
    y = g.node("Relu", [y])
    z = g.node("Conv", [y, g.rand("conv2.weight", (c, c, 3, 3))], "/conv2",
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    z = g.node("BatchNormalization", [z, "bn2.weight", "bn2.bias", "bn2.running_mean",
                                      "bn2.running_var"], "/bn2", epsilon=1e-5,
               momentum=0.9)
    g.node("Relu", [g.node("Add", [z, y])], "/1")
    model = _check(g.model("resnet_nofold", [1, 3, 8, 8], [1, c, 8, 8]), (1, 3, 8, 8))
    assert model.summary().get("batch_norm") == 2
    assert not any(op in model.summary() for op in ("identity", "copy"))


def test_shared_folded_bias_through_identity_then_flatten_gemm():
    """Constant folding on: batch norm folded into Conv biases, an equal bias exported once
    and reused through Identity, then GlobalAveragePool -> Flatten -> Gemm(transB=1)."""
    g = _Export()
    g.init("onnx::Conv_20", np.full(8, 0.05, np.float32))
    g.nodes.append(helper.make_node("Identity", ["onnx::Conv_20"], ["onnx::Conv_23"],
                                    name="Identity_0"))
    y = g.node("Conv", ["x", g.rand("onnx::Conv_19", (8, 3, 3, 3)), "onnx::Conv_20"],
               "/conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    y = g.node("Relu", [y], "/")
    y = g.node("Conv", [y, g.rand("onnx::Conv_22", (8, 8, 3, 3)), "onnx::Conv_23"],
               "/conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = g.node("GlobalAveragePool", [g.node("Relu", [y], "/1")])
    y = g.node("Flatten", [y], axis=1)
    g.node("Gemm", [y, g.rand("fc.weight", (5, 8)), g.rand("fc.bias", (5,))], "/fc",
           alpha=1.0, beta=1.0, transB=1)
    _check(g.model("resnet_tail", [1, 3, 10, 10], [1, 5]), (1, 3, 10, 10))


def test_dynamo_resnet_tail_reduce_mean_axes_input():
    """dynamo=True (opset 20): adaptive_avg_pool2d(x, 1) becomes ReduceMean with axes
    (-1, -2) given as an input and keepdims=1; flatten is a Reshape with allowzero=1."""
    g = _Export()
    y = g.node("Relu", ["x"])
    axes = g.init("val_226", np.array([-1, -2], np.int64))
    y = g.node("ReduceMean", [y, axes], keepdims=1, noop_with_empty_axes=0)
    y = g.node("Reshape", [y, g.init("val_230", np.array([1, 12], np.int64))], allowzero=1)
    g.node("Gemm", [y, g.rand("fc.weight", (4, 12)), g.rand("fc.bias", (4,))], alpha=1.0,
           beta=1.0, transA=0, transB=1)
    model = _check(g.model("resnet_dynamo_tail", [1, 12, 5, 5], [1, 4], opset=20),
                   (1, 12, 5, 5))
    assert "reduce_mean" in model.summary()


# ------------------------------------------------------------------------------- BERT layer


def _attention(g: _Export, x: str, seq: int, hidden: int, heads: int, targets,
               split_style: str, softmax_axis: int) -> str:
    """The attention block of BertLayer as exported: fused QKV Linear (bias first), split,
    per-head reshape, the key transposed directly to (0, 2, 3, 1), scores divided by
    sqrt(d), softmax, context reshaped back and projected.  ``targets(kind)`` returns the
    value holding the reshape target ("heads" or "merge")."""
    qkv = g.node("MatMul", [x, g.rand("onnx::MatMul_93", (hidden, 3 * hidden), 0.2)], "/qkv")
    qkv = g.node("Add", [g.rand("qkv.bias", (3 * hidden,), 0.1), qkv], "/qkv")
    sizes = [hidden] * 3
    if split_style == "attribute":  # opset 11
        q, k, v = g.node("Split", [qkv], outputs=3, axis=-1, split=sizes)
    elif split_style == "input":  # opset 13..17
        q, k, v = g.node("Split", [qkv, g.const(sizes)], outputs=3, axis=-1)
    else:  # opset 18+: the dynamo exporter
        q, k, v = g.node("Split", [qkv], outputs=3, axis=2, num_outputs=3)
    allowzero = {"allowzero": 1} if split_style == "num_outputs" else {}
    q, k, v = (g.node("Reshape", [t, targets("heads")], **allowzero) for t in (q, k, v))
    q = g.node("Transpose", [q], perm=[0, 2, 1, 3])
    v = g.node("Transpose", [v], perm=[0, 2, 1, 3])
    k = g.node("Transpose", [k], perm=[0, 2, 3, 1])
    scores = g.node("MatMul", [q, k])
    d = hidden // heads
    scores = g.node("Div", [scores, g.const(np.sqrt(d), np.float32)])
    att = g.node("Softmax", [scores], axis=softmax_axis)
    ctx = g.node("Transpose", [g.node("MatMul", [att, v])], perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, targets("merge")], **allowzero)
    out = g.node("MatMul", [ctx, g.rand("onnx::MatMul_113", (hidden, hidden), 0.2)], "/out")
    out = g.node("Add", [g.rand("out.bias", (hidden,), 0.1), out], "/out")
    return g.node("Add", [x, out])


def test_legacy_attention_constant_targets_and_shared_layer_norm():
    """Opset 17, folded: constant reshape targets, key transposed by perm (0, 2, 3, 1),
    Div by the scalar constant 8.0-style sqrt(d), erf GELU, and ln2's parameters as Identity
    aliases of ln1's (both fresh LayerNorms are equal, so the exporter shares them)."""
    seq, hidden, heads, ffn = 6, 16, 2, 24
    g = _Export(3)
    g.init("ln1.weight", np.ones(hidden, np.float32))
    g.init("ln1.bias", np.zeros(hidden, np.float32))
    g.nodes.append(helper.make_node("Identity", ["ln1.bias"], ["ln2.bias"], name="Identity_0"))
    g.nodes.append(helper.make_node("Identity", ["ln1.weight"], ["ln2.weight"],
                                    name="Identity_1"))
    consts = {"heads": [1, seq, heads, hidden // heads], "merge": [1, seq, hidden]}
    y = _attention(g, "x", seq, hidden, heads, lambda kind: g.const(consts[kind]), "input", -1)
    y = g.node("LayerNormalization", [y, "ln1.weight", "ln1.bias"], "/ln1", axis=-1,
               epsilon=9.999999747378752e-06)
    f = g.node("MatMul", [y, g.rand("onnx::MatMul_114", (hidden, ffn), 0.3)], "/fc1")
    f = g.node("Add", [g.rand("fc1.bias", (ffn,), 0.1), f], "/fc1")
    e = g.node("Erf", [g.node("Div", [f, g.const(1.4142135, np.float32)])])
    e = g.node("Add", [e, g.const(1.0, np.float32)])
    f = g.node("Mul", [g.node("Mul", [f, e]), g.const(0.5, np.float32)])
    f = g.node("MatMul", [f, g.rand("onnx::MatMul_115", (ffn, hidden), 0.3)], "/fc2")
    f = g.node("Add", [g.rand("fc2.bias", (hidden,), 0.1), f], "/fc2")
    g.node("LayerNormalization", [g.node("Add", [y, f]), "ln2.weight", "ln2.bias"], "/ln2",
           axis=-1, epsilon=9.999999747378752e-06)
    model = _check(g.model("bert_legacy", [1, seq, hidden], [1, seq, hidden]),
                   (1, seq, hidden))
    assert model.summary().get("layer_norm") == 2 and "erf" in model.summary()


def test_symbolic_batch_reshape_targets_from_shape_chains():
    """dynamic_axes={"x": {0: "batch"}}: every reshape target is assembled from Shape ->
    Gather(scalar index) -> Unsqueeze(axes input) -> Concat; with input_shapes the chain is
    evaluated at import and no shape arithmetic is left in the graph."""
    seq, hidden, heads = 4, 8, 2
    g = _Export(4)
    dims = []
    for axis in range(3):
        shape = g.node("Shape", ["x"])
        dims.append(g.node("Gather", [shape, g.const(axis)], axis=0))

    def unsqueezed(d):
        return g.node("Unsqueeze", [d, g.const([0])])

    def targets(kind):
        if kind == "heads":
            parts = [unsqueezed(dims[0]), unsqueezed(dims[1]), g.const([heads]),
                     g.const([hidden // heads])]
        else:
            parts = [unsqueezed(d) for d in dims]
        return g.node("Concat", parts, axis=0)

    _attention(g, "x", seq, hidden, heads, targets, "input", -1)
    proto = g.model("bert_dynamic", ["batch", seq, hidden], ["batch", seq, hidden])
    with pytest.raises(FrontendError, match="symbolic dimension 'batch'"):
        load_model(proto)
    model = _check(proto, (2, seq, hidden), input_shapes={"x": (2, seq, hidden)})
    assert model.types["y"].shape == (2, seq, hidden)
    assert not {"gather", "concat", "shape"} & set(model.summary())


@pytest.mark.parametrize("opset", [11, 13])
def test_layer_norm_decomposition_of_older_opsets(opset):
    """Opsets before 17 have no LayerNormalization: the exporter writes ReduceMean (axes as
    an attribute at both 11 and 13) / Sub / Pow 2.0 / ReduceMean / Add eps / Sqrt / Div /
    Mul / Add; Split sizes are an attribute at 11; Softmax names the last axis explicitly."""
    seq, hidden, heads = 5, 12, 3
    g = _Export(opset)
    consts = {"heads": [1, seq, heads, hidden // heads], "merge": [1, seq, hidden]}
    y = _attention(g, "x", seq, hidden, heads, lambda kind: g.const(consts[kind]),
                   "attribute" if opset == 11 else "input", 3)
    mean = g.node("ReduceMean", [y], "/ln1", axes=[-1])
    centered = g.node("Sub", [y, mean], "/ln1")
    sq = g.node("Pow", [centered, g.const(2.0, np.float32, "/ln1")], "/ln1")
    var = g.node("ReduceMean", [sq], "/ln1", axes=[-1])
    std = g.node("Sqrt", [g.node("Add", [var, g.const(9.999999747378752e-06, np.float32,
                                                      "/ln1")], "/ln1")], "/ln1")
    normed = g.node("Div", [centered, std], "/ln1")
    normed = g.node("Mul", [normed, g.rand("ln1.weight", (hidden,), 0.5)], "/ln1")
    g.node("Add", [normed, g.rand("ln1.bias", (hidden,), 0.1)], "/ln1")
    model = _check(g.model(f"bert_opset{opset}", [1, seq, hidden], [1, seq, hidden],
                           opset=opset), (1, seq, hidden))
    summary = model.summary()
    assert summary.get("reduce_mean") == 2 and "power" not in summary  # x**2 became x * x


def test_dynamo_encoder_ops():
    """dynamo=True (opset 20): Split num_outputs, Reshape allowzero=1 with constant targets
    stored as initializers, bias added after MatMul, a Gelu node and LayerNormalization with
    stash_type=1 (ln2 reading ln1's parameters directly)."""
    seq, hidden, heads, ffn = 4, 16, 4, 20
    g = _Export(5)
    targets = {"heads": g.init("val_11", np.array([1, seq, heads, hidden // heads], np.int64)),
               "merge": g.init("val_29", np.array([1, seq, hidden], np.int64))}
    y = _attention(g, "x", seq, hidden, heads, targets.__getitem__, "num_outputs", -1)
    y = g.node("LayerNormalization", [y, g.rand("ln1.weight", (hidden,), 0.5),
                                      g.rand("ln1.bias", (hidden,), 0.1)],
               stash_type=1, epsilon=9.999999747378752e-06, axis=-1)
    f = g.node("Add", [g.node("MatMul", [y, g.rand("val_34", (hidden, ffn), 0.3)]),
                       g.rand("fc1.bias", (ffn,), 0.1)])
    f = g.node("Gelu", [f], approximate="none")
    f = g.node("Add", [g.node("MatMul", [f, g.rand("val_36", (ffn, hidden), 0.3)]),
                       g.rand("fc2.bias", (hidden,), 0.1)])
    g.node("LayerNormalization", [g.node("Add", [y, f]), "ln1.weight", "ln1.bias"],
           stash_type=1, epsilon=9.999999747378752e-06, axis=-1)
    model = _check(g.model("bert_dynamo", [1, seq, hidden], [1, seq, hidden], opset=20),
                   (1, seq, hidden))
    assert "gelu" in model.summary()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_node_both_approximations(approximate):
    """F.gelu(x, approximate=...) under the dynamo exporter is one Gelu node (opset 20)."""
    g = _Export()
    g.node("Gelu", [g.node("Mul", ["x", g.const(3.0, np.float32)])], approximate=approximate)
    _check(g.model("gelu", [2, 33], [2, 33], opset=20), (2, 33))


def test_embedding_gather_of_computed_indices():
    """A full BERT starts with nn.Embedding, exported as Gather(weight, input_ids): a gather
    kernel reads the rows at the computed indices."""
    g = _Export()
    ids = g.node("Cast", ["x"], to=TensorProto.INT64)
    g.node("Gather", [g.rand("embeddings.word_embeddings.weight", (10, 4)), ids],
           "/embeddings/word_embeddings")
    proto = g.model("embedding", [1, 3], [1, 3, 4])
    weight = next(numpy_helper.to_array(t) for t in proto.graph.initializer
                  if t.name == "embeddings.word_embeddings.weight")
    x = np.array([[0.0, 9.0, 4.0]], np.float32)
    (got,) = build_model(load_model(proto), TARGET, warn=False).run({"x": x}).values()
    np.testing.assert_array_equal(got, weight[[[0, 9, 4]]])


# ------------------------------------------------------------------------------- outputs


def test_same_tensor_returned_twice_through_identity():
    """A module returning (h, h) is exported as outputs "h" and "y" with y = Identity(h).
    The importer collapses the Identity, so both outputs name one tensor; each must still
    come out under its own name (this used to fail: the first output renamed the value)."""
    g = _Export()
    g.nodes.append(helper.make_node("Relu", ["x"], ["h"], name="/Relu"))
    g.nodes.append(helper.make_node("Identity", ["h"], ["y"], name="Identity_0"))
    g.nodes.append(helper.make_node("Identity", ["x"], ["x_out"], name="Identity_1"))
    graph = helper.make_graph(
        g.nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 5])
         for name in ("h", "y", "x_out")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 9
    onnx.checker.check_model(proto, full_check=True)
    model = load_model(proto)
    assert model.outputs == ["h", "y", "x_out"]
    x = np.random.default_rng(2).standard_normal((2, 5)).astype(np.float32)
    expected = run_onnxruntime(proto, {"x": x})
    got = build_model(model, TARGET).run({"x": x})
    for name in ("h", "y", "x_out"):
        np.testing.assert_array_equal(got[name], expected[name])
