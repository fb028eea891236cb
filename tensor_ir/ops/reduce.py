"""Reductions over axes: sum, mean, max, min (with keepdims).

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
