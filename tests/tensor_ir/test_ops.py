"""The operator library: every registered operator against its numpy reference, through the
reference interpreter and through the LLVM build; te-level composition; shape errors."""
from __future__ import annotations

import math

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from tensor_ir import interp, ops, te
from tensor_ir.errors import TEError
from tensor_ir.stmt import Block
from tensor_ir.visitor import collect

RTOL = ATOL = 1e-5


def _case_params(large: bool):
    params = []
    for name, spec in ops.REGISTRY.items():
        for index, config in enumerate(spec.large_configs if large else spec.configs):
            params.append(pytest.param(name, index, id=f"{name}-{spec.config_id(config)}"))
    return params


def _config(name: str, index: int, large: bool = False) -> tuple[ops.OpSpec, dict]:
    spec = ops.get(name)
    return spec, dict((spec.large_configs if large else spec.configs)[index])


def _block_names(func) -> list[str]:
    return [b.name for b in collect(func.body, Block) if b.name != "root"]


# ---------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------

def test_registry_lists_every_operator_family():
    expected = {
        "matmul", "batch_matmul", "dense", "conv2d_nchw", "conv2d_nhwc",
        "depthwise_conv2d_nchw", "conv2d_transpose_nchw", "max_pool2d", "avg_pool2d",
        "global_avg_pool2d", "softmax", "log_softmax", "layer_norm", "batch_norm", "add",
        "subtract", "multiply", "divide", "relu", "gelu", "sigmoid", "tanh", "clip", "sum",
        "mean", "max", "min", "transpose", "reshape", "pad", "concatenate",
    }
    assert set(ops.REGISTRY) == expected


@pytest.mark.parametrize("name", sorted(ops.REGISTRY))
def test_registry_configs_cover_odd_and_unit_extents(name):
    spec = ops.get(name)
    assert len(spec.configs) >= 3
    extents = set()
    for config in spec.configs:
        func = spec.func(config)
        for buf in func.params:
            extents.update(buf.const_shape)
    assert 1 in extents, f"{name}: no config has an extent of 1"
    assert any(e & (e - 1) for e in extents), f"{name}: every extent is a power of two"


def test_registry_get_unknown_name():
    with pytest.raises(TEError, match="unknown operator 'conv3d'"):
        ops.get("conv3d")


def test_registry_inputs_are_seeded_and_ranged():
    spec = ops.get("batch_norm")
    func = spec.func(spec.configs[0])
    first = spec.inputs(func, seed=3)
    again = spec.inputs(func, seed=3)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert [a.dtype for a in first] == [np.float32] * 5
    assert first[2].min() >= 0.5  # moving variance stays positive
    assert spec.output(func).shape == func.params[-1].const_shape


# ---------------------------------------------------------------------------------------------
# numerics: interpreter and LLVM against numpy
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,index", _case_params(large=False))
def test_interpreter_matches_reference(name, index):
    spec, config = _config(name, index)
    func = spec.func(config)
    inputs = spec.inputs(func, seed=index)
    expected = spec.expected(config, inputs)
    out = spec.output(func)
    interp.run(func, *inputs, out)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    (evaluated,) = interp.evaluate(func, *inputs)
    np.testing.assert_allclose(evaluated, expected, rtol=RTOL, atol=ATOL)


def _build():
    import autotune  # noqa: PLC0415 - the higher package is only needed by these tests

    return autotune.build


@pytest.mark.parametrize("name,index", _case_params(large=False))
def test_llvm_matches_reference(name, index):
    build = _build()
    spec, config = _config(name, index)
    func = spec.func(config)
    inputs = spec.inputs(func, seed=index)
    out = spec.output(func)
    build(func)(*inputs, out)
    np.testing.assert_allclose(out, spec.expected(config, inputs), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name,index", _case_params(large=True))
def test_llvm_matches_reference_large(name, index):
    build = _build()
    spec, config = _config(name, index, large=True)
    func = spec.func(config)
    inputs = spec.inputs(func, seed=100 + index)
    out = spec.output(func)
    build(func)(*inputs, out)
    np.testing.assert_allclose(out, spec.expected(config, inputs), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# te level: composing several operators into one PrimFunc
# ---------------------------------------------------------------------------------------------

def _random(rng, shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype("float32")


def test_conv_batch_norm_relu_compose_into_one_func():
    rng = np.random.default_rng(0)
    data = te.placeholder((1, 3, 6, 5), name="data")
    weight = te.placeholder((4, 3, 3, 3), name="weight")
    stats = [te.placeholder((4,), name=n) for n in ("mean", "var", "gamma", "beta")]
    conv = ops.te_conv2d_nchw(data, weight, stride=1, padding=1)
    bn = ops.te_batch_norm(conv, *stats)
    out = ops.te_relu(bn)
    func = te.create_prim_func([data, weight, *stats, out], name="fused")
    assert _block_names(func) == ["pad_data", "conv2d_nchw", "batch_norm", "relu"]

    x, w = _random(rng, (1, 3, 6, 5)), _random(rng, (4, 3, 3, 3))
    mean, var = _random(rng, (4,)), _random(rng, (4,), 0.5, 2.0)
    gamma, beta = _random(rng, (4,)), _random(rng, (4,))
    (got,) = interp.evaluate(func, x, w, mean, var, gamma, beta)
    conv_ref = ops.ref_conv2d_nchw(x, w, padding=1)
    expected = ops.ref_relu(ops.ref_batch_norm(conv_ref, mean, var, gamma, beta))
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_dense_gelu_and_scalar_operands_compose():
    rng = np.random.default_rng(1)
    x = te.placeholder((3, 5), name="x")
    w = te.placeholder((4, 5), name="w")
    b = te.placeholder((4,), name="b")
    y = ops.te_gelu(ops.te_dense(x, w, b))
    z = ops.te_subtract(1.0, ops.te_multiply(y, 2))  # numbers on either side
    func = te.create_prim_func([x, w, b, z])
    xs, ws, bs = _random(rng, (3, 5)), _random(rng, (4, 5)), _random(rng, (4,))
    (got,) = interp.evaluate(func, xs, ws, bs)
    expected = 1.0 - 2.0 * ops.ref_gelu(ops.ref_dense(xs, ws, bs))
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_softmax_of_batch_matmul_composes():
    rng = np.random.default_rng(2)
    q = te.placeholder((2, 3, 4), name="q")
    k = te.placeholder((2, 5, 4), name="k")
    scores = ops.te_batch_matmul(q, k, transpose_b=True)
    probs = ops.te_softmax(ops.te_transpose(scores, (0, 2, 1)), axis=1)
    func = te.create_prim_func([q, k, probs])
    qs, ks = _random(rng, (2, 3, 4)), _random(rng, (2, 5, 4))
    (got,) = interp.evaluate(func, qs, ks)
    expected = ops.ref_softmax(
        np.transpose(ops.ref_batch_matmul(qs, ks, transpose_b=True), (0, 2, 1)), axis=1)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)


def test_batch_matmul_broadcasts_a_batch_of_one():
    rng = np.random.default_rng(3)
    a = te.placeholder((1, 3, 4), name="a")
    b = te.placeholder((5, 4, 2), name="b")
    func = te.create_prim_func([a, b, ops.te_batch_matmul(a, b)])
    av, bv = _random(rng, (1, 3, 4)), _random(rng, (5, 4, 2))
    (got,) = interp.evaluate(func, av, bv)
    assert got.shape == (5, 3, 2)
    np.testing.assert_allclose(got, ops.ref_batch_matmul(av, bv), rtol=RTOL, atol=ATOL)


def test_layer_norm_without_affine_and_float64():
    rng = np.random.default_rng(4)
    data = te.placeholder((3, 4), "float64", name="data")
    func = te.create_prim_func([data, ops.te_layer_norm(data)])
    x = rng.uniform(-2, 2, size=(3, 4))
    (got,) = interp.evaluate(func, x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ops.ref_layer_norm(x), rtol=1e-12, atol=1e-12)


def test_integer_elementwise_and_reductions():
    a = te.placeholder((2, 3), "int32", name="a")
    func = te.create_prim_func([a, ops.te_max(ops.te_relu(ops.te_add(a, 1)), axis=1)])
    x = np.array([[-5, 2, 0], [-3, -4, -9]], dtype=np.int32)
    (got,) = interp.evaluate(func, x)
    np.testing.assert_array_equal(got, [3, 0])


def test_full_reduction_gives_rank_zero_output():
    func = ops.sum((2, 3))
    assert func.params[-1].const_shape == ()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = interp.evaluate(func, x)
    assert got.shape == () and got == 15.0


# ---------------------------------------------------------------------------------------------
# stage structure
# ---------------------------------------------------------------------------------------------

def test_padding_stage_only_when_padded():
    assert _block_names(ops.conv2d_nchw(1, 2, 5, 5, 3, 3, 3)) == ["conv2d_nchw"]
    assert _block_names(ops.conv2d_nchw(1, 2, 5, 5, 3, 3, 3, padding=1)) == [
        "pad_data", "conv2d_nchw"]


def test_softmax_is_four_stages_and_log_softmax_three():
    assert _block_names(ops.softmax((2, 3))) == [
        "T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax"]
    assert len(_block_names(ops.log_softmax((2, 3)))) == 3


def test_matmul_params_are_inputs_then_output():
    func = ops.matmul(3, 4, 5, transpose_a=True)
    assert [b.const_shape for b in func.params] == [(5, 3), (5, 4), (3, 4)]
    func = ops.conv2d_nchw(1, 4, 8, 8, 6, 3, 3, stride=2, padding=1, groups=2)
    assert [b.const_shape for b in func.params] == [(1, 4, 8, 8), (6, 2, 3, 3), (1, 6, 4, 4)]


def test_erf_numpy_matches_math_erf():
    xs = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(ops.erf_numpy(xs), [math.erf(v) for v in xs], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# shape errors
# ---------------------------------------------------------------------------------------------

def _tensor(shape, dtype="float32", name="t"):
    return te.placeholder(shape, dtype, name=name)


SHAPE_ERRORS = [
    ("matmul K", lambda: ops.te_matmul(_tensor((3, 4)), _tensor((5, 2))),
     r"matmul: reduction extents differ: A gives K=4, B gives K=5"),
    ("matmul rank", lambda: ops.te_matmul(_tensor((3, 4, 1)), _tensor((4, 2))),
     r"matmul: A must have rank 2"),
    ("matmul extent", lambda: ops.matmul(0, 3, 4), r"matmul: M, N, K must be positive"),
    ("batch_matmul batch", lambda: ops.te_batch_matmul(_tensor((2, 3, 4)), _tensor((3, 4, 5))),
     r"batch_matmul: batch extents 2 and 3 differ"),
    ("dense K", lambda: ops.te_dense(_tensor((3, 4)), _tensor((5, 3))),
     r"dense: reduction extents differ"),
    ("dense bias", lambda: ops.te_dense(_tensor((3, 4)), _tensor((5, 4)), _tensor((4,))),
     r"dense: bias must have shape \(5,\)"),
    ("dtype mismatch", lambda: ops.te_matmul(_tensor((3, 4)), _tensor((4, 2), "float64")),
     r"matmul: inputs have different dtypes"),
    ("conv groups", lambda: ops.conv2d_nchw(1, 6, 5, 5, 4, 3, 3, groups=4),
     r"conv2d_nchw: input channels 6 are not divisible by groups=4"),
    ("conv out groups", lambda: ops.conv2d_nchw(1, 4, 5, 5, 3, 3, 3, groups=2),
     r"conv2d_nchw: output channels 3 are not divisible by groups=2"),
    ("conv weight channels",
     lambda: ops.te_conv2d_nchw(_tensor((1, 4, 5, 5)), _tensor((2, 3, 3, 3))),
     r"conv2d_nchw: weight has 3 input channels per group"),
    ("conv output size", lambda: ops.conv2d_nchw(1, 2, 3, 3, 2, 5, 5),
     r"conv2d_nchw: output height is not positive"),
    ("conv dilated output size", lambda: ops.conv2d_nhwc(1, 5, 5, 2, 2, 3, 3, dilation=3),
     r"conv2d_nhwc: output height is not positive"),
    ("conv padding form", lambda: ops.conv2d_nchw(1, 2, 5, 5, 2, 3, 3, padding=(1, 2, 3)),
     r"conv2d_nchw: padding must be an int, \(pad_h, pad_w\)"),
    ("conv negative padding", lambda: ops.conv2d_nchw(1, 2, 5, 5, 2, 3, 3, padding=-1),
     r"conv2d_nchw: padding must be non-negative"),
    ("conv stride", lambda: ops.conv2d_nchw(1, 2, 5, 5, 2, 3, 3, stride=0),
     r"conv2d_nchw: stride must hold ints >= 1"),
    ("depthwise channels",
     lambda: ops.te_depthwise_conv2d_nchw(_tensor((1, 4, 5, 5)), _tensor((3, 1, 3, 3))),
     r"depthwise_conv2d_nchw: weight has 3 channels but data has 4"),
    ("transpose output_padding",
     lambda: ops.conv2d_transpose_nchw(1, 2, 4, 4, 2, 3, 3, stride=2, output_padding=2),
     r"conv2d_transpose_nchw: output_padding \(2, 2\) must be smaller than the stride"),
    ("transpose crop", lambda: ops.conv2d_transpose_nchw(1, 2, 1, 1, 2, 1, 1, padding=1),
     r"conv2d_transpose_nchw: output size .* is not positive"),
    ("pool padding", lambda: ops.max_pool2d(1, 1, 5, 5, kernel=2, padding=2),
     r"max_pool2d: padding .* must be smaller than the kernel"),
    ("pool output size", lambda: ops.avg_pool2d(1, 1, 2, 2, kernel=3),
     r"avg_pool2d: output height is not positive"),
    ("softmax axis", lambda: ops.softmax((2, 3), axis=2),
     r"softmax: axis 2 is out of range for rank 2"),
    ("layer_norm leading axis", lambda: ops.layer_norm((2, 3, 4), axis=1),
     r"layer_norm: axis 1 must name the trailing axes"),
    ("layer_norm gamma",
     lambda: ops.te_layer_norm(_tensor((2, 3)), _tensor((2,)), None),
     r"layer_norm: gamma must have shape \(3,\)"),
    ("batch_norm stats", lambda: ops.te_batch_norm(
        _tensor((2, 3, 4, 4)), _tensor((4,)), _tensor((3,)), _tensor((3,)), _tensor((3,))),
     r"batch_norm: mean must have shape \(3,\)"),
    ("broadcast", lambda: ops.add((2, 3), (4, 3)),
     r"add: shapes \(2, 3\) and \(4, 3\) do not broadcast"),
    ("divide ints", lambda: ops.te_divide(_tensor((2,), "int32"), 2),
     r"divide: needs float operands"),
    ("clip bounds", lambda: ops.clip((3,), 1.0, -1.0),
     r"clip: a_min 1.0 is greater than a_max -1.0"),
    ("gelu int", lambda: ops.te_gelu(_tensor((2,), "int32")), r"gelu: needs a float input"),
    ("reduce axis", lambda: ops.sum((2, 3), axis=-3),
     r"sum: axis -3 is out of range for rank 2"),
    ("reduce duplicate axis", lambda: ops.mean((2, 3), axis=(1, -1)),
     r"mean: axis \(1, -1\) names an axis twice"),
    ("reduce no axis", lambda: ops.max((2, 3), axis=()),
     r"max: axis \(\) names no axis"),
    ("transpose perm", lambda: ops.transpose((2, 3, 4), axes=(0, 0, 1)),
     r"transpose: axes \(0, 0, 1\) is not a permutation"),
    ("reshape size", lambda: ops.reshape((2, 3), (4, 2)),
     r"reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4, 2\)"),
    ("reshape infer", lambda: ops.reshape((2, 3), (4, -1)),
     r"reshape: cannot infer -1"),
    ("pad negative", lambda: ops.pad((2, 3), ((1, -1), (0, 0))),
     r"pad: pad_width .* must be non-negative"),
    ("concatenate shapes", lambda: ops.concatenate([(2, 3), (2, 4)], axis=0),
     r"concatenate: shapes \(2, 3\) and \(2, 4\) differ outside axis 0"),
    ("concatenate axis", lambda: ops.concatenate([(2, 3), (2, 4)], axis=2),
     r"concatenate: axis 2 is out of range for rank 2"),
    ("shape entries", lambda: ops.relu((2, 0)), r"relu: shape must hold positive ints"),
    ("dtype name", lambda: ops.relu((2,), dtype="float13"), r"relu: unknown dtype"),
]


@pytest.mark.parametrize("make,pattern", [pytest.param(m, p, id=i) for i, m, p in SHAPE_ERRORS])
def test_shape_errors_raise_teerror(make, pattern):
    with pytest.raises(TEError, match=pattern):
        make()


def test_references_check_attributes_too():
    with pytest.raises(TEError, match="ref_max_pool2d: padding"):
        ops.ref_max_pool2d(np.zeros((1, 1, 4, 4), np.float32), kernel=2, padding=3)


# ---------------------------------------------------------------------------------------------
# random convolution and pooling attributes (hypothesis), through the interpreter
# ---------------------------------------------------------------------------------------------

def _run_case(func, inputs, expected):
    (got,) = interp.evaluate(func, *inputs)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    channels=st.integers(1, 3), groups=st.integers(1, 2), hw=st.tuples(st.integers(1, 7),
                                                                        st.integers(1, 7)),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padding=st.tuples(*[st.integers(0, 2)] * 4), nhwc=st.booleans(), seed=st.integers(0, 9))
def test_conv2d_random_attributes(channels, groups, hw, kernel, stride, dilation, padding, nhwc,
                                  seed):
    c, k = channels * groups, 2 * groups
    (h, w), (r, s) = hw, kernel
    fits = all(size + a + b >= d * (kk - 1) + 1 for size, a, b, d, kk in (
        (h, padding[0], padding[2], dilation[0], r), (w, padding[1], padding[3], dilation[1], s)))
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if not fits:
        with pytest.raises(TEError, match="output (height|width) is not positive"):
            ops.conv2d_nchw(1, c, h, w, k, r, s, **attrs)
        return
    if nhwc:
        spec, config = ops.get("conv2d_nhwc"), dict(N=1, H=h, W=w, C=c, K=k, R=r, S=s, **attrs)
    else:
        spec, config = ops.get("conv2d_nchw"), dict(N=1, C=c, H=h, W=w, K=k, R=r, S=s, **attrs)
    func = spec.func(config)
    inputs = spec.inputs(func, seed=seed)
    _run_case(func, inputs, spec.expected(config, inputs))


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    hw=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.tuples(*[st.integers(0, 3)] * 4),
    output_padding=st.tuples(st.integers(0, 2), st.integers(0, 2)), seed=st.integers(0, 9))
def test_conv2d_transpose_random_attributes(hw, kernel, stride, padding, output_padding, seed):
    (h, w), (r, s) = hw, kernel
    output_padding = (min(output_padding[0], stride[0] - 1), min(output_padding[1], stride[1] - 1))
    oh = (h - 1) * stride[0] - padding[0] - padding[2] + r + output_padding[0]
    ow = (w - 1) * stride[1] - padding[1] - padding[3] + s + output_padding[1]
    config = dict(N=1, C=2, H=h, W=w, K=3, R=r, S=s, stride=stride, padding=padding,
                  output_padding=output_padding)
    spec = ops.get("conv2d_transpose_nchw")
    if oh <= 0 or ow <= 0:
        with pytest.raises(TEError, match="output size .* is not positive"):
            spec.func(config)
        return
    func = spec.func(config)
    assert func.params[-1].const_shape == (1, 3, oh, ow)
    inputs = spec.inputs(func, seed=seed)
    _run_case(func, inputs, spec.expected(config, inputs))


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    hw=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.tuples(*[st.integers(0, 2)] * 4), kind=st.sampled_from(["max", "avg", "avg_ex"]),
    seed=st.integers(0, 9))
def test_pool2d_random_attributes(hw, kernel, stride, padding, kind, seed):
    (h, w), (kh, kw) = hw, kernel
    # Keep padding smaller than the kernel (the operator's precondition).
    padding = (min(padding[0], kh - 1), min(padding[1], kw - 1), min(padding[2], kh - 1),
               min(padding[3], kw - 1))
    hypothesis.assume(h + padding[0] + padding[2] >= kh and w + padding[1] + padding[3] >= kw)
    config = dict(N=1, C=2, H=h, W=w, kernel=kernel, stride=stride, padding=padding)
    if kind == "max":
        spec = ops.get("max_pool2d")
    else:
        spec = ops.get("avg_pool2d")
        config["count_include_pad"] = kind == "avg"
    func = spec.func(config)
    inputs = spec.inputs(func, seed=seed)
    _run_case(func, inputs, spec.expected(config, inputs))
