"""More graph operators: the elementwise math of ONNX's operator set and the gathers.

Registered into ``operators.OPS`` when ``autotune.graph`` is imported (see its ``__init__``);
each has, as there, a type rule, a te definition and a numpy meaning.

* unary float math: reciprocal, floor, ceil, round, sign, sin, cos, tan, sinh, cosh, asinh,
  acosh, atanh, softsign, selu, celu, thresholded_relu, shrink, swish (elementwise: they fuse
  as relu does);
* isnan / isinf (bool results);
* mod (ONNX's fmod=0 is the floor remainder of integers, fmod=1 the truncated one);
* gather / gather_elements with runtime indices (injective: each output element reads one
  element of the data, at an index loaded from the indices);
* lrn, ONNX's local response normalization across channels (a windowed sum of squares).
"""
from __future__ import annotations

import math

import numpy as np

from tensor_ir import te
from tensor_ir.ops.utils import pad_nd

from .operators import (
    BROADCAST, ELEMWISE, INJECTIVE, binary_infer, broadcast_compute, cast_result, check_op,
    register_op, same_type,
)
from .types import TensorType, contiguous


def _float_infer(op):
    def infer(types, attrs):
        check_op(types[0].dtype.startswith("float"), op,
               f"needs a float input, got {types[0].dtype}")
        return types[0]
    return infer


def _unary_expr(name: str, fn, np_fn, float_only: bool = True) -> None:
    """A unary operator from an expression builder ``fn(value, dtype, attrs)`` and a numpy
    reference ``np_fn(array in float64, attrs)``."""
    def build(args, attrs, n):
        x = args[0]
        return te.compute(x.shape, lambda *i: fn(x[i], x.dtype, attrs), name=n)

    def run(arrays, attrs):
        x = arrays[0]
        wide = x.astype(np.float64) if x.dtype.kind == "f" else x
        with np.errstate(all="ignore"):
            return cast_result(np_fn(wide, attrs), x.dtype)
    register_op(name, ELEMWISE, (1, 1), _float_infer(name) if float_only else same_type,
              build, run)


def _c(value, dtype):
    return te.const(float(value), dtype)


def _trunc(v, dtype):
    return te.if_then_else(v < _c(0, dtype), te.ceil(v), te.floor(v))


_unary_expr("reciprocal", lambda v, d, a: _c(1, d) / v, lambda x, a: 1.0 / x)
_unary_expr("floor", lambda v, d, a: te.floor(v), lambda x, a: np.floor(x))
_unary_expr("ceil", lambda v, d, a: te.ceil(v), lambda x, a: np.ceil(x))
_unary_expr("round", lambda v, d, a: te.round(v), lambda x, a: np.round(x))
_unary_expr("sin", lambda v, d, a: te.call("sin", v), lambda x, a: np.sin(x))
_unary_expr("cos", lambda v, d, a: te.call("cos", v), lambda x, a: np.cos(x))
_unary_expr("tan", lambda v, d, a: te.call("sin", v) / te.call("cos", v),
            lambda x, a: np.tan(x))
# The hyperbolic functions from exp and log: LLVM has no intrinsic for them, and their
# float32 results are within the float tolerance for the arguments models feed them.
_unary_expr("sinh", lambda v, d, a: (te.exp(v) - te.exp(-v)) * _c(0.5, d),
            lambda x, a: np.sinh(x))
_unary_expr("cosh", lambda v, d, a: (te.exp(v) + te.exp(-v)) * _c(0.5, d),
            lambda x, a: np.cosh(x))
_unary_expr("asinh", lambda v, d, a: te.if_then_else(
    v < _c(0, d), -te.log(-v + te.sqrt(v * v + _c(1, d))), te.log(v + te.sqrt(v * v + _c(1, d)))),
    lambda x, a: np.arcsinh(x))
_unary_expr("acosh", lambda v, d, a: te.log(v + te.sqrt(v * v - _c(1, d))),
            lambda x, a: np.arccosh(x))
_unary_expr("atanh", lambda v, d, a: te.log((_c(1, d) + v) / (_c(1, d) - v)) * _c(0.5, d),
            lambda x, a: np.arctanh(x))
_unary_expr("softsign", lambda v, d, a: v / (_c(1, d) + te.abs(v)),
            lambda x, a: x / (1.0 + np.abs(x)))
_unary_expr("sign", lambda v, d, a: te.if_then_else(
    v > te.const(0, d), te.const(1, d),
    te.if_then_else(v < te.const(0, d), te.const(-1, d), te.const(0, d))),
    lambda x, a: np.sign(x), float_only=False)


def _selu(v, d, a):
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    return te.if_then_else(v > _c(0, d), v * _c(gamma, d),
                           (te.exp(v) - _c(1, d)) * _c(alpha * gamma, d))


def _np_selu(x, a):
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    return np.where(x > 0, gamma * x, alpha * gamma * (np.exp(np.minimum(x, 0)) - 1))


_unary_expr("selu", _selu, _np_selu)
_unary_expr("celu", lambda v, d, a: te.max(v, _c(0, d)) + te.min(
    _c(0, d), (te.exp(v / _c(a.get("alpha", 1.0), d)) - _c(1, d)) * _c(a.get("alpha", 1.0), d)),
    lambda x, a: np.maximum(x, 0) + np.minimum(
        0, a.get("alpha", 1.0) * (np.exp(np.minimum(x, 0) / a.get("alpha", 1.0)) - 1)))
_unary_expr("thresholded_relu", lambda v, d, a: te.if_then_else(
    v > _c(a.get("alpha", 1.0), d), v, _c(0, d)),
    lambda x, a: np.where(x > a.get("alpha", 1.0), x, 0.0))
_unary_expr("shrink", lambda v, d, a: te.if_then_else(
    v < _c(-a.get("lambd", 0.5), d), v + _c(a.get("bias", 0.0), d),
    te.if_then_else(v > _c(a.get("lambd", 0.5), d), v - _c(a.get("bias", 0.0), d), _c(0, d))),
    lambda x, a: np.where(x < -a.get("lambd", 0.5), x + a.get("bias", 0.0),
                          np.where(x > a.get("lambd", 0.5), x - a.get("bias", 0.0), 0.0)),
    float_only=False)
_unary_expr("swish", lambda v, d, a: v * te.sigmoid(v * _c(a.get("alpha", 1.0), d)),
            lambda x, a: x / (1.0 + np.exp(-a.get("alpha", 1.0) * x)))


def _bool_unary(name: str, fn, np_fn) -> None:
    def infer(types, attrs):
        check_op(types[0].dtype.startswith("float"), name,
               f"needs a float input, got {types[0].dtype}")
        return TensorType(types[0].shape, "bool")

    register_op(name, ELEMWISE, (1, 1), infer,
              lambda args, attrs, n: te.compute(
                  args[0].shape, lambda *i: fn(args[0][i], args[0].dtype, attrs), name=n),
              lambda arrays, attrs: contiguous(np_fn(arrays[0], attrs)))


def _isinf(v, d, a):
    # A NaN compares false both ways, so neither test below holds for it.
    big = te.const(float(np.finfo(d).max), d)
    pos, neg = v > big, v < -big
    if a.get("detect_positive", 1) and a.get("detect_negative", 1):
        return te.any(pos, neg)
    if a.get("detect_positive", 1):
        return pos
    if a.get("detect_negative", 1):
        return neg
    return v != v  # never true for a number, false for NaN too: all False


def _np_isinf(x, a):
    out = np.zeros(x.shape, dtype=bool)
    if a.get("detect_positive", 1):
        out |= np.isposinf(x)
    if a.get("detect_negative", 1):
        out |= np.isneginf(x)
    return out


# NaN is the one value that differs from itself.
_bool_unary("isnan", lambda v, d, a: te.not_equal(v, v), lambda x, a: np.isnan(x))
_bool_unary("isinf", _isinf, _np_isinf)


def _mod_te(args, attrs, name):
    a, b = args
    shape = TensorType(a.shape, a.dtype), TensorType(b.shape, b.dtype)
    out = binary_infer("mod")(list(shape), attrs).shape
    fmod = attrs.get("fmod", 0)
    dtype = a.dtype

    def combine(x, y):
        if dtype.startswith("float"):
            # fmod=1 is C's fmod: the remainder of the quotient truncated toward zero; fmod=0
            # the floor remainder, the divisor's sign (numpy.mod).
            big = te.const(float(np.finfo(dtype).max), dtype)
            zero = te.const(0.0, dtype)
            # x - trunc(x / y) * y, with x itself for an infinite y (where inf * 0 is NaN).
            r = te.if_then_else(te.any(y > big, y < -big), x, x - _trunc(x / y, dtype) * y)
            if fmod:
                return r
            flip = te.all(te.not_equal(r, zero), (r < zero) != (y < zero))
            return te.if_then_else(flip, r + y, r)
        r = x % y  # floor remainder: the divisor's sign, Python's and ONNX's fmod=0
        if not fmod:
            return r
        zero = te.const(0, dtype)
        # The truncated remainder takes the dividend's sign instead.
        flip = te.all(r != zero, (r < zero) != (x < zero))
        return te.if_then_else(flip, r - y, r)
    return broadcast_compute(a, b, out, combine, name)


def _mod_numpy(arrays, attrs):
    a, b = arrays
    with np.errstate(all="ignore"):
        out = np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)
    return cast_result(out, a.dtype)


register_op("mod", BROADCAST, (2, 2), binary_infer("mod"), _mod_te, _mod_numpy)


def _int_index(value, extent: int):
    """An index loaded from an indices tensor, as the index dtype, a negative one counted from
    the end of its axis as ONNX says."""
    index = te.cast("int64", value)
    return te.if_then_else(index < te.const(0, "int64"), index + te.const(extent, "int64"),
                           index)


def _gather_infer(types, attrs):
    data, indices = types
    check_op(indices.dtype in ("int32", "int64"), "gather",
           f"indices must be int32 or int64, got {indices.dtype}")
    axis = attrs["axis"]
    check_op(0 <= axis < len(data.shape), "gather", f"axis {axis} is out of range for {data}")
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


def _gather_te(args, attrs, name):
    data, indices = args
    axis = attrs["axis"]
    shape = _gather_infer([TensorType(data.shape, data.dtype),
                           TensorType(indices.shape, indices.dtype)], attrs).shape
    k = len(indices.shape)

    def fcompute(*i):
        index = _int_index(indices[i[axis:axis + k]] if k else indices[()], data.shape[axis])
        return data[tuple(i[:axis]) + (index,) + tuple(i[axis + k:])]
    return te.compute(shape, fcompute, name=name)


def _gather_numpy(arrays, attrs):
    data, indices = arrays
    return contiguous(np.take(data, indices.astype(np.int64), axis=attrs["axis"]))


register_op("gather", INJECTIVE, (2, 2), _gather_infer, _gather_te, _gather_numpy)


def _gather_elements_infer(types, attrs):
    data, indices = types
    check_op(indices.dtype in ("int32", "int64"), "gather_elements",
           f"indices must be int32 or int64, got {indices.dtype}")
    check_op(len(indices.shape) == len(data.shape), "gather_elements",
           f"indices {indices.shape} and data {data.shape} must have the same rank")
    axis = attrs["axis"]
    check_op(0 <= axis < len(data.shape), "gather_elements",
           f"axis {axis} is out of range for {data}")
    return TensorType(indices.shape, data.dtype)


def _gather_elements_te(args, attrs, name):
    data, indices = args
    axis = attrs["axis"]

    def fcompute(*i):
        index = _int_index(indices[i], data.shape[axis])
        return data[tuple(i[:axis]) + (index,) + tuple(i[axis + 1:])]
    return te.compute(indices.shape, fcompute, name=name)


def _gather_elements_numpy(arrays, attrs):
    data, indices = arrays
    index = indices.astype(np.int64)
    axis = attrs["axis"]
    index = np.where(index < 0, index + data.shape[axis], index)
    # Indices may be shorter than the data on the other axes: the data's leading part there.
    region = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
    return contiguous(np.take_along_axis(data[region], index, axis=axis))


register_op("gather_elements", INJECTIVE, (2, 2), _gather_elements_infer, _gather_elements_te,
            _gather_elements_numpy)


def _gather_nd_infer(types, attrs):
    data, indices = types
    batch = attrs.get("batch_dims", 0)
    check_op(indices.dtype == "int64", "gather_nd", f"indices must be int64, got {indices.dtype}")
    check_op(len(indices.shape) >= 1, "gather_nd", "indices must have rank 1 or more")
    depth = indices.shape[-1]
    check_op(batch + depth <= len(data.shape), "gather_nd",
           f"indices {indices.shape} index deeper than data {data.shape}")
    check_op(indices.shape[:batch] == data.shape[:batch], "gather_nd",
           f"batch axes of {indices.shape} and {data.shape} differ")
    return TensorType(indices.shape[:-1] + data.shape[batch + depth:], data.dtype)


def _gather_nd_te(args, attrs, name):
    data, indices = args
    batch = attrs.get("batch_dims", 0)
    shape = _gather_nd_infer([TensorType(data.shape, data.dtype),
                              TensorType(indices.shape, indices.dtype)], attrs).shape
    depth = indices.shape[-1]
    lead = len(indices.shape) - 1

    def fcompute(*i):
        where = tuple(i[:lead])
        picked = tuple(_int_index(indices[where + (te.const(k, "int64"),)],
                                  data.shape[batch + k]) for k in range(depth))
        return data[tuple(i[:batch]) + picked + tuple(i[lead:])]
    return te.compute(shape, fcompute, name=name)


def _gather_nd_numpy(arrays, attrs):
    data, indices = arrays
    batch = attrs.get("batch_dims", 0)
    out_shape = _gather_nd_infer([TensorType.of(data), TensorType.of(indices)], attrs).shape
    lead = indices.shape[:-1]
    flat_idx = indices.reshape((-1, indices.shape[-1]))
    batch_size = math.prod(data.shape[:batch])
    per_batch = flat_idx.shape[0] // max(batch_size, 1)
    data_b = data.reshape((batch_size,) + data.shape[batch:])
    rows = []
    for r, index in enumerate(flat_idx):
        rows.append(data_b[r // per_batch][tuple(int(v) for v in index)])
    del lead
    return contiguous(np.asarray(rows, dtype=data.dtype).reshape(out_shape))


register_op("gather_nd", INJECTIVE, (2, 2), _gather_nd_infer, _gather_nd_te, _gather_nd_numpy)


def _int_divide_te(args, attrs, name):
    a, b = args
    out = binary_infer("int_divide")([TensorType(a.shape, a.dtype),
                                       TensorType(b.shape, b.dtype)], attrs).shape
    dtype = a.dtype
    zero = te.const(0, dtype)

    def combine(x, y):
        # ONNX's integer Div truncates toward zero; // floors: one up where they differ.
        q = x // y
        return te.if_then_else(te.all(x % y != zero, (x < zero) != (y < zero)),
                               q + te.const(1, dtype), q)
    return broadcast_compute(a, b, out, combine, name)


def _int_divide_numpy(arrays, attrs):
    a, b = arrays
    with np.errstate(all="ignore"):
        return cast_result(np.trunc(a.astype(np.float64) / b.astype(np.float64)), a.dtype)


# Integer division as ONNX's Div of integers means it (truncating); a float Div is "divide".
register_op("int_divide", BROADCAST, (2, 2), binary_infer("int_divide"), _int_divide_te,
            _int_divide_numpy)


# ---------------------------------------------------------------------------------------------
# cumulative sums, top-k, scatters: reductions whose predicate picks the elements
# ---------------------------------------------------------------------------------------------

def _cumsum_te(args, attrs, name):
    x = args[0]
    axis, exclusive, reverse = attrs["axis"], attrs.get("exclusive", 0), attrs.get("reverse", 0)
    n = x.shape[axis]

    def fcompute(*i):
        j = te.reduce_axis(n, name="j")
        here = i[axis]
        if reverse:
            keep = j > here if exclusive else j >= here
        else:
            keep = j < here if exclusive else j <= here
        src = tuple(j if d == axis else v for d, v in enumerate(i))
        if attrs.get("product", 0):
            return _prod(te.if_then_else(keep, x[src], te.const(1, x.dtype)), axis=[j])
        return te.sum(te.if_then_else(keep, x[src], te.const(0, x.dtype)), axis=[j])
    return te.compute(x.shape, fcompute, name=name)


def _cumsum_numpy(arrays, attrs):
    x = arrays[0]
    axis = attrs["axis"]
    y = np.flip(x, axis) if attrs.get("reverse", 0) else x
    if attrs.get("product", 0):
        out = np.cumprod(y, axis=axis, dtype=x.dtype)
        if attrs.get("exclusive", 0):
            ones = np.ones_like(np.take(out, [0], axis=axis))
            out = np.concatenate([ones, np.take(out, range(out.shape[axis] - 1), axis=axis)],
                                 axis=axis)
    else:
        out = np.cumsum(y, axis=axis, dtype=x.dtype)
        if attrs.get("exclusive", 0):
            out = out - y
    return contiguous(np.flip(out, axis) if attrs.get("reverse", 0) else out)


def _cumsum_infer(types, attrs):
    check_op(0 <= attrs["axis"] < len(types[0].shape), "cumsum",
           f"axis {attrs['axis']} is out of range for {types[0]}")
    return types[0]


# attrs: axis, exclusive, reverse, product (CumProd).
# NOTE: a quadratic reduction along the axis: exact for integers, and the order of a float
# sum is the loop's; the models that use CumSum (positions, masks) have short axes.
register_op("cumsum", "reduction", (1, 1), _cumsum_infer, _cumsum_te, _cumsum_numpy)


def _topk_infer(types, attrs):
    x = types[0]
    axis, k = attrs["axis"], attrs["k"]
    check_op(0 <= axis < len(x.shape), "topk_indices", f"axis {axis} is out of range for {x}")
    check_op(1 <= k <= x.shape[axis], "topk_indices",
           f"k={k} must lie in [1, {x.shape[axis]}] for axis {axis} of {x}")
    return TensorType(tuple(k if d == axis else s for d, s in enumerate(x.shape)), "int64")


def _topk_te(args, attrs, name):
    x = args[0]
    axis, largest = attrs["axis"], attrs.get("largest", 1)
    n = x.shape[axis]
    shape = _topk_infer([TensorType(x.shape, x.dtype)], attrs).shape

    def rank(*i):
        # The position of element i in the sorted order: the elements before it, with ties
        # broken by the lower index first, as ONNX's TopK orders them.
        j = te.reduce_axis(n, name="j")
        other = tuple(j if d == axis else v for d, v in enumerate(i))
        a, b = x[other], x[i]
        before = (a > b) if largest else (a < b)
        ahead = te.any(before, te.all(te.equal(a, b), j < i[axis]))
        return te.sum(te.if_then_else(ahead, te.const(1, "int64"), te.const(0, "int64")),
                      axis=[j])
    ranks = te.compute(x.shape, rank, name=f"{name}_rank")

    def pick(*i):
        j = te.reduce_axis(n, name="j")
        src = tuple(j if d == axis else v for d, v in enumerate(i))
        hit = te.equal(ranks[src], te.cast("int64", i[axis]))
        return te.min(te.if_then_else(hit, te.cast("int64", j), te.const(n, "int64")),
                      axis=[j])
    return te.compute(shape, pick, name=name)


def _topk_numpy(arrays, attrs):
    x = arrays[0]
    axis, k, largest = attrs["axis"], attrs["k"], attrs.get("largest", 1)
    # A stable sort keeps equal elements in index order, as ONNX asks.
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    return contiguous(np.take(order, np.arange(k), axis=axis).astype(np.int64))


# The indices of TopK (sorted); its values are a gather_elements of the data at them.
register_op("topk_indices", "reduction", (1, 1), _topk_infer, _topk_te, _topk_numpy)


_SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
_prod = te.comm_reducer(lambda a, b: a * b, lambda t: te.const(1, t), name="prod")


def _combine_scatter(data_value, hits, total, reduction, dtype):
    if reduction == "none":
        return te.if_then_else(hits > te.const(0, "int32"), total, data_value)
    if reduction == "add":
        return data_value + total
    if reduction == "mul":
        return data_value * total
    if reduction == "max":
        return te.max(data_value, total)
    return te.min(data_value, total)


def _scatter_total(value, match, reduction, axes, dtype):
    """The reduction of the updates that land on one element (their sum for "none", where
    ONNX asks the indices not to repeat)."""
    zero = te.const(0, dtype)
    if reduction in ("none", "add"):
        return te.sum(te.if_then_else(match, value, zero), axis=axes)
    if reduction == "mul":
        return _prod(te.if_then_else(match, value, te.const(1, dtype)), axis=axes)
    if reduction == "max":
        return te.max(value, axis=axes, where=match)
    return te.min(value, axis=axes, where=match)


def _scatter_stages(data, shape, match_of, value_of, reduce_shape, reduction, name):
    """Three stages: how many updates land on each element, their reduction, the result."""
    def hits(*p):
        axes = [te.reduce_axis(n, name=f"j{k}") for k, n in enumerate(reduce_shape)]
        return te.sum(te.if_then_else(match_of(p, axes), te.const(1, "int32"),
                                      te.const(0, "int32")), axis=axes)

    def total(*p):
        axes = [te.reduce_axis(n, name=f"j{k}") for k, n in enumerate(reduce_shape)]
        return _scatter_total(value_of(p, axes), match_of(p, axes), reduction, axes,
                              data.dtype)
    count = te.compute(shape, hits, name=f"{name}_hits")
    summed = te.compute(shape, total, name=f"{name}_total")
    return te.compute(shape, lambda *p: _combine_scatter(data[p], count[p], summed[p],
                                                         reduction, data.dtype), name=name)


def _scatter_elements_infer(types, attrs):
    data, indices, updates = types
    op = "scatter_elements"
    check_op(indices.dtype in ("int32", "int64"), op, f"indices must be int32 or int64, got "
           f"{indices.dtype}")
    check_op(indices.shape == updates.shape and updates.dtype == data.dtype, op,
           f"updates {updates} must match the indices' shape {indices.shape} and the data's "
           f"type {data.dtype}")
    check_op(len(indices.shape) == len(data.shape) and all(
        i <= d for i, d in zip(indices.shape, data.shape)), op,
        f"indices {indices.shape} must have the data's rank and fit in {data.shape}")
    check_op(attrs.get("reduction", "none") in _SCATTER_REDUCTIONS, op,
           f"reduction {attrs.get('reduction')!r} is not one of {_SCATTER_REDUCTIONS}")
    return data


def _scatter_elements_te(args, attrs, name):
    data, indices, updates = args
    axis, reduction = attrs["axis"], attrs.get("reduction", "none")
    extent = data.shape[axis]

    def at(p, axes):
        return tuple(axes[0] if d == axis else v for d, v in enumerate(p))

    def inside(p):
        conds = [v < te.const(n, v.dtype) for d, (v, n) in enumerate(zip(p, indices.shape))
                 if d != axis and n < data.shape[d]]
        return te.all(*conds) if conds else None

    def match_of(p, axes):
        hit = te.equal(_int_index(indices[at(p, axes)], extent), te.cast("int64", p[axis]))
        guard = inside(p)
        # The indices exist only where they are loaded inside their own (smaller) shape.
        return hit if guard is None else te.if_then_else(guard, hit, te.const(False, "bool"))

    def value_of(p, axes):
        guard = inside(p)
        value = updates[at(p, axes)]
        return value if guard is None else te.if_then_else(guard, value,
                                                           te.const(0, data.dtype))
    return _scatter_stages(data, data.shape, match_of, value_of, (indices.shape[axis],),
                           reduction, name)


def _scatter_numpy_apply(out, where, value, reduction):
    if reduction == "none":
        out[where] = value
    elif reduction == "add":
        out[where] += value
    elif reduction == "mul":
        out[where] *= value
    elif reduction == "max":
        out[where] = max(out[where], value)
    else:
        out[where] = min(out[where], value)


def _scatter_elements_numpy(arrays, attrs):
    data, indices, updates = arrays
    axis, reduction = attrs["axis"], attrs.get("reduction", "none")
    out = data.copy()
    for pos in np.ndindex(*indices.shape):
        target = list(pos)
        target[axis] = int(indices[pos]) % data.shape[axis]
        _scatter_numpy_apply(out, tuple(target), updates[pos], reduction)
    return contiguous(out)


register_op("scatter_elements", "reduction", (3, 3), _scatter_elements_infer,
            _scatter_elements_te, _scatter_elements_numpy)


def _scatter_nd_infer(types, attrs):
    data, indices, updates = types
    op = "scatter_nd"
    check_op(indices.dtype == "int64", op, f"indices must be int64, got {indices.dtype}")
    check_op(len(indices.shape) >= 1 and indices.shape[-1] <= len(data.shape), op,
           f"indices {indices.shape} index deeper than data {data.shape}")
    depth = indices.shape[-1]
    want = indices.shape[:-1] + data.shape[depth:]
    check_op(updates.shape == want and updates.dtype == data.dtype, op,
           f"updates {updates} must be {data.dtype} of shape {want}")
    check_op(attrs.get("reduction", "none") in _SCATTER_REDUCTIONS, op,
           f"reduction {attrs.get('reduction')!r} is not one of {_SCATTER_REDUCTIONS}")
    return data


def _scatter_nd_te(args, attrs, name):
    data, indices, updates = args
    reduction = attrs.get("reduction", "none")
    depth = indices.shape[-1]
    lead = indices.shape[:-1]

    def match_of(p, axes):
        conds = [te.equal(_int_index(indices[tuple(axes) + (te.const(m, "int64"),)],
                                     data.shape[m]), te.cast("int64", p[m]))
                 for m in range(depth)]
        return te.all(*conds) if len(conds) > 1 else conds[0]

    def value_of(p, axes):
        return updates[tuple(axes) + tuple(p[depth:])]
    return _scatter_stages(data, data.shape, match_of, value_of, lead, reduction, name)


def _scatter_nd_numpy(arrays, attrs):
    data, indices, updates = arrays
    reduction = attrs.get("reduction", "none")
    out = data.copy()
    for pos in np.ndindex(*indices.shape[:-1]):
        target = tuple(int(v) % n for v, n in zip(indices[pos], data.shape))
        if out[target].ndim:
            for rest in np.ndindex(*out[target].shape):
                _scatter_numpy_apply(out, target + rest, updates[pos + rest], reduction)
        else:
            _scatter_numpy_apply(out, target, updates[pos], reduction)
    return contiguous(out)


register_op("scatter_nd", "reduction", (3, 3), _scatter_nd_infer, _scatter_nd_te,
            _scatter_nd_numpy)


# ---------------------------------------------------------------------------------------------
# pad with edge, reflect and wrap modes
# ---------------------------------------------------------------------------------------------

_PAD_MODES = ("edge", "reflect", "wrap")


def _pad_mode_infer(types, attrs):
    x = types[0]
    pads, mode = attrs["pads"], attrs["mode"]
    check_op(mode in _PAD_MODES, "pad_mode", f"mode {mode!r} is not one of {_PAD_MODES}")
    check_op(len(pads) == len(x.shape) and all(b >= 0 and a >= 0 for b, a in pads), "pad_mode",
           f"pads {pads} must give non-negative (before, after) for each axis of {x.shape}")
    if mode == "reflect":
        # A reflection repeats no edge element, so it reaches at most n - 1 elements out.
        check_op(all(b < n and a < n for (b, a), n in zip(pads, x.shape)), "pad_mode",
               f"reflect pads {pads} must be smaller than the extents {x.shape}")
    return TensorType(tuple(s + b + a for s, (b, a) in zip(x.shape, pads)), x.dtype)


def _source(i, before: int, n: int, mode: str):
    j = i - te.const(before, i.dtype) if before else i
    zero, last = te.const(0, i.dtype), te.const(n - 1, i.dtype)
    if mode == "edge":
        return te.max(te.min(j, last), zero)
    if mode == "wrap":
        return te.floormod(j + te.const(n * (before // n + 1), i.dtype), te.const(n, i.dtype))
    # reflect about the first and the last element
    j = te.if_then_else(j < zero, -j, j)
    return te.if_then_else(j > last, te.const(2 * (n - 1), i.dtype) - j, j)


def _pad_mode_te(args, attrs, name):
    x = args[0]
    pads, mode = attrs["pads"], attrs["mode"]
    shape = _pad_mode_infer([TensorType(x.shape, x.dtype)], attrs).shape
    return te.compute(shape, lambda *i: x[tuple(
        v if b == 0 and a == 0 else _source(v, b, n, mode)
        for v, (b, a), n in zip(i, pads, x.shape))], name=name)


def _pad_mode_numpy(arrays, attrs):
    mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[attrs["mode"]]
    return contiguous(np.pad(arrays[0], [tuple(p) for p in attrs["pads"]], mode=mode))


register_op("pad_mode", INJECTIVE, (1, 1), _pad_mode_infer, _pad_mode_te, _pad_mode_numpy)


# ---------------------------------------------------------------------------------------------
# bit operations on integers, from arithmetic (the IR has no bitwise operators): a bit is
# (a // 2**k) % 2 with floor division, which reads two's complement bits of negative numbers
# too; the sign bit of a signed type is a < 0 and weighs -2**(bits - 1).
# ---------------------------------------------------------------------------------------------

def _int_infer(op, binary: bool):
    base = binary_infer(op) if binary else same_type

    def infer(types, attrs):
        check_op(all(t.dtype[0] in "iu" for t in types), op,
               f"needs integer operands, got {', '.join(t.dtype for t in types)}")
        return base(types, attrs)
    return infer


def _bit(value, k: int, bits: int, dtype: str):
    if not dtype.startswith("uint") and k == bits - 1:
        return te.if_then_else(value < te.const(0, dtype), te.const(1, dtype),
                               te.const(0, dtype))
    return te.floormod(te.floordiv(value, te.const(1 << k, dtype)), te.const(2, dtype))


def _weight(k: int, bits: int, dtype: str):
    if not dtype.startswith("uint") and k == bits - 1:
        return te.const(-(1 << k), dtype)
    return te.const(1 << k, dtype)


_BITWISE = {"bitwise_and": (lambda p, q: p * q, np.bitwise_and),
            "bitwise_or": (lambda p, q: p + q - p * q, np.bitwise_or),
            "bitwise_xor": (lambda p, q: p + q - te.const(2, p.dtype) * p * q,
                            np.bitwise_xor)}


def _bitwise_te(op):
    def build(args, attrs, name):
        a, b = args
        out = binary_infer(op)([TensorType(a.shape, a.dtype),
                                 TensorType(b.shape, b.dtype)], attrs).shape
        dtype = a.dtype
        bits = int(np.dtype(dtype).itemsize * 8)
        combine = _BITWISE[op][0]

        def value(x, y):
            total = None
            for k in range(bits):
                term = combine(_bit(x, k, bits, dtype), _bit(y, k, bits, dtype)) * \
                    _weight(k, bits, dtype)
                total = term if total is None else total + term
            return total
        return broadcast_compute(a, b, out, value, name)
    return build


for _name, (_, _np_fn) in _BITWISE.items():
    register_op(_name, BROADCAST, (2, 2), _int_infer(_name, True), _bitwise_te(_name),
              lambda arrays, attrs, fn=_np_fn: contiguous(fn(arrays[0], arrays[1])))


def _bitwise_not_te(args, attrs, name):
    x = args[0]
    dtype = x.dtype
    if dtype.startswith("uint"):
        top = te.const(int(np.iinfo(dtype).max), dtype)
        return te.compute(x.shape, lambda *i: top - x[i], name=name)
    return te.compute(x.shape, lambda *i: -x[i] - te.const(1, dtype), name=name)


register_op("bitwise_not", ELEMWISE, (1, 1), _int_infer("bitwise_not", False), _bitwise_not_te,
            lambda arrays, attrs: contiguous(np.invert(arrays[0])))


def _power_of_two(y, bits: int, dtype: str):
    """2**y for 0 <= y < bits, 0 beyond (a shift by the width or more clears every bit)."""
    value = te.const(0, dtype)
    for k in reversed(range(bits)):
        # The sign bit's weight of a signed type is -2**k (the same bits modulo 2**bits).
        weight = _weight(k, bits, dtype)
        value = te.if_then_else(te.equal(y, te.const(k, dtype)), weight, value)
    return value


def _bitshift_te(args, attrs, name):
    a, b = args
    out = binary_infer("bitshift")([TensorType(a.shape, a.dtype),
                                     TensorType(b.shape, b.dtype)], attrs).shape
    dtype = a.dtype
    bits = int(np.dtype(dtype).itemsize * 8)
    left = attrs["direction"] == "LEFT"

    def shift(x, y):
        factor = _power_of_two(y, bits, dtype)
        if left:
            return x * factor  # wraps modulo 2**bits, as a shift drops the high bits
        if dtype.startswith("uint"):
            return te.if_then_else(te.equal(factor, te.const(0, dtype)), te.const(0, dtype),
                                   te.floordiv(x, factor))
        # A signed (arithmetic) shift by the sign bit's place or out of range leaves the
        # sign: -1 for a negative number, 0 otherwise.
        zero = te.const(0, dtype)
        sign = te.if_then_else(x < zero, te.const(-1, dtype), zero)
        inside = te.all(y >= zero, y < te.const(bits - 1, dtype))
        return te.if_then_else(inside, te.floordiv(x, factor), sign)
    return broadcast_compute(a, b, out, shift, name)


def _bitshift_numpy(arrays, attrs):
    a, b = arrays
    bits = a.dtype.itemsize * 8
    inside = (b >= 0) & (b < bits)
    safe = np.where(inside, b, 0).astype(a.dtype)
    if attrs["direction"] == "LEFT":
        out = np.where(inside, np.left_shift(a, safe), 0)
    else:
        out = np.where(inside, np.right_shift(a, safe), np.where(a < 0, -1, 0))
    return contiguous(out.astype(a.dtype))


# ONNX's BitShift: unsigned integers, and signed ones (arithmetic shifts) since opset 25.
register_op("bitshift", BROADCAST, (2, 2), _int_infer("bitshift", True), _bitshift_te,
            _bitshift_numpy)


# ---------------------------------------------------------------------------------------------
# local response normalization (AlexNet, GoogLeNet, ZFNet): each element divided by a power
# of the sum of squares over a window of neighbouring channels
# ---------------------------------------------------------------------------------------------

def _lrn_args(attrs):
    size = int(attrs["size"])
    # The window around channel c: (size - 1) // 2 channels before it, the rest after.
    before = (size - 1) // 2
    return size, before, size - 1 - before, float(attrs.get("alpha", 1e-4)), \
        float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))


def _lrn_infer(types, attrs):
    x = types[0]
    check_op(len(x.shape) >= 3 and x.dtype.startswith("float"), "lrn",
           f"needs a float input of shape (N, C, spatial...), got {x.dtype} {x.shape}")
    check_op(int(attrs.get("size", 0)) >= 1, "lrn", f"size {attrs.get('size')} must be at "
                                                    f"least 1")
    return x


def _lrn_te(args, attrs, name):
    x = args[0]
    size, before, after, alpha, beta, bias = _lrn_args(attrs)
    rest = (0,) * (len(x.shape) - 2)
    padded = pad_nd(x, (0, before) + rest, (0, after) + rest, name=f"{name}_pad")
    r = te.reduce_axis(size, name="rc")

    def window(*i):
        at = (i[0], i[1] + r) + tuple(i[2:])
        return te.sum(padded[at] * padded[at], axis=r)

    total = te.compute(x.shape, window, name=f"{name}_sum")
    scale, shift, power = _c(alpha / size, x.dtype), _c(bias, x.dtype), _c(beta, x.dtype)
    return te.compute(x.shape, lambda *i: x[i] / te.power(total[i] * scale + shift, power),
                      name=name)


def _lrn_numpy(arrays, attrs):
    x = arrays[0]
    size, before, after, alpha, beta, bias = _lrn_args(attrs)
    wide = x.astype(np.float64)
    widths = [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2)
    squares = np.pad(wide * wide, widths)
    channels = x.shape[1]
    total = sum(squares[:, j:j + channels] for j in range(size))
    return cast_result(wide / (bias + alpha / size * total) ** beta, x.dtype)


# attrs: size (channels in the window), alpha, beta, bias as ONNX's LRN.
register_op("lrn", "reduction", (1, 1), _lrn_infer, _lrn_te, _lrn_numpy)
