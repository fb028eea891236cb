"""Runtime index checks for the LLVM backend: accesses whose index is read from memory.

An index that the program computes from loop variables is proved in range when the function
is lowered; one that it reads from a buffer (``A[I[i]]``: an embedding lookup, a gather, a
scatter) is whatever the caller put there.  Every such access is checked where it runs:

* a **check** is one (buffer, axis) of the function whose index depends on loaded data; the
  checks are numbered from 1 in the order of :func:`index_checks` (a walk of the body), and
  the kernel's metadata lists them (``"checks"``: buffer name, axis, extent) so that a caller
  can name what was wrong;
* the kernel returns ``int32``: 0, or the number of the first check that failed.  The failing
  index is left in the module's global ``<entry>__fault`` (``int64``).  The status is per call;
  the index is per kernel, a diagnostic (two threads failing in one kernel at once may leave
  either one's index);
* a failing check ends the kernel at once: the entry function frees its heap buffers and
  returns; a parallel loop's body records the check in a status word of the caller's frame
  (captured like the buffers) and returns; its threads stop claiming chunks once the status
  is set; the caller returns the status after the launch.

The check is an unsigned compare of the 64-bit index against the extent (a negative index is
out of range too) and a branch to a cold block; in a vectorized loop the lanes are compared
at once (only the enabled ones under a mask) and the branch tests any.  A check is emitted
once per index value in a region (the value numbering of the code generator), so the inner
loop of an embedding lookup, whose row index is loop-invariant, checks it once per row.

Accesses in functions without data-dependent indices get no check and no status word: the
kernel only returns 0.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..buffer import Buffer
from ..errors import BuildError
from ..expr import BufferLoad, IntImm, Var
from ..stmt import BufferStore, LetStmt
from ..visitor import walk
from .types import I1, I32, I64, PTR, VOID

# Suffix of the per-kernel global holding the index of the last failed check.
FAULT_SUFFIX = "__fault"


def _data_vars(body) -> set:
    """Variables bound (LetStmt) to a value that depends on loaded data, transitively."""
    found: set = set()

    def visit(n):
        if isinstance(n, LetStmt) and depends_on_data(n.value, found):
            found.add(n.var)

    # Lets are bound before their bodies use them: one walk in program order sees a
    # definition before its uses.
    walk(body, visit)
    return found


def depends_on_data(e, data_vars: set) -> bool:
    """Whether the expression ``e`` reads memory, directly or through a data variable."""
    found = False

    def visit(n):
        nonlocal found
        if found:
            return False
        if isinstance(n, BufferLoad) or (isinstance(n, Var) and n in data_vars):
            found = True
            return False
        return None

    walk(e, visit)
    return found


def _accesses(func):
    """(buffer, axis, index expression) of every access whose index depends on data, in walk
    order, with the data variables."""
    data_vars = _data_vars(func.body)
    found = []

    def visit(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            for axis, index in enumerate(n.indices):
                if depends_on_data(index, data_vars):
                    found.append((n.buffer, axis, index))

    walk(func.body, visit)
    return found, data_vars


def index_checks(func) -> list[tuple[Buffer, int]]:
    """The checks of ``func``, in number order (check k is entry k - 1)."""
    checks: list[tuple[Buffer, int]] = []
    for buf, axis, _ in _accesses(func)[0]:
        if (buf, axis) not in checks:
            extent = buf.shape[axis]
            if not isinstance(extent, IntImm):
                raise BuildError(f"codegen: buffer {buf.name} is indexed by data on axis "
                                 f"{axis}, whose extent {extent} is not a constant")
            checks.append((buf, axis))
    return checks


def check_metadata(func) -> list[dict]:
    """The ``"checks"`` entry of a kernel's metadata."""
    return [{"buffer": buf.name, "axis": axis, "extent": int(buf.shape[axis].value)}
            for buf, axis in index_checks(func)]


def index_bounds(func) -> dict:
    """For each parameter whose values index another buffer: the smallest extent it indexes
    (its values are in range when drawn from ``[0, bound)``).  What a measurement fills such
    an input with: random integers there would fail the checks."""
    params = set(func.params)
    bounds: dict = {}
    for buf, axis, index in _accesses(func)[0]:
        extent = int(buf.shape[axis].value)

        def visit(n, extent=extent):
            if isinstance(n, BufferLoad) and n.buffer in params:
                bounds[n.buffer] = min(bounds.get(n.buffer, extent), extent)

        walk(index, visit)
    return bounds


def _store_atomic(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value) -> None:
    # An exchange, not IRBuilder.store_atomic: that one checks the pointee type, which an
    # opaque pointer lacks.  Failing is the cold path; its cost does not matter.
    b.atomic_rmw("xchg", ptr, value, "monotonic")


class IndexCheckMixin:
    """Index-check emission for CodeGenLLVM (see the module text)."""

    def begin_checks(self, func, entry: str) -> None:
        """Number ``func``'s checks; make the fault global and the status word (in the entry
        frame) when there are any."""
        wanted = self.options.index_checks
        self.check_ids = {key: k + 1 for k, key in enumerate(index_checks(func))} \
            if wanted else {}
        self.check_vars = _data_vars(func.body)
        self.fault = None
        if self.check_ids:
            self.fault = ir.GlobalVariable(self.module, I64, entry + FAULT_SUFFIX)
            self.fault.initializer = ir.Constant(I64, 0)
            self.fault.align = 8
            status = self.entry_alloca(I32, name="status")
            self.builder.store(ir.Constant(I32, 0), status)
            self.frame.status = status

    def check_access(self, buf: Buffer, indices: tuple) -> None:
        """Check every index of ``buf[indices]`` that depends on data (scalar or vector
        mode, under the lane mask in force)."""
        if not self.check_ids:
            return
        for axis, index in enumerate(indices):
            code = self.check_ids.get((buf, axis))
            if code is None or not depends_on_data(index, self.check_vars):
                continue
            value = self.index_value(index, "int64")
            mask = self.mask if isinstance(value.type, ir.VectorType) else None
            extent = int(buf.shape[axis].value)
            self.memoized(("check", code, id(value), id(mask)),
                          lambda: self._emit_check(code, value, extent, mask), (value, mask))

    def _emit_check(self, code: int, value: ir.Value, extent: int, mask) -> ir.Value:
        b = self.builder
        if isinstance(value.type, ir.VectorType):
            lanes = value.type.count
            limit = ir.Constant(value.type, [ir.Constant(I64, extent)] * lanes)
            bad = b.icmp_unsigned(">=", value, limit)
            if mask is not None:
                bad = b.and_(bad, mask)
            vec_ty = ir.VectorType(I1, lanes)
            any_bad = b.call(self.declare(f"llvm.vector.reduce.or.v{lanes}i1", I1, [vec_ty]),
                             [bad])
        else:
            bad = any_bad = b.icmp_unsigned(">=", value, ir.Constant(I64, extent))
        fn = self.frame.fn
        fail = fn.append_basic_block("index.fail")
        ok = fn.append_basic_block("index.ok")
        b.cbranch(any_bad, fail, ok).set_weights([1, 1 << 20])
        b.position_at_end(fail)
        reported = value
        if isinstance(value.type, ir.VectorType):
            # The first failing lane's index (built from the last lane down).
            reported = ir.Constant(I64, 0)
            for lane in reversed(range(value.type.count)):
                k = ir.Constant(I32, lane)
                reported = b.select(b.extract_element(bad, k), b.extract_element(value, k),
                                    reported)
        self.fail_with(ir.Constant(I32, code), reported)
        b.position_at_end(ok)
        return value

    def fail_with(self, code: ir.Value, index: ir.Value | None) -> None:
        """End the function being emitted with status ``code`` (see the module text)."""
        b = self.builder
        if index is not None:
            _store_atomic(b, index, self.fault)
        frame = self.frame
        if frame.in_parallel:
            _store_atomic(b, code, frame.status)
        free = self.declare("free", VOID, [PTR])
        for ptr in reversed(frame.heap):
            b.call(free, [ptr])
        b.ret(code)

    def return_if_failed(self) -> None:
        """After a parallel launch: return the status its threads recorded, if any."""
        if self.frame.status is None:
            return
        b = self.builder
        status = b.load_atomic(self.frame.status, "monotonic", 4, typ=I32)
        fn = self.frame.fn
        fail = fn.append_basic_block("launch.fail")
        ok = fn.append_basic_block("launch.ok")
        b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), fail, ok
                  ).set_weights([1, 1 << 20])
        b.position_at_end(fail)
        self.fail_with(status, None)
        b.position_at_end(ok)
