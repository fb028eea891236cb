"""float32 exp, tanh and erf emitted as plain arithmetic, so that they vectorise.

LLVM lowers ``llvm.exp.v16f32`` (and ``tanh``, and our lane-by-lane ``erff``) to one libm call
per lane: a vectorised softmax or GELU then runs at scalar libm speed, ~5 ns per element.
Written as a polynomial on the vector registers they cost a few instructions per 16 elements.

Accuracy (checked against numpy in tests/tensor_ir/test_fastmath.py over the whole float32
range, NaN and infinities included): exp within 2 ulp; tanh and erf within 4e-7 absolute and
2 ulp relative near zero, where they are odd polynomials.

exp:  ``x = n ln2 + r``, ``|r| <= ln2 / 2``, with ``n = round(x / ln2)`` and ``ln2`` split in
      two parts so that ``r`` is exact; ``e^r`` by a degree-6 minimax polynomial (the classic
      single-precision coefficients); ``2^n`` applied as two powers of two built from exponent
      bits, so that ``n`` may reach 128 without overflowing the exponent field.  Above
      ln(FLT_MAX) the result is +inf; below ln(FLT_MIN) it is 0, as on a core that flushes
      subnormals (an error under FLT_MIN, 1.2e-38): computing a subnormal result costs a
      microcode assist per lane, and a softmax over masked scores (-1e4) or a GELU's
      e^(-x^2) on large inputs meets one in every lane.  NaN stays NaN.
tanh: odd polynomial for ``|x| < 0.625`` (no cancellation near zero), else
      ``1 - 2 / (e^(2|x|) + 1)`` with the sign of ``x``.
erf:  Taylor series to x^13 for ``|x| < 0.5``; above, the Abramowitz-Stegun 7.1.26 form
      ``1 - t (a1 + t (a2 + ...)) e^(-x^2)``, ``t = 1 / (1 + p |x|)`` (absolute error
      1.5e-7), with the sign of ``x``; ``|x|`` is clamped to 4 (erf(4) rounds to 1),
      which keeps e^(-x^2) normal.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .types import FAST_MATH

__all__ = ["FAST_FLOAT32", "emit"]

F32 = ir.FloatType()
I32 = ir.IntType(32)

_LN2_HI = 0.693359375          # exact in float32: n * _LN2_HI is exact for |n| <= 2^9
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
_EXP_MAX = 88.72283935546875   # ln(FLT_MAX) rounded up: e^x is +inf above
_EXP_MIN = -87.33654           # ln(FLT_MIN): below it e^x is subnormal, given as 0
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)
_ERF_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_ERF_P = 0.3275911
_ERF_SATURATES = 4.0           # 1 - erf(4) = 1.5e-8, under half an ulp of 1.0f
# erf(x) = 2/sqrt(pi) * sum_k (-1)^k x^(2k+1) / (k! (2k+1)), k = 0..6
_ERF_TAYLOR = tuple((-1) ** k * 2.0 / math.sqrt(math.pi) / (math.factorial(k) * (2 * k + 1))
                    for k in range(7))

FAST_FLOAT32 = frozenset({"exp", "tanh", "erf"})


class _Emitter:
    """Arithmetic on a float32 scalar or vector value ``x``'s type."""

    def __init__(self, gen, like: ir.Value):
        self.gen = gen
        self.b = gen.builder
        self.ty = like.type
        self.lanes = like.type.count if isinstance(like.type, ir.VectorType) else 0
        self.ity = ir.VectorType(I32, self.lanes) if self.lanes else I32

    def f(self, value: float) -> ir.Value:
        c = ir.Constant(F32, float(value))
        return self.gen.broadcast(c, self.lanes) if self.lanes else c

    def i(self, value: int) -> ir.Value:
        c = ir.Constant(I32, int(value))
        return self.gen.broadcast(c, self.lanes) if self.lanes else c

    # Float arithmetic carries ``contract``, as the rest of the generated code does: each
    # Horner step ``acc * z + c`` becomes one FMA where the target has them.  Unfused, GELU's
    # erf ran as 120 multiplies and 88 adds per 64 lanes, a serial chain of twice the latency;
    # 128x3072 took 0.21 ms on two threads, as long as onnxruntime's whole Gelu node.
    def fadd(self, a, b):
        return self.b.fadd(a, b, flags=FAST_MATH)

    def fsub(self, a, b):
        return self.b.fsub(a, b, flags=FAST_MATH)

    def fmul(self, a, b):
        return self.b.fmul(a, b, flags=FAST_MATH)

    def call(self, base: str, args: list) -> ir.Value:
        return self.gen.call_intrinsic(base, args)

    def poly(self, z: ir.Value, coeffs) -> ir.Value:
        """Horner: ((c0 z + c1) z + c2) ... (highest degree first)."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fadd(self.fmul(acc, z), self.f(c))
        return acc

    def pow2(self, n: ir.Value) -> ir.Value:
        """2**n for an i32 n in [-126, 127], from the exponent bits."""
        bits = self.b.shl(self.b.add(n, self.i(127)), self.i(23))
        return self.b.bitcast(bits, self.ty)

    def select(self, cond, a, b):
        return self.b.select(cond, a, b)

    # -- functions --------------------------------------------------------------------------
    def exp(self, x: ir.Value) -> ir.Value:
        b = self.b
        xc = self.call("llvm.minnum", [self.call("llvm.maxnum", [x, self.f(_EXP_MIN)]),
                                       self.f(_EXP_MAX)])
        nf = self.call("llvm.floor", [self.fadd(self.fmul(xc, self.f(1.0 / math.log(2.0))),
                                                self.f(0.5))])
        r = self.fsub(self.fsub(xc, self.fmul(nf, self.f(_LN2_HI))),
                      self.fmul(nf, self.f(_LN2_LO)))
        rr = self.fmul(r, r)
        p = self.fadd(self.fadd(self.fmul(self.poly(r, _EXP_POLY), rr), r), self.f(1.0))
        n = b.fptosi(nf, self.ity)
        half = b.ashr(n, self.i(1))             # floor(n / 2), in [-63, 64]
        out = self.fmul(self.fmul(p, self.pow2(half)), self.pow2(b.sub(n, half)))
        out = self.select(b.fcmp_ordered(">", x, self.f(_EXP_MAX)), self.f(math.inf), out)
        out = self.select(b.fcmp_ordered("<", x, self.f(_EXP_MIN)), self.f(0.0), out)
        return self.select(b.fcmp_unordered("uno", x, x), x, out)

    def tanh(self, x: ir.Value) -> ir.Value:
        b = self.b
        ax = self.call("llvm.fabs", [x])
        z = self.fmul(x, x)
        small = self.fadd(self.fmul(self.fmul(self.poly(z, _TANH_POLY), z), x), x)
        small = self.call("llvm.copysign", [small, x])  # -0.0 + 0.0 would give +0.0
        e = self.exp(self.fmul(ax, self.f(2.0)))
        big = self.fsub(self.f(1.0), b.fdiv(self.f(2.0), self.fadd(e, self.f(1.0))))
        big = self.call("llvm.copysign", [big, x])
        return self.select(b.fcmp_ordered("<", ax, self.f(0.625)), small, big)

    def erf(self, x: ir.Value) -> ir.Value:
        b = self.b
        # |x| is clamped to 4 first: beyond it erf is 1 in float32, and the tail's e^(-x^2)
        # would be subnormal (or reach zero through subnormal products), a microcode assist
        # per lane.  On inputs of standard deviation 9 (the pre-activations of a 768-long dot
        # product of values in [-1, 1], as a tuner's random data gives) erf ran 7x slower than
        # near zero.  The clamp is the select vminps implements; a NaN fails the comparison
        # and stays NaN.  Below 0.5 it changes nothing, so both branches share z.
        ax = self.call("llvm.fabs", [x])
        ac = self.select(b.fcmp_ordered(">", ax, self.f(_ERF_SATURATES)),
                         self.f(_ERF_SATURATES), ax)
        z = self.fmul(ac, ac)
        small = self.fmul(self.poly(z, _ERF_TAYLOR[::-1]), x)
        t = b.fdiv(self.f(1.0), self.fadd(self.f(1.0), self.fmul(ac, self.f(_ERF_P))))
        tail = self.fmul(self.fmul(self.poly(t, _ERF_AS[::-1]), t), self.exp(b.fneg(z)))
        big = self.call("llvm.copysign", [self.fsub(self.f(1.0), tail), x])
        return self.select(b.fcmp_ordered("<", ax, self.f(0.5)), small, big)


def emit(gen, name: str, x: ir.Value) -> ir.Value:
    """``name`` (one of FAST_FLOAT32) of the float32 scalar or vector ``x``; ``gen`` is the
    code generator (its builder, ``broadcast`` and ``call_intrinsic``)."""
    return getattr(_Emitter(gen, x), name)(x)
