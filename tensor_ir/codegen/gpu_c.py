"""Lowered PrimFunc -> CUDA C or OpenCL C kernel source: one printer, two dialects.

    source = gpu_source(lower_for_gpu(sch.func), dialect="opencl")
    source.code                 # the kernel text
    source.grid, source.block   # launch configuration, (x, y, z) each
    module = gpu_module(lower_for_gpu(sch.func), dialect="cuda")   # one or more kernels

A kernel's body is one statement of the function.  Loops bound to ``blockIdx.x/y/z`` and
``threadIdx.x/y/z`` are not printed as loops: each becomes its launch index (``blockIdx.x`` /
``get_group_id(0)``, ``threadIdx.x`` / ``get_local_id(0)``, plus the loop's min) and its extent
goes into the launch configuration.  Every other loop prints as ``for``; a loop bound to
``vthread`` (a thread's strided share of the work, one virtual thread after another) and an
unrolled loop carry ``#pragma unroll``.

Auto-unroll.  A loop annotated ``pragma_auto_unroll_max_step`` (a GPU-tiled nest's blockIdx
loop, see schedules.postproc.RewriteUnrollGPU) sets a step for the loops under it, as the CPU
code generator does: a serial loop of constant extent whose iterations, counted as the leaf
statements they run with every loop inside unrolled, are at most the step carries ``#pragma
unroll`` (nvcc and the OpenCL compilers built on clang, PoCL's among them, unroll it fully).
A small register tile so unrolled is indexed by constants and kept in registers.

Several kernels.  A function whose top level is a sequence of nests (each stage bound to
blockIdx / threadIdx on its own, with its own extents) prints, through :func:`gpu_module`, as
one kernel per statement of the sequence, launched in that order: a kernel boundary is the
only barrier across blocks.  Buffers allocated in global memory around the sequence are the
module's temporaries, allocated on the device by the runtime.  :func:`gpu_source` prints a
function that is one kernel.

Cross-thread reductions are rewritten before lowering (:mod:`tensor_ir.thread_reduce`,
through ``lower_for_gpu``); the printer sees only the per-thread loops, the shared-memory tree
and the barriers between its steps.

Barriers.  The rule is conservative and purely syntactic; it places ``__syncthreads()`` /
``barrier(CLK_LOCAL_MEM_FENCE)``:

1. in a statement sequence, before a statement that reads a shared buffer an earlier statement
   of the sequence wrote (read after write), or writes a shared buffer an earlier statement read
   or wrote (write after read / write), since the other threads may still be behind;
2. at the end of a serial loop's body when the body both reads and writes one shared buffer,
   because the next iteration overwrites what slower threads may still be reading.

A barrier must be reached by every thread of the block, so one that would sit under control
flow depending on a thread index (a predicate, a loop bound) is refused with a BuildError
rather than printed (it would hang or be undefined).

Vector accesses.  A vectorized loop of 2 or 4 lanes whose body is one store to a global or
shared float32 / int32 buffer at consecutive elements from an offset the lane count divides (a
proof from the index's form) prints as one vector store (CUDA ``*(float4*)&C[i] =
make_float4(...)``, OpenCL ``vstore4``), each load of the value meeting the same conditions as
one vector load (``*(float4*)&A[i]``, ``vload4``) and the others lane by lane.  A shared buffer
accessed so is declared aligned to the vector (a cooperative fetch copying float4s).  Any
other vectorized loop (a predicate around the store, a stride, an offset not known to be
aligned) prints as an unrolled scalar loop.

Semantics kept from the IR: integer ``//`` and ``%`` are floor division and modulo (printed as
C's ``/`` and ``%`` where both operands are provably non-negative, otherwise through small
helper functions that also give ``x // 0 == 0``); ``Select`` evaluates only the chosen branch
(C's ``?:``); float ``min`` / ``max`` propagate NaN as numpy's and the CPU code's do (through
small helpers: C's ``fmin``/``fmax`` return the other operand when one is NaN, so a ReLU
would turn NaN into 0).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .. import dtype as dt
from ..buffer import Buffer
from ..errors import BuildError
from ..expr import (
    And,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Select,
    Var,
    binary,
)
from ..func import PrimFunc
from ..simplify import simplify_expr
from ..stmt import (
    THREAD_BINDING,
    UNROLLED,
    VECTORIZED,
    Allocate,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
)
from ..visitor import collect, free_vars, substitute, transform, uses_var, walk
from .checks import depends_on_data
from .common import const_shape, flat_index, unrolled_steps

__all__ = ["DIALECTS", "GPUModule", "GPUParam", "GPUSource", "gpu_module", "gpu_source",
           "split_kernels"]

DIALECTS = ("cuda", "opencl")

# Element types with 2- and 4-lane vector types (float2/float4, int2/int4) in both dialects.
_VECTOR_DTYPES = ("float32", "int32")

# Launch axes, in the order of the grid / block tuples.
_BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def _launched(loop: For) -> bool:
    """A loop the launch runs (bound to a block or thread index): one iteration per thread.
    A vthread loop is run by every thread in turn, so it counts its whole extent."""
    return loop.kind == THREAD_BINDING and loop.thread_binding != "vthread"
_OPENCL_INDEX = {**{a: f"get_group_id({i})" for i, a in enumerate(_BLOCK_AXES)},
                 **{a: f"get_local_id({i})" for i, a in enumerate(_THREAD_AXES)}}

_C_TYPES = {
    "cuda": {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
             "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
             "uint32": "unsigned int", "uint64": "unsigned long long", "float16": "half",
             "float32": "float", "float64": "double"},
    "opencl": {"bool": "bool", "int8": "char", "int16": "short", "int32": "int",
               "int64": "long", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
               "uint64": "ulong", "float16": "half", "float32": "float",
               "float64": "double"},
}

# Math intrinsics: the IR's name -> (CUDA float32 name, CUDA float64 name / OpenCL name).
# OpenCL's built-ins are overloaded on the argument type, as CUDA's double versions are named.
# round is half-to-even in the IR (numpy.round): C's rint.
_MATH = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "erf": "erf",
    "abs": "fabs", "floor": "floor", "ceil": "ceil", "round": "rint", "pow": "pow",
    "exp2": "exp2", "log2": "log2", "sin": "sin", "cos": "cos",
}

# C operator precedence (higher binds tighter) for the operators printed infix.
_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}
_C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while bool half global local kernel private constant min max
    threadIdx blockIdx blockDim gridDim main""".split()) | {
    # Library functions the kernel may call or that C declares (a kernel named "div" clashes).
    *("div", "ldiv", "abs", "labs", "fmin", "fmax", "fminf", "fmaxf", "floorf", "expf"),
    *_MATH.values(), *(name + "f" for name in _MATH.values())}


@dataclass(frozen=True)
class GPUParam:
    """One kernel parameter: a global buffer passed by pointer."""

    name: str
    shape: tuple
    dtype: str
    written: bool


@dataclass(frozen=True)
class GPUSource:
    """Kernel source text and how to launch it: ``grid`` blocks of ``block`` threads.

    ``buffers`` says, for a kernel of a :class:`GPUModule`, which of the module's buffers
    (its parameters, then its temporaries) each of ``params`` is; it is empty for a function
    printed as one kernel, whose ``params`` are the function's parameters in order."""

    name: str
    dialect: str
    code: str
    params: tuple
    grid: tuple
    block: tuple
    buffers: tuple = ()

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class GPUModule:
    """A function printed as kernels launched one after another on the same device buffers.

    ``params`` are the function's parameters (the caller's arrays); ``temps`` the buffers the
    function allocates in global memory between kernels, which the runtime allocates on the
    device; ``kernels`` the GPUSource of each kernel in launch order (each ``code`` a complete
    translation unit on its own); ``code`` all of them in one text, helpers once."""

    name: str
    dialect: str
    code: str
    params: tuple
    temps: tuple
    kernels: tuple

    @classmethod
    def of(cls, source: GPUModule | GPUSource) -> GPUModule:
        """``source`` as a module: a GPUSource (a function printed as one kernel) becomes a
        module of that kernel, its parameters, no temporaries."""
        if isinstance(source, GPUModule):
            return source
        return cls(source.name, source.dialect, source.code, source.params, (), (source,))

    @property
    def buffers(self) -> tuple:
        """Every buffer a kernel can take: ``params`` then ``temps`` (what ``buffers`` of a
        kernel indexes)."""
        return self.params + self.temps


def gpu_source(func: PrimFunc, dialect: str = "cuda", name: str | None = None,
               max_threads_per_block: int = 1024,
               max_shared_memory_per_block: int | None = None) -> GPUSource:
    """Print the lowered ``func`` as one ``dialect`` kernel (see the module docstring).

    Raises BuildError, naming the loop or buffer, for what a kernel cannot be: a thread-bound
    loop with a non-constant extent, two bindings of one axis with different extents, more
    threads per block than ``max_threads_per_block``, more shared memory than
    ``max_shared_memory_per_block``, a global buffer allocated inside the kernel outside every
    thread loop, a barrier needed under thread-dependent control flow, an unsupported dtype;
    and for a function that needs several kernels or global temporaries (print it with
    :func:`gpu_module`).
    """
    module = gpu_module(func, dialect, name, max_threads_per_block,
                        max_shared_memory_per_block)
    if len(module.kernels) != 1 or module.temps:
        temps = ", ".join(t.name for t in module.temps)
        raise BuildError(f"gpu codegen: function {func.name} is {len(module.kernels)} kernels"
                         + (f" with global temporaries {temps}" if temps else "")
                         + "; print it with gpu_module")
    return module.kernels[0]


def gpu_module(func: PrimFunc, dialect: str = "cuda", name: str | None = None,
               max_threads_per_block: int = 1024,
               max_shared_memory_per_block: int | None = None) -> GPUModule:
    """Print the lowered ``func`` as kernels launched in order (see the module docstring):
    one per statement of the top-level sequence, the global buffers allocated around that
    sequence becoming the module's temporaries.  The refusals are :func:`gpu_source`'s, per
    kernel, and a ``shared`` or ``local`` buffer allocated around two kernels (its contents
    cannot outlive a kernel)."""
    if dialect not in DIALECTS:
        raise BuildError(f"gpu codegen: unknown dialect {dialect!r}; expected one of "
                         f"{', '.join(DIALECTS)}")
    if not func.attr("lowered"):
        raise BuildError(f"gpu codegen: function {func.name} is not lowered; call "
                         "tensor_ir.thread_reduce.lower_for_gpu (or tensor_ir.lower.lower) "
                         "first")
    base = name or func.name
    base = "main_kernel" if base == "main" else base
    temps, stmts = split_kernels(func.body)
    written = _buffers(func.body, BufferStore)
    params = tuple(GPUParam(b.name, const_shape(b, "gpu codegen"), b.dtype, b in written)
                   for b in func.params)
    gtemps = tuple(GPUParam(b.name, const_shape(b, "gpu codegen"), b.dtype, True)
                   for b in temps)
    everything = list(func.params) + temps
    kernels, preamble, helpers, kernel_texts = [], [], [], []
    for i, stmt in enumerate(stmts):
        printer = _Printer(dialect, max_threads_per_block, max_shared_memory_per_block)
        if len(stmts) == 1 and not temps:
            args, indices = list(func.params), ()
        else:
            used = _buffers(stmt, BufferStore) | _buffers(stmt, BufferLoad)
            indices = tuple(j for j, b in enumerate(everything) if b in used)
            args = [everything[j] for j in indices]
        entry = base if len(stmts) == 1 else f"{base}_kernel{i}"
        source, lines, helper, text = printer.print_kernel(
            stmt, entry, args, written, base if len(stmts) == 1 else entry)
        kernels.append(replace(source, buffers=indices))
        helpers.extend(h for h in helper if h not in helpers)
        kernel_texts.append(text)
        preamble.extend(line for line in lines if line not in preamble)
    code = "\n".join(preamble + helpers + kernel_texts) + "\n"
    return GPUModule(base, dialect, code, params, gtemps, tuple(kernels))


def split_kernels(body) -> tuple[list, list]:
    """(global temporaries, kernel bodies): the global buffers allocated around the top-level
    sequence, and its statements, each wrapped in the other buffers allocated around it that
    it uses."""
    temps, others = [], []
    while isinstance(body, Allocate):
        (temps if body.buffer.scope == "global" else others).append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    if len(stmts) == 1 and not temps:
        # One kernel: its allocations stay where they were (a global one among them is
        # refused by the printer, as before).
        return [], [_wrap(body, others)]
    users: dict = {}
    for i, stmt in enumerate(stmts):
        used = _buffers(stmt, BufferStore) | _buffers(stmt, BufferLoad)
        for buf in others:
            if buf in used:
                users.setdefault(buf, []).append(i)
    for buf, where in users.items():
        if len(where) > 1:
            raise BuildError(f"gpu codegen: buffer {buf.name} (scope {buf.scope}) is used by "
                             f"{len(where)} kernels (top-level statements {where}); its "
                             "contents do not outlive a kernel: give it scope 'global' or "
                             "compute it inside each kernel")
    out = []
    for i, stmt in enumerate(stmts):
        out.append(_wrap(stmt, [b for b in others if users.get(b) == [i]]))
    return temps, out


def _wrap(stmt, buffers: list):
    for buf in reversed(buffers):
        stmt = Allocate(buf, stmt)
    return stmt


def _buffers(node, cls) -> set:
    found: set = set()
    walk(node, lambda n: found.add(n.buffer) if isinstance(n, cls) else None)
    return found


class _Printer:
    def __init__(self, dialect: str, max_threads: int, max_shared: int | None):
        self.dialect = dialect
        self.max_threads = max_threads
        self.max_shared = max_shared
        self.names: dict[object, str] = {}  # Var / Buffer -> unique C name
        self.used_names: set[str] = set()
        self.launch: dict[str, tuple[int, str]] = {}  # axis -> (extent, loop name)
        self.thread_vars: set = set()  # vars holding a launch index
        self.nonneg: set = set()  # vars known to be >= 0
        self.shared: list[Buffer] = []
        self.aligned: dict = {}  # shared Buffer -> bytes its declaration is aligned to
        self.helpers: set[str] = set()
        self.float_helpers: set[str] = set()
        self.lines: list[str] = []
        self.depth = 1
        self.in_threads = 0  # threadIdx loops around the statement being printed
        self.auto_unroll = 0  # the pragma_auto_unroll_max_step in force (0: none)
        self._steps: dict[int, tuple] = {}  # id(stmt) -> (stmt, leaf statements it runs)
        self.dtypes: set[str] = set()  # dtypes printed (for the includes / extensions)
        # The kernel's int64 index arithmetic printed as 32-bit int (see _index_fits_32).
        self.index32 = False

    # -- names and types --------------------------------------------------------------------------
    def name_of(self, key, hint: str) -> str:
        if key in self.names:
            return self.names[key]
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "v_" + base
        if base in _C_KEYWORDS or base.startswith("__"):
            base = base.strip("_") + "_v"
        name, i = base, 1
        while name in self.used_names:
            name, i = f"{base}_{i}", i + 1
        self.used_names.add(name)
        self.names[key] = name
        return name

    def ctype(self, dtype: str, what: str) -> str:
        try:
            ctype = _C_TYPES[self.dialect][dtype]
        except KeyError:
            raise BuildError(f"gpu codegen: dtype {dtype} of {what} is not supported in "
                             f"{self.dialect} (float16, float32, float64 and integer types "
                             "are)") from None
        self.dtypes.add(dtype)
        return ctype

    def itype(self, dtype: str, what: str) -> str:
        """The C type of an index value (loop variable, let, launch index, integer
        arithmetic, cast) of ``dtype``: 32-bit int for int64 where the kernel allows it."""
        if dtype == "int64" and self.index32:
            return "int"
        return self.ctype(dtype, what)

    def _index_fits_32(self, body, params: list) -> bool:
        """Whether the kernel's int64 values are indices that fit 32 bits: no buffer holds
        64-bit integers (so every int64 value derives from loop variables, launch indices and
        constants), every buffer has fewer than 2**31 elements, and so does the launch.  A
        GPU does 64-bit integer multiplies in several instructions and keeps each 64-bit
        value in two registers: index arithmetic is much of a tiled kernel's instructions."""
        buffers = set(params)
        walk(body, lambda n: buffers.add(n.buffer)
             if isinstance(n, (BufferLoad, BufferStore, Allocate)) else None)
        limit = 2 ** 31
        for buf in buffers:
            if buf.dtype in ("int64", "uint64"):
                return False
            shape = buf.shape
            if not all(isinstance(d, IntImm) or isinstance(d, int) for d in shape):
                return False
            if math.prod(int(getattr(d, "value", d)) for d in shape) >= limit:
                return False
        extents = []
        walk(body, lambda n: extents.append(n.extent)
             if isinstance(n, For) and n.kind == THREAD_BINDING else None)
        threads = 1
        for extent in extents:
            if not isinstance(extent, IntImm):
                return False
            threads *= extent.value
        return threads < limit

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def barrier(self) -> str:
        return "__syncthreads();" if self.dialect == "cuda" else "barrier(CLK_LOCAL_MEM_FENCE);"

    # -- function ---------------------------------------------------------------------------------
    def print_kernel(self, body, entry: str, params: list, written: set,
                     func_name: str) -> tuple[GPUSource, list[str], list[str], str]:
        """One kernel over ``body`` taking ``params`` (Buffers, in order): its GPUSource, the
        lines its text starts with (includes, extension pragmas), its helper functions' text,
        and the text of the kernel alone (for a module's combined source)."""
        # NOTE: C reserves "main" (nvcc requires it to return int), the usual PrimFunc name.
        entry = self.name_of("__entry__", entry)
        gparams, args = [], []
        for buf in params:
            shape = const_shape(buf, "gpu codegen")
            ctype = self.ctype(buf.dtype, f"parameter {buf.name}")
            if self.dialect == "opencl" and buf.dtype == "bool":
                # OpenCL C forbids bool in a kernel argument's pointee type.
                raise BuildError(f"gpu codegen: parameter {buf.name} is bool, which an OpenCL "
                                 "kernel cannot take; cast it to uint8")
            pname = self.name_of(buf, buf.name)
            gparams.append(GPUParam(buf.name, shape, buf.dtype, buf in written))
            if self.dialect == "cuda":
                args.append(f"{ctype}* __restrict__ {pname}")
            else:
                args.append(f"__global {ctype}* restrict {pname}")
        self.index32 = self._index_fits_32(body, params)
        self.stmt(body, divergent=False)
        body_lines = self.lines
        self.lines = []
        self._check_shared()
        for buf in self.shared:
            qualifier = "__shared__" if self.dialect == "cuda" else "__local"
            size = math.prod(const_shape(buf, "gpu codegen"))
            ctype, name = self.ctype(buf.dtype, buf.name), self.names[buf]
            align = self.aligned.get(buf)
            if align is None:
                self.emit(f"{qualifier} {ctype} {name}[{size}];")
            elif self.dialect == "cuda":
                self.emit(f"{qualifier} __align__({align}) {ctype} {name}[{size}];")
            else:
                self.emit(f"{qualifier} {ctype} {name}[{size}] __attribute__((aligned({align})));")
        decls = self.lines
        head = (f'extern "C" __global__ void {entry}(' if self.dialect == "cuda"
                else f"__kernel void {entry}(")
        grid = tuple(self.launch.get(a, (1, ""))[0] for a in _BLOCK_AXES)
        block = tuple(self.launch.get(a, (1, ""))[0] for a in _THREAD_AXES)
        threads = block[0] * block[1] * block[2]
        if threads > self.max_threads:
            loops = ", ".join(f"{self.launch[a][1]} ({a}, {self.launch[a][0]})"
                              for a in _THREAD_AXES if a in self.launch)
            raise BuildError(f"gpu codegen: kernel {func_name} has {threads} threads per block, "
                             f"above the target's {self.max_threads}; loops {loops}")
        preamble = []
        if "float64" in self.dtypes and self.dialect == "opencl":
            preamble.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if "float16" in self.dtypes:
            preamble.append("#include <cuda_fp16.h>" if self.dialect == "cuda"
                            else "#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        helpers = self._helper_text()
        kernel = [head + ", ".join(args) + ") {", *decls, *body_lines, "}"]
        code = "\n".join(preamble + helpers + kernel) + "\n"
        source = GPUSource(entry, self.dialect, code, tuple(gparams), grid, block)
        return source, preamble, helpers, "\n".join(kernel)

    def _check_shared(self) -> None:
        if self.max_shared is None:
            return
        total = sum(buf.nbytes for buf in self.shared)
        if total > self.max_shared:
            names = ", ".join(f"{b.name} ({b.nbytes} bytes)" for b in self.shared)
            raise BuildError(f"gpu codegen: shared memory {total} bytes is above the target's "
                             f"{self.max_shared}: {names}")

    def _helper_text(self) -> list[str]:
        qual = "__device__ __forceinline__" if self.dialect == "cuda" else "inline"
        out = []
        for ctype in sorted(self.helpers):
            suffix = ctype.replace(" ", "_")
            # Floor division and modulo as numpy computes them, x // 0 == x % 0 == 0 included.
            out.append(f"{qual} {ctype} floordiv_{suffix}({ctype} a, {ctype} b) {{\n"
                       f"  if (b == 0) return 0;\n"
                       f"  {ctype} q = a / b;\n"
                       f"  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}")
            out.append(f"{qual} {ctype} floormod_{suffix}({ctype} a, {ctype} b) {{\n"
                       f"  if (b == 0) return 0;\n"
                       f"  {ctype} r = a % b;\n"
                       f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}")
        for ctype in sorted(self.float_helpers):
            fn = "f{}" + ("f" if self.dialect == "cuda" and ctype == "float" else "")
            for op in ("min", "max"):
                # a + b is NaN when either is: numpy's and the CPU code's answer.
                out.append(f"{qual} {ctype} nan_{op}_{ctype}({ctype} a, {ctype} b) {{\n"
                           f"  return (a != a || b != b) ? a + b : {fn.format(op)}(a, b);\n}}")
        return out

    # -- statements -------------------------------------------------------------------------------
    def stmt(self, s, divergent: bool) -> None:
        if isinstance(s, SeqStmt):
            self.seq(s, divergent)
        elif isinstance(s, For):
            self.loop(s, divergent)
        elif isinstance(s, IfThenElse):
            cond = self.expr(s.condition)
            inner = divergent or self.depends_on_thread(s.condition)
            self.emit(f"if ({_strip(cond)}) {{")
            self.block(s.then_case, inner)
            if s.else_case is not None:
                self.emit("} else {")
                self.block(s.else_case, inner)
            self.emit("}")
        elif isinstance(s, BufferStore):
            self.emit(f"{self.access(s.buffer, s.indices)} = {_strip(self.expr(s.value))};")
        elif isinstance(s, LetStmt):
            name = self.name_of(s.var, s.var.name)
            if self.is_nonneg(s.value):
                self.nonneg.add(s.var)
            if self.depends_on_thread(s.value):
                self.thread_vars.add(s.var)
            self.emit(f"const {self.itype(s.var.dtype, name)} {name} = "
                      f"{_strip(self.expr(s.value))};")
            self.stmt(s.body, divergent)
        elif isinstance(s, Allocate):
            self.allocate(s, divergent)
        elif isinstance(s, Evaluate):
            self.emit(f"{_strip(self.expr(s.value))};")
        else:
            raise BuildError(f"gpu codegen: statement {type(s).__name__} is not lowered")

    def block(self, s, divergent: bool) -> None:
        self.depth += 1
        self.stmt(s, divergent)
        self.depth -= 1

    def seq(self, s: SeqStmt, divergent: bool) -> None:
        # Rule 1 of the module docstring: shared buffers written / read since the last barrier.
        written: set = set()
        read: set = set()
        for child in s.stmts:
            reads = {b for b in _buffers(child, BufferLoad) if b.scope == "shared"}
            writes = {b for b in _buffers(child, BufferStore) if b.scope == "shared"}
            conflict = (reads & written) | (writes & (read | written))
            if conflict:
                self.sync(conflict, divergent)
                written, read = set(), set()
            written |= writes
            read |= reads
            self.stmt(child, divergent)

    def sync(self, buffers: set, divergent: bool) -> None:
        if divergent:
            names = ", ".join(sorted(b.name for b in buffers))
            raise BuildError(f"gpu codegen: shared buffer(s) {names} need a barrier under "
                             "control flow that depends on the thread index; not every "
                             "thread would reach it")
        if self.lines and self.lines[-1].strip() == self.barrier():
            return  # the statement just printed ended with one: nothing ran since
        self.emit(self.barrier())

    def loop(self, s: For, divergent: bool) -> None:
        step = s.annotation("pragma_auto_unroll_max_step") if s.annotations else None
        if not isinstance(step, int) or isinstance(step, bool):
            self.loop_kind(s, divergent)
            return
        saved, self.auto_unroll = self.auto_unroll, step
        try:
            self.loop_kind(s, divergent)
        finally:
            self.auto_unroll = saved

    def steps(self, s) -> int:
        """Leaf statements ``s`` runs when every constant loop in it is unrolled (a huge
        number for a loop of non-constant extent); thread-bound loops count as one
        iteration, since each thread runs one."""
        return unrolled_steps(s, self._steps, _launched)

    def loop_kind(self, s: For, divergent: bool) -> None:
        axis = s.thread_binding if s.kind == THREAD_BINDING else None
        if axis in _BLOCK_AXES or axis in _THREAD_AXES:
            self.bound_loop(s, axis, divergent)
            return
        if s.kind == VECTORIZED and self.vector_loop(s):
            return
        name = self.name_of(s.loop_var, s.loop_var.name)
        ctype = self.itype(s.loop_var.dtype, f"loop {s.loop_var.name}")
        begin = _strip(self.expr(s.min))
        end = _strip(self.expr(binary("+", s.min, s.extent)))
        if self.is_nonneg(s.min):
            self.nonneg.add(s.loop_var)
        bounds_vary = self.depends_on_thread(s.min) or self.depends_on_thread(s.extent)
        if bounds_vary:
            self.thread_vars.add(s.loop_var)
        # A vthread loop is the thread's strided share of work, run one virtual thread after
        # another: unrolled, its iterations' independent loads and arithmetic interleave.  A
        # vectorized loop that is not one vector store is unrolled into its scalar lanes.
        # Under auto-unroll, a loop whose whole execution fits the step is unrolled too.
        if s.kind == UNROLLED or (s.kind == VECTORIZED or axis == "vthread") \
                and isinstance(s.extent, IntImm) or self.auto_unroll > 0 \
                and isinstance(s.extent, IntImm) and self.steps(s) <= self.auto_unroll:
            self.emit("#pragma unroll")
        self.emit(f"for ({ctype} {name} = {begin}; {name} < {end}; ++{name}) {{")
        inner = divergent or bounds_vary
        self.block(s.body, inner)
        # Rule 2: a later iteration overwrites shared memory this one reads.
        reads = {b for b in _buffers(s.body, BufferLoad) if b.scope == "shared"}
        writes = {b for b in _buffers(s.body, BufferStore) if b.scope == "shared"}
        if reads & writes:
            self.depth += 1
            self.sync(reads & writes, inner)
            self.depth -= 1
        self.emit("}")

    def vector_loop(self, s: For) -> bool:
        """Print the vectorized loop ``s`` as vector loads and one vector store (see the module
        docstring), or return False for the caller to print it as a scalar loop."""
        lanes = s.extent.value if isinstance(s.extent, IntImm) else 0
        store = s.body
        v = s.loop_var
        if lanes not in (2, 4) or not isinstance(s.min, IntImm) or not isinstance(
                store, BufferStore) or store.buffer.dtype not in _VECTOR_DTYPES:
            return False
        start = s.min.value

        def vector_base(buf, indices):
            """The flat offset of lane 0 when lanes are consecutive elements from an offset
            that is a multiple of the lane count, else None."""
            # Global memory, whose allocations are aligned to the vector, and shared memory,
            # whose declaration (printed after the body) is then aligned to it; a per-thread
            # array need not be.
            if buf.dtype not in _VECTOR_DTYPES or buf.scope not in ("global", "shared"):
                return None
            flat = flat_index(buf, indices, "gpu codegen")
            at = [simplify_expr(substitute(flat, {v: IntImm(start + lane, v.dtype)}))
                  for lane in range(lanes)]
            for lane in range(1, lanes):
                step = simplify_expr(binary("-", at[lane], at[0]))
                if not (isinstance(step, IntImm) and step.value == lane):
                    return None
            if not _multiple_of(at[0], lanes):
                return None
            if buf.scope == "shared":
                self.aligned[buf] = max(self.aligned.get(buf, 0), lanes * dt.nbytes(buf.dtype))
            return at[0]

        base = vector_base(store.buffer, store.indices)
        if base is None or uses_var(base, v):
            return False
        vloads = {}  # load -> (buffer, base, temp name)
        for load in collect(store.value, BufferLoad):
            if load in vloads or not uses_var(load, v):
                continue
            load_base = vector_base(load.buffer, load.indices)
            if load_base is not None:
                vloads[load] = (load.buffer, load_base, None)
        self.emit("{")
        self.depth += 1
        comps = "xyzw"
        lane_vars = {}
        for load, (buf, load_base, _) in vloads.items():
            vtype = f"{self.ctype(buf.dtype, buf.name)}{lanes}"
            temp = self.name_of(("vector", load), f"{buf.name}_v")
            self.emit(f"const {vtype} {temp} = {self.vector_load(buf, load_base, lanes)};")
            lane_vars[load] = []
            for lane in range(lanes):
                var = Var(f"{temp}_{lane}", buf.dtype)
                self.names[var] = f"{temp}.{comps[lane]}"
                lane_vars[load].append(var)
        values = []
        for lane in range(lanes):
            value = transform(store.value, lambda n, lane=lane: lane_vars[n][lane]
                              if isinstance(n, BufferLoad) and n in lane_vars else None)
            value = simplify_expr(substitute(value, {v: IntImm(start + lane, v.dtype)}))
            values.append(_strip(self.expr(value)))
        vtype = f"{self.ctype(store.buffer.dtype, store.buffer.name)}{lanes}"
        name = self.name_of(store.buffer, store.buffer.name)
        offset = _strip(self.expr(base))
        if self.dialect == "cuda":
            self.emit(f"*({vtype}*)&{name}[{offset}] = make_{vtype}({', '.join(values)});")
        else:
            self.emit(f"vstore{lanes}(({vtype})({', '.join(values)}), 0, {name} + {offset});")
        self.depth -= 1
        self.emit("}")
        return True

    def vector_load(self, buf: Buffer, base: PrimExpr, lanes: int) -> str:
        vtype = f"{self.ctype(buf.dtype, buf.name)}{lanes}"
        name = self.name_of(buf, buf.name)
        offset = _strip(self.expr(base))
        if self.dialect == "cuda":
            # NOTE: the offset is a multiple of the lane count and device allocations are
            # aligned, so the vector access is aligned as the hardware requires.
            return f"*({vtype}*)&{name}[{offset}]"
        return f"vload{lanes}(0, {name} + {offset})"

    def bound_loop(self, s: For, axis: str, divergent: bool) -> None:
        loop = s.loop_var.name
        if not isinstance(s.extent, IntImm):
            raise BuildError(f"gpu codegen: loop {loop} bound to {axis} has a non-constant "
                             f"extent {s.extent}; a launch dimension must be a constant")
        extent = s.extent.value
        if axis in self.launch and self.launch[axis][0] != extent:
            other_extent, other = self.launch[axis]
            raise BuildError(f"gpu codegen: loop {loop} is bound to {axis} with extent {extent} "
                             f"but loop {other} is bound to it with extent {other_extent} in the "
                             "same kernel")
        self.launch.setdefault(axis, (extent, loop))
        index = axis if self.dialect == "cuda" else _OPENCL_INDEX[axis]
        name = self.name_of(s.loop_var, loop)
        ctype = self.itype(s.loop_var.dtype, f"loop {loop}")
        value = f"({ctype}){index}"
        if not (isinstance(s.min, IntImm) and s.min.value == 0):
            value = f"{_strip(self.expr(s.min))} + {value}"
        if self.is_nonneg(s.min):
            self.nonneg.add(s.loop_var)
        self.thread_vars.add(s.loop_var)
        self.emit(f"const {ctype} {name} = {value};")
        inside = axis in _THREAD_AXES
        self.in_threads += inside
        self.stmt(s.body, divergent)
        self.in_threads -= inside

    def allocate(self, s: Allocate, divergent: bool) -> None:
        buf = s.buffer
        size = math.prod(const_shape(buf, "gpu codegen"))
        name = self.name_of(buf, buf.name)
        if buf.scope == "shared":
            # Hoisted to the top of the kernel: OpenCL only allows __local arrays there.
            self.ctype(buf.dtype, f"buffer {buf.name}")
            self.shared.append(buf)
            self.stmt(s.body, divergent)
            return
        if buf.scope == "global" and not self.in_threads:
            raise BuildError(f"gpu codegen: buffer {buf.name} (scope global) is allocated "
                             "inside the kernel outside every thread loop; a kernel cannot "
                             "allocate global memory (inline the stage or give the buffer "
                             "scope 'local' or 'shared')")
        # "local", or a global buffer private to one thread: a per-thread array.
        self.emit(f"{self.ctype(buf.dtype, f'buffer {buf.name}')} {name}[{size}];")
        self.stmt(s.body, divergent)

    # -- expressions ------------------------------------------------------------------------------
    def depends_on_thread(self, e) -> bool:
        return bool(free_vars(e) & self.thread_vars)

    def is_nonneg(self, e) -> bool:
        """A cheap proof that the integer ``e`` is >= 0 (loop variables with a non-negative
        start, non-negative constants, and + * // % min max of such)."""
        if isinstance(e, IntImm):
            return e.value >= 0
        if isinstance(e, Var):
            return e in self.nonneg
        if isinstance(e, BinOp) and e.op in ("+", "*", "//", "%", "min", "max"):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
            return dt.bits(e.dtype) >= dt.bits(e.value.dtype) and self.is_nonneg(e.value)
        return False

    def access(self, buf: Buffer, indices: tuple) -> str:
        flat = flat_index(buf, indices, "gpu codegen")
        return f"{self.name_of(buf, buf.name)}[{_strip(self.expr(flat))}]"

    def expr(self, e: PrimExpr) -> tuple[str, int]:
        """C text of ``e`` and the precedence of its outermost operator (99: atomic)."""
        if isinstance(e, Var):
            if e not in self.names:
                raise BuildError(f"gpu codegen: variable {e.name} is used but not defined")
            return self.names[e], 99
        if isinstance(e, IntImm):
            return self.int_literal(e), 99
        if isinstance(e, FloatImm):
            return self.float_literal(e), 99
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Cmp):
            return self.infix(e.op, e.a, e.b)
        if isinstance(e, And):
            return self.infix("&&", e.a, e.b)
        if isinstance(e, Or):
            return self.infix("||", e.a, e.b)
        if isinstance(e, Not):
            return f"!{_paren(self.expr(e.a), 98)}", 98
        if isinstance(e, Select):
            cond = _paren(self.expr(e.condition), 1)
            a = _paren(self.expr(e.true_value), 1)
            b = _paren(self.expr(e.false_value), 1)
            return f"{cond} ? {a} : {b}", 0
        if isinstance(e, Cast):
            return self.cast(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, BufferLoad):
            guard = self.data_guard(e)
            if guard:
                zero = IntImm(0, e.dtype) if dt.is_int(e.dtype) or e.dtype == "bool" \
                    else FloatImm(0.0, e.dtype)
                return f"{guard} ? {self.access(e.buffer, e.indices)} : {self.expr(zero)[0]}", 0
            return self.access(e.buffer, e.indices), 99
        raise BuildError(f"gpu codegen: expression {type(e).__name__} is not supported")

    def data_guard(self, e: BufferLoad) -> str:
        """The condition keeping a load whose index is read from data inside its buffer
        (empty when no index is).  NOTE: the LLVM backend stops with an error there
        (checks.py); a GPU kernel has no status to return yet, so such a load reads zero."""
        unsigned = "unsigned long long" if self.dialect == "cuda" else "ulong"
        conds = []
        for index, extent in zip(e.indices, e.buffer.shape):
            if depends_on_data(index, set()):
                text = _strip(self.expr(index))
                conds.append(f"(({unsigned})({text}) < {_strip(self.expr(extent))}ULL)"
                             if self.dialect == "cuda" else
                             f"(({unsigned})({text}) < {_strip(self.expr(extent))}UL)")
        return "(" + " && ".join(conds) + ")" if conds else ""

    def int_literal(self, e: IntImm) -> str:
        if e.dtype == "bool":
            return "true" if e.value else "false"
        if e.dtype == "int64" and not -2 ** 31 <= e.value < 2 ** 31:
            return f"{e.value}LL" if self.dialect == "cuda" else f"{e.value}L"
        text = str(e.value)
        if e.dtype in ("int64", "int32"):
            return text if e.value >= 0 else f"({text})"
        return f"(({self.ctype(e.dtype, 'constant')}){e.value})"

    def float_literal(self, e: FloatImm) -> str:
        if e.dtype == "float16":
            # A float literal converted: C has no half literal, and CUDA's __half mixed with
            # a double in arithmetic is ambiguous.
            self.ctype("float16", "constant")
            single = self.float_literal(FloatImm(e.value, "float32"))
            return f"__float2half({single})" if self.dialect == "cuda" else f"((half){single})"
        value = e.value
        suffix = "f" if e.dtype == "float32" else ""
        self.ctype(e.dtype, "constant")
        if math.isnan(value) or math.isinf(value):
            if self.dialect == "opencl":
                text = "NAN" if math.isnan(value) else "INFINITY"
            elif e.dtype == "float32":
                text = "__int_as_float(0x7fc00000)" if math.isnan(value) else \
                    "__int_as_float(0x7f800000)"
            else:
                text = "__longlong_as_double(0x7ff8000000000000LL)" if math.isnan(value) else \
                    "__longlong_as_double(0x7ff0000000000000LL)"
            if e.dtype == "float64" and self.dialect == "opencl":
                text = f"((double){text})"
            return f"(-{text})" if value < 0 else text
        text = repr(float(value))
        if "e" not in text and "." not in text:
            text += ".0"
        return f"({text}{suffix})" if value < 0 else f"{text}{suffix}"

    def infix(self, op: str, a: PrimExpr, b: PrimExpr) -> tuple[str, int]:
        prec = _PREC[op]
        # Left-associative: the right operand needs parentheses at equal precedence.
        return f"{_paren(self.expr(a), prec)} {op} {_paren(self.expr(b), prec + 1)}", prec

    def binop(self, e: BinOp) -> tuple[str, int]:
        op, dtype = e.op, e.dtype
        if op in ("+", "-", "*"):
            return self.infix(op, e.a, e.b)
        if op == "/":
            if not dt.is_float(dtype):
                raise BuildError(f"gpu codegen: '/' on {dtype}; integer division is '//'")
            return self.infix("/", e.a, e.b)
        if op in ("min", "max"):
            if dtype == "float16":
                # Through float32 (the NaN-propagating helper), exactly: both round-trip.
                self.ctype(dtype, op)
                self.float_helpers.add("float")
                return self.half_of(f"nan_{op}_float({self.as_float(e.a)}, "
                                    f"{self.as_float(e.b)})"), 98
            if dt.is_float(dtype):
                ctype = self.ctype(dtype, op)
                self.float_helpers.add(ctype)
                name = f"nan_{op}_{ctype}"
            else:
                # Both operands of the result's type: a literal is an int, and min(long, int)
                # is ambiguous among OpenCL's (and CUDA's) overloads.
                ctype = self.itype(dtype, op)
                a = f"({ctype}){_paren(self.expr(e.a), 98)}"
                b = f"({ctype}){_paren(self.expr(e.b), 98)}"
                return f"{op}({a}, {b})", 99
            return f"{name}({_strip(self.expr(e.a))}, {_strip(self.expr(e.b))})", 99
        if op in ("//", "%"):
            if dt.is_float(dtype):
                floor = "floorf" if self.dialect == "cuda" and dtype == "float32" else "floor"
                a, b = _strip(self.expr(e.a)), _strip(self.expr(e.b))
                if op == "//":
                    return f"{floor}({a} / {b})", 99
                return f"{_paren(self.expr(e.a), 5)} - {floor}({a} / {b}) * " \
                       f"{_paren(self.expr(e.b), 7)}", 5
            positive = isinstance(e.b, IntImm) and e.b.value > 0
            if positive and self.is_nonneg(e.a):
                return self.infix("/" if op == "//" else "%", e.a, e.b)
            ctype = self.itype(dtype, "division")
            self.helpers.add(ctype)
            helper = ("floordiv_" if op == "//" else "floormod_") + ctype.replace(" ", "_")
            return f"{helper}({_strip(self.expr(e.a))}, {_strip(self.expr(e.b))})", 99
        raise BuildError(f"gpu codegen: operator {op!r} is not supported")

    def cast(self, e: Cast) -> tuple[str, int]:
        src, dst = e.value.dtype, e.dtype
        if src == dst:
            return self.expr(e.value)
        if src == "float16" and dst != "float32":
            # From half through float: CUDA's __half converts implicitly to float only.
            return self.cast(Cast(dst, Cast("float32", e.value)))
        if dst == "bool":
            return f"{_paren(self.expr(e.value), 4)} != 0", 3
        if dst == "float16" and self.dialect == "cuda":
            src_text = _paren(self.expr(e.value), 98)
            return f"__float2half((float){src_text})", 98
        if dt.is_float(src):
            # A float converted to an integer is data, not an index: its full width.
            return f"({self.ctype(dst, 'cast')}){_paren(self.expr(e.value), 98)}", 98
        return f"({self.itype(dst, 'cast')}){_paren(self.expr(e.value), 98)}", 98

    def as_float(self, e: PrimExpr) -> str:
        """The float16 ``e`` as a float expression."""
        return f"(float){_paren(self.expr(e), 98)}"

    def half_of(self, text: str) -> str:
        """The float expression ``text`` rounded to half."""
        return f"__float2half({text})" if self.dialect == "cuda" else f"(half)({text})"

    def call(self, e: Call) -> tuple[str, int]:
        if e.dtype == "float16":
            # Half math through the float32 intrinsics (CUDA's h-prefixed ones cover few).
            widened = Call(e.name, tuple(Cast("float32", a) if a.dtype == "float16" else a
                                         for a in e.args), "float32")
            self.ctype("float16", f"intrinsic {e.name}")
            return self.half_of(_strip(self.call(widened))), 98
        if e.dtype not in ("float32", "float64"):
            raise BuildError(f"gpu codegen: intrinsic {e.name} on {e.dtype} is not supported")
        args = [_strip(self.expr(a)) for a in e.args]
        single = self.dialect == "cuda" and e.dtype == "float32"
        if e.name == "sigmoid":
            one = "1.0f" if e.dtype == "float32" else "1.0"
            exp = "expf" if single else "exp"
            return f"{one} / ({one} + {exp}(-{_paren(self.expr(e.args[0]), 98)}))", 6
        if e.name not in _MATH:
            raise BuildError(f"gpu codegen: unknown intrinsic {e.name!r}")
        name = _MATH[e.name] + ("f" if single else "")
        return f"{name}({', '.join(args)})", 99


def _multiple_of(e: PrimExpr, n: int) -> bool:
    """A proof that the integer ``e`` is a multiple of ``n`` (sums, differences and products
    of constants and multiples)."""
    if isinstance(e, IntImm):
        return e.value % n == 0
    if isinstance(e, Cast):
        return _multiple_of(e.value, n)
    if isinstance(e, BinOp):
        if e.op in ("+", "-"):
            return _multiple_of(e.a, n) and _multiple_of(e.b, n)
        if e.op == "*":
            return _multiple_of(e.a, n) or _multiple_of(e.b, n)
    return False


def _paren(text_prec: tuple[str, int], need: int) -> str:
    text, prec = text_prec
    return f"({text})" if prec < need else text


def _strip(text_prec: tuple[str, int]) -> str:
    return text_prec[0]
