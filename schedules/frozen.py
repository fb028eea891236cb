"""Frozen JSON values: instructions keep their inputs, attributes and decisions with lists
turned into tuples (so they are immutable and hashable), and thaw them back for JSON."""
from __future__ import annotations

from .errors import ScheduleError

__all__ = ["freeze", "thaw"]


def freeze(value):
    """Deep-copy a JSON value with lists turned into tuples (instructions are immutable)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return {k: freeze(v) for k, v in value.items()}
    return value


def thaw(value):
    """The JSON form of a frozen value: tuples become lists, dict keys stay sorted."""
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    if isinstance(value, dict):
        return {k: thaw(value[k]) for k in sorted(value)}
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        return int(value)  # an ExprRV is stored as its plain value
    raise ScheduleError(f"trace: value {value!r} of type {type(value).__name__} is not JSON")
