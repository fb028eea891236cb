"""Elementwise operators with numpy broadcasting: add, subtract, multiply, divide, relu, gelu,
sigmoid, tanh, clip; the activations leaky_relu, prelu, elu, softplus, mish, hard_sigmoid and
hard_swish; comparisons and logic (bool results) and where.

Binary te-level operators accept a tensor or a Python number on either side (a number becomes
a constant of the tensor's dtype).  PrimFunc-level binary operators take the two input shapes;
unary ones take the shape.  References compute in float64 and cast back.
"""
from __future__ import annotations

import math
from typing import Callable, Union

import numpy as np

from .. import te
from ..func import PrimFunc
from .utils import (
    broadcast_index, broadcast_shape, canonical_dtype, check, shape_of, to_float,
)

__all__ = [
    "te_add", "add", "ref_add", "te_subtract", "subtract", "ref_subtract",
    "te_multiply", "multiply", "ref_multiply", "te_divide", "divide", "ref_divide",
    "te_relu", "relu", "ref_relu", "te_gelu", "gelu", "ref_gelu",
    "te_sigmoid", "sigmoid", "ref_sigmoid", "te_tanh", "tanh", "ref_tanh",
    "te_clip", "clip", "ref_clip", "erf_numpy",
    "te_leaky_relu", "leaky_relu", "ref_leaky_relu", "te_elu", "elu", "ref_elu",
    "te_softplus", "softplus", "ref_softplus", "te_mish", "mish", "ref_mish",
    "te_hard_sigmoid", "hard_sigmoid", "ref_hard_sigmoid",
    "te_hard_swish", "hard_swish", "ref_hard_swish", "te_prelu", "prelu", "ref_prelu",
    "COMPARISONS", "te_compare", "ref_compare", "LOGIC", "te_logical", "ref_logical",
    "te_logical_not", "ref_logical_not", "te_where", "ref_where",
]

Operand = Union[te.Tensor, int, float]


def _binary(op: str, a: Operand, b: Operand, combine: Callable, name: str) -> te.Tensor:
    a_is, b_is = isinstance(a, te.Tensor), isinstance(b, te.Tensor)
    check(a_is or b_is, op, "at least one operand must be a te.Tensor")
    for x in (a, b):
        check(isinstance(x, (te.Tensor, int, float, np.number)) and not isinstance(x, bool),
              op, f"operands must be te.Tensor or numbers, got {type(x).__name__}")
    if a_is and b_is:
        check(a.dtype == b.dtype, op, f"operand dtypes differ: {a.dtype} vs {b.dtype}")
        shape = broadcast_shape(a.shape, b.shape, op)
        return te.compute(
            shape,
            lambda *idx: combine(a[broadcast_index(a, idx)], b[broadcast_index(b, idx)]),
            name=name)
    tensor, value = (a, b) if a_is else (b, a)
    if tensor.dtype.startswith("float"):
        value = float(value)
    scalar = te.const(value, tensor.dtype)
    if a_is:
        return te.compute(tensor.shape, lambda *idx: combine(tensor[idx], scalar), name=name)
    return te.compute(tensor.shape, lambda *idx: combine(scalar, tensor[idx]), name=name)


def _binary_func(op: str, te_fn: Callable, a_shape, b_shape, dtype) -> PrimFunc:
    dtype = canonical_dtype(dtype, op)
    a = te.placeholder(shape_of(a_shape, op, "a_shape"), dtype, name="A")
    b = te.placeholder(shape_of(b_shape, op, "b_shape"), dtype, name="B")
    return te.create_prim_func([a, b, te_fn(a, b, name=f"T_{op}")], name=op)


def _unary_func(op: str, te_fn: Callable, shape, dtype, **attrs) -> PrimFunc:
    dtype = canonical_dtype(dtype, op)
    data = te.placeholder(shape_of(shape, op), dtype, name="data")
    return te.create_prim_func([data, te_fn(data, **attrs, name=f"T_{op}")], name=op)


def _unary(op: str, data: te.Tensor, fn: Callable, name: str, need_float: bool = True
           ) -> te.Tensor:
    check(isinstance(data, te.Tensor), op, f"expected a te.Tensor, got {type(data).__name__}")
    if need_float:
        check(data.dtype.startswith("float"), op, f"needs a float input, got {data.dtype}")
    return te.compute(data.shape, lambda *idx: fn(data[idx]), name=name)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _result_dtype(*arrays) -> np.dtype:
    return np.result_type(*[np.asarray(x).dtype for x in arrays if isinstance(x, np.ndarray)])


# -- binary -----------------------------------------------------------------------------------

def te_add(a: Operand, b: Operand, name: str = "add") -> te.Tensor:
    return _binary("add", a, b, lambda x, y: x + y, name)


def add(a_shape, b_shape, dtype: str = "float32") -> PrimFunc:
    return _binary_func("add", te_add, a_shape, b_shape, dtype)


def ref_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f64(a) + _f64(b)).astype(_result_dtype(a, b))


def te_subtract(a: Operand, b: Operand, name: str = "subtract") -> te.Tensor:
    return _binary("subtract", a, b, lambda x, y: x - y, name)


def subtract(a_shape, b_shape, dtype: str = "float32") -> PrimFunc:
    return _binary_func("subtract", te_subtract, a_shape, b_shape, dtype)


def ref_subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f64(a) - _f64(b)).astype(_result_dtype(a, b))


def te_multiply(a: Operand, b: Operand, name: str = "multiply") -> te.Tensor:
    return _binary("multiply", a, b, lambda x, y: x * y, name)


def multiply(a_shape, b_shape, dtype: str = "float32") -> PrimFunc:
    return _binary_func("multiply", te_multiply, a_shape, b_shape, dtype)


def ref_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f64(a) * _f64(b)).astype(_result_dtype(a, b))


def te_divide(a: Operand, b: Operand, name: str = "divide") -> te.Tensor:
    """True division; float dtypes only (integer division is ambiguous, see te.floordiv)."""
    for x in (a, b):
        if isinstance(x, te.Tensor):
            check(x.dtype.startswith("float"), "divide", f"needs float operands, got {x.dtype}")
    return _binary("divide", a, b, lambda x, y: x / y, name)


def divide(a_shape, b_shape, dtype: str = "float32") -> PrimFunc:
    return _binary_func("divide", te_divide, a_shape, b_shape, dtype)


def ref_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f64(a) / _f64(b)).astype(_result_dtype(a, b))


# -- unary ------------------------------------------------------------------------------------

def te_relu(data: te.Tensor, name: str = "relu") -> te.Tensor:
    return _unary("relu", data, lambda x: te.max(x, te.const(0, data.dtype)), name,
                  need_float=False)


def relu(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("relu", te_relu, shape, dtype)


def ref_relu(data: np.ndarray) -> np.ndarray:
    return np.maximum(data, 0).astype(data.dtype)


_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def te_gelu(data: te.Tensor, name: str = "gelu") -> te.Tensor:
    """Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    def fn(x):
        half = to_float(0.5, data.dtype)
        one = to_float(1.0, data.dtype)
        return half * x * (one + te.erf(x * to_float(_INV_SQRT2, data.dtype)))

    return _unary("gelu", data, fn, name)


def gelu(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("gelu", te_gelu, shape, dtype)


_erf_scalar = np.vectorize(math.erf, otypes=[np.float64])


def erf_numpy(x) -> np.ndarray:
    """The error function on a numpy array (float64), without scipy."""
    return _erf_scalar(np.asarray(x, dtype=np.float64))


def ref_gelu(data: np.ndarray) -> np.ndarray:
    x = _f64(data)
    return (0.5 * x * (1.0 + erf_numpy(x * _INV_SQRT2))).astype(data.dtype)


def te_sigmoid(data: te.Tensor, name: str = "sigmoid") -> te.Tensor:
    return _unary("sigmoid", data, te.sigmoid, name)


def sigmoid(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("sigmoid", te_sigmoid, shape, dtype)


def ref_sigmoid(data: np.ndarray) -> np.ndarray:
    x = _f64(data)
    # Written with exp(-|x|) so that neither branch overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(data.dtype)


def te_tanh(data: te.Tensor, name: str = "tanh") -> te.Tensor:
    return _unary("tanh", data, te.tanh, name)


def tanh(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("tanh", te_tanh, shape, dtype)


def ref_tanh(data: np.ndarray) -> np.ndarray:
    return np.tanh(_f64(data)).astype(data.dtype)


def te_clip(data: te.Tensor, a_min: float, a_max: float, name: str = "clip") -> te.Tensor:
    """min(max(x, a_min), a_max)."""
    check(isinstance(data, te.Tensor), "clip", f"expected a te.Tensor, got "
          f"{type(data).__name__}")
    check(a_min <= a_max, "clip", f"a_min {a_min} is greater than a_max {a_max}")
    lo, hi = te.const(a_min, data.dtype), te.const(a_max, data.dtype)
    return _unary("clip", data, lambda x: te.min(te.max(x, lo), hi), name, need_float=False)


def clip(shape, a_min: float, a_max: float, dtype: str = "float32") -> PrimFunc:
    return _unary_func("clip", te_clip, shape, dtype, a_min=a_min, a_max=a_max)


def ref_clip(data: np.ndarray, a_min: float, a_max: float) -> np.ndarray:
    return np.clip(data, a_min, a_max).astype(data.dtype)


# -- activations ------------------------------------------------------------------------------

def te_leaky_relu(data: te.Tensor, alpha: float = 0.01, name: str = "leaky_relu"
                  ) -> te.Tensor:
    """x for x >= 0, alpha * x below."""
    zero, slope = to_float(0.0, data.dtype), to_float(alpha, data.dtype)
    return _unary("leaky_relu", data, lambda x: te.if_then_else(x >= zero, x, x * slope),
                  name)


def leaky_relu(shape, alpha: float = 0.01, dtype: str = "float32") -> PrimFunc:
    return _unary_func("leaky_relu", te_leaky_relu, shape, dtype, alpha=alpha)


def ref_leaky_relu(data: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    x = _f64(data)
    return np.where(x >= 0, x, alpha * x).astype(data.dtype)


def te_elu(data: te.Tensor, alpha: float = 1.0, name: str = "elu") -> te.Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    zero, one = to_float(0.0, data.dtype), to_float(1.0, data.dtype)
    scale = to_float(alpha, data.dtype)
    return _unary("elu", data,
                  lambda x: te.if_then_else(x > zero, x, scale * (te.exp(x) - one)), name)


def elu(shape, alpha: float = 1.0, dtype: str = "float32") -> PrimFunc:
    return _unary_func("elu", te_elu, shape, dtype, alpha=alpha)


def ref_elu(data: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    x = _f64(data)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(data.dtype)


def _softplus_expr(x, dtype: str):
    # max(x, 0) + log(1 + exp(-|x|)): exp never overflows, unlike log(1 + exp(x)) for x > 88.
    zero, one = to_float(0.0, dtype), to_float(1.0, dtype)
    return te.max(x, zero) + te.log(one + te.exp(-te.abs(x)))


def te_softplus(data: te.Tensor, name: str = "softplus") -> te.Tensor:
    """log(1 + exp(x))."""
    return _unary("softplus", data, lambda x: _softplus_expr(x, data.dtype), name)


def softplus(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("softplus", te_softplus, shape, dtype)


def ref_softplus(data: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, _f64(data)).astype(data.dtype)


def te_mish(data: te.Tensor, name: str = "mish") -> te.Tensor:
    """x * tanh(softplus(x))."""
    return _unary("mish", data, lambda x: x * te.tanh(_softplus_expr(x, data.dtype)), name)


def mish(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("mish", te_mish, shape, dtype)


def ref_mish(data: np.ndarray) -> np.ndarray:
    x = _f64(data)
    return (x * np.tanh(np.logaddexp(0.0, x))).astype(data.dtype)


def te_hard_sigmoid(data: te.Tensor, alpha: float = 0.2, beta: float = 0.5,
                    name: str = "hard_sigmoid") -> te.Tensor:
    """clip(alpha * x + beta, 0, 1)."""
    a, b = to_float(alpha, data.dtype), to_float(beta, data.dtype)
    zero, one = to_float(0.0, data.dtype), to_float(1.0, data.dtype)
    return _unary("hard_sigmoid", data, lambda x: te.min(te.max(x * a + b, zero), one), name)


def hard_sigmoid(shape, alpha: float = 0.2, beta: float = 0.5, dtype: str = "float32"
                 ) -> PrimFunc:
    return _unary_func("hard_sigmoid", te_hard_sigmoid, shape, dtype, alpha=alpha, beta=beta)


def ref_hard_sigmoid(data: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    return np.clip(alpha * _f64(data) + beta, 0.0, 1.0).astype(data.dtype)


def te_hard_swish(data: te.Tensor, name: str = "hard_swish") -> te.Tensor:
    """x * clip(x / 6 + 1 / 2, 0, 1), ONNX's HardSwish (MobileNetV3's h-swish)."""
    a, b = to_float(1.0 / 6.0, data.dtype), to_float(0.5, data.dtype)
    zero, one = to_float(0.0, data.dtype), to_float(1.0, data.dtype)
    return _unary("hard_swish", data, lambda x: x * te.min(te.max(x * a + b, zero), one),
                  name)


def hard_swish(shape, dtype: str = "float32") -> PrimFunc:
    return _unary_func("hard_swish", te_hard_swish, shape, dtype)


def ref_hard_swish(data: np.ndarray) -> np.ndarray:
    x = _f64(data)
    return (x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)).astype(data.dtype)


def te_prelu(data: te.Tensor, slope: te.Tensor, name: str = "prelu") -> te.Tensor:
    """x for x >= 0, slope * x below; ``slope`` broadcasts to ``data`` (one way only: the
    result has the shape of ``data``)."""
    check(isinstance(data, te.Tensor) and isinstance(slope, te.Tensor), "prelu",
          "data and slope must be te.Tensor")
    check(broadcast_shape(data.shape, slope.shape, "prelu") == data.shape, "prelu",
          f"slope of shape {slope.shape} does not broadcast to the data's {data.shape}")
    zero = to_float(0.0, data.dtype)
    return _binary("prelu", data, slope,
                   lambda x, s: te.if_then_else(x >= zero, x, x * s), name)


def prelu(shape, slope_shape, dtype: str = "float32") -> PrimFunc:
    return _binary_func("prelu", te_prelu, shape, slope_shape, dtype)


def ref_prelu(data: np.ndarray, slope: np.ndarray) -> np.ndarray:
    x = _f64(data)
    return np.where(x >= 0, x, x * _f64(slope)).astype(data.dtype)


# -- comparisons, logic, where ----------------------------------------------------------------

# name -> (IR comparison, numpy function)
COMPARISONS = {
    "equal": ("==", np.equal), "not_equal": ("!=", np.not_equal), "less": ("<", np.less),
    "less_equal": ("<=", np.less_equal), "greater": (">", np.greater),
    "greater_equal": (">=", np.greater_equal),
}


def te_compare(op: str, a: te.Tensor, b: te.Tensor, name: str | None = None) -> te.Tensor:
    """A bool tensor: ``a op b`` elementwise with broadcasting, ``op`` a key of COMPARISONS."""
    from ..expr import compare

    check(op in COMPARISONS, "compare", f"unknown comparison {op!r}; known: "
          f"{', '.join(COMPARISONS)}")
    symbol = COMPARISONS[op][0]
    return _binary(op, a, b, lambda x, y: compare(symbol, x, y), name or op)


def ref_compare(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return COMPARISONS[op][1](a, b)


LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or,
         "logical_xor": np.logical_xor}


def te_logical(op: str, a: te.Tensor, b: te.Tensor, name: str | None = None) -> te.Tensor:
    """Elementwise and / or / xor of two bool tensors, with broadcasting."""
    check(op in LOGIC, "logical", f"unknown logical operator {op!r}; known: "
          f"{', '.join(LOGIC)}")
    for t in (a, b):
        check(isinstance(t, te.Tensor) and t.dtype == "bool", op,
              f"needs bool tensors, got {getattr(t, 'dtype', type(t).__name__)}")
    combine = {"logical_and": lambda x, y: x & y, "logical_or": lambda x, y: x | y,
               "logical_xor": lambda x, y: te.not_equal(x, y)}[op]
    return _binary(op, a, b, combine, name or op)


def ref_logical(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return LOGIC[op](a, b)


def te_logical_not(data: te.Tensor, name: str = "logical_not") -> te.Tensor:
    check(isinstance(data, te.Tensor) and data.dtype == "bool", "logical_not",
          f"needs a bool tensor, got {getattr(data, 'dtype', type(data).__name__)}")
    return te.compute(data.shape, lambda *idx: ~data[idx], name=name)


def ref_logical_not(data: np.ndarray) -> np.ndarray:
    return np.logical_not(data)


def te_where(cond: te.Tensor, a: te.Tensor, b: te.Tensor, name: str = "where") -> te.Tensor:
    """``a`` where ``cond`` holds, else ``b``; the three broadcast together (numpy.where)."""
    op = "where"
    for t in (cond, a, b):
        check(isinstance(t, te.Tensor), op, f"expected te.Tensor arguments, got "
              f"{type(t).__name__}")
    check(cond.dtype == "bool", op, f"the condition must be bool, got {cond.dtype}")
    check(a.dtype == b.dtype, op, f"value dtypes differ: {a.dtype} vs {b.dtype}")
    shape = broadcast_shape(broadcast_shape(cond.shape, a.shape, op), b.shape, op)
    return te.compute(shape, lambda *idx: te.if_then_else(
        cond[broadcast_index(cond, idx)], a[broadcast_index(a, idx)],
        b[broadcast_index(b, idx)]), name=name)


def ref_where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond, a, b)
