"""The ScheduleRule ABC and the helper every rule uses to try a primitive sequence on a copy."""
from __future__ import annotations

import abc

from tensor_ir.target import Target

from ..errors import ScheduleError
from ..schedule import Schedule

__all__ = ["ScheduleRule", "try_on_copy"]


class ScheduleRule(abc.ABC):
    """One design-space rule.  ``initialize(target)`` reads hardware facts once;
    ``apply(sch, block)`` takes a block *name* and returns one or more schedules."""

    name = "rule"

    def initialize(self, target: Target) -> None:
        """Read the target's facts (vector lanes, cores); called once by the space generator."""

    @abc.abstractmethod
    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        """Schedules derived from ``sch`` for block ``block`` (``[sch]`` when not applicable)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def try_on_copy(sch: Schedule, action) -> Schedule | None:
    """Run ``action(copy)`` on a copy of ``sch``; the copy, or None when a primitive refused
    (a rule is several primitives, and a refusal halfway must not leave half a rule behind)."""
    new = sch.copy()
    try:
        action(new)
    except ScheduleError:
        return None
    return new
