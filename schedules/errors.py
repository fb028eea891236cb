"""ScheduleError and the check() guard used by every primitive."""
from __future__ import annotations


class ScheduleError(ValueError):
    """A primitive's precondition failed.  The message names the block or loop and the condition;
    the schedule is left as it was."""


def check(cond: bool, message: str) -> None:
    if not cond:
        raise ScheduleError(message)
