"""n-D window operators: the 3-D convolution, pooling and transposed convolution of any
spatial rank, with dilations.

Registered into ``operators.OPS`` when ``autotune.graph`` is imported (see its ``__init__``);
each has, as there, a type rule, a te definition and a numpy meaning.

The 2-D operators of ``operators`` stay the form of 1-D and 2-D convolutions and of undilated
2-D pooling (the Winograd and blocked-layout rewrites match them); these cover what they do
not: a volume (N, C, D, H, W), dilated windows, an average's partial ceil-mode windows.  Their
attributes hold one entry per spatial axis; ``pads`` holds every axis' leading pad, then every
axis' trailing pad (ONNX's order).  All are plain te reductions, so the design space tiles them
as it tiles conv2d.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tensor_ir import te
from tensor_ir.ops.utils import pad_nd, reduce_max

from .operators import COMPUTE, REDUCTION, cast_result, check_op, register_op
from .types import TensorType


def _window_sizes(op: str, spatial, attrs, kernel) -> tuple[int, ...]:
    """The output extent of each spatial axis of a window of ``kernel`` under the strides,
    pads and dilations of ``attrs``, checked."""
    rank = len(spatial)
    strides = tuple(attrs["strides"])
    dilations = tuple(attrs.get("dilations", (1,) * rank))
    pads = tuple(attrs["pads"])
    check_op(len(kernel) == len(strides) == len(dilations) == rank and len(pads) == 2 * rank,
             op, f"kernel {tuple(kernel)}, strides {strides}, dilations {dilations} and pads "
                 f"{pads} do not fit {rank} spatial axes")
    check_op(min(kernel) >= 1 and min(strides) >= 1 and min(dilations) >= 1 and
             min(pads) >= 0, op, f"kernel {tuple(kernel)}, strides {strides} and dilations "
                                 f"{dilations} must be positive, pads {pads} not negative")
    out = []
    for axis, (size, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
        span = size + pads[axis] + pads[rank + axis] - d * (k - 1) - 1
        check_op(span >= 0, op, f"axis {axis + 2}: the dilated window {d * (k - 1) + 1} is "
                                f"wider than the padded input {span + d * (k - 1) + 1}")
        out.append(span // s + 1)
    return tuple(out)


def _window_starts(pos, attrs, offsets):
    """Padded-input coordinates of window element ``offsets`` for output position ``pos``."""
    rank = len(pos)
    dilations = attrs.get("dilations", (1,) * rank)
    return tuple(p * s + r * d for p, s, r, d in zip(pos, attrs["strides"], offsets, dilations))


def _numpy_windows(padded: np.ndarray, kernel, attrs, out_spatial):
    """(kernel offset, the strided view of ``padded`` that offset reads for every output)."""
    rank = len(kernel)
    dilations = attrs.get("dilations", (1,) * rank)
    for offset in itertools.product(*(range(k) for k in kernel)):
        view = tuple(slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in
                     zip(offset, dilations, out_spatial, attrs["strides"]))
        yield offset, padded[(slice(None), slice(None)) + view]


def _numpy_padded(x: np.ndarray, pads, value: float = 0.0) -> np.ndarray:
    rank = x.ndim - 2
    widths = [(0, 0), (0, 0)] + [(pads[k], pads[rank + k]) for k in range(rank)]
    return np.pad(x.astype(np.float64), widths, constant_values=value)


def _conv3d_infer(types, attrs):
    op = "conv3d"
    data, weight = types
    check_op(len(data.shape) == 5 and len(weight.shape) == 5, op,
             f"data and weight must be rank 5 (NCDHW, OIDHW), got {data.shape} and "
             f"{weight.shape}")
    check_op(data.dtype == weight.dtype, op, f"dtypes differ: {data.dtype} vs {weight.dtype}")
    (n, c), (k, cg) = data.shape[:2], weight.shape[:2]
    groups = attrs.get("groups", 1)
    check_op(groups >= 1 and c % groups == 0 and cg * groups == c and k % groups == 0, op,
             f"weight {weight.shape} does not match {c} input channels in {groups} group(s)")
    return TensorType((n, k) + _window_sizes(op, data.shape[2:], attrs, weight.shape[2:]),
                      data.dtype)


def _conv3d_te(args, attrs, name):
    data, weight = args
    out_shape = _conv3d_infer([TensorType(data.shape, data.dtype),
                               TensorType(weight.shape, weight.dtype)], attrs).shape
    pads = tuple(attrs["pads"])
    padded = pad_nd(data, (0, 0) + pads[:3], (0, 0) + pads[3:], name="pad_data")
    groups = attrs.get("groups", 1)
    k_out, c_group = weight.shape[:2]
    k_per_group = k_out // groups
    rc = te.reduce_axis(c_group, name="rc")
    window = [te.reduce_axis(e, name=f"r{a}") for a, e in zip("zyx", weight.shape[2:])]

    def fcompute(*index):
        nn, ff, pos = index[0], index[1], index[2:]
        channel = rc if groups == 1 else (ff // k_per_group) * c_group + rc
        at = _window_starts(pos, attrs, window)
        return te.sum(padded[(nn, channel) + at] * weight[(ff, rc) + tuple(window)],
                      axis=[rc] + window)

    return te.compute(out_shape, fcompute, name=name)


def _conv3d_numpy(arrays, attrs):
    data, weight = arrays
    out_shape = _conv3d_infer([TensorType.of(data), TensorType.of(weight)], attrs).shape
    padded = _numpy_padded(data, attrs["pads"])
    w = weight.astype(np.float64)
    groups = attrs.get("groups", 1)
    k_group, c_group = weight.shape[0] // groups, weight.shape[1]
    out = np.zeros(out_shape)
    for g in range(groups):
        part = padded[:, g * c_group:(g + 1) * c_group]
        wg = w[g * k_group:(g + 1) * k_group]
        for offset, view in _numpy_windows(part, weight.shape[2:], attrs, out_shape[2:]):
            out[:, g * k_group:(g + 1) * k_group] += np.einsum(
                "ncdhw,kc->nkdhw", view, wg[(slice(None), slice(None)) + offset])
    return cast_result(out, data.dtype)


# attrs: strides (3), pads (6: front, top, left, back, bottom, right), dilations (3), groups.
register_op("conv3d", COMPUTE, (2, 2), _conv3d_infer, _conv3d_te, _conv3d_numpy)


def _pool_nd_infer(op):
    def infer(types, attrs):
        x = types[0]
        check_op(len(x.shape) >= 3, op, f"data must be (N, C, spatial...), got {x.shape}")
        kernel = tuple(attrs["kernel"])
        rank = len(x.shape) - 2
        pads = tuple(attrs["pads"])
        check_op(len(pads) == 2 * rank and all(
            max(pads[a], pads[rank + a]) < k for a, k in enumerate(kernel)), op,
            f"pads {pads} must be smaller than the kernel {kernel} (a window of padding only)")
        return TensorType(x.shape[:2] + _window_sizes(op, x.shape[2:], attrs, kernel), x.dtype)
    return infer


def _max_pool_nd_te(args, attrs, name):
    x = args[0]
    out_shape = _pool_nd_infer("max_pool_nd")([TensorType(x.shape, x.dtype)], attrs).shape
    rank = len(x.shape) - 2
    pads = tuple(attrs["pads"])
    # The padding is the lowest value of the type, so it never wins.
    padded = pad_nd(x, (0, 0) + pads[:rank], (0, 0) + pads[rank:],
                    value=te.min_value(x.dtype), name="pad_data")
    window = [te.reduce_axis(k, name=f"r{a}") for a, k in enumerate(attrs["kernel"])]

    def fcompute(*index):
        at = _window_starts(index[2:], attrs, window)
        return reduce_max(padded[index[:2] + at], axis=window)

    return te.compute(out_shape, fcompute, name=name)


def _max_pool_nd_numpy(arrays, attrs):
    x = arrays[0]
    out_shape = _pool_nd_infer("max_pool_nd")([TensorType.of(x)], attrs).shape
    padded = _numpy_padded(x, attrs["pads"], -np.inf)
    out = np.full(out_shape, -np.inf)
    for _, view in _numpy_windows(padded, attrs["kernel"], attrs, out_shape[2:]):
        out = np.maximum(out, view)
    return cast_result(out, x.dtype)


def _counted_range(attrs, spatial):
    """Per axis, the input range [lo, hi) whose elements an average counts: the input alone,
    or with count_include_pad the input and its declared pads (not the ``ceil_pads`` that
    ceil_mode adds at the end, which no window counts)."""
    rank = len(spatial)
    pads, extra = attrs["pads"], attrs.get("ceil_pads", (0,) * rank)
    if not attrs.get("count_include_pad", False):
        return [(0, size) for size in spatial]
    return [(-pads[a], size + pads[rank + a] - extra[a]) for a, size in enumerate(spatial)]


def _avg_pool_nd_te(args, attrs, name):
    x = args[0]
    out_shape = _pool_nd_infer("avg_pool_nd")([TensorType(x.shape, x.dtype)], attrs).shape
    rank = len(x.shape) - 2
    pads, kernel = tuple(attrs["pads"]), tuple(attrs["kernel"])
    dilations = tuple(attrs.get("dilations", (1,) * rank))
    padded = pad_nd(x, (0, 0) + pads[:rank], (0, 0) + pads[rank:], name="pad_data")
    window = [te.reduce_axis(k, name=f"r{a}") for a, k in enumerate(kernel)]
    total = te.compute(out_shape, lambda *i: te.sum(
        padded[i[:2] + _window_starts(i[2:], attrs, window)], axis=window), name=f"{name}_sum")
    ranges = _counted_range(attrs, x.shape[2:])
    whole = all(lo <= -pads[a] and hi >= x.shape[2 + a] + pads[rank + a]
                for a, (lo, hi) in enumerate(ranges))
    if whole:
        size = te.const(float(math.prod(kernel)), x.dtype)
        return te.compute(out_shape, lambda *i: total[i] / size, name=name)

    def favg(*index):
        # Window elements j (0 <= j < k) at input coordinate start + j * d inside [lo, hi):
        # j from ceil((lo - start) / d) to floor((hi - 1 - start) / d), clipped to the window.
        count = None
        for a, p in enumerate(index[2:]):
            start = p * attrs["strides"][a] - pads[a]
            (lo, hi), d, k = ranges[a], dilations[a], kernel[a]
            if d == 1:
                first, last = te.max(lo - start, 0), te.min(hi - start, k)
            else:
                first = te.max(-te.floordiv(start - lo, d), 0)
                last = te.min(te.floordiv(hi - 1 - start, d) + 1, k)
            axis = last - first
            count = axis if count is None else count * axis
        return total[index] / te.cast(x.dtype, count)

    return te.compute(out_shape, favg, name=name)


def _avg_pool_nd_numpy(arrays, attrs):
    x = arrays[0]
    out_shape = _pool_nd_infer("avg_pool_nd")([TensorType.of(x)], attrs).shape
    pads = attrs["pads"]
    padded = _numpy_padded(x, pads)
    # Ones where an element counts, over the padded extent (pads of the counted range too).
    counted = np.zeros((1, 1) + padded.shape[2:])
    spans = tuple(slice(lo + pads[a], hi + pads[a])
                  for a, (lo, hi) in enumerate(_counted_range(attrs, x.shape[2:])))
    counted[(slice(None), slice(None)) + spans] = 1.0
    total, count = np.zeros(out_shape), np.zeros((1, 1) + out_shape[2:])
    for (_, view), (_, ones) in zip(_numpy_windows(padded, attrs["kernel"], attrs, out_shape[2:]),
                                    _numpy_windows(counted, attrs["kernel"], attrs,
                                                   out_shape[2:])):
        total += view
        count += ones
    return cast_result(total / count, x.dtype)


# attrs: kernel, strides, pads (leading pads, then trailing), dilations, one entry per spatial
# axis; avg_pool_nd also count_include_pad and ceil_pads (the trailing pads ceil_mode added).
register_op("max_pool_nd", REDUCTION, (1, 1), _pool_nd_infer("max_pool_nd"), _max_pool_nd_te,
            _max_pool_nd_numpy)
register_op("avg_pool_nd", REDUCTION, (1, 1), _pool_nd_infer("avg_pool_nd"), _avg_pool_nd_te,
            _avg_pool_nd_numpy)


def _conv_transpose_nd_infer(types, attrs):
    op = "conv_transpose_nd"
    data, weight = types
    rank = len(data.shape) - 2
    check_op(rank >= 1 and len(weight.shape) == rank + 2, op,
             f"data and weight must be (N, C, spatial...) and (C, K, kernel...) of one rank, "
             f"got {data.shape} and {weight.shape}")
    check_op(data.dtype == weight.dtype, op, f"dtypes differ: {data.dtype} vs {weight.dtype}")
    check_op(weight.shape[0] == data.shape[1], op,
             f"weight {weight.shape} does not match {data.shape[1]} input channels")
    strides, pads = tuple(attrs["strides"]), tuple(attrs["pads"])
    dilations = tuple(attrs.get("dilations", (1,) * rank))
    extra = tuple(attrs.get("output_padding", (0,) * rank))
    check_op(len(strides) == len(dilations) == len(extra) == rank and len(pads) == 2 * rank,
             op, f"strides {strides}, dilations {dilations}, output_padding {extra} and pads "
                 f"{pads} do not fit {rank} spatial axes")
    out = tuple((i - 1) * s + (k - 1) * d + 1 + e - pads[a] - pads[rank + a]
                for a, (i, k, s, d, e) in enumerate(zip(data.shape[2:], weight.shape[2:],
                                                         strides, dilations, extra)))
    check_op(min(out) > 0, op, f"output size {out} is not positive")
    return TensorType((data.shape[0], weight.shape[1]) + out, data.dtype)


def _conv_transpose_nd_te(args, attrs, name):
    """As conv2d_transpose: the input spread out by the strides and padded (one guarded
    stage), then a convolution with the flipped kernel, dilated as the operator's."""
    data, weight = args
    out_shape = _conv_transpose_nd_infer([TensorType(data.shape, data.dtype),
                                          TensorType(weight.shape, weight.dtype)], attrs).shape
    rank = len(data.shape) - 2
    kernel, strides = weight.shape[2:], attrs["strides"]
    dilations = attrs.get("dilations", (1,) * rank)
    # Where the spread input begins inside the padded stage: (k - 1) * d - pad, negative when
    # the padding crops more than the kernel's reach (the guard handles both).
    tops = [(k - 1) * d - attrs["pads"][a] for a, (k, d) in enumerate(zip(kernel, dilations))]
    spread = [(i - 1) * s + 1 for i, s in zip(data.shape[2:], strides)]
    zero = te.const(0.0, data.dtype)

    def fpad(*index):
        conds, source = [], []
        for a, u in enumerate(index[2:]):
            t = u - tops[a] if tops[a] else u
            conds += [t >= 0, t < spread[a]]
            if strides[a] > 1:
                conds.append(te.equal(te.floormod(t, strides[a]), 0))
                t = te.floordiv(t, strides[a])
            source.append(t)
        return te.if_then_else(te.all(*conds), data[index[:2] + tuple(source)], zero)

    padded_shape = data.shape[:2] + tuple(o + (k - 1) * d for o, k, d in
                                          zip(out_shape[2:], kernel, dilations))
    padded = te.compute(padded_shape, fpad, name="data_dilate_pad")
    rc = te.reduce_axis(data.shape[1], name="rc")
    window = [te.reduce_axis(k, name=f"r{a}") for a, k in enumerate(kernel)]

    def fcompute(*index):
        at = tuple(o + r * d for o, r, d in zip(index[2:], window, dilations))
        flipped = tuple(k - 1 - r for k, r in zip(kernel, window))
        return te.sum(padded[(index[0], rc) + at] * weight[(rc, index[1]) + flipped],
                      axis=[rc] + window)

    return te.compute(out_shape, fcompute, name=name)


def _conv_transpose_nd_numpy(arrays, attrs):
    data, weight = arrays
    out_shape = _conv_transpose_nd_infer([TensorType.of(data), TensorType.of(weight)],
                                         attrs).shape
    rank = data.ndim - 2
    strides, pads = attrs["strides"], attrs["pads"]
    dilations = attrs.get("dilations", (1,) * rank)
    # Scatter each kernel offset's contribution into the uncropped output, then crop.
    full = np.zeros(out_shape[:2] + tuple(
        max((i - 1) * s + (k - 1) * d + 1, pads[a] + o) for a, (i, k, s, d, o) in enumerate(
            zip(data.shape[2:], weight.shape[2:], strides, dilations, out_shape[2:]))))
    x, w = data.astype(np.float64), weight.astype(np.float64)
    for offset in itertools.product(*(range(k) for k in weight.shape[2:])):
        view = tuple(slice(j * d, j * d + (i - 1) * s + 1, s) for j, d, i, s in
                     zip(offset, dilations, data.shape[2:], strides))
        full[(slice(None), slice(None)) + view] += np.einsum(
            "nc...,ck->nk...", x, w[(slice(None), slice(None)) + offset])
    crop = tuple(slice(pads[a], pads[a] + o) for a, o in enumerate(out_shape[2:]))
    return cast_result(full[(slice(None), slice(None)) + crop], data.dtype)


# attrs: strides, pads (leading, then trailing), dilations, output_padding, one entry per
# spatial axis; one group (the importer splits grouped ones into channel slices).
register_op("conv_transpose_nd", COMPUTE, (2, 2), _conv_transpose_nd_infer,
            _conv_transpose_nd_te, _conv_transpose_nd_numpy)
