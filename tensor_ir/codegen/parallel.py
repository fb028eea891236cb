"""Parallel loops for the LLVM backend: outlining, and launching on the parallel runtime.

A ``parallel`` loop becomes two internal functions:

    NAME__parK_body(buffers..., scalars..., begin, end)   the loop over [begin, end), with
                                                         noalias buffer arguments; returns
                                                         0 or a failed index check's number
    NAME__parK(data, team, tid)                           unpacks the captured values, then
                                                         claims chunks of the iterations as
                                                         thread tid of team and calls the
                                                         body on each

(a function with runtime index checks also passes the body its status word, and a thread
stops claiming chunks once a body reports a failed check: see checks.py), and the loop
itself becomes a launch of the trampoline on a team of threads, the caller
included, which returns when all are done.  Allocations inside the loop land in the body
function's entry block, so each thread has its own.  Two runtimes launch it (``set_runtime``):

* ``"pool"`` (default): ``tir_parallel_launch(NAME__parK, &data, team)``, our own thread pool
  (tensor_ir/codegen/threadpool.py).  The caller runs tid 0 and waits only for the workers
  that joined the launch, so a worker that is asleep or late never holds a kernel up.
* ``"gomp"``: ``GOMP_parallel(NAME__parK_gomp, &data, num_threads, 0)``, libgomp, whose
  wrapper passes ``omp_get_num_threads()`` and ``omp_get_thread_num()`` on; kept to measure
  the two side by side.

Each thread of the team owns one contiguous segment of the iterations (the iterations split
evenly, thread t taking the t-th segment) and claims that segment's chunks, CHUNKS_PER_THREAD
of them, from a counter of its own; when its segment is done it claims what is left of the
others'.  So:

* with threads of equal speed each runs exactly its even share: no thread waits at the end
  for a remainder chunk.  One counter for all threads with chunks of ceil(extent / 8) cut
  e.g. 42 iterations into 7 chunks, 4 for one thread and 3 for the other: that kernel took
  24/21 of its even time;
* a team thread may start late (it waits for a core, or wakes from sleep); the threads that
  run then take its chunks, and the late one finds nothing left (with fixed shares every
  launch waited for it, and a model of ~50 kernels ran slower on two threads than on one);
* a thread claims from a cache line only it writes, until it steals: no claim moves a line
  between cores, and consecutive kernels give thread t the same part of their loops.

The body is kept out of line (``noinline``) so that LLVM optimises the loop nest once, with
noalias arguments, instead of once more after inlining it into the trampoline.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import llvmlite.ir as ir

from ..errors import BuildError
from ..expr import BufferLoad, Var
from ..stmt import Allocate, BufferStore, For, LetStmt
from ..visitor import walk
from . import threadpool
from .types import I1, I8, I32, I64, PTR, VOID, symbol_name, value_type

# Chunks per segment (per team thread): enough for the running threads to absorb the share
# of a late one, few enough that claiming (one atomic add per chunk) and splitting the loop
# cost nothing next to the iterations' work.
CHUNKS_PER_THREAD = 4
# Threads that own a segment of a parallel loop's chunks, each with its claim counter on a
# cache line of its own (COUNTER_STRIDE bytes); a larger team's further threads only take
# chunks left in the owners' segments.
MAX_OWNERS = 64
COUNTER_STRIDE = 64

# The runtimes a parallel loop can be launched on (see the module text); the first is the
# default.
RUNTIMES = ("pool", "gomp")
_runtime = RUNTIMES[0]
_runtime_lock = threading.Lock()


def set_runtime(name: str) -> str:
    """Make ``name`` ("pool" or "gomp") the runtime the parallel loops generated from now on
    launch on, in this process; returns the previous one.  Compiled kernels keep theirs (and
    the model builder caches compiled kernels: ``autotune.graph.build.clear_caches()`` before
    building a model again with the other runtime)."""
    global _runtime
    if name not in RUNTIMES:
        raise BuildError(f"unknown parallel runtime {name!r}; expected one of {RUNTIMES}")
    with _runtime_lock:
        previous, _runtime = _runtime, name
    return previous


def runtime() -> str:
    """The runtime generated parallel loops launch on (see set_runtime)."""
    return _runtime


@contextlib.contextmanager
def using_runtime(name: str) -> Iterator[str]:
    """``set_runtime(name)`` for the duration of the block; the previous one afterwards."""
    previous = set_runtime(name)
    try:
        yield name
    finally:
        set_runtime(previous)


class ParallelMixin:
    """Parallel-loop emission for CodeGenLLVM."""

    def _parallel(self, s: For) -> None:
        """Outline the loop into ``body(buffers..., scalars..., begin, end)`` (noalias buffer
        arguments keep the body as optimisable as the entry function) and a trampoline
        ``tramp(data, team, tid)`` that unpacks the captures and calls the body on the chunks
        this thread claims (its own segment's, then what is left of the others'); launch the
        trampoline on a team with the selected runtime (see the module text)."""
        use_gomp = runtime() == "gomp"
        b = self.builder
        var_caps, buf_caps = self._captures(s)
        self._n_outlined += 1
        stem = f"{self.entry_name}__par{self._n_outlined}"
        loop_ty = value_type(s.loop_var.dtype)
        scalar_vals = [self.expr(v) for v in var_caps]
        buf_vals = [self.buffers[buf] for buf in buf_caps]
        # The status word of the index checks travels as one more pointer capture.
        status = self.frame.status
        if status is not None:
            scalar_vals.append(status)
        begin = self.index_value(s.min, s.loop_var.dtype)
        extent = self.index_value(s.extent, s.loop_var.dtype)

        # 1. The body function: a serial loop over [begin, end).
        arg_types = [PTR] * len(buf_caps) + [v.type for v in scalar_vals] + [loop_ty, loop_ty]
        body_fn = ir.Function(self.module, ir.FunctionType(I32, arg_types), stem + "_body")
        body_fn.linkage = "internal"
        body_fn.attributes.add("nounwind")
        body_fn.attributes.add("noinline")
        saved = (self.frame, self.vars, self.buffers)
        self.vars, self.buffers = {}, {}
        self._begin_function(body_fn, in_parallel=True)
        args = list(body_fn.args)
        for arg, buf in zip(args, buf_caps):
            arg.add_attribute("noalias")
            arg.name = symbol_name(buf.name)
            self.buffers[buf] = arg
        for arg, var in zip(args[len(buf_caps):], var_caps):
            arg.name = symbol_name(var.name)
            self.vars[var] = arg
        if status is not None:
            args[-3].name = "status"
            self.frame.status = args[-3]
        args[-2].name, args[-1].name = "begin", "end"
        self.emit_loop(s.loop_var, args[-2], args[-1], lambda: self.loop_body(s))
        self.builder.ret(ir.Constant(I32, 0))

        # 2. The trampoline: unpack, then claim chunks and run the body on each.
        #    data = {a counter per owner thread (one cache line each), captures..., begin,
        #    extent}.  The chunks are cut into one contiguous segment per owner; a thread
        #    claims the chunks of its own segment from its own counter, then takes what is
        #    left in the others' segments (see the module text).
        fields = ([ir.ArrayType(ir.ArrayType(I64, COUNTER_STRIDE // 8), MAX_OWNERS)]
                  + [PTR] * len(buf_caps) + [v.type for v in scalar_vals] + [loop_ty, loop_ty])
        struct_ty = ir.LiteralStructType(fields)
        tramp = ir.Function(self.module, ir.FunctionType(VOID, [PTR, I32, I32]), stem)
        tramp.linkage = "internal"
        tramp.attributes.add("nounwind")
        blocks = {name: tramp.append_basic_block(name)
                  for name in ("entry", "segment", "claim", "run", "next", "done")}
        tb = ir.IRBuilder(blocks["entry"])
        data, team_arg, tid_arg = tramp.args
        data.name, team_arg.name, tid_arg.name = "data", "team", "tid"
        zero32 = ir.Constant(I32, 0)

        def field(i):
            return tb.gep(data, [zero32, ir.Constant(I32, i)], source_etype=struct_ty)

        loaded = [tb.load(field(i), typ=t) for i, t in enumerate(fields) if i > 0]
        # The chunk arithmetic is done in 64 bits (u * extent must not overflow an int32
        # loop variable's type); the body takes its bounds in the loop variable's type.
        lo, ext = loaded[-2], loaded[-1]
        if loop_ty != I64:
            ext = tb.sext(ext, I64)
        one = ir.Constant(I64, 1)
        zero = ir.Constant(I64, 0)

        def smin(a, b_):
            return tb.select(tb.icmp_signed("<", a, b_), a, b_)

        team = tb.sext(team_arg, I64)
        tid = tb.sext(tid_arg, I64)
        owners = smin(team, ir.Constant(I64, MAX_OWNERS))
        # The first owner to serve: this thread's own segment (a thread beyond MAX_OWNERS
        # owns none and starts with segment 0).
        home = tb.select(tb.icmp_signed("<", tid, owners), tid, zero)
        tb.branch(blocks["segment"])

        # segment: serve owner u = (home + k) % owners, its chunks [seg_lo, seg_hi).
        tb.position_at_end(blocks["segment"])
        k = tb.phi(I64)
        k.add_incoming(zero, blocks["entry"])
        u = tb.add(home, k)
        u = tb.select(tb.icmp_signed("<", u, owners), u, tb.sub(u, owners))
        # The owners share the iterations evenly (segment u: [seg_lo, seg_hi)); a segment
        # is claimed in CHUNKS_PER_THREAD chunks of ceil(length / CHUNKS_PER_THREAD).
        seg_lo = tb.sdiv(tb.mul(u, ext), owners)
        seg_hi = tb.sdiv(tb.mul(tb.add(u, one), ext), owners)
        seg_len = tb.sub(seg_hi, seg_lo)
        per = ir.Constant(I64, CHUNKS_PER_THREAD)
        chunk = tb.sdiv(tb.sub(tb.add(seg_len, per), one), per)
        chunk = tb.select(tb.icmp_signed("<", chunk, one), one, chunk)
        seg_n = tb.sdiv(tb.sub(tb.add(seg_len, chunk), one), chunk)
        counter = tb.gep(data, [zero32, zero32, u, zero32], source_etype=struct_ty)
        tb.branch(blocks["claim"])

        # claim: the next unclaimed chunk of segment u, if any.  Monotonic suffices: the
        # counter only hands out distinct chunk numbers; the captured values were published
        # before the launch by the runtime itself.
        tb.position_at_end(blocks["claim"])
        if status is not None:
            # Another thread's chunk failed a check: the kernel's result is an error, so
            # nothing left is worth running.
            failed = tb.load_atomic(loaded[len(buf_caps) + len(scalar_vals) - 1],
                                    "monotonic", 4, typ=I32)
            go = tramp.append_basic_block("claim.go")
            tb.cbranch(tb.icmp_unsigned("!=", failed, zero32), blocks["done"], go)
            tb.position_at_end(go)
        index = tb.atomic_rmw("add", counter, ir.Constant(I64, 1), "monotonic")
        tb.cbranch(tb.icmp_signed("<", index, seg_n), blocks["run"], blocks["next"])

        tb.position_at_end(blocks["run"])
        first = tb.add(seg_lo, tb.mul(index, chunk))
        last = smin(tb.add(first, chunk), seg_hi)
        if loop_ty != I64:
            first, last = tb.trunc(first, loop_ty), tb.trunc(last, loop_ty)
        code = tb.call(body_fn, loaded[:-2] + [tb.add(lo, first), tb.add(lo, last)])
        tb.cbranch(tb.icmp_unsigned("!=", code, zero32), blocks["done"], blocks["claim"])

        tb.position_at_end(blocks["next"])
        k_next = tb.add(k, one)
        k.add_incoming(k_next, blocks["next"])
        tb.cbranch(tb.icmp_signed("<", k_next, owners), blocks["segment"], blocks["done"])
        tb.position_at_end(blocks["done"])
        tb.ret_void()
        self.frame, self.vars, self.buffers = saved

        # 3. In the caller: pack the captures, zero the counters of the owners the team will
        #    have (the requested size, or the runtime's default) and launch.
        b = self.builder
        slot = self.entry_alloca(struct_ty, name=stem + ".data")
        for i, v in enumerate(buf_vals + scalar_vals + [begin, extent], start=1):
            b.store(v, b.gep(slot, [zero32, ir.Constant(I32, i)], source_etype=struct_ty))
        requested = max(0, self.options.num_threads)
        if requested:
            team = ir.Constant(I32, requested)
            length = ir.Constant(I64, min(requested, MAX_OWNERS) * COUNTER_STRIDE)
        else:
            if use_gomp:
                team = b.call(self.declare("omp_get_max_threads", I32, []), [])
            else:
                team = b.call(self.declare(threadpool.TEAM, I32, [I32]), [ir.Constant(I32, 0)])
            team64 = b.sext(team, I64)
            limit = ir.Constant(I64, MAX_OWNERS)
            team64 = b.select(b.icmp_signed("<", team64, limit), team64, limit)
            length = b.mul(team64, ir.Constant(I64, COUNTER_STRIDE))
        memset = self.declare("llvm.memset.p0.i64", VOID, [PTR, I8, I64, I1])
        b.call(memset, [slot, ir.Constant(I8, 0), length, ir.Constant(I1, 0)])
        if use_gomp:
            gomp = self.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
            b.call(gomp, [self._gomp_wrapper(tramp), slot, ir.Constant(I32, requested),
                          zero32])
        else:
            launch = self.declare(threadpool.LAUNCH, VOID, [PTR, PTR, I32])
            b.call(launch, [tramp, slot, team])
        # Either launch returns once every thread of the team is done with its chunks.
        self.return_if_failed()

    def _gomp_wrapper(self, tramp: ir.Function) -> ir.Function:
        """``NAME__parK_gomp(data)``: what GOMP_parallel runs on each thread of its team, the
        trampoline with libgomp's team size and thread number."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR]), tramp.name + "_gomp")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        wb = ir.IRBuilder(fn.append_basic_block("entry"))
        team = wb.call(self.declare("omp_get_num_threads", I32, []), [])
        tid = wb.call(self.declare("omp_get_thread_num", I32, []), [])
        wb.call(tramp, [fn.args[0], team, tid])
        wb.ret_void()
        return fn

    def _captures(self, s: For) -> tuple[list, list]:
        """Variables and buffers the loop body uses but does not define, in first-use order."""
        defined, var_caps, buf_caps = {s.loop_var}, [], []
        allocated = set()

        def visit(n):
            if isinstance(n, (For,)):
                defined.add(n.loop_var)
            elif isinstance(n, LetStmt):
                defined.add(n.var)
            elif isinstance(n, Allocate):
                allocated.add(n.buffer)
            elif isinstance(n, (BufferLoad, BufferStore)) and n.buffer not in allocated:
                if n.buffer not in buf_caps:
                    buf_caps.append(n.buffer)
            elif isinstance(n, Var) and n not in defined and n not in var_caps:
                var_caps.append(n)

        walk(s.body, visit)
        for v in var_caps:
            if v not in self.vars:
                raise BuildError(f"codegen: variable {v.name} is used but never defined")
        for buf in buf_caps:
            if buf not in self.buffers:
                raise BuildError(f"codegen: buffer {buf.name} is neither a parameter nor "
                                 f"allocated")
        return var_caps, buf_caps
