"""LLVM code generation: a lowered PrimFunc -> an llvmlite.ir Module (pure; nothing is compiled).

The generated function has the ABI ``int32_t NAME(T0* noalias, T1* noalias, ...)``: one pointer
per parameter buffer, row-major and contiguous; it returns 0, or the number of the runtime
index check that failed (see :mod:`tensor_ir.codegen.checks`).  Index arithmetic is done in i64.  Compiling the
module (verify, optimise, emit an object, JIT) lives in :mod:`tensor_ir.codegen.compile`.

Loop kinds:
  serial       a plain counted loop.
  unrolled     fully unrolled here when the extent is constant (and the copy budget allows).
  vectorized   the body is emitted once on LLVM vector values of ``lanes`` = the constant extent
               (see :mod:`tensor_ir.codegen.vector`); a non-constant extent is a scalar loop.
  parallel     outlined into a function launched on the parallel runtime (our thread pool,
               :mod:`tensor_ir.codegen.threadpool`, or libgomp's ``GOMP_parallel``); each
               thread claims chunks of the iterations (see :mod:`tensor_ir.codegen.parallel`).
               Parallel loops nested in a parallel region run serially.
  thread_binding  a GPU concept: BuildError.
"""
from __future__ import annotations

import gc
import json
from contextlib import contextmanager
from dataclasses import dataclass, field

import llvmlite.ir as ir

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
    cast,
)
from ..func import PrimFunc
from ..stmt import (
    PARALLEL,
    SERIAL,
    THREAD_BINDING,
    UNROLLED,
    VECTORIZED,
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    TensorIntrinCall,
)
from ..visitor import walk
from . import fastmath, threadpool
from .checks import FAULT_SUFFIX, IndexCheckMixin, check_metadata
from .common import const_shape, flat_index, unrolled_steps
from .parallel import ParallelMixin
from .prefetch import PrefetchMixin, PrefetchScope, plan_prefetch
from .tensor_intrin import TensorIntrinMixin
from .types import (
    FAST_MATH,
    I8,
    I32,
    I64,
    PTR,
    VOID,
    all_ones,
    int_bits,
    int_constant,
    lanes_of,
    like,
    memory_type,
    scalar_type,
    symbol_name,
    type_suffix,
    value_type,
    zero_of,
)
from .vector import VectorMixin

# Name of the global constant holding the module's JSON metadata (entry name, parameters), so
# that an object file or shared library alone is enough to call the kernel again.
META_SYMBOL = "__tensor_ir_module_meta"
# Version 2: the entry returns an int32 status, and the metadata lists the index checks.
META_VERSION = 2

# Allocations up to this size live on the stack (entry-block alloca); larger ones on the heap.
ALLOCA_MAX_BYTES = 64 * 1024
# An unrolled loop is emitted as copies only while the copies stay within this many leaf
# statements; beyond it the loop stays a loop (LLVM may still unroll it partially).
MAX_UNROLL_STEPS = 4096
# Loop annotation: software prefetch distance in bytes for the contiguous vector loads in the
# loop (see prefetch.py), 0 for none (a schedule samples it among its
# alternatives); the largest distance accepted.
PREFETCH_KEY = "pragma_prefetch_bytes"
MAX_PREFETCH_BYTES = 1 << 16
# Loop annotation: copies of a serial loop's body per emitted iteration (1: a plain loop), the
# extent's remainder emitted as straight copies after it.  LLVM unrolls a loop only when it can
# unroll it whole, and a reduction around a register tile is too long for that: on Zen 3 a
# 4x24 tile over a 64-deep reduction in L1 ran at 0.72 of the FMA peak as a loop, 0.80 with 8
# copies.  It is a schedule's decision, not a rule of ours: tiles that use every register
# (7x16 on AVX2) spill with copies and ran 1.3-1.4x slower.  Fewer copies are emitted where
# that many would exceed MAX_UNROLL_STEPS leaf statements.
UNROLL_BY_KEY = "pragma_unroll_by"
MAX_UNROLL_BY = 64

@dataclass(frozen=True)
class CodegenOptions:
    """What the IR generator needs to know about the target.

    ``num_threads`` is the team size of parallel loops (0: the runtime's default, all cores);
    ``triple`` is written into the module (empty: left for the compile step to fill in);
    ``vector_bits`` is the width of the target's vector registers (0: unknown), which a
    vectorized loop wider than one register is cut into (see ``VectorMixin.vector_loop``);
    ``features`` the target's LLVM feature string ("+avx2,+fma"; None: unknown, taken as the
    host's for the host's architecture), which tensor intrinsics are checked against;
    ``index_checks`` whether indices read from data are checked (checks.py).  Without the
    checks such an index outside its buffer reads or writes outside it: an option to measure
    what the checks cost, not to deploy.
    """

    num_threads: int = 0
    triple: str = ""
    vector_bits: int = 0
    features: str | None = None
    index_checks: bool = True


@dataclass
class _Frame:
    """Per-LLVM-function state: the outlined parallel bodies get frames of their own.

    ``memo`` maps a pure instruction (operation, operands) to the value already computed for
    it, so the index arithmetic that unrolled copies and repeated accesses share is emitted
    once (value numbering at generation time: the IR LLVM has to parse and optimise shrinks
    several times for unrolled candidates).  An entry is only valid where the block that
    computed it dominates; code generation is structured, so ``scopes`` mirrors the nesting
    of regions (loop bodies, branches) and the entries a region added are dropped when it
    ends.
    """

    fn: ir.Function
    builder: ir.IRBuilder
    entry: ir.Block
    in_parallel: bool
    memo: dict = field(default_factory=dict)
    scopes: list = field(default_factory=lambda: [[]])
    # The status word of a failed index check (checks.py): an alloca in the entry frame, an
    # argument in a parallel body; None in functions without checks.
    status: ir.Value | None = None
    # Heap buffers live at the point being emitted, freed when a check fails.
    heap: list = field(default_factory=list)


def param_metadata(func: PrimFunc, entry: str, options: CodegenOptions) -> dict:
    """What a caller needs to call the kernel: entry name, per parameter its name, shape,
    dtype and whether the kernel writes it, and the runtime index checks (with the name of
    the global holding a failed check's index)."""
    written = set()
    walk(func.body, lambda n: written.add(n.buffer) if isinstance(n, BufferStore) else None)
    params = []
    for buf in func.params:
        shape = list(const_shape(buf, "LLVM codegen", "parameter"))
        params.append({"name": buf.name, "shape": shape, "dtype": buf.dtype,
                       "written": buf in written})
    meta = {"version": META_VERSION, "entry": entry, "num_threads": options.num_threads,
            "triple": options.triple, "params": params}
    checks = check_metadata(func) if options.index_checks else []
    if checks:
        meta["checks"] = checks
        meta["fault"] = entry + FAULT_SUFFIX
    return meta


def codegen(func: PrimFunc, name: str | None = None,
            options: CodegenOptions | None = None) -> ir.Module:
    """Generate an LLVM module holding ``func`` (lowered) as ``i32 NAME(ptr...)``.

    ``name`` defaults to ``func.name``; the module also holds the metadata constant
    :data:`META_SYMBOL`.  Raises BuildError for constructs the backend does not support.
    """
    if not func.attr("lowered"):
        raise BuildError(f"function {func.name} is not lowered; call tensor_ir.lower.lower "
                         f"first (or use autotune.build)")
    # Generation allocates hundreds of thousands of small llvmlite objects that all live until
    # the module is dropped; the cyclic collector would rescan them again and again (about a
    # third of the generation time), and it finds nothing to free meanwhile.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return CodeGenLLVM(options or CodegenOptions()).emit(func,
                                                             symbol_name(name or func.name))
    finally:
        if enabled:
            gc.enable()


class CodeGenLLVM(VectorMixin, ParallelMixin, PrefetchMixin, TensorIntrinMixin,
                  IndexCheckMixin):
    """Emits one PrimFunc.  Expression values are llvmlite values, vectors inside vector mode.

    Mode state: ``lanes`` is the vector width while emitting a vectorized loop body, ``lane``
    is set while that body is emitted one lane at a time (then vector values of the loop are
    read lane by lane and everything else is scalar), ``varying`` maps variables whose value
    differs across lanes to their stride per lane (None when not affine).
    """

    def __init__(self, options: CodegenOptions):
        self.options = options
        self.module: ir.Module | None = None
        self.frame: _Frame | None = None
        self.vars: dict = {}
        self.buffers: dict = {}
        self.lanes: int | None = None
        self.lane: int | None = None
        self.varying: dict = {}
        # While a side of a lane-varying select is evaluated under a lane mask: the mask
        # (vector of i1); loads then touch only the enabled lanes.
        self.mask: ir.Value | None = None
        # (loop variable, scalar first value) of the vectorized loop being emitted.
        self.lane_base: tuple | None = None
        self.auto_unroll: int | None = None
        # The prefetch scope (prefetch.py) of the innermost enclosing loop annotated with
        # PREFETCH_KEY, or None.
        self.prefetch: PrefetchScope | None = None
        self._nsw = False
        self._decls: dict = {}
        self._steps: dict = {}
        self._n_outlined = 0
        self.entry_name = ""

    # ---------------------------------------------------------------------------------------
    # Function and module
    # ---------------------------------------------------------------------------------------
    def emit(self, func: PrimFunc, entry: str) -> ir.Module:
        if entry in RUNTIME_SYMBOLS:
            raise BuildError(f"function name {entry!r} clashes with a runtime symbol that "
                             f"generated code calls; choose another name")
        self.module = ir.Module(name=entry)
        if self.options.triple:
            self.module.triple = self.options.triple
        self.entry_name = entry
        meta = param_metadata(func, entry, self.options)
        seen = set()
        for buf in func.params:
            if buf in seen:
                raise BuildError(f"function {func.name}: buffer {buf.name} appears twice among "
                                 f"the parameters")
            seen.add(buf)
        fnty = ir.FunctionType(I32, [PTR] * len(func.params))
        fn = ir.Function(self.module, fnty, entry)
        fn.attributes.add("nounwind")
        for arg, buf in zip(fn.args, func.params):
            arg.name = symbol_name(buf.name)
            # The kernel's caller guarantees that no array the kernel writes overlaps another
            # (autotune's Kernel checks it; read-only arrays may share memory, which noalias
            # allows); noalias lets LLVM keep loads in registers across stores.
            arg.add_attribute("noalias")
            self.buffers[buf] = arg
        self._begin_function(fn, in_parallel=False)
        self.begin_checks(func, entry)
        self.stmt(func.body)
        self.builder.ret(ir.Constant(I32, 0))
        self._add_metadata(meta)
        return self.module

    def _begin_function(self, fn: ir.Function, in_parallel: bool) -> None:
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        # The entry block holds only allocas and a branch, so allocas can be added to it at
        # any time (LLVM's mem2reg / SROA promote entry-block allocas only).
        ir.IRBuilder(entry).branch(body)
        self.frame = _Frame(fn, ir.IRBuilder(body), entry, in_parallel)

    @property
    def builder(self) -> ir.IRBuilder:
        return self.frame.builder

    # -- value numbering ---------------------------------------------------------------------
    @contextmanager
    def region(self):
        """Code emitted inside is not known to dominate what follows the region (a loop body,
        one side of a branch): forget the values it memoised when it ends."""
        frame = self.frame
        frame.scopes.append([])
        try:
            yield
        finally:
            memo = frame.memo
            for key in frame.scopes.pop():
                memo.pop(key, None)

    def memoized(self, key: tuple, make, keep: tuple) -> ir.Value:
        """The value of the pure instruction ``key``: a previous one in scope, or ``make()``.
        ``keep`` holds the operands whose ``id`` is part of the key, so that an id cannot be
        reused by a new object while the entry exists."""
        frame = self.frame
        hit = frame.memo.get(key)
        if hit is not None:
            return hit[0]
        value = make()
        frame.memo[key] = (value, keep)
        frame.scopes[-1].append(key)
        return value

    def _add_metadata(self, meta: dict) -> None:
        data = json.dumps(meta, separators=(",", ":")).encode() + b"\0"
        ty = ir.ArrayType(I8, len(data))
        gv = ir.GlobalVariable(self.module, ty, META_SYMBOL)
        gv.global_constant = True
        gv.initializer = ir.Constant(ty, bytearray(data))

    def entry_alloca(self, ty: ir.Type, name: str = "") -> ir.Value:
        b = ir.IRBuilder(self.frame.entry)
        b.position_at_start(self.frame.entry)
        slot = b.alloca(ty, name=name)
        slot.align = 64
        # llvmlite types an alloca as a typed pointer; the rest of the code generator works
        # on opaque pointers (the only kind LLVM has; the printed IR is the same).
        slot.type = PTR
        return slot

    def declare(self, name: str, ret: ir.Type, args: list, var_arg: bool = False):
        fn = self._decls.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args, var_arg=var_arg), name)
            self._decls[name] = fn
        return fn

    # ---------------------------------------------------------------------------------------
    # Statements
    # ---------------------------------------------------------------------------------------
    def stmt(self, s) -> None:
        if self.lanes is not None and self.lane is None:
            self.vector_stmt(s)
            return
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, BufferStore):
            self._store_scalar(s)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, IfThenElse):
            self._if(s, self.expr(s.condition))
        elif isinstance(s, LetStmt):
            with self.bind(s.var, self.expr(s.value)):
                self.stmt(s.body)
        elif isinstance(s, Allocate):
            self._allocate(s)
        elif isinstance(s, Evaluate):
            self.expr(s.value)
        elif isinstance(s, TensorIntrinCall):
            self.tensor_intrin(s)
        elif isinstance(s, (Block, BlockRealize)):
            raise BuildError("codegen: the function still holds blocks; lower it first")
        else:
            raise BuildError(f"codegen: unsupported statement {type(s).__name__}")

    @contextmanager
    def bind(self, var: Var, value: ir.Value):
        if var in self.vars:
            raise BuildError(f"codegen: variable {var.name} is defined twice")
        self.vars[var] = value
        try:
            yield
        finally:
            del self.vars[var]

    def _if(self, s: IfThenElse, cond: ir.Value) -> None:
        b = self.builder
        known = const_int(cond)
        if known is not None:
            # A condition known at generation time (unrolled loop variables make many
            # padding and tail checks constant): emit only the side that runs.
            chosen = s.then_case if known else s.else_case
            if chosen is not None:
                self.stmt(chosen)
            return
        if s.else_case is None:
            with b.if_then(cond), self.region():
                self.stmt(s.then_case)
        else:
            with b.if_else(cond) as (then, otherwise):
                with then, self.region():
                    self.stmt(s.then_case)
                with otherwise, self.region():
                    self.stmt(s.else_case)

    def _store_scalar(self, s: BufferStore) -> None:
        value = self.expr(s.value)
        self.check_access(s.buffer, s.indices)
        ptr = self.element_ptr_at(s.buffer, s.indices)
        self.builder.store(self.to_memory(value, s.buffer.dtype), ptr,
                           align=dt.nbytes(s.buffer.dtype))

    # -- loops --------------------------------------------------------------------------------
    def _for(self, s: For) -> None:
        if s.kind == THREAD_BINDING:
            raise BuildError(f"codegen: loop {s.loop_var.name} is bound to "
                             f"{s.thread_binding or 'a thread axis'}; thread binding is a GPU "
                             f"concept and has no meaning on the LLVM CPU target")
        saved_unroll, saved_prefetch = self.auto_unroll, self.prefetch
        step = s.annotation("pragma_auto_unroll_max_step")
        if step is not None:
            self.auto_unroll = int(step)
        distance = s.annotation(PREFETCH_KEY)
        if distance is not None:
            distance = prefetch_distance(distance, s.loop_var.name)
            # 0 switches prefetching off in the loop, an enclosing annotation's included.
            self.prefetch = (plan_prefetch(s, distance, stored_buffers(s.body))
                             if distance else None)
        try:
            self._for_kind(s)
        finally:
            self.auto_unroll, self.prefetch = saved_unroll, saved_prefetch

    def _for_kind(self, s: For) -> None:
        extent = s.extent.value if isinstance(s.extent, IntImm) else None
        if extent is not None and extent <= 0:
            return
        if extent == 1:
            with self.bind(s.loop_var, self.expr(cast(s.loop_var.dtype, s.min))):
                self.loop_body(s)
            return
        scalar_mode = self.lanes is None and self.lane is None
        if extent is not None and self._should_unroll(s, extent):
            self._unroll(s, extent)
        elif extent is not None and scalar_mode and (copies := self._copies(s, extent)) > 1:
            self._unroll_by(s, extent, copies)
        elif s.kind == VECTORIZED and extent is not None and scalar_mode:
            self.vector_loop(s, extent)
        elif s.kind == PARALLEL and scalar_mode and not self.frame.in_parallel:
            self._parallel(s)
        else:
            begin = self.index_value(s.min, s.loop_var.dtype)
            end = self.index_value(binary("+", s.min, s.extent), s.loop_var.dtype)
            self.emit_loop(s.loop_var, begin, end, lambda: self.loop_body(s))

    def _should_unroll(self, s: For, extent: int) -> bool:
        if s.kind == UNROLLED:
            return extent * self.steps(s.body) <= MAX_UNROLL_STEPS
        if self.auto_unroll is not None and s.kind not in (PARALLEL, VECTORIZED):
            return extent * self.steps(s.body) <= min(self.auto_unroll, MAX_UNROLL_STEPS)
        return False

    def _copies(self, s: For, extent: int) -> int:
        """Copies of ``s``'s body per emitted iteration under UNROLL_BY_KEY (1: none)."""
        if s.kind != SERIAL or not s.annotations:
            return 1
        value = s.annotation(UNROLL_BY_KEY)
        if value is None:
            return 1
        copies = min(unroll_by(value, s.loop_var.name), extent)
        return max(1, min(copies, MAX_UNROLL_STEPS // max(self.steps(s.body), 1)))

    def _unroll_by(self, s: For, extent: int, copies: int) -> None:
        """``s`` as a loop of ``extent // copies`` iterations of ``copies`` bodies each, then
        the ``extent % copies`` left over as straight copies."""
        ty = value_type(s.loop_var.dtype)
        begin = self.index_value(s.min, s.loop_var.dtype)
        trips, left = divmod(extent, copies)
        outer = Var(f"{s.loop_var.name}.by{copies}", s.loop_var.dtype)

        def body() -> None:
            start = self.int_op("+", begin, self.int_op(
                "*", self.var_value(outer), ir.Constant(ty, copies), nsw=True), nsw=True)
            for k in range(copies):
                with self.bind(s.loop_var, self.int_op("+", start, ir.Constant(ty, k),
                                                       nsw=True)):
                    self.loop_body(s)

        if trips == 1:
            with self.bind(outer, ir.Constant(ty, 0)):
                body()
        else:
            self.emit_loop(outer, ir.Constant(ty, 0), ir.Constant(ty, trips), body)
        for k in range(left):
            value = self.int_op("+", begin, ir.Constant(ty, trips * copies + k), nsw=True)
            with self.bind(s.loop_var, value):
                self.loop_body(s)

    def steps(self, s) -> int:
        """Leaf statements executed by ``s`` when every constant loop in it is unrolled
        (a huge number when a loop has a non-constant extent)."""
        return unrolled_steps(s, self._steps)

    def _unroll(self, s: For, extent: int) -> None:
        begin = self.index_value(s.min, s.loop_var.dtype)
        ty = value_type(s.loop_var.dtype)
        for k in range(extent):
            value = self.int_op("+", begin, ir.Constant(ty, k), nsw=True)
            with self.bind(s.loop_var, value):
                self.loop_body(s)

    def loop_body(self, s: For) -> None:
        """One iteration of the serial loop ``s`` (its variable bound): the prefetches
        hoisted to it, if ``s`` is the annotated loop of the scope in force, then its body."""
        if self.prefetch is not None:
            self.prefetch_hoisted(s)
        self.stmt(s.body)

    def emit_loop(self, var: Var, begin: ir.Value, end: ir.Value, body) -> None:
        """A counted loop ``for var in [begin, end)`` whose body is emitted by ``body()``."""
        b = self.builder
        fn = self.frame.fn
        pre = b.block
        header = fn.append_basic_block(f"{var.name}.head")
        loop = fn.append_basic_block(f"{var.name}.body")
        done = fn.append_basic_block(f"{var.name}.done")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(begin.type, name=var.name)
        iv.add_incoming(begin, pre)
        b.cbranch(b.icmp_signed("<", iv, end), loop, done)
        b.position_at_end(loop)
        with self.bind(var, iv), self.region():
            body()
            nxt = b.add(iv, ir.Constant(begin.type, 1), flags=["nsw"])
        iv.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(done)

    # -- allocation ---------------------------------------------------------------------------
    def _allocate(self, s: Allocate) -> None:
        buf = s.buffer
        elem = memory_type(buf.dtype)
        const = all(isinstance(x, IntImm) for x in buf.shape)
        if const and buf.nbytes <= ALLOCA_MAX_BYTES:
            ptr = self.entry_alloca(ir.ArrayType(elem, max(buf.size, 1)),
                                    name=symbol_name(buf.name))
            self._with_buffer(buf, ptr, s.body)
            return
        # Heap: 64-byte aligned, size rounded up to the alignment as aligned_alloc requires.
        b = self.builder
        n = ir.Constant(I64, 1)
        for x in buf.shape:
            n = b.mul(n, self.index_value(x, "int64"))
        nbytes = b.mul(n, ir.Constant(I64, dt.nbytes(buf.dtype)))
        nbytes = b.and_(b.add(nbytes, ir.Constant(I64, 64)), ir.Constant(I64, -64))
        alloc = self.declare("aligned_alloc", PTR, [I64, I64])
        ptr = b.call(alloc, [ir.Constant(I64, 64), nbytes], name=symbol_name(buf.name))
        self.frame.heap.append(ptr)
        self._with_buffer(buf, ptr, s.body)
        self.frame.heap.pop()
        self.builder.call(self.declare("free", VOID, [PTR]), [ptr])

    def _with_buffer(self, buf: Buffer, ptr: ir.Value, body) -> None:
        if buf in self.buffers:
            raise BuildError(f"codegen: buffer {buf.name} is allocated twice")
        self.buffers[buf] = ptr
        try:
            self.stmt(body)
        finally:
            del self.buffers[buf]

    # ---------------------------------------------------------------------------------------
    # Addresses
    # ---------------------------------------------------------------------------------------
    def flat_index(self, buf: Buffer, indices: tuple) -> PrimExpr:
        """Row-major element offset of ``buf[indices]`` as an int64 expression."""
        return flat_index(buf, indices, "codegen")

    def element_ptr(self, buf: Buffer, flat: PrimExpr) -> ir.Value:
        return self.gep(buf, self.index_value(flat, "int64"))

    def element_ptr_at(self, buf: Buffer, indices: tuple) -> ir.Value:
        """Address of ``buf[indices]`` in scalar (or one-lane) mode.  Same arithmetic as
        :meth:`flat_index`, but combined on LLVM values, so no expression tree is built and
        the partial products are shared between accesses through the memo."""
        if len(indices) != len(buf.shape):
            raise BuildError(f"codegen: buffer {buf.name} of rank {len(buf.shape)} accessed "
                             f"with {len(indices)} indices")
        flat = None
        for idx, ext in zip(indices, buf.shape):
            i = self.index_value(idx, "int64")
            if flat is None:
                flat = i
            else:
                scaled = self.int_op("*", flat, self.index_value(ext, "int64"), nsw=True)
                flat = self.int_op("+", scaled, i, nsw=True)
        return self.gep(buf, flat if flat is not None else ir.Constant(I64, 0))

    def gep(self, buf: Buffer, offset: ir.Value) -> ir.Value:
        """``&buf[offset]`` (offset: a scalar i64 element offset), shared while in scope."""
        base = self.buffers.get(buf)
        if base is None:
            raise BuildError(f"codegen: buffer {buf.name} is neither a parameter nor allocated "
                             f"in scope")
        elem = memory_type(buf.dtype)
        return self.memoized(
            ("gep", id(base), buf.dtype, value_key(offset)),
            lambda: self.builder.gep(base, [offset], inbounds=True, source_etype=elem),
            (base, offset))

    def index_value(self, e: PrimExpr, dtype: str) -> ir.Value:
        """Evaluate an index expression; its arithmetic is marked as not overflowing."""
        saved, self._nsw = self._nsw, True
        try:
            return self.expr(cast(dtype, e))
        finally:
            self._nsw = saved

    def to_memory(self, value: ir.Value, dtype: str) -> ir.Value:
        if dtype == "bool":
            return self.builder.zext(value, like(value, I8))
        return value

    def from_memory(self, value: ir.Value, dtype: str) -> ir.Value:
        if dtype == "bool":
            return self.builder.icmp_unsigned("!=", value, zero_of(value.type))
        return value

    # ---------------------------------------------------------------------------------------
    # Expressions
    # ---------------------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> ir.Value:
        if isinstance(e, IntImm):
            return int_constant(value_type(e.dtype), e.value)
        if isinstance(e, FloatImm):
            return ir.Constant(value_type(e.dtype), e.value)
        if isinstance(e, Var):
            return self.var_value(e)
        if isinstance(e, BinOp):
            a, b = self.match(self.expr(e.a), self.expr(e.b))
            return self.arith(e.op, a, b, e.a.dtype)
        if isinstance(e, Cmp):
            a, b = self.match(self.expr(e.a), self.expr(e.b))
            return self.compare(e.op, a, b, e.a.dtype)
        if isinstance(e, (And, Or)):
            a, b = self.match(self.expr(e.a), self.expr(e.b))
            return self.int_op("and" if isinstance(e, And) else "or", a, b)
        if isinstance(e, Not):
            a = self.expr(e.a)
            return self.int_op("xor", a, all_ones(a.type))
        if isinstance(e, Select):
            return self.select(e)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, Call):
            return self.intrinsic(e)
        if isinstance(e, BufferLoad):
            return self.load(e)
        raise BuildError(f"codegen: unsupported expression {type(e).__name__}")

    def var_value(self, v: Var) -> ir.Value:
        value = self.vars.get(v)
        if value is None:
            raise BuildError(f"codegen: variable {v.name} is used but not defined")
        if self.lane is not None and isinstance(value.type, ir.VectorType):
            if self.lane_base is not None and self.lane_base[0] is v:
                base = self.lane_base[1]
                return self.int_op("+", base, ir.Constant(base.type, self.lane), nsw=True)
            return self.extract(value, self.lane)
        return value

    def extract(self, vec: ir.Value, lane: int) -> ir.Value:
        """Lane ``lane`` of ``vec`` (a constant vector's lane is folded)."""
        if isinstance(vec, ir.Constant) and isinstance(vec.constant, list):
            c = vec.constant[lane]
            return c if isinstance(c, ir.Constant) else ir.Constant(vec.type.element, c)
        return self.memoized(
            ("extract", id(vec), lane),
            lambda: self.builder.extract_element(vec, ir.Constant(I32, lane)), (vec,))

    def load(self, e: BufferLoad) -> ir.Value:
        if self.lanes is not None and self.lane is None:
            return self.vector_load(e)
        self.check_access(e.buffer, e.indices)
        ptr = self.element_ptr_at(e.buffer, e.indices)
        value = self.builder.load(ptr, typ=memory_type(e.buffer.dtype),
                                  align=dt.nbytes(e.buffer.dtype))
        return self.from_memory(value, e.buffer.dtype)

    def arith(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        bld = self.builder
        if dt.is_float(dtype):
            if op == "+":
                return bld.fadd(a, b, flags=FAST_MATH)
            if op == "-":
                return bld.fsub(a, b, flags=FAST_MATH)
            if op == "*":
                return bld.fmul(a, b, flags=FAST_MATH)
            if op == "/":
                return bld.fdiv(a, b)
            if op == "//":
                return self.call_intrinsic("llvm.floor", [bld.fdiv(a, b)])
            if op == "%":
                # Python / numpy floor modulo: the result takes the divisor's sign.
                q = self.call_intrinsic("llvm.floor", [bld.fdiv(a, b)])
                return bld.fsub(a, bld.fmul(q, b))
            if op in ("min", "max"):
                # numpy's minimum / maximum: a NaN on either side is the answer.  The ordered
                # compare picks b when b is NaN; the unordered self-compare catches a NaN a.
                # Both are lane-wise selects, so vector code stays vector (minps/maxps plus a
                # blend on x86).
                pick = bld.select(bld.fcmp_ordered("<" if op == "min" else ">", a, b), a, b)
                return bld.select(bld.fcmp_unordered("uno", a, a), a, pick)
        elif dtype == "bool":
            if op == "min":
                return bld.and_(a, b)
            if op == "max":
                return bld.or_(a, b)
        elif op in _INT_OPS:
            unsigned = dt.is_unsigned(dtype)
            return self.int_op(op, a, b, unsigned=unsigned, nsw=self._nsw and not unsigned)
        raise BuildError(f"codegen: operator {op!r} is not supported on {dtype}")

    def int_op(self, op: str, a: ir.Value, b: ir.Value, unsigned: bool = False,
               nsw: bool = False) -> ir.Value:
        """Integer ``a op b`` (op: + - * // % min max and or xor; // and % floor for signed
        types): folded when both operands are constants or one is an identity, otherwise
        emitted once per scope (see :class:`_Frame`)."""
        ca, cb = const_int(a), const_int(b)
        if ca is not None and cb is not None:
            folded = fold_int(op, ca, cb, int_bits(a), unsigned)
            if folded is not None:
                return int_constant(a.type, folded)
        elif isinstance(a, ir.Constant) and isinstance(b, ir.Constant) and lanes_of(a):
            va, vb = const_int_vector(a), const_int_vector(b)
            if va is not None and vb is not None:
                width = int_bits(a)
                lanes = [fold_int(op, x, y, width, unsigned) for x, y in zip(va, vb)]
                if None not in lanes:
                    return ir.Constant(a.type, [int_constant(a.type.element, x)
                                                for x in lanes])
        if op == "+" or op == "or" or op == "xor":
            if cb == 0:
                return a
            if ca == 0:
                return b
        elif op == "-":
            if cb == 0:
                return a
        elif op == "*":
            if cb == 1:
                return a
            if ca == 1:
                return b
            if ca == 0 or cb == 0:
                return zero_of(a.type)
        elif op == "//":
            if cb == 1:
                return a
        elif op == "%":
            if cb == 1:
                return zero_of(a.type)
        elif op == "and":
            if ca == 0 or cb == 0:
                return zero_of(a.type)
            mask = (1 << int_bits(a)) - 1
            if ca is not None and ca & mask == mask:
                return b
            if cb is not None and cb & mask == mask:
                return a
        return self.memoized((op, unsigned, nsw, value_key(a), value_key(b)),
                             lambda: self._emit_int_op(op, a, b, unsigned, nsw), (a, b))

    def _emit_int_op(self, op: str, a: ir.Value, b: ir.Value, unsigned: bool,
                     nsw: bool) -> ir.Value:
        bld = self.builder
        flags = ["nsw"] if nsw else []
        if op == "+":
            return bld.add(a, b, flags=flags)
        if op == "-":
            return bld.sub(a, b, flags=flags)
        if op == "*":
            return bld.mul(a, b, flags=flags)
        if op in ("//", "%"):
            return self._divide(op, a, b, unsigned)
        if op in ("min", "max"):
            cmp = bld.icmp_unsigned if unsigned else bld.icmp_signed
            return bld.select(cmp("<" if op == "min" else ">", a, b), a, b)
        if op == "and":
            return bld.and_(a, b)
        if op == "or":
            return bld.or_(a, b)
        if op == "xor":
            return bld.xor(a, b)
        raise BuildError(f"codegen: integer operator {op!r} is not supported")

    def _divide(self, op: str, a: ir.Value, b: ir.Value, unsigned: bool) -> ir.Value:
        """Integer ``a // b`` or ``a % b`` with numpy's answers where the hardware traps:
        ``x // 0 == x % 0 == 0`` and ``INT_MIN // -1 == INT_MIN`` (wrapping).

        A constant divisor other than 0 (and -1 for signed types) is divided by directly --
        the common case, which LLVM turns into multiplications.  Any other divisor is replaced
        by 1 where it would trap (a select, no branch), and the answer is fixed up after.
        """
        bld = self.builder
        divisors = _const_lanes(b)
        bad = (0,) if unsigned else (0, -1)
        if divisors is not None and not any(_signed(d, int_bits(b)) in bad for d in divisors):
            if unsigned:
                return bld.udiv(a, b) if op == "//" else bld.urem(a, b)
            return self._floordiv(a, b) if op == "//" else self._floormod(a, b)
        zero, one = zero_of(b.type), _splat(b.type, 1)
        is_zero = bld.icmp_unsigned("==", b, zero)
        trap = is_zero
        if not unsigned:
            is_minus_one = bld.icmp_signed("==", b, _splat(b.type, -1))
            trap = bld.or_(is_zero, is_minus_one)
        safe = bld.select(trap, one, b)
        if op == "%":
            # x % 1 == 0: the answer for a zero divisor, and the true one for -1.
            return bld.urem(a, safe) if unsigned else self._floormod(a, safe)
        if unsigned:
            return bld.select(is_zero, zero, bld.udiv(a, safe))
        # x // -1 == -x, wrapping: INT_MIN stays INT_MIN as in numpy.
        quotient = bld.select(is_minus_one, bld.sub(zero_of(a.type), a),
                              self._floordiv(a, safe))
        return bld.select(is_zero, zero, quotient)

    def _floor_adjust(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(remainder, needs adjust): C truncating division rounds toward zero; floor
        division differs exactly when the remainder is nonzero and its sign differs from
        the divisor's."""
        bld = self.builder
        rem = bld.srem(a, b)
        zero = zero_of(a.type)
        nonzero = bld.icmp_signed("!=", rem, zero)
        signs = bld.xor(bld.icmp_signed("<", rem, zero), bld.icmp_signed("<", b, zero))
        return rem, bld.and_(nonzero, signs)

    def _floordiv(self, a: ir.Value, b: ir.Value) -> ir.Value:
        bld = self.builder
        q = bld.sdiv(a, b)
        _, adjust = self._floor_adjust(a, b)
        return bld.sub(q, bld.zext(adjust, a.type))

    def _floormod(self, a: ir.Value, b: ir.Value) -> ir.Value:
        bld = self.builder
        rem, adjust = self._floor_adjust(a, b)
        return bld.select(adjust, bld.add(rem, b), rem)

    def compare(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        if dt.is_float(dtype):
            # != is true when either side is NaN (unordered), the others are false then.
            if op == "!=":
                return self.builder.fcmp_unordered(op, a, b)
            return self.builder.fcmp_ordered(op, a, b)
        unsigned = dt.is_unsigned(dtype)
        ca, cb = const_int(a), const_int(b)
        if ca is not None and cb is not None:
            width = int_bits(a)
            if unsigned:
                ca, cb = ca & ((1 << width) - 1), cb & ((1 << width) - 1)
            return ir.Constant(like(a, ir.IntType(1)), int(_COMPARE[op](ca, cb)))
        icmp = self.builder.icmp_unsigned if unsigned else self.builder.icmp_signed
        return self.memoized(("icmp", op, unsigned, value_key(a), value_key(b)),
                             lambda: icmp(op, a, b), (a, b))

    def select(self, e: Select) -> ir.Value:
        cond = self.expr(e.condition)
        known = const_int(cond)
        if known is not None:
            # Only the chosen side is evaluated, exactly what the lazy semantics ask for.
            return self.expr(e.true_value if known else e.false_value)
        lazy = has_load(e.true_value) or has_load(e.false_value)
        if isinstance(cond.type, ir.VectorType):
            return self.vector_select(e, cond, lazy)
        if not lazy:
            t, f = self.match(self.expr(e.true_value), self.expr(e.false_value))
            return self.builder.select(cond, t, f)
        # Lazy: a branch may load out of bounds when not chosen, so only the chosen one runs.
        bld = self.builder
        fn = self.frame.fn
        then_bb = fn.append_basic_block("sel.then")
        else_bb = fn.append_basic_block("sel.else")
        merge = fn.append_basic_block("sel.merge")
        bld.cbranch(cond, then_bb, else_bb)
        # Each side is a region of its own: what it computes dominates neither the other side
        # nor the merge.
        bld.position_at_end(then_bb)
        with self.region():
            t = self.expr(e.true_value)
        t_end = bld.block
        bld.position_at_end(else_bb)
        with self.region():
            f = self.expr(e.false_value)
        f_end = bld.block
        lanes = lanes_of(t) or lanes_of(f)
        if lanes:
            # One side is a vector, the other uniform: broadcast it in its own block (not
            # memoised: the result is only valid in that block).
            bld.position_at_end(t_end)
            t = emit_broadcast(bld, t, lanes)
            bld.position_at_end(f_end)
            f = emit_broadcast(bld, f, lanes)
        bld.position_at_end(t_end)
        bld.branch(merge)
        bld.position_at_end(f_end)
        bld.branch(merge)
        bld.position_at_end(merge)
        phi = bld.phi(t.type)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return phi

    def cast(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        """C conversions: float -> int truncates toward zero, x -> bool is x != 0."""
        bld = self.builder
        if src == dst:
            return v
        to = like(v, value_type(dst))
        if dst == "bool":
            if dt.is_float(src):
                return bld.fcmp_unordered("!=", v, zero_of(v.type))
            return bld.icmp_unsigned("!=", v, zero_of(v.type))
        if dt.is_float(dst):
            if dt.is_float(src):
                grow = dt.bits(dst) > dt.bits(src)
                return bld.fpext(v, to) if grow else bld.fptrunc(v, to)
            return bld.uitofp(v, to) if dt.is_unsigned(src) else bld.sitofp(v, to)
        if dt.is_float(src):
            if dt.bits(dst) < 64:
                # Through i64 and then truncate: out-of-range values wrap as numpy's casts do
                # instead of becoming poison.
                wide = bld.fptosi(v, like(v, I64))
                return bld.trunc(wide, to)
            return bld.fptosi(v, to)
        src_bits, dst_bits = int_bits(v), dt.bits(dst)
        if dst_bits == src_bits:
            return v
        c = const_int(v)
        if c is not None:
            if dst_bits > src_bits:
                c = c & ((1 << src_bits) - 1) if dt.is_unsigned(src) else _signed(c, src_bits)
            return int_constant(to, c)
        if dst_bits < src_bits:
            convert = bld.trunc
        else:
            convert = bld.zext if dt.is_unsigned(src) else bld.sext
        return self.memoized(("cast", src, dst, id(v)), lambda: convert(v, to), (v,))

    # -- intrinsics ---------------------------------------------------------------------------
    def intrinsic(self, e: Call) -> ir.Value:
        args = [self.expr(a) for a in e.args]
        if len(args) == 2:
            args = list(self.match(*args))
        dtype = e.dtype
        if not dt.is_float(dtype):
            raise BuildError(f"codegen: intrinsic {e.name} on {dtype} is not supported")
        if dtype == "float16":
            # No libm half functions: compute in float32 and round once at the end.
            wide = [self.builder.fpext(a, like(a, ir.FloatType())) for a in args]
            out = self._float_intrinsic(e.name, wide)
            return self.builder.fptrunc(out, like(out, ir.HalfType()))
        return self._float_intrinsic(e.name, args)

    def _float_intrinsic(self, name: str, args: list) -> ir.Value:
        bld = self.builder
        x = args[0]
        one = ir.Constant(scalar_type(x.type), 1.0)
        one = self.broadcast(one, lanes_of(x)) if lanes_of(x) else one
        if name in fastmath.FAST_FLOAT32 and isinstance(scalar_type(x.type), ir.FloatType):
            return fastmath.emit(self, name, x)  # vectorises (libm would go lane by lane)
        if name in LLVM_INTRINSICS:
            return self.call_intrinsic(LLVM_INTRINSICS[name], args)
        if name == "rsqrt":
            return bld.fdiv(one, self.call_intrinsic("llvm.sqrt", [x]))
        if name == "sigmoid":
            neg = bld.fneg(x)
            return bld.fdiv(one, bld.fadd(one, self._float_intrinsic("exp", [neg])))
        if name in LIBM_FUNCTIONS:
            return self.call_libm(LIBM_FUNCTIONS[name], args)
        raise BuildError(f"codegen: unknown intrinsic {name!r}")

    def call_intrinsic(self, base: str, args: list) -> ir.Value:
        ty = args[0].type
        fn = self.declare(f"{base}.{type_suffix(ty)}", ty, [a.type for a in args])
        return self.builder.call(fn, args)

    def call_libm(self, names: tuple, args: list) -> ir.Value:
        """Call the C library function (``erff`` / ``erf``), lane by lane for vectors."""
        lanes = lanes_of(args[0])
        scalar = scalar_type(args[0].type)
        fname = names[0] if isinstance(scalar, ir.FloatType) else names[1]
        fn = self.declare(fname, scalar, [scalar] * len(args))
        if not lanes:
            return self.builder.call(fn, args)
        out = ir.Constant(args[0].type, ir.Undefined)
        for k in range(lanes):
            idx = ir.Constant(I32, k)
            lane_args = [self.extract(a, k) for a in args]
            out = self.builder.insert_element(out, self.builder.call(fn, lane_args), idx)
        return out

    # -- vector helpers shared with scalar code -----------------------------------------------
    def match(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Broadcast a uniform operand to the other's vector width."""
        la, lb = lanes_of(a), lanes_of(b)
        if la == lb:
            return a, b
        return (self.broadcast(a, lb), b) if lb else (a, self.broadcast(b, la))

    def broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        if isinstance(v.type, ir.VectorType) or isinstance(v, ir.Constant):
            return emit_broadcast(self.builder, v, lanes)
        return self.memoized(("broadcast", id(v), lanes),
                             lambda: emit_broadcast(self.builder, v, lanes), (v,))


def emit_broadcast(bld: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """``v`` splatted to ``lanes`` lanes (a vector is returned as it is)."""
    if isinstance(v.type, ir.VectorType):
        return v
    vec_ty = ir.VectorType(v.type, lanes)
    if isinstance(v, ir.Constant):
        return ir.Constant(vec_ty, [v] * lanes)
    one = bld.insert_element(ir.Constant(vec_ty, ir.Undefined), v, ir.Constant(I32, 0))
    mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
    return bld.shuffle_vector(one, ir.Constant(vec_ty, ir.Undefined), mask)


# -- generation-time folding and value numbering ----------------------------------------------
_INT_OPS = frozenset({"+", "-", "*", "//", "%", "min", "max"})
_COMPARE = {"==": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y,
            "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}


def prefetch_distance(value, loop: str) -> int:
    """The PREFETCH_KEY annotation's byte distance, checked: a whole number of bytes from 0
    (no prefetch) to MAX_PREFETCH_BYTES."""
    if isinstance(value, IntImm):
        value = value.value
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 0 <= value <= MAX_PREFETCH_BYTES:
        raise BuildError(f"codegen: loop {loop} has {PREFETCH_KEY}={value!r}; it must be a "
                         f"whole number of bytes from 0 (none) to {MAX_PREFETCH_BYTES}")
    return value


def unroll_by(value, loop: str) -> int:
    """The UNROLL_BY_KEY annotation's copies, checked: a whole number from 1 (a plain loop)
    to MAX_UNROLL_BY."""
    if isinstance(value, IntImm):
        value = value.value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_UNROLL_BY:
        raise BuildError(f"codegen: loop {loop} has {UNROLL_BY_KEY}={value!r}; it must be a "
                         f"whole number of copies from 1 (a plain loop) to {MAX_UNROLL_BY}")
    return value


def stored_buffers(body) -> frozenset:
    """The buffers ``body`` stores to."""
    found = set()

    def visit(n):
        if isinstance(n, BufferStore):
            found.add(n.buffer)

    walk(body, visit)
    return frozenset(found)


def const_int(v: ir.Value) -> int | None:
    """The value of a scalar integer constant (signed spelling), else None."""
    if type(v) is ir.Constant and isinstance(v.type, ir.IntType):
        c = v.constant
        if isinstance(c, (int, bool)):
            return int(c)
    return None


def const_int_vector(v: ir.Constant) -> list[int] | None:
    """The lanes of an integer vector constant, else None."""
    if not isinstance(v.type.element, ir.IntType) or not isinstance(v.constant, list):
        return None
    out = []
    for c in v.constant:
        c = const_int(c) if isinstance(c, ir.Constant) else c
        if not isinstance(c, int):
            return None
        out.append(int(c))
    return out


def value_key(v: ir.Value):
    """Memo-key part for an operand: scalar integer constants by value (equal constants are
    distinct objects), everything else by identity."""
    c = const_int(v)
    return ("const", v.type.width, c) if c is not None else id(v)


def fold_int(op: str, a: int, b: int, width: int, unsigned: bool) -> int | None:
    """``a op b`` on ``width``-bit integers as the emitted instruction would compute it (None
    when it cannot be folded: division by zero)."""
    mask = (1 << width) - 1
    if unsigned:
        a, b = a & mask, b & mask
    else:
        a, b = _signed(a, width), _signed(b, width)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("//", "%"):
        if b == 0:
            return 0  # numpy's integer x // 0 and x % 0, as _divide emits them
        # Python's // and % are floor division and floor modulo: what the emitted sequence
        # computes for signed operands, and plain division for unsigned (non-negative) ones.
        return a // b if op == "//" else a % b
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    if op == "and":
        return a & b
    if op == "or":
        return a | b
    if op == "xor":
        return a ^ b
    return None


def _const_lanes(v: ir.Value) -> list[int] | None:
    """The values of an integer constant, scalar or vector (one per lane), else None."""
    c = const_int(v)
    if c is not None:
        return [c]
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.VectorType):
        return const_int_vector(v)
    return None


def _splat(ty: ir.Type, value: int) -> ir.Constant:
    """The integer constant ``value`` of ``ty``, in every lane when ``ty`` is a vector."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [int_constant(ty.element, value)] * ty.count)
    return int_constant(ty, value)


def _signed(x: int, width: int) -> int:
    x &= (1 << width) - 1
    return x - (1 << width) if width > 1 and x >= 1 << (width - 1) else x


# Intrinsics LLVM knows (lowered to instructions or libm calls by the backend).
LLVM_INTRINSICS = {
    "exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "abs": "llvm.fabs",
    "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven", "pow": "llvm.pow",
    "exp2": "llvm.exp2", "log2": "llvm.log2", "sin": "llvm.sin", "cos": "llvm.cos",
    "tanh": "llvm.tanh",
}
# round is half-to-even, as numpy.round.  erf has no LLVM intrinsic: libm (float, double).
LIBM_FUNCTIONS = {"erf": ("erff", "erf")}
# Symbols generated code may call (or define): a kernel cannot take one of these names.
RUNTIME_SYMBOLS = frozenset({"GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads",
                             "omp_get_max_threads", *threadpool.ENTRY_POINTS,
                             "aligned_alloc", "free", "erff", "erf", META_SYMBOL})


def has_load(e) -> bool:
    found = False

    def visit(n):
        nonlocal found
        if found:
            return False
        if isinstance(n, BufferLoad):
            found = True
            return False
        return None

    walk(e, visit)
    return found
