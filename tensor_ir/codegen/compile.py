"""Compiling LLVM modules: verify, optimise (new pass manager, O3), emit objects, JIT (MCJIT).

One compile produces one position-independent object file; the same bytes are what the JIT
loads (into a fresh MCJIT engine), what ``export_library`` writes as ``.o`` and what ``cc
-shared`` links into a ``.so``.  So a built kernel and a reloaded one run identical code.

Compile time matters: the tuner builds every candidate it measures.  The pipeline is LLVM's O3
(with its loop and SLP vectorizers, which still find work in schedules that leave loops
unannotated) with a few of LLVM's global options changed, see :data:`LLVM_OPTIONS`.  Measured
on sampled matmul / conv2d candidates (benchmarks/codegen_speed.py) the kernels run as fast as
with plain O3 while optimisation and object emission take about half the time.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
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
    """Register every LLVM target (cross compilation) and make the libraries the generated
    code calls visible to the JIT's symbol resolution: libm (expf, erff, ...), libgomp
    (GOMP_parallel, omp_get_thread_num) and libgcc_s (half-precision conversion helpers on
    CPUs without F16C)."""
    global _RUNTIME_LOADED
    with _INIT_LOCK:
        if _RUNTIME_LOADED:
            return
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        for option in llvm_options():
            llvm.set_option("tensor_ir", option)
        for lib, required in (("m", True), ("gomp", True), ("gcc_s", False)):
            path = ctypes.util.find_library(lib)
            candidates = [p for p in (path, f"lib{lib}.so.1", f"lib{lib}.so.6") if p]
            with _openmp_environment() if lib == "gomp" else contextlib.nullcontext():
                for candidate in candidates:
                    try:
                        llvm.load_library_permanently(candidate)
                        break
                    except RuntimeError:
                        continue
                else:
                    if required:
                        raise BuildError(f"cannot load the runtime library lib{lib}, which "
                                         f"generated kernels call; is it installed?")
        _RUNTIME_LOADED = True


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
    # PIC + small code model: the object links into a shared library, and MCJIT's loader
    # handles its GOT / PLT relocations.
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level,
                                        reloc="pic", codemodel="small")


# Shared by compiles (creating one costs about a millisecond).  An MCJIT engine takes ownership
# of its target machine, so every engine gets a fresh, uncached one.
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


class JITModule:
    """Object code loaded into its own MCJIT engine; symbols looked up by name."""

    def __init__(self, object_code: bytes, target: LLVMTarget | None = None):
        target = target or LLVMTarget()
        tm = _create_target_machine(*target.resolved(), target.opt_level)
        empty = llvm.parse_assembly("")
        empty.triple = target.triple
        empty.data_layout = str(tm.target_data)
        self._engine = llvm.create_mcjit_compiler(empty, tm)
        try:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
            self._engine.finalize_object()
        except RuntimeError as err:
            raise BuildError(f"the JIT cannot load the object code: {err}") from err

    def function_address(self, name: str) -> int:
        addr = self._engine.get_function_address(name)
        if not addr:
            raise BuildError(f"symbol {name!r} is not defined in the compiled module")
        return addr

    def global_address(self, name: str) -> int:
        addr = self._engine.get_global_value_address(name)
        if not addr:
            raise BuildError(f"global {name!r} is not defined in the compiled module")
        return addr

    def read_string(self, name: str) -> str:
        """A NUL-terminated string constant of the module."""
        return ctypes.string_at(self.global_address(name)).decode()


def host_triple() -> str:
    return llvm.get_process_triple()
