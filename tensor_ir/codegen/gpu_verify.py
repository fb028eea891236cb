"""Checks on a printed GPU kernel before it is launched: resource limits and redundant stores.

    source = gpu_source(lowered, "cuda")
    report = verify_gpu_kernel(source, Target("cuda -arch=sm_80"), func=lowered)
    report.threads_per_block, report.shared_bytes, report.ptxas   # the figures checked

Three kinds of refusal, each a BuildError subclass whose message names the limit and the
figure:

* :class:`GPUResourceError`: more threads per block than ``target.max_threads_per_block``,
  more shared memory than ``target.max_shared_memory_per_block``, or (CUDA, where nvcc is
  installed) more registers than ``target.registers_per_block``.  A kernel over any of these
  fails at launch ("too many resources requested"), after the search already paid to build it.
* :class:`RedundantStoreError`: a store to a global buffer whose address does not depend on
  a launch axis (``threadIdx.*`` or ``blockIdx.*``, extent above 1) of its kernel, so every
  thread along that axis writes the same element: a loop left unbound where it should have
  been bound, or a reduction axis bound without a cross-thread reduction.  The threads race
  (or at best repeat the work).  See :func:`redundant_global_stores` for what counts as
  depending on an axis.
* :class:`CudaCompileError`: nvcc is missing or rejects the source (the compiler's message
  is in the error).

Register use comes from ``ptxas -v`` (through ``nvcc -cubin -Xptxas -v``): compiling needs no
GPU, only the CUDA toolkit.  Results are cached per (source text, arch), so checking the same
kernel twice compiles it once.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass

from ..buffer import Buffer
from ..errors import BuildError
from ..expr import And, Cmp, IntImm, Var
from ..func import PrimFunc
from ..stmt import (
    THREAD_BINDING,
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
)
from ..target import Target
from ..visitor import free_vars, walk
from .gpu_c import GPUSource

__all__ = [
    "CudaCompileError",
    "GPUResourceError",
    "KernelReport",
    "PtxasUsage",
    "RedundantStoreError",
    "compile_cubin",
    "cubin_cache_dir",
    "nvcc_available",
    "ptxas_usage",
    "redundant_global_stores",
    "verify_gpu_kernel",
]

LAUNCH_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")

# Bytes per element of the C types the GPU printer declares shared arrays with (used only when
# no function is given to count the shared buffers from).
_C_SIZES = {"bool": 1, "char": 1, "signed char": 1, "uchar": 1, "unsigned char": 1,
            "short": 2, "int": 4, "float": 4, "long": 8, "long long": 8, "double": 8}
# An aligned declaration is ``__shared__ __align__(16) float T[n];`` in CUDA and
# ``__local float T[n] __attribute__((aligned(16)));`` in OpenCL.
_SHARED_DECL = re.compile(r"^\s*(?:__shared__|__local)\s+(?:__align__\(\d+\)\s+)?"
                          r"([A-Za-z_][\w ]*?)\s+\w+\[(\d+)\]"
                          r"(?:\s*__attribute__\(\(aligned\(\d+\)\)\))?;", re.MULTILINE)

# nvcc of one kernel takes about a second; a tuning run or a test suite asks about the same
# source again and again.
_NVCC_TIMEOUT_S = 120
_PTXAS_CACHE: dict[tuple[str, str], tuple[bytes, dict[str, "PtxasUsage"]]] = {}
_PTXAS_CACHE_SIZE = 512
_PTXAS_LOCK = threading.Lock()


class GPUResourceError(BuildError):
    """A kernel needs more of a per-block resource than the target has.

    ``limit`` names the target fact (``max_threads_per_block``, ``max_shared_memory_per_block``
    or ``registers_per_block``), ``figure`` is the kernel's need and ``allowed`` the target's
    value."""

    def __init__(self, message: str, kernel: str, limit: str, figure: int, allowed: int):
        super().__init__(message)
        self.kernel = kernel
        self.limit = limit
        self.figure = figure
        self.allowed = allowed


class RedundantStoreError(BuildError):
    """Global stores whose address ignores launch axes: ``stores`` holds (buffer name, axes
    ignored) for each such store."""

    def __init__(self, message: str, kernel: str, stores: tuple[tuple[str, tuple[str, ...]], ...]):
        super().__init__(message)
        self.kernel = kernel
        self.stores = stores


class CudaCompileError(BuildError):
    """nvcc is not installed, or it (or ptxas) refused the source; the message carries the
    compiler's output."""


@dataclass(frozen=True)
class PtxasUsage:
    """What ``ptxas -v`` reports for one entry function."""

    kernel: str
    arch: str
    registers: int
    shared_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int


@dataclass(frozen=True)
class KernelReport:
    """The figures :func:`verify_gpu_kernel` checked (``ptxas`` is None where it did not run)."""

    kernel: str
    threads_per_block: int
    shared_bytes: int
    ptxas: PtxasUsage | None
    registers_per_block: int | None


# -- nvcc / ptxas -------------------------------------------------------------------------------

def nvcc_available() -> bool:
    return shutil.which("nvcc") is not None


def ptxas_usage(code: str, arch: str) -> dict[str, PtxasUsage]:
    """Compile CUDA ``code`` for ``arch`` (e.g. "sm_80") with ``nvcc -cubin -Xptxas -v`` and
    return ptxas's figures per entry function (``__global__`` kernel) name.

    Raises CudaCompileError when nvcc is not on PATH or the compile fails.  Cached (see
    :func:`compile_cubin`, which this is the register half of)."""
    return dict(compile_cubin(code, arch)[1])


def compile_cubin(code: str, arch: str) -> tuple[bytes, dict[str, PtxasUsage]]:
    """``(cubin, ptxas figures per entry function)`` of CUDA ``code`` compiled by
    ``nvcc -cubin -arch=ARCH -Xptxas -v``: one compile gives both the machine code a CUDA
    runtime loads and what the verifier checks, and needs no GPU.

    Cached per (code, arch) for the life of the process, and on disk (``cubin_cache_dir()``)
    per (code, arch, nvcc version), so that a tuning run's builder pool, its runner and a
    later build of the same kernel compile it once.  Raises CudaCompileError when nvcc is
    not on PATH, times out or rejects the source (its message in the error)."""
    key = (hashlib.sha256(code.encode()).hexdigest(), arch)
    with _PTXAS_LOCK:
        if key in _PTXAS_CACHE:
            return _PTXAS_CACHE[key]
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CudaCompileError("cuda verification: nvcc is not on PATH (install the CUDA "
                               "toolkit to compile kernels and read their register use)")
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise CudaCompileError(f"cuda verification: arch {arch!r} is not of the form sm_80")
    disk = _disk_entry(nvcc, key)
    found = _read_disk(disk, arch)
    if found is not None:
        with _PTXAS_LOCK:
            _PTXAS_CACHE[key] = found
        return found
    with tempfile.TemporaryDirectory(prefix="gpu_verify_") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        out = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(code)
        cmd = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", out, src]
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True,
                                  timeout=_NVCC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CudaCompileError(f"cuda verification: nvcc for {arch} took more than "
                                   f"{_NVCC_TIMEOUT_S} s") from None
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise CudaCompileError(f"cuda verification: nvcc -cubin -arch={arch} failed "
                                   f"(exit {done.returncode}):\n{output.strip()}")
        with open(out, "rb") as f:
            cubin = f.read()
    usage = parse_ptxas_output(output, arch)
    if not usage:
        raise CudaCompileError(f"cuda verification: ptxas reported no entry function for "
                               f"{arch}; its output was:\n{output.strip()}")
    _write_disk(disk, cubin, output)
    result = (cubin, usage)
    with _PTXAS_LOCK:
        if len(_PTXAS_CACHE) >= _PTXAS_CACHE_SIZE:
            _PTXAS_CACHE.pop(next(iter(_PTXAS_CACHE)))  # the oldest entry
        _PTXAS_CACHE[key] = result
    return result


def cubin_cache_dir() -> str | None:
    """Where compiled cubins are kept between processes: ``$AUTOTUNE_CUDA_CACHE``, else
    ``~/.cache/autotune/cuda``; None (no disk cache) when the variable is set empty."""
    value = os.environ.get("AUTOTUNE_CUDA_CACHE")
    if value is not None:
        return value or None
    return os.path.join(os.path.expanduser("~"), ".cache", "autotune", "cuda")


_NVCC_VERSIONS: dict[str, str] = {}


def _disk_entry(nvcc: str, key: tuple[str, str]) -> str | None:
    folder = cubin_cache_dir()
    if folder is None:
        return None
    version = _NVCC_VERSIONS.get(nvcc)
    if version is None:
        try:
            version = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                                     timeout=_NVCC_TIMEOUT_S).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None
        _NVCC_VERSIONS[nvcc] = version
    # A new nvcc may compile the same source differently: its version is part of the key.
    digest = hashlib.sha256("\0".join((version, key[1], key[0])).encode()).hexdigest()
    return os.path.join(folder, digest[:40])


def _read_disk(entry: str | None, arch: str):
    if entry is None:
        return None
    try:
        with open(entry + ".cubin", "rb") as f:
            cubin = f.read()
        with open(entry + ".ptxas", encoding="utf-8") as f:
            usage = parse_ptxas_output(f.read(), arch)
    except OSError:
        return None
    return (cubin, usage) if cubin and usage else None


def _write_disk(entry: str | None, cubin: bytes, ptxas_text: str) -> None:
    # Best effort: a cache that cannot be written costs a compile next time, nothing more.
    # Each file is written under a private name and renamed, so that a reader in another
    # process never sees half of one; the ptxas text goes last (a reader needs both).
    if entry is None:
        return
    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        for suffix, data in ((".cubin", cubin), (".ptxas", ptxas_text.encode())):
            tmp = f"{entry}{suffix}.{os.getpid()}.{threading.get_ident()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, entry + suffix)
    except OSError:
        pass


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_output(text: str, arch: str) -> dict[str, PtxasUsage]:
    """Entry function name -> PtxasUsage from ``ptxas -v`` text.

    ptxas prints, per entry function, a "Compiling entry function" line, a "Function
    properties" block with stack and spill bytes (also printed for device functions, which are
    not entries and are skipped), then "Used N registers[, ...] [, S bytes smem]" (the smem
    part is left out when the kernel has none)."""
    fields: dict[str, dict] = {}
    entry = None      # the entry whose "Used" line comes next
    properties = None  # the function the next stack-frame line belongs to
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1)
            fields[entry] = {"registers": 0, "shared_bytes": 0, "spill_store_bytes": 0,
                             "spill_load_bytes": 0, "stack_bytes": 0}
        elif m := _PROPERTIES.search(line):
            properties = m.group(1)
        elif m := _FRAME.search(line):
            if properties in fields:
                fields[properties].update(stack_bytes=int(m.group(1)),
                                          spill_store_bytes=int(m.group(2)),
                                          spill_load_bytes=int(m.group(3)))
        elif (m := _USED.search(line)) and entry is not None:
            fields[entry]["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                fields[entry]["shared_bytes"] = int(s.group(1))
    return {name: PtxasUsage(name, arch, **f) for name, f in fields.items()}


# -- resource limits ----------------------------------------------------------------------------

def _shared_bytes(source: GPUSource, func: PrimFunc | Stmt | None) -> int:
    if func is not None:
        shared: set = set()
        walk(func.body if isinstance(func, PrimFunc) else func, lambda n: shared.add(n.buffer)
             if isinstance(n, Allocate) and n.buffer.scope == "shared" else None)
        return sum(buf.nbytes for buf in shared)
    total = 0
    for ctype, count in _SHARED_DECL.findall(source.code):
        if ctype not in _C_SIZES:
            raise BuildError(f"gpu verification: kernel {source.name} declares a shared array "
                             f"of C type {ctype!r}, whose size is unknown here")
        total += _C_SIZES[ctype] * int(count)
    return total


def verify_gpu_kernel(source: GPUSource, target: str | Target,
                      func: PrimFunc | Stmt | None = None,
                      use_ptxas: bool | None = None) -> KernelReport:
    """Refuse ``source`` where it breaks ``target``'s per-block limits; with the lowered
    ``func`` it was printed from (or, for one kernel of several, that kernel's statement),
    also refuse global stores that ignore a launch axis.

    ``use_ptxas``: None (default) compiles with nvcc for registers when the source is CUDA,
    the target is a cuda target and nvcc is installed; True requires it (CudaCompileError
    without nvcc); False never compiles.  Shared memory is counted from ``func``'s shared
    allocations when given, otherwise from the source's declarations; ptxas's own figure is
    checked as well when it ran.  Returns the figures checked."""
    t = Target(target)
    if not t.is_gpu:
        raise BuildError(f"gpu verification: target {t} is not a GPU target")
    kernel = source.name
    threads = source.threads_per_block
    if threads > t.max_threads_per_block:
        raise GPUResourceError(
            f"gpu verification: kernel {kernel} has {threads} threads per block (block "
            f"{source.block}), above the target's max_threads_per_block "
            f"{t.max_threads_per_block}", kernel, "max_threads_per_block", threads,
            t.max_threads_per_block)
    shared = _shared_bytes(source, func)
    _check_shared(kernel, shared, t, "counted from its shared buffers")

    ptxas = None
    registers = None
    can_compile = source.dialect == "cuda" and t.kind == "cuda"
    if use_ptxas and not can_compile:
        raise BuildError(f"gpu verification: ptxas checks CUDA sources for a cuda target; got "
                         f"a {source.dialect} source for target {t}")
    if can_compile and (use_ptxas or (use_ptxas is None and nvcc_available())):
        usage = ptxas_usage(source.code, t.arch)
        if kernel not in usage:
            raise CudaCompileError(f"gpu verification: ptxas reported kernels "
                                   f"{sorted(usage)}, not {kernel}")
        ptxas = usage[kernel]
        _check_shared(kernel, ptxas.shared_bytes, t, f"as ptxas reports for {t.arch}")
        # Registers are handed out per warp, so a partial warp costs a whole one.
        warps = math.ceil(threads / t.warp_size)
        registers = ptxas.registers * warps * t.warp_size
        if registers > t.registers_per_block:
            raise GPUResourceError(
                f"gpu verification: kernel {kernel} needs {registers} registers per block "
                f"({ptxas.registers} per thread x {warps} warps of {t.warp_size}, as ptxas "
                f"reports for {t.arch}), above the target's registers_per_block "
                f"{t.registers_per_block}", kernel, "registers_per_block", registers,
                t.registers_per_block)

    if func is not None:
        found = redundant_global_stores(func)
        if found:
            detail = "; ".join(f"{name} ignores {', '.join(axes)}" for name, axes in found)
            raise RedundantStoreError(
                f"gpu verification: kernel {kernel} stores to global memory at an address that "
                f"does not depend on every launch axis, so all threads along the axis write the "
                f"same element (bind the loop the store varies with, or reduce across threads "
                f"first): {detail}", kernel, found)
    return KernelReport(kernel, threads, shared, ptxas, registers)


def _check_shared(kernel: str, shared: int, t: Target, how: str) -> None:
    if shared > t.max_shared_memory_per_block:
        raise GPUResourceError(
            f"gpu verification: kernel {kernel} uses {shared} bytes of shared memory per block "
            f"({how}), above the target's max_shared_memory_per_block "
            f"{t.max_shared_memory_per_block}", kernel, "max_shared_memory_per_block", shared,
            t.max_shared_memory_per_block)


# -- stores that ignore a launch axis ----------------------------------------------------------

def redundant_global_stores(kernel: PrimFunc | Stmt, scopes: tuple[str, ...] = ("global",)
                            ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(buffer name, launch axes ignored) for each store to a global buffer of ``kernel`` (a
    lowered function or one kernel's body) whose address does not depend on some launch axis
    bound in it with extent above 1.  Empty when every store depends on every axis.

    A store depends on an axis when its indices use a variable bound to the axis, or a let or
    loop variable computed from one, or when an enclosing ``if`` pins the axis to a single
    thread (``threadIdx.x == 0``, ``tx < 1``: the epilogue of a cross-thread reduction, where
    one thread writes).  A guard like ``i < n`` does not pin: every thread passing it still
    writes.  Stores to ``local`` buffers, and to global buffers allocated inside the kernel
    (printed as per-thread arrays), are never checked: each thread owns its copy.

    ``scopes`` adds "shared" on request: a shared tile filled by a fetch loop left serial is
    written by every thread along the axes its address ignores (the same values, so not wrong,
    but the global loads are repeated); only ``threadIdx`` axes count there, since each block
    has its own shared memory."""
    body = kernel.body if isinstance(kernel, PrimFunc) else kernel
    extents: dict[str, int] = {}
    allocated: set = set()

    def survey(n) -> None:
        if isinstance(n, For) and n.kind == THREAD_BINDING and n.thread_binding in LAUNCH_AXES:
            if isinstance(n.extent, IntImm) and n.extent.value > 1:
                extents[n.thread_binding] = n.extent.value
        elif isinstance(n, Allocate):
            allocated.add(n.buffer)

    walk(body, survey)
    if not extents:
        return ()
    finder = _StoreAxes(set(extents), allocated, scopes)
    finder.visit(body, {}, {}, frozenset())
    return tuple(finder.found)


class _StoreAxes:
    def __init__(self, axes: set, allocated: set, scopes: tuple[str, ...]):
        self.axes = axes
        self.allocated = allocated
        self.scopes = scopes
        self.found: list[tuple[str, tuple[str, ...]]] = []
        self.seen: set = set()

    def visit(self, s, var_axes: dict, ranges: dict, pinned: frozenset) -> None:
        """``var_axes``: variable -> launch axes its value depends on; ``ranges``: launch-bound
        variable -> (axis, min, extent) for the pinning test; ``pinned``: axes an enclosing
        guard restricts to one thread."""
        if isinstance(s, SeqStmt):
            for child in s.stmts:
                self.visit(child, var_axes, ranges, pinned)
        elif isinstance(s, For):
            inner = dict(var_axes)
            if s.kind == THREAD_BINDING and s.thread_binding in LAUNCH_AXES:
                inner[s.loop_var] = frozenset({s.thread_binding})
                if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
                    ranges = {**ranges, s.loop_var: (s.thread_binding, s.min.value,
                                                     s.extent.value)}
            else:
                # A loop whose bounds vary with the thread index walks a per-thread range.
                inner[s.loop_var] = _axes_of(s.min, var_axes) | _axes_of(s.extent, var_axes)
            self.visit(s.body, inner, ranges, pinned)
        elif isinstance(s, LetStmt):
            self.visit(s.body, {**var_axes, s.var: _axes_of(s.value, var_axes)}, ranges, pinned)
        elif isinstance(s, IfThenElse):
            self.visit(s.then_case, var_axes, ranges,
                       pinned | _pinned_axes(s.condition, var_axes, ranges))
            if s.else_case is not None:
                self.visit(s.else_case, var_axes, ranges, pinned)
        elif isinstance(s, Allocate):
            self.visit(s.body, var_axes, ranges, pinned)
        elif isinstance(s, BufferStore):
            self.store(s, var_axes, pinned)
        # Evaluate and any other leaf statement writes no buffer.

    def store(self, s: BufferStore, var_axes: dict, pinned: frozenset) -> None:
        buf: Buffer = s.buffer
        if buf.scope not in self.scopes or buf.scope == "local" or (
                buf.scope == "global" and buf in self.allocated):
            return
        covered = set(pinned)
        for index in s.indices:
            covered |= _axes_of(index, var_axes)
        missing = tuple(a for a in LAUNCH_AXES if a in self.axes and a not in covered
                        and (buf.scope == "global" or a.startswith("threadIdx")))
        # One report per buffer and set of axes: a reduction's init and update stores would
        # otherwise say the same thing twice.
        if missing and (buf.name, missing) not in self.seen:
            self.seen.add((buf.name, missing))
            self.found.append((buf.name, missing))


def _axes_of(e, var_axes: dict) -> frozenset:
    out: frozenset = frozenset()
    for v in free_vars(e):
        out |= var_axes.get(v, frozenset())
    return out


def _pinned_axes(cond, var_axes: dict, ranges: dict) -> frozenset:
    """Axes the true branch of ``cond`` leaves to one thread: a conjunct ``v == e`` with ``v``
    a launch-bound variable and ``e`` not varying along its axis, or comparisons of ``v`` with
    constants that narrow its range to a single value."""
    conjuncts: list = []
    stack = [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, And):
            stack.extend((c.a, c.b))
        else:
            conjuncts.append(c)
    bounds = {v: (lo, lo + ext - 1) for v, (_, lo, ext) in ranges.items()}
    pinned = set()
    for c in conjuncts:
        if not isinstance(c, Cmp):
            continue
        op, a, b = c.op, c.a, c.b
        if not (isinstance(a, Var) and a in ranges):
            # Put the launch variable on the left: 0 == tx is tx == 0, 1 > tx is tx < 1.
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            a, b = b, a
        if not (isinstance(a, Var) and a in ranges):
            continue
        axis = ranges[a][0]
        if op == "==" and axis not in _axes_of(b, var_axes):
            pinned.add(axis)
        elif isinstance(b, IntImm):
            lo, hi = bounds[a]
            k = b.value
            if op == "<":
                hi = min(hi, k - 1)
            elif op == "<=":
                hi = min(hi, k)
            elif op == ">":
                lo = max(lo, k + 1)
            elif op == ">=":
                lo = max(lo, k)
            bounds[a] = (lo, hi)
    for v, (lo, hi) in bounds.items():
        if lo >= hi:
            pinned.add(ranges[v][0])
    return frozenset(pinned)
