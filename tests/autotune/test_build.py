"""autotune.build / Kernel / load_module / target strings."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import TargetError, build, load_module, parse_target
from tensor_ir import te
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen import LLVMTarget
from tensor_ir.errors import BuildError
from tensor_ir.expr import FloatImm, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import BufferStore, For


def _matmul(M=8, N=6, K=5, dtype="float32"):
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C], name="matmul")


def _arrays(M=8, N=6, K=5):
    rng = np.random.default_rng(0)
    return (rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32),
            np.zeros((M, N), np.float32))


def _parallel_func():
    A = decl_buffer((64,), "float32", "A")
    B = decl_buffer((64,), "float32", "B")
    i = Var("i")
    body = BufferStore(B, A[(i,)] * FloatImm(2.0), (i,))
    return PrimFunc((A, B), For(i, IntImm(0), IntImm(64), "parallel", body), "double",
                    (("lowered", True),))


def test_build_and_call():
    kernel = build(_matmul())
    a, b, c = _arrays()
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert kernel.entry_name == "matmul"
    assert [p.name for p in kernel.params] == ["A", "B", "C"]
    assert [p.written for p in kernel.params] == [False, False, True]
    assert kernel.params[2].shape == (8, 6)


def test_build_lowered_function_and_custom_name():
    kernel = autotune.build(lower(_matmul()), name="mm_1")
    a, b, c = _arrays()
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert kernel.entry_name == "mm_1"


def test_num_cores_option_runs_parallel_loop():
    kernel = build(_parallel_func(), target="llvm -num-cores 2")
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    kernel(a, b)
    np.testing.assert_array_equal(b, 2 * a)
    assert kernel.num_threads == 2
    assert "tir_parallel_launch" in kernel.get_source("ll")
    assert "GOMP" not in kernel.get_source("ll")


def test_get_source():
    kernel = build(_matmul())
    ll = kernel.get_source("ll")
    assert 'i32 @matmul(ptr noalias' in ll  # the status (LLVM may mark it noundef)
    assert "noalias" in kernel.get_source("ll-raw")
    asm = kernel.get_source("asm")
    assert "matmul:" in asm
    with pytest.raises(BuildError, match="unknown source format"):
        kernel.get_source("ptx")


@pytest.mark.parametrize("suffix", [".o", ".so"])
def test_export_and_load(tmp_path, suffix):
    kernel = build(_matmul())
    path = tmp_path / f"mm{suffix}"
    kernel.export_library(path)
    again = load_module(path)
    a, b, c = _arrays()
    again(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert again.entry_name == "matmul"
    assert again.params == kernel.params
    # The reloaded kernel checks its arguments from the stored metadata.
    with pytest.raises(BuildError, match="parameter B expects shape"):
        again(a, np.zeros((2, 2), np.float32), c)
    with pytest.raises(BuildError, match="source is not available"):
        again.get_source("ll")


def test_export_and_load_parallel_so(tmp_path):
    kernel = build(_parallel_func())
    kernel.export_library(tmp_path / "par.so")
    again = load_module(tmp_path / "par.so")
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    again(a, b)
    np.testing.assert_array_equal(b, 2 * a)


def test_export_errors(tmp_path):
    kernel = build(_matmul())
    with pytest.raises(BuildError, match=r"\.o .*or \.so"):
        kernel.export_library(tmp_path / "mm.dll")
    with pytest.raises(BuildError, match="no such file"):
        load_module(tmp_path / "missing.so")


# ---------------------------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kernel():
    return build(_matmul())


def test_wrong_count(kernel):
    a, b, _ = _arrays()
    with pytest.raises(BuildError, match=r"takes 3 arrays \(A, B, C\), got 2"):
        kernel(a, b)


def test_wrong_shape(kernel):
    a, b, c = _arrays()
    with pytest.raises(BuildError, match=r"parameter C expects shape \(8, 6\), got \(6, 8\)"):
        kernel(a, b, np.zeros((6, 8), np.float32))


def test_wrong_dtype(kernel):
    a, b, c = _arrays()
    with pytest.raises(BuildError, match="parameter A expects dtype float32, got float64"):
        kernel(a.astype(np.float64), b, c)


def test_non_contiguous(kernel):
    a, b, c = _arrays()
    wide = np.zeros((8, 12), np.float32)
    with pytest.raises(BuildError, match="parameter C must be a C-contiguous"):
        kernel(a, b, wide[:, ::2])


def test_not_an_array_and_read_only_output(kernel):
    a, b, c = _arrays()
    with pytest.raises(BuildError, match="parameter A must be a numpy array"):
        kernel(a.tolist(), b, c)
    c.flags.writeable = False
    with pytest.raises(BuildError, match="parameter C is written by the kernel"):
        kernel(a, b, c)


def test_overlapping_arrays_are_refused():
    func = _parallel_func()
    kernel = build(func)
    buf = np.zeros(128, np.float32)
    with pytest.raises(BuildError, match="parameters A and B overlap"):
        kernel(buf[:64], buf[32:96])


# ---------------------------------------------------------------------------------------------
# target strings
# ---------------------------------------------------------------------------------------------

def test_parse_target_options():
    target, cores = parse_target("llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma -num-cores 4")
    assert (target.mcpu, target.mattr, cores) == ("skylake-avx512", "+avx2,+fma", 4)
    target, cores = parse_target("llvm -mtriple aarch64-unknown-linux-gnu")
    assert target.mtriple == "aarch64-unknown-linux-gnu"
    assert not target.is_host
    # The host target keeps the host's full feature set; -num-cores sets the thread count.
    target, cores = parse_target(autotune.Target("llvm -num-cores 1"))
    assert target == LLVMTarget() and cores == 1


@pytest.mark.parametrize("text, message", [
    ("vulkan", "unknown target 'vulkan'"),
    ("", "empty target string"),
    ("llvm -mfoo=1", "-mfoo"),
    ("llvm -mcpu", "option -mcpu needs a value"),
    ("llvm -num-cores zero", "-num-cores"),
    ("llvm skylake", "expected an option"),
])
def test_target_errors(text, message):
    with pytest.raises(TargetError, match=message):
        parse_target(text)
    with pytest.raises(ValueError):
        build(_matmul(), target=text)


def test_cuda_target_is_no_cpu_target_and_builds_through_the_gpu_path():
    with pytest.raises(TargetError, match="cuda target"):
        parse_target("cuda -arch=sm_90")
    from autotune.runtime.cuda import cuda_problem

    if cuda_problem() is None:
        pytest.skip("a GPU is here: the build would succeed")
    # Without pycuda or a GPU the build says which is missing.
    with pytest.raises(BuildError, match="cuda target: "):
        build(_matmul(), target="cuda -arch=sm_90")


def test_cross_target_build_exports_object_only(tmp_path):
    kernel = build(_matmul(), target="llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a72")
    assert "aarch64" in kernel.get_source("ll")
    kernel.export_library(tmp_path / "mm.o")
    assert (tmp_path / "mm.o").read_bytes()[:4] == b"\x7fELF"
    with pytest.raises(BuildError, match="not this host"):
        kernel(*_arrays())
    with pytest.raises(BuildError, match="cross linker"):
        kernel.export_library(tmp_path / "mm.so")


@pytest.mark.parametrize("spec, machine", [
    ("llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a72", 183),     # EM_AARCH64
    ("llvm -mtriple=riscv64-unknown-linux-gnu -mcpu=generic-rv64 -mattr=+m,+a,+f,+d,+c,+v",
     243),                                                                  # EM_RISCV
])
def test_cross_compiled_objects_are_elf_files_of_their_machine(spec, machine, tmp_path):
    """The object a cross build exports is an ELF relocatable file for the target's
    machine (e_type at byte 16, e_machine at byte 18, both little-endian here)."""
    kernel = build(_matmul(), target=spec)
    kernel.export_library(tmp_path / "mm.o")
    data = (tmp_path / "mm.o").read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    assert int.from_bytes(data[16:18], "little") == 1  # ET_REL
    assert int.from_bytes(data[18:20], "little") == machine


def test_build_rejects_non_function():
    import autotune

    assert autotune.BuildError is BuildError  # the error users catch, from the public API
    with pytest.raises(BuildError, match="build takes a PrimFunc"):
        build("matmul")


def test_repeat_calls_skip_the_full_check_but_still_catch_what_changed():
    """A kernel remembers argument sets it has checked; a repeat call re-checks only what can
    change on an existing array, and new arrays (even at a reused id) are checked in full."""
    kernel = build(_matmul())
    a, b, c = _arrays()
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    a[...] = 2.0
    kernel(a, b, c)  # the remembered set: the same pointers, the new values
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert len(kernel._checked) == 1
    # Fresh arrays every call (ids may be reused after collection): each result lands in its
    # own output array.
    for seed in range(20):
        x = np.full((8, 5), float(seed), np.float32)
        y = np.ones((5, 6), np.float32)
        out = np.zeros((8, 6), np.float32)
        kernel(x, y, out)
        assert np.all(out == 5.0 * seed)
    assert len(kernel._checked) <= 8
    # What an existing array can change is caught on the remembered set.
    kernel(a, b, c)
    c.flags.writeable = False
    with pytest.raises(BuildError, match="read-only"):
        kernel(a, b, c)
    c.flags.writeable = True
    a.shape = (5, 8)
    with pytest.raises(BuildError, match="expects shape"):
        kernel(a, b, c)
    a.shape = (8, 5)
    kernel(a, b, c)
    b.dtype = np.int32  # a view of the same bytes as another dtype
    with pytest.raises(BuildError, match="expects dtype"):
        kernel(a, b, c)
    b.dtype = np.float32
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
