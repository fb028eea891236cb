"""Write the ONNX corpus of this folder: small blocks of today's model families, built with
onnx.helper and random weights (PyTorch is not a dependency of this project, so the graphs
are written by hand in the shapes its exporter gives: NCHW convolutions with initializers,
opset 18).  Run by hand after changing a model:

    python tests/models/make_corpus.py

Each file is a few kB to a few hundred kB; ``MODELS`` maps a file name to its builder and
input shape, which the corpus test reads too.  The real PyTorch exports of the same families
are written by ``export_torch.py``; these hand-written graphs stay for the operators those
exports do not bring (Einsum, Trilu, InstanceNormalization with Elu, Mish, PRelu, Resize by
sizes).
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
HERE = os.path.dirname(os.path.abspath(__file__))


class _Graph:
    """Nodes and initializers of one model, with fresh names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array, base="w") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape, scale=None) -> str:
        fan_in = int(np.prod(shape[1:])) or 1
        scale = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.const(self.rng.normal(0, scale, shape).astype(np.float32))

    def op(self, op_type, inputs, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1, bias=True) -> str:
        inputs = [x, self.weight(cout, cin // groups, k, k)]
        if bias:
            inputs.append(self.const(self.rng.normal(0, 0.1, cout).astype(np.float32), "b"))
        pad = k // 2
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, group=groups)

    def model(self, name, x_shape, y) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        proto = onnx.shape_inference.infer_shapes(proto)
        onnx.checker.check_model(proto, full_check=True)
        return proto


def mbconv_se_hardswish(shape=(1, 16, 16, 16)) -> onnx.ModelProto:
    """MobileNetV3 / EfficientNet MBConv: expand 1x1, HardSwish, depthwise 3x3, squeeze-
    excitation (GlobalAveragePool, two 1x1 convs, Relu, HardSigmoid, Mul), project 1x1 and
    the residual add."""
    g = _Graph(1)
    c, wide = shape[1], shape[1] * 4
    h = g.op("HardSwish", [g.conv("x", c, wide, 1)])
    h = g.op("HardSwish", [g.conv(h, wide, wide, 3, groups=wide)])
    s = g.op("GlobalAveragePool", [h])
    s = g.op("Relu", [g.conv(s, wide, wide // 4, 1)])
    s = g.op("HardSigmoid", [g.conv(s, wide // 4, wide, 1)], alpha=1.0 / 6, beta=0.5)
    h = g.op("Mul", [h, s])
    y = g.op("Add", [g.conv(h, wide, c, 1), "x"])
    return g.model("mbconv_se_hardswish", shape, y)


def masked_attention(shape=(1, 8, 32), heads=2) -> onnx.ModelProto:
    """A causal self-attention block: Q/K/V projections, scores by Einsum, a Trilu mask
    applied with Where, Softmax, the context by Einsum, output projection, residual and
    LayerNorm."""
    g = _Graph(2)
    _, seq, hidden = shape
    d = hidden // heads

    def heads_of(v):
        v = g.op("Reshape", [v, g.const(np.array([1, seq, heads, d], np.int64), "shape")])
        return g.op("Transpose", [v], perm=[0, 2, 1, 3])

    q, k, v = (heads_of(g.op("MatMul", ["x", g.weight(hidden, hidden)])) for _ in range(3))
    scores = g.op("Einsum", [q, k], equation="bhid,bhjd->bhij")
    scores = g.op("Mul", [scores, g.const(np.array(1 / np.sqrt(d), np.float32), "scale")])
    ones = g.const(np.ones((seq, seq), np.float32), "ones")
    future = g.op("Trilu", [ones, g.const(np.array(1, np.int64), "k")], upper=1)
    mask = g.op("Equal", [future, g.const(np.array(1, np.float32), "one")])
    scores = g.op("Where", [mask, g.const(np.array(-1e9, np.float32), "neg"), scores])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Einsum", [probs, v], equation="bhij,bhjd->bhid")
    ctx = g.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const(np.array([1, seq, hidden], np.int64), "shape")])
    out = g.op("Add", [g.op("MatMul", [ctx, g.weight(hidden, hidden)]), "x"])
    y = g.op("LayerNormalization", [out, g.const(np.ones(hidden, np.float32), "gamma"),
                                    g.const(np.zeros(hidden, np.float32), "beta")], axis=-1)
    return g.model("masked_attention", shape, y)


def unet_piece(shape=(1, 4, 16, 16)) -> onnx.ModelProto:
    """A two-level U-Net: conv, MaxPool down, conv with InstanceNormalization and Elu, up by
    ConvTranspose and by Resize (linear), Concat of the skip connection and both paths."""
    g = _Graph(3)
    c = shape[1]
    skip = g.op("Relu", [g.conv("x", c, 8, 3)])
    down = g.op("MaxPool", [skip], kernel_shape=[2, 2], strides=[2, 2])
    mid = g.conv(down, 8, 16, 3)
    mid = g.op("InstanceNormalization", [mid, g.const(np.ones(16, np.float32), "s"),
                                         g.const(np.zeros(16, np.float32), "b")])
    mid = g.op("Elu", [mid])
    up = g.op("ConvTranspose", [mid, g.weight(16, 8, 2, 2), g.const(
        np.zeros(8, np.float32), "b")], kernel_shape=[2, 2], strides=[2, 2])
    resized = g.op("Resize", [mid, "", g.const(np.array([1, 1, 2, 2], np.float32), "sc")],
                   mode="linear", coordinate_transformation_mode="half_pixel")
    cat = g.op("Concat", [skip, up, resized], axis=1)
    y = g.op("LeakyRelu", [g.conv(cat, 32, 4, 3)], alpha=0.1)
    return g.model("unet_piece", shape, y)


def detection_neck(shape=(1, 8, 16, 16)) -> onnx.ModelProto:
    """An FPN/PAN-style neck: a strided backbone path, nearest and linear Resize up, Concat,
    conv with LeakyRelu, PRelu and Mish."""
    g = _Graph(4)
    c = shape[1]
    p3 = g.op("LeakyRelu", [g.conv("x", c, 8, 3)], alpha=0.1)
    p4 = g.op("LeakyRelu", [g.conv(p3, 8, 16, 3, stride=2)], alpha=0.1)
    p5 = g.op("Mish", [g.conv(p4, 16, 16, 3, stride=2)])
    up5 = g.op("Resize", [p5, "", g.const(np.array([1, 1, 2, 2], np.float32), "sc")],
               mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    m4 = g.op("Concat", [p4, up5], axis=1)
    m4 = g.op("PRelu", [g.conv(m4, 32, 16, 1), g.const(
        np.full((16, 1, 1), 0.2, np.float32), "slope")])
    up4 = g.op("Resize", [m4, "", "", g.const(np.array([1, 16, 16, 16], np.int64), "sz")],
               mode="linear")
    m3 = g.op("Concat", [p3, up4], axis=1)
    y = g.op("LeakyRelu", [g.conv(m3, 24, 8, 3)], alpha=0.1)
    return g.model("detection_neck", shape, y)


MODELS = {
    "mbconv_se_hardswish.onnx": (mbconv_se_hardswish, (1, 16, 16, 16)),
    "masked_attention.onnx": (masked_attention, (1, 8, 32)),
    "unet_piece.onnx": (unet_piece, (1, 4, 16, 16)),
    "detection_neck.onnx": (detection_neck, (1, 8, 16, 16)),
}


def main() -> None:
    for name, (build, shape) in MODELS.items():
        path = os.path.join(HERE, name)
        onnx.save(build(shape), path)
        print(f"{name}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
