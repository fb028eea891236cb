"""The graph operators of ``autotune.graph.operators_more``: each built with its default
schedule and compared with numpy written out here (not the operator's own reference), and the
elementwise ones fused into one kernel with their neighbours."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.graph import GraphBuilder
from autotune.graph.operators import ELEMWISE, get_op
from autotune.graph.passes import fuse_ops, optimize
from autotune.graph.build import build_model

from .helpers import TARGET

_RNG = np.random.default_rng(0)
_X = _RNG.uniform(-2.0, 2.0, (3, 5)).astype(np.float32)

_UNARY = {
    "reciprocal": (_X, {}, lambda x: 1 / x),
    "floor": (_X, {}, np.floor),
    "ceil": (_X, {}, np.ceil),
    "round": (np.array([0.5, 1.5, -0.5, 2.4, -2.6], np.float32), {}, np.round),
    "sign": (np.array([-3, 0, 4], np.int32), {}, np.sign),
    "sin": (_X, {}, np.sin), "cos": (_X, {}, np.cos), "tan": (_X * 0.5, {}, np.tan),
    "sinh": (_X, {}, np.sinh), "cosh": (_X, {}, np.cosh), "asinh": (_X, {}, np.arcsinh),
    "acosh": (np.abs(_X) + 1, {}, np.arccosh), "atanh": (_X * 0.4, {}, np.arctanh),
    "softsign": (_X, {}, lambda x: x / (1 + np.abs(x))),
    "selu": (_X, {"alpha": 2.0, "gamma": 3.0},
             lambda x: np.where(x > 0, 3 * x, 6 * (np.exp(x) - 1))),
    "celu": (_X, {"alpha": 2.0}, lambda x: np.maximum(x, 0) + np.minimum(
        0, 2 * (np.exp(x / 2) - 1))),
    "thresholded_relu": (_X, {"alpha": 0.5}, lambda x: np.where(x > 0.5, x, 0)),
    "shrink": (_X, {"lambd": 1.0, "bias": 0.25},
               lambda x: np.where(x < -1, x + 0.25, np.where(x > 1, x - 0.25, 0))),
    "swish": (_X, {"alpha": 1.5}, lambda x: x / (1 + np.exp(-1.5 * x))),
    "isnan": (np.array([1.0, np.nan, np.inf], np.float32), {}, np.isnan),
    "isinf": (np.array([1.0, np.nan, np.inf, -np.inf], np.float32), {}, np.isinf),
}


def _run(op, arrays, attrs, fuse_with_relu=False):
    b = GraphBuilder(op)
    names = [b.input(f"x{k}", a.shape, str(a.dtype)) for k, a in enumerate(arrays)]
    y = b.op(op, names, **attrs)
    if fuse_with_relu:
        y = b.op("relu", [y])
    b.output(y, "y")
    model = b.build()
    out = build_model(model, TARGET).run({f"x{k}": a for k, a in enumerate(arrays)})["y"]
    return model, out


@pytest.mark.parametrize("op", sorted(_UNARY))
def test_unary_matches_numpy(op):
    x, attrs, expect = _UNARY[op]
    _, got = _run(op, [x], attrs)
    want = expect(x.astype(np.float64) if x.dtype.kind == "f" else x)
    if want.dtype == bool:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want.astype(x.dtype), rtol=1e-5, atol=1e-6)
    assert get_op(op).kind == ELEMWISE


def test_isinf_one_sided():
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    _, pos = _run("isinf", [x], {"detect_negative": 0})
    _, neg = _run("isinf", [x], {"detect_positive": 0})
    np.testing.assert_array_equal(pos, [True, False, False, False])
    np.testing.assert_array_equal(neg, [False, True, False, False])


def test_elementwise_fuses_with_its_consumer():
    model, got = _run("softsign", [_X], {}, fuse_with_relu=True)
    np.testing.assert_allclose(got, np.maximum(_X / (1 + np.abs(_X)), 0), rtol=1e-6)
    groups = fuse_ops(optimize(model))
    kernels = [g for g in groups if any(node.op == "softsign" for node in g.nodes)]
    assert len(kernels) == 1 and {n.op for n in kernels[0].nodes} == {"softsign", "relu"}


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_signs(fmod):
    a = np.array([-7, 7, -7, 7, 6], np.int32)
    b = np.array([3, -3, -3, 3, 3], np.int32)
    _, got = _run("mod", [a, b], {"fmod": fmod})
    np.testing.assert_array_equal(got, np.fmod(a, b) if fmod else np.mod(a, b))


def test_float_fmod():
    a = np.array([-4.3, 7.2, 5.0, -5.5], np.float32)
    b = np.array([2.1, -3.4, 2.5, 2.0], np.float32)
    _, got = _run("mod", [a, b], {"fmod": 1})
    np.testing.assert_allclose(got, np.fmod(a, b), rtol=1e-5, atol=1e-6)


def test_int_divide_truncates():
    a = np.array([7, -7, 7, -7, 6], np.int64)
    b = np.array([2, 2, -2, -2, 3], np.int64)
    _, got = _run("int_divide", [a, b], {})
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 2])


def test_gather_runtime_indices_negative():
    data = _RNG.normal(size=(4, 3)).astype(np.float32)
    index = np.array([[0, -1], [2, 1]], np.int64)
    _, got = _run("gather", [data, index], {"axis": 0})
    np.testing.assert_array_equal(got, data[[[0, 3], [2, 1]]])
    _, got = _run("gather", [data, index], {"axis": 1})
    np.testing.assert_array_equal(got, data[:, [[0, 2], [2, 1]]])


def test_gather_elements():
    data = _RNG.normal(size=(3, 4)).astype(np.float32)
    index = np.array([[0, -1, 2], [1, 1, 0]], np.int32)
    _, got = _run("gather_elements", [data, index], {"axis": 1})
    # Indices smaller than the data on the other axis read its leading rows.
    want = np.array([[data[0, 0], data[0, 3], data[0, 2]], [data[1, 1], data[1, 1], data[1, 0]]])
    np.testing.assert_array_equal(got, want)


def test_gather_nd_with_batch_dims():
    data = _RNG.normal(size=(2, 3, 4)).astype(np.float32)
    index = np.array([[[1, 2]], [[0, -1]]], np.int64)
    _, got = _run("gather_nd", [data, index], {"batch_dims": 1})
    np.testing.assert_array_equal(got, np.array([[data[0, 1, 2]], [data[1, 0, 3]]]))


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes(mode):
    x = _RNG.normal(size=(3, 4)).astype(np.float32)
    pads = ((2, 1), (0, 3))
    _, got = _run("pad_mode", [x], {"pads": pads, "mode": mode})
    np.testing.assert_array_equal(got, np.pad(x, pads, mode=mode))


@pytest.mark.parametrize("product", [0, 1])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_and_cumprod(product, exclusive, reverse):
    x = np.array([[1, 2, 3, 4], [2, -1, 5, 3]], np.int64)
    _, got = _run("cumsum", [x], {"axis": 1, "exclusive": exclusive, "reverse": reverse,
                                  "product": product})
    y = x[:, ::-1] if reverse else x
    full = np.cumprod(y, axis=1) if product else np.cumsum(y, axis=1)
    if exclusive:
        start = np.ones((2, 1), np.int64) if product else np.zeros((2, 1), np.int64)
        full = np.concatenate([start, full[:, :-1]], axis=1)
    np.testing.assert_array_equal(got, full[:, ::-1] if reverse else full)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_indices_with_ties(largest):
    x = np.array([[3.0, 1.0, 3.0, 2.0, 1.0]], np.float32)
    _, got = _run("topk_indices", [x], {"axis": 1, "k": 3, "largest": largest})
    want = [[0, 2, 3]] if largest else [[1, 4, 3]]  # equal values in index order
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    index = np.array([[1, -1], [0, 2]], np.int64)
    updates = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)
    _, got = _run("scatter_elements", [data, index, updates], {"axis": 1,
                                                                "reduction": reduction})
    want = data.copy()
    apply = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
             "min": np.minimum}[reduction]
    for (r, c), u in zip([(0, 1), (0, 3), (1, 0), (1, 2)], updates.reshape(-1)):
        want[r, c] = apply(want[r, c], u)
    np.testing.assert_array_equal(got, want)


def test_scatter_nd_rows():
    data = np.zeros((4, 3), np.float32)
    index = np.array([[2], [0]], np.int64)
    updates = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    _, got = _run("scatter_nd", [data, index, updates], {"reduction": "add"})
    want = data.copy()
    want[2] += updates[0]
    want[0] += updates[1]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint16", "uint64"])
@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_ops(op, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 0, 5, 12, info.max - 3], dtype)
    b = np.array([info.max, 3, info.min, 9, 10, 6], dtype)
    _, got = _run(op, [a, b], {})
    fn = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
          "bitwise_xor": np.bitwise_xor}[op]
    np.testing.assert_array_equal(got, fn(a, b))


@pytest.mark.parametrize("dtype", ["int16", "uint32"])
def test_bitwise_not(dtype):
    a = np.array([0, 1, 7, np.iinfo(dtype).max], dtype)
    _, got = _run("bitwise_not", [a], {})
    np.testing.assert_array_equal(got, np.invert(a))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(direction):
    a = np.array([16, 4, 1, 255, 200], np.uint8)
    b = np.array([1, 2, 3, 1, 7], np.uint8)
    _, got = _run("bitshift", [a, b], {"direction": direction})
    fn = np.left_shift if direction == "LEFT" else np.right_shift
    np.testing.assert_array_equal(got, fn(a, b))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_signed_bitshift_keeps_the_sign(direction):
    a = np.array([-8, 4, -1, 64, -128], np.int8)
    b = np.array([1, 9, 127, 1, 7], np.int8)
    _, got = _run("bitshift", [a, b], {"direction": direction})
    if direction == "LEFT":
        want = [-16, 0, 0, -128, 0]
    else:
        want = [-4, 0, -1, 32, -1]
    np.testing.assert_array_equal(got, np.array(want, np.int8))
