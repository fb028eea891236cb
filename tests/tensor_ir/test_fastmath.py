"""float32 exp / tanh / erf / sigmoid as generated code (tensor_ir.codegen.fastmath): scalar and
vectorised kernels against float64 references over the whole float32 range."""
from __future__ import annotations

import math

import numpy as np
import pytest

import autotune
from schedules import Schedule
from tensor_ir import te

# Inputs: the float32 range from underflow to overflow, a dense sweep where the functions bend,
# tiny magnitudes (relative accuracy near zero), and the special values.
_X = np.concatenate([
    np.linspace(-110.0, 100.0, 4001), np.linspace(-4.0, 4.0, 2001),
    np.logspace(-9, 1.5, 500), -np.logspace(-9, 1.5, 500),
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72283, 88.7228394, 88.73, -87.4, -103.9, -104.5,
     0.625, -0.625, 0.5, -0.5, 0.49999997, 9.5, -9.5],
]).astype(np.float32)

_REFERENCES = {
    "exp": np.exp,
    "tanh": np.tanh,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
}
# Largest error allowed, in units in the last place of the float32 result.  exp and tanh come
# out within 1 ulp; erf's tail formula is good to 1.5e-7 absolute (4 ulp around 0.5).
_MAX_ULP = {"exp": 2, "tanh": 2, "erf": 5, "sigmoid": 3}


def _kernel(name: str, n: int, vectorize: bool, target: str = "llvm"):
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: getattr(te, name)(a[i]), name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    if vectorize:
        (i,) = sch.get_loops(sch.get_block("B"))
        _, inner = sch.split(i, [None, 16])
        sch.vectorize(inner)
    return autotune.build(sch.func, target)


@pytest.mark.parametrize("vectorize", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("name", sorted(_REFERENCES))
def test_matches_float64_reference_within_a_few_ulp(name, vectorize):
    x = _X[: len(_X) // 16 * 16] if vectorize else _X
    out = np.empty_like(x)
    _kernel(name, x.size, vectorize)(x, out)
    with np.errstate(over="ignore", invalid="ignore"):
        ref64 = _REFERENCES[name](x.astype(np.float64))
        ref = ref64.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    special = ~np.isfinite(ref) & ~np.isnan(ref)
    np.testing.assert_array_equal(out[special], ref[special])  # +-inf where the true value is
    finite = np.isfinite(ref)
    assert np.isfinite(out[finite]).all()
    # Results below the smallest normal float32 (sigmoid of x < -87: 1 / (1 + inf)) may flush
    # to zero: judged in absolute terms there.
    tiny = np.abs(ref64) < np.finfo(np.float32).tiny
    assert np.all(np.abs(out[finite & tiny] - ref64[finite & tiny]) <= np.finfo(np.float32).tiny)
    finite &= ~tiny
    err = np.abs(out[finite].astype(np.float64) - ref64[finite])
    ulp = np.spacing(np.abs(ref[finite])).astype(np.float64)
    worst = int(np.argmax(err / ulp))
    assert err[worst] / ulp[worst] <= _MAX_ULP[name], (
        f"{name}({x[finite][worst]!r}) = {out[finite][worst]!r}, want {ref64[finite][worst]!r}")


def test_odd_functions_keep_their_sign_and_zero():
    x = np.array([-0.0, 0.0, -1e-30, 1e-30, -3.0, 3.0, -50.0, 50.0] * 2, dtype=np.float32)
    for name in ("tanh", "erf"):
        out = np.empty_like(x)
        _kernel(name, x.size, True)(x, out)
        assert np.array_equal(np.signbit(out), np.signbit(x)), name
        assert out[6] == -1.0 and out[7] == 1.0, name


def test_vector_code_has_no_libm_calls():
    # The point of emitting them as arithmetic: a vectorised loop stays vectorised.
    for name in ("exp", "tanh", "erf"):
        asm = _kernel(name, 64, True).get_source("asm")
        for libm in ("expf", "tanhf", "erff"):
            assert f"call\t{libm}" not in asm and f"{libm}@PLT" not in asm, (name, libm)


def test_polynomial_steps_are_fused_multiply_adds_where_the_target_has_them():
    # Horner steps written as a multiply and an add run as two dependent instructions each:
    # GELU's erf was a serial chain of twice the latency.  erf's two polynomials have ten
    # steps, exp's (inside erf's tail) five more.
    asm = _kernel("erf", 64, True, "llvm -mcpu=haswell").get_source("asm")
    assert asm.count("vfmadd") + asm.count("vfnmadd") + asm.count("vfmsub") >= 15
    asm = _kernel("erf", 64, True, "llvm -mcpu=x86-64").get_source("asm")
    assert "fmaf" not in asm  # no FMA on plain x86-64: separate operations, no libm calls


def test_exp_flushes_what_would_be_subnormal_and_erf_saturates_at_four():
    # Computing a subnormal float costs a microcode assist per lane: exp over masked attention
    # scores (-1e4) and GELU's e^(-x^2) on pre-activations of standard deviation 9 ran 7-9x
    # slower than on small inputs.  So exp is 0 below ln(FLT_MIN), and erf's tail is taken at
    # |x| <= 4, from where erf is +-1 in float32.
    x = np.array([-87.34, -87.5, -95.0, -103.9, -1e4, -np.inf, -87.33, -80.0] * 2, np.float32)
    out = np.empty_like(x)
    _kernel("exp", x.size, True)(x, out)
    assert np.all(out[:6] == 0.0) and np.all(out[8:14] == 0.0)
    assert np.all(out[[6, 7]] >= np.finfo(np.float32).tiny)  # still normal above the cut
    x = np.array([4.0, 4.5, 9.5, 100.0, np.inf, -4.0, -100.0, -np.inf] * 2, np.float32)
    _kernel("erf", x.size, True)(x, out)
    np.testing.assert_array_equal(out, np.sign(x))
