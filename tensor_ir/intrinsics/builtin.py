"""The built-in tensor intrinsics: int8 dot products of x86 AVX-512 VNNI and AArch64 dotprod.

Both have the shape of TVM's dense int8 micro-kernels: ``L`` int32 accumulator lanes, each
adding the dot product of the same 4 ``A`` bytes (broadcast) with its own 4 ``B`` bytes::

    for i in range(L), k in range(4):  C[i] += int32(A[k]) * int32(B[i, k])

- ``dot_16x4_u8i8i32_vnni``: L = 16, A uint8, B int8; one ``vpdpbusd`` on a zmm register
  (``llvm.x86.avx512.vpdpbusd.512``: lanes of 4 unsigned bytes times 4 signed bytes, summed
  into int32 without saturation, so the result equals the int32 arithmetic exactly).
- ``dot_4x4_i8i8i32_sdot``: L = 4, A and B int8; one ``sdot`` on a q register
  (``llvm.aarch64.neon.sdot.v4i32.v16i8``).

B's tile is 16 (4) rows of 4 bytes, dense: a program computing ``C[m, n] += A[m, k] * B[k, n]``
packs B as ``B[n // L, k // 4, n % L, k % 4]`` first (``pack_layout``).
"""
from __future__ import annotations

from llvmlite import ir

from .. import te
from .registry import EmitContext, LLVMImpl, register

__all__ = ["SDOT_DOT", "VNNI_DOT", "dot_description"]

VNNI_DOT = "dot_16x4_u8i8i32_vnni"
SDOT_DOT = "dot_4x4_i8i8i32_sdot"

_I32 = ir.IntType(32)
_I8 = ir.IntType(8)


def dot_description(lanes: int, a_dtype: str, b_dtype: str, name: str):
    """``C[i] += int32(A[k]) * int32(B[i, k])`` for i < lanes, k < 4, as a PrimFunc."""
    a = te.placeholder((4,), a_dtype, name="A")
    b = te.placeholder((lanes, 4), b_dtype, name="B")
    k = te.reduce_axis(4, name="k")
    c = te.compute((lanes,), lambda i: te.sum(a[k].astype("int32") * b[i, k].astype("int32"),
                                              axis=k), name="C")
    return te.create_prim_func([a, b, c], name=name)


def _broadcast_word(bld: ir.IRBuilder, word: ir.Value, lanes: int) -> ir.Value:
    """``lanes`` copies of the i32 ``word`` (the 4 bytes of A every lane multiplies by)."""
    vec_ty = ir.VectorType(_I32, lanes)
    one = bld.insert_element(ir.Constant(vec_ty, ir.Undefined), word, ir.Constant(_I32, 0))
    mask = ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
    return bld.shuffle_vector(one, ir.Constant(vec_ty, ir.Undefined), mask)


def _emit_vnni(ctx: EmitContext) -> None:
    bld = ctx.builder
    a_ptr, b_ptr, c_ptr = ctx.pointers
    v16 = ir.VectorType(_I32, 16)
    # NOTE: the <16 x i32> operand form of the intrinsic is the one every LLVM with AVX-512
    # VNNI accepts; LLVM 21+ spells the byte operands <64 x i8> and upgrades this form on
    # parsing, so one spelling serves both.
    a = _broadcast_word(bld, bld.load(a_ptr, typ=_I32, align=1), 16)
    b = bld.load(b_ptr, typ=v16, align=1)
    c = bld.load(c_ptr, typ=v16, align=4)
    fn = ctx.declare("llvm.x86.avx512.vpdpbusd.512", v16, [v16, v16, v16])
    bld.store(bld.call(fn, [c, a, b]), c_ptr, align=4)


def _emit_sdot(ctx: EmitContext) -> None:
    bld = ctx.builder
    a_ptr, b_ptr, c_ptr = ctx.pointers
    v4 = ir.VectorType(_I32, 4)
    v16b = ir.VectorType(_I8, 16)
    a = bld.bitcast(_broadcast_word(bld, bld.load(a_ptr, typ=_I32, align=1), 4), v16b)
    b = bld.load(b_ptr, typ=v16b, align=1)
    c = bld.load(c_ptr, typ=v4, align=4)
    fn = ctx.declare("llvm.aarch64.neon.sdot.v4i32.v16i8", v4, [v4, v16b, v16b])
    bld.store(bld.call(fn, [c, a, b]), c_ptr, align=4)


register(VNNI_DOT, dot_description(16, "uint8", "int8", VNNI_DOT),
         LLVMImpl(_emit_vnni, arch=("x86_64",), features=("+avx512vnni",)))
register(SDOT_DOT, dot_description(4, "int8", "int8", SDOT_DOT),
         LLVMImpl(_emit_sdot, arch=("aarch64", "arm64"), features=("+dotprod",)))
