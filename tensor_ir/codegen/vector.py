"""Vectorized loops for the LLVM backend: a loop body emitted once on LLVM vector values.

Inside a vectorized loop of ``lanes`` iterations the loop variable is the vector
``<min, min+1, ..., min+lanes-1>``.  Values that do not depend on it stay scalar (uniform) and
are broadcast where they meet a vector.  Buffer accesses are classified by the stride of their
row-major offset per lane:

    stride 0   a scalar load (broadcast on use) / a scalar store when the value is uniform too
    stride 1   one contiguous vector load / store
    otherwise  a gather / scatter, one lane at a time

A select whose condition differs across lanes and whose sides load memory (padding: ``select(
in_bounds, data[...], 0)``) must not touch memory in the lanes that do not choose a side.  When
the sides are simple enough (no nested select, no division that could trap on a garbage
operand) each side is evaluated under a lane mask: its loads become ``llvm.masked.load`` /
``llvm.masked.gather``, which access only the enabled lanes, and a vector select combines the
sides.  Otherwise the select is evaluated lane by lane with real branches.

Whatever else cannot be expressed on vectors (a condition that differs across lanes guarding a
statement, a nested allocation, a store of varying values to one address) is emitted lane by
lane: the statement is generated ``lanes`` times with the loop variable read from one lane,
which is exactly the serial meaning of the loop.

A vectorized loop asserts that its iterations are independent (as in TVM): the schedule that
vectorizes a loop is responsible for that.
"""
from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from .. import dtype as dt
from ..errors import BuildError
from ..expr import BinOp, BufferLoad, Cast, FloatImm, IntImm, PrimExpr, Select, Var
from ..stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, LetStmt, SeqStmt
from ..visitor import walk
from .types import I32, PTR, all_ones, memory_type, value_type, zero_of

# Widest vector emitted for one vectorized loop; longer loops run a serial loop over chunks.
MAX_LANES = 64


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
        # Only a width that is not a power of two is cut (checked first: the lane count walks
        # the body, and unrolled nests emit the same loop many times).
        if extent <= MAX_LANES and extent & (extent - 1):
            native = self.register_lanes(s)
            if native < extent:
                self._register_chunks(s, extent, native)
                return
        lanes = choose_lanes(extent, MAX_LANES)
        if lanes == 1:
            begin = self.index_value(s.min, s.loop_var.dtype)
            end = self.int_op("+", begin, ir.Constant(begin.type, extent), nsw=True)
            self.emit_loop(s.loop_var, begin, end, lambda: self.stmt(s.body))
            return
        ty = value_type(s.loop_var.dtype)
        begin = self.index_value(s.min, s.loop_var.dtype)
        if lanes == extent:
            self._vector_body(s, lanes, begin)
            return
        # A loop over chunks of ``lanes`` iterations; chunk c starts at begin + c * lanes.
        chunk = Var(f"{s.loop_var.name}.chunk", s.loop_var.dtype)
        zero = ir.Constant(ty, 0)

        def chunk_body() -> None:
            c = self.var_value(chunk)
            start = self.int_op("+", begin, self.int_op("*", c, ir.Constant(ty, lanes),
                                                        nsw=True), nsw=True)
            self._vector_body(s, lanes, start)

        self.emit_loop(chunk, zero, ir.Constant(ty, extent // lanes), chunk_body)

    def register_lanes(self, s: For) -> int:
        """Lanes of one target vector register for the widest element ``s`` loads or stores
        (MAX_LANES when the target's vector width is unknown)."""
        bits = self.options.vector_bits
        if not bits:
            return MAX_LANES
        widest = 8

        def visit(n):
            nonlocal widest
            if isinstance(n, (BufferLoad, BufferStore)):
                widest = max(widest, dt.bits(n.buffer.dtype))

        walk(s.body, visit)
        return max(1, bits // widest)

    def _register_chunks(self, s: For, extent: int, lanes: int) -> None:
        """A vectorized loop a few registers wide whose width is not a power of two (a row
        of 56), emitted as one vector body per register, the last one taking the remainder.
        One <56 x float> vector is legal LLVM, but kept in a register-level buffer, SROA
        rebuilds it lane by lane with inserts and shuffles: depthwise kernels ran up to 5x
        slower.  Power-of-two widths split cleanly in LLVM's type legalisation, and cutting
        them here as well only multiplies the IR (matmul builds took 3x longer)."""
        ty = value_type(s.loop_var.dtype)
        begin = self.index_value(s.min, s.loop_var.dtype)
        for offset in range(0, extent, lanes):
            start = self.int_op("+", begin, ir.Constant(ty, offset), nsw=True)
            self._vector_body(s, min(lanes, extent - offset), start)

    def _vector_body(self, s: For, lanes: int, base: ir.Value) -> None:
        """The body of ``s`` once, on the iterations ``base .. base + lanes - 1``."""
        ty = value_type(s.loop_var.dtype)
        step = ir.Constant(ir.VectorType(ty, lanes), list(range(lanes)))
        value = self.int_op("+", self.broadcast(base, lanes), step, nsw=True)
        with self._vector_mode(lanes, s.loop_var, value, base):
            self.stmt(s.body)

    @contextmanager
    def _vector_mode(self, lanes: int, var: Var, value: ir.Value, base: ir.Value):
        """Emit a vector body: ``var`` is ``value`` = <base, base+1, ...>; read in one lane it
        is ``base + lane`` (a scalar add, not an extraction from the vector)."""
        saved = (self.lanes, self.lane, self.varying, self.lane_base)
        self.lanes, self.lane, self.varying = lanes, None, {var: 1}
        self.lane_base = (var, base)
        try:
            with self.bind(var, value):
                yield
        finally:
            self.lanes, self.lane, self.varying, self.lane_base = saved

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
        self.check_access(buf, s.indices)
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
        bld = self.builder
        for k in range(self.lanes):
            ptr = self.gep(buf, self.extract(index, k))
            bld.store(self.extract(value, k), ptr, align=align)

    # -- expressions --------------------------------------------------------------------------
    def vector_load(self, e: BufferLoad) -> ir.Value:
        buf = e.buffer
        self.check_access(buf, e.indices)
        flat = self.flat_index(buf, e.indices)
        elem = memory_type(buf.dtype)
        align = dt.nbytes(buf.dtype)
        bld = self.builder
        if self.mask is not None:
            return self._masked_load(e, flat)
        if not self.is_varying(flat):
            with self._in_lane(0):
                return self.load(e)
        if self.stride(flat) == 1:
            with self._in_lane(0):
                ptr = self.element_ptr(buf, flat)
            if self.prefetch is not None:
                self.prefetch_ahead(e, ptr, self.lanes * dt.nbytes(buf.dtype))
            value = bld.load(ptr, typ=ir.VectorType(elem, self.lanes), align=align)
            return self.from_memory(value, buf.dtype)
        # Gather: lane by lane.
        index = self.broadcast(self.index_value(flat, "int64"), self.lanes)
        out = ir.Constant(ir.VectorType(elem, self.lanes), ir.Undefined)
        for k in range(self.lanes):
            ptr = self.gep(buf, self.extract(index, k))
            out = bld.insert_element(out, bld.load(ptr, typ=elem, align=align),
                                     ir.Constant(I32, k))
        return self.from_memory(out, buf.dtype)

    def vector_select(self, e: Select, cond: ir.Value, lazy: bool) -> ir.Value:
        """A select whose condition differs across lanes."""
        bld = self.builder
        if not lazy:
            t = self.broadcast(self.expr(e.true_value), self.lanes)
            f = self.broadcast(self.expr(e.false_value), self.lanes)
            return bld.select(cond, t, f)
        if self.mask is None and maskable(e.true_value) and maskable(e.false_value):
            # Each side under the mask of the lanes that choose it (see the module text).
            t = self._under_mask(cond, e.true_value)
            f = self._under_mask(self.int_op("xor", cond, all_ones(cond.type)),
                                 e.false_value)
            t, f = self.match(t, f)
            return bld.select(cond, self.broadcast(t, self.lanes),
                              self.broadcast(f, self.lanes))
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

    # -- masked evaluation --------------------------------------------------------------------
    def _under_mask(self, mask: ir.Value, e: PrimExpr) -> ir.Value:
        if not has_any_load(e):
            return self.expr(e)
        self.mask = mask
        try:
            return self.expr(e)
        finally:
            self.mask = None

    def _masked_load(self, e: BufferLoad, flat: PrimExpr) -> ir.Value:
        """A load of ``lanes`` elements touching only the lanes enabled in ``self.mask``;
        disabled lanes read as zero.  The addresses are computed without ``inbounds``: in a
        disabled lane they may well lie outside the buffer."""
        buf = e.buffer
        base = self.buffers.get(buf)
        if base is None:
            raise BuildError(f"codegen: buffer {buf.name} is neither a parameter nor allocated "
                             f"in scope")
        lanes = self.lanes
        bld = self.builder
        elem = memory_type(buf.dtype)
        vec_ty = ir.VectorType(elem, lanes)
        mask_ty = ir.VectorType(ir.IntType(1), lanes)
        align = ir.Constant(I32, dt.nbytes(buf.dtype))
        suffix = f"v{lanes}{_mangle(elem)}"
        if self.stride(flat) == 1:
            with self._in_lane(0):
                offset = self.index_value(flat, "int64")
            ptr = bld.gep(base, [offset], inbounds=False, source_etype=elem)
            fn = self.declare(f"llvm.masked.load.{suffix}.p0", vec_ty,
                              [PTR, I32, mask_ty, vec_ty])
            value = bld.call(fn, [ptr, align, self.mask, zero_of(vec_ty)])
        else:
            offsets = self.broadcast(self.index_value(flat, "int64"), lanes)
            ptrs = bld.gep(base, [offsets], inbounds=False, source_etype=elem)
            # llvmlite types every GEP as a scalar pointer; with a vector of offsets LLVM's
            # result is a vector of pointers (the printed instruction is the same).
            ptr_vec = ir.VectorType(PTR, lanes)
            ptrs.type = ptr_vec
            fn = self.declare(f"llvm.masked.gather.{suffix}.v{lanes}p0", vec_ty,
                              [ptr_vec, I32, mask_ty, vec_ty])
            value = bld.call(fn, [ptrs, align, self.mask, zero_of(vec_ty)])
        return self.from_memory(value, buf.dtype)


def _mangle(ty: ir.Type) -> str:
    """The element part of an overloaded intrinsic's name: f32, f64, f16, i8, i32, ..."""
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(ty)]


def has_any_load(e) -> bool:
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, BufferLoad) else None)
    return bool(found)


def maskable(e) -> bool:
    """Whether ``e`` may be evaluated in lanes that do not use its value, with only its loads
    masked: no nested select (its own laziness would need a mask of its own).  Integer
    division cannot trap in any lane (see ``_divide`` in llvm.py), so it needs no mask."""
    ok = True

    def visit(n):
        nonlocal ok
        if not ok:
            return False
        if isinstance(n, Select):
            ok = False
        return None

    walk(e, visit)
    return ok
