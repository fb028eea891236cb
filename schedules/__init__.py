"""schedules: Schedule, handles, primitives and replayable traces with sampling decisions.

    from schedules import Schedule
    sch = Schedule(func, seed=0)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [None, 32])
    Trace.from_json(sch.trace.to_json()).apply(func)     # the same program again
"""
from __future__ import annotations

from .errors import ScheduleError, check
from .handles import INLINE, ROOT, BlockRV, ExprRV, LoopRV
from .instructions import InstructionKind, get_kind, register
from .schedule import Schedule
from .trace import Instruction, Trace

__all__ = ["Schedule", "ScheduleError", "check", "BlockRV", "LoopRV", "ExprRV", "ROOT",
           "INLINE", "Instruction", "Trace", "InstructionKind", "register", "get_kind"]
