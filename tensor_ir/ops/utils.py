"""Shared helpers of the operator library: argument normalisation and shape checks."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import DTypeError, TEError


def check(cond: bool, op: str, message: str) -> None:
    """Raise TEError naming the operator when a shape condition does not hold."""
    if not cond:
        raise TEError(f"{op}: {message}")


def canonical_dtype(dtype, op: str) -> str:
    try:
        return dt.canonical(dtype)
    except DTypeError as err:
        raise TEError(f"{op}: {err}") from None


def positive_ints(values: Sequence, op: str, what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        check(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0, op,
              f"{what} must be positive integers, got {tuple(values)!r}")
        out.append(int(v))
    return tuple(out)


def pair(value, op: str, what: str, allow_zero: bool = False) -> tuple[int, int]:
    """An int or a 2-sequence -> (h, w)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        values = (int(value), int(value))
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        values = tuple(value)
    else:
        raise TEError(f"{op}: {what} must be an int or a pair of ints, got {value!r}")
    lowest = 0 if allow_zero else 1
    for v in values:
        check(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lowest,
              op, f"{what} must hold ints >= {lowest}, got {value!r}")
    return int(values[0]), int(values[1])


def padding4(padding, op: str) -> tuple[int, int, int, int]:
    """TVM's padding convention: int, (ph, pw) or (top, left, bottom, right)."""
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        values = (padding,) * 4
    elif isinstance(padding, (tuple, list)) and len(padding) == 2:
        values = (padding[0], padding[1], padding[0], padding[1])
    elif isinstance(padding, (tuple, list)) and len(padding) == 4:
        values = tuple(padding)
    else:
        raise TEError(f"{op}: padding must be an int, (pad_h, pad_w) or "
                      f"(top, left, bottom, right), got {padding!r}")
    for v in values:
        check(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0, op,
              f"padding must be non-negative ints, got {padding!r}")
    return tuple(int(v) for v in values)  # type: ignore[return-value]


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    check(isinstance(axis, (int, np.integer)) and not isinstance(axis, bool), op,
          f"axis must be an int, got {axis!r}")
    check(-ndim <= axis < ndim, op, f"axis {axis} is out of range for rank {ndim}")
    return int(axis) % ndim


def normalize_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    """None (all axes), an int or a sequence of ints -> sorted distinct non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = [normalize_axis(a, ndim, op) for a in axis]
    else:
        axes = [normalize_axis(axis, ndim, op)]
    check(len(set(axes)) == len(axes), op, f"axis {axis!r} names an axis twice")
    return tuple(sorted(axes))


def shape_of(shape, op: str, what: str = "shape") -> tuple[int, ...]:
    """A shape argument (an int or a sequence of non-negative ints) as a tuple."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TEError(f"{op}: {what} must be a sequence of ints, got {shape!r}") from None
    for s, orig in zip(out, shape):
        check(not isinstance(orig, bool) and s == orig and s >= 1, op,
              f"{what} must hold positive ints, got {tuple(shape)!r}")
    return out


def broadcast_shape(a: tuple, b: tuple, op: str) -> tuple[int, ...]:
    ndim = max(len(a), len(b))
    pa = (1,) * (ndim - len(a)) + tuple(a)
    pb = (1,) * (ndim - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        check(x == y or x == 1 or y == 1, op,
              f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def broadcast_index(tensor: te.Tensor, out_indices: Sequence) -> tuple:
    """Indices into ``tensor`` for an output element under numpy broadcasting rules."""
    offset = len(out_indices) - tensor.ndim
    idx = []
    for d, extent in enumerate(tensor.shape):
        # A broadcast dimension (extent 1) is read at 0 whatever the output index is.
        idx.append(0 if extent == 1 else out_indices[offset + d])
    return tuple(idx)


def conv_out_size(size: int, pad_before: int, pad_after: int, kernel: int, stride: int,
                  dilation: int, op: str, what: str) -> int:
    effective = dilation * (kernel - 1) + 1
    out = (size + pad_before + pad_after - effective) // stride + 1
    check(size + pad_before + pad_after >= effective and out > 0, op,
          f"output {what} is not positive: input {size} + padding {pad_before}+{pad_after} "
          f"is smaller than the dilated kernel extent {effective}")
    return out


def pad_nd(data: te.Tensor, before: Sequence[int], after: Sequence[int], value=0.0,
           name: str = "pad") -> te.Tensor:
    """A padding stage: reads ``data`` only where the index is inside it (the Select is lazy,
    so no out-of-bounds load happens in the padded border)."""
    if not any(before) and not any(after):
        return data
    shape = tuple(s + b + a for s, b, a in zip(data.shape, before, after))
    fill = te.const(value, data.dtype)

    def fcompute(*idx):
        conds = []
        src = []
        for i, s, b, a in zip(idx, data.shape, before, after):
            if b or a:
                if b:
                    conds.append(i >= b)
                if a:
                    conds.append(i < s + b)
                src.append(i - b if b else i)
            else:
                src.append(i)
        return te.if_then_else(te.all(*conds), data[tuple(src)], fill)

    return te.compute(shape, fcompute, name=name)


def as_tensor_args(tensors: Sequence[te.Tensor], op: str) -> None:
    for t in tensors:
        check(isinstance(t, te.Tensor), op, f"expected te.Tensor arguments, got "
              f"{type(t).__name__}")


def to_float(value, dtype: str):
    """A float constant in ``dtype``."""
    return te.const(float(value), dtype)


# NOTE: te.max / te.min given a list of reduce axes currently fail (te._is_axis_arg calls the
# module's own te.all instead of the builtin); these reducers are built the same way as te's
# own "max" / "min" and take any axis list, so the operators do not depend on that path.
reduce_max = te.comm_reducer(lambda x, y: te.max(x, y), lambda t: te.min_value(t),
                             name="max")
reduce_min = te.comm_reducer(lambda x, y: te.min(x, y), lambda t: te.max_value(t),
                             name="min")
