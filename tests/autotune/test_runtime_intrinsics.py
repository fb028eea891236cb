"""Intrinsics registered at run time reach the build and measurement workers.

The local builder and runner work in separate interpreters, which register only the built-in
intrinsics on import.  A candidate tensorized with an intrinsic a user registered in their
script or notebook carries the intrinsic's definition (tensor_ir.intrinsics.portable) and the
workers register it before building; the runner loads an external intrinsic's shared library
before loading the kernel.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import autotune
from autotune.measure import MeasureConfig
from search import SearchConfig
from tensor_ir import intrinsics, te
from tensor_ir.intrinsics import ExternCImpl, IntrinsicError, LLVMImpl, ReferenceImpl
from tensor_ir.intrinsics.builtin import _emit_vnni
from tensor_ir.target import Target

from ..schedules.test_tensorize import C_TILE as TENSORIZE_C_TILE
from ..schedules.test_tensorize import schedule_dot

QUICK = MeasureConfig(repeat=2, min_repeat_ms=1.0)

# The C tile of the tensorize tests under a symbol of its own.
C_TILE = TENSORIZE_C_TILE.replace("tile_mac_8x4", "rt_tile_mac_8x4")


def _int8_matmul(m, n, k, a_dtype="int8"):
    a = te.placeholder((m, k), a_dtype, name="A")
    b = te.placeholder((k, n), "int8", name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("int32") * b[r, j].astype("int32"),
                                               axis=r), name="C")
    return te.create_prim_func([a, b, c], name=f"rt_mm_{m}_{n}_{k}")


def _float_matmul(m, n, k):
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c], name=f"rt_fmm_{m}_{n}_{k}")


def _float_dot(lanes, depth, name):
    a = te.placeholder((depth,), "float32", name="A")
    b = te.placeholder((lanes, depth), "float32", name="B")
    r = te.reduce_axis(depth, name="k")
    c = te.compute((lanes,), lambda i: te.sum(a[r] * b[i, r], axis=r), name="C")
    return te.create_prim_func([a, b, c], name=name)


@pytest.fixture
def declared_target(request):
    """A CPU target declaring one intrinsic, unregistered afterwards."""
    names = []

    def make(intrin: str) -> Target:
        name = f"test-rt-intrin-{len(names)}-{request.node.name}".replace("[", "-") \
            .replace("]", "")
        names.append(name)
        return Target.register(name, "llvm", intrinsics=[intrin], overwrite=True)

    yield make
    for name in names:
        Target.unregister(name)


def _tensorized_trials(result) -> tuple[int, int]:
    trace = result.best_trace or []
    tensorized = "tensorize" in [inst.kind for inst in trace]
    errors = sum(1 for t in result.history if t.error_kind is not None)
    return tensorized, errors


# ---------------------------------------------------------------------------------------------
# portable / install
# ---------------------------------------------------------------------------------------------

def test_builtins_do_not_travel():
    sch, _ = schedule_dot(_int8_matmul(16, 32, 16, a_dtype="uint8"), 16, intrinsics.VNNI_DOT)
    assert intrinsics.used_in(sch.func) == [intrinsics.VNNI_DOT]
    assert intrinsics.portables(sch.func) == []


@pytest.mark.parametrize("kind", ["extern_c", "reference", "llvm"])
def test_portable_definition_installs_the_same_intrinsic(kind):
    name = f"test_rt_portable_{kind}"
    impl = {"extern_c": ExternCImpl("some_symbol", "libtile.so"),
            "reference": ReferenceImpl(),
            "llvm": LLVMImpl(_emit_vnni, arch=("x86_64",), features=("+avx512vnni",))}[kind]
    desc = intrinsics.dot_description(16, "uint8", "int8", name)
    intrinsics.register(name, desc, impl, override=True)
    spec = intrinsics.portable(name)
    assert spec["impl"]["kind"] == kind
    # Installed under another name (as a worker would under the same one), it is the same
    # computation and implementation.
    copy = dict(spec, name=name + "_copy")
    installed = intrinsics.install(copy)
    assert installed.impl == impl
    assert installed.tile.extents == intrinsics.get(name).tile.extents
    assert intrinsics.portable(name + "_copy") == copy
    # Installing an identical definition again keeps the registered object.
    assert intrinsics.install(copy) is installed


def test_install_replaces_a_different_definition_under_the_same_name():
    name = "test_rt_replaced"
    intrinsics.register(name, intrinsics.dot_description(16, "uint8", "int8", name),
                        ReferenceImpl(), override=True)
    spec = intrinsics.portable(name)
    intrinsics.register(name, intrinsics.dot_description(16, "uint8", "int8", name),
                        ExternCImpl("stale", None), override=True)
    assert isinstance(intrinsics.install(spec).impl, ReferenceImpl)


def test_an_emitter_workers_cannot_import_is_refused_by_name():
    def local_emit(ctx):  # defined inside a function: no worker can import it
        raise AssertionError("never emitted")

    name = "test_rt_local_emitter"
    intrinsics.register(name, intrinsics.dot_description(16, "uint8", "int8", name),
                        LLVMImpl(local_emit, arch=("x86_64",)), override=True)
    with pytest.raises(IntrinsicError, match=r"local_emit.*inside a function"):
        intrinsics.portable(name)

    def main_emit(ctx):
        raise AssertionError("never emitted")

    main_emit.__module__ = "__main__"
    main_emit.__qualname__ = "main_emit"
    intrinsics.register(name, intrinsics.dot_description(16, "uint8", "int8", name),
                        LLVMImpl(main_emit, arch=("x86_64",)), override=True)
    with pytest.raises(IntrinsicError, match=r"in __main__.*importable module"):
        intrinsics.portable(name)


def test_install_names_an_emitter_it_cannot_import():
    spec = {"name": "test_rt_missing_emitter",
            "desc": intrinsics.dot_description(16, "uint8", "int8", "x").to_json(),
            "impl": {"kind": "llvm", "emit": "no_such_module_here:emit", "arch": ["x86_64"],
                     "features": []}}
    with pytest.raises(IntrinsicError, match="cannot import its LLVM emitter "
                                             "no_such_module_here:emit"):
        intrinsics.install(spec)


# ---------------------------------------------------------------------------------------------
# Tuning with the local (out-of-process) builder and runner
# ---------------------------------------------------------------------------------------------

def test_tuning_with_a_reference_intrinsic_registered_at_run_time(declared_target):
    name = "test_rt_ref_dot_4x2"
    intrinsics.register(name, _float_dot(4, 2, name), ReferenceImpl(), override=True)
    func = _float_matmul(8, 12, 8)
    result = autotune.tune(func, declared_target(name), trials=8,
                           search=SearchConfig(batch_size=4, seed=0), measure=QUICK, log=False)
    tensorized, errors = _tensorized_trials(result)
    assert errors == 0 and tensorized
    assert name in intrinsics.used_in(result.best_func)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    y = rng.standard_normal((8, 12)).astype(np.float32)
    out = np.zeros((8, 12), np.float32)
    autotune.build(result.best_func, "llvm")(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to build the C tile")
def test_tuning_with_an_external_c_intrinsic_registered_at_run_time(tmp_path, declared_target):
    src = tmp_path / "tile.c"
    src.write_text(C_TILE)
    lib = tmp_path / "librttile.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    name = "test_rt_tile_mac_8x4"
    intrinsics.register(name, intrinsics.dot_description(8, "int8", "int8", name),
                        ExternCImpl("rt_tile_mac_8x4", str(lib)), override=True)
    m, n, k = 8, 32, 16
    result = autotune.tune(_int8_matmul(m, n, k), declared_target(name), trials=8,
                           search=SearchConfig(batch_size=4, seed=0), measure=QUICK, log=False)
    # Built in the worker (the definition travelled) and run in the runner's worker (the
    # library was loaded there before the kernel): no error records.
    tensorized, errors = _tensorized_trials(result)
    assert errors == 0 and tensorized
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    out = np.zeros((m, n), np.int32)
    autotune.build(result.best_func, "llvm")(a, b, out)
    np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def test_tuning_stops_with_a_typed_error_when_the_emitter_cannot_travel(declared_target):
    def notebook_emit(ctx):
        raise AssertionError("never emitted")

    name = "test_rt_unshippable_dot"
    intrinsics.register(name, _float_dot(4, 2, name),
                        LLVMImpl(notebook_emit, arch=("x86_64", "aarch64")), override=True)
    with pytest.raises(IntrinsicError, match="notebook_emit"):
        autotune.tune(_float_matmul(8, 12, 8), declared_target(name), trials=4,
                      search=SearchConfig(batch_size=4, seed=0), measure=QUICK, log=False)
