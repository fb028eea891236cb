"""blockize, tensorize and the tensor intrinsics: VNNI on the host, sdot cross-compiled for
aarch64, an external C function, mismatches, traces and the interpreter."""
from __future__ import annotations

import shutil
import subprocess

import llvmlite.binding as llvm
import numpy as np
import pytest

import autotune
from autotune.runtime.build import build_object
from schedules import Schedule, ScheduleError, Trace
from tensor_ir import interp, intrinsics, te
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc, structural_equal
from tensor_ir.intrinsics import ExternCImpl, IntrinsicError, ReferenceImpl, TensorIntrin
from tensor_ir.printer import to_text
from tensor_ir.stmt import TensorIntrinCall
from tensor_ir.visitor import collect

VNNI = "dot_16x4_u8i8i32_vnni"
SDOT = "dot_4x4_i8i8i32_sdot"
AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod"


def _host_has(feature: str) -> bool:
    return bool(llvm.get_host_cpu_features().get(feature, False))


needs_vnni = pytest.mark.skipif(not _host_has("avx512vnni"),
                                reason="the host CPU has no AVX-512 VNNI (avx512vnni)")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to build the C tile")


def int8_matmul(m: int, n: int, k: int, a_dtype: str = "uint8", b_dtype: str = "int8",
                out_dtype: str = "int32", reducer=te.sum):
    """C[i, j] = sum_k int32(A[i, k]) * int32(B[k, j])."""
    a = te.placeholder((m, k), a_dtype, name="A")
    b = te.placeholder((k, n), b_dtype, name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: reducer(a[i, r].astype(out_dtype)
                                                * b[r, j].astype(out_dtype), axis=r), name="C")
    return te.create_prim_func([a, b, c], name=f"mm_{m}_{n}_{k}")


def schedule_dot(func, lanes: int, intrin: str | None, pack: bool = True, k_tile: int = 4,
                 decompose: bool = True):
    """Pack B into [n // lanes, k // 4, lanes, 4], tile j by ``lanes`` and k by ``k_tile``,
    put the (lanes, k_tile) tile innermost, zero C outside it and tensorize it."""
    sch = Schedule(func)
    c = sch.get_block("C")
    if pack:
        sch.pack_layout(c, "B", lambda kk, n: (n // lanes, kk // 4, n % lanes, kk % 4))
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, lanes])
    ko, ki = sch.split(k, [None, k_tile])
    sch.reorder(i, jo, ko, ji, ki)
    if decompose:
        sch.decompose_reduction(c, ko)
    if intrin is not None:
        sch.tensorize(ji, intrin)
    return sch, ji


def int8_inputs(m: int, n: int, k: int, a_dtype: str = "uint8", seed: int = 0):
    rng = np.random.default_rng(seed)
    lo = 0 if a_dtype == "uint8" else -128
    hi = 256 if a_dtype == "uint8" else 128
    a = rng.integers(lo, hi, (m, k)).astype(a_dtype)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    return a, b, a.astype(np.int32) @ b.astype(np.int32)


def run(kernel, a, b, n_rows, n_cols):
    c = np.full((n_rows, n_cols), 12345, np.int32)  # the kernel must zero it itself
    kernel(a, b, c)
    return c


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------

def test_builtin_intrinsics_are_registered_with_their_tiles():
    vnni = TensorIntrin.get(VNNI)
    assert vnni.tile.extents == (16, 4)
    assert [b.dtype for b in vnni.tile.params] == ["uint8", "int8", "int32"]
    assert vnni.tile.written == (False, False, True)
    assert TensorIntrin.get(SDOT).tile.extents == (4, 4)
    assert {VNNI, SDOT} <= set(intrinsics.names())


def test_register_rejects_bad_descriptions_and_duplicates():
    with pytest.raises(IntrinsicError, match="already registered"):
        intrinsics.register(VNNI, intrinsics.dot_description(16, "uint8", "int8", "x"),
                            ReferenceImpl())
    a = te.placeholder((4,), "float32", name="A")
    c = te.compute((2,), lambda i: a[i * 2], name="C")
    with pytest.raises(IntrinsicError, match="own loop variable"):
        intrinsics.register("bad_strided", te.create_prim_func([a, c]), ReferenceImpl())
    with pytest.raises(IntrinsicError, match="unknown tensor intrinsic 'nope'"):
        intrinsics.get("nope")


# ---------------------------------------------------------------------------------------------
# VNNI on the host
# ---------------------------------------------------------------------------------------------

@needs_vnni
@pytest.mark.parametrize("shape", [(64, 64, 64), (24, 48, 100)])
def test_vnni_matmul_matches_numpy_and_uses_vpdpbusd(shape):
    m, n, k = shape
    sch, _ = schedule_dot(int8_matmul(m, n, k), 16, VNNI)
    kernel = autotune.build(sch.func, "llvm")
    a, b, expected = int8_inputs(m, n, k)
    np.testing.assert_array_equal(run(kernel, a, b, m, n), expected)
    assert "llvm.x86.avx512.vpdpbusd.512" in kernel.get_source("ll")
    assert "vpdpbusd" in kernel.get_source("asm")


@needs_vnni
def test_vnni_extreme_values_do_not_saturate():
    # 255 * -128 summed over k: vpdpbusd (not vpdpbusds) wraps like int32 arithmetic.
    m, n, k = 16, 16, 64
    sch, _ = schedule_dot(int8_matmul(m, n, k), 16, VNNI)
    kernel = autotune.build(sch.func)
    a = np.full((m, k), 255, np.uint8)
    b = np.full((k, n), -128, np.int8)
    np.testing.assert_array_equal(run(kernel, a, b, m, n),
                                  a.astype(np.int32) @ b.astype(np.int32))


def test_tensorized_program_runs_in_the_interpreter():
    m, n, k = 4, 32, 8
    func = int8_matmul(m, n, k)
    a, b, expected = int8_inputs(m, n, k, seed=1)
    (plain,) = interp.evaluate(func, a, b)
    np.testing.assert_array_equal(plain, expected)
    sch, _ = schedule_dot(func, 16, VNNI)
    calls = collect(sch.func.body, TensorIntrinCall)
    assert len(calls) == 1 and calls[0].intrin == VNNI
    (tensorized,) = interp.evaluate(sch.func, a, b)
    np.testing.assert_array_equal(tensorized, expected)


def test_the_init_stays_outside_the_intrinsic():
    sch, _ = schedule_dot(int8_matmul(16, 16, 8), 16, VNNI)
    text = to_text(sch.func)
    init_at, call_at = text.index("block C_init"), text.index("tensor_intrin " + VNNI)
    assert init_at < call_at
    assert "int32(0)" not in text[call_at:]


def test_vnni_needs_the_feature_on_the_target():
    sch, _ = schedule_dot(int8_matmul(16, 16, 8), 16, VNNI)
    target = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512 -mattr=+avx512f"
    with pytest.raises(BuildError, match=r"needs the target features \+avx512vnni"):
        autotune.build(sch.func, target)


# ---------------------------------------------------------------------------------------------
# sdot, cross-compiled
# ---------------------------------------------------------------------------------------------

def test_aarch64_object_contains_sdot():
    m, n, k = 8, 16, 32
    sch, _ = schedule_dot(int8_matmul(m, n, k, a_dtype="int8"), 4, SDOT)
    kernel = autotune.build(sch.func, AARCH64)
    asm = kernel.get_source("asm")
    assert "sdot\tv" in asm
    assert "aarch64" in kernel.triple
    # The interpreter gives the tile its described meaning on any host.
    a, b, expected = int8_inputs(m, n, k, a_dtype="int8", seed=2)
    (got,) = interp.evaluate(sch.func, a, b)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.skipif(shutil.which("llvm-objdump") is None, reason="no llvm-objdump to disassemble")
def test_aarch64_object_disassembles_to_sdot(tmp_path):
    sch, _ = schedule_dot(int8_matmul(8, 16, 32, a_dtype="int8"), 4, SDOT)
    obj = build_object(sch.func, AARCH64)
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 183  # EM_AARCH64
    path = tmp_path / "kernel.o"
    path.write_bytes(obj)
    listing = subprocess.run(["llvm-objdump", "-d", "--mattr=+dotprod", str(path)],
                             capture_output=True, text=True, check=True).stdout
    assert sum("\tsdot\t" in line for line in listing.splitlines()) >= 1


def test_sdot_is_refused_on_other_architectures_and_without_dotprod():
    sch, _ = schedule_dot(int8_matmul(8, 8, 8, a_dtype="int8"), 4, SDOT)
    with pytest.raises(BuildError, match="needs a aarch64 or arm64 target"):
        autotune.build(sch.func, "llvm")
    with pytest.raises(BuildError, match=r"\+dotprod"):
        autotune.build(sch.func, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon")


# ---------------------------------------------------------------------------------------------
# An external C function
# ---------------------------------------------------------------------------------------------

C_TILE = r"""
#include <stdint.h>
/* C[i] += sum_k A[k] * B[i, k] on an 8 x 4 tile with arbitrary element strides. */
void tile_mac_8x4(const int8_t *a, int64_t a0, const int8_t *b, int64_t b0, int64_t b1,
                  int32_t *c, int64_t c0) {
    for (int i = 0; i < 8; ++i) {
        int32_t acc = 0;
        for (int k = 0; k < 4; ++k)
            acc += (int32_t)a[k * a0] * (int32_t)b[i * b0 + k * b1];
        c[i * c0] += acc;
    }
}
"""


@pytest.fixture
def c_tile_intrin(tmp_path):
    src = tmp_path / "tile.c"
    src.write_text(C_TILE)
    lib = tmp_path / "libtile.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    desc = intrinsics.dot_description(8, "int8", "int8", "tile_mac_8x4")
    name = f"test_tile_mac_8x4_{tmp_path.name}"
    intrinsics.register(name, desc, ExternCImpl("tile_mac_8x4", str(lib)))
    return name


@needs_gcc
@pytest.mark.parametrize("pack", [False, True], ids=["strided", "packed"])
def test_external_c_intrinsic_matches_numpy(c_tile_intrin, pack):
    m, n, k = 8, 24, 20
    sch, _ = schedule_dot(int8_matmul(m, n, k, a_dtype="int8"), 8, c_tile_intrin, pack=pack)
    kernel = autotune.build(sch.func)
    assert "tile_mac_8x4" in kernel.get_source("ll-raw")
    a, b, expected = int8_inputs(m, n, k, a_dtype="int8", seed=3)
    np.testing.assert_array_equal(run(kernel, a, b, m, n), expected)
    (got,) = interp.evaluate(sch.func, a, b)
    np.testing.assert_array_equal(got, expected)


@needs_gcc
def test_external_c_intrinsic_gets_the_tile_strides(c_tile_intrin):
    # Unpacked B[k, j]: the tile's B[i, k] moves by 1 along i and by n along k.
    sch, _ = schedule_dot(int8_matmul(8, 24, 20, a_dtype="int8"), 8, c_tile_intrin, pack=False)
    raw = autotune.build(sch.func).get_source("ll-raw")
    call = next(line for line in raw.splitlines() if "call void @\"tile_mac_8x4\"" in line)
    assert "i64 1, ptr" in call and "i64 1, i64 24, ptr" in call


# ---------------------------------------------------------------------------------------------
# Mismatches: ScheduleError naming what differs, schedule untouched
# ---------------------------------------------------------------------------------------------

def _refused(sch: Schedule, target, intrin: str, pattern: str) -> None:
    func, trace = sch.func, sch.trace
    with pytest.raises(ScheduleError, match=pattern):
        sch.tensorize(target, intrin)
    assert sch.func is func and sch.trace == trace


def test_mismatched_extent_is_named():
    sch, ji = schedule_dot(int8_matmul(16, 16, 16), 16, None, k_tile=8)
    _refused(sch, ji, VNNI, r"extent of loop k_1 is 8, the intrinsic "
                            r"dot_16x4_u8i8i32_vnni expects 4 \(its loop k\)")


def test_mismatched_loop_order_is_named():
    sch, ji = schedule_dot(int8_matmul(16, 16, 16), 16, None)
    c = sch.get_block("C")
    i, jo, ko, ji, ki = sch.get_loops(c)
    sch.reorder(ki, ji)
    _refused(sch, ki, VNNI, r"extent of loop k_1 is 4, the intrinsic \S+ expects 16")


def test_mismatched_dtype_is_named():
    func = int8_matmul(16, 16, 16, a_dtype="float32", b_dtype="float32", out_dtype="float32")
    sch, ji = schedule_dot(func, 16, None, pack=False)
    _refused(sch, ji, VNNI, r"C has dtype float32, the intrinsic expects int32")
    func = int8_matmul(16, 16, 16, a_dtype="int8")
    sch, ji = schedule_dot(func, 16, None)
    _refused(sch, ji, VNNI, r"A has dtype int8, the intrinsic expects uint8")


def test_unpacked_layout_is_refused_for_an_llvm_intrinsic():
    sch, ji = schedule_dot(int8_matmul(16, 16, 16), 16, None, pack=False)
    _refused(sch, ji, VNNI, r"the tile of B has element strides \(1, 16\), the intrinsic "
                            r"\S+ needs its B dense with strides \(4, 1\); pack B")


def test_access_varying_along_a_foreign_loop_is_named():
    # A[j, k] instead of A[i, k]: the tile's A moves along j_1, the intrinsic's A[k] does not.
    a = te.placeholder((16, 16), "uint8", name="A")
    b = te.placeholder((16, 16), "int8", name="B")
    r = te.reduce_axis(16, name="k")
    c = te.compute((16, 16), lambda i, j: te.sum(a[j, r].astype("int32")
                                                 * b[r, j].astype("int32"), axis=r), name="C")
    sch, ji = schedule_dot(te.create_prim_func([a, b, c]), 16, None)
    _refused(sch, ji, VNNI, r"A varies with loop j_1 in block C, but the intrinsic's A does "
                            r"not depend on its loop i")


def test_other_reduction_is_named():
    func = int8_matmul(16, 16, 16, reducer=te.max)
    sch, ji = schedule_dot(func, 16, None)
    _refused(sch, ji, VNNI, r"does not match dot_16x4_u8i8i32_vnni: block C computes 'max' "
                            r"where the intrinsic computes '\+'")


def test_init_inside_the_tile_is_refused():
    sch, ji = schedule_dot(int8_matmul(16, 16, 16), 16, None, decompose=False)
    _refused(sch, ji, VNNI, r"still zeroes its accumulator .* run decompose_reduction first")


def test_wrong_number_of_tile_loops_and_unknown_intrinsic():
    sch, ji = schedule_dot(int8_matmul(16, 16, 16), 16, None)
    c = sch.get_block("C")
    i, jo, ko, ji, ki = sch.get_loops(c)
    _refused(sch, ko, VNNI, r"has 3 loops in its tile \(k_0, j_1, k_1\), the intrinsic "
                            r"\S+ expects 2 \(i: 16, k: 4\)")
    _refused(sch, ji, "no_such_intrinsic", r"unknown tensor intrinsic 'no_such_intrinsic'")


def test_partial_tile_is_refused():
    sch, ji = schedule_dot(int8_matmul(16, 20, 16), 16, None, pack=False)
    _refused(sch, ji, VNNI, r"guarded by .*partial tile")


# ---------------------------------------------------------------------------------------------
# blockize
# ---------------------------------------------------------------------------------------------

def _float_matmul(m=8, n=12, k=8):
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def test_blockize_keeps_the_meaning_and_tiles_the_iteration():
    func = _float_matmul()
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 2])
    sch.reorder(i, jo, ko, ji, ki)
    outer = sch.blockize(ji)
    block = sch.get(outer)
    assert block.name == "C_o"
    assert [(iv.var.name, iv.dom.extent.value, iv.kind) for iv in block.iter_vars] == [
        ("v_i_o", 8, "spatial"), ("v_j_o", 3, "spatial"), ("v_k_o", 4, "reduce")]
    regions = {r.buffer.name: [rg.extent.value for rg in r.region] for r in block.reads}
    assert regions == {"C": [1, 4], "A": [1, 2], "B": [2, 4]}
    assert [[rg.extent.value for rg in w.region] for w in block.writes] == [[1, 4]]
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 12)).astype(np.float32)
    (got,) = interp.evaluate(sch.func, a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    kernel = autotune.build(sch.func)
    out = np.zeros((8, 12), np.float32)
    kernel(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    # The inner block still holds its init: decomposing it now would zero inside the
    # reduction over v_k_o, which the primitive refuses.
    with pytest.raises(ScheduleError, match="decompose the reduction before blockize"):
        sch.decompose_reduction(sch.get_block("C"), ji)


def test_blockize_refuses_a_loop_holding_several_blocks():
    a = te.placeholder((8,), "float32", name="A")
    b = te.compute((8,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((8,), lambda i: b[i] + 1.0, name="C")
    sch = Schedule(te.create_prim_func([a, c]))
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    func = sch.func
    with pytest.raises(ScheduleError, match="chain of loops around one block"):
        sch.blockize(i)
    assert sch.func is func


# ---------------------------------------------------------------------------------------------
# Traces and the reference implementation
# ---------------------------------------------------------------------------------------------

def test_trace_round_trips_through_json_and_python():
    func = int8_matmul(16, 32, 16)
    sch, _ = schedule_dot(func, 16, VNNI)
    text = sch.trace.to_text()
    assert '"kind":"tensorize"' in text and VNNI in text
    again = Trace.from_json(text).apply(func)
    assert structural_equal(again.func, sch.func)
    assert again.trace == sch.trace
    # The tensorized program itself has a JSON form too (workloads, records).
    assert structural_equal(PrimFunc.from_json(sch.func.to_json()), sch.func)
    fresh = Schedule(func)
    exec(str(sch.trace), {"sch": fresh})
    assert structural_equal(fresh.func, sch.func)


def test_blockize_then_tensorize_the_block_records_both():
    func = int8_matmul(16, 16, 8)
    sch, ji = schedule_dot(func, 16, None)
    outer = sch.blockize(ji)
    sch.tensorize(outer, VNNI)
    kinds = [inst.kind for inst in sch.trace]
    assert kinds[-2:] == ["blockize", "tensorize"]
    again = Trace.from_json(sch.trace.to_json()).apply(func)
    assert structural_equal(again.func, sch.func)
    a, b, expected = int8_inputs(16, 16, 8, seed=5)
    (got,) = interp.evaluate(again.func, a, b)
    np.testing.assert_array_equal(got, expected)


def test_reference_implementation_builds_anywhere():
    # A float32 tile whose implementation is its own description: matching and the pipeline
    # without any special instruction.
    a = te.placeholder((2,), "float32", name="A")
    b = te.placeholder((4, 2), "float32", name="B")
    r = te.reduce_axis(2, name="k")
    c = te.compute((4,), lambda i: te.sum(a[r] * b[i, r], axis=r), name="C")
    intrinsics.register("test_ref_dot_4x2_f32", te.create_prim_func([a, b, c]),
                        ReferenceImpl(), override=True)
    sch = Schedule(_float_matmul())
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 2])
    sch.reorder(i, jo, ko, ji, ki)
    sch.decompose_reduction(blk, ko)
    sch.tensorize(ji, "test_ref_dot_4x2_f32")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    y = rng.standard_normal((8, 12)).astype(np.float32)
    out = np.zeros((8, 12), np.float32)
    autotune.build(sch.func)(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)
