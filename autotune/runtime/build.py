"""Building PrimFuncs into callable kernels: build(), Kernel, load_module() and target strings.

    kernel = autotune.build(func, target="llvm -mcpu=skylake-avx512 -num-cores 2")
    kernel(a, b, c)                      # numpy arrays, checked against the parameters
    kernel.get_source("ll")              # optimised LLVM IR; "asm" for assembly
    kernel.export_library("mm.so")       # or "mm.o"
    again = autotune.load_module("mm.so")

A built module carries its own metadata (entry name, parameter names, shapes, dtypes) as a
constant string, so the exported file alone is enough to load and call it again.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np

from tensor_ir.codegen import CodegenOptions, LLVMTarget, codegen, compile_module
from tensor_ir.codegen import threadpool
from tensor_ir.codegen.compile import CompiledModule, JITModule, host_triple, target_machine
from tensor_ir.codegen.link import link_shared_library
from tensor_ir.codegen.llvm import META_SYMBOL, META_VERSION, param_metadata, symbol_name
from tensor_ir.errors import BuildError, KernelIndexError, TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.intrinsics import libraries_of, load_libraries
from tensor_ir.lower import lower
from tensor_ir.target import Target, TargetError

# Argument sets a kernel remembers as checked (an executor calls each kernel with one set).
_CHECKED_SETS = 8


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------

def parse_target(target: str | Target | None) -> tuple[LLVMTarget, int]:
    """The LLVM machine and the thread count for parallel loops that ``target`` asks for.

    ``target`` is a :class:`tensor_ir.target.Target` or its string (``"llvm -mcpu=znver4
    -num-cores 2"``); errors are ``TargetError`` naming the bad kind or option.  Only CPU
    (``llvm``) targets are built here.
    """
    t = Target("llvm" if target is None else target)
    if not t.is_cpu:
        raise TargetError(f"autotune.build compiles CPU targets through LLVM; {str(t)!r} is a "
                          f"{t.kind} target")
    if t.is_host and t.cpu == llvm.get_host_cpu_name() and not t.mattr:
        # The host itself: let codegen use the host's exact feature set, which can be richer
        # than what the CPU name implies (e.g. a VM that hides or adds features).
        return LLVMTarget(), t.num_cores
    return LLVMTarget(mtriple=t.triple, mcpu=t.cpu, mattr=",".join(t.mattr)), t.num_cores


def codegen_options(target: str | Target | None) -> tuple[LLVMTarget, CodegenOptions]:
    """The LLVM machine and the code generator's options (threads, vector width) for
    ``target``."""
    t = Target("llvm" if target is None else target)
    llvm_target, num_cores = parse_target(t)
    # The features tensor intrinsics are checked against: the host's for the host, else the
    # -mattr list (what a -mcpu implies is not known here, so intrinsics need it named).
    return llvm_target, CodegenOptions(num_threads=num_cores, triple=llvm_target.triple,
                                       vector_bits=t.vector_bits or 0,
                                       features=llvm_target.resolved()[2])


# ---------------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter: what an array passed for it must look like."""

    name: str
    shape: tuple
    dtype: str
    written: bool = False


class Kernel:
    """A compiled PrimFunc: ``kernel(*arrays)`` runs it on C-contiguous numpy arrays.

    Built by :func:`build` or reloaded by :func:`load_module`.  ``func`` is the lowered
    PrimFunc (None for a reloaded kernel), ``entry_name`` the symbol, ``params`` the
    ParamSpecs in call order.
    """

    def __init__(self, meta: dict, address: int | None, owner=None,
                 compiled: CompiledModule | None = None, object_code: bytes | None = None,
                 func: PrimFunc | None = None, origin: str = "build"):
        if meta.get("version") != META_VERSION:
            raise BuildError(f"kernel metadata has version {meta.get('version')!r}; this "
                             f"release reads version {META_VERSION}")
        self.entry_name: str = meta["entry"]
        self.params = tuple(ParamSpec(p["name"], tuple(p["shape"]), p["dtype"],
                                      bool(p.get("written", False))) for p in meta["params"])
        self.num_threads: int = meta.get("num_threads", 0)
        self.triple: str = meta.get("triple", "")
        self.func = func
        self._owner = owner  # keeps the JIT engine / shared library alive
        self._compiled = compiled
        self._object_code = object_code if object_code is not None else (
            compiled.object_code if compiled is not None else None)
        self._origin = origin
        self._np_dtypes = tuple(np.dtype(p.dtype) for p in self.params)
        self._written = tuple(i for i, p in enumerate(self.params) if p.written)
        # Argument sets already checked (see _check): ids of the arrays -> what was checked.
        self._checked: dict[tuple, tuple] = {}
        # The runtime index checks (tensor_ir/codegen/checks.py), and where a failed one
        # leaves its index.
        self.checks: tuple[dict, ...] = tuple(meta.get("checks", ()))
        self._fault = self._fault_cell(owner, meta.get("fault")) if self.checks else None
        self._cfunc = None
        if address is not None:
            proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(self.params)))
            self._cfunc = proto(address)

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.params)
        return f"Kernel({self.entry_name}({args}))"

    # -- calling --------------------------------------------------------------------------------
    def __call__(self, *arrays) -> None:
        if self._cfunc is None:
            raise BuildError(f"kernel {self.entry_name} was compiled for {self.triple}, which "
                             f"is not this host ({host_triple()}); export it instead of calling")
        pointers = self._check(arrays)
        status = self._cfunc(*pointers)
        if status:
            raise self.index_error(status)

    @staticmethod
    def _fault_cell(owner, symbol: str | None):
        """The kernel's fault global as a ctypes int64 (None where it cannot be found: a
        kernel for another machine)."""
        if owner is None or not symbol:
            return None
        if isinstance(owner, ctypes.CDLL):
            return ctypes.c_int64.in_dll(owner, symbol)
        return ctypes.c_int64.from_address(owner.global_address(symbol))

    def index_error(self, status: int, values: Sequence[str] | None = None
                    ) -> TensorIRError:
        """The error a call that returned ``status`` (the number of the failed check) means.
        ``values``: the model value each parameter holds, to name it."""
        if not 0 < status <= len(self.checks):
            return BuildError(f"kernel {self.entry_name} returned status {status}, which "
                              f"names none of its {len(self.checks)} index checks")
        check = self.checks[status - 1]
        index = self._fault.value if self._fault is not None else -1
        names = [p.name for p in self.params]
        value = None
        if values is not None and check["buffer"] in names:
            value = values[names.index(check["buffer"])]
        return KernelIndexError(self.entry_name, check["buffer"], check["axis"], index,
                                check["extent"], value)

    def _check(self, arrays: tuple) -> list:
        """The arrays' data pointers, after checking that they fit the parameters.

        A kernel is usually called again and again with the same arrays (an executor's
        buffers, a benchmark's operands).  The full check (about 5 us for three arrays, half
        of it reading data pointers through ``ndarray.ctypes``) runs once per set of array
        objects; a repeat call re-checks only what can change on an existing ndarray: its
        shape, strides and dtype (all assignable) and, for written parameters, whether it is
        writeable.  Its data pointer cannot change while its shape stays (``resize`` changes
        the shape), and a weak reference tells a reused ``id`` from the same object."""
        key = tuple(map(id, arrays))
        known = self._checked.get(key)
        if known is not None:
            refs, layouts, pointers = known
            for ref, a, (shape, strides, dtype) in zip(refs, arrays, layouts):
                if ref() is not a or a.shape != shape or a.strides != strides \
                        or a.dtype != dtype:
                    break
            else:
                if all(arrays[i].flags.writeable for i in self._written):
                    return pointers
        pointers = self._full_check(arrays)
        try:
            refs = tuple(weakref.ref(a) for a in arrays)
        except TypeError:  # an ndarray subclass without weak references: not remembered
            return pointers
        if len(self._checked) >= _CHECKED_SETS:
            self._checked.clear()
        self._checked[key] = (refs, tuple((a.shape, a.strides, a.dtype) for a in arrays),
                              pointers)
        return pointers

    def _full_check(self, arrays: tuple) -> list:
        params = self.params
        if len(arrays) != len(params):
            names = ", ".join(p.name for p in params)
            raise BuildError(f"kernel {self.entry_name} takes {len(params)} arrays ({names}), "
                             f"got {len(arrays)}")
        pointers = []
        spans = []
        for spec, np_dtype, a in zip(params, self._np_dtypes, arrays):
            if not isinstance(a, np.ndarray):
                raise BuildError(f"kernel {self.entry_name}: parameter {spec.name} must be a "
                                 f"numpy array, got {type(a).__name__}")
            if a.dtype != np_dtype:
                raise BuildError(f"kernel {self.entry_name}: parameter {spec.name} expects "
                                 f"dtype {spec.dtype}, got {a.dtype}")
            if a.shape != spec.shape:
                raise BuildError(f"kernel {self.entry_name}: parameter {spec.name} expects "
                                 f"shape {spec.shape}, got {a.shape}")
            if not a.flags.c_contiguous:
                raise BuildError(f"kernel {self.entry_name}: parameter {spec.name} must be a "
                                 f"C-contiguous array (use np.ascontiguousarray)")
            if spec.written and not a.flags.writeable:
                raise BuildError(f"kernel {self.entry_name}: parameter {spec.name} is written "
                                 f"by the kernel but the array is read-only")
            ptr = a.ctypes.data
            pointers.append(ptr)
            if a.nbytes:
                spans.append((ptr, ptr + a.nbytes, spec.name, spec.written))
        # The kernel's pointer arguments are noalias: an array that is written must not
        # overlap any other, or the results are undefined.  Arrays that are only read may
        # share memory (the same array for two inputs): noalias promises nothing about memory
        # that no one writes.
        if len(spans) > 1:
            spans.sort()
            for i, (_, end, name, written) in enumerate(spans):
                for start, _, other, other_written in spans[i + 1:]:
                    if start >= end:
                        break
                    if written or other_written:
                        raise BuildError(f"kernel {self.entry_name}: arrays for parameters "
                                         f"{name} and {other} overlap in memory and one of "
                                         f"them is written; pass distinct arrays")
        return pointers

    # -- source and export ----------------------------------------------------------------------
    @property
    def compiled_module(self):
        """The compiled module this process built the kernel from (its optimised LLVM IR and
        the machine it was compiled for: what a whole-model export links); None for a kernel
        loaded from a file."""
        return self._compiled

    def get_source(self, fmt: str = "ll") -> str:
        """``"ll"``: optimised LLVM IR; ``"ll-raw"``: the IR as generated; ``"asm"``:
        assembly.  Available for kernels built in this process."""
        if self._compiled is None:
            raise BuildError(f"kernel {self.entry_name} was loaded from {self._origin}; its "
                             f"source is not available")
        if fmt == "ll":
            return self._compiled.llvm_ir
        if fmt == "ll-raw":
            return self._compiled.source_ir
        if fmt in ("asm", "s"):
            return self._compiled.assembly()
        raise BuildError(f"unknown source format {fmt!r}; expected 'll', 'll-raw' or 'asm'")

    def export_library(self, path: str | os.PathLike) -> None:
        """Write the kernel as an object file (``.o``) or a shared library (``.so``, linked
        with the system C compiler)."""
        path = os.fspath(path)
        if self._object_code is None:
            raise BuildError(f"kernel {self.entry_name} was loaded from {self._origin}; it "
                             f"holds no object code to export")
        if path.endswith(".o"):
            with open(path, "wb") as f:
                f.write(self._object_code)
            return
        if not path.endswith(".so"):
            raise BuildError(f"export_library({path!r}): the file name must end in .o (object "
                             f"file) or .so (shared library)")
        host = host_triple().split("-")[0]
        if self.triple and self.triple.split("-")[0] != host:
            raise BuildError(f"export_library({path!r}): kernel is compiled for "
                             f"{self.triple}; the system C compiler links {host} shared "
                             f"libraries only; export a .o and link it with a cross linker")
        link_shared(self._object_code, path)


def link_shared(object_code: bytes, path: str, with_runtime: bool = True) -> None:
    """Link ``object_code`` into a shared library at ``path``: with the LLVM linker of the
    ``ziglang`` wheel where it is installed (tensor_ir.codegen.link; nothing from the
    system's toolchain), else with the system's ``cc -shared``.

    Code that launches parallel loops on the thread pool gets its own copy of the pool
    (tensor_ir/codegen/threadpool.py, compiled here for the host, entry points hidden) unless
    ``with_runtime`` is False (the object carries it already); libgomp is linked only for
    code built with the "gomp" parallel runtime."""
    objects = [object_code]
    if with_runtime and threadpool.LAUNCH.encode() in object_code:
        objects.append(threadpool.runtime_object(target_machine(LLVMTarget()), host_triple()))
    gomp = b"GOMP_parallel" in object_code
    if importlib.util.find_spec("ziglang") is not None:
        # libpthread.so.0: pthread_create before glibc 2.34 (not recorded where unused).
        needed = ["libm.so.6", "libpthread.so.0"] + (["libgomp.so.1"] if gomp else [])
        link_shared_library(objects, path, needed)
        return
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise BuildError(f"linking {path} needs the ziglang package (pip install ziglang, "
                         f"which brings a linker) or a system C compiler (cc); neither was "
                         f"found")
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for index, data in enumerate(objects):
            names.append(os.path.join(tmp, f"object{index + 1}.o"))
            with open(names[-1], "wb") as f:
                f.write(data)
        # -pthread: pthread_create lives in libpthread on C libraries older than glibc 2.34.
        cmd = [cc, "-shared", "-o", os.path.abspath(path), *names,
               *(["-lgomp"] if gomp else []), "-lm", "-pthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"linking {path} failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")


# ---------------------------------------------------------------------------------------------
# build / load_module
# ---------------------------------------------------------------------------------------------

def build(func: PrimFunc, target: str | Target | None = "llvm", name: str | None = None) -> Kernel:
    """Lower ``func`` (when it is not lowered yet), generate LLVM code for ``target`` and
    compile it, as scheduled: no record is looked up here (``autotune.build`` does that under
    ``apply_history_best``).  ``name`` is the kernel's symbol (default: ``func.name``)."""
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build takes a PrimFunc, got {type(func).__name__}")
    llvm_target, _ = parse_target(target)
    lowered, options, compiled = _compile(func, target, name)
    if not llvm_target.is_host:
        meta = param_metadata(lowered, symbol_name(name or lowered.name), options)
        return Kernel(meta, None, None, compiled=compiled, func=lowered)
    # External tensor intrinsics: their shared libraries must be in the process before the
    # JIT resolves the kernel's symbols.
    load_libraries(libraries_of(lowered))
    # Read the metadata back from the compiled object, so that a built kernel and a reloaded
    # one are described by the same bytes.
    jit = compiled.jit()
    meta = _parse_meta(jit.read_string(META_SYMBOL), "the built module")
    return Kernel(meta, jit.function_address(meta["entry"]), jit, compiled=compiled,
                  func=lowered)


def _compile(func: PrimFunc, target, name: str | None):
    """Lower (unless lowered), generate and compile: (lowered func, options, CompiledModule)."""
    llvm_target, options = codegen_options(target)
    lowered = lower(func)
    return lowered, options, compile_module(codegen(lowered, name, options), llvm_target)


def build_object(func: PrimFunc, target: str | Target | None = "llvm",
                 name: str | None = None) -> bytes:
    """The relocatable object file (bytes) of ``func`` built for ``target``, without loading
    it: what ``build(func, target).export_library("x.o")`` would write, minus the JIT load
    that a measurement build has no use for.  ``load_module`` on the written file gives the
    kernel."""
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build_object takes a PrimFunc, got {type(func).__name__}")
    return _compile(func, target, name)[2].object_code


def load_module(path: str | os.PathLike) -> Kernel:
    """Load a kernel exported with :meth:`Kernel.export_library` (``.o`` or ``.so``)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise BuildError(f"load_module: no such file {path!r}")
    if path.endswith(".o"):
        with open(path, "rb") as f:
            object_code = f.read()
        jit = JITModule(object_code)
        meta = _parse_meta(jit.read_string(META_SYMBOL), path)
        return Kernel(meta, jit.function_address(meta["entry"]), jit,
                      object_code=object_code, origin=path)
    if path.endswith(".so"):
        try:
            lib = ctypes.CDLL(os.path.abspath(path))
        except OSError as err:
            raise BuildError(f"load_module: cannot load {path}: {err}") from err
        try:
            meta_addr = ctypes.addressof(ctypes.c_char.in_dll(lib, META_SYMBOL))
        except ValueError as err:
            raise BuildError(f"load_module: {path} is not a kernel library (no "
                             f"{META_SYMBOL} symbol)") from err
        meta = _parse_meta(ctypes.string_at(meta_addr).decode(), path)
        try:
            fn = getattr(lib, meta["entry"])
        except AttributeError as err:
            raise BuildError(f"load_module: {path} lacks its entry {meta['entry']}") from err
        address = ctypes.cast(fn, ctypes.c_void_p).value
        return Kernel(meta, address, lib, origin=path)
    raise BuildError(f"load_module({path!r}): expected a .o or .so file")


def _parse_meta(text: str, path: str) -> dict:
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise BuildError(f"load_module: the metadata in {path} is not valid JSON: {err}") from err
    if not isinstance(meta, dict) or "entry" not in meta or "params" not in meta:
        raise BuildError(f"load_module: the metadata in {path} lacks the entry or parameters")
    return meta
