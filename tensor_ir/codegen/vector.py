"""Vectorized loops for the LLVM backend: a loop body emitted once on LLVM vector values.

Inside a vectorized loop of ``lanes`` iterations the loop variable is the vector
``<min, min+1, ..., min+lanes-1>``.  Values that do not depend on it stay scalar (uniform) and
are broadcast where they meet a vector.  Buffer accesses are classified by the stride of their
row-major offset per lane:

    stride 0   a scalar load (broadcast on use) / a scalar store when the value is uniform too
    stride 1   one contiguous vector load / store
    otherwise  a gather / scatter, one lane at a time

Whatever cannot be expressed on vectors (a condition that differs across lanes guarding a
statement or a load, a nested allocation, a store of varying values to one address) is emitted
lane by lane: the statement is generated ``lanes`` times with the loop variable read from one
lane, which is exactly the serial meaning of the loop.

A vectorized loop asserts that its iterations are independent (as in TVM): the schedule that
vectorizes a loop is responsible for that.
"""
from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from .. import dtype as dt
from ..expr import BinOp, BufferLoad, Cast, FloatImm, IntImm, PrimExpr, Select, Var
from ..stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, LetStmt, SeqStmt
from ..visitor import walk
from .types import I32, memory_type, value_type


def choose_lanes(extent: int, max_lanes: int) -> int:
    """Vector width for a loop of ``extent``: the extent itself when it fits, else its largest
    divisor that does (1 means: emit a scalar loop)."""
    if extent <= max_lanes:
        return extent
    for lanes in range(max_lanes, 0, -1):
        if extent % lanes == 0:
            return lanes
    return 1


class VectorMixin:
    """Vector-mode statement and expression emission for CodeGenLLVM (see the module text)."""

    # -- entry --------------------------------------------------------------------------------
    def vector_loop(self, s: For, extent: int) -> None:
        from .llvm import MAX_LANES

        lanes = choose_lanes(extent, MAX_LANES)
        if lanes == 1:
            begin = self.index_value(s.min, s.loop_var.dtype)
            end = self.builder.add(begin, ir.Constant(begin.type, extent), flags=["nsw"])
            self.emit_loop(s.loop_var, begin, end, lambda: self.stmt(s.body))
            return
        ty = value_type(s.loop_var.dtype)
        step = ir.Constant(ir.VectorType(ty, lanes), list(range(lanes)))
        begin = self.index_value(s.min, s.loop_var.dtype)

        def body(base: ir.Value) -> None:
            lanes_value = self.builder.add(self.broadcast(base, lanes), step, flags=["nsw"])
            with self._vector_mode(lanes, s.loop_var, lanes_value):
                self.stmt(s.body)

        if lanes == extent:
            body(begin)
            return
        # A loop over chunks of ``lanes`` iterations; chunk c starts at begin + c * lanes.
        chunk = Var(f"{s.loop_var.name}.chunk", s.loop_var.dtype)
        zero = ir.Constant(ty, 0)

        def chunk_body() -> None:
            c = self.var_value(chunk)
            start = self.builder.add(begin, self.builder.mul(c, ir.Constant(ty, lanes),
                                                             flags=["nsw"]), flags=["nsw"])
            body(start)

        self.emit_loop(chunk, zero, ir.Constant(ty, extent // lanes), chunk_body)

    @contextmanager
    def _vector_mode(self, lanes: int, var: Var, value: ir.Value):
        saved = (self.lanes, self.lane, self.varying)
        self.lanes, self.lane, self.varying = lanes, None, {var: 1}
        try:
            with self.bind(var, value):
                yield
        finally:
            self.lanes, self.lane, self.varying = saved

    @contextmanager
    def _in_lane(self, lane: int):
        saved = self.lane
        self.lane = lane
        try:
            yield
        finally:
            self.lane = saved

    def per_lane(self, s) -> None:
        """Emit ``s`` once per lane, in lane order (the serial meaning of the loop)."""
        for k in range(self.lanes):
            with self._in_lane(k):
                self.stmt(s)

    # -- analysis -----------------------------------------------------------------------------
    def is_varying(self, e) -> bool:
        """Whether ``e`` may differ across the lanes of the current vector loop."""
        varying = self.varying
        found = False

        def visit(n):
            nonlocal found
            if found:
                return False
            if isinstance(n, Var) and n in varying:
                found = True
                return False
            return None

        walk(e, visit)
        return found

    def stride(self, e: PrimExpr):
        """Constant per-lane stride of the integer expression ``e``; None when ``e`` is not
        affine in the lanes with a constant stride."""
        if isinstance(e, (IntImm, FloatImm)):
            return 0
        if isinstance(e, Var):
            return self.varying.get(e, 0) if e in self.varying else 0
        if isinstance(e, BinOp) and e.op in ("+", "-"):
            a, b = self.stride(e.a), self.stride(e.b)
            if a is None or b is None:
                return None
            return a + b if e.op == "+" else a - b
        if isinstance(e, BinOp) and e.op == "*":
            a, b = self.stride(e.a), self.stride(e.b)
            if a == 0 and b == 0:
                return 0
            if a == 0 and isinstance(e.a, IntImm) and b is not None:
                return e.a.value * b
            if b == 0 and isinstance(e.b, IntImm) and a is not None:
                return e.b.value * a
            return None
        if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype) \
                and dt.bits(e.dtype) >= dt.bits(e.value.dtype):
            return self.stride(e.value)
        return None if self.is_varying(e) else 0

    # -- statements ---------------------------------------------------------------------------
    def vector_stmt(self, s) -> None:
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, BufferStore):
            self._vector_store(s)
        elif isinstance(s, LetStmt):
            if not self.is_varying(s.value):
                with self.bind(s.var, self.expr(s.value)):
                    self.stmt(s.body)
                return
            value = self.broadcast(self.expr(s.value), self.lanes)
            stride = self.stride(s.value) if dt.is_int(s.value.dtype) else None
            saved = dict(self.varying)
            self.varying[s.var] = stride
            try:
                with self.bind(s.var, value):
                    self.stmt(s.body)
            finally:
                self.varying = saved
        elif isinstance(s, IfThenElse) and not self.is_varying(s.condition):
            self._if(s, self.expr(s.condition))
        elif isinstance(s, For) and not (self.is_varying(s.min) or self.is_varying(s.extent)):
            # A nested loop with uniform bounds keeps a vector body; it is unrolled when its
            # kind or an auto-unroll pragma asks for it, and otherwise runs serially.
            self._for(s)
        elif isinstance(s, (IfThenElse, For, Allocate, Evaluate)):
            self.per_lane(s)
        else:
            # Unknown statements get the scalar path's error message.
            with self._in_lane(0):
                self.stmt(s)

    def _vector_store(self, s: BufferStore) -> None:
        buf = s.buffer
        flat = self.flat_index(buf, s.indices)
        index_varies = self.is_varying(flat)
        value_varies = self.is_varying(s.value)
        if not index_varies:
            if value_varies:
                # Every lane stores to one address: the last lane's value wins, and later
                # lanes may read what earlier ones stored, so keep the serial order.
                self.per_lane(s)
            else:
                with self._in_lane(0):
                    self._store_scalar(s)
            return
        align = dt.nbytes(buf.dtype)
        value = self.to_memory(self.broadcast(self.expr(s.value), self.lanes), buf.dtype)
        if self.stride(flat) == 1:
            with self._in_lane(0):
                ptr = self.element_ptr(buf, flat)
            self.builder.store(value, ptr, align=align)
            return
        # Scatter: lane by lane, in lane order.
        index = self.broadcast(self.index_value(flat, "int64"), self.lanes)
        base = self.buffers[buf]
        bld = self.builder
        for k in range(self.lanes):
            lane = ir.Constant(I32, k)
            ptr = bld.gep(base, [bld.extract_element(index, lane)], inbounds=True,
                          source_etype=memory_type(buf.dtype))
            bld.store(bld.extract_element(value, lane), ptr, align=align)

    # -- expressions --------------------------------------------------------------------------
    def vector_load(self, e: BufferLoad) -> ir.Value:
        buf = e.buffer
        flat = self.flat_index(buf, e.indices)
        elem = memory_type(buf.dtype)
        align = dt.nbytes(buf.dtype)
        bld = self.builder
        if not self.is_varying(flat):
            with self._in_lane(0):
                return self.load(e)
        if self.stride(flat) == 1:
            with self._in_lane(0):
                ptr = self.element_ptr(buf, flat)
            value = bld.load(ptr, typ=ir.VectorType(elem, self.lanes), align=align)
            return self.from_memory(value, buf.dtype)
        # Gather: lane by lane.
        index = self.broadcast(self.index_value(flat, "int64"), self.lanes)
        base = self.buffers[buf]
        out = ir.Constant(ir.VectorType(elem, self.lanes), ir.Undefined)
        for k in range(self.lanes):
            lane = ir.Constant(I32, k)
            ptr = bld.gep(base, [bld.extract_element(index, lane)], inbounds=True,
                          source_etype=elem)
            out = bld.insert_element(out, bld.load(ptr, typ=elem, align=align), lane)
        return self.from_memory(out, buf.dtype)

    def vector_select(self, e: Select, cond: ir.Value, lazy: bool) -> ir.Value:
        """A select whose condition differs across lanes."""
        bld = self.builder
        if not lazy:
            t = self.broadcast(self.expr(e.true_value), self.lanes)
            f = self.broadcast(self.expr(e.false_value), self.lanes)
            return bld.select(cond, t, f)
        # A branch loads memory that may be out of bounds in the lanes that do not choose
        # it, so evaluate the select lane by lane with real branches.
        out = None
        for k in range(self.lanes):
            with self._in_lane(k):
                v = self.select(e)
            if out is None:
                out = ir.Constant(ir.VectorType(v.type, self.lanes), ir.Undefined)
            out = bld.insert_element(out, v, ir.Constant(I32, k))
        return out
