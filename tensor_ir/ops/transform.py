"""Layout operators: transpose, reshape, pad and concatenate.

These move data without arithmetic; the references are the numpy functions of the same names.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import te
from ..func import PrimFunc
from .utils import (
    canonical_dtype, check, normalize_axis, pad_nd, shape_of,
)

__all__ = [
    "te_transpose", "transpose", "ref_transpose",
    "te_reshape", "reshape", "ref_reshape",
    "te_pad", "pad", "ref_pad",
    "te_concatenate", "concatenate", "ref_concatenate",
]


def _tensor(data, op: str) -> None:
    check(isinstance(data, te.Tensor), op, f"expected a te.Tensor, got {type(data).__name__}")


def _perm(axes, ndim: int, op: str) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    check(isinstance(axes, (list, tuple)) and len(axes) == ndim, op,
          f"axes {axes!r} must list each of the {ndim} axes once")
    perm = tuple(normalize_axis(a, ndim, op) for a in axes)
    check(sorted(perm) == list(range(ndim)), op, f"axes {axes!r} is not a permutation of "
          f"range({ndim})")
    return perm


def te_transpose(data: te.Tensor, axes=None, name: str = "transpose") -> te.Tensor:
    """out.shape[d] = data.shape[axes[d]]; ``axes=None`` reverses the axes (numpy)."""
    _tensor(data, "transpose")
    perm = _perm(axes, data.ndim, "transpose")
    shape = tuple(data.shape[p] for p in perm)

    def fcompute(*idx):
        src = [None] * data.ndim
        for d, p in enumerate(perm):
            src[p] = idx[d]
        return data[tuple(src)]

    return te.compute(shape, fcompute, name=name)


def transpose(shape, axes=None, dtype: str = "float32") -> PrimFunc:
    data = te.placeholder(shape_of(shape, "transpose"), canonical_dtype(dtype, "transpose"),
                          name="data")
    return te.create_prim_func([data, te_transpose(data, axes, name="T_transpose")],
                               name="transpose")


def ref_transpose(data: np.ndarray, axes=None) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(data, axes))


def _new_shape(old: tuple, newshape, op: str) -> tuple[int, ...]:
    if isinstance(newshape, (int, np.integer)):
        newshape = (newshape,)
    newshape = tuple(int(s) for s in newshape)
    check(newshape.count(-1) <= 1, op, f"newshape {newshape} has more than one -1")
    check(all(s >= 1 or s == -1 for s in newshape), op,
          f"newshape {newshape} must hold positive ints (and at most one -1)")
    size = int(np.prod(old, dtype=np.int64))
    known = int(np.prod([s for s in newshape if s != -1], dtype=np.int64))
    if -1 in newshape:
        check(size % known == 0, op, f"cannot infer -1 in {newshape}: {size} elements are not "
              f"divisible by {known}")
        newshape = tuple(size // known if s == -1 else s for s in newshape)
    check(int(np.prod(newshape, dtype=np.int64)) == size, op,
          f"cannot reshape {old} ({size} elements) into {newshape}")
    return newshape


def _strides(shape: tuple) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return list(reversed(strides))


def te_reshape(data: te.Tensor, newshape, name: str = "reshape") -> te.Tensor:
    """Row-major reshape (one -1 is inferred): the output's flat index is decomposed along the
    input's strides."""
    _tensor(data, "reshape")
    shape = _new_shape(data.shape, newshape, "reshape")
    out_strides, in_strides = _strides(shape), _strides(data.shape)

    def fcompute(*idx):
        flat = None
        for i, st, extent in zip(idx, out_strides, shape):
            if extent == 1:
                continue  # that index is always 0
            term = i * st if st != 1 else i
            flat = term if flat is None else flat + term
        if flat is None:
            flat = te.const(0)
        src = []
        for d, (st, extent) in enumerate(zip(in_strides, data.shape)):
            if extent == 1:
                src.append(0)
                continue
            value = te.floordiv(flat, st) if st != 1 else flat
            # The leading axis needs no modulo: flat < size, so flat // stride < extent.
            if d > 0:
                value = te.floormod(value, extent)
            src.append(value)
        return data[tuple(src)]

    return te.compute(shape, fcompute, name=name)


def reshape(shape, newshape, dtype: str = "float32") -> PrimFunc:
    data = te.placeholder(shape_of(shape, "reshape"), canonical_dtype(dtype, "reshape"),
                          name="data")
    return te.create_prim_func([data, te_reshape(data, newshape, name="T_reshape")],
                               name="reshape")


def ref_reshape(data: np.ndarray, newshape) -> np.ndarray:
    return np.reshape(data, _new_shape(data.shape, newshape, "ref_reshape")).copy()


def _pad_width(pad_width, ndim: int, op: str) -> tuple[tuple[int, int], ...]:
    """numpy's forms: an int, (before, after) for every axis, or one pair per axis."""
    if isinstance(pad_width, (int, np.integer)):
        widths = ((int(pad_width), int(pad_width)),) * ndim
    elif (isinstance(pad_width, (list, tuple)) and len(pad_width) == 2
          and all(isinstance(v, (int, np.integer)) for v in pad_width)):
        widths = ((int(pad_width[0]), int(pad_width[1])),) * ndim
    else:
        check(isinstance(pad_width, (list, tuple)) and len(pad_width) == ndim, op,
              f"pad_width {pad_width!r} must be an int, a (before, after) pair or one pair "
              f"per axis of a rank-{ndim} tensor")
        widths = []
        for w in pad_width:
            check(isinstance(w, (list, tuple)) and len(w) == 2, op,
                  f"pad_width entry {w!r} is not a (before, after) pair")
            widths.append((int(w[0]), int(w[1])))
        widths = tuple(widths)
    for w in widths:
        check(w[0] >= 0 and w[1] >= 0, op, f"pad_width {pad_width!r} must be non-negative")
    return widths


def te_pad(data: te.Tensor, pad_width, pad_value: float = 0.0, name: str = "pad"
           ) -> te.Tensor:
    """Constant padding; the border is a lazy Select, so no out-of-bounds load happens."""
    _tensor(data, "pad")
    widths = _pad_width(pad_width, data.ndim, "pad")
    before = tuple(w[0] for w in widths)
    after = tuple(w[1] for w in widths)
    if not any(before) and not any(after):
        # pad_nd returns its input unchanged; a PrimFunc still needs a stage of its own.
        return te.compute(data.shape, lambda *idx: data[idx], name=name)
    return pad_nd(data, before, after, value=pad_value, name=name)


def pad(shape, pad_width, pad_value: float = 0.0, dtype: str = "float32") -> PrimFunc:
    data = te.placeholder(shape_of(shape, "pad"), canonical_dtype(dtype, "pad"), name="data")
    return te.create_prim_func([data, te_pad(data, pad_width, pad_value, name="T_pad")],
                               name="pad")


def ref_pad(data: np.ndarray, pad_width, pad_value: float = 0.0) -> np.ndarray:
    widths = _pad_width(pad_width, data.ndim, "ref_pad")
    return np.pad(data, widths, constant_values=pad_value)


def te_concatenate(tensors: Sequence[te.Tensor], axis: int = 0, name: str = "concatenate"
                   ) -> te.Tensor:
    """Join tensors along ``axis``; each output element selects (lazily) the one input whose
    range along the axis holds it."""
    op = "concatenate"
    check(isinstance(tensors, (list, tuple)) and len(tensors) > 0, op,
          "needs a non-empty list of tensors")
    for t in tensors:
        _tensor(t, op)
    first = tensors[0]
    axis = normalize_axis(axis, first.ndim, op)
    for t in tensors[1:]:
        check(t.ndim == first.ndim, op, f"ranks differ: {first.shape} vs {t.shape}")
        check(t.dtype == first.dtype, op, f"dtypes differ: {first.dtype} vs {t.dtype}")
        for d in range(first.ndim):
            check(d == axis or t.shape[d] == first.shape[d], op,
                  f"shapes {first.shape} and {t.shape} differ outside axis {axis}")
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = tuple(offsets[-1] if d == axis else first.shape[d] for d in range(first.ndim))

    def fcompute(*idx):
        i = idx[axis]

        def load(j):
            src = list(idx)
            src[axis] = i - offsets[j] if offsets[j] else i
            return tensors[j][tuple(src)]

        # Build from the last input backwards: (i < end_0) ? T0 : ((i < end_1) ? T1 : ... Tn).
        value = load(len(tensors) - 1)
        for j in range(len(tensors) - 2, -1, -1):
            value = te.if_then_else(i < offsets[j + 1], load(j), value)
        return value

    return te.compute(shape, fcompute, name=name)


def concatenate(shapes, axis: int = 0, dtype: str = "float32") -> PrimFunc:
    op = "concatenate"
    check(isinstance(shapes, (list, tuple)) and len(shapes) > 0, op,
          "needs a non-empty list of input shapes")
    dtype = canonical_dtype(dtype, op)
    inputs = [te.placeholder(shape_of(s, op, f"shape {k}"), dtype, name=f"data{k}")
              for k, s in enumerate(shapes)]
    out = te_concatenate(inputs, axis, name="T_concat")
    return te.create_prim_func(inputs + [out], name=op)


def ref_concatenate(arrays: Sequence[np.ndarray], axis: int = 0) -> np.ndarray:
    return np.concatenate(list(arrays), axis=axis)
