"""Property-based fuzzing of the ONNX importer: random tiny graphs (1 to 4 nodes drawn from the
supported operators, with random and often invalid attributes) either give the project's own
typed error or, once built, the outputs onnxruntime gives.

The default suite runs a small deterministic sample (builds are LLVM compiles); for a longer
hunt, call ``check_graph`` on ``onnx_graphs()`` under a larger ``max_examples``.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autotune  # noqa: E402
from autotune.frontends import load_model  # noqa: E402
from cost_models.base import CostModelError  # noqa: E402
from cost_models.features import FeatureError  # noqa: E402
from records.errors import DatabaseError  # noqa: E402
from schedules.errors import ScheduleError  # noqa: E402
from search.strategy import SearchError  # noqa: E402
from tensor_ir.errors import TensorIRError  # noqa: E402

from .helpers import TARGET  # noqa: E402

# Every error class the project raises on purpose; anything else escaping is a bug.
PROJECT_ERRORS = (TensorIRError, ScheduleError, DatabaseError, CostModelError, FeatureError,
                  SearchError)

OPSET = 17
_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_DTYPES = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
           TensorProto.INT64: np.int64, TensorProto.INT32: np.int32}

_UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Erf", "Sqrt", "Log", "Identity"]
_BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"]
_OTHER = ["Clip", "Softmax", "Flatten", "Transpose", "Concat", "Reshape", "Unsqueeze",
          "Squeeze", "ReduceMean", "ReduceSum", "ReduceMax", "Cast", "Conv", "MaxPool",
          "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "MatMul", "Gemm",
          "LayerNormalization", "Slice", "Pad", "Split", "Expand", "HardSigmoid"]
_OPS = _UNARY + _BINARY + _OTHER

_small = st.integers(-2, 4)  # mostly valid sizes and strides, sometimes zero or negative


class _Graph:
    """The graph being drawn: nodes, initializers and the values (name, rank) so far."""

    def __init__(self):
        self.nodes, self.inits = [], []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, array) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs, outputs: int = 1, **attrs) -> str:
        outs = [self.fresh("v") for _ in range(outputs)]
        # onnx.helper cannot type an empty list attribute: leave it out (its default applies).
        attrs = {k: v for k, v in attrs.items() if not (isinstance(v, list) and not v)}
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.fresh(op),
                                           **attrs))
        return outs[0]


def _shape(draw, low: int = 0, high: int = 4):
    return tuple(draw(st.lists(st.integers(1, 3), min_size=low, max_size=high)))


def _ints(draw, size, low=-2, high=4):
    return draw(st.lists(st.integers(low, high), min_size=size, max_size=size))


def _add_node(draw, g: _Graph, x: str, rank: int, others: list[str]) -> str:
    """One node reading ``x`` (of rank ``rank``, perhaps wrongly assumed) and sometimes an
    earlier value; attributes are drawn from ranges that include invalid values."""
    op = draw(st.sampled_from(_OPS))
    if op in _UNARY:
        return g.node(op, [x])
    if op in _BINARY:
        if others and draw(st.booleans()):
            other = draw(st.sampled_from(others))
        else:
            dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.int64]))
            other = g.const(np.full(_shape(draw), draw(st.sampled_from([0.5, 2.0, -1.0])),
                                    dtype))
        return g.node(op, [x, other])
    axis = draw(st.integers(-rank - 1, rank + 1))
    if op == "Clip":
        bounds = [g.const(np.float32(draw(st.sampled_from([-1.0, 0.0, 0.5]))))
                  if draw(st.booleans()) else "" for _ in range(2)]
        if draw(st.integers(0, 5)) == 0:
            bounds[0] = g.const(np.zeros(2, np.float32))  # a non-scalar bound
        return g.node(op, [x] + bounds)
    if op == "HardSigmoid":
        return g.node(op, [x], alpha=draw(st.sampled_from([0.2, -1.0])), beta=0.5)
    if op in ("Softmax", "Flatten", "LayerNormalization"):
        if op == "LayerNormalization":
            scale = g.const(np.ones(_shape(draw, 0, 2), np.float32))
            return g.node(op, [x, scale], axis=axis)
        return g.node(op, [x], axis=axis)
    if op == "Transpose":
        perm = draw(st.permutations(list(range(rank)))) if draw(st.booleans()) else \
            _ints(draw, draw(st.integers(0, rank + 1)), -1, rank)
        return g.node(op, [x], perm=list(perm))
    if op == "Concat":
        other = draw(st.sampled_from(others)) if others else x
        return g.node(op, [x, other], axis=axis)
    if op == "Reshape":
        target = _ints(draw, draw(st.integers(0, 4)), -2, 6)
        return g.node(op, [x, g.const(np.array(target, np.int64))])
    if op in ("Unsqueeze", "Squeeze"):
        axes = _ints(draw, draw(st.integers(0, 2)), -rank - 2, rank + 1)
        return g.node(op, [x, g.const(np.array(axes, np.int64))] if axes or op == "Unsqueeze"
                      else [x])
    if op.startswith("Reduce"):
        axes = _ints(draw, draw(st.integers(0, 2)), -rank - 1, rank)
        return g.node(op, [x], axes=axes, keepdims=draw(st.sampled_from([0, 1, 2])))
    if op == "Cast":
        to = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64,
                                   TensorProto.INT32, TensorProto.BOOL]))
        return g.node(op, [x], to=to)
    if op == "Conv":
        cin = draw(st.integers(1, 3))
        k = draw(st.integers(1, 3))
        group = draw(st.sampled_from([1, 1, 2, 0]))
        w = g.const(np.full((draw(st.integers(1, 3)), cin, k, k), 0.25, np.float32))
        attrs = {"strides": _ints(draw, 2, -1, 3), "pads": _ints(draw, 4, -1, 4),
                 "dilations": _ints(draw, 2, 0, 2), "group": group}
        if draw(st.booleans()):
            attrs["kernel_shape"] = _ints(draw, 2, 0, 3)
        return g.node(op, [x, w], **attrs)
    if op in ("MaxPool", "AveragePool"):
        attrs = {"kernel_shape": _ints(draw, draw(st.sampled_from([2, 2, 1])), 0, 3),
                 "strides": _ints(draw, 2, -1, 3), "pads": _ints(draw, 4, -1, 3),
                 "ceil_mode": draw(st.sampled_from([0, 1]))}
        if op == "AveragePool":
            attrs["count_include_pad"] = draw(st.sampled_from([0, 1]))
        return g.node(op, [x], **attrs)
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return g.node(op, [x])
    if op in ("MatMul", "Gemm"):
        b = g.const(np.full(_shape(draw, 1, 3), 0.5, np.float32))
        if op == "MatMul":
            return g.node(op, [x, b])
        return g.node(op, [x, b], transA=draw(st.sampled_from([0, 1])),
                      transB=draw(st.sampled_from([0, 1, 2])), alpha=0.5)
    if op == "Slice":
        n = draw(st.integers(1, 2))
        arrays = [_ints(draw, n, -4, 4), _ints(draw, n, -4, 6), _ints(draw, n, -rank - 1, rank),
                  _ints(draw, n, -1, 2)]
        return g.node(op, [x] + [g.const(np.array(a, np.int64)) for a in arrays])
    if op == "Pad":
        pads = _ints(draw, 2 * draw(st.integers(rank - 1, rank + 1)), -1, 2)
        return g.node(op, [x, g.const(np.array(pads, np.int64))])
    if op == "Split":
        return g.node(op, [x], outputs=2, axis=axis)
    if op == "Expand":
        target = _ints(draw, draw(st.integers(0, 4)), -1, 3)
        return g.node(op, [x, g.const(np.array(target, np.int64))])
    raise AssertionError(op)


@st.composite
def onnx_graphs(draw):
    """(model, feed): a chain (with occasional reuse of an earlier value) of 1-4 nodes."""
    g = _Graph()
    elem = draw(st.sampled_from([TensorProto.FLOAT] * 6 + [TensorProto.DOUBLE,
                                                           TensorProto.INT64]))
    shape = _shape(draw, 1, 4)
    rng = np.random.default_rng(draw(st.integers(0, 3)))
    x = rng.uniform(0.25, 2.0, shape)
    feed = {"x": x.astype(_DTYPES[elem]) if elem != TensorProto.INT64
            else np.round(x * 3).astype(np.int64)}
    values, rank = ["x"], len(shape)
    for _ in range(draw(st.integers(1, 4))):
        # Ranks are guesses after the first node: wrong guesses feed invalid axes on purpose.
        values.append(_add_node(draw, g, values[-1], rank, values[:-1]))
        rank = max(0, rank + draw(st.integers(-1, 1)))
    graph = helper.make_graph(g.nodes, "fuzz", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_empty_tensor_value_info(values[-1])], g.inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = 8
    return proto, feed


def _text(proto) -> str:
    return onnx.printer.to_text(proto.graph)


def _onnxruntime(proto, feed):
    """(outputs, None) or (None, the error): onnxruntime may refuse an invalid graph."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        return session.run(None, feed), None
    except Exception as err:  # onnxruntime's own exception types vary by version
        return None, err


def _not_implemented(err) -> bool:
    """onnxruntime lacks a kernel for a valid type combination (e.g. Relu on int64): it says
    nothing about whether the graph is valid."""
    text = str(err)
    return "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text


def check_graph(proto, feed) -> str:
    """Import, build and run ``proto``; assert the outcome is acceptable; return its kind."""
    expected, ort_error = _onnxruntime(proto, feed)
    try:
        with np.errstate(all="ignore"):
            lib = autotune.build(load_model(proto), target=TARGET)
            got = lib.run(feed)
    except PROJECT_ERRORS as err:
        # A typed error is a refusal; where onnxruntime runs the graph, refusing it is a gap.
        assert ort_error is not None, (
            f"onnxruntime runs this graph, the project refuses it: {type(err).__name__}: "
            f"{err}\n{_text(proto)}")
        return "typed error"
    except Exception as err:
        raise AssertionError(f"raw {type(err).__name__} from the project: {err}\n"
                             f"{_text(proto)}") from err
    if ort_error is not None:
        assert _not_implemented(ort_error), (
            f"the project accepted a graph onnxruntime refuses ({ort_error})\n"
            f"{_text(proto)}")
        return "accepted (onnxruntime has no kernel)"
    (name,) = got
    want, have = expected[0], got[name]
    assert have.shape == want.shape and have.dtype == want.dtype, (
        f"{have.dtype}{list(have.shape)} vs onnxruntime's {want.dtype}{list(want.shape)}\n"
        f"{_text(proto)}")
    try:
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_text(proto)}") from None
    return "matches onnxruntime"


@_SETTINGS
@given(onnx_graphs())
def test_random_onnx_graphs_give_typed_errors_or_onnxruntime_results(case):
    check_graph(*case)
