"""The accelerator's timing model: cycles of a program from its lowered loop nest.

    report = simulate(sch.func)              # a scheduled (or lowered) PrimFunc
    report.cycles, report.seconds            # total, and at the accelerator's clock
    report.macs, report.loads, report.stores # what the program asks the accelerator to do

The count is static: every loop has a constant extent, so how often each statement runs is the
product of the extents around it.  The lowered program is read as the accelerator's
instruction stream (see :mod:`.hardware` for the costs):

- a ``TensorIntrinCall`` of the GEMM intrinsic is one GEMM instruction; its operands must lie
  in the input, weight and accumulator scratchpads respectively;
- a *copy nest* -- a loop nest (possibly no loop) around one store that copies a main-memory
  buffer into a scratchpad, or a scratchpad into main memory, element for element -- is one
  DMA transfer each time it starts; its bytes are the elements the nest copies;
- a *reset nest* -- a loop nest around one store of zero into the accumulator scratchpad -- is
  one reset instruction each time it starts;
- anything else (a computation the GEMM unit does not do, a store into main memory that is not
  a copy, a copy between two scratchpads) is refused with UnsupportedProgramError.

Scratchpad capacity: the allocations of each scratchpad scope, after lowering has shrunk every
buffer to the region it needs where it is allocated, are added up (each counted once: an
allocation inside a loop is reused by every iteration) and compared with the scope's capacity;
more is a ScratchpadOverflowError.  Adding them up is conservative when two buffers of one scope
are live at different times; the programs of this package have one buffer per scope.

Why tile sizes and copy placement change the count: a copy computed under a loop is redone on
every iteration of it (more transfers, each paying the DMA setup), and the region it copies
grows with the tiles of the loops inside it (fewer, bigger transfers and more reuse, until a
scratchpad overflows).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tensor_ir.expr import BufferLoad, Cast, FloatImm, IntImm
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    TensorIntrinCall,
)
from tensor_ir.visitor import collect

from .hardware import (
    ACC_SCOPE,
    DEFAULT_ACCELERATOR,
    INP_SCOPE,
    SCRATCHPAD_SCOPES,
    WGT_SCOPE,
    Accelerator,
    ScratchpadOverflowError,
    UnsupportedProgramError,
)
from .intrinsic import GEMM_INTRIN

__all__ = ["CycleReport", "scratchpad_usage", "simulate", "verify"]

# The scratchpad each GEMM operand must come from, in the description's parameter order.
_OPERAND_SCOPES = (INP_SCOPE, WGT_SCOPE, ACC_SCOPE)


@dataclass
class CycleReport:
    """What a program makes the accelerator do, and the cycles it takes.

    macs            GEMM instructions executed.
    loads, stores   DMA transfers into / out of the scratchpads; ``load_bytes`` and
                    ``store_bytes`` the bytes they move, ``transfers_by_scope`` and
                    ``bytes_by_scope`` the same per scratchpad scope.
    reset_elements  accumulator elements zeroed, in ``resets`` reset instructions.
    usage           bytes allocated per scratchpad scope (what the capacity check compares).
    mac_cycles, load_cycles, store_cycles, reset_cycles, cycles   the cycles (the total is
                    their sum: nothing overlaps, see :mod:`.hardware`).
    seconds         ``cycles`` at the accelerator's clock.
    """

    accelerator: Accelerator
    macs: int = 0
    loads: int = 0
    stores: int = 0
    load_bytes: int = 0
    store_bytes: int = 0
    resets: int = 0
    reset_elements: int = 0
    load_cycles: int = 0
    store_cycles: int = 0
    reset_cycles: int = 0
    transfers_by_scope: dict = field(default_factory=dict)
    bytes_by_scope: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)

    @property
    def mac_cycles(self) -> int:
        return self.macs * self.accelerator.mac_cycles

    @property
    def transfer_cycles(self) -> int:
        return self.load_cycles + self.store_cycles

    @property
    def cycles(self) -> int:
        return self.mac_cycles + self.load_cycles + self.store_cycles + self.reset_cycles

    @property
    def seconds(self) -> float:
        return self.accelerator.seconds(self.cycles)

    def as_dict(self) -> dict:
        return {"cycles": self.cycles, "mac_cycles": self.mac_cycles,
                "load_cycles": self.load_cycles, "store_cycles": self.store_cycles,
                "reset_cycles": self.reset_cycles, "macs": self.macs, "loads": self.loads,
                "stores": self.stores, "load_bytes": self.load_bytes,
                "store_bytes": self.store_bytes, "resets": self.resets,
                "reset_elements": self.reset_elements, "usage": dict(self.usage)}


def _lowered(func: PrimFunc) -> PrimFunc:
    if not isinstance(func, PrimFunc):
        raise UnsupportedProgramError(f"the accelerator's timing model takes a PrimFunc, got "
                                      f"{type(func).__name__}")
    return func if func.attr("lowered") else lower(func)


def scratchpad_usage(func: PrimFunc) -> dict[str, int]:
    """Bytes allocated per scratchpad scope in the lowered ``func`` (every scope listed)."""
    usage = {scope: 0 for scope in SCRATCHPAD_SCOPES}
    for alloc in _allocations(_lowered(func).body):
        scope = alloc.buffer.scope
        if scope in usage:
            usage[scope] += alloc.buffer.nbytes
    return usage


def _allocations(stmt) -> list:
    return collect(stmt, Allocate)


def verify(func: PrimFunc, accel: Accelerator = DEFAULT_ACCELERATOR) -> dict[str, int]:
    """Check the scratchpad capacities; returns the usage per scope.  Raises
    ScratchpadOverflowError naming the scope, its buffers and the capacity."""
    lowered = _lowered(func)
    usage = scratchpad_usage(lowered)
    for scope, capacity in accel.scratchpads.items():
        if usage[scope] > capacity:
            names = ", ".join(f"{a.buffer.name} ({a.buffer.nbytes} bytes)"
                              for a in _allocations(lowered.body) if a.buffer.scope == scope)
            raise ScratchpadOverflowError(
                f"{lowered.name}: scratchpad {scope} holds {usage[scope]} bytes "
                f"({names}), over its capacity of {capacity} bytes")
    return usage


def simulate(func: PrimFunc, accel: Accelerator = DEFAULT_ACCELERATOR) -> CycleReport:
    """The cycle count of ``func`` (scheduled or lowered) on ``accel`` (see the module text).
    Raises ScratchpadOverflowError or UnsupportedProgramError for a program the accelerator
    cannot run."""
    lowered = _lowered(func)
    report = CycleReport(accel, usage=verify(lowered, accel))
    _Counter(report, lowered.name).stmt(lowered.body, 1)
    return report


class _Counter:
    """Walks the lowered body with the number of times each statement runs."""

    def __init__(self, report: CycleReport, name: str):
        self.report = report
        self.name = name

    def fail(self, msg: str):
        raise UnsupportedProgramError(f"{self.name}: {msg}")

    def stmt(self, s, times: int) -> None:
        if isinstance(s, SeqStmt):
            for child in s.stmts:
                self.stmt(child, times)
        elif isinstance(s, (For, BufferStore)):
            nest = _nest(s)
            if nest is not None and self.account(nest, times):
                return
            if isinstance(s, BufferStore):
                self.fail(f"the store into {s.buffer.name} ({s.buffer.scope}) computes "
                          f"{s.value}; the accelerator only copies between main memory and "
                          f"its scratchpads, resets the accumulator and runs "
                          f"{GEMM_INTRIN}")
            if not isinstance(s.extent, IntImm) or not isinstance(s.min, IntImm):
                self.fail(f"loop {s.loop_var.name} has a non-constant extent {s.extent}")
            self.stmt(s.body, times * s.extent.value)
        elif isinstance(s, TensorIntrinCall):
            self.gemm(s, times)
        elif isinstance(s, (Allocate, LetStmt)):
            self.stmt(s.body, times)
        elif isinstance(s, IfThenElse):
            # NOTE: a guard's outcome is not known statically; counting both branches as taken
            # bounds the cycles from above (the design spaces here make no partial tiles).
            self.stmt(s.then_case, times)
            if s.else_case is not None:
                self.stmt(s.else_case, times)
        elif isinstance(s, Evaluate):
            self.fail(f"the program evaluates {s.value}, which the accelerator cannot run")
        else:
            self.fail(f"the accelerator cannot run a {type(s).__name__}")

    def gemm(self, call: TensorIntrinCall, times: int) -> None:
        if call.intrin != GEMM_INTRIN:
            self.fail(f"tensor intrinsic {call.intrin} is not the accelerator's "
                      f"({GEMM_INTRIN})")
        for role, operand, scope in zip(("A", "B", "C"), call.operands, _OPERAND_SCOPES):
            buf = operand.buffer
            if buf.scope != scope:
                self.fail(f"operand {role} of {GEMM_INTRIN} is {buf.name} in scope "
                          f"{buf.scope}; the matrix unit reads it from the {scope} scratchpad "
                          f"(cache it there with cache_read / cache_write)")
        self.report.macs += times

    def account(self, nest: tuple, times: int) -> bool:
        """Count a copy or reset nest; False when the nest's store is neither."""
        store, elements = nest
        report, accel = self.report, self.report.accelerator
        dst = store.buffer.scope
        value = store.value
        if isinstance(value, Cast) and isinstance(value.value, BufferLoad) \
                and value.value.buffer.dtype == value.dtype:
            value = value.value
        if isinstance(value, BufferLoad):
            src = value.buffer.scope
            nbytes = elements * store.buffer.nbytes // store.buffer.size
            if src == "global" and dst in SCRATCHPAD_SCOPES:
                scope = dst
                report.loads += times
                report.load_bytes += times * nbytes
                report.load_cycles += times * accel.dma_cycles(nbytes)
            elif src in SCRATCHPAD_SCOPES and dst == "global":
                scope = src
                report.stores += times
                report.store_bytes += times * nbytes
                report.store_cycles += times * accel.dma_cycles(nbytes)
            else:
                self.fail(f"{store.buffer.name} ({dst}) is copied from {value.buffer.name} "
                          f"({src}); the DMA engine copies between main memory and a "
                          f"scratchpad only")
            report.transfers_by_scope[scope] = report.transfers_by_scope.get(scope, 0) + times
            report.bytes_by_scope[scope] = report.bytes_by_scope.get(scope, 0) + times * nbytes
            return True
        if dst == ACC_SCOPE and isinstance(value, (IntImm, FloatImm)) and value.value == 0:
            report.resets += times
            report.reset_elements += times * elements
            report.reset_cycles += times * -(-elements // accel.reset_lanes)
            return True
        return False


def _nest(s) -> tuple | None:
    """(store, times it runs) when ``s`` is a chain of constant loops around one store (a
    nest a DMA transfer or a reset instruction can stand for), else None.  The loops of a copy
    made by cache_read / cache_write each index the copied region, so the count is also the
    number of elements copied."""
    elements = 1
    while isinstance(s, For):
        if not (isinstance(s.extent, IntImm) and isinstance(s.min, IntImm)):
            return None
        elements *= s.extent.value
        s = s.body
    if not isinstance(s, BufferStore):
        return None
    return s, elements
