"""Auto-tensorize in the design space: multi-level tiling keeps a matching intrinsic's tile
innermost and tensorizes it on targets that offer the intrinsic, and only there."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import autotune
from schedules import Schedule, ScheduleError, tree
from schedules.postproc import RewriteParallelVectorizeUnroll, verify_cpu
from schedules.rules import create
from schedules.rules.analysis import block_info
from schedules.rules.auto_tensorize import TensorizePack, match
from schedules.rules.parallel_vectorize_unroll import VECTORIZE_KEY
from schedules.space import DesignSpace
from tensor_ir import interp, intrinsics, te
from tensor_ir.intrinsics import ReferenceImpl
from tensor_ir.stmt import VECTORIZED, For, Stmt, TensorIntrinCall
from tensor_ir.target import Target
from tensor_ir.visitor import children, collect

from .test_tensorize import int8_inputs, int8_matmul

VNNI = "dot_16x4_u8i8i32_vnni"
SDOT = "dot_4x4_i8i8i32_sdot"
# Explicit strings, so that the spaces do not depend on this machine's CPU.
VNNI_TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -mattr=+avx512vnni " \
              "-num-cores=2"
AVX512_TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=2"
AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod -num-cores=4"

needs_vnni = pytest.mark.skipif(
    not llvm.get_host_cpu_features().get("avx512vnni", False),
    reason="the host CPU has no AVX-512 VNNI (avx512vnni)")


def _kinds(trace) -> list[str]:
    return [inst.kind for inst in trace]


def _tensorized(trace) -> list[str]:
    return [dict(inst.attrs)["intrin"] for inst in trace if inst.kind == "tensorize"]


def _float_matmul(m=32, n=32, k=16):
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c], name=f"fmm_{m}_{n}_{k}")


def _plain_rules(target: Target):
    """The default CPU rules with tensorizing switched off."""
    names = ("auto_inline", "rfactor", "multi_level_tiling", "parallel_vectorize_unroll",
             "random_compute_location")
    return [create(n, intrinsics=()) if n == "multi_level_tiling" else create(n)
            for n in names]


# ---------------------------------------------------------------------------------------------
# When the rule fires
# ---------------------------------------------------------------------------------------------

def test_int8_matmul_sketches_are_tensorized_on_a_vnni_target():
    space = DesignSpace(int8_matmul(128, 128, 128), VNNI_TARGET)
    assert len(space.sketches) == 2  # one per write-back level
    for sketch in space.sketches:
        kinds = _kinds(sketch)
        assert _tensorized(sketch) == [VNNI]
        # B is packed into 16 x 4 tiles before the tile is tensorized, and the accumulator is
        # zeroed outside the intrinsic.
        assert kinds.index("pack_layout") < kinds.index("decompose_reduction") \
            < kinds.index("tensorize")
        pack = next(inst for inst in sketch if inst.kind == "pack_layout")
        assert dict(pack.attrs)["buffer"] == "B"
        # The search still decides the outer tiles, parallelism and unrolling.
        assert kinds.count("sample_perfect_tile") == 3
        assert kinds.count("sample_categorical") == 2


def test_float32_matmul_space_is_unchanged_on_a_vnni_target():
    func = _float_matmul()
    target = Target(VNNI_TARGET)
    with_intrinsics = DesignSpace(func, target)
    without = DesignSpace(func, target, rules=_plain_rules(target))
    assert [s.to_text() for s in with_intrinsics.sketches] == \
        [s.to_text() for s in without.sketches]
    assert not any(_tensorized(s) for s in with_intrinsics.sketches)


def test_no_tensorize_without_the_intrinsic_on_the_target():
    func = int8_matmul(128, 128, 128)
    target = Target(AVX512_TARGET)
    assert target.intrinsics == ()
    space = DesignSpace(func, target)
    assert not any(_tensorized(s) for s in space.sketches)
    # ... which is exactly the plain space.
    plain = DesignSpace(func, target, rules=_plain_rules(target))
    assert [s.to_text() for s in space.sketches] == [s.to_text() for s in plain.sketches]


@pytest.mark.parametrize("shape, why", [((32, 40, 64), "n % 16"), ((32, 32, 30), "k % 4")])
def test_no_tensorize_when_the_tile_does_not_divide_the_loops(shape, why):
    space = DesignSpace(int8_matmul(*shape), VNNI_TARGET)
    assert not any(_tensorized(s) for s in space.sketches), why


def test_no_tensorize_for_other_dtypes_or_reductions():
    # int8 x int8 is not VNNI's uint8 x int8; max is not its +.
    for func in (int8_matmul(32, 32, 32, a_dtype="int8"),
                 int8_matmul(32, 32, 32, reducer=te.max)):
        space = DesignSpace(func, VNNI_TARGET)
        assert not any(_tensorized(s) for s in space.sketches)


# ---------------------------------------------------------------------------------------------
# The plan: which loops play the tile, which operand is packed how
# ---------------------------------------------------------------------------------------------

def _plans(func, intrin=VNNI):
    return match(func, block_info(func, "C"), intrinsics.get(intrin))


def test_plan_maps_columns_and_reduction_and_packs_b():
    (plan,) = _plans(int8_matmul(64, 64, 64))
    assert plan.intrin == VNNI and plan.loops == (1, 2) and plan.extents == (16, 4)
    # B[k, n] -> B_packed[n // 16, k // 4, n % 16, k % 4]; A and C are dense already.
    assert plan.packs == (TensorizePack("B", ((1, 16), (0, 4)), ((1, 16), (0, 4))),)
    mapping = plan.packs[0].index_map()
    assert mapping(37, 21) == (21 // 16, 37 // 4, 21 % 16, 37 % 4)


def _matmul_layouts(m, n, k, a_t: bool, b_t: bool):
    """C[i, j] = sum A[i, k] B[k, j] with A stored [k, m] (a_t) and/or B stored [n, k] (b_t)."""
    a = te.placeholder((k, m) if a_t else (m, k), "uint8", name="A")
    b = te.placeholder((n, k) if b_t else (k, n), "int8", name="B")
    r = te.reduce_axis(k, name="k")

    def body(i, j):
        x = a[r, i] if a_t else a[i, r]
        y = b[j, r] if b_t else b[r, j]
        return te.sum(x.astype("int32") * y.astype("int32"), axis=r)

    c = te.compute((m, n), body, name="C")
    return te.create_prim_func([a, b, c], name=f"mm_{int(a_t)}{int(b_t)}")


def test_plan_packs_transposed_operands():
    (plan,) = _plans(_matmul_layouts(32, 32, 32, a_t=True, b_t=True))
    packs = {p.buffer: p for p in plan.packs}
    # A[k, i]: its 4 bytes along k are M apart -> A_packed[i, k // 4, k % 4].
    assert packs["A"] == TensorizePack("A", ((1, 0), (0, 4)), ((0, 4),))
    # B[j, k]: rows of 4 bytes N... apart -> B_packed[j // 16, k // 4, j % 16, k % 4].
    assert packs["B"] == TensorizePack("B", ((0, 16), (1, 4)), ((0, 16), (1, 4)))


def _copy_loop_kinds(func, block: str) -> list[str]:
    return [lp.kind for lp in tree.find_block(func, block).loops]


@pytest.mark.parametrize("a_t, b_t", [(False, False), (True, True)])
def test_packing_copies_unroll_their_tiles_instead_of_gathering(a_t, b_t):
    # A packed tile is a small transpose of the operand: its loops are unrolled (row loads and
    # shuffles after LLVM's SLP pass), never vectorised as a gather of bytes.  The loops
    # above the tile are left to the post-processors (parallel here).
    space = DesignSpace(_matmul_layouts(64, 64, 64, a_t, b_t), VNNI_TARGET)
    for seed in range(3):
        func = space.sample(seed=seed).func
        assert _copy_loop_kinds(func, "B_pack")[-2:] == ["unrolled", "unrolled"]
        assert VECTORIZED not in _copy_loop_kinds(func, "B_pack")
        if a_t:  # A_packed[i, k // 4, k % 4]: one tile loop
            kinds = _copy_loop_kinds(func, "A_pack")
            assert kinds[-1] == "unrolled" and VECTORIZED not in kinds


@needs_vnni
def test_packing_copy_compiles_to_shuffles_not_byte_gathers():
    # vpinsrb is how a gather of single bytes into a vector is written; the unrolled copy is
    # whole-row loads and shuffles instead (the copy of B ran about 6x faster at 1024^3).
    m = n = k = 64
    a, b, expected = int8_inputs(m, n, k, seed=5)
    sch = DesignSpace(int8_matmul(m, n, k), "llvm").sample(seed=0)
    kernel = autotune.build(sch.func, "llvm")
    out = np.zeros((m, n), np.int32)
    kernel(a, b, out)
    np.testing.assert_array_equal(out, expected)
    assert "vpinsrb" not in kernel.get_source("asm")


@needs_vnni
@pytest.mark.parametrize("a_t, b_t", [(False, True), (True, False), (True, True)])
def test_transposed_layouts_build_and_match_numpy(a_t, b_t):
    m, n, k = 32, 48, 64
    func = _matmul_layouts(m, n, k, a_t, b_t)
    space = DesignSpace(func, "llvm")
    assert all(_tensorized(s) == [VNNI] for s in space.sketches)
    a, b, expected = int8_inputs(m, n, k, seed=7)
    args = (np.ascontiguousarray(a.T) if a_t else a, np.ascontiguousarray(b.T) if b_t else b)
    cand = space.sample(seed=3)
    out = np.full((m, n), 7, np.int32)
    autotune.build(cand.func, "llvm")(*args, out)
    np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------------------------------------
# Samples of the space are correct programs
# ---------------------------------------------------------------------------------------------

@needs_vnni
def test_random_samples_build_and_equal_numpy():
    m, n, k = 64, 96, 128
    func = int8_matmul(m, n, k)
    space = DesignSpace(func, "llvm")
    assert Target("llvm").intrinsics[:1] == (VNNI,)
    a, b, expected = int8_inputs(m, n, k, seed=11)
    sketches = set()
    for seed in range(5):
        cand = space.sample(seed=seed)
        sketches.add(cand.sketch)
        calls = collect(cand.func.body, TensorIntrinCall)
        assert calls and {c.intrin for c in calls} == {VNNI}
        kernel = autotune.build(cand.func, "llvm")
        out = np.full((m, n), 12345, np.int32)
        kernel(a, b, out)
        np.testing.assert_array_equal(out, expected)
        assert "vpdpbusd" in kernel.get_source("asm")
    assert len(sketches) == 2


def test_samples_run_in_the_interpreter_on_any_host():
    m, n, k = 16, 32, 16
    func = int8_matmul(m, n, k)
    space = DesignSpace(func, VNNI_TARGET)
    a, b, expected = int8_inputs(m, n, k, seed=12)
    for seed in range(3):
        (got,) = interp.evaluate(space.sample(seed=seed).func, a, b)
        np.testing.assert_array_equal(got, expected)


def test_mutated_decisions_replay_tensorized():
    space = DesignSpace(int8_matmul(64, 64, 64), VNNI_TARGET)
    cand = space.sample(seed=0)
    tiles = [i for i, inst in enumerate(cand.trace) if inst.kind == "sample_perfect_tile"]
    # Another split of the rows (which the intrinsic does not touch) replays, still tensorized.
    again = space.replay(cand.trace.with_decision(tiles[0], [1, 2, 4, 8]))
    assert again is not None and _tensorized(again.final_trace) == [VNNI]
    assert space.sketch_of(again.trace) == cand.sketch


def test_sdot_on_an_aarch64_target():
    m, n, k = 8, 16, 32
    func = int8_matmul(m, n, k, a_dtype="int8")
    space = DesignSpace(func, AARCH64)
    assert all(_tensorized(s) == [SDOT] for s in space.sketches)
    cand = space.sample(seed=1)
    asm = autotune.build(cand.func, AARCH64).get_source("asm")
    assert "sdot\tv" in asm
    a, b, expected = int8_inputs(m, n, k, a_dtype="int8", seed=13)
    (got,) = interp.evaluate(cand.func, a, b)
    np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Intrinsics a target declares
# ---------------------------------------------------------------------------------------------

REF_DOT = "test_auto_ref_dot_4x2_f32"


@pytest.fixture
def ref_dot_target():
    """A float32 4 x 2 dot tile implemented by its own loops, and a CPU declaring it."""
    a = te.placeholder((2,), "float32", name="A")
    b = te.placeholder((4, 2), "float32", name="B")
    r = te.reduce_axis(2, name="k")
    c = te.compute((4,), lambda i: te.sum(a[r] * b[i, r], axis=r), name="C")
    intrinsics.register(REF_DOT, te.create_prim_func([a, b, c], name=REF_DOT),
                        ReferenceImpl(), override=True)
    name = "test-auto-tensorize-ref-cpu"
    try:
        yield Target.register(name, "llvm", intrinsics=[REF_DOT], overwrite=True)
    finally:
        Target.unregister(name)


def test_declared_intrinsic_tensorizes_on_its_target_only(ref_dot_target):
    func = _float_matmul(8, 12, 8)
    assert REF_DOT in ref_dot_target.intrinsics
    space = DesignSpace(func, ref_dot_target)
    assert space.sketches and all(REF_DOT in _tensorized(s) for s in space.sketches)
    # Its implementation reads operands through strides: nothing needs packing.
    assert not any("pack_layout" in _kinds(s) for s in space.sketches)
    assert not any(REF_DOT in _tensorized(s) for s in DesignSpace(func, "llvm").sketches)
    rng = np.random.default_rng(14)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    y = rng.standard_normal((8, 12)).astype(np.float32)
    for seed in range(3):
        out = np.zeros((8, 12), np.float32)
        autotune.build(space.sample(seed=seed).func, ref_dot_target)(x, y, out)
        np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)


def test_unknown_or_unfit_declared_intrinsic_is_named():
    with pytest.raises(ScheduleError, match="unknown tensor intrinsic 'no_such_tile'"):
        DesignSpace(int8_matmul(16, 16, 16), "llvm -intrinsics=no_such_tile")
    with pytest.raises(ScheduleError, match=r"dot_16x4_u8i8i32_vnni, which needs the "
                                            r"features \+avx512vnni"):
        DesignSpace(int8_matmul(16, 16, 16), f"llvm -mcpu=haswell -intrinsics={VNNI}")
    with pytest.raises(ScheduleError, match="needs a aarch64 or arm64 target"):
        DesignSpace(int8_matmul(16, 16, 16, a_dtype="int8"), f"{VNNI_TARGET} "
                                                             f"-intrinsics={SDOT}")


# ---------------------------------------------------------------------------------------------
# Post-processing keeps a tensorized tile out of vectorised loops
# ---------------------------------------------------------------------------------------------

def _vectorized_around_calls(func) -> list[str]:
    out = []

    def visit(node, vector_loops):
        if isinstance(node, For):
            inner = vector_loops + [node.loop_var.name] if node.kind == VECTORIZED \
                else vector_loops
            visit(node.body, inner)
            return
        if isinstance(node, TensorIntrinCall):
            out.extend(vector_loops)
            return
        for child in children(node):
            if isinstance(child, Stmt):
                visit(child, vector_loops)

    visit(func.body, [])
    return out


def test_postprocs_leave_the_tile_scalar_and_verify_rejects_a_vectorised_one():
    sch = Schedule(int8_matmul(16, 64, 8))
    c = sch.get_block("C")
    sch.pack_layout(c, "B", lambda kk, n: (n // 16, kk // 4, n % 16, kk % 4))
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(i, ko, jo, ji, ki)
    sch.decompose_reduction(c, ko)
    sch.tensorize(ji, VNNI)
    # The spatial loop right around the tile (j_0, extent 4) is what the vectoriser would
    # take for an ordinary block.
    sch.annotate(sch.get_block("root"), VECTORIZE_KEY, 64)
    assert RewriteParallelVectorizeUnroll().apply(sch)
    assert _vectorized_around_calls(sch.func) == []
    assert verify_cpu(sch.func) is None
    # The init nest, a plain block, is still vectorised.
    assert any(lp.kind == VECTORIZED for lp in collect(sch.func.body, For))
    c_o = sch.get_block("C_o")
    sch.vectorize(sch.get_loops(c_o)[-1])
    assert _vectorized_around_calls(sch.func) == ["j_0"]
    assert "tensor intrinsic dot_16x4_u8i8i32_vnni is inside a vectorised loop" in \
        verify_cpu(sch.func)
