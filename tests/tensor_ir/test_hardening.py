"""Hardening: comparisons as IR, bounds proofs, division by zero, NaN through min/max, targets,
reductions inside expressions -- each checked against numpy through the interpreter and LLVM."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tensor_ir import interp, te
from tensor_ir.codegen import CodegenOptions, codegen, compile_module
from tensor_ir.codegen.llvm import symbol_name
from tensor_ir.errors import TEError
from tensor_ir.expr import Cmp, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower


def llvm_run(func: PrimFunc, *arrays) -> None:
    """Compile ``func`` with LLVM and call it on ``arrays`` (outputs written in place)."""
    func = lower(func)
    compiled = compile_module(codegen(func, options=CodegenOptions()))
    jit = compiled.jit()
    addr = jit.function_address(symbol_name(func.name))
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(arrays)))
    proto(addr)(*[a.ctypes.data for a in arrays])


def both(func: PrimFunc, inputs: list, out_shape, out_dtype="float32") -> tuple:
    """Outputs of the interpreter and of the LLVM build for the same inputs."""
    by_interp = np.zeros(out_shape, out_dtype)
    interp.run(func, *inputs, by_interp)
    by_llvm = np.zeros(out_shape, out_dtype)
    llvm_run(func, *[np.ascontiguousarray(a) for a in inputs], by_llvm)
    return by_interp, by_llvm


# ---------------------------------------------------------------------------------------------
# 0. == and != build comparison nodes
# ---------------------------------------------------------------------------------------------

def _dilate(n: int, stride: int, offset: int):
    """out[h] = A[(h - offset) // stride] where (h - offset) is a multiple of stride, else 0."""
    A = te.placeholder((n,), name="A")
    size = (n - 1) * stride + 1 + offset
    B = te.compute(
        (size,),
        lambda h: te.if_then_else(
            te.all(h >= offset, (h - offset) % stride == 0),
            A[te.floordiv(h - offset, stride)], 0.0),
        name="B")
    return te.create_prim_func([A, B]), size


def test_equality_in_condition_builds_a_comparison():
    func, size = _dilate(5, 3, 2)
    a = np.arange(1, 6, dtype="float32")
    want = np.zeros(size, "float32")
    want[2::3] = a
    got_interp, got_llvm = both(func, [a], (size,))
    np.testing.assert_array_equal(got_interp, want)
    np.testing.assert_array_equal(got_llvm, want)


def test_equality_node_is_python_structural_equality():
    i, j = te.var("i"), te.var("j")
    node = (i + 1) == (i + 1)
    assert isinstance(node, Cmp) and node.op == "=="
    assert bool(node) and not bool((i + 1) != (i + 1))
    assert not bool(i == j) and bool(i != j) and bool(i == i)
    # Containers and hashing keep the structural meaning.
    assert {i + 1: "x"}[i + 1] == "x"
    assert (i * 2) in [i + 2, i * 2]
    assert (i + 1) not in [j + 1]
    assert IntImm(3) != 3  # a number is not an IR node, whatever its value
    assert not bool(IntImm(3, "int32") == IntImm(3, "int64"))
    # Structural equality of statements (dataclass ==) still works through expressions.
    assert te.const(2.0) == te.const(2.0)
    # The truth is not part of the node: an equal node built by te.equal is the same IR.
    assert te.equal(i, j) == (i == j)
    with pytest.raises(TypeError):
        bool(te.equal(i, j))


def test_not_equal_in_if_then_else():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: te.if_then_else(i != j, A[i, j], 0.0), name="B")
    func = te.create_prim_func([A, B])
    a = np.arange(16, dtype="float32").reshape(4, 4) + 1
    got_interp, got_llvm = both(func, [a], (4, 4))
    want = a * (1 - np.eye(4, dtype="float32"))
    np.testing.assert_array_equal(got_interp, want)
    np.testing.assert_array_equal(got_llvm, want)


@pytest.mark.parametrize("build", [
    lambda A, h: te.all(h >= 0, False),
    lambda A, h: te.any(True, h >= 0),
    lambda A, h: te.if_then_else(h is None, A[h], 0.0),
    lambda A, h: te.sum(A[h], axis=te.reduce_axis(1, "r"), where=False),
])
def test_python_bool_is_refused_with_a_hint(build):
    A = te.placeholder((4,), name="A")
    with pytest.raises(TEError, match="te.equal"):
        te.compute((4,), lambda h: build(A, h), name="B")


def test_python_bool_body_is_refused():
    with pytest.raises(TEError, match="stage B.*te.equal"):
        te.compute((4,), lambda h: h is None, name="B")


def test_var_equality_is_identity():
    a, b = Var("x"), Var("x")
    assert not bool(a == b)
    assert len({a, b}) == 2


# ---------------------------------------------------------------------------------------------
# 1. index ranges are proven at definition time
# ---------------------------------------------------------------------------------------------

def test_provably_out_of_bounds_load_is_refused():
    A = te.placeholder((10, 4), name="A")
    B = te.compute((10, 4), lambda i, j: A[i + 1, j], name="B")
    with pytest.raises(TEError, match=r"stage B: load A\[i \+ 1, j\].*dimension 0.*"
                                      r"ranges over \[1, 10\].*extent is 10"):
        te.create_prim_func([A, B])


def test_out_of_bounds_reduction_read_is_refused():
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis(7, name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    with pytest.raises(TEError, match=r"stage B.*dimension 1 of buffer A.*\[0, 6\].*extent is 6"):
        te.create_prim_func([A, B])


def test_negative_index_is_refused():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i - 1], name="B")
    with pytest.raises(TEError, match=r"ranges over \[-1, 6\]"):
        te.create_prim_func([A, B])


def test_guarded_loads_are_accepted_without_a_new_guard():
    A = te.placeholder((8,), name="A")
    B = te.compute((10,), lambda i: te.if_then_else(te.all(i >= 1, i - 1 < 8), A[i - 1], 0.0),
                   name="B")
    # A two-variable guard: only the affine fact about y * 2 + r - 1 bounds the index.
    k = te.reduce_axis(3, name="r")
    C = te.compute((4,), lambda y: te.sum(
        te.if_then_else(te.all(y * 2 + k - 1 >= 0, y * 2 + k - 1 < 8), A[y * 2 + k - 1], 0.0),
        axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    text = str(func)
    assert "0 <=" not in text  # no guard was added
    a = np.arange(1, 9, dtype="float32")
    b = np.zeros(10, "float32")
    c = np.zeros(4, "float32")
    interp.run(func, a, b, c)
    np.testing.assert_array_equal(b, np.concatenate([[0], a, [0]]))
    padded = np.concatenate([[0], a, [0, 0]])
    np.testing.assert_array_equal(c, [padded[2 * y: 2 * y + 3].sum() for y in range(4)])


def test_data_dependent_index_is_checked_not_zeroed():
    # An index read from data is the caller's: outside the buffer it is an error in both
    # the interpreter and the compiled kernel (tensor_ir/codegen/checks.py), not a zero.
    from autotune.runtime.build import build
    from tensor_ir import KernelIndexError

    A = te.placeholder((5,), name="A")
    index = te.placeholder((4,), "int64", name="index")
    B = te.compute((4,), lambda i: A[index[i]], name="B")
    func = te.create_prim_func([A, index, B])
    a = np.arange(1, 6, dtype="float32")
    good = np.array([4, 0, 2, 1], "int64")
    got_interp, got_llvm = both(func, [a, good], (4,))
    np.testing.assert_array_equal(got_interp, [5, 1, 3, 2])
    np.testing.assert_array_equal(got_llvm, [5, 1, 3, 2])
    kernel = build(func)
    for bad in (5, -1):
        idx = good.copy()
        idx[2] = bad
        with pytest.raises(interp.OutOfBoundsError):
            interp.run(func, a, idx, np.zeros(4, "float32"))
        with pytest.raises(KernelIndexError) as info:
            kernel(a, idx, np.zeros(4, "float32"))
        assert (info.value.buffer, info.value.index, info.value.extent) == ("A", bad, 5)


def test_registry_operators_need_no_guard(monkeypatch):
    from tensor_ir import bounds, ops

    guarded = []
    original = bounds._Checker.load

    def spy(self, load, ctx):
        out = original(self, load, ctx)
        if out is not load:
            guarded.append((self.stage, load.buffer.name))
        return out

    monkeypatch.setattr(bounds._Checker, "load", spy)
    for spec, config in ops.cases():
        spec.func(config)
    for spec in ops.REGISTRY.values():
        for config in spec.large_configs:
            spec.func(config)
    assert guarded == []


# ---------------------------------------------------------------------------------------------
# 2. integer division and modulo never trap: numpy's answers everywhere
# ---------------------------------------------------------------------------------------------

def _int_div_func(dtype: str, op: str, n: int = 8):
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    fn = te.floordiv if op == "//" else te.floormod
    C = te.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    return te.create_prim_func([A, B, C])


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "int16", "uint8"])
@pytest.mark.parametrize("op", ["//", "%"])
def test_runtime_division_by_zero_matches_numpy(dtype, op):
    info = np.iinfo(dtype)
    if info.min < 0:
        a = np.array([7, -7, 0, info.min, info.min, 5, info.max, -1], dtype=dtype)
        b = np.array([0, 0, 0, -1, 0, 3, -1, 2], dtype=dtype)
    else:
        a = np.array([7, 1, 0, info.max, info.max, 5, 200, 9], dtype=dtype)
        b = np.array([0, 0, 0, 1, 0, 3, 7, 2], dtype=dtype)
    with np.errstate(all="ignore"):
        want = a // b if op == "//" else a % b
    got_interp, got_llvm = both(_int_div_func(dtype, op), [a, b], (8,), dtype)
    np.testing.assert_array_equal(got_interp, want)
    np.testing.assert_array_equal(got_llvm, want)


@pytest.mark.parametrize("op", ["//", "%"])
def test_vectorized_runtime_division_by_zero(op):
    from schedules.schedule import Schedule

    func = _int_div_func("int32", op, n=16)
    sch = Schedule(func)
    (loop,) = sch.get_loops(sch.get_block("C"))
    sch.vectorize(loop)
    a = np.arange(-8, 8, dtype="int32") * 3
    b = np.array([0, 1, -1, 2, 0, 3, -3, 5] * 2, dtype="int32")
    with np.errstate(all="ignore"):
        want = a // b if op == "//" else a % b
    got = np.zeros(16, "int32")
    llvm_run(sch.func, a, b, got)
    np.testing.assert_array_equal(got, want)


def test_constant_division_by_zero_folds_to_numpy_answer():
    i = te.var("i")
    assert te.floordiv(te.const(7), 0) == te.const(0)
    assert te.floormod(te.const(7), 0) == te.const(0)
    assert te.floordiv(i, 0) == te.const(0)
    assert te.floormod(i, 0) == te.const(0)
    int_min = te.const(-2 ** 31, "int32")
    assert te.floordiv(int_min, te.const(-1, "int32")) == int_min
    # A constant zero divisor inside a stage: the interpreter and LLVM agree with numpy.
    A = te.placeholder((4,), "int32", name="A")
    zero = te.compute((1,), lambda i: te.const(0, "int32"), name="zero")
    C = te.compute((4,), lambda i: te.floordiv(A[i], zero[0]) + te.floormod(A[i], zero[0]),
                   name="C")
    func = te.create_prim_func([A, C])
    got_interp, got_llvm = both(func, [np.arange(4, dtype="int32")], (4,), "int32")
    np.testing.assert_array_equal(got_interp, np.zeros(4, "int32"))
    np.testing.assert_array_equal(got_llvm, np.zeros(4, "int32"))


def test_constant_nonzero_divisor_has_no_select():
    A = te.placeholder((8,), "int32", name="A")
    C = te.compute((8,), lambda i: te.floordiv(A[i], 3) + te.floormod(A[i], 5), name="C")
    func = lower(te.create_prim_func([A, C]))
    text = str(codegen(func, options=CodegenOptions()))
    assert "icmp eq" not in text.replace("icmp eq i1", "")  # no divisor test was emitted
    assert "sdiv" in text


# ---------------------------------------------------------------------------------------------
# 5. NaN and Inf pass through min / max like numpy
# ---------------------------------------------------------------------------------------------

_SPECIAL = np.array([np.nan, np.inf, -np.inf, -2.5, -0.5, 0.0, 0.25, 3.0], "float32")


def _elementwise_cases():
    from tensor_ir.ops import elemwise, nn

    shape = (2, 8)
    return [
        ("relu", elemwise.relu(shape), elemwise.ref_relu, {}),
        ("clip", elemwise.clip(shape, -1.0, 1.0), elemwise.ref_clip, {"a_min": -1.0,
                                                                        "a_max": 1.0}),
        ("sigmoid", elemwise.sigmoid(shape), elemwise.ref_sigmoid, {}),
        ("tanh", elemwise.tanh(shape), elemwise.ref_tanh, {}),
        ("gelu", elemwise.gelu(shape), elemwise.ref_gelu, {}),
        ("max_pool2d", nn.max_pool2d(1, 2, 2, 4, kernel=2, stride=1, padding=1),
         nn.ref_max_pool2d, {"kernel": 2, "stride": 1, "padding": 1}),
    ]


@pytest.mark.parametrize("case", range(6))
def test_nan_and_inf_through_operators_match_numpy(case):
    name, func, reference, attrs = _elementwise_cases()[case]
    in_shape = func.params[0].const_shape
    data = np.resize(_SPECIAL, in_shape).astype("float32")
    data[..., 1::2] = data[..., 1::2][..., ::-1]  # NaN at several window positions
    with np.errstate(all="ignore"):
        want = reference(data, **attrs)
    out_shape = func.params[-1].const_shape
    got_interp, got_llvm = both(func, [data], out_shape)
    np.testing.assert_allclose(got_interp, want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(got_llvm, want, rtol=1e-5, atol=1e-6, err_msg=name)
    if name in ("relu", "clip", "max_pool2d"):
        assert np.isnan(got_llvm).any()


@pytest.mark.parametrize("op", ["max", "min"])
def test_vectorized_min_max_propagate_nan(op):
    from schedules.schedule import Schedule

    A = te.placeholder((16,), name="A")
    B = te.placeholder((16,), name="B")
    fn = te.max if op == "max" else te.min
    C = te.compute((16,), lambda i: fn(A[i], B[i]), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    (loop,) = sch.get_loops(sch.get_block("C"))
    sch.vectorize(loop)
    a = np.resize(_SPECIAL, 16).astype("float32")
    b = a[::-1].copy()
    got = np.zeros(16, "float32")
    llvm_run(sch.func, a, b, got)
    want = np.maximum(a, b) if op == "max" else np.minimum(a, b)
    np.testing.assert_array_equal(got, want)
    text = str(codegen(lower(sch.func), options=CodegenOptions()))
    assert "<16 x float>" in text or "<8 x float>" in text or "<4 x float>" in text


# ---------------------------------------------------------------------------------------------
# 3. CPU names and features are LLVM's, checked when the Target is made
# ---------------------------------------------------------------------------------------------

def _x86_64_host() -> bool:
    from tensor_ir.target import host_info

    return host_info().triple.startswith("x86_64")


@pytest.mark.parametrize("spec, option", [
    ("llvm -mcpu=not-a-cpu", "-mcpu=not-a-cpu"),
    ("llvm --mcpu=x", "-mcpu=x"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=i386", "-mcpu=i386"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=pentium4", "-mcpu=pentium4"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=i486", "-mcpu=i486"),
    ("llvm -mtriple=x86_64-linux-gnu -mattr=+not-a-feature", "'\\+not-a-feature'"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=znver4", "-mcpu=znver4"),
    ("llvm -mcpu='llvm -num-cores 2'", "-mcpu="),
])
def test_unknown_or_unusable_cpu_is_a_target_error(spec, option):
    from tensor_ir.target import Target, TargetError

    with pytest.raises(TargetError, match=option):
        Target(spec)


def test_known_cpus_and_features_are_accepted():
    from tensor_ir.target import Target

    assert Target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4 -mattr=-avx512f").cpu == "znver4"
    assert Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon").cpu \
        == "cortex-a72"
    assert Target("llvm -mtriple=i686-linux-gnu -mcpu=i386").cpu == "i386"  # 32-bit is fine


@pytest.mark.skipif(not _x86_64_host(), reason="x86-64 host needed")
def test_refused_cpu_would_have_aborted_llvm():
    """The CPUs refused are exactly those LLVM cannot generate x86-64 code for (checked in a
    child process, since LLVM aborts)."""
    import subprocess
    import sys

    from tensor_ir.llvm_support import llvm_names

    names = llvm_names("x86_64-unknown-linux-gnu")
    assert names is not None and "i386" in names.cpus and "i386" not in names.usable_cpus
    assert "x86-64" in names.usable_cpus and "znver4" in names.usable_cpus
    code = ("import llvmlite.binding as l; l.initialize_all_targets(); "
            "l.initialize_all_asmprinters(); m = l.parse_assembly('define void @f() { ret void }');"
            "m.triple = 'x86_64-unknown-linux-gnu';"
            "l.Target.from_triple(m.triple).create_target_machine(cpu='i386').emit_object(m)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode != 0 and "64-bit" in done.stderr


# ---------------------------------------------------------------------------------------------
# 14. a reduction inside a larger expression becomes a stage of its own
# ---------------------------------------------------------------------------------------------

def test_reduction_inside_expression_is_split():
    M, L = 5, 7
    X = te.placeholder((M, L), name="X")
    k = te.reduce_axis(L, name="k")
    mean = te.compute((M,), lambda i: te.sum(X[i, k], axis=k) / float(L), name="mean")
    assert mean.name == "mean" and [t.name for t in mean.op.input_tensors] == ["mean_red"]
    func = te.create_prim_func([X, mean])
    assert func.params[-1].name == "mean"
    x = np.random.default_rng(1).standard_normal((M, L)).astype("float32")
    got_interp, got_llvm = both(func, [x], (M,))
    np.testing.assert_allclose(got_interp, x.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_llvm, x.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_two_reductions_and_a_scale_in_one_body():
    X = te.placeholder((4, 6), name="X")
    k = te.reduce_axis(6, name="k")
    r = te.reduce_axis(6, name="r")
    scale = te.placeholder((4,), name="scale")
    out = te.compute((4,), lambda i: te.sum(X[i, k], axis=k) * scale[i]
                     - te.max(X[i, r], axis=r), name="out")
    assert sorted(t.name for t in out.op.input_tensors) == ["out_red", "out_red1", "scale"]
    func = te.create_prim_func([X, scale, out])
    x = np.random.default_rng(2).standard_normal((4, 6)).astype("float32")
    s = np.arange(1, 5, dtype="float32")
    want = x.sum(axis=1) * s - x.max(axis=1)
    got_interp, got_llvm = both(func, [x, s], (4,))
    np.testing.assert_allclose(got_interp, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_llvm, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# 13. typed errors naming the argument
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dom", ["abc", ("a", 3), (0, 2.5), None, True])
def test_reduce_axis_with_a_bad_domain_is_a_te_error(dom):
    with pytest.raises(TEError, match="reduce_axis k: dom"):
        te.reduce_axis(dom, name="k")
