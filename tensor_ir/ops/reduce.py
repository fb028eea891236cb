"""Reductions over axes: sum, mean, max, min, prod, l2 (with keepdims) and argmax / argmin.

``axis`` is None (every axis), an int or a tuple of ints, negative values counting from the
end, as in numpy.  A reduction over every axis without keepdims gives a rank-0 tensor.
"""
from __future__ import annotations

import builtins

import numpy as np

from .. import te
from ..func import PrimFunc
from .utils import (
    canonical_dtype, check, normalize_axes, reduce_max, reduce_min, shape_of, to_float,
)

__all__ = [
    "te_sum", "sum", "ref_sum", "te_mean", "mean", "ref_mean",
    "te_max", "max", "ref_max", "te_min", "min", "ref_min",
    "te_prod", "prod", "ref_prod", "te_l2", "l2", "ref_l2",
    "te_argmax", "ref_argmax", "te_argmin", "ref_argmin",
]


def _reduce(op: str, data: te.Tensor, axis, keepdims: bool, reducer, name: str) -> te.Tensor:
    check(isinstance(data, te.Tensor), op, f"expected a te.Tensor, got {type(data).__name__}")
    axes = normalize_axes(axis, data.ndim, op)
    check(len(axes) > 0, op, f"axis {axis!r} names no axis to reduce over")
    check(builtins.all(data.shape[a] > 0 for a in axes), op,
          f"cannot reduce over an empty axis of shape {data.shape}")
    kept = [d for d in range(data.ndim) if d not in axes]
    if keepdims:
        out_shape = tuple(1 if d in axes else data.shape[d] for d in range(data.ndim))
    else:
        out_shape = tuple(data.shape[d] for d in kept)

    def fcompute(*idx):
        ks = [te.reduce_axis(data.shape[a], name=f"k{a}") for a in axes]
        by_axis = dict(zip(axes, ks))
        if keepdims:
            src = [by_axis[d] if d in by_axis else idx[d] for d in range(data.ndim)]
        else:
            it = iter(idx)
            src = [by_axis[d] if d in by_axis else next(it) for d in range(data.ndim)]
        return reducer(data[tuple(src)], axis=ks)

    return te.compute(out_shape, fcompute, name=name)


def _make(op: str, te_fn, shape, axis, keepdims: bool, dtype) -> PrimFunc:
    data = te.placeholder(shape_of(shape, op), canonical_dtype(dtype, op), name="data")
    return te.create_prim_func([data, te_fn(data, axis, keepdims, name=f"T_{op}")], name=op)


def _ref_axes(data: np.ndarray, axis, op: str) -> tuple[int, ...]:
    axes = normalize_axes(axis, data.ndim, op)
    check(len(axes) > 0, op, f"axis {axis!r} names no axis to reduce over")
    return axes


def te_sum(data: te.Tensor, axis=None, keepdims: bool = False, name: str = "sum"
           ) -> te.Tensor:
    return _reduce("sum", data, axis, keepdims, te.sum, name)


def sum(shape, axis=None, keepdims: bool = False, dtype: str = "float32"  # noqa: A001
        ) -> PrimFunc:
    return _make("sum", te_sum, shape, axis, keepdims, dtype)


def ref_sum(data: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    axes = _ref_axes(data, axis, "ref_sum")
    return np.asarray(data.astype(np.float64).sum(axis=axes, keepdims=keepdims)).astype(
        data.dtype)


def te_mean(data: te.Tensor, axis=None, keepdims: bool = False, name: str = "mean"
            ) -> te.Tensor:
    """A sum stage, then a divide stage by the number of reduced elements."""
    check(isinstance(data, te.Tensor), "mean", f"expected a te.Tensor, got "
          f"{type(data).__name__}")
    check(data.dtype.startswith("float"), "mean", f"needs a float input, got {data.dtype}")
    total = _reduce("mean", data, axis, keepdims, te.sum, f"{name}_sum")
    count = 1
    for a in normalize_axes(axis, data.ndim, "mean"):
        count *= data.shape[a]
    size = to_float(count, data.dtype)
    return te.compute(total.shape, lambda *idx: total[idx] / size, name=name)


def mean(shape, axis=None, keepdims: bool = False, dtype: str = "float32") -> PrimFunc:
    return _make("mean", te_mean, shape, axis, keepdims, dtype)


def ref_mean(data: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    axes = _ref_axes(data, axis, "ref_mean")
    return np.asarray(data.astype(np.float64).mean(axis=axes, keepdims=keepdims)).astype(
        data.dtype)


def te_max(data: te.Tensor, axis=None, keepdims: bool = False, name: str = "max"
           ) -> te.Tensor:
    return _reduce("max", data, axis, keepdims, reduce_max, name)


def max(shape, axis=None, keepdims: bool = False, dtype: str = "float32"  # noqa: A001
        ) -> PrimFunc:
    return _make("max", te_max, shape, axis, keepdims, dtype)


def ref_max(data: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    axes = _ref_axes(data, axis, "ref_max")
    return np.asarray(data.max(axis=axes, keepdims=keepdims)).astype(data.dtype)


def te_min(data: te.Tensor, axis=None, keepdims: bool = False, name: str = "min"
           ) -> te.Tensor:
    return _reduce("min", data, axis, keepdims, reduce_min, name)


def min(shape, axis=None, keepdims: bool = False, dtype: str = "float32"  # noqa: A001
        ) -> PrimFunc:
    return _make("min", te_min, shape, axis, keepdims, dtype)


def ref_min(data: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    axes = _ref_axes(data, axis, "ref_min")
    return np.asarray(data.min(axis=axes, keepdims=keepdims)).astype(data.dtype)


_product = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")


def te_prod(data: te.Tensor, axis=None, keepdims: bool = False, name: str = "prod"
            ) -> te.Tensor:
    return _reduce("prod", data, axis, keepdims, _product, name)


def prod(shape, axis=None, keepdims: bool = False, dtype: str = "float32") -> PrimFunc:
    return _make("prod", te_prod, shape, axis, keepdims, dtype)


def ref_prod(data: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    axes = _ref_axes(data, axis, "ref_prod")
    return np.asarray(data.astype(np.float64).prod(axis=axes, keepdims=keepdims)).astype(
        data.dtype)


def te_l2(data: te.Tensor, axis=None, keepdims: bool = False, name: str = "l2") -> te.Tensor:
    """sqrt(sum(x * x)): a sum-of-squares stage, then a square-root stage."""
    check(isinstance(data, te.Tensor), "l2", f"expected a te.Tensor, got "
          f"{type(data).__name__}")
    check(data.dtype.startswith("float"), "l2", f"needs a float input, got {data.dtype}")
    squares = te.compute(data.shape, lambda *idx: data[idx] * data[idx], name=f"{name}_sq")
    total = _reduce("l2", squares, axis, keepdims, te.sum, f"{name}_sum")
    return te.compute(total.shape, lambda *idx: te.sqrt(total[idx]), name=name)


def l2(shape, axis=None, keepdims: bool = False, dtype: str = "float32") -> PrimFunc:
    return _make("l2", te_l2, shape, axis, keepdims, dtype)


def ref_l2(data: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    axes = _ref_axes(data, axis, "ref_l2")
    x = data.astype(np.float64)
    return np.asarray(np.sqrt((x * x).sum(axis=axes, keepdims=keepdims))).astype(data.dtype)


def _arg_reduce(op: str, data: te.Tensor, axis: int, keepdims: bool, last: bool,
                name: str) -> te.Tensor:
    """The int64 index of the extreme value along ``axis``: a max (min) stage, then the
    smallest (largest, when ``last``) index holding it, so ties resolve as ONNX says."""
    check(isinstance(data, te.Tensor), op, f"expected a te.Tensor, got {type(data).__name__}")
    axis = normalize_axes(axis, data.ndim, op)
    check(len(axis) == 1, op, f"takes one axis, got {axis}")
    (axis,) = axis
    extent = data.shape[axis]
    best = _reduce(op, data, axis, True, reduce_max if op == "argmax" else reduce_min,
                   f"{name}_value")
    shape = tuple(1 if d == axis else s for d, s in enumerate(data.shape)) if keepdims \
        else tuple(s for d, s in enumerate(data.shape) if d != axis)

    def fcompute(*idx):
        k = te.reduce_axis(extent, name="k")
        full = list(idx) if keepdims else list(idx[:axis]) + [0] + list(idx[axis:])
        at_best = tuple(full)
        full[axis] = k
        hit = te.equal(data[tuple(full)], best[at_best])
        index = te.cast("int64", k)
        if last:
            return reduce_max(te.if_then_else(hit, index, te.const(-1, "int64")), axis=[k])
        return reduce_min(te.if_then_else(hit, index, te.const(extent, "int64")), axis=[k])

    return te.compute(shape, fcompute, name=name)


def te_argmax(data: te.Tensor, axis: int = 0, keepdims: bool = True, last: bool = False,
              name: str = "argmax") -> te.Tensor:
    return _arg_reduce("argmax", data, axis, keepdims, last, name)


def te_argmin(data: te.Tensor, axis: int = 0, keepdims: bool = True, last: bool = False,
              name: str = "argmin") -> te.Tensor:
    return _arg_reduce("argmin", data, axis, keepdims, last, name)


def _ref_arg(fn, data: np.ndarray, axis: int, keepdims: bool, last: bool) -> np.ndarray:
    if last:
        flipped = np.flip(data, axis=axis)
        result = data.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        result = fn(data, axis=axis)
    if keepdims:
        result = np.expand_dims(result, axis)
    return np.asarray(result, dtype=np.int64)


def ref_argmax(data: np.ndarray, axis: int = 0, keepdims: bool = True, last: bool = False
               ) -> np.ndarray:
    return _ref_arg(np.argmax, data, axis, keepdims, last)


def ref_argmin(data: np.ndarray, axis: int = 0, keepdims: bool = True, last: bool = False
               ) -> np.ndarray:
    return _ref_arg(np.argmin, data, axis, keepdims, last)
