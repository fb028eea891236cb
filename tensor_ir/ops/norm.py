"""Normalisation operators: softmax, log_softmax, layer_norm, batch_norm (inference),
group_norm and instance_norm.

Each is several stages, as in TVM: reductions must be the whole body of a stage, and the
numerically stable forms need the maximum (softmax) or the mean (layer norm) before the second
pass.  Levels and references follow the convention of ``nn.py``.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..func import PrimFunc
from .utils import (
    as_tensor_args, canonical_dtype, check, normalize_axes, normalize_axis, shape_of, to_float,
)

__all__ = [
    "te_softmax", "softmax", "ref_softmax",
    "te_log_softmax", "log_softmax", "ref_log_softmax",
    "te_layer_norm", "layer_norm", "ref_layer_norm",
    "te_batch_norm", "batch_norm", "ref_batch_norm",
    "te_group_norm", "group_norm", "ref_group_norm",
    "te_instance_norm", "instance_norm", "ref_instance_norm",
]


def _check_float(t: te.Tensor, op: str) -> None:
    check(t.dtype.startswith("float"), op, f"needs a float input, got {t.dtype}")


def _without(idx: tuple, axis: int) -> tuple:
    return tuple(idx[:axis]) + tuple(idx[axis + 1:])


def _with(idx: tuple, axis: int, value) -> tuple:
    return tuple(idx[:axis]) + (value,) + tuple(idx[axis:])


def _row_max(data: te.Tensor, axis: int, name: str) -> te.Tensor:
    k = te.reduce_axis(data.shape[axis], name="k")
    return te.compute(_without(data.shape, axis),
                      lambda *idx: te.max(data[_with(idx, axis, k)], axis=k), name=name)


def te_softmax(data: te.Tensor, axis: int = -1, name: str = "softmax") -> te.Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``axis``: four stages (max, exp, sum, divide)."""
    op = "softmax"
    as_tensor_args((data,), op)
    _check_float(data, op)
    axis = normalize_axis(axis, data.ndim, op)
    row_max = _row_max(data, axis, f"{name}_maxelem")
    exp = te.compute(data.shape,
                     lambda *idx: te.exp(data[idx] - row_max[_without(idx, axis)]),
                     name=f"{name}_exp")
    k = te.reduce_axis(data.shape[axis], name="k")
    exp_sum = te.compute(_without(data.shape, axis),
                         lambda *idx: te.sum(exp[_with(idx, axis, k)], axis=k),
                         name=f"{name}_expsum")
    return te.compute(data.shape, lambda *idx: exp[idx] / exp_sum[_without(idx, axis)],
                      name=name)


def softmax(shape, axis: int = -1, dtype: str = "float32") -> PrimFunc:
    shape = shape_of(shape, "softmax")
    data = te.placeholder(shape, canonical_dtype(dtype, "softmax"), name="data")
    return te.create_prim_func([data, te_softmax(data, axis, name="T_softmax")],
                               name="softmax")


def ref_softmax(data: np.ndarray, axis: int = -1) -> np.ndarray:
    x = data.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(data.dtype)


def te_log_softmax(data: te.Tensor, axis: int = -1, name: str = "log_softmax") -> te.Tensor:
    """x - max - log(sum(exp(x - max))) along ``axis``: three stages (max, sum, output)."""
    op = "log_softmax"
    as_tensor_args((data,), op)
    _check_float(data, op)
    axis = normalize_axis(axis, data.ndim, op)
    row_max = _row_max(data, axis, f"{name}_maxelem")
    k = te.reduce_axis(data.shape[axis], name="k")
    exp_sum = te.compute(
        _without(data.shape, axis),
        lambda *idx: te.sum(te.exp(data[_with(idx, axis, k)] - row_max[idx]), axis=k),
        name=f"{name}_expsum")
    return te.compute(
        data.shape,
        lambda *idx: data[idx] - row_max[_without(idx, axis)]
        - te.log(exp_sum[_without(idx, axis)]),
        name=name)


def log_softmax(shape, axis: int = -1, dtype: str = "float32") -> PrimFunc:
    shape = shape_of(shape, "log_softmax")
    data = te.placeholder(shape, canonical_dtype(dtype, "log_softmax"), name="data")
    return te.create_prim_func([data, te_log_softmax(data, axis, name="T_log_softmax")],
                               name="log_softmax")


def ref_log_softmax(data: np.ndarray, axis: int = -1) -> np.ndarray:
    x = data.astype(np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(data.dtype)


def _trailing_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    axes = normalize_axes(axis, ndim, op)
    check(axes == tuple(range(ndim - len(axes), ndim)), op,
          f"axis {axis!r} must name the trailing axes of a rank-{ndim} input")
    return axes


def te_layer_norm(data: te.Tensor, gamma: te.Tensor | None = None,
                  beta: te.Tensor | None = None, axis=-1, epsilon: float = 1e-5,
                  name: str = "layer_norm") -> te.Tensor:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the trailing ``axis`` (an int or a
    tuple of trailing axes); gamma and beta have the shape of those axes.

    Three stages: the sum, the sum of squared deviations from the mean (two passes, which keeps
    the variance accurate where E[x^2] - E[x]^2 would cancel), and the output.
    """
    op = "layer_norm"
    extra = tuple(t for t in (gamma, beta) if t is not None)
    as_tensor_args((data,) + extra, op)
    _check_float(data, op)
    axes = _trailing_axes(axis, data.ndim, op)
    lead = data.ndim - len(axes)
    norm_shape = data.shape[lead:]
    for what, t in (("gamma", gamma), ("beta", beta)):
        if t is not None:
            check(t.shape == norm_shape, op, f"{what} must have shape {norm_shape}, got "
                  f"{t.shape}")
            check(t.dtype == data.dtype, op, f"{what} has dtype {t.dtype} but data has "
                  f"{data.dtype}")
    count = 1
    for s in norm_shape:
        count *= s
    count_f = to_float(count, data.dtype)
    eps = to_float(epsilon, data.dtype)

    def reduce_axes():
        return [te.reduce_axis(s, name=f"k{d}") for d, s in enumerate(norm_shape)]

    ks = reduce_axes()
    total = te.compute(data.shape[:lead],
                       lambda *idx: te.sum(data[tuple(idx) + tuple(ks)], axis=ks),
                       name=f"{name}_sum")
    ks2 = reduce_axes()

    def fsquares(*idx):
        dev = data[tuple(idx) + tuple(ks2)] - total[idx] / count_f
        return te.sum(dev * dev, axis=ks2)

    squares = te.compute(data.shape[:lead], fsquares, name=f"{name}_sqsum")

    def fout(*idx):
        head, tail = tuple(idx[:lead]), tuple(idx[lead:])
        value = (data[idx] - total[head] / count_f) / te.sqrt(squares[head] / count_f + eps)
        if gamma is not None:
            value = value * gamma[tail]
        if beta is not None:
            value = value + beta[tail]
        return value

    return te.compute(data.shape, fout, name=name)


def layer_norm(shape, axis=-1, epsilon: float = 1e-5, dtype: str = "float32") -> PrimFunc:
    """PrimFunc(data, gamma, beta, out) normalising over the trailing ``axis``."""
    op = "layer_norm"
    shape = shape_of(shape, op)
    dtype = canonical_dtype(dtype, op)
    axes = _trailing_axes(axis, len(shape), op)
    norm_shape = shape[len(shape) - len(axes):]
    data = te.placeholder(shape, dtype, name="data")
    gamma = te.placeholder(norm_shape, dtype, name="gamma")
    beta = te.placeholder(norm_shape, dtype, name="beta")
    out = te_layer_norm(data, gamma, beta, axis, epsilon, name="T_layer_norm")
    return te.create_prim_func([data, gamma, beta, out], name=op)


def ref_layer_norm(data: np.ndarray, gamma: np.ndarray | None = None,
                   beta: np.ndarray | None = None, axis=-1, epsilon: float = 1e-5
                   ) -> np.ndarray:
    axes = _trailing_axes(axis, data.ndim, "ref_layer_norm")
    x = data.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + epsilon)
    if gamma is not None:
        out = out * gamma.astype(np.float64)
    if beta is not None:
        out = out + beta.astype(np.float64)
    return out.astype(data.dtype)


def te_batch_norm(data: te.Tensor, mean: te.Tensor, var: te.Tensor, gamma: te.Tensor,
                  beta: te.Tensor, axis: int = 1, epsilon: float = 1e-5,
                  name: str = "batch_norm") -> te.Tensor:
    """Inference batch norm: (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c] with the
    channel ``c`` on ``axis`` (1 for NCHW).  One elementwise stage."""
    op = "batch_norm"
    as_tensor_args((data, mean, var, gamma, beta), op)
    _check_float(data, op)
    axis = normalize_axis(axis, data.ndim, op)
    channels = data.shape[axis]
    for what, t in (("mean", mean), ("var", var), ("gamma", gamma), ("beta", beta)):
        check(t.shape == (channels,), op, f"{what} must have shape ({channels},) for the "
              f"channel axis {axis}, got {t.shape}")
        check(t.dtype == data.dtype, op, f"{what} has dtype {t.dtype} but data has "
              f"{data.dtype}")
    eps = to_float(epsilon, data.dtype)

    def fcompute(*idx):
        c = idx[axis]
        return (data[idx] - mean[c]) / te.sqrt(var[c] + eps) * gamma[c] + beta[c]

    return te.compute(data.shape, fcompute, name=name)


def batch_norm(shape, axis: int = 1, epsilon: float = 1e-5, dtype: str = "float32"
               ) -> PrimFunc:
    """PrimFunc(data, mean, var, gamma, beta, out)."""
    op = "batch_norm"
    shape = shape_of(shape, op)
    dtype = canonical_dtype(dtype, op)
    channels = shape[normalize_axis(axis, len(shape), op)]
    data = te.placeholder(shape, dtype, name="data")
    params = [te.placeholder((channels,), dtype, name=n)
              for n in ("moving_mean", "moving_var", "gamma", "beta")]
    out = te_batch_norm(data, *params, axis=axis, epsilon=epsilon, name="T_batch_norm")
    return te.create_prim_func([data, *params, out], name=op)


def ref_batch_norm(data: np.ndarray, mean: np.ndarray, var: np.ndarray, gamma: np.ndarray,
                   beta: np.ndarray, axis: int = 1, epsilon: float = 1e-5) -> np.ndarray:
    axis = normalize_axis(axis, data.ndim, "ref_batch_norm")
    shape = [1] * data.ndim
    shape[axis] = data.shape[axis]

    def col(v):
        return v.astype(np.float64).reshape(shape)

    out = (data.astype(np.float64) - col(mean)) / np.sqrt(col(var) + epsilon) * col(gamma) \
        + col(beta)
    return out.astype(data.dtype)


def te_group_norm(data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, groups: int,
                  epsilon: float = 1e-5, name: str = "group_norm") -> te.Tensor:
    """Normalise ``data`` [N, C, spatial...] over each group of C / ``groups`` channels and
    all spatial positions, then scale and shift per channel by ``gamma`` and ``beta`` [C].

    Three stages per (n, group), as layer_norm: the sum, the sum of squared deviations from
    the mean (two passes, for an accurate variance), and the output."""
    op = "group_norm"
    as_tensor_args((data, gamma, beta), op)
    _check_float(data, op)
    check(data.ndim >= 3, op, f"needs an input of rank >= 3 (N, C, spatial...), got "
          f"{data.shape}")
    n, channels = data.shape[:2]
    spatial = data.shape[2:]
    check(isinstance(groups, int) and groups >= 1 and channels % groups == 0, op,
          f"{channels} channels do not split into {groups} groups")
    for what, t in (("gamma", gamma), ("beta", beta)):
        check(t.shape == (channels,), op, f"{what} must have shape ({channels},), got "
              f"{t.shape}")
        check(t.dtype == data.dtype, op, f"{what} has dtype {t.dtype} but data has "
              f"{data.dtype}")
    per_group = channels // groups
    count = per_group
    for v in spatial:
        count *= v
    count_f = to_float(count, data.dtype)
    eps = to_float(epsilon, data.dtype)

    def element(nn, g, ks):
        """data at group g's channel ks[0] (when groups hold several) and position ks[1:]."""
        if per_group == 1:
            return data[(nn, g) + tuple(ks)]
        return data[(nn, g * per_group + ks[0]) + tuple(ks[1:])]

    def axes():
        extents = ((per_group,) if per_group > 1 else ()) + spatial
        return [te.reduce_axis(e, name=f"k{d}") for d, e in enumerate(extents)]

    ks = axes()
    total = te.compute((n, groups), lambda nn, g: te.sum(element(nn, g, ks), axis=ks),
                       name=f"{name}_sum")
    ks2 = axes()

    def fsquares(nn, g):
        dev = element(nn, g, ks2) - total[nn, g] / count_f
        return te.sum(dev * dev, axis=ks2)

    squares = te.compute((n, groups), fsquares, name=f"{name}_sqsum")

    def fout(*idx):
        nn, c = idx[0], idx[1]
        g = c if per_group == 1 else te.floordiv(c, per_group)
        normal = (data[idx] - total[nn, g] / count_f) / te.sqrt(squares[nn, g] / count_f + eps)
        return normal * gamma[c] + beta[c]

    return te.compute(data.shape, fout, name=name)


def group_norm(shape, groups: int, epsilon: float = 1e-5, dtype: str = "float32"
               ) -> PrimFunc:
    """PrimFunc(data, gamma, beta, out)."""
    op = "group_norm"
    shape = shape_of(shape, op)
    dtype = canonical_dtype(dtype, op)
    check(len(shape) >= 3, op, f"needs a shape of rank >= 3, got {shape}")
    data = te.placeholder(shape, dtype, name="data")
    gamma = te.placeholder((shape[1],), dtype, name="gamma")
    beta = te.placeholder((shape[1],), dtype, name="beta")
    out = te_group_norm(data, gamma, beta, groups, epsilon, name="T_group_norm")
    return te.create_prim_func([data, gamma, beta, out], name=op)


def ref_group_norm(data: np.ndarray, gamma: np.ndarray, beta: np.ndarray, groups: int,
                   epsilon: float = 1e-5) -> np.ndarray:
    n, c = data.shape[:2]
    check(c % groups == 0, "ref_group_norm", f"{c} channels do not split into {groups} groups")
    x = data.astype(np.float64).reshape(n, groups, -1)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out = ((x - mean) / np.sqrt(var + epsilon)).reshape(data.shape)
    col = (1, c) + (1,) * (data.ndim - 2)
    out = out * gamma.astype(np.float64).reshape(col) + beta.astype(np.float64).reshape(col)
    return out.astype(data.dtype)


def te_instance_norm(data: te.Tensor, gamma: te.Tensor, beta: te.Tensor,
                     epsilon: float = 1e-5, name: str = "instance_norm") -> te.Tensor:
    """Group norm with one channel per group: each (n, c) normalised over its positions."""
    as_tensor_args((data,), "instance_norm")
    check(data.ndim >= 3, "instance_norm", f"needs an input of rank >= 3, got {data.shape}")
    return te_group_norm(data, gamma, beta, data.shape[1], epsilon, name=name)


def instance_norm(shape, epsilon: float = 1e-5, dtype: str = "float32") -> PrimFunc:
    shape = shape_of(shape, "instance_norm")
    check(len(shape) >= 3, "instance_norm", f"needs a shape of rank >= 3, got {shape}")
    return group_norm(shape, shape[1], epsilon, dtype)


def ref_instance_norm(data: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
                      epsilon: float = 1e-5) -> np.ndarray:
    return ref_group_norm(data, gamma, beta, data.shape[1], epsilon)
