"""Layout operators: transpose, reshape, pad, concatenate, tile, trilu and resize2d.

These move data (resize2d's linear mode blends neighbours); the references are the numpy
functions of the same names where numpy has one.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import numpy as np

from .. import te
from ..func import PrimFunc
from .utils import (
    canonical_dtype, check, normalize_axis, pad_nd, shape_of, to_float,
)

__all__ = [
    "te_transpose", "transpose", "ref_transpose",
    "te_reshape", "reshape", "ref_reshape",
    "te_pad", "pad", "ref_pad",
    "te_concatenate", "concatenate", "ref_concatenate",
    "te_tile", "tile", "ref_tile", "te_trilu", "trilu", "ref_trilu",
    "RESIZE_COORDINATES", "RESIZE_ROUNDING", "te_resize2d", "resize2d", "ref_resize2d",
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


def te_tile(data: te.Tensor, repeats: Sequence[int], name: str = "tile") -> te.Tensor:
    """``data`` repeated ``repeats[d]`` times along each axis d (numpy.tile with one repeat
    count per axis)."""
    op = "tile"
    _tensor(data, op)
    check(isinstance(repeats, (list, tuple)) and len(repeats) == data.ndim, op,
          f"repeats {repeats!r} must give one count per axis of a rank-{data.ndim} tensor")
    check(all(isinstance(r, (int, np.integer)) and r >= 1 for r in repeats), op,
          f"repeats {repeats!r} must be positive ints")
    shape = tuple(s * int(r) for s, r in zip(data.shape, repeats))

    def fcompute(*idx):
        # An axis that is not repeated, or of extent 1, needs no modulo.
        return data[tuple(i if r == 1 else (0 if s == 1 else te.floormod(i, s))
                          for i, s, r in zip(idx, data.shape, repeats))]

    return te.compute(shape, fcompute, name=name)


def tile(shape, repeats, dtype: str = "float32") -> PrimFunc:
    data = te.placeholder(shape_of(shape, "tile"), canonical_dtype(dtype, "tile"), name="data")
    return te.create_prim_func([data, te_tile(data, tuple(repeats), name="T_tile")],
                               name="tile")


def ref_tile(data: np.ndarray, repeats) -> np.ndarray:
    return np.tile(data, tuple(repeats))


def te_trilu(data: te.Tensor, k: int = 0, upper: bool = True, name: str = "trilu"
             ) -> te.Tensor:
    """The upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes; the rest
    is zero (numpy.triu / numpy.tril)."""
    op = "trilu"
    _tensor(data, op)
    check(data.ndim >= 2, op, f"needs a rank >= 2 input, got shape {data.shape}")
    zero = te.const(0, data.dtype)

    def fcompute(*idx):
        i, j = idx[-2], idx[-1]
        keep = (j - i >= k) if upper else (j - i <= k)
        return te.if_then_else(keep, data[idx], zero)

    return te.compute(data.shape, fcompute, name=name)


def trilu(shape, k: int = 0, upper: bool = True, dtype: str = "float32") -> PrimFunc:
    data = te.placeholder(shape_of(shape, "trilu"), canonical_dtype(dtype, "trilu"),
                          name="data")
    return te.create_prim_func([data, te_trilu(data, k, upper, name="T_trilu")], name="trilu")


def ref_trilu(data: np.ndarray, k: int = 0, upper: bool = True) -> np.ndarray:
    return np.triu(data, k) if upper else np.tril(data, k)


# ONNX's coordinate_transformation_mode values resize2d handles, and its nearest_mode values.
RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners",
                      "half_pixel_symmetric")
RESIZE_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_fraction(i: int, n_in: int, n_out: int, scale: Fraction, mode: str
                     ) -> tuple[int, int, int]:
    """(a, b, d): the source coordinate of output index i is (a * i + b) / d, exactly, for
    ``mode`` (ONNX's coordinate_transformation_mode) and the rational ``scale``."""
    p, q = scale.numerator, scale.denominator
    if mode == "asymmetric":  # i / scale
        return q, 0, p
    if mode == "align_corners":
        # i * (in - 1) / (in * scale - 1): ONNX's length_resized is in * scale, not the
        # rounded output size (they differ when a scale does not divide the input).
        d = n_in * p - q
        return (0, 0, 1) if n_out == 1 or d <= 0 else ((n_in - 1) * q, 0, d)
    if mode == "pytorch_half_pixel" and n_out == 1:
        return 0, 0, 1
    if mode == "half_pixel_symmetric":
        # half_pixel shifted so that the output is centred on the input: by
        # in / 2 * (1 - out / (in * scale)) = (in p - out q) / (2 p).
        return 2 * q, q - p + n_in * p - n_out * q, 2 * p
    # half_pixel: (i + 1/2) / scale - 1/2 = ((2 i + 1) q - p) / (2 p)
    return 2 * q, q - p, 2 * p


def _resize_check(op: str, shape, size, scales, mode, coordinate, rounding):
    check(len(shape) == 4, op, f"needs an NCHW input, got shape {tuple(shape)}")
    check(mode in ("nearest", "linear"), op, f"mode {mode!r} must be 'nearest' or 'linear'")
    check(coordinate in RESIZE_COORDINATES, op, f"coordinate mode {coordinate!r} must be one "
          f"of {', '.join(RESIZE_COORDINATES)}")
    check(rounding in RESIZE_ROUNDING, op, f"nearest mode {rounding!r} must be one of "
          f"{', '.join(RESIZE_ROUNDING)}")
    check(len(size) == 2 and all(isinstance(v, (int, np.integer)) and v >= 1 for v in size),
          op, f"output size {size!r} must be two positive ints")
    check(len(scales) == 2 and all(float(v) > 0 for v in scales), op,
          f"scales {scales!r} must be two positive numbers")
    return tuple(int(v) for v in size), tuple(Fraction(v).limit_denominator(1 << 20)
                                              for v in scales)


def te_resize2d(data: te.Tensor, size, scales=None, mode: str = "nearest",
                coordinate: str = "half_pixel", rounding: str = "round_prefer_floor",
                name: str = "resize2d") -> te.Tensor:
    """Resize the H and W axes of NCHW ``data`` to ``size`` = (OH, OW), as ONNX's Resize.

    ``scales`` (default size / input size) are the factors the coordinate transformation
    divides by; they are taken as exact fractions, so that the source coordinate of every
    output index is a ratio of integer expressions: nearest rounds it with floor divisions,
    linear blends the two neighbours with the remainder as the weight.  No float rounding
    decides which input element is read."""
    op = "resize2d"
    _tensor(data, op)
    n_in = data.shape[2:]
    if scales is None:
        scales = tuple(Fraction(o, i) for o, i in zip(size, n_in))
    size, scales = _resize_check(op, data.shape, size, scales, mode, coordinate, rounding)
    if mode == "linear":
        check(data.dtype.startswith("float"), op, f"linear mode needs a float input, got "
              f"{data.dtype}")
    fracs = [_source_fraction(0, i, o, s, coordinate) for i, o, s in zip(n_in, size, scales)]

    def clamp(v, hi):
        return te.max(te.min(v, hi), 0)

    def nearest(i, extent, frac):
        a, b, d = frac
        num = i * a + b if a != 1 else i + b
        if rounding == "floor":
            v = te.floordiv(num, d)
        elif rounding == "ceil":
            v = te.floordiv(num + (d - 1), d)
        elif rounding == "round_prefer_floor":  # ceil(x - 1/2)
            v = te.floordiv(num * 2 + (d - 1), 2 * d)
        else:  # round_prefer_ceil: floor(x + 1/2)
            v = te.floordiv(num * 2 + d, 2 * d)
        return clamp(v, extent - 1)

    def linear(i, extent, frac):
        """(low index, high index, weight of the high one)."""
        a, b, d = frac
        num = clamp(i * a + b, (extent - 1) * d)  # the coordinate clamped into the input
        low = te.floordiv(num, d)
        high = te.min(low + 1, extent - 1)
        weight = te.cast(data.dtype, num - low * d) / to_float(d, data.dtype)
        return low, high, weight

    if mode == "nearest":
        def fcompute(n, c, y, x):
            return data[n, c, nearest(y, n_in[0], fracs[0]), nearest(x, n_in[1], fracs[1])]
    else:
        one = te.const(1.0, data.dtype)

        def fcompute(n, c, y, x):
            y0, y1, wy = linear(y, n_in[0], fracs[0])
            x0, x1, wx = linear(x, n_in[1], fracs[1])
            top = data[n, c, y0, x0] * (one - wx) + data[n, c, y0, x1] * wx
            bottom = data[n, c, y1, x0] * (one - wx) + data[n, c, y1, x1] * wx
            return top * (one - wy) + bottom * wy

    return te.compute(tuple(data.shape[:2]) + size, fcompute, name=name)


def resize2d(shape, size, scales=None, mode: str = "nearest", coordinate: str = "half_pixel",
             rounding: str = "round_prefer_floor", dtype: str = "float32") -> PrimFunc:
    data = te.placeholder(shape_of(shape, "resize2d"), canonical_dtype(dtype, "resize2d"),
                          name="data")
    out = te_resize2d(data, size, scales, mode, coordinate, rounding, name="T_resize2d")
    return te.create_prim_func([data, out], name="resize2d")


def ref_resize2d(data: np.ndarray, size, scales=None, mode: str = "nearest",
                 coordinate: str = "half_pixel", rounding: str = "round_prefer_floor"
                 ) -> np.ndarray:
    """The same resize computed in float64 from ONNX's formulas, axis by axis."""
    op = "ref_resize2d"
    n_in = data.shape[2:]
    if scales is None:
        scales = tuple(o / i for o, i in zip(size, n_in))
    size, _ = _resize_check(op, data.shape, size, scales, mode, coordinate, rounding)
    out = data.astype(np.float64)
    for axis, (extent, count, scale) in enumerate(zip(n_in, size, scales), start=2):
        i = np.arange(count, dtype=np.float64)
        scale = float(scale)
        if coordinate == "asymmetric":
            x = i / scale
        elif coordinate == "align_corners":
            x = np.zeros_like(i) if count == 1 else i * (extent - 1) / (count - 1)
        elif coordinate == "pytorch_half_pixel" and count == 1:
            x = np.zeros_like(i)
        else:
            x = (i + 0.5) / scale - 0.5
        if mode == "nearest":
            rounded = {"floor": np.floor(x), "ceil": np.ceil(x),
                       "round_prefer_floor": np.ceil(x - 0.5),
                       "round_prefer_ceil": np.floor(x + 0.5)}[rounding]
            index = np.clip(rounded, 0, extent - 1).astype(np.int64)
            out = np.take(out, index, axis=axis)
        else:
            x = np.clip(x, 0, extent - 1)
            low = np.floor(x).astype(np.int64)
            high = np.minimum(low + 1, extent - 1)
            shape = [1] * out.ndim
            shape[axis] = count
            w = (x - low).reshape(shape)
            out = np.take(out, low, axis=axis) * (1 - w) + np.take(out, high, axis=axis) * w
    return out.astype(data.dtype)
