"""ONNX models built with onnx.helper for the graph tests, written the way PyTorch's exporter
writes them (opset 17): a small CNN, a small transformer encoder layer in the pattern of
shared/anchors/e2e_models.py's BertLayer (fused QKV Linear, split, reshape through
Shape/Gather/Unsqueeze/Concat, erf GELU, LayerNormalization) and a ResNet-18 in the pattern
of the same script's export (Conv with folded batch norm and bias, MaxPool, residual Add,
GlobalAveragePool, Flatten, Gemm)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Graph:
    def __init__(self, seed: int = 0):
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"/{base}_{self.count}"

    def init(self, array: np.ndarray, base: str = "w") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(self, shape, fan_in: int, gain: float = 2.0) -> str:
        std = np.sqrt(gain / fan_in)
        return self.init(self.rng.normal(0, std, size=shape).astype(np.float32))

    def vector(self, n: int, low: float, high: float) -> str:
        return self.init(self.rng.uniform(low, high, size=n).astype(np.float32))

    def node(self, op: str, inputs, outputs: int = 1, **attrs):
        outs = [self.name(f"{op}_out") for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.name(op),
                                           **attrs))
        return outs[0] if outputs == 1 else outs

    def constant(self, array: np.ndarray) -> str:
        out = self.name("Constant_out")
        self.nodes.append(helper.make_node("Constant", [], [out], name=self.name("Constant"),
                                           value=numpy_helper.from_array(array)))
        return out

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        proto.ir_version = 8
        onnx.checker.check_model(proto)
        return proto


def _value(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def small_cnn(image: int = 16, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """conv -> batch norm -> relu -> max pool -> conv (bias) -> relu -> average pool ->
    global average pool -> flatten -> gemm -> softmax, with a residual-free branch join."""
    g = _Graph(seed)
    x = "x"
    y = g.node("Conv", [x, g.weight((8, 3, 3, 3), 27)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = g.node("BatchNormalization", [y, g.vector(8, 0.5, 1.5), g.vector(8, -0.2, 0.2),
                                      g.vector(8, -0.2, 0.2), g.vector(8, 0.5, 1.5)],
               epsilon=1e-5)
    y = g.node("Relu", [y])
    y = g.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = g.node("Conv", [y, g.weight((16, 8, 3, 3), 72), g.vector(16, -0.1, 0.1)],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = g.node("Clip", [y, g.constant(np.array(0.0, np.float32)),
                        g.constant(np.array(6.0, np.float32))])
    y = g.node("AveragePool", [y], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    y = g.node("GlobalAveragePool", [y])
    y = g.node("Flatten", [y], axis=1)
    y = g.node("Gemm", [y, g.weight((classes, 16), 16, 1.0), g.vector(classes, -0.1, 0.1)],
               transB=1)
    probs = g.node("Softmax", [y], axis=-1)
    g.nodes[-1].output[0] = "probs"
    return g.model("small_cnn", [_value("x", (1, 3, image, image))],
                   [_value("probs", (1, classes))])


def _reshape_from_shape(g: _Graph, x: str, source: str, tail) -> str:
    """Reshape x to [source.shape[0], source.shape[1], *tail] the way the exporter writes a
    reshape whose sizes come from ``x.shape``: Shape -> Gather -> Unsqueeze -> Concat."""
    shape = g.node("Shape", [source])
    dims = []
    for axis in (0, 1):
        d = g.node("Gather", [shape, g.constant(np.array(axis, np.int64))], axis=0)
        dims.append(g.node("Unsqueeze", [d, g.constant(np.array([0], np.int64))]))
    rest = g.constant(np.array(tail, np.int64))
    target = g.node("Concat", dims + [rest], axis=0)
    return g.node("Reshape", [x, target])


def encoder_layer(seq: int = 8, hidden: int = 32, heads: int = 4, ffn: int = 64,
                  seed: int = 0) -> onnx.ModelProto:
    """A transformer encoder layer as torch.onnx.export writes BertLayer (opset 17)."""
    g = _Graph(seed)
    d = hidden // heads
    x = "x"

    def linear(v, cin, cout):
        y = g.node("MatMul", [v, g.weight((cin, cout), cin, 1.0)])
        return g.node("Add", [g.vector(cout, -0.1, 0.1), y])  # bias first, as exported

    qkv = linear(x, hidden, 3 * hidden)
    q, k, v = g.node("Split", [qkv, g.constant(np.array([hidden] * 3, np.int64))], outputs=3,
                     axis=-1)
    heads_ = []
    for t, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 1, 3]), (v, [0, 2, 1, 3])):
        r = _reshape_from_shape(g, t, x, [heads, d])
        heads_.append(g.node("Transpose", [r], perm=perm))
    q, k, v = heads_
    kt = g.node("Transpose", [k], perm=[0, 1, 3, 2])
    scores = g.node("MatMul", [q, kt])
    scores = g.node("Div", [scores, g.constant(np.array(np.sqrt(d), np.float32))])
    att = g.node("Softmax", [scores], axis=-1)
    ctx = g.node("MatMul", [att, v])
    ctx = g.node("Transpose", [ctx], perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.constant(np.array([1, seq, hidden], np.int64))])
    y = g.node("Add", [x, linear(ctx, hidden, hidden)])
    y = g.node("LayerNormalization", [y, g.vector(hidden, 0.8, 1.2), g.vector(hidden, -0.1, 0.1)],
               axis=-1, epsilon=1e-5)
    f = linear(y, hidden, ffn)
    # GELU as opset 17 exports F.gelu: x * 0.5 * (1 + erf(x / sqrt(2)))
    e = g.node("Erf", [g.node("Div", [f, g.constant(np.array(1.4142135, np.float32))])])
    e = g.node("Add", [e, g.constant(np.array(1.0, np.float32))])
    f = g.node("Mul", [g.node("Mul", [f, e]), g.constant(np.array(0.5, np.float32))])
    f = linear(f, ffn, hidden)
    z = g.node("Add", [y, f])
    z = g.node("LayerNormalization", [z, g.vector(hidden, 0.8, 1.2), g.vector(hidden, -0.1, 0.1)],
               axis=-1, epsilon=1e-5)
    g.nodes[-1].output[0] = "y"
    return g.model("bert_layer", [_value("x", (1, seq, hidden))], [_value("y", (1, seq, hidden))])


def resnet18_export(image: int = 224, width: int = 64, classes: int = 1000,
                    seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 as the legacy exporter writes it in eval mode: batch norms folded into the
    convolutions (Conv with bias), input "x", output "y"."""
    g = _Graph(seed)

    def conv(v, cin, cout, k, stride):
        w = g.weight((cout, cin, k, k), cin * k * k)
        p = k // 2
        return g.node("Conv", [v, w, g.vector(cout, -0.1, 0.1)], kernel_shape=[k, k],
                      strides=[stride, stride], pads=[p, p, p, p], dilations=[1, 1], group=1)

    y = g.node("Relu", [conv("x", 3, width, 7, 2)])
    y = g.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
               ceil_mode=0)
    cin = width
    for stage in range(4):
        cout = width * 2 ** stage
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            z = g.node("Relu", [conv(y, cin, cout, 3, stride)])
            z = conv(z, cout, cout, 3, 1)
            short = y if stride == 1 and cin == cout else conv(y, cin, cout, 1, stride)
            y = g.node("Relu", [g.node("Add", [z, short])])
            cin = cout
    y = g.node("GlobalAveragePool", [y])
    y = g.node("Flatten", [y], axis=1)
    y = g.node("Gemm", [y, g.weight((classes, cin), cin, 1.0), g.vector(classes, -0.1, 0.1)],
               alpha=1.0, beta=1.0, transB=1)
    g.nodes[-1].output[0] = "y"
    return g.model("resnet18", [_value("x", (1, 3, image, image))], [_value("y", (1, classes))])


def run_onnxruntime(proto: onnx.ModelProto, feed: dict, threads: int = 1) -> dict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed)))
