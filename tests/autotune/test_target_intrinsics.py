"""Targets that declare tensor intrinsics: the ones their features imply, the ones a user
declares, the facts ``Target.register`` takes, their round trip through the canonical string,
and tuning a tensorized int8 matmul end to end."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import autotune
from autotune.measure import MeasureConfig
from records import MemoryDatabase
from records.keys import canonical_target
from schedules.postproc import replay
from schedules.space import DesignSpace
from search import SearchConfig
from tensor_ir.stmt import TensorIntrinCall
from tensor_ir.target import Target, TargetError
from tensor_ir.visitor import collect
from tests.schedules.test_tensorize import int8_inputs, int8_matmul

VNNI = "dot_16x4_u8i8i32_vnni"
SDOT = "dot_4x4_i8i8i32_sdot"
X86 = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512"

needs_vnni = pytest.mark.skipif(
    not llvm.get_host_cpu_features().get("avx512vnni", False),
    reason="the host CPU has no AVX-512 VNNI (avx512vnni)")


@pytest.fixture
def registered():
    """Names registered by a test, unregistered afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        if name in Target.registered():
            Target.unregister(name)


# ---------------------------------------------------------------------------------------------
# Intrinsics implied by features, and declared ones
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, expected", [
    (f"{X86} -mattr=+avx512vnni", (VNNI,)),
    (X86, ()),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell", ()),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod", (SDOT,)),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon", ()),
    # The same feature name on another architecture implies nothing.
    ("cuda -arch=sm_80", ()),
])
def test_features_imply_intrinsics(spec, expected):
    assert Target(spec).intrinsics == expected


def test_host_offers_vnni_when_its_cpu_has_it():
    host = Target("llvm")
    has = bool(llvm.get_host_cpu_features().get("avx512vnni", False))
    assert (VNNI in host.intrinsics) == has
    assert host.facts()["intrinsics"] == host.intrinsics


def test_declared_intrinsics_round_trip_through_the_canonical_string():
    t = Target(f"{X86} -intrinsics=my_tile_b,my_tile_a,my_tile_b")
    assert t.intrinsics == ("my_tile_a", "my_tile_b")
    assert "-intrinsics=my_tile_a,my_tile_b" in str(t)
    assert Target(str(t)) == t and Target(str(t)).intrinsics == t.intrinsics
    # Declaring what the features imply adds nothing: the same target, the same string.
    vnni = Target(f"{X86} -mattr=+avx512vnni")
    assert Target(f"{X86} -mattr=+avx512vnni -intrinsics={VNNI}") == vnni
    assert "-intrinsics" not in str(vnni)
    # A name a process has not registered still parses (a record from another process).
    assert canonical_target(str(t)) == str(t)


def test_bad_intrinsic_names_and_kinds_are_refused():
    with pytest.raises(TargetError, match="-intrinsics entry 'no way' is not"):
        Target(f"{X86} -intrinsics='no way'")
    with pytest.raises(TargetError, match="unknown option -intrinsics for kind 'cuda'"):
        Target("cuda -arch=sm_80 -intrinsics=x")


# ---------------------------------------------------------------------------------------------
# Target.register with facts
# ---------------------------------------------------------------------------------------------

def test_register_with_facts_round_trips_without_the_registry(registered):
    name = "test-avx2-4core"
    registered.append(name)
    t = Target.register(name, "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell", num_cores=4,
                        vector_width=256, features=["fma"],
                        caches={"l1d": "32K", "l2": 1024 * 1024, "line": 64})
    assert (t.num_cores, t.vector_bits, t.l1d_cache, t.l2_cache, t.cache_line) == (
        4, 256, 32 * 1024, 1024 * 1024, 64)
    assert t.mattr == ("+fma",) and t.intrinsics == ()
    assert Target(name) == t and canonical_target(name) == str(t)
    text = str(t)
    Target.unregister(name)
    # Records keep the canonical string: it carries every fact, registry or not.
    again = Target(text)
    assert again == t and again.facts() == t.facts()


def test_register_extends_list_options_and_declares_intrinsics(registered):
    registered.extend(["test-vnni-board", "test-mattr-board"])
    board = Target.register("test-mattr-board", f"{X86} -mattr=+avx512bw",
                            features="+avx512vnni,-avx512cd")
    assert board.mattr == ("+avx512bw", "+avx512vnni", "-avx512cd")
    assert board.intrinsics == (VNNI,)
    # Declared on top of the spec's own list; already-implied names are left out.
    vnni = Target.register("test-vnni-board", f"{X86} -mattr=+avx512vnni -intrinsics={SDOT}x",
                           intrinsics=[VNNI])
    assert vnni.intrinsics == (VNNI, f"{SDOT}x")


def test_register_checks_declared_intrinsics_and_facts(registered):
    registered.append("test-bad-board")
    with pytest.raises(TargetError, match="unknown tensor intrinsic 'no_such_tile'"):
        Target.register("test-bad-board", X86, intrinsics=["no_such_tile"])
    with pytest.raises(TargetError, match=r"needs the features \+avx512vnni"):
        Target.register("test-bad-board", X86, intrinsics=[VNNI])
    with pytest.raises(TargetError, match="needs a aarch64 or arm64 target"):
        Target.register("test-bad-board", X86, intrinsics=[SDOT])
    with pytest.raises(TargetError, match="num_cores must be a positive integer"):
        Target.register("test-bad-board", X86, num_cores="4")
    with pytest.raises(TargetError, match="num-cores=0 must be a positive"):
        Target.register("test-bad-board", X86, num_cores=0)
    with pytest.raises(TargetError, match="unknown option -num-cores for kind 'cuda'"):
        Target.register("test-bad-board", "cuda -arch=sm_80", num_cores=4)
    with pytest.raises(TargetError, match="caches maps some of 'l1d', 'l2', 'l3', 'line'"):
        Target.register("test-bad-board", X86, caches={"l4": "64M"})
    with pytest.raises(TargetError, match=r"caches\['line'\] must be a positive integer, got"):
        Target.register("test-bad-board", X86, caches={"line": "64"})
    assert "test-bad-board" not in Target.registered()


def test_register_still_takes_a_plain_spec(registered):
    registered.append("test-plain-board")
    t = Target.register("test-plain-board", "llvm -mtriple=aarch64-linux-gnu -mattr=+dotprod")
    assert Target.registered()["test-plain-board"] == \
        "llvm -mtriple=aarch64-linux-gnu -mattr=+dotprod"
    assert t.intrinsics == (SDOT,)


# ---------------------------------------------------------------------------------------------
# A custom CPU changes the design space
# ---------------------------------------------------------------------------------------------

def _parallel_choices(space: DesignSpace) -> set:
    out = set()
    for sketch in space.sketches:
        parallel = {inst.inputs[1] for inst in sketch if inst.kind == "annotate"
                    and dict(inst.attrs).get("key") == "meta_schedule.parallel"}
        for inst in sketch:
            if inst.kind == "sample_categorical" and inst.outputs[0] in parallel:
                out.add(tuple(dict(inst.attrs)["candidates"]))
    return out


def test_avx2_four_core_variant_gets_no_vnni_and_other_parallel_choices(registered):
    registered.append("test-avx2-only-4core")
    host_like = Target(f"{X86} -mattr=+avx512vnni -num-cores=2")
    avx2 = Target.register("test-avx2-only-4core", "llvm -mtriple=x86_64-linux-gnu "
                           "-mcpu=haswell", num_cores=4)
    func = int8_matmul(64, 64, 64)
    vnni_space = DesignSpace(func, host_like)
    avx2_space = DesignSpace(func, "test-avx2-only-4core")
    assert all(any(i.kind == "tensorize" for i in s) for s in vnni_space.sketches)
    assert not any(i.kind == "tensorize" for s in avx2_space.sketches for i in s)
    # Parallel extents are multiples of the cores: 4 cores, other candidates.
    assert _parallel_choices(vnni_space) == {(1, 2, 8, 32, 128)}
    assert _parallel_choices(avx2_space) == {(1, 4, 16, 64, 256)}
    assert avx2.vector_bits == 256


# ---------------------------------------------------------------------------------------------
# Tuning a tensorized int8 matmul end to end
# ---------------------------------------------------------------------------------------------

@needs_vnni
def test_tune_int8_matmul_picks_a_tensorized_program():
    m, n, k = 64, 64, 128
    func = int8_matmul(m, n, k)
    db = MemoryDatabase()
    # Short repeats keep the test quick; every candidate's output is checked against the
    # reference, so a wrong tensorized program would be recorded as an error, not timed.
    config = MeasureConfig(repeat=2, min_repeat_ms=5, timeout=10, check="all")
    result = autotune.tune(func, "llvm", trials=16,
                           search=SearchConfig(seed=0, batch_size=8, remeasure_top=2,
                                               remeasure_rounds=1),
                           database=db, measure=config, log=False)
    assert result.trials == 16 and np.isfinite(result.best_time)
    kinds = [inst.kind for inst in result.best_trace]
    assert "tensorize" in kinds and "pack_layout" in kinds
    calls = collect(result.best_func.body, TensorIntrinCall)
    assert calls and {c.intrin for c in calls} == {VNNI}
    # The stored trace replays to the same tensorized program, and the database's best is what
    # a build under apply_history_best compiles: correct, with vpdpbusd.
    again = replay(result.best_trace, func, Target("llvm"))
    assert collect(again.func.body, TensorIntrinCall)
    with autotune.apply_history_best(db):
        kernel = autotune.build(func, "llvm")
    a, b, expected = int8_inputs(m, n, k, seed=21)
    out = np.full((m, n), 12345, np.int32)
    kernel(a, b, out)
    np.testing.assert_array_equal(out, expected)
    assert "vpdpbusd" in kernel.get_source("asm")
    # Every measured candidate but the seeded default schedule was tensorized.
    records = db.records(result.workload_key, result.target)
    assert len(records) == 16 and not any(r.is_error for r in records)
    plain = [r for r in records if not any(i.kind == "tensorize" for i in r.trace())]
    assert len(plain) <= 1
