"""Loading JIT code never aborts the process, whatever the address-space layout (issue 64).

MCJIT placed an object's code and its read-only data in separate mappings; when a long-lived
process had them land more than 2 GB apart, the code's 32-bit PC-relative reference to its
constant pool overflowed and LLVM aborted the process in ``finalize_object``.  Here the layout
is made on purpose instead of waited for: a child process reserves all of its free address
space (``PROT_NONE``, ``MAP_NORESERVE``: no memory behind it), gives back one large area for
its own allocations at the bottom, and before every load opens small holes of assorted sizes
high up, each gigabytes from the next.  Linux places a new mapping in the highest free gap that
fits it, so each small mapping a loader makes lands in a hole of its own, far from the others.

In that process a few dozen kernels of different kinds (constant pools, a reduction, a
parallel loop, libm's expf, a function registered with ``llvm.add_symbol``, a matmul) are built,
loaded with ``JITModule`` and checked against numpy; a control run loads them the way the code
did before, one MCJIT engine per object, and must die.  The child runs the checks; this
module's tests only read its exit status and its report (the last line of its output).

The other tests here load in this process what used to kill it (a symbol nowhere to be found,
bytes that are no object file) and expect BuildError, and check that a symbol registered with
``llvm.add_symbol`` resolves.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux",
                                reason="the layout is made with Linux's mmap placement")

GB = 1 << 30
PAGE = mmap.PAGESIZE
KERNELS = 36
# Holes opened before each load, in pages: every small size, then a few larger ones, so that
# each of a loader's mappings (one to a few pages for these kernels) exactly fills one.
HOLE_PAGES = tuple(range(1, 17)) + (24, 32, 48, 64)
HOLE_SPACING = 3 * GB  # more than a 32-bit displacement reaches
WORK_AREA = 8 * GB     # where the child's own (larger) allocations go


def _child(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True,
                          timeout=300, check=False)


def _report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, (f"the child exited with {proc.returncode} (a negative "
                                  f"status is the signal that killed it):\n"
                                  f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kernels_load_and_run_in_a_fragmented_address_space():
    report = _report(_child("jitmodule"))
    # The layout did what it is for: two small mappings made back to back were placed
    # gigabytes apart.
    assert report["probe_gap"] > 2 * GB
    assert report["checked"] == KERNELS
    assert set(report["kinds"]) == {"constants", "reduction", "parallel", "expf",
                                    "registered", "matmul"}
    # A reference the code cannot reach is refused with BuildError; the process goes on.
    assert report["unreachable"].startswith("BuildError")


def test_the_layout_kills_a_process_that_loads_with_mcjit():
    # Control: the loader the code used before issue 64 dies in this layout (SIGABRT from an
    # LLVM assertion; with an LLVM built without assertions, wrong code: a crash or a failed
    # check).  Without this the test above could pass on a layout that splits nothing.
    proc = _child("mcjit")
    assert proc.returncode != 0, proc.stdout[-2000:]


def test_an_undefined_symbol_is_a_build_error_that_names_it():
    from tensor_ir.codegen import compile_module
    from tensor_ir.errors import BuildError

    compiled = compile_module("declare float @no_such_function_anywhere(float)\n"
                              "define float @calls_it(float %x) {\n"
                              "  %y = call float @no_such_function_anywhere(float %x)\n"
                              "  ret float %y\n}\n")
    with pytest.raises(BuildError, match="no_such_function_anywhere"):
        compiled.jit()


def test_a_symbol_registered_with_add_symbol_resolves():
    import llvmlite.binding as llvm

    from tensor_ir.codegen import compile_module

    # A JIT-loaded function registered under another name, as the parallel runtime's entry
    # points are; LLJIT's own search of the process (dlsym) would not find it.
    helper = compile_module("define i64 @triple_it(i64 %x) {\n  %y = mul i64 %x, 3\n"
                            "  ret i64 %y\n}\n").jit()
    llvm.add_symbol("registered_triple_it", helper.function_address("triple_it"))
    caller = compile_module("declare i64 @registered_triple_it(i64)\n"
                            "define i64 @plus_one(i64 %x) {\n"
                            "  %y = call i64 @registered_triple_it(i64 %x)\n"
                            "  %z = add i64 %y, 1\n  ret i64 %z\n}\n").jit()
    fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(caller.function_address("plus_one"))
    assert fn(14) == 43


@pytest.mark.parametrize("data", [
    b"not an object file at all",
    b"\x7fELF\x02\x01",                      # a header cut short
    b"\x7fELF\x07\x09" + bytes(58),           # no ELF class or byte order
    b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\x3e\x00" + bytes(44),  # a .so header
], ids=["garbage", "truncated", "bad-ident", "not-relocatable"])
def test_bytes_that_are_no_loadable_object_are_a_build_error(data):
    from tensor_ir.codegen import JITModule
    from tensor_ir.errors import BuildError

    with pytest.raises(BuildError, match="object"):
        JITModule(data)


def test_an_object_with_a_section_past_its_end_is_a_build_error():
    from tensor_ir.codegen import JITModule, compile_module
    from tensor_ir.errors import BuildError

    good = compile_module("define i32 @seven() {\n  ret i32 7\n}\n").object_code
    assert ctypes.CFUNCTYPE(ctypes.c_int)(JITModule(good).function_address("seven"))() == 7
    with pytest.raises(BuildError, match="well-formed"):
        JITModule(good[:len(good) // 2])


# ---------------------------------------------------------------------------------------------
# the child
# ---------------------------------------------------------------------------------------------

class _AddressSpace:
    """This process's free address space, reserved, and holes opened in it on request."""

    PROT_NONE = 0
    MAP_NORESERVE = 0x4000

    def __init__(self):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int, ctypes.c_long]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | self.MAP_NORESERVE
        self._failed = ctypes.c_void_p(-1).value
        self._cursor = 0
        self._floor = 0

    def _map(self, size: int) -> int | None:
        addr = self._libc.mmap(None, size, self.PROT_NONE, self._flags, -1, 0)
        return None if addr in (None, self._failed) else addr

    def _unmap(self, addr: int, size: int) -> None:
        if self._libc.munmap(addr, size) != 0:
            raise OSError(ctypes.get_errno(), f"munmap({addr:#x}, {size:#x}) failed")

    def reserve_everything(self) -> None:
        """Reserve every free range (largest first), then give back WORK_AREA at the bottom
        of the largest one: the only room left for allocations larger than a hole."""
        reserved = []
        size = 1 << 47
        while size >= PAGE:
            addr = self._map(size)
            if addr is None:
                size //= 2
            else:
                reserved.append((addr, size))
        base, size = max(reserved, key=lambda r: r[1])
        assert size >= 2 * WORK_AREA + KERNELS * len(HOLE_PAGES) * HOLE_SPACING, size
        self._unmap(base, WORK_AREA)
        self._floor = base + WORK_AREA
        self._cursor = base + size - GB

    def open_holes(self) -> None:
        """HOLE_PAGES holes below the previous ones, HOLE_SPACING apart."""
        for pages in HOLE_PAGES:
            self._cursor -= HOLE_SPACING
            assert self._cursor > self._floor
            self._unmap(self._cursor, pages * PAGE)

    def probe(self) -> int:
        """How far apart two one-page mappings made back to back land (given back after)."""
        first, second = self._map(PAGE), self._map(PAGE)
        assert first is not None and second is not None
        self._unmap(first, PAGE)
        self._unmap(second, PAGE)
        return abs(first - second)


def _mcjit_load(object_code: bytes):
    """The loader before issue 64: one MCJIT engine (SectionMemoryManager) per object."""
    import llvmlite.binding as llvm

    target = llvm.Target.from_triple(llvm.get_process_triple())
    machine = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=3, reloc="pic", codemodel="small")
    empty = llvm.parse_assembly("")
    empty.triple = llvm.get_process_triple()
    empty.data_layout = str(machine.target_data)
    engine = llvm.create_mcjit_compiler(empty, machine)
    engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
    engine.finalize_object()

    class Loaded:
        def function_address(self, name: str, engine=engine) -> int:
            return engine.get_function_address(name)

    return Loaded()


def _scalar_loop_ir(name: str, n: int, callee: str) -> str:
    """``b[i] = callee(a[i]) * 0.5`` over n floats, calling the external ``callee``."""
    return f"""
declare float @{callee}(float)
define void @{name}(ptr noalias %a, ptr noalias %b) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %pa = getelementptr float, ptr %a, i64 %i
  %x = load float, ptr %pa
  %e = call float @{callee}(float %x)
  %y = fmul float %e, 0.5
  %pb = getelementptr float, ptr %b, i64 %i
  store float %y, ptr %pb
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, {n}
  br i1 %done, label %exit, label %loop
exit:
  ret void
}}
"""


def _te_kernel(kind: str, n: int):
    """(compiled module, entry name, inputs, output, expected) of a te-defined kernel."""
    from schedules import Schedule
    from tensor_ir import te
    from tensor_ir.codegen import CodegenOptions, codegen, compile_module
    from tensor_ir.codegen.llvm import symbol_name
    from tensor_ir.lower import lower

    rng = np.random.default_rng(n)
    A = te.placeholder((n, 16), "float32", name="A")
    a = rng.standard_normal((n, 16)).astype(np.float32)
    j = np.arange(16, dtype=np.float32)
    if kind == "constants":
        C = te.compute((n, 16), lambda i, j: A[i, j] * (1.5 + n) + 0.25 * te.cast(
            "float32", j + 1), name="C")
        expected = a * (1.5 + n) + 0.25 * (j + 1)
    elif kind == "reduction":
        r = te.reduce_axis(16, name="r")
        C = te.compute((n,), lambda i: te.sum(A[i, r] * 0.5, axis=r), name="C")
        expected = (a * 0.5).sum(axis=1)
    elif kind == "parallel":
        C = te.compute((n, 16), lambda i, j: A[i, j] * 2.0 + float(n), name="C")
        expected = a * 2.0 + n
    else:  # matmul
        B = te.placeholder((16, n), "float32", name="B")
        k = te.reduce_axis(16, name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        b = rng.standard_normal((16, n)).astype(np.float32)
        expected = a @ b
    inputs = [a] if kind != "matmul" else [a, b]
    func = te.create_prim_func([A, C] if kind != "matmul" else [A, B, C])
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block("C"))
    if kind == "parallel":
        sch.parallel(loops[0])
    elif kind == "constants":
        sch.vectorize(loops[-1])
    lowered = lower(sch.func)
    compiled = compile_module(codegen(lowered, options=CodegenOptions(num_threads=2)))
    out = np.zeros(expected.shape, np.float32)
    return compiled, symbol_name(lowered.name), inputs, out, expected


def _run(load, kind: str, n: int, index: int) -> None:
    """Build one kernel of ``kind``, open holes, load it with ``load``, run it, check it."""
    import llvmlite.binding as llvm

    from tensor_ir.codegen import compile_module

    keep = []
    if kind in ("expf", "registered"):
        name = f"{kind}_kernel_{index}"
        callee = "expf"
        a = np.random.default_rng(index).standard_normal(n).astype(np.float32)
        expected = np.exp(a) * 0.5
        if kind == "registered":
            # A JIT-loaded function, registered under a name of its own: how the parallel
            # runtime's entry points reach the kernels that call them.
            helper = compile_module(f"define float @helper_{index}(float %x) {{\n"
                                    f"  %y = fmul float %x, 3.0\n  %z = fadd float %y, 1.0\n"
                                    f"  ret float %z\n}}\n")
            loaded = load(helper.object_code)
            keep.append(loaded)
            callee = f"registered_scale_{index}"
            llvm.add_symbol(callee, loaded.function_address(f"helper_{index}"))
            expected = (a * 3.0 + 1.0) * 0.5
        compiled = compile_module(_scalar_loop_ir(name, n, callee))
        inputs, out = [a], np.zeros(n, np.float32)
    else:
        compiled, name, inputs, out, expected = _te_kernel(kind, n)
    SPACE.open_holes()
    loaded = load(compiled.object_code)
    arrays = [*inputs, out]
    entry = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays))(
        loaded.function_address(name))
    entry(*[x.ctypes.data for x in arrays])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5,
                               err_msg=f"kernel {index} ({kind})")
    if hasattr(loaded, "read_string") and kind not in ("expf", "registered"):
        from tensor_ir.codegen import META_SYMBOL

        assert json.loads(loaded.read_string(META_SYMBOL))["entry"] == name
    keep.append(loaded)
    KEPT.extend(keep)  # loaded code stays mapped, as in a tuning run


def _unreachable(load) -> str:
    """Load code that reads, PC-relative, a value in the C heap, far from any hole."""
    import llvmlite.binding as llvm

    from tensor_ir.codegen import compile_module
    from tensor_ir.errors import BuildError

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    address = libc.malloc(64)
    llvm.add_symbol("far_heap_value", address)
    compiled = compile_module("@far_heap_value = external dso_local global i32\n"
                              "define i32 @read_far() {\n"
                              "  %v = load i32, ptr @far_heap_value\n  ret i32 %v\n}\n")
    SPACE.open_holes()
    try:
        load(compiled.object_code)
    except BuildError as err:
        return f"BuildError: {err}"
    return "loaded"


SPACE = _AddressSpace()
KEPT: list = []


def main(mode: str) -> None:
    from tensor_ir.codegen import JITModule

    load = JITModule if mode == "jitmodule" else _mcjit_load
    kinds = ("constants", "reduction", "parallel", "expf", "registered", "matmul")
    SPACE.reserve_everything()
    SPACE.open_holes()
    gap = SPACE.probe()
    for index in range(KERNELS):
        kind = kinds[index % len(kinds)]
        _run(load, kind, 8 + index, index)
        print(f"kernel {index} ({kind}) ok", file=sys.stderr, flush=True)
    unreachable = _unreachable(load) if mode == "jitmodule" else ""
    print(json.dumps({"probe_gap": gap, "checked": KERNELS, "kinds": sorted(set(kinds)),
                      "unreachable": unreachable}))


if __name__ == "__main__":
    main(sys.argv[1])
