"""Handles (random variables, "RVs") a Schedule hands out: blocks, loops and sampled values.

A handle is only a name (``b0``, ``l3``, ``v5``).  The Schedule that created it keeps a symbol
table from names to what they stand for: a block name for a ``BlockRV``, a loop variable object
for a ``LoopRV`` (primitives keep the variable of every loop they do not replace, so the handle
survives rewrites elsewhere) and an int for an ``ExprRV``.  Because handles are names, they stay
valid in a copy of the schedule and in the trace's JSON form.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockRV:
    """A block handle; resolves by block name against the schedule's current function."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class LoopRV:
    """A loop handle; resolves to a loop variable (or the root / inline compute location)."""

    name: str

    def __repr__(self) -> str:
        return self.name


class ExprRV(int):
    """A sampled integer.  It is an ``int`` (usable directly as a split factor), and it carries
    the handle name so that a primitive receiving it records the sample, not the number: a
    replay with a mutated decision then feeds the new value into that primitive."""

    def __new__(cls, value: int, name: str):
        obj = super().__new__(cls, int(value))
        obj.name = name
        return obj

    def __repr__(self) -> str:
        return f"{self.name}={int(self)}"

    def __reduce__(self):
        return (ExprRV, (int(self), self.name))


# Compute locations that are not loops: what sample_compute_location may return besides a loop.
ROOT = "root"
INLINE = "inline"

