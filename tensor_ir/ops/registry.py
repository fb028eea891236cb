"""The operator registry: every operator with its maker, reference and example configs.

    for spec, config in ops.cases():
        func = spec.func(config)                 # PrimFunc(inputs..., output)
        inputs = spec.inputs(func, seed=0)       # well-conditioned random inputs
        expected = spec.expected(config, inputs) # numpy reference
        out = spec.output(func)                  # zeros, to be written in place

``configs`` are small (the reference interpreter runs them); ``large_configs`` are moderate
sizes for compiled tests and benchmarks.  Every operator has at least three small configs,
among them extents that are not powers of two and extents of 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import numpy as np

from ..errors import TEError
from ..func import PrimFunc
from . import elemwise, nn, norm, reduce, transform

__all__ = ["OpSpec", "REGISTRY", "get", "cases"]

DEFAULT_RANGE = (-1.0, 1.0)


@dataclass(frozen=True)
class OpSpec:
    """One operator of the library.

    ``make(**config)`` builds the PrimFunc; ``reference(*inputs, **attrs)`` computes the
    expected output, where ``attrs`` are the config entries named in ``attrs``;
    ``input_ranges`` maps an input position to the (low, high) of its uniform distribution
    (default ``DEFAULT_RANGE``), chosen so that the reference comparison is well conditioned.
    """

    name: str
    family: str
    make: Callable[..., PrimFunc]
    reference: Callable[..., np.ndarray]
    te_func: Callable
    configs: tuple
    large_configs: tuple = ()
    attrs: tuple = ()
    input_ranges: Mapping[int, tuple] = field(default_factory=dict)

    def func(self, config: Mapping) -> PrimFunc:
        return self.make(**config)

    def inputs(self, func_or_config, seed: int | np.random.Generator = 0) -> list[np.ndarray]:
        """Random inputs for every parameter but the last (the output)."""
        func = func_or_config if isinstance(func_or_config, PrimFunc) else self.func(
            func_or_config)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        arrays = []
        for pos, buf in enumerate(func.params[:-1]):
            low, high = self.input_ranges.get(pos, DEFAULT_RANGE)
            values = rng.uniform(low, high, size=buf.const_shape)
            arrays.append(values.astype(buf.dtype))
        return arrays

    def output(self, func: PrimFunc) -> np.ndarray:
        buf = func.params[-1]
        return np.zeros(buf.const_shape, dtype=buf.dtype)

    def expected(self, config: Mapping, inputs) -> np.ndarray:
        attrs = {k: config[k] for k in self.attrs if k in config}
        return np.asarray(self.reference(*inputs, **attrs))

    def config_id(self, config: Mapping) -> str:
        """A short readable id for test names."""
        parts = []
        for k, v in config.items():
            if isinstance(v, (tuple, list)):
                v = "x".join(str(x) for x in v).replace(" ", "")
            parts.append(f"{k}{v}")
        return "-".join(parts).replace("(", "").replace(")", "").replace(",", "_")


REGISTRY: dict[str, OpSpec] = {}


def _register(spec: OpSpec) -> None:
    if len(spec.configs) < 3:
        raise TEError(f"registry: operator {spec.name} needs at least three configs")
    REGISTRY[spec.name] = spec


def get(name: str) -> OpSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise TEError(f"registry: unknown operator {name!r}; known: "
                      f"{', '.join(sorted(REGISTRY))}") from None


def cases(large: bool = False) -> Iterator[tuple[OpSpec, dict]]:
    """Every (spec, config) pair: the small configs, or the large ones when ``large``."""
    for spec in REGISTRY.values():
        for config in (spec.large_configs if large else spec.configs):
            yield spec, dict(config)


# ---------------------------------------------------------------------------------------------
# nn
# ---------------------------------------------------------------------------------------------

_register(OpSpec(
    "matmul", "nn", nn.matmul, nn.ref_matmul, nn.te_matmul,
    configs=(
        dict(M=1, N=5, K=3),
        dict(M=7, N=6, K=5, transpose_a=True),
        dict(M=4, N=3, K=9, transpose_b=True),
        dict(M=5, N=1, K=6, transpose_a=True, transpose_b=True),
    ),
    large_configs=(dict(M=127, N=65, K=96), dict(M=64, N=100, K=33, transpose_b=True)),
    attrs=("transpose_a", "transpose_b"),
))

_register(OpSpec(
    "batch_matmul", "nn", nn.batch_matmul, nn.ref_batch_matmul, nn.te_batch_matmul,
    configs=(
        dict(B=1, M=3, N=4, K=5),
        dict(B=3, M=5, N=2, K=7, transpose_b=True),
        dict(B=2, M=1, N=6, K=3, transpose_a=True),
    ),
    large_configs=(dict(B=4, M=33, N=48, K=20), dict(B=3, M=64, N=17, K=64, transpose_a=True)),
    attrs=("transpose_a", "transpose_b"),
))

_register(OpSpec(
    "dense", "nn", nn.dense, nn.ref_dense, nn.te_dense,
    configs=(
        dict(M=1, N=5, K=7),
        dict(M=6, N=3, K=10, bias=True),
        dict(M=4, N=1, K=1, bias=True),
    ),
    large_configs=(dict(M=16, N=100, K=129, bias=True), dict(M=50, N=64, K=64)),
))

_CONV_ATTRS = ("stride", "padding", "dilation", "groups")

_register(OpSpec(
    "conv2d_nchw", "nn", nn.conv2d_nchw, nn.ref_conv2d_nchw, nn.te_conv2d_nchw,
    configs=(
        dict(N=1, C=3, H=7, W=6, K=4, R=3, S=3, padding=1),
        dict(N=2, C=4, H=5, W=5, K=6, R=3, S=2, stride=2, padding=(1, 0, 0, 1), groups=2),
        dict(N=1, C=2, H=9, W=8, K=3, R=3, S=3, stride=(2, 1), padding=(2, 1), dilation=2),
        dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1),
    ),
    large_configs=(
        dict(N=1, C=16, H=28, W=28, K=32, R=3, S=3, padding=1),
        dict(N=2, C=12, H=15, W=15, K=24, R=3, S=3, stride=2, padding=1, groups=3),
    ),
    attrs=_CONV_ATTRS,
))

_register(OpSpec(
    "conv2d_nhwc", "nn", nn.conv2d_nhwc, nn.ref_conv2d_nhwc, nn.te_conv2d_nhwc,
    configs=(
        dict(N=1, H=7, W=6, C=3, K=4, R=3, S=3, padding=1),
        dict(N=2, H=5, W=5, C=4, K=6, R=2, S=3, stride=2, padding=(0, 1, 1, 0), groups=2),
        dict(N=1, H=8, W=9, C=2, K=3, R=3, S=3, stride=(1, 2), padding=(1, 2), dilation=2),
        dict(N=1, H=1, W=1, C=1, K=1, R=1, S=1),
    ),
    large_configs=(dict(N=1, H=28, W=28, C=16, K=32, R=3, S=3, padding=1),),
    attrs=_CONV_ATTRS,
))

_register(OpSpec(
    "depthwise_conv2d_nchw", "nn", nn.depthwise_conv2d_nchw, nn.ref_depthwise_conv2d_nchw,
    nn.te_depthwise_conv2d_nchw,
    configs=(
        dict(N=1, C=3, H=6, W=7, R=3, S=3, padding=1),
        dict(N=2, C=2, H=5, W=5, R=3, S=3, multiplier=2, stride=2, padding=(1, 1, 0, 0)),
        dict(N=1, C=3, H=9, W=9, R=3, S=3, dilation=2, padding=2),
        dict(N=1, C=1, H=1, W=1, R=1, S=1),
    ),
    large_configs=(dict(N=1, C=32, H=56, W=56, R=3, S=3, padding=1),
                   dict(N=1, C=24, H=29, W=29, R=5, S=5, multiplier=2, stride=2, padding=2)),
    attrs=("stride", "padding", "dilation"),
))

_register(OpSpec(
    "conv2d_transpose_nchw", "nn", nn.conv2d_transpose_nchw, nn.ref_conv2d_transpose_nchw,
    nn.te_conv2d_transpose_nchw,
    configs=(
        dict(N=1, C=2, H=3, W=4, K=3, R=3, S=3, stride=2, padding=1, output_padding=1),
        dict(N=2, C=3, H=5, W=5, K=2, R=2, S=3),
        dict(N=1, C=1, H=1, W=1, K=1, R=1, S=1),
        # top padding larger than R - 1: the dilated input is cropped, not padded.
        dict(N=1, C=2, H=4, W=3, K=2, R=3, S=2, stride=(3, 2), padding=(3, 0, 0, 1)),
    ),
    large_configs=(dict(N=1, C=16, H=14, W=14, K=8, R=4, S=4, stride=2, padding=1),),
    attrs=("stride", "padding", "output_padding"),
))

_POOL_ATTRS = ("kernel", "stride", "padding")

_register(OpSpec(
    "max_pool2d", "nn", nn.max_pool2d, nn.ref_max_pool2d, nn.te_max_pool2d,
    configs=(
        dict(N=1, C=2, H=5, W=5, kernel=2, stride=2),
        dict(N=2, C=3, H=7, W=6, kernel=3, stride=2, padding=1),
        dict(N=1, C=1, H=1, W=1, kernel=1),
        dict(N=1, C=2, H=6, W=5, kernel=(3, 2), stride=(1, 2), padding=(2, 0, 1, 1)),
    ),
    large_configs=(dict(N=1, C=64, H=56, W=56, kernel=3, stride=2, padding=1),),
    attrs=_POOL_ATTRS,
))

_register(OpSpec(
    "avg_pool2d", "nn", nn.avg_pool2d, nn.ref_avg_pool2d, nn.te_avg_pool2d,
    configs=(
        dict(N=1, C=2, H=5, W=5, kernel=2, stride=2),
        dict(N=2, C=3, H=7, W=6, kernel=3, stride=2, padding=1),
        dict(N=2, C=3, H=7, W=6, kernel=3, stride=2, padding=1, count_include_pad=False),
        dict(N=1, C=1, H=1, W=1, kernel=1),
        dict(N=1, C=2, H=6, W=5, kernel=(3, 2), stride=(1, 2), padding=(2, 0, 1, 1),
             count_include_pad=False),
    ),
    large_configs=(dict(N=1, C=32, H=28, W=28, kernel=3, stride=1, padding=1,
                        count_include_pad=False),),
    attrs=_POOL_ATTRS + ("count_include_pad",),
))

_register(OpSpec(
    "global_avg_pool2d", "nn", nn.global_avg_pool2d, nn.ref_global_avg_pool2d,
    nn.te_global_avg_pool2d,
    configs=(dict(N=1, C=3, H=5, W=5), dict(N=2, C=2, H=1, W=1), dict(N=1, C=4, H=7, W=3)),
    large_configs=(dict(N=2, C=512, H=7, W=7),),
))

# ---------------------------------------------------------------------------------------------
# normalisation
# ---------------------------------------------------------------------------------------------

_register(OpSpec(
    "softmax", "norm", norm.softmax, norm.ref_softmax, norm.te_softmax,
    configs=(
        dict(shape=(3, 5)),
        dict(shape=(2, 7, 3), axis=1),
        dict(shape=(1, 1)),
        dict(shape=(4, 6), axis=0),
    ),
    large_configs=(dict(shape=(64, 1000)), dict(shape=(4, 12, 33, 33), axis=-1)),
    attrs=("axis",),
    input_ranges={0: (-4.0, 4.0)},
))

_register(OpSpec(
    "log_softmax", "norm", norm.log_softmax, norm.ref_log_softmax, norm.te_log_softmax,
    configs=(
        dict(shape=(3, 5)),
        dict(shape=(2, 7, 3), axis=1),
        dict(shape=(1, 1)),
        dict(shape=(4, 6), axis=0),
    ),
    large_configs=(dict(shape=(64, 1000)),),
    attrs=("axis",),
    input_ranges={0: (-4.0, 4.0)},
))

_register(OpSpec(
    "layer_norm", "norm", norm.layer_norm, norm.ref_layer_norm, norm.te_layer_norm,
    configs=(
        dict(shape=(4, 6)),
        dict(shape=(2, 3, 5), axis=(1, 2)),
        dict(shape=(3, 1)),
        dict(shape=(1, 7), axis=-1, epsilon=1e-3),
    ),
    large_configs=(dict(shape=(128, 768)), dict(shape=(8, 49, 96), axis=(-2, -1))),
    attrs=("axis", "epsilon"),
    input_ranges={0: (-2.0, 2.0), 1: (0.5, 1.5)},
))

_register(OpSpec(
    "batch_norm", "norm", norm.batch_norm, norm.ref_batch_norm, norm.te_batch_norm,
    configs=(
        dict(shape=(2, 3, 4, 5)),
        dict(shape=(1, 5, 3, 3), epsilon=1e-3),
        dict(shape=(4, 1)),
        dict(shape=(3, 2, 4), axis=-1),
    ),
    large_configs=(dict(shape=(1, 64, 56, 56)),),
    attrs=("axis", "epsilon"),
    # moving variance must be positive; gamma away from zero keeps outputs O(1).
    input_ranges={2: (0.5, 2.0), 3: (0.5, 1.5)},
))

# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

_BINARY_CONFIGS = (
    dict(a_shape=(3, 4), b_shape=(3, 4)),
    dict(a_shape=(2, 1, 5), b_shape=(4, 1)),
    dict(a_shape=(1,), b_shape=(3, 1, 2)),
    dict(a_shape=(1, 1), b_shape=(1, 1)),
)
_BINARY_LARGE = (dict(a_shape=(64, 1000), b_shape=(1000,)),
                 dict(a_shape=(8, 1, 56, 56), b_shape=(32, 1, 1)))

for _name in ("add", "subtract", "multiply", "divide"):
    _register(OpSpec(
        _name, "elemwise", getattr(elemwise, _name), getattr(elemwise, f"ref_{_name}"),
        getattr(elemwise, f"te_{_name}"),
        configs=_BINARY_CONFIGS, large_configs=_BINARY_LARGE,
        input_ranges={1: (0.5, 2.0)} if _name == "divide" else {},
    ))

_UNARY_CONFIGS = (dict(shape=(7,)), dict(shape=(2, 3, 5)), dict(shape=(1, 1, 1)))
_UNARY_LARGE = (dict(shape=(64, 1000)), dict(shape=(1, 64, 56, 56)))

for _name, _range in (("relu", DEFAULT_RANGE), ("gelu", (-3.0, 3.0)),
                      ("sigmoid", (-6.0, 6.0)), ("tanh", (-3.0, 3.0))):
    _register(OpSpec(
        _name, "elemwise", getattr(elemwise, _name), getattr(elemwise, f"ref_{_name}"),
        getattr(elemwise, f"te_{_name}"),
        configs=_UNARY_CONFIGS, large_configs=_UNARY_LARGE, input_ranges={0: _range},
    ))

_register(OpSpec(
    "clip", "elemwise", elemwise.clip, elemwise.ref_clip, elemwise.te_clip,
    configs=tuple(dict(c, a_min=-0.5, a_max=0.75) for c in _UNARY_CONFIGS)
    + (dict(shape=(5, 3), a_min=0.0, a_max=0.0),),
    large_configs=tuple(dict(c, a_min=0.0, a_max=6.0) for c in _UNARY_LARGE),
    attrs=("a_min", "a_max"),
    input_ranges={0: (-2.0, 8.0)},
))

# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

_REDUCE_CONFIGS = (
    dict(shape=(3, 5)),
    dict(shape=(2, 3, 4), axis=1, keepdims=True),
    dict(shape=(4, 1, 3), axis=(0, -1)),
    dict(shape=(1,), axis=0, keepdims=True),
    dict(shape=(2, 5, 3), axis=-1),
)
_REDUCE_LARGE = (dict(shape=(64, 1000), axis=1), dict(shape=(8, 64, 49), axis=(0, 2),
                                                      keepdims=True))

for _name in ("sum", "mean", "max", "min"):
    _register(OpSpec(
        _name, "reduce", getattr(reduce, _name), getattr(reduce, f"ref_{_name}"),
        getattr(reduce, f"te_{_name}"),
        configs=_REDUCE_CONFIGS, large_configs=_REDUCE_LARGE, attrs=("axis", "keepdims"),
        # NOTE: positive summands: a float32 sum of ~1000 signed terms can cancel to near zero,
        # where its accumulated rounding error exceeds atol; max / min round nothing.
        input_ranges={0: (0.25, 1.0)} if _name in ("sum", "mean") else {},
    ))

# ---------------------------------------------------------------------------------------------
# transforms
# ---------------------------------------------------------------------------------------------

_register(OpSpec(
    "transpose", "transform", transform.transpose, transform.ref_transpose,
    transform.te_transpose,
    configs=(
        dict(shape=(2, 3)),
        dict(shape=(2, 3, 4), axes=(1, 2, 0)),
        dict(shape=(1, 5, 1, 2), axes=(3, 0, -2, 1)),
    ),
    large_configs=(dict(shape=(128, 257)), dict(shape=(8, 64, 49), axes=(0, 2, 1))),
    attrs=("axes",),
))

_register(OpSpec(
    "reshape", "transform", transform.reshape, transform.ref_reshape, transform.te_reshape,
    configs=(
        dict(shape=(2, 3, 4), newshape=(6, 4)),
        dict(shape=(5, 1, 3), newshape=(-1,)),
        dict(shape=(1,), newshape=(1, 1, 1)),
        dict(shape=(2, 6), newshape=(3, -1, 2)),
    ),
    large_configs=(dict(shape=(8, 64, 49), newshape=(8, -1)),
                   dict(shape=(4096,), newshape=(16, 16, 16))),
    attrs=("newshape",),
))

_register(OpSpec(
    "pad", "transform", transform.pad, transform.ref_pad, transform.te_pad,
    configs=(
        dict(shape=(3, 4), pad_width=((1, 2), (0, 3)), pad_value=0.5),
        dict(shape=(2, 3, 4), pad_width=1),
        dict(shape=(1, 1), pad_width=((0, 0), (2, 0)), pad_value=-1.0),
        dict(shape=(3, 2), pad_width=0),
    ),
    large_configs=(dict(shape=(1, 64, 56, 56), pad_width=((0, 0), (0, 0), (1, 1), (1, 1))),),
    attrs=("pad_width", "pad_value"),
))


def _ref_concatenate(*arrays, axis: int = 0) -> np.ndarray:
    return transform.ref_concatenate(arrays, axis)


_register(OpSpec(
    "concatenate", "transform", transform.concatenate, _ref_concatenate,
    transform.te_concatenate,
    configs=(
        dict(shapes=((2, 3), (4, 3))),
        dict(shapes=((2, 1, 4), (2, 3, 4), (2, 2, 4)), axis=1),
        dict(shapes=((1,), (1,)), axis=0),
        dict(shapes=((3, 2), (3, 5)), axis=-1),
    ),
    large_configs=(dict(shapes=((1, 64, 28, 28), (1, 32, 28, 28), (1, 96, 28, 28)), axis=1),),
    attrs=("axis",),
))
