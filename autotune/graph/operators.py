"""The operators a model graph may hold: shape inference, te-level definition and numpy meaning.

Every graph operator is an :class:`OpDef`:

* ``infer(types, attrs) -> TensorType``: the output type from the input types (shape errors
  raise :class:`GraphError` naming the operator);
* ``te(args, attrs, name) -> te.Tensor``: the operator as te stages (from ``tensor_ir.ops``
  where the library has it), so that fusion can compose a group of operators into one PrimFunc;
  binary elementwise operators also take a Python number for a scalar constant operand;
* ``numpy(arrays, attrs) -> np.ndarray``: the same result with numpy, used by constant folding
  and as the reference in tests;
* ``kind``: the fusion pattern, as TVM's ``OpPatternKind``:

  ``elemwise``   one output element from the same input element (relu, cast)
  ``broadcast``  elementwise with numpy broadcasting (add with a bias)
  ``injective``  each output element from some input element (transpose, pad, concat, slice)
  ``reduction``  reduces along axes, possibly in several stages (softmax, layer_norm, pools)
  ``compute``    compute-heavy reductions with data reuse (conv2d, matmul)
  ``view``       no data movement on a contiguous buffer (reshape, identity): the executor
                 makes a numpy view, no kernel.

Attributes are plain Python values (ints, floats, tuples) kept normalised by the frontends
(e.g. conv ``pads`` are always ``(top, left, bottom, right)``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tensor_ir import ops, te
from tensor_ir.ops.elemwise import erf_numpy
from tensor_ir.ops.utils import broadcast_shape

from .errors import GraphError
from .types import TensorType, contiguous

__all__ = ["OpDef", "OPS", "get_op", "ELEMWISE", "BROADCAST", "INJECTIVE", "REDUCTION",
           "COMPUTE", "VIEW"]

ELEMWISE, BROADCAST, INJECTIVE, REDUCTION, COMPUTE, VIEW = (
    "elemwise", "broadcast", "injective", "reduction", "compute", "view")


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    arity: tuple[int, int]  # (min, max) number of inputs
    infer: Callable
    te: Callable
    numpy: Callable
    scalar_operands: bool = False  # a size-1 constant operand may be inlined as a number


OPS: dict[str, OpDef] = {}


def get_op(name: str) -> OpDef:
    op = OPS.get(name)
    if op is None:
        raise GraphError(f"unknown graph operator {name!r}; known: {', '.join(sorted(OPS))}")
    return op


def register_op(name, kind, arity, infer, te_fn, np_fn, scalar_operands=False) -> None:
    OPS[name] = OpDef(name, kind, arity, infer, te_fn, np_fn, scalar_operands)


def check_op(cond: bool, op: str, message: str) -> None:
    if not cond:
        raise GraphError(f"{op}: {message}")


def cast_result(result, dtype: str) -> np.ndarray:
    return contiguous(np.asarray(result).astype(dtype, copy=False))


# ---------------------------------------------------------------------------------------------
# elementwise and broadcast
# ---------------------------------------------------------------------------------------------

def binary_infer(op):
    def infer(types, attrs):
        a, b = types
        check_op(a.dtype == b.dtype, op, f"operand dtypes differ: {a.dtype} vs {b.dtype}")
        if 0 in a.shape or 0 in b.shape:
            # An extent 0 would "broadcast" against 1 to 1 in the library's rule, not to 0:
            # numpy's rule.  (Only constants are empty: the frontends fold them.)
            try:
                return TensorType(tuple(np.broadcast_shapes(a.shape, b.shape)), a.dtype)
            except ValueError:
                raise GraphError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast"
                                 ) from None
        try:
            shape = broadcast_shape(a.shape, b.shape, op)
        except Exception as err:  # TEError from the library's check
            raise GraphError(str(err)) from None
        return TensorType(shape, a.dtype)
    return infer


def _binary_te(combine, library=None):
    """A broadcast binary stage; either side may be a Python number (an inlined scalar)."""
    def build(args, attrs, name):
        a, b = args
        if library is not None:
            return library(a, b, name=name)
        if not isinstance(a, te.Tensor) or not isinstance(b, te.Tensor):
            tensor = a if isinstance(a, te.Tensor) else b
            scalar = te.const(float(b if tensor is a else a), tensor.dtype)
            if tensor is a:
                return te.compute(a.shape, lambda *i: combine(a[i], scalar), name=name)
            return te.compute(b.shape, lambda *i: combine(scalar, b[i]), name=name)
        return broadcast_compute(a, b, broadcast_shape(a.shape, b.shape, name), combine, name)
    return build


def broadcast_compute(a: te.Tensor, b: te.Tensor, shape: tuple, combine, name: str):
    """``combine(a, b)`` element by element over ``shape``, the operands broadcast to it."""
    return te.compute(shape, lambda *i: combine(a[broadcast_index(a, shape, i)],
                                                b[broadcast_index(b, shape, i)]), name=name)


def broadcast_index(tensor: te.Tensor, shape: tuple, idx: tuple) -> tuple:
    """Indices into ``tensor`` for output element ``idx`` under numpy broadcasting.  Unlike
    the library's broadcast_index, an axis of extent 1 in both is indexed by the loop
    variable, not by 0: the consumer of a conv2d output of batch 1 then reads it with the
    same indices it writes, which is what lets the design space fuse it into the conv's
    tiles as an elementwise consumer."""
    offset = len(shape) - tensor.ndim
    return tuple(0 if extent == 1 and shape[offset + d] != 1 else idx[offset + d]
                 for d, extent in enumerate(tensor.shape))


def _binary_numpy(fn):
    def run(arrays, attrs):
        a, b = arrays
        return cast_result(fn(a.astype(np.float64) if a.dtype.kind == "f" else a,
                        b.astype(np.float64) if b.dtype.kind == "f" else b), a.dtype)
    return run


def _power(x, y):
    return te.power(x, y)


for _name, _lib, _comb, _np in (
        ("add", None, lambda x, y: x + y, np.add),
        ("subtract", None, lambda x, y: x - y, np.subtract),
        ("multiply", None, lambda x, y: x * y, np.multiply),
        ("divide", None, lambda x, y: x / y, np.divide),
        ("power", None, _power, np.power),
        ("maximum", None, lambda x, y: te.max(x, y), np.maximum),
        ("minimum", None, lambda x, y: te.min(x, y), np.minimum)):
    register_op(_name, BROADCAST, (2, 2), binary_infer(_name), _binary_te(_comb, _lib),
              _binary_numpy(_np), scalar_operands=True)


def same_type(types, attrs):
    return types[0]


def _unary(name, te_fn, np_fn) -> None:
    register_op(name, ELEMWISE, (1, 1), same_type,
              lambda args, attrs, n: te_fn(args[0], n),
              lambda arrays, attrs: cast_result(np_fn(arrays[0].astype(np.float64)),
                                          arrays[0].dtype))


def _stage(fn):
    return lambda x, name: te.compute(x.shape, lambda *i: fn(x[i]), name=name)


def _np_sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_unary("relu", lambda x, n: ops.te_relu(x, name=n), lambda x: np.maximum(x, 0))
_unary("gelu", lambda x, n: ops.te_gelu(x, name=n),
       lambda x: 0.5 * x * (1.0 + erf_numpy(x / math.sqrt(2.0))))
_unary("erf", _stage(te.erf), erf_numpy)
_unary("sigmoid", lambda x, n: ops.te_sigmoid(x, name=n), _np_sigmoid)
_unary("tanh", lambda x, n: ops.te_tanh(x, name=n), np.tanh)
_unary("sqrt", _stage(te.sqrt), np.sqrt)
_unary("exp", _stage(te.exp), np.exp)
_unary("log", _stage(te.log), np.log)
_unary("abs", _stage(te.abs), np.abs)
_unary("negative", _stage(lambda v: -v), np.negative)


def _clip_te(args, attrs, name):
    x = args[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is not None and hi is not None and lo <= hi:
        return ops.te_clip(x, lo, hi, name=name)

    def fn(v):
        if lo is not None:
            v = te.max(v, te.const(lo, x.dtype))
        if hi is not None:
            v = te.min(v, te.const(hi, x.dtype))
        return v
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name)


def _np_clip(x, lo, hi):
    # max then min, as ONNX orders them: a min above the max gives the max everywhere.
    if lo is not None:
        x = np.maximum(x, lo)
    return x if hi is None else np.minimum(x, hi)


register_op("clip", ELEMWISE, (1, 1), same_type, _clip_te,
            lambda arrays, attrs: cast_result(
                _np_clip(arrays[0], attrs.get("min"), attrs.get("max")), arrays[0].dtype))


def _cast_infer(types, attrs):
    return TensorType(types[0].shape, attrs["dtype"])


def _cast_te(args, attrs, name):
    x = args[0]
    return te.compute(x.shape, lambda *i: te.cast(attrs["dtype"], x[i]), name=name)


register_op("cast", ELEMWISE, (1, 1), _cast_infer, _cast_te,
            lambda arrays, attrs: cast_result(arrays[0], attrs["dtype"]))


def _activation(name, te_fn, ref_fn, *attr_names):
    """A float unary operator whose attributes (alpha, beta) go to the library functions."""
    def infer(types, attrs):
        check_op(types[0].dtype.startswith("float"), name,
               f"needs a float input, got {types[0].dtype}")
        return types[0]

    def params(attrs):
        return {k: attrs[k] for k in attr_names if k in attrs}

    register_op(name, ELEMWISE, (1, 1), infer,
              lambda args, attrs, n: te_fn(args[0], **params(attrs), name=n),
              lambda arrays, attrs: ref_fn(arrays[0], **params(attrs)))


_activation("leaky_relu", ops.te_leaky_relu, ops.ref_leaky_relu, "alpha")
_activation("elu", ops.te_elu, ops.ref_elu, "alpha")
_activation("softplus", ops.te_softplus, ops.ref_softplus)
_activation("mish", ops.te_mish, ops.ref_mish)
_activation("hard_sigmoid", ops.te_hard_sigmoid, ops.ref_hard_sigmoid, "alpha", "beta")
_activation("hard_swish", ops.te_hard_swish, ops.ref_hard_swish)


def _prelu_infer(types, attrs):
    out = binary_infer("prelu")(types, attrs)
    check_op(out.shape == types[0].shape, "prelu", f"slope of shape {types[1].shape} does not "
           f"broadcast to the data's shape {types[0].shape}")
    return out


register_op("prelu", BROADCAST, (2, 2), _prelu_infer,
            lambda args, attrs, name: ops.te_prelu(args[0], args[1], name=name),
            lambda arrays, attrs: ops.ref_prelu(arrays[0], arrays[1]))


def _bool_result(infer):
    def run(types, attrs):
        return TensorType(infer(types, attrs).shape, "bool")
    return run


for _name in ops.COMPARISONS:
    register_op(_name, BROADCAST, (2, 2), _bool_result(binary_infer(_name)),
              lambda args, attrs, name, op=_name: ops.te_compare(op, args[0], args[1],
                                                                 name=name),
              lambda arrays, attrs, op=_name: ops.ref_compare(op, arrays[0], arrays[1]))


def _logic_infer(op):
    def infer(types, attrs):
        check_op(all(t.dtype == "bool" for t in types), op,
               f"needs bool operands, got {', '.join(t.dtype for t in types)}")
        return binary_infer(op)(types, attrs) if len(types) == 2 else types[0]
    return infer


for _name in ops.LOGIC:
    register_op(_name, BROADCAST, (2, 2), _logic_infer(_name),
              lambda args, attrs, name, op=_name: ops.te_logical(op, args[0], args[1],
                                                                 name=name),
              lambda arrays, attrs, op=_name: ops.ref_logical(op, arrays[0], arrays[1]))
register_op("logical_not", ELEMWISE, (1, 1), _logic_infer("logical_not"),
            lambda args, attrs, name: ops.te_logical_not(args[0], name=name),
            lambda arrays, attrs: ops.ref_logical_not(arrays[0]))


def _where_infer(types, attrs):
    cond, a, b = types
    check_op(cond.dtype == "bool", "where", f"the condition must be bool, got {cond.dtype}")
    check_op(a.dtype == b.dtype, "where", f"value dtypes differ: {a.dtype} vs {b.dtype}")
    check_op(all(0 not in t.shape for t in types), "where", "empty operands are not supported")
    try:
        shape = broadcast_shape(broadcast_shape(cond.shape, a.shape, "where"), b.shape,
                                "where")
    except Exception as err:  # TEError from the library's check
        raise GraphError(str(err)) from None
    return TensorType(shape, a.dtype)


register_op("where", BROADCAST, (3, 3), _where_infer,
            lambda args, attrs, name: ops.te_where(*args, name=name),
            lambda arrays, attrs: contiguous(ops.ref_where(*arrays)))


# ---------------------------------------------------------------------------------------------
# compute-heavy: conv2d, matmul
# ---------------------------------------------------------------------------------------------

def _conv_infer(types, attrs):
    op = "conv2d"
    data, weight = types
    check_op(len(data.shape) == 4 and len(weight.shape) == 4, op,
           f"data and weight must be rank 4 (NCHW, OIHW), got {data.shape} and {weight.shape}")
    n, c, h, w = data.shape
    k, cg, r, s = weight.shape
    groups = attrs.get("groups", 1)
    check_op(c % groups == 0 and cg * groups == c, op,
           f"weight {weight.shape} does not match {c} input channels in {groups} group(s)")
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    oh = (h + pt + pb - dh * (r - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (s - 1) - 1) // sw + 1
    check_op(oh > 0 and ow > 0, op, f"output size {(oh, ow)} is not positive")
    return TensorType((n, k, oh, ow), data.dtype)


def _conv_te(args, attrs, name):
    return ops.te_conv2d_nchw(args[0], args[1], attrs["strides"], attrs["pads"],
                              attrs["dilations"], attrs.get("groups", 1), name=name)


def _conv_numpy(arrays, attrs):
    return ops.ref_conv2d_nchw(arrays[0], arrays[1], attrs["strides"], attrs["pads"],
                               attrs["dilations"], attrs.get("groups", 1))


register_op("conv2d", COMPUTE, (2, 2), _conv_infer, _conv_te, _conv_numpy)


def _conv_transpose_infer(types, attrs):
    op = "conv2d_transpose"
    data, weight = types
    check_op(len(data.shape) == 4 and len(weight.shape) == 4, op,
           f"data and weight must be rank 4 (NCHW, CKHW), got {data.shape} and {weight.shape}")
    check_op(data.dtype == weight.dtype, op, f"dtypes differ: {data.dtype} vs {weight.dtype}")
    n, c, h, w = data.shape
    cw, k, r, s = weight.shape
    check_op(cw == c, op, f"weight {weight.shape} does not match {c} input channels")
    (sh, sw), (oph, opw) = attrs["strides"], attrs["output_padding"]
    pt, pl, pb, pr = attrs["pads"]
    oh = (h - 1) * sh - pt - pb + r + oph
    ow = (w - 1) * sw - pl - pr + s + opw
    check_op(oh > 0 and ow > 0, op, f"output size {(oh, ow)} is not positive")
    return TensorType((n, k, oh, ow), data.dtype)


register_op("conv2d_transpose", COMPUTE, (2, 2), _conv_transpose_infer,
            lambda args, attrs, name: ops.te_conv2d_transpose_nchw(
                args[0], args[1], attrs["strides"], attrs["pads"], attrs["output_padding"],
                name=name),
            lambda arrays, attrs: ops.ref_conv2d_transpose_nchw(
                arrays[0], arrays[1], attrs["strides"], attrs["pads"], attrs["output_padding"]))


def _matmul_dims(types, attrs):
    op = "matmul"
    a, b = types
    check_op(len(a.shape) >= 2 and len(b.shape) >= 2, op,
           f"operands must have rank >= 2, got {a.shape} and {b.shape}")
    check_op(a.dtype == b.dtype, op, f"operand dtypes differ: {a.dtype} vs {b.dtype}")
    m, ka = a.shape[-2:]
    if attrs.get("transpose_b", False):
        n, kb = b.shape[-2:]
    else:
        kb, n = b.shape[-2:]
    check_op(ka == kb, op, f"reduction extents differ: {a.shape} @ {b.shape} "
           f"(transpose_b={attrs.get('transpose_b', False)})")
    try:
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2], op)
    except Exception as err:
        raise GraphError(str(err)) from None
    return batch, m, n, ka


def _matmul_infer(types, attrs):
    batch, m, n, _ = _matmul_dims(types, attrs)
    return TensorType(tuple(batch) + (m, n), types[0].dtype)


def _matmul_te(args, attrs, name):
    """out[..., i, j] = sum_k a[..., i, k] * b[..., k, j] (b[..., j, k] with transpose_b), the
    batch axes broadcast as in numpy.matmul."""
    a, b = args
    batch, m, n, kext = _matmul_dims([TensorType(a.shape, a.dtype),
                                      TensorType(b.shape, b.dtype)], attrs)
    trans_b = attrs.get("transpose_b", False)
    k = te.reduce_axis(kext, name="k")
    nb = len(batch)

    def batch_index(t, idx):
        lead = t.ndim - 2
        offset = nb - lead
        return tuple(0 if t.shape[d] == 1 else idx[offset + d] for d in range(lead))

    def fcompute(*idx):
        head, i, j = idx[:nb], idx[nb], idx[nb + 1]
        lhs = a[batch_index(a, head) + (i, k)]
        rhs = b[batch_index(b, head) + ((j, k) if trans_b else (k, j))]
        return te.sum(lhs * rhs, axis=k)

    return te.compute(tuple(batch) + (m, n), fcompute, name=name)


def _matmul_numpy(arrays, attrs):
    a, b = arrays
    if attrs.get("transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    return cast_result(np.matmul(a.astype(np.float64), b.astype(np.float64)), a.dtype)


register_op("matmul", COMPUTE, (2, 2), _matmul_infer, _matmul_te, _matmul_numpy)


# ---------------------------------------------------------------------------------------------
# reductions: pools, softmax, norms, reduce_*
# ---------------------------------------------------------------------------------------------

def _pool_infer(types, attrs):
    x = types[0]
    check_op(len(x.shape) == 4, "pool2d", f"data must be NCHW, got {x.shape}")
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w + pl + pr - kw) // sw + 1
    check_op(oh > 0 and ow > 0, "pool2d", f"output size {(oh, ow)} is not positive")
    return TensorType((n, c, oh, ow), x.dtype)


def _max_pool(op: str, infer) -> None:
    """Register a max pooling: the library's ``te_<op>`` and ``ref_<op>``."""
    te_fn, ref_fn = getattr(ops, f"te_{op}"), getattr(ops, f"ref_{op}")
    register_op(op, REDUCTION, (1, 1), infer,
              lambda args, attrs, name: te_fn(args[0], attrs["kernel"], attrs["strides"],
                                              attrs["pads"], name=name),
              lambda arrays, attrs: ref_fn(arrays[0], attrs["kernel"], attrs["strides"],
                                           attrs["pads"]))


_max_pool("max_pool2d", _pool_infer)
register_op("avg_pool2d", REDUCTION, (1, 1), _pool_infer,
            lambda args, attrs, name: ops.te_avg_pool2d(
                args[0], attrs["kernel"], attrs["strides"], attrs["pads"],
                attrs.get("count_include_pad", False), name=name),
            lambda arrays, attrs: ops.ref_avg_pool2d(
                arrays[0], attrs["kernel"], attrs["strides"], attrs["pads"],
                attrs.get("count_include_pad", False)))


def _pool_nchwc_infer(types, attrs):
    x = types[0]
    check_op(len(x.shape) == 5, "max_pool2d_nchwc", f"data must be NCHW[b]c, got {x.shape}")
    n, cb, h, w, b = x.shape
    _, _, oh, ow = _pool_infer([TensorType((n, cb * b, h, w), x.dtype)], attrs).shape
    return TensorType((n, cb, oh, ow, b), x.dtype)


# In the blocked channel layout (``blocked_layout`` puts it in place of a max_pool2d whose
# input is blocked).
_max_pool("max_pool2d_nchwc", _pool_nchwc_infer)


def _gap_infer(types, attrs):
    x = types[0]
    check_op(len(x.shape) == 4, "global_avg_pool2d", f"data must be NCHW, got {x.shape}")
    return TensorType(x.shape[:2] + (1, 1), x.dtype)


register_op("global_avg_pool2d", REDUCTION, (1, 1), _gap_infer,
            lambda args, attrs, name: ops.te_global_avg_pool2d(args[0], name=name),
            lambda arrays, attrs: ops.ref_global_avg_pool2d(arrays[0]))


def _axis(attrs, ndim, op, key="axis"):
    axis = attrs.get(key, -1)
    check_op(-ndim <= axis < ndim, op, f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def _softmax_infer(types, attrs):
    _axis(attrs, len(types[0].shape), "softmax")
    return types[0]


register_op("softmax", REDUCTION, (1, 1), _softmax_infer,
            lambda args, attrs, name: ops.te_softmax(args[0], attrs.get("axis", -1), name=name),
            lambda arrays, attrs: ops.ref_softmax(arrays[0], attrs.get("axis", -1)))


def _norm_axes(attrs, ndim):
    axis = _axis(attrs, ndim, "layer_norm")
    return tuple(range(axis, ndim))


def _layer_norm_infer(types, attrs):
    x = types[0]
    axes = _norm_axes(attrs, len(x.shape))
    norm_shape = tuple(x.shape[a] for a in axes)
    for t in types[1:]:
        check_op(t.shape == norm_shape, "layer_norm", f"scale/bias must have shape {norm_shape}, "
               f"got {t.shape}")
    return x


def _layer_norm_te(args, attrs, name):
    x = args[0]
    gamma = args[1] if len(args) > 1 else None
    beta = args[2] if len(args) > 2 else None
    axes = _norm_axes(attrs, x.ndim)
    return ops.te_layer_norm(x, gamma, beta, axes, attrs.get("epsilon", 1e-5), name=name)


def _layer_norm_numpy(arrays, attrs):
    x = arrays[0]
    return ops.ref_layer_norm(x, *arrays[1:3], axis=_norm_axes(attrs, x.ndim),
                              epsilon=attrs.get("epsilon", 1e-5))


register_op("layer_norm", REDUCTION, (1, 3), _layer_norm_infer, _layer_norm_te,
            _layer_norm_numpy)


def _batch_norm_infer(types, attrs):
    x = types[0]
    check_op(len(x.shape) >= 2, "batch_norm", f"data must have rank >= 2, got {x.shape}")
    for t in types[1:]:
        check_op(t.shape == (x.shape[1],), "batch_norm",
               f"parameters must have shape ({x.shape[1]},), got {t.shape}")
    return x


# Inputs in ONNX order: data, scale (gamma), bias (beta), mean, var.
register_op("batch_norm", BROADCAST, (5, 5), _batch_norm_infer,
            lambda args, attrs, name: ops.te_batch_norm(args[0], args[3], args[4], args[1],
                                                      args[2], 1, attrs.get("epsilon", 1e-5),
                                                      name=name),
            lambda arrays, attrs: ops.ref_batch_norm(arrays[0], arrays[3], arrays[4], arrays[1],
                                                   arrays[2], 1, attrs.get("epsilon", 1e-5)))


def _reduce_axes(attrs, ndim, op):
    axes = attrs.get("axes")
    if axes is None:
        return tuple(range(ndim))
    for a in axes:
        check_op(-ndim <= a < ndim, op, f"axis {a} is out of range for rank {ndim}")
    return tuple(sorted({a % ndim for a in axes}))


def _reduce_infer(op):
    def infer(types, attrs):
        x = types[0]
        axes = _reduce_axes(attrs, len(x.shape), op)
        if attrs.get("keepdims", True):
            shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        else:
            shape = tuple(s for d, s in enumerate(x.shape) if d not in axes)
        return TensorType(shape, x.dtype)
    return infer


def _np_l2(x, axis, keepdims):
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


for _name, _te_fn, _np_fn in (("reduce_mean", ops.te_mean, np.mean),
                              ("reduce_sum", ops.te_sum, np.sum),
                              ("reduce_max", ops.te_max, np.max),
                              ("reduce_min", ops.te_min, np.min),
                              ("reduce_prod", ops.te_prod, np.prod),
                              ("reduce_l2", ops.te_l2, _np_l2)):
    def _make(op=_name, te_fn=_te_fn, np_fn=_np_fn):
        def build(args, attrs, name):
            x = args[0]
            return te_fn(x, _reduce_axes(attrs, x.ndim, op), attrs.get("keepdims", True),
                         name=name)

        def run(arrays, attrs):
            x = arrays[0]
            axes = _reduce_axes(attrs, x.ndim, op)
            keepdims = attrs.get("keepdims", True)
            if x.size == 0 and op in ("reduce_max", "reduce_min"):
                # A max (min) over nothing is the lowest (highest) value of the type, as
                # ONNX defines it: numpy has no identity for them.
                low = op == "reduce_max"
                if x.dtype.kind == "f":
                    fill = -np.inf if low else np.inf
                elif x.dtype == bool:
                    fill = not low
                else:
                    fill = np.iinfo(x.dtype).min if low else np.iinfo(x.dtype).max
                shape = _reduce_infer(op)([TensorType.of(x)], attrs).shape
                return np.full(shape, fill, dtype=x.dtype)
            return cast_result(np_fn(x.astype(np.float64), axis=axes, keepdims=keepdims), x.dtype)
        register_op(op, REDUCTION, (1, 1), _reduce_infer(op), build, run)
    _make()


def _arg_infer(op):
    def infer(types, attrs):
        x = types[0]
        axis = _axis(attrs, len(x.shape), op)
        if attrs.get("keepdims", True):
            shape = tuple(1 if d == axis else s for d, s in enumerate(x.shape))
        else:
            shape = tuple(s for d, s in enumerate(x.shape) if d != axis)
        return TensorType(shape, "int64")
    return infer


for _name, _te_fn, _np_fn in (("argmax", ops.te_argmax, ops.ref_argmax),
                              ("argmin", ops.te_argmin, ops.ref_argmin)):
    register_op(_name, REDUCTION, (1, 1), _arg_infer(_name),
              lambda args, attrs, name, fn=_te_fn: fn(
                  args[0], attrs.get("axis", -1), attrs.get("keepdims", True),
                  attrs.get("select_last_index", False), name=name),
              lambda arrays, attrs, fn=_np_fn: fn(
                  arrays[0], attrs.get("axis", -1), attrs.get("keepdims", True),
                  attrs.get("select_last_index", False)))


def _group_norm_infer(types, attrs):
    x = types[0]
    check_op(len(x.shape) >= 3, "group_norm", f"data must have rank >= 3 (N, C, spatial...), "
           f"got {x.shape}")
    check_op(x.dtype.startswith("float"), "group_norm", f"needs a float input, got {x.dtype}")
    groups = attrs["groups"]
    check_op(groups >= 1 and x.shape[1] % groups == 0, "group_norm",
           f"{x.shape[1]} channels do not split into {groups} groups")
    for t in types[1:]:
        check_op(t.shape == (x.shape[1],) and t.dtype == x.dtype, "group_norm",
               f"scale/bias must be {x.dtype} of shape ({x.shape[1]},), got {t}")
    return x


# Inputs in ONNX order: data, scale, bias; instance norm is the groups == channels case.
register_op("group_norm", REDUCTION, (3, 3), _group_norm_infer,
            lambda args, attrs, name: ops.te_group_norm(*args, attrs["groups"],
                                                      attrs.get("epsilon", 1e-5), name=name),
            lambda arrays, attrs: ops.ref_group_norm(*arrays, attrs["groups"],
                                                   attrs.get("epsilon", 1e-5)))


# ---------------------------------------------------------------------------------------------
# layout: reshape (view), transpose, pad, concat, slice
# ---------------------------------------------------------------------------------------------

def _reshape_infer(types, attrs):
    x = types[0]
    shape = tuple(attrs["shape"])
    check_op(math.prod(shape) == math.prod(x.shape), "reshape",
           f"cannot reshape {x.shape} into {shape}")
    return TensorType(shape, x.dtype)


register_op("reshape", VIEW, (1, 1), _reshape_infer,
            lambda args, attrs, name: ops.te_reshape(args[0], attrs["shape"], name=name),
            lambda arrays, attrs: contiguous(arrays[0].reshape(attrs["shape"])))
register_op("identity", VIEW, (1, 1), same_type,
            lambda args, attrs, name: te.compute(args[0].shape, lambda *i: args[0][i],
                                               name=name),
            lambda arrays, attrs: arrays[0].copy())


def _transpose_infer(types, attrs):
    x = types[0]
    perm = tuple(attrs["perm"])
    check_op(sorted(perm) == list(range(len(x.shape))), "transpose",
           f"perm {perm} is not a permutation of the {len(x.shape)} axes")
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


register_op("transpose", INJECTIVE, (1, 1), _transpose_infer,
            lambda args, attrs, name: ops.te_transpose(args[0], list(attrs["perm"]), name=name),
            lambda arrays, attrs: contiguous(np.transpose(arrays[0], attrs["perm"])))


def _pad_infer(types, attrs):
    x = types[0]
    pads = attrs["pads"]
    check_op(len(pads) == len(x.shape), "pad", f"pads {pads} must give (before, after) for each "
           f"of the {len(x.shape)} axes")
    check_op(all(b >= 0 and a >= 0 for b, a in pads), "pad", f"pads {pads} must be "
           f"non-negative (negative pads are crops: use slice)")
    return TensorType(tuple(s + b + a for s, (b, a) in zip(x.shape, pads)), x.dtype)


register_op("pad", INJECTIVE, (1, 1), _pad_infer,
            lambda args, attrs, name: ops.te_pad(args[0], [tuple(p) for p in attrs["pads"]],
                                               attrs.get("value", 0.0), name=name),
            lambda arrays, attrs: np.pad(arrays[0], attrs["pads"],
                                       constant_values=attrs.get("value", 0.0)))


def _concat_infer(types, attrs):
    first = types[0]
    axis = _axis(attrs, len(first.shape), "concat")
    for t in types[1:]:
        check_op(len(t.shape) == len(first.shape) and t.dtype == first.dtype and all(
            d == axis or t.shape[d] == first.shape[d] for d in range(len(t.shape))),
            "concat", f"inputs {first} and {t} do not concatenate along axis {axis}")
    extent = sum(t.shape[axis] for t in types)
    return TensorType(first.shape[:axis] + (extent,) + first.shape[axis + 1:], first.dtype)


register_op("concat", INJECTIVE, (1, 1 << 16), _concat_infer,
            lambda args, attrs, name: ops.te_concatenate(list(args), attrs.get("axis", 0),
                                                       name=name),
            lambda arrays, attrs: np.concatenate(arrays, axis=attrs.get("axis", 0)))


def _slice_infer(types, attrs):
    """attrs: ``begin``, ``end``, ``step`` per axis, already clamped (step > 0)."""
    x = types[0]
    begin, end, step = attrs["begin"], attrs["end"], attrs["step"]
    check_op(len(begin) == len(end) == len(step) == len(x.shape), "slice",
           f"begin/end/step {begin}/{end}/{step} must give one entry per axis of {x.shape}")
    shape = []
    for b, e, s, n in zip(begin, end, step, x.shape):
        check_op(s >= 1 and 0 <= b and e <= n, "slice",
               f"range {b}:{e}:{s} is not a positive-step range inside extent {n}")
        shape.append(max(0, -(-(e - b) // s)))
    return TensorType(tuple(shape), x.dtype)


def _slice_te(args, attrs, name):
    x = args[0]
    shape = _slice_infer([TensorType(x.shape, x.dtype)], attrs).shape
    begin, step = attrs["begin"], attrs["step"]

    def fcompute(*idx):
        src = []
        for i, b, s in zip(idx, begin, step):
            v = i * s if s != 1 else i
            src.append(v + b if b else v)
        return x[tuple(src)]
    return te.compute(shape, fcompute, name=name)


def _slice_numpy(arrays, attrs):
    index = tuple(slice(b, e, s) for b, e, s in zip(attrs["begin"], attrs["end"],
                                                     attrs["step"]))
    return contiguous(arrays[0][index])


register_op("slice", INJECTIVE, (1, 1), _slice_infer, _slice_te, _slice_numpy)


def _tile_infer(types, attrs):
    x = types[0]
    repeats = tuple(attrs["repeats"])
    check_op(len(repeats) == len(x.shape) and all(r >= 1 for r in repeats), "tile",
           f"repeats {repeats} must give a positive count for each of the {len(x.shape)} axes")
    return TensorType(tuple(s * r for s, r in zip(x.shape, repeats)), x.dtype)


register_op("tile", INJECTIVE, (1, 1), _tile_infer,
            lambda args, attrs, name: ops.te_tile(args[0], tuple(attrs["repeats"]), name=name),
            lambda arrays, attrs: contiguous(ops.ref_tile(arrays[0], attrs["repeats"])))


def _trilu_infer(types, attrs):
    check_op(len(types[0].shape) >= 2, "trilu", f"needs rank >= 2, got {types[0].shape}")
    return types[0]


# Elementwise: the output element at an index reads the input at the same index (or is 0).
register_op("trilu", ELEMWISE, (1, 1), _trilu_infer,
            lambda args, attrs, name: ops.te_trilu(args[0], attrs.get("k", 0),
                                                 attrs.get("upper", True), name=name),
            lambda arrays, attrs: contiguous(ops.ref_trilu(arrays[0], attrs.get("k", 0),
                                                         attrs.get("upper", True))))


def _resize_args(attrs):
    return (tuple(attrs["size"]), tuple(attrs["scales"]), attrs.get("mode", "nearest"),
            attrs.get("coordinate", "half_pixel"), attrs.get("rounding", "round_prefer_floor"))


def _resize_infer(types, attrs):
    x = types[0]
    size, scales, mode, coordinate, rounding = _resize_args(attrs)
    check_op(len(x.shape) == 4, "resize2d", f"data must be NCHW, got {x.shape}")
    check_op(len(size) == 2 and min(size) >= 1 and len(scales) == 2 and min(scales) > 0,
           "resize2d", f"size {size} and scales {scales} must be two positive values each")
    check_op(mode in ("nearest", "linear"), "resize2d", f"mode {mode!r} is not nearest/linear")
    check_op(coordinate in ops.RESIZE_COORDINATES and rounding in ops.RESIZE_ROUNDING,
           "resize2d", f"coordinate mode {coordinate!r} / nearest mode {rounding!r} unknown")
    check_op(mode == "nearest" or x.dtype.startswith("float"), "resize2d",
           f"linear mode needs a float input, got {x.dtype}")
    return TensorType(x.shape[:2] + size, x.dtype)


# attrs: size (OH, OW), scales (the factors of the coordinate transformation), mode,
# coordinate (ONNX's coordinate_transformation_mode), rounding (ONNX's nearest_mode).
register_op("resize2d", INJECTIVE, (1, 1), _resize_infer,
            lambda args, attrs, name: ops.te_resize2d(args[0], *_resize_args(attrs), name=name),
            lambda arrays, attrs: ops.ref_resize2d(arrays[0], *_resize_args(attrs)))
