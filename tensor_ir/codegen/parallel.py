"""Parallel loops for the LLVM backend: outlining and launching through libgomp.

A ``parallel`` loop becomes two internal functions:

    NAME__parK_body(buffers..., scalars..., begin, end)   the loop over [begin, end), with
                                                         noalias buffer arguments
    NAME__parK(data)                                      unpacks the captured values, then
                                                         claims chunks of the iterations and
                                                         calls the body on each

and the loop itself becomes ``GOMP_parallel(NAME__parK, &data, num_threads, 0)``, which runs
the trampoline on every thread of the OpenMP team (the caller included) and returns when all
are done.  Allocations inside the loop land in the body function's entry block, so each
thread has its own.

Chunks are claimed dynamically (an atomic counter in ``data``), about CHUNKS_PER_THREAD per
thread, rather than one fixed share per thread.  On a machine shared with other work a team
thread may start late (it waits for a core); with fixed shares every launch then waited for
that thread to run its whole share after it got a core, and a model of ~50 kernels ran slower
on two threads than on one.  With claimed chunks the threads that run take the work of the one
that does not, and the late one finds nothing left.  The body is kept out of line
(``noinline``) so that LLVM optimises the loop nest once, with noalias arguments, instead of
once more after inlining it into the trampoline.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..errors import BuildError
from ..expr import BufferLoad, Var
from ..stmt import Allocate, BufferStore, For, LetStmt
from ..visitor import walk
from .types import I32, PTR, VOID, symbol_name, value_type

# Chunks per team thread for the dynamic distribution of a parallel loop's iterations: enough
# for the running threads to absorb the share of a late one, few enough that claiming (one
# atomic add per chunk) and splitting the loop cost nothing next to the iterations' work.
CHUNKS_PER_THREAD = 4


class ParallelMixin:
    """Parallel-loop emission for CodeGenLLVM."""

    def _parallel(self, s: For) -> None:
        """Outline the loop into ``body(buffers..., scalars..., begin, end)`` (noalias buffer
        arguments keep the body as optimisable as the entry function) and a trampoline
        ``tramp(data)`` that unpacks the captures, takes this thread's contiguous chunk and
        calls the body; launch the trampoline on all threads with GOMP_parallel."""
        b = self.builder
        var_caps, buf_caps = self._captures(s)
        self._n_outlined += 1
        stem = f"{self.entry_name}__par{self._n_outlined}"
        loop_ty = value_type(s.loop_var.dtype)
        scalar_vals = [self.expr(v) for v in var_caps]
        buf_vals = [self.buffers[buf] for buf in buf_caps]
        begin = self.index_value(s.min, s.loop_var.dtype)
        extent = self.index_value(s.extent, s.loop_var.dtype)

        # 1. The body function: a serial loop over [begin, end).
        arg_types = [PTR] * len(buf_caps) + [v.type for v in scalar_vals] + [loop_ty, loop_ty]
        body_fn = ir.Function(self.module, ir.FunctionType(VOID, arg_types), stem + "_body")
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
        args[-2].name, args[-1].name = "begin", "end"
        self.emit_loop(s.loop_var, args[-2], args[-1], lambda: self.stmt(s.body))
        self.builder.ret_void()

        # 2. The trampoline: unpack, then claim chunks [first, last) and run the body on each.
        #    data = {captures..., begin, extent, next chunk (shared counter)}
        fields = ([PTR] * len(buf_caps) + [v.type for v in scalar_vals]
                  + [loop_ty, loop_ty, loop_ty])
        struct_ty = ir.LiteralStructType(fields)
        tramp = ir.Function(self.module, ir.FunctionType(VOID, [PTR]), stem)
        tramp.linkage = "internal"
        tramp.attributes.add("nounwind")
        entry = tramp.append_basic_block("entry")
        claim_bb = tramp.append_basic_block("claim")
        run_bb = tramp.append_basic_block("run")
        done_bb = tramp.append_basic_block("done")
        tb = ir.IRBuilder(entry)
        data = tramp.args[0]

        def field(i):
            return tb.gep(data, [ir.Constant(I32, 0), ir.Constant(I32, i)],
                          source_etype=struct_ty)

        loaded = [tb.load(field(i), typ=t) for i, t in enumerate(fields[:-1])]
        counter = field(len(fields) - 1)
        nthreads = tb.sext(tb.call(self.declare("omp_get_num_threads", I32, []), []), loop_ty)
        lo, ext = loaded[-2], loaded[-1]
        one = ir.Constant(loop_ty, 1)
        # chunk = ceil(extent / min(extent, nthreads * CHUNKS_PER_THREAD)), at least 1
        nchunks = tb.mul(nthreads, ir.Constant(loop_ty, CHUNKS_PER_THREAD))
        nchunks = tb.select(tb.icmp_signed("<", ext, nchunks), ext, nchunks)
        nchunks = tb.select(tb.icmp_signed("<", nchunks, one), one, nchunks)
        chunk = tb.sdiv(tb.sub(tb.add(ext, nchunks), one), nchunks)
        tb.branch(claim_bb)
        tb.position_at_end(claim_bb)
        # Monotonic suffices: the counter only hands out distinct chunk numbers; the
        # captured values were published before the launch by GOMP_parallel itself.
        index = tb.atomic_rmw("add", counter, one, "monotonic")
        first = tb.mul(index, chunk)
        tb.cbranch(tb.icmp_signed("<", first, ext), run_bb, done_bb)
        tb.position_at_end(run_bb)
        last = tb.add(first, chunk)
        last = tb.select(tb.icmp_signed("<", last, ext), last, ext)
        tb.call(body_fn, loaded[:-2] + [tb.add(lo, first), tb.add(lo, last)])
        tb.branch(claim_bb)
        tb.position_at_end(done_bb)
        tb.ret_void()
        self.frame, self.vars, self.buffers = saved

        # 3. In the caller: pack the captures, reset the chunk counter and launch.
        b = self.builder
        slot = self.entry_alloca(struct_ty, name=stem + ".data")
        for i, v in enumerate(buf_vals + scalar_vals + [begin, extent, ir.Constant(loop_ty, 0)]):
            b.store(v, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)],
                             source_etype=struct_ty))
        gomp = self.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        b.call(gomp, [tramp, slot, ir.Constant(I32, max(0, self.options.num_threads)),
                      ir.Constant(I32, 0)])

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
