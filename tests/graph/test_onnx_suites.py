"""ONNX's model suites (``onnx/backend/test/data``) through the importer, build_model and the
executor, held to ``autotune.frontends.onnx_suites``:

* every case of pytorch-converted and pytorch-operator passes, or is refused and listed
  (an out-of-scope operator or a known failure); none is wrong or crashes, and a listed case
  that passes fails the test, so that the list stays true;
* the nine light model-zoo graphs, with random weights, match onnxruntime within 1e-4 of the
  output's scale, and as shipped reproduce their stored outputs (``slow``: 224 x 224 builds);
* the operators these suites needed (conv3d, max_pool_nd, avg_pool_nd, lrn) against numpy
  written out here and, through their ONNX nodes, against onnxruntime.
"""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from autotune.frontends import onnx_suites  # noqa: E402
from autotune.frontends.onnx import from_onnx  # noqa: E402
from autotune.graph import FrontendError, GraphBuilder  # noqa: E402
from autotune.graph.build import build_model  # noqa: E402

from .helpers import TARGET  # noqa: E402
from .onnx_models import run_onnxruntime  # noqa: E402

_PYTORCH = [(suite, name) for suite in ("pytorch-converted", "pytorch-operator")
            for name in onnx_suites.case_names(suite)]


# ---------------------------------------------------------------------------------------------
# the suites
# ---------------------------------------------------------------------------------------------

def _check(suite: str, name: str) -> None:
    result = onnx_suites.run(suite, name, TARGET)
    assert result.status not in ("wrong", "crash"), \
        f"{suite}/{name}: {result.status} {result.error_type or ''} {result.message}"
    if result.status == "refused":
        why = onnx_suites.explain_refusal(suite, name)
        assert why is not None, \
            f"{suite}/{name}: refused, on no list: {result.error_type}: {result.message}"
    else:
        assert name not in onnx_suites.KNOWN_FAILURES, \
            f"{suite}/{name} passes; remove it from onnx_suites.KNOWN_FAILURES"


@pytest.mark.parametrize("suite,name", _PYTORCH, ids=[f"{s}/{n}" for s, n in _PYTORCH])
def test_pytorch_case_passes_or_is_listed(suite, name):
    _check(suite, name)


def test_pytorch_suites_pass_at_95_percent():
    """The listed refusals are at most 5% of each suite (the case tests hold the lists
    true: every other case passes)."""
    for suite in ("pytorch-converted", "pytorch-operator"):
        names = onnx_suites.case_names(suite)
        listed = [n for n in names if onnx_suites.explain_refusal(suite, n)]
        assert len(names) > 30
        assert (len(names) - len(listed)) / len(names) >= 0.95, (suite, listed)


def test_known_failures_name_real_cases():
    names = {n for suite in onnx_suites.SUITES for n in onnx_suites.case_names(suite)}
    assert len(names) == sum(len(onnx_suites.case_names(s)) for s in onnx_suites.SUITES)
    assert set(onnx_suites.KNOWN_FAILURES) <= names
    assert all(onnx_suites.KNOWN_FAILURES.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", onnx_suites.case_names("light"))
def test_light_model_matches_onnxruntime(name):
    _check("light", name)
    assert onnx_suites.shipped_output_problem(name, TARGET) is None


def test_light_suite_has_nine_models():
    assert len(onnx_suites.case_names("light")) == 9


def test_random_weights_replace_every_constant_weight():
    proto = onnx.load(onnx_suites.data_dir("light") + "/light_bvlc_alexnet.onnx")
    shapes = {n.output[0]: [int(d) for d in onnx.numpy_helper.to_array(next(
        t for t in proto.graph.initializer if t.name == n.input[0]))]
        for n in proto.graph.node if n.op_type == "ConstantOfShape"}
    changed = onnx_suites.random_weights(proto, seed=3)
    assert not [n for n in changed.graph.node if n.op_type == "ConstantOfShape"]
    added = {t.name: onnx.numpy_helper.to_array(t) for t in changed.graph.initializer
             if t.name in shapes}
    assert {k: list(v.shape) for k, v in added.items()} == shapes
    conv1 = added["conv1_w_0"]  # He's scale: 2 / (3 * 11 * 11)
    assert abs(conv1.std() - np.sqrt(2 / 363)) < 0.1 * np.sqrt(2 / 363)
    again = onnx_suites.random_weights(proto, seed=3)
    assert onnx.numpy_helper.to_array(again.graph.initializer[-1]).tobytes() == \
        onnx.numpy_helper.to_array(changed.graph.initializer[-1]).tobytes()


def test_light_cases_compare_the_logits_too():
    proto = onnx.load(onnx_suites.data_dir("light") + "/light_resnet50.onnx")
    exposed = onnx_suites.with_logits(proto)
    softmax = next(n for n in proto.graph.node if n.op_type == "Softmax")
    assert [v.name for v in exposed.graph.output] == \
        [proto.graph.output[0].name, softmax.input[0]]
    assert len(proto.graph.output) == 1  # the copy changed, not the model


@pytest.mark.parametrize("name", onnx_suites.case_names("light"))
def test_stored_light_output_does_not_depend_on_the_input(name):
    """The files hold no input for their stored output; onnxruntime gives that output from
    ones and from :func:`shipped_input` alike, so the check of the shipped model may feed
    it any input."""
    folder = onnx_suites.data_dir("light")
    proto = onnx.load(f"{folder}/{name}.onnx")
    stored = onnx.numpy_helper.to_array(onnx.load_tensor(f"{folder}/{name}_output_0.pb"))
    initializers = {t.name for t in proto.graph.initializer}
    feed_name = next(v.name for v in proto.graph.input if v.name not in initializers)
    random_input = onnx_suites.shipped_input(name)
    for x in (np.ones_like(random_input), random_input):
        got = run_onnxruntime(proto, {feed_name: x})[proto.graph.output[0].name]
        assert onnx_suites.relative_difference(got, stored) < 1e-5


def test_relative_difference_is_scaled_by_the_reference():
    ref = np.array([0.0, 10.0, -20.0], np.float32)
    assert onnx_suites.relative_difference(ref + 0.002, ref) == pytest.approx(1e-4, rel=1e-3)
    assert onnx_suites.relative_difference(np.array([0.5]), np.zeros(1)) == 0.5
    assert onnx_suites._light_compare(ref + 0.01, ref) is not None
    assert onnx_suites._light_compare(ref + 0.001, ref) is None
    assert "shape" in onnx_suites._light_compare(ref[:2], ref)


# ---------------------------------------------------------------------------------------------
# the operators the suites needed, against numpy written here
# ---------------------------------------------------------------------------------------------

_RNG = np.random.default_rng(5)


def _build_one(op, arrays, constants=(), **attrs):
    """``op`` over graph inputs ``arrays`` (and constant operands ``constants``), built."""
    b = GraphBuilder(op)
    names = [b.input(f"x{k}", a.shape, str(a.dtype)) for k, a in enumerate(arrays)]
    names += [b.constant(c, f"c{k}") for k, c in enumerate(constants)]
    b.output(b.op(op, names, **attrs), "y")
    feeds = {f"x{k}": a for k, a in enumerate(arrays)}
    return build_model(b.build(), TARGET, warn=False).run(feeds)["y"]


def _direct_conv3d(x, w, strides, pads, dilations, groups):
    """Every output element as its own sum over the window (slow, obviously right)."""
    n, c, *size = x.shape
    k, cg, *kernel = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(pads[:3], pads[3:])))
    out_size = [(s + pads[a] + pads[3 + a] - dilations[a] * (kernel[a] - 1) - 1)
                // strides[a] + 1 for a, s in enumerate(size)]
    out = np.zeros((n, k, *out_size))
    per = k // groups
    for f, *pos in itertools.product(range(k), *(range(o) for o in out_size)):
        g = f // per
        total = np.zeros(n)
        for offset in itertools.product(*(range(e) for e in kernel)):
            at = tuple(p * s + o * d for p, s, o, d in zip(pos, strides, offset, dilations))
            total += xp[(slice(None), slice(g * cg, (g + 1) * cg)) + at] @ \
                w[(f, slice(None)) + offset]
        out[(slice(None), f) + tuple(pos)] = total
    return out


@pytest.mark.parametrize("strides,pads,dilations,groups", [
    ((1, 1, 1), (0,) * 6, (1, 1, 1), 1),
    ((2, 1, 2), (1, 0, 2, 1, 1, 0), (1, 2, 1), 2),
])
def test_conv3d_matches_a_direct_sum(strides, pads, dilations, groups):
    x = _RNG.normal(size=(2, 4, 5, 6, 7)).astype(np.float32)
    w = _RNG.normal(size=(6, 4 // groups, 2, 3, 2)).astype(np.float32)
    attrs = dict(strides=strides, pads=pads, dilations=dilations, groups=groups)
    want = _direct_conv3d(x, w, strides, pads, dilations, groups)
    np.testing.assert_allclose(_build_one("conv3d", [x], [w], **attrs), want,
                               rtol=1e-4, atol=1e-4)
    from autotune.graph.operators import get_op

    np.testing.assert_allclose(get_op("conv3d").numpy([x, w], attrs), want, rtol=1e-5,
                               atol=1e-5)


def _direct_pool(x, kernel, strides, pads, dilations, how, counted=None):
    """Each output element from the list of its window's in-bounds values; an average
    divides by the window positions inside ``counted`` ([lo, hi) per axis, default the
    input)."""
    rank = x.ndim - 2
    size = x.shape[2:]
    out_size = [(s + pads[a] + pads[rank + a] - dilations[a] * (kernel[a] - 1) - 1)
                // strides[a] + 1 for a, s in enumerate(size)]
    counted = counted or [(0, s) for s in size]
    out = np.zeros(x.shape[:2] + tuple(out_size))
    for pos in itertools.product(*(range(o) for o in out_size)):
        values, count = [], 0
        for offset in itertools.product(*(range(k) for k in kernel)):
            at = [p * s - pads[a] + o * d for a, (p, s, o, d) in
                  enumerate(zip(pos, strides, offset, dilations))]
            if all(0 <= v < s for v, s in zip(at, size)):
                values.append(x[(slice(None), slice(None)) + tuple(at)])
            count += all(lo <= v < hi for v, (lo, hi) in zip(at, counted))
        stack = np.stack(values).astype(np.float64)
        out[(slice(None), slice(None)) + pos] = stack.max(0) if how == "max" else \
            stack.sum(0) / count
    return out


@pytest.mark.parametrize("shape,kernel,strides,pads,dilations", [
    ((1, 2, 5, 6, 7), (2, 3, 2), (1, 2, 2), (1, 0, 1, 0, 1, 1), (1, 1, 2)),
    ((2, 3, 9, 8), (3, 2), (2, 1), (1, 1, 2, 0), (2, 3)),
])
def test_max_pool_nd_matches_its_windows(shape, kernel, strides, pads, dilations):
    x = _RNG.normal(size=shape).astype(np.float32)
    attrs = dict(kernel=kernel, strides=strides, pads=pads, dilations=dilations)
    np.testing.assert_array_equal(_build_one("max_pool_nd", [x], **attrs),
                                  _direct_pool(x, kernel, strides, pads, dilations, "max"))


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("shape,kernel,strides,pads,dilations,ceil_pads", [
    ((1, 2, 5, 6, 7), (2, 3, 2), (1, 2, 2), (1, 0, 1, 0, 1, 1), (1, 1, 1), (0, 0, 0)),
    ((2, 3, 9, 8), (3, 2), (2, 1), (1, 1, 2, 0), (2, 3), (0, 0)),
    ((1, 2, 6, 6), (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), (1, 1)),
])
def test_avg_pool_nd_counts_what_it_should(shape, kernel, strides, pads, dilations,
                                           ceil_pads, include):
    x = _RNG.normal(size=shape).astype(np.float32)
    rank = len(kernel)
    attrs = dict(kernel=kernel, strides=strides, pads=pads, dilations=dilations,
                 count_include_pad=include, ceil_pads=ceil_pads)
    counted = None
    if include:  # the declared pads count, the ones ceil_mode added do not
        counted = [(-pads[a], s + pads[rank + a] - ceil_pads[a])
                   for a, s in enumerate(shape[2:])]
    want = _direct_pool(x, kernel, strides, pads, dilations, "avg", counted)
    np.testing.assert_allclose(_build_one("avg_pool_nd", [x], **attrs), want, rtol=1e-5,
                               atol=1e-6)
    from autotune.graph.operators import get_op

    np.testing.assert_allclose(get_op("avg_pool_nd").numpy([x], attrs), want, rtol=1e-6)


def test_conv_transpose_nd_matches_a_scatter():
    """Each input element adds its kernel-weighted copy at its strided, dilated place."""
    x = _RNG.normal(size=(1, 3, 3, 4, 2)).astype(np.float32)
    w = _RNG.normal(size=(3, 2, 2, 3, 2)).astype(np.float32)
    strides, dilations, pads, extra = (2, 1, 3), (1, 2, 2), (1, 0, 2, 0, 1, 1), (1, 0, 2)
    full_size = [(i - 1) * s + (k - 1) * d + 1 + e for i, k, s, d, e in
                 zip(x.shape[2:], w.shape[2:], strides, dilations, extra)]
    full = np.zeros((1, 2, *full_size))
    for c, *pos in itertools.product(range(3), *(range(i) for i in x.shape[2:])):
        for offset in itertools.product(*(range(k) for k in w.shape[2:])):
            at = tuple(p * s + o * d for p, s, o, d in zip(pos, strides, offset, dilations))
            full[(0, slice(None)) + at] += x[(0, c) + tuple(pos)] * w[(c, slice(None)) + offset]
    want = full[(slice(None), slice(None)) + tuple(
        slice(pads[a], full_size[a] - pads[3 + a]) for a in range(3))]
    got = _build_one("conv_transpose_nd", [x], [w], strides=strides, pads=pads,
                     dilations=dilations, output_padding=extra)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lrn_matches_its_formula():
    x = _RNG.normal(size=(2, 7, 3, 4)).astype(np.float32)
    size, alpha, beta, bias = 4, 0.3, 0.6, 1.5
    got = _build_one("lrn", [x], size=size, alpha=alpha, beta=beta, bias=bias)
    want = np.zeros(x.shape)
    for c in range(7):
        lo, hi = max(0, c - (size - 1) // 2), min(7, c + size // 2 + 1)  # 1 before, 2 after
        total = (x[:, lo:hi].astype(np.float64) ** 2).sum(1)
        want[:, c] = x[:, c] / (bias + alpha / size * total) ** beta
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# their ONNX nodes against onnxruntime
# ---------------------------------------------------------------------------------------------

def _node_model(op, x_shape, extra=(), opset=17, **attrs):
    inits = [onnx.numpy_helper.from_array(a, f"i{k}") for k, a in enumerate(extra)]
    node = helper.make_node(op, ["x"] + [t.name for t in inits], ["y"], **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8  # what onnxruntime reads
    return proto


_NODES = {
    "lrn": ("LRN", (1, 6, 5, 5), (), dict(size=3, alpha=0.01, beta=0.75, bias=2.0)),
    "conv3d_grouped_strided": (
        "Conv", (1, 4, 6, 5, 7),
        (_RNG.normal(size=(6, 2, 3, 2, 3)).astype(np.float32),
         _RNG.normal(size=6).astype(np.float32)),
        dict(group=2, strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0], dilations=[1, 2, 1])),
    "conv3d_same_upper": (
        "Conv", (1, 2, 5, 5, 5), (_RNG.normal(size=(3, 2, 3, 3, 3)).astype(np.float32),),
        dict(auto_pad="SAME_UPPER", strides=[2, 2, 2])),
    "maxpool3d": ("MaxPool", (1, 2, 6, 7, 5), (),
                  dict(kernel_shape=[3, 2, 2], strides=[2, 2, 1], pads=[1, 0, 1, 1, 1, 0])),
    "maxpool2d_dilated_ceil": ("MaxPool", (1, 2, 9, 9), (),
                               dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2],
                                    ceil_mode=1)),
    "maxpool1d_dilated": ("MaxPool", (1, 3, 12), (),
                          dict(kernel_shape=[3], strides=[2], pads=[1, 1], dilations=[2])),
    "averagepool3d_include_pad": ("AveragePool", (1, 2, 5, 6, 7), (),
                                  dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2],
                                       pads=[1, 1, 1, 0, 1, 1], count_include_pad=1)),
    "averagepool2d_ceil": ("AveragePool", (1, 1, 6, 6), (),
                           dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "averagepool2d_ceil_include_pad": ("AveragePool", (1, 1, 6, 6), (),
                                       dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4,
                                            ceil_mode=1, count_include_pad=1)),
    "averagepool2d_dilated": ("AveragePool", (1, 2, 8, 9), (),
                              dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1],
                                   dilations=[2, 2])),
    "convtranspose3d_grouped": (
        "ConvTranspose", (1, 4, 3, 4, 3),
        (_RNG.normal(size=(4, 3, 2, 3, 2)).astype(np.float32),
         _RNG.normal(size=6).astype(np.float32)),
        dict(group=2, strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0], output_padding=[1, 0, 0])),
    "convtranspose2d_dilated": (
        "ConvTranspose", (1, 2, 5, 4), (_RNG.normal(size=(2, 3, 3, 2)).astype(np.float32),),
        dict(strides=[1, 2], dilations=[2, 3], pads=[1, 0, 0, 2])),
    "convtranspose2d_output_shape_beyond_full": (
        "ConvTranspose", (1, 1, 3, 3), (_RNG.normal(size=(1, 2, 3, 3)).astype(np.float32),),
        dict(strides=[3, 2], output_shape=[10, 8])),
    "lppool2d_p3": ("LpPool", (1, 2, 7, 6), (),
                    dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=3)),
    "lppool1d_p2": ("LpPool", (1, 3, 9), (), dict(kernel_shape=[3], strides=[2], p=2)),
    "prelu_per_channel": ("PRelu", (2, 3, 4, 5), (_RNG.normal(size=(3, 1, 1)).astype(
        np.float32),), {}),
}


@pytest.mark.parametrize("case", sorted(_NODES))
def test_node_matches_onnxruntime(case):
    op, shape, extra, attrs = _NODES[case]
    proto = _node_model(op, shape, extra, opset=19, **attrs)
    x = _RNG.normal(size=shape).astype(np.float32)
    want = run_onnxruntime(proto, {"x": x})["y"]
    got = build_model(from_onnx(proto), TARGET, warn=False).run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lrn_needs_its_size():
    proto = _node_model("LRN", (1, 3, 4, 4))
    with pytest.raises(FrontendError, match="attribute size is required"):
        from_onnx(proto)


def test_benchmark_prints_each_suite(capsys):
    from benchmarks import onnx_suites as runner

    assert runner.main(["--suite", "pytorch-operator", "--match", "operator_add_broadcast"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["pytorch-operator"]
    part = report["pytorch-operator"]
    assert (part["passed"], part["total"], part["failing"]) == (1, 1, [])
    assert part["cases"] == {"test_operator_add_broadcast": "pass"}
