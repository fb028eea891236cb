"""Compiling LLVM modules: verify, optimise (new pass manager, O3), emit objects, load them.

One compile produces one position-independent object file; the same bytes are what the JIT
loads (ORC's JITLink, see :class:`JITModule`), what ``export_library`` writes as ``.o`` and
what is linked into a ``.so``.  So a built kernel and a reloaded one run identical code.

Compile time matters: the tuner builds every candidate it measures.  The pipeline is LLVM's O3
(with its loop and SLP vectorizers, which still find work in schedules that leave loops
unannotated) with a few of LLVM's global options changed, see :data:`LLVM_OPTIONS`.  Measured
on sampled matmul / conv2d candidates (benchmarks/codegen_speed.py) the kernels run as fast as
with plain O3 while optimisation and object emission take about half the time.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import struct
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ..errors import BuildError

_INIT_LOCK = threading.Lock()
_RUNTIME_LOADED = False

# LLVM command-line options, set once per process when the first module is compiled (they are
# process-wide LLVM state, so they also apply to any other llvmlite user in this process).
#   unroll-runtime / unroll-allow-partial = false: only *full* unrolling of constant-trip
#       loops remains.  The code generator already emits vector bodies and unrolls what the
#       schedule asks for; partial and runtime unrolling on top multiplied the code that every
#       later pass and instruction selection process (3-5x on some candidates) for no speed.
#   post-RA-scheduler = false: the second (post register allocation) list scheduler, which
#       x86 enables for some CPUs (Zen), is quadratic in the size of a basic block and took
#       up to 60% of compile time on large unrolled bodies; out-of-order cores do not need it.
#   dse-memoryssa-defs-per-block-limit = 200 (LLVM default 5000): dead store elimination
#       scanned the thousands of stores of fully unrolled accumulator updates for each store;
#       the stores it can still remove within the limit are the local ones that matter.
# How many times an idle OpenMP thread polls for new work before it sleeps (libgomp's
# GOMP_SPINCOUNT; its default is 300000, about 10 ms of spinning after every parallel region).
# The kernels of a model run back to back with a few microseconds of Python between them: the
# worker thread must still be polling when the next launch comes, or waking it from sleep costs
# tens of microseconds per parallel region.  Measured on tuned ResNet-18 (2 threads, quiet
# machine): 1000 polls 45 ms median end to end (29 ms at best, erratic), 20000 polls 26 ms
# (steady); BERT layer 13.7 ms -> 13.3 ms.  libgomp's 300000 (about 10 ms) is not better and
# on a loaded machine long polling takes the core from the thread that has work, so the
# window is kept well under a millisecond.  Only used when the user set neither GOMP_SPINCOUNT
# nor OMP_WAIT_POLICY, and only if libgomp is not loaded yet (it reads its environment once).
GOMP_SPIN_COUNT = 20000

LLVM_OPTIONS = (
    "-unroll-runtime=false",
    "-unroll-allow-partial=false",
    "-post-RA-scheduler=false",
    "-dse-memoryssa-defs-per-block-limit=200",
)
# The environment variable TENSOR_IR_LLVM_OPTIONS, when set, replaces LLVM_OPTIONS (options
# separated by spaces; empty: LLVM's defaults), e.g. to compare against plain O3.
LLVM_OPTIONS_ENV = "TENSOR_IR_LLVM_OPTIONS"


def llvm_options() -> tuple[str, ...]:
    """The LLVM options this process applies (see LLVM_OPTIONS)."""
    override = os.environ.get(LLVM_OPTIONS_ENV)
    return LLVM_OPTIONS if override is None else tuple(override.split())


def _initialize() -> None:
    """Register every LLVM target (cross compilation) and make what the generated code calls
    visible to the JIT's symbol resolution: the parallel runtime (tensor_ir.codegen.threadpool,
    compiled here once per process), libm (expf, erff, ...), libgcc_s (half-precision
    conversion helpers on CPUs without F16C).  libgomp is loaded only for kernels built with
    the "gomp" parallel runtime (:func:`load_openmp`)."""
    global _RUNTIME_LOADED
    with _INIT_LOCK:
        if _RUNTIME_LOADED:
            return
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        for option in llvm_options():
            llvm.set_option("tensor_ir", option)
        _load_library("m", required=True)
        _load_library("gcc_s", required=False)
        from .threadpool import register_jit_runtime

        register_jit_runtime()
        _RUNTIME_LOADED = True


def _load_library(lib: str, required: bool) -> bool:
    """Make ``lib{lib}`` visible to the JIT's symbol resolution; whether it was found."""
    path = ctypes.util.find_library(lib)
    for candidate in [p for p in (path, f"lib{lib}.so.1", f"lib{lib}.so.6") if p]:
        try:
            llvm.load_library_permanently(candidate)
            return True
        except RuntimeError:
            continue
    if required:
        raise BuildError(f"cannot load the runtime library lib{lib}, which generated kernels "
                         f"call; is it installed?")
    return False


_OPENMP_LOADED = False


def load_openmp() -> None:
    """Load libgomp for kernels built with the "gomp" parallel runtime (tensor_ir.codegen
    .parallel.set_runtime), with GOMP_SPIN_COUNT unless the user chose a policy.  Only those
    kernels call it, so a process that never builds or loads one never loads libgomp; a
    BuildError when it is not installed."""
    global _OPENMP_LOADED
    with _INIT_LOCK:
        if _OPENMP_LOADED:
            return
        with _openmp_environment():
            _load_library("gomp", required=True)
        _OPENMP_LOADED = True


class _openmp_environment:
    """Around the first load of libgomp: GOMP_SPINCOUNT=GOMP_SPIN_COUNT in the environment
    (libgomp reads it while loading), removed again afterwards so that child processes and
    other libraries see the environment the user gave.  Does nothing when the user chose an
    OpenMP wait policy or spin count, or when libgomp is already loaded in this process."""

    def __enter__(self):
        self._set = False
        user_choice = "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ
        if not user_choice and not libgomp_loaded():
            os.environ["GOMP_SPINCOUNT"] = str(GOMP_SPIN_COUNT)
            self._set = True

    def __exit__(self, *exc):
        if self._set:
            os.environ.pop("GOMP_SPINCOUNT", None)
        return False


def libgomp_loaded() -> bool:
    """Whether libgomp is mapped into this process (Linux; False where that cannot be told)."""
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


@dataclass(frozen=True)
class LLVMTarget:
    """The machine code is generated for.  Empty fields mean: the host's.

    ``mattr`` is LLVM's feature string ("+avx2,+fma"); for the host triple with no ``mcpu``
    the host CPU and its features are used.
    """

    mtriple: str = ""
    mcpu: str = ""
    mattr: str = ""
    opt_level: int = 3

    @property
    def triple(self) -> str:
        return self.mtriple or llvm.get_process_triple()

    @property
    def is_host(self) -> bool:
        """Whether code for this target can run in this process."""
        return _same_arch(self.triple, llvm.get_process_triple())

    def resolved(self) -> tuple[str, str, str]:
        """(triple, cpu, features) with host defaults filled in."""
        triple = self.triple
        cpu, features = self.mcpu, self.mattr
        if self.is_host and not cpu:
            cpu = llvm.get_host_cpu_name()
            if not features:
                features = llvm.get_host_cpu_features().flatten()
        return triple, cpu or "generic", features


def _same_arch(a: str, b: str) -> bool:
    return a.split("-")[0] == b.split("-")[0] and ("linux" in a) == ("linux" in b)


def _create_target_machine(triple: str, cpu: str, features: str,
                           opt_level: int) -> llvm.TargetMachine:
    _initialize()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as err:
        raise BuildError(f"LLVM has no target for triple {triple!r}: {err}") from err
    # PIC + small code model: the object links into a shared library as it is, and its
    # 32-bit PC-relative references (constant pools, jump tables, calls through the PLT) stay
    # in range in the JIT because JITModule places all of one object's sections, stubs and
    # GOT in one allocation.  The large code model would not need that, but costs every
    # constant-pool access a movabs and a register.
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level,
                                        reloc="pic", codemodel="small")


# Shared by compiles (creating one costs about a millisecond).  An MCJIT engine (the loader on
# hosts whose objects are not ELF) takes ownership of its target machine, so every engine
# gets a fresh, uncached one.
_target_machine = functools.lru_cache(maxsize=16)(_create_target_machine)


def target_machine(target: LLVMTarget) -> llvm.TargetMachine:
    return _target_machine(*target.resolved(), target.opt_level)


class CompiledModule:
    """An optimised module and its object code.

    ``source_ir`` is the IR as generated, ``llvm_ir`` after optimisation, ``object_code`` the
    relocatable object (bytes).  ``llvm_ir`` and ``assembly()`` are produced on demand (most
    builds never ask for them).
    """

    def __init__(self, source_ir: str, llvm_ir: str | llvm.ModuleRef, object_code: bytes,
                 target: LLVMTarget):
        self.source_ir = source_ir
        self._llvm_ir = llvm_ir
        self.object_code = object_code
        self.target = target
        self._asm: str | None = None

    @property
    def llvm_ir(self) -> str:
        if not isinstance(self._llvm_ir, str):
            self._llvm_ir = str(self._llvm_ir)
        return self._llvm_ir

    def assembly(self) -> str:
        if self._asm is None:
            tm = target_machine(self.target)
            self._asm = tm.emit_assembly(_parse(self.llvm_ir, "optimised module"))
        return self._asm

    def jit(self) -> "JITModule":
        if not self.target.is_host:
            raise BuildError(f"module compiled for {self.target.triple} cannot run on this "
                             f"host ({llvm.get_process_triple()}); export it instead")
        return JITModule(self.object_code, self.target)


def _parse(text: str, what: str) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as err:
        raise BuildError(f"LLVM rejected the {what}: {err}") from err
    return mod


def compile_module(module: ir.Module | str, target: LLVMTarget | None = None) -> CompiledModule:
    """Verify, optimise and compile ``module`` (an llvmlite.ir Module or IR text).

    The generated IR is verified once, when it is parsed; the optimiser's output is not
    verified again (a second verify found nothing that LLVM's own passes do not guarantee,
    and cost as much as parsing)."""
    target = target or LLVMTarget()
    tm = target_machine(target)
    source = str(module)
    ref = _parse(source, f"generated module {getattr(module, 'name', '')!r}".strip())
    ref.triple = target.triple
    ref.data_layout = str(tm.target_data)
    if target.opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=min(target.opt_level, 3))
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        # Full unrolling of small constant loops (register blocking of accumulators) is what
        # this enables; partial and runtime unrolling are switched off in LLVM_OPTIONS.
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(ref, pb)
    return CompiledModule(source, ref, tm.emit_object(ref), target)


# ---------------------------------------------------------------------------------------------
# Loading object code into this process
# ---------------------------------------------------------------------------------------------
#
# MCJIT's RuntimeDyld with SectionMemoryManager maps an object's code, its read-only data and
# the GOT it makes for it separately.  In a long-lived process with many mappings (threads,
# Ray, thousands of loaded kernels) those can land more than 2 GB apart, and then the 32-bit
# PC-relative reference from the code to its constant pool overflows: LLVM aborts the process
# in finalize_object (an assertion), or, built without assertions, patches a wrong offset.
# JITLink (ORC's linker, here in an LLJIT instance) lays out one object as one link graph in
# one mapping, with the PLT stubs and GOT entries it creates inside that graph, and reports a
# reference it cannot reach as an error.  So where objects are ELF, JITLink loads them.

_ELF_HEADER = struct.Struct("<4sBB10xHHIQQQIHHHHHH")  # ELF64 little-endian file header
_ELF_SECTION = struct.Struct("<IIQQQQIIQQ")
_ELF_SYMBOL = struct.Struct("<IBBHQQ")
_ELF_RELA = struct.Struct("<QQq")
_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS = 2, 4, 8
_SHT_LINKED = (2, 4, 9)  # symbol table, RELA, REL: sh_link (and sh_info) name sections
_SHN_LORESERVE = 0xFF00  # section indices from here on are special (ABS, COMMON)
_ET_REL = 1
_STB_GLOBAL, _STB_WEAK = 1, 2
# ELF e_machine of the hosts JITLink loads for, by platform.machine().
_ELF_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
# Names an object may need that the JIT defines itself rather than the process: the GOT's
# base (large code model references) and the DSO handle (atexit).
_JIT_PROVIDED = frozenset({"_GLOBAL_OFFSET_TABLE_", "__dso_handle"})
# How the object files MCJIT is given may begin: ELF of another class or byte order, 64-bit
# Mach-O, COFF for x86-64 or arm64.
_OBJECT_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\x64\x86", b"\x64\xaa")


@dataclass(frozen=True)
class _ObjectSymbols:
    """An ELF object's machine (e_machine), the global symbols it defines and those it needs
    from outside."""

    machine: int
    defined: tuple[str, ...]
    undefined: tuple[str, ...]


def _elf_symbols(object_code: bytes) -> _ObjectSymbols | None:
    """The global (and weak) symbols of an ELF64 little-endian relocatable object; None when
    ``object_code`` is another format (Mach-O, COFF, 32-bit or big-endian ELF).

    BuildError when it claims to be such an ELF object but is another kind of ELF file or its
    header and section tables are inconsistent: a section outside the file, a link to a
    section that does not exist.  (LLVM's ELF reader aborts the process on some of those, in
    builds with assertions, instead of reporting them.)"""
    if object_code[:6] != b"\x7fELF\x02\x01":
        if object_code[:4] == b"\x7fELF" and (
                object_code[4:5] not in (b"\x01", b"\x02")
                or object_code[5:6] not in (b"\x01", b"\x02")):
            raise BuildError(f"the object code is not a well-formed ELF object: class / byte "
                             f"order {object_code[4:6]!r}")
        return None
    try:
        return _read_elf_symbols(object_code)
    except (struct.error, IndexError, ValueError, OverflowError, UnicodeDecodeError) as err:
        raise BuildError(f"the object code is not a well-formed ELF object: {err}") from err


def _read_elf_symbols(data: bytes) -> _ObjectSymbols:
    def check(condition: bool, what: str) -> None:
        if not condition:
            raise BuildError(f"the object code is not a well-formed ELF object: {what}")

    header = _ELF_HEADER.unpack_from(data)
    e_type, machine, shoff, ehsize, shentsize, shnum, shstrndx = (
        header[3], header[4], header[8], header[10], header[13], header[14], header[15])
    check(e_type == _ET_REL, f"ELF type {e_type}, not a relocatable object")
    check(ehsize == _ELF_HEADER.size and shentsize == _ELF_SECTION.size,
          f"header size {ehsize} / section entry size {shentsize}")
    check(0 < shnum and shoff + shnum * shentsize <= len(data),
          f"{shnum} section headers at {shoff} in {len(data)} bytes")
    check(shstrndx < shnum, f"section name table {shstrndx} of {shnum} sections")
    sections = [_ELF_SECTION.unpack_from(data, shoff + k * shentsize) for k in range(shnum)]
    symbol_count = {k: s[5] // _ELF_SYMBOL.size for k, s in enumerate(sections)
                    if s[1] == _SHT_SYMTAB}
    for k, (_, sh_type, _, _, offset, size, link, info, align, entsize) in enumerate(sections):
        check(align & (align - 1) == 0, f"section {k} alignment {align}")
        if sh_type not in (0, _SHT_NOBITS):
            check(offset + size <= len(data), f"section {k} ({offset}+{size}) past the end")
        if sh_type in _SHT_LINKED:
            check(link < shnum and (sh_type == _SHT_SYMTAB or info < shnum),
                  f"section {k} links to section {link} / {info} of {shnum}")
        if sh_type == _SHT_RELA:
            # Where each relocation writes, and which symbol it names: JITLink trusts both.
            # (4 bytes: the narrowest field; a tail call's may end the section.)
            check(entsize == _ELF_RELA.size and link in symbol_count,
                  f"relocation section {k}: entry size {entsize}, symbol table {link}")
            target_size = sections[info][5]
            for r_offset, r_info, _ in _ELF_RELA.iter_unpack(
                    data[offset:offset + size - size % entsize]):
                check(r_offset + 4 <= target_size and r_info >> 32 < symbol_count[link],
                      f"relocation section {k}: offset {r_offset}, symbol {r_info >> 32}")
    defined, undefined = [], []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != _SHT_SYMTAB:
            continue
        check(entsize == _ELF_SYMBOL.size, f"symbol entry size {entsize}")
        strings, strings_size = sections[link][4], sections[link][5]
        for k in range(1, size // entsize):  # entry 0 is the null symbol
            name, info, _, shndx, _, _ = _ELF_SYMBOL.unpack_from(data, offset + k * entsize)
            check(name < strings_size and (shndx < shnum or shndx >= _SHN_LORESERVE),
                  f"symbol {k}: name {name}, section {shndx}")
            if info >> 4 not in (_STB_GLOBAL, _STB_WEAK) or not name:
                continue
            start = strings + name
            text = data[start:data.index(b"\0", start, strings + strings_size)].decode()
            (undefined if shndx == 0 else defined).append(text)
    return _ObjectSymbols(machine, tuple(defined), tuple(undefined))


class _LinkedObject:
    """One ELF object linked by JITLink, in an LLJIT instance of its own.

    Its external symbols are resolved the way MCJIT resolves them, by LLVM's process-wide
    search (``llvm.address_of_symbol``): symbols registered with ``llvm.add_symbol`` first,
    then the libraries loaded with ``llvm.load_library_permanently``, then the process.  Each
    one found is handed to the link as an absolute address: LLJIT's own fallback searches the
    process with dlsym alone and would miss the registered ones.  Every global the object
    defines is looked up at link time, so later lookups are a dictionary access.

    NOTE: one LLJIT per object rather than one per process: a JIT library's name cannot be
    reused and an emptied library stays in its session (about 10 KB each), which adds up
    over a tuning run; a fresh LLJIT costs well under a millisecond and is freed whole.
    """

    def __init__(self, object_code: bytes, symbols: _ObjectSymbols):
        if "GOMP_parallel" in symbols.undefined:
            load_openmp()  # built with the "gomp" parallel runtime
        library = llvm.JITLibraryBuilder().add_object_img(object_code)
        unresolved = []
        for name in symbols.undefined:
            address = llvm.address_of_symbol(name)
            if address:
                library.import_symbol(name, address)
            elif name not in _JIT_PROVIDED:
                unresolved.append(name)
        for name in symbols.defined:
            library.export_symbol(name)
        try:
            jit = llvm.create_lljit_compiler(use_jit_link=True)
            # The tracker owns the linked memory (and keeps its LLJIT alive): it lives as long
            # as this object, and so as long as the kernel that holds it.
            self._tracker = library.link(jit, "object")
        except RuntimeError as err:
            # NOTE: JITLink's reason (an unreachable reference, an unsupported relocation)
            # goes to LLVM's session error reporter, which prints it to stderr; the error
            # the link returns only says that materialisation failed.
            missing = (f"; not found in this process: {', '.join(unresolved)} (is the "
                       f"library that defines them loaded?)" if unresolved else
                       "; LLVM printed the reason as 'JIT session error' on stderr")
            raise BuildError(f"the JIT (JITLink) cannot load the object code: {err}{missing}"
                             ) from err
        self._jit = jit
        self._addresses = {name: self._tracker[name] for name in symbols.defined}

    def address(self, name: str) -> int:
        return self._addresses.get(name, 0)


class _MCJITObject:
    """One object in an MCJIT engine of its own: the loader where objects are not ELF.

    NOTE: MCJIT's section-by-section placement is what can overflow a 32-bit relocation (see
    above); ELF hosts never take this path."""

    def __init__(self, object_code: bytes, target: LLVMTarget):
        if b"GOMP_parallel" in object_code:
            load_openmp()  # built with the "gomp" parallel runtime
        tm = _create_target_machine(*target.resolved(), target.opt_level)
        empty = llvm.parse_assembly("")
        empty.triple = target.triple
        empty.data_layout = str(tm.target_data)
        self._engine = llvm.create_mcjit_compiler(empty, tm)
        try:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
            self._engine.finalize_object()
        except RuntimeError as err:
            raise BuildError(f"the JIT (MCJIT) cannot load the object code: {err}") from err

    def address(self, name: str) -> int:
        return self._engine.get_global_value_address(name)


class JITModule:
    """Object code loaded into this process; symbols looked up by name.

    ELF objects are linked by JITLink into one contiguous allocation, so no address-space
    layout can push a relocation out of range (see the notes above); a load that fails for any
    reason raises BuildError.  The loaded code lives as long as this object."""

    def __init__(self, object_code: bytes, target: LLVMTarget | None = None):
        target = target or LLVMTarget()
        # The runtime libraries and registered symbols must be in place before the object's
        # external symbols are resolved.
        _initialize()
        object_code = bytes(object_code)
        symbols = _elf_symbols(object_code)
        if symbols is None:
            # NOTE: checked here because MCJIT (llvmlite's object file reader) crashes the
            # process on bytes that are no object file at all.
            if not object_code.startswith(_OBJECT_MAGICS):
                raise BuildError(f"the object code is not an object file (it starts with "
                                 f"{object_code[:8]!r})")
            self._loaded: _LinkedObject | _MCJITObject = _MCJITObject(object_code, target)
            return
        host = _ELF_MACHINE.get(platform.machine().lower())
        if host is not None and symbols.machine != host:
            raise BuildError(f"the object code is for ELF machine {symbols.machine}, not for "
                             f"this host ({llvm.get_process_triple()}); it cannot be loaded "
                             f"here")
        self._loaded = _LinkedObject(object_code, symbols)

    def function_address(self, name: str) -> int:
        addr = self._loaded.address(name)
        if not addr:
            raise BuildError(f"symbol {name!r} is not defined in the compiled module")
        return addr

    def global_address(self, name: str) -> int:
        addr = self._loaded.address(name)
        if not addr:
            raise BuildError(f"global {name!r} is not defined in the compiled module")
        return addr

    def read_string(self, name: str) -> str:
        """A NUL-terminated string constant of the module."""
        return ctypes.string_at(self.global_address(name)).decode()


def host_triple() -> str:
    return llvm.get_process_triple()
