"""Built-in model zoo, defined in code with random weights (fixed seed, nothing downloaded).

    model = get_model("resnet18")                        # 1x3x224x224 -> 1x1000
    model = get_model("resnet18", image_size=32, width=8, num_classes=10)   # a tiny variant
    model = get_model("bert_base_layer")                 # 1x128x768 -> 1x128x768

Models: resnet18, resnet50, mobilenet_v2 (NCHW images, input "input", output "output") and
bert_base_layer (one BERT-base encoder layer as PyTorch writes it: fused QKV projection,
12 heads, GELU feed-forward, post-layer-norm).  Convolutions are followed by real batch-norm
nodes (random statistics), so batch-norm folding has work to do.  Weights are scaled (He
initialisation) so that activations stay in a well-conditioned range through the network.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..graph.errors import FrontendError
from ..graph.ir import GraphBuilder, Model

__all__ = ["ZOO", "get_model", "resnet18", "resnet50", "mobilenet_v2", "bert_base_layer"]


class _Net:
    """GraphBuilder plus a seeded generator for weights."""

    def __init__(self, name: str, seed: int):
        self.b = GraphBuilder(name)
        self.rng = np.random.default_rng(seed)

    def weight(self, shape, fan_in: int, name: str, gain: float = 2.0) -> str:
        std = np.sqrt(gain / max(1, fan_in))
        return self.b.constant(self.rng.normal(0.0, std, size=shape).astype(np.float32), name)

    def vector(self, n: int, name: str, low: float, high: float) -> str:
        return self.b.constant(self.rng.uniform(low, high, size=n).astype(np.float32), name)

    def conv_bn(self, x: str, cout: int, kernel: int, stride: int, name: str,
                groups: int = 1, act: str | None = "relu") -> str:
        cin = self.b.type_of(x).shape[1]
        w = self.weight((cout, cin // groups, kernel, kernel), cin // groups * kernel * kernel,
                        f"{name}.weight")
        pad = kernel // 2
        y = self.b.op("conv2d", [x, w], name=name, strides=(stride, stride),
                      pads=(pad, pad, pad, pad), dilations=(1, 1), groups=groups)
        bn = [self.vector(cout, f"{name}.bn.gamma", 0.5, 1.5),
              self.vector(cout, f"{name}.bn.beta", -0.2, 0.2),
              self.vector(cout, f"{name}.bn.mean", -0.2, 0.2),
              self.vector(cout, f"{name}.bn.var", 0.5, 1.5)]
        y = self.b.op("batch_norm", [y] + bn, name=f"{name}.bn", epsilon=1e-5)
        if act == "relu":
            y = self.b.op("relu", [y], name=f"{name}.relu")
        elif act == "relu6":
            y = self.b.op("clip", [y], name=f"{name}.relu6", min=0.0, max=6.0)
        return y

    def head(self, x: str, num_classes: int) -> Model:
        y = self.b.op("global_avg_pool2d", [x], name="avgpool")
        c = self.b.type_of(y).shape[1]
        y = self.b.op("reshape", [y], name="flatten", shape=(self.b.type_of(y).shape[0], c))
        w = self.weight((num_classes, c), c, "fc.weight", gain=1.0)
        y = self.b.op("matmul", [y, w], name="fc", transpose_b=True)
        bias = self.vector(num_classes, "fc.bias", -0.1, 0.1)
        y = self.b.op("add", [y, bias], name="fc.bias_add")
        self.b.output(y, "output")
        return self.b.build()


def _check_options(name: str, batch: int, image_size: int, width) -> None:
    if batch < 1 or image_size < 8 or width <= 0:
        raise FrontendError(f"zoo model {name}: batch {batch}, image_size {image_size} and "
                            f"width {width} must be positive (image_size >= 8)")


def _resnet(name: str, blocks, bottleneck: bool, batch: int, image_size: int,
            num_classes: int, width: int, seed: int) -> Model:
    _check_options(name, batch, image_size, width)
    net = _Net(name, seed)
    x = net.b.input("input", (batch, 3, image_size, image_size))
    y = net.conv_bn(x, width, 7, 2, "conv1")
    y = net.b.op("max_pool2d", [y], name="maxpool", kernel=(3, 3), strides=(2, 2),
                 pads=(1, 1, 1, 1))
    expansion = 4 if bottleneck else 1
    cin = width
    for stage, count in enumerate(blocks):
        planes = width * (2 ** stage)
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            prefix = f"layer{stage + 1}.{block}"
            cout = planes * expansion
            if bottleneck:
                z = net.conv_bn(y, planes, 1, 1, f"{prefix}.conv1")
                z = net.conv_bn(z, planes, 3, stride, f"{prefix}.conv2")
                z = net.conv_bn(z, cout, 1, 1, f"{prefix}.conv3", act=None)
            else:
                z = net.conv_bn(y, planes, 3, stride, f"{prefix}.conv1")
                z = net.conv_bn(z, cout, 3, 1, f"{prefix}.conv2", act=None)
            shortcut = y
            if stride != 1 or cin != cout:
                shortcut = net.conv_bn(y, cout, 1, stride, f"{prefix}.downsample", act=None)
            y = net.b.op("add", [z, shortcut], name=f"{prefix}.add")
            y = net.b.op("relu", [y], name=f"{prefix}.relu")
            cin = cout
    return net.head(y, num_classes)


def resnet18(batch: int = 1, image_size: int = 224, num_classes: int = 1000, width: int = 64,
             seed: int = 0) -> Model:
    return _resnet("resnet18", (2, 2, 2, 2), False, batch, image_size, num_classes, width, seed)


def resnet50(batch: int = 1, image_size: int = 224, num_classes: int = 1000, width: int = 64,
             seed: int = 0) -> Model:
    return _resnet("resnet50", (3, 4, 6, 3), True, batch, image_size, num_classes, width, seed)


def mobilenet_v2(batch: int = 1, image_size: int = 224, num_classes: int = 1000,
                 width: float = 1.0, seed: int = 0) -> Model:
    """MobileNetV2 (inverted residuals, depthwise 3x3 convolutions, ReLU6); ``width`` is the
    width multiplier."""
    _check_options("mobilenet_v2", batch, image_size, width)

    def ch(c: int) -> int:
        # Channel counts rounded to multiples of 8, as the reference implementation does.
        v = max(8, int(c * width + 4) // 8 * 8)
        return v + 8 if v < 0.9 * c * width else v

    net = _Net("mobilenet_v2", seed)
    x = net.b.input("input", (batch, 3, image_size, image_size))
    y = net.conv_bn(x, ch(32), 3, 2, "features.0", act="relu6")
    cin = ch(32)
    settings = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))
    index = 1
    for t, c, n, s in settings:
        cout = ch(c)
        for k in range(n):
            stride = s if k == 0 else 1
            prefix = f"features.{index}"
            hidden = cin * t
            z = y
            if t != 1:
                z = net.conv_bn(z, hidden, 1, 1, f"{prefix}.expand", act="relu6")
            z = net.conv_bn(z, hidden, 3, stride, f"{prefix}.dw", groups=hidden, act="relu6")
            z = net.conv_bn(z, cout, 1, 1, f"{prefix}.project", act=None)
            if stride == 1 and cin == cout:
                z = net.b.op("add", [z, y], name=f"{prefix}.add")
            y, cin = z, cout
            index += 1
    y = net.conv_bn(y, max(1280, ch(1280)) if width > 1.0 else 1280, 1, 1,
                    f"features.{index}", act="relu6")
    return net.head(y, num_classes)


def bert_base_layer(batch: int = 1, seq: int = 128, hidden: int = 768, heads: int = 12,
                    ffn: int = 3072, seed: int = 0) -> Model:
    """One BERT-base encoder layer: x [batch, seq, hidden] -> same shape."""
    if hidden % heads:
        raise FrontendError(f"bert_base_layer: hidden {hidden} is not divisible by heads "
                            f"{heads}")
    net = _Net("bert_base_layer", seed)
    b = net.b
    d = hidden // heads
    x = b.input("input", (batch, seq, hidden))

    def linear(v: str, cin: int, cout: int, name: str) -> str:
        w = net.weight((cin, cout), cin, f"{name}.weight", gain=1.0)  # [K, N] as exported
        y = b.op("matmul", [v, w], name=name)
        return b.op("add", [y, net.vector(cout, f"{name}.bias", -0.1, 0.1)],
                    name=f"{name}.bias_add")

    def layer_norm(v: str, name: str) -> str:
        return b.op("layer_norm", [v, net.vector(hidden, f"{name}.gamma", 0.8, 1.2),
                                   net.vector(hidden, f"{name}.beta", -0.1, 0.1)],
                    name=name, axis=2, epsilon=1e-5)

    qkv = linear(x, hidden, 3 * hidden, "qkv")
    parts = []
    for k, part in enumerate("qkv"):
        begin, end = (0, 0, k * hidden), (batch, seq, (k + 1) * hidden)
        v = b.op("slice", [qkv], name=f"split.{part}", begin=begin, end=end, step=(1, 1, 1))
        v = b.op("reshape", [v], name=f"{part}.reshape", shape=(batch, seq, heads, d))
        parts.append(b.op("transpose", [v], name=f"{part}.transpose",
                          perm=(0, 2, 3, 1) if part == "k" else (0, 2, 1, 3)))
    q, kt, v = parts
    scores = b.op("matmul", [q, kt], name="scores")
    scale = b.constant(np.array(np.sqrt(d), dtype=np.float32), "scale")
    scores = b.op("divide", [scores, scale], name="scores.scale")
    att = b.op("softmax", [scores], name="softmax", axis=3)
    ctx = b.op("matmul", [att, v], name="context")
    ctx = b.op("transpose", [ctx], name="context.transpose", perm=(0, 2, 1, 3))
    ctx = b.op("reshape", [ctx], name="context.reshape", shape=(batch, seq, hidden))
    y = b.op("add", [x, linear(ctx, hidden, hidden, "out")], name="residual1")
    y = layer_norm(y, "ln1")
    f = linear(y, hidden, ffn, "fc1")
    f = b.op("gelu", [f], name="gelu")
    f = linear(f, ffn, hidden, "fc2")
    z = b.op("add", [y, f], name="residual2")
    z = layer_norm(z, "ln2")
    b.output(z, "output")
    return b.build()


ZOO: dict[str, Callable[..., Model]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
    "bert_base_layer": bert_base_layer,
}


def get_model(name: str, **options) -> Model:
    """A zoo model by name; ``options`` are the model function's keyword arguments."""
    maker = ZOO.get(name)
    if maker is None:
        raise FrontendError(f"no model named {name!r} in the zoo; available: "
                            f"{', '.join(sorted(ZOO))}")
    try:
        return maker(**options)
    except TypeError as err:
        raise FrontendError(f"zoo model {name}: {err}") from None
