"""Shared helpers of the graph tests: tiny models and record lookups."""
from __future__ import annotations

import numpy as np

from autotune.graph import GraphBuilder, Model, optimize, winograd_conv2d
from autotune.graph.build import build_model

TARGET = "llvm -num-cores 2"


def conv_bn_relu_model(channels: int = 8, image: int = 12, seed: int = 0) -> Model:
    """input -> conv -> batch_norm -> relu -> conv -> add(residual) -> relu."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv_bn_relu")
    x = b.input("input", (1, channels, image, image))

    def weight(shape):
        return b.constant(rng.normal(0, 0.3, shape).astype(np.float32), "w")

    def bn():
        return [b.constant(rng.uniform(lo, hi, channels).astype(np.float32), name)
                for name, lo, hi in (("gamma", 0.5, 1.5), ("beta", -0.2, 0.2),
                                     ("mean", -0.2, 0.2), ("var", 0.5, 1.5))]

    conv = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1))
    y = b.op("conv2d", [x, weight((channels, channels, 3, 3))], **conv)
    y = b.op("batch_norm", [y] + bn(), epsilon=1e-5)
    y = b.op("relu", [y])
    z = b.op("conv2d", [y, weight((channels, channels, 3, 3))], **conv)
    z = b.op("add", [z, x])
    z = b.op("relu", [z])
    b.output(z, "output")
    return b.build()


def conv_model(n=1, c=128, k=128, image=24, stride=1, groups=1, kernel=3, weight_input=False,
               residual=True, seed=0) -> Model:
    """conv (+ bias) -> add(residual) -> relu over a random input (by default a convolution
    that ``winograd_conv2d`` rewrites)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv")
    x = b.input("input", (n, c, image, image))
    shape = (k, c // groups, kernel, kernel)
    w = b.input("weight", shape) if weight_input else \
        b.constant(rng.normal(0, 0.1, shape).astype(np.float32), "w")
    pad = kernel // 2
    y = b.op("conv2d", [x, w], strides=(stride, stride), pads=(pad,) * 4, dilations=(1, 1),
             groups=groups)
    y = b.op("add", [y, b.constant(rng.normal(0, 0.1, (k, 1, 1)).astype(np.float32), "bias")])
    if residual and stride == 1 and k == c:
        y = b.op("add", [y, x])
    b.output(b.op("relu", [y]), "output")
    return b.build()


def check_winograd_build(target: str, m: int) -> None:
    """The Winograd form of a small convolution (its transforms, the batched matmul and the
    fused epilogue) built for ``target`` gives the direct convolution's result on the CPU."""
    model = conv_model(c=8, k=8, image=10)
    # Rewritten here with thresholds this small model passes (build_model keeps it so).
    rewritten = winograd_conv2d(model, tiles=(m,), min_channels=8, min_tiles=1)
    assert "winograd_output_cols" in [node.op for node in rewritten.nodes]
    inputs = random_inputs(model)
    want = build_model(optimize(model, winograd=False), "llvm").run(inputs)["output"]
    got = build_model(rewritten, target).run(inputs)["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def inverted_residual_model(c_in=24, expand=144, c_out=24, image=12, seed=0):
    """A MobileNetV2 block and a classifier head: 3x3 stem over an image, 1x1 expand, 3x3
    depthwise, 1x1 project + residual, a grouped (not depthwise) convolution, a pooling."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("inverted_residual")
    x = b.input("input", (1, 3, image, image))

    def conv(v, k, c, kernel, groups=1, stride=1, act=True):
        w = b.constant(rng.normal(0, 0.2, (k, c // groups, kernel, kernel)).astype(np.float32),
                       "w")
        y = b.op("conv2d", [v, w], strides=(stride, stride), pads=(kernel // 2,) * 4,
                 dilations=(1, 1), groups=groups)
        y = b.op("add", [y, b.constant(rng.normal(0, 0.1, (k, 1, 1)).astype(np.float32),
                                       "bias")])
        return b.op("clip", [y], min=0.0, max=6.0) if act else y

    stem = conv(x, c_in, 3, 3, stride=2)
    y = conv(stem, expand, c_in, 1)
    y = conv(y, expand, expand, 3, groups=expand)
    y = conv(y, c_out, expand, 1, act=False)
    y = b.op("add", [y, stem])
    y = conv(y, 2 * c_out, c_out, 3, groups=2)            # grouped: stays NCHW
    b.output(b.op("global_avg_pool2d", [y]), "output")
    return b.build()


def check_blocked_build(target: str) -> None:
    """A model in the blocked channel layout (``inverted_residual_model``) built for
    ``target`` gives what its NCHW form gives on the CPU."""
    model = inverted_residual_model(image=14)
    assert "depthwise_conv2d_nchwc" in [node.op for node in optimize(model).nodes]
    inputs = random_inputs(model)
    want = build_model(optimize(model, layout="NCHW"), "llvm").run(inputs)["output"]
    got = build_model(model, target).run(inputs)["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def random_inputs(model: Model, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
            for name, t in model.input_types().items()}


def sampled_lookup(target=TARGET, seed: int = 3, only=None):
    """A stand-in for a tuning database: the record of a function is a design-space sample
    (a final trace), for every function or for those whose name is in ``only``."""
    from schedules.space import DesignSpace

    calls = []

    def lookup(func):
        calls.append(func.name)
        if only is not None and func.name not in only:
            return None
        return DesignSpace(func, target).sample(seed=seed).final_trace
    lookup.calls = calls
    return lookup
