"""Shared libraries linked from the project's LLVM objects (and compiled from C) without the
system's compiler or linker: they load with ctypes, compute what numpy computes, record libm
as a versioned dependency, and linking works with no cc, gcc or ld on PATH."""
from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import struct
import subprocess
import sys
import textwrap

import llvmlite.ir as ir
import numpy as np
import pytest

import autotune
from autotune.runtime.build import build_object
from tensor_ir import ops
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen import codegen, compile_module
from tensor_ir.codegen import link, threadpool
from tensor_ir.codegen.compile import LLVMTarget, host_triple, target_machine
from tensor_ir.codegen.link import compile_c_shared, link_shared_library
from tensor_ir.codegen.llvm import symbol_name
from tensor_ir.errors import BuildError
from tensor_ir.expr import FloatImm, IntImm, Var
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import BufferStore, For

F32 = ir.FloatType()
I32 = ir.IntType(32)
TABLE = (0.5, -1.25, 2.0, 3.5)
HOST = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64",
        "arm64": "aarch64"}.get(platform.machine().lower(), "x86_64")
FOREIGN = "aarch64" if HOST == "x86_64" else "x86_64"
TRIPLES = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}


# ---------------------------------------------------------------------------------------------
# objects built here
# ---------------------------------------------------------------------------------------------

def exp_table_module() -> ir.Module:
    """``twice(i) = 2 * lookup_exp(i)``, ``lookup_exp(i) = expf(TABLE[i])`` (kept out of line,
    so one function calls the other), with a constant table and an exported counter of calls
    (a global reached through the GOT)."""
    m = ir.Module("exp_table")
    expf = ir.Function(m, ir.FunctionType(F32, [F32]), "expf")
    table = ir.GlobalVariable(m, ir.ArrayType(F32, len(TABLE)), "table")
    table.initializer = ir.Constant(ir.ArrayType(F32, len(TABLE)), list(TABLE))
    table.global_constant = True
    table.linkage = "internal"
    calls = ir.GlobalVariable(m, I32, "calls")
    calls.initializer = ir.Constant(I32, 0)

    lookup = ir.Function(m, ir.FunctionType(F32, [I32]), "lookup_exp")
    lookup.attributes.add("noinline")
    b = ir.IRBuilder(lookup.append_basic_block())
    b.store(b.add(b.load(calls), ir.Constant(I32, 1)), calls)
    b.ret(b.call(expf, [b.load(b.gep(table, [ir.Constant(I32, 0), lookup.args[0]]))]))

    twice = ir.Function(m, ir.FunctionType(F32, [I32]), "twice")
    b = ir.IRBuilder(twice.append_basic_block())
    value = b.call(lookup, [twice.args[0]])
    b.ret(b.fadd(value, value))
    return m


def split_modules() -> tuple[ir.Module, ir.Module]:
    """Two objects for one library: ``scaled_exp(x) = expf(x) * factor`` with the global
    ``factor`` in the first; ``shifted(x) = scaled_exp(x) + factor`` in the second, which
    reaches both through the other object."""
    first = ir.Module("first")
    expf = ir.Function(first, ir.FunctionType(F32, [F32]), "expf")
    factor = ir.GlobalVariable(first, F32, "factor")
    factor.initializer = ir.Constant(F32, 3.0)
    scaled = ir.Function(first, ir.FunctionType(F32, [F32]), "scaled_exp")
    b = ir.IRBuilder(scaled.append_basic_block())
    b.ret(b.fmul(b.call(expf, [scaled.args[0]]), b.load(factor)))

    second = ir.Module("second")
    other = ir.Function(second, ir.FunctionType(F32, [F32]), "scaled_exp")
    shared = ir.GlobalVariable(second, F32, "factor")  # a declaration: defined in `first`
    shifted = ir.Function(second, ir.FunctionType(F32, [F32]), "shifted")
    b = ir.IRBuilder(shifted.append_basic_block())
    b.ret(b.fadd(b.call(other, [shifted.args[0]]), b.load(shared)))
    return first, second


def host_object(module: ir.Module) -> bytes:
    return compile_module(module).object_code


def foreign_object(module: ir.Module) -> bytes:
    return compile_module(module, LLVMTarget(mtriple=TRIPLES[FOREIGN])).object_code


def float_function(lib: ctypes.CDLL, name: str, argtype) -> object:
    fn = getattr(lib, name)
    fn.restype = ctypes.c_float
    fn.argtypes = [argtype]
    return fn


# ---------------------------------------------------------------------------------------------
# reading the linked file (no readelf on a minimal image)
# ---------------------------------------------------------------------------------------------

def elf_facts(path) -> dict:
    """Type, machine, DT_NEEDED entries and the symbol versions needed from each library of
    a little-endian ELF64 file."""
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    kind, machine = struct.unpack_from("<HH", data, 16)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]

    def string(section, offset):
        start = sections[section][4] + offset
        return data[start:data.index(b"\0", start)].decode()

    needed, versions = [], {}
    for _, sh_type, _, _, offset, size, link_to, info, _, _ in sections:
        if sh_type == 6:  # SHT_DYNAMIC
            for at in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", data, at)
                if tag == 1:  # DT_NEEDED
                    needed.append(string(link_to, value))
        elif sh_type == 0x6FFFFFFE:  # SHT_GNU_verneed
            at = offset
            for _ in range(info):
                _, count, file, aux, next_need = struct.unpack_from("<HHIII", data, at)
                names, aux_at = versions.setdefault(string(link_to, file), set()), at + aux
                for _ in range(count):
                    _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, aux_at)
                    names.add(string(link_to, name))
                    aux_at += next_aux
                at += next_need
    return {"type": kind, "machine": machine, "needed": needed, "versions": versions}


# ---------------------------------------------------------------------------------------------
# linking objects
# ---------------------------------------------------------------------------------------------

def test_linked_object_loads_and_computes(tmp_path):
    path = tmp_path / "libexp.so"
    link_shared_library([host_object(exp_table_module())], path)
    lib = ctypes.CDLL(str(path))
    twice = float_function(lib, "twice", ctypes.c_int32)
    lookup = float_function(lib, "lookup_exp", ctypes.c_int32)
    got = np.array([twice(i) for i in range(len(TABLE))], np.float32)
    np.testing.assert_allclose(got, 2 * np.exp(np.array(TABLE, np.float32)), rtol=1e-6)
    assert lookup(2) == pytest.approx(float(np.exp(np.float32(2.0))), rel=1e-6)
    # The exported global is the one the code updates (through the GOT).
    assert ctypes.c_int32.in_dll(lib, "calls").value == len(TABLE) + 1
    facts = elf_facts(path)
    assert facts["type"] == 3 and facts["machine"] == ELF_MACHINES[HOST]  # ET_DYN
    # libm is recorded by its soname, and expf by the version this host's libm gives it.
    assert "libm.so.6" in facts["needed"]
    assert any(v.startswith("GLIBC_") for v in facts["versions"]["libm.so.6"])


def test_project_kernel_links_and_matches_numpy(tmp_path):
    func = lower(ops.softmax((4, 16)))
    path = tmp_path / "libsoftmax.so"
    link_shared_library([host_object(codegen(func, "softmax_k"))], path)
    entry = getattr(ctypes.CDLL(str(path)), symbol_name("softmax_k"))
    entry.restype = None
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    y = np.zeros_like(x)
    entry(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data))
    np.testing.assert_allclose(y, ops.ref_softmax(x), rtol=1e-5, atol=1e-7)


def test_parallel_kernel_with_its_thread_pool_needs_only_libc(tmp_path):
    # What an exported parallel kernel is: its object plus the thread pool's, linked and
    # loaded the way autotune.load_module loads an exported .so.
    a_buf = decl_buffer((64, 64), "float32", "A")
    b_buf = decl_buffer((64, 64), "float32", "B")
    i, j = Var("i"), Var("j")
    one = FloatImm(1.0, "float32")
    inner = For(j, IntImm(0), IntImm(64), "vectorized",
                BufferStore(b_buf, a_buf[i, j] + one, (i, j)), None, ())
    body = For(i, IntImm(0), IntImm(64), "parallel", inner, None, ())
    func = PrimFunc((a_buf, b_buf), body, "addone", (("lowered", True),))
    kernel_object = build_object(func, "llvm -num-cores 2")
    assert threadpool.LAUNCH.encode() in kernel_object
    pool = threadpool.runtime_object(target_machine(LLVMTarget()), host_triple())
    path = tmp_path / "libaddone.so"
    # libpthread.so.0 holds pthread_create before glibc 2.34; --as-needed drops it after.
    link_shared_library([kernel_object, pool], path, needed=("libm.so.6", "libpthread.so.0"))
    assert set(elf_facts(path)["needed"]) <= {"libc.so.6", "libm.so.6", "libpthread.so.0"}
    kernel = autotune.load_module(path)
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    b = np.zeros_like(a)
    kernel(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_several_objects_link_into_one_library(tmp_path):
    first, second = split_modules()
    path = tmp_path / "libsplit.so"
    link_shared_library([host_object(first), host_object(second)], path)
    lib = ctypes.CDLL(str(path))
    shifted = float_function(lib, "shifted", ctypes.c_float)
    for x in (-1.0, 0.0, 0.75):
        assert shifted(x) == pytest.approx(float(np.exp(np.float32(x))) * 3 + 3, rel=1e-6)
    # Without the object that defines them, the second's references are unresolved.
    with pytest.raises(BuildError, match="scaled_exp"):
        link_shared_library([host_object(second)], tmp_path / "libhalf.so")


def test_same_objects_give_the_same_library(tmp_path):
    # An export names its library by a digest of its bytes.
    objects = [host_object(m) for m in split_modules()]
    link_shared_library(objects, tmp_path / "a.so")
    link_shared_library(objects, tmp_path / "b.so")
    assert (tmp_path / "a.so").read_bytes() == (tmp_path / "b.so").read_bytes()


def test_bad_inputs_raise_build_error(tmp_path):
    good = host_object(exp_table_module())
    out = tmp_path / "out.so"
    with pytest.raises(BuildError, match=r"out\.so.*object 2 of 2 is not an ELF object"):
        link_shared_library([good, b"not an object at all"], out)
    with pytest.raises(BuildError, match="no object files"):
        link_shared_library([], out)
    with pytest.raises(BuildError, match="must be bytes"):
        link_shared_library(["kernel.o"], out)
    # A header that promises more than the file holds: the linker's own message comes back.
    with pytest.raises(BuildError, match=r"linking .*out\.so failed") as err:
        link_shared_library([good[:200]], out)
    assert "object1.o" in str(err.value)
    with pytest.raises(BuildError, match="undefined symbol: expf"):
        link_shared_library([good], out, needed=())
    with pytest.raises(BuildError, match="libnot-a-library.so.9 is not installed"):
        link_shared_library([good], out, needed=("libm.so.6", "libnot-a-library.so.9"))
    with pytest.raises(BuildError, match="folder .* does not exist"):
        link_shared_library([good], tmp_path / "missing" / "out.so")
    with pytest.raises(BuildError, match=f"compiled for {FOREIGN}, the first for {HOST}"):
        link_shared_library([good, foreign_object(exp_table_module())], out)
    assert not out.exists()


def test_allow_undefined_leaves_symbols_to_the_loader(tmp_path):
    path = tmp_path / "libloose.so"
    link_shared_library([host_object(split_modules()[1])], path, allow_undefined=True)
    assert "scaled_exp" in path.read_bytes().decode("latin-1")


def test_missing_ziglang_is_named(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(link.importlib.util, "find_spec",
                        lambda name, *a: None if name == "ziglang" else real(name, *a))
    with pytest.raises(BuildError, match=r"pip install ziglang"):
        link_shared_library([host_object(exp_table_module())], tmp_path / "x.so")


def test_foreign_objects_link_against_glibc_stubs(tmp_path):
    path = tmp_path / "libforeign.so"
    link_shared_library([foreign_object(exp_table_module())], path)
    facts = elf_facts(path)
    assert facts["type"] == 3 and facts["machine"] == ELF_MACHINES[FOREIGN]
    assert facts["needed"] == ["libm.so.6"]
    assert any(v.startswith("GLIBC_") for v in facts["versions"]["libm.so.6"])
    with pytest.raises(BuildError, match=f"no {FOREIGN} copy of libgomp.so.1"):
        link_shared_library([foreign_object(exp_table_module())], path,
                            needed=("libm.so.6", "libgomp.so.1"))


# ---------------------------------------------------------------------------------------------
# compiling C
# ---------------------------------------------------------------------------------------------

C_TILE = r"""
#include <math.h>
#include <stdint.h>
/* c[i] += sum_k a[k] * b[i, k] on an 8 x 4 int8 tile; scale() exercises libm. */
void tile_mac_8x4(const int8_t *a, const int8_t *b, int32_t *c) {
    for (int i = 0; i < 8; ++i) {
        int32_t acc = 0;
        for (int k = 0; k < 4; ++k)
            acc += (int32_t)a[k] * (int32_t)b[i * 4 + k];
        c[i] += acc;
    }
}
float scale(float x) { return expf(x) * SCALE; }
"""


def test_compile_c_shared_builds_a_loadable_library(tmp_path):
    source = tmp_path / "tile.c"
    source.write_text(C_TILE)
    path = tmp_path / "libtile.so"
    # The flags of the cc command the accelerator and the tests used carry over.
    compile_c_shared(source, path, ("-O2", "-shared", "-fPIC", "-DSCALE=2.0f"))
    lib = ctypes.CDLL(str(path))
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, 4, dtype=np.int8)
    b = rng.integers(-128, 128, (8, 4), dtype=np.int8)
    c = rng.integers(-1000, 1000, 8, dtype=np.int32)
    expected = c + b.astype(np.int32) @ a.astype(np.int32)
    lib.tile_mac_8x4(*(ctypes.c_void_p(x.ctypes.data) for x in (a, b, c)))
    np.testing.assert_array_equal(c, expected)
    assert float_function(lib, "scale", ctypes.c_float)(1.0) == pytest.approx(2 * np.e, 1e-6)
    assert "libm.so.6" in elf_facts(path)["needed"]


def test_compile_c_shared_errors_name_the_source(tmp_path):
    source = tmp_path / "broken.c"
    source.write_text("int f( { return 1; }\n")
    with pytest.raises(BuildError, match=r"compiling .*broken\.c failed.*\n.*error"):
        compile_c_shared(source, tmp_path / "libbroken.so")
    with pytest.raises(BuildError, match="linker flag '-lm'"):
        compile_c_shared(source, tmp_path / "libbroken.so", ("-O2", "-lm"))
    with pytest.raises(BuildError, match="no such file"):
        compile_c_shared(tmp_path / "absent.c", tmp_path / "libabsent.so")
    assert not (tmp_path / "libbroken.so").exists()


# ---------------------------------------------------------------------------------------------
# no system toolchain
# ---------------------------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import ctypes, shutil, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_link import C_TILE, exp_table_module, float_function, host_object
    from tensor_ir.codegen.link import compile_c_shared, link_shared_library
    assert [shutil.which(t) for t in ("cc", "gcc", "ld", "clang")] == [None] * 4
    link_shared_library([host_object(exp_table_module())], sys.argv[2] + "/libexp.so")
    twice = float_function(ctypes.CDLL(sys.argv[2] + "/libexp.so"), "twice", ctypes.c_int32)
    open(sys.argv[2] + "/tile.c", "w").write(C_TILE)
    compile_c_shared(sys.argv[2] + "/tile.c", sys.argv[2] + "/libtile.so", ["-DSCALE=3.0f"])
    scale = float_function(ctypes.CDLL(sys.argv[2] + "/libtile.so"), "scale", ctypes.c_float)
    print(twice(3), scale(0.0))
""")


def test_links_and_compiles_with_no_toolchain_on_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    env = dict(os.environ, PATH=str(bin_dir))
    proc = subprocess.run([str(bin_dir / "python"), "-c", SCRIPT, os.path.dirname(__file__),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    twice, scale = map(float, proc.stdout.split())
    assert twice == pytest.approx(2 * float(np.exp(np.float32(3.5))), rel=1e-6)
    assert scale == 3.0
