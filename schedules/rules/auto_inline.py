"""AutoInline: inline elementwise and broadcast stages into their consumers (or an elementwise
output stage into its elementwise producer), so that fused operators become one loop nest.

Deterministic (no sampling): inlining a stage that only maps indices one to one never costs
memory traffic and leaves fewer loop nests for the other rules.  Two kinds of stage are left
alone on purpose:

* stages that write a function parameter (the output must stay) -- except that an elementwise
  output stage is folded into its elementwise producer with reverse_compute_inline;
* padding-like stages (a select between a load and a constant): inlined, the select lands in
  the consumer's innermost loop where it costs a per-lane branch, so whether to inline them is
  left to RandomComputeLocation, whose sampled location includes "inline";
* stages that call a costly function (exp, erf, tanh, ...) and feed more than one consumer:
  inlined, each consumer would compute it again (softmax's exp is read by its sum and by the
  division: inlined, the kernel evaluates twice the exps and ran 2x slower).  Those too are
  left to RandomComputeLocation.
"""
from __future__ import annotations

from tensor_ir.expr import Call
from tensor_ir.visitor import collect

from .. import tree
from ..schedule import Schedule
from .base import ScheduleRule, try_on_copy
from .analysis import block_info, has_guarded_load, single_store, writes_param

# Intrinsics that cost many instructions per element (a polynomial or a libm call): worth
# computing once and storing rather than recomputing in each consumer.
COSTLY_CALLS = frozenset({"exp", "exp2", "log", "log2", "erf", "tanh", "sigmoid", "pow",
                          "sin", "cos"})


class AutoInline(ScheduleRule):
    """``into_consumer``: compute_inline spatial intermediate stages; ``into_producer``:
    reverse_compute_inline spatial output stages whose producer is spatial."""

    name = "auto_inline"

    def __init__(self, into_consumer: bool = True, into_producer: bool = True,
                 inline_padding: bool = False):
        self.into_consumer = into_consumer
        self.into_producer = into_producer
        self.inline_padding = inline_padding

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        info = block_info(sch.func, block)
        if info is None or block == "root" or not info.is_spatial:
            return [sch]
        if single_store(info.block) is None or info.block.alloc_buffers:
            return [sch]
        if not self.inline_padding and has_guarded_load(info.block):
            return [sch]
        output = writes_param(sch.func, info.block)
        if (not output and _calls_costly(info.block)
                and len(tree.consumers(sch.func, block)) > 1):
            return [sch]
        if output:
            if not self.into_producer:
                return [sch]
            done = try_on_copy(sch, lambda s: s.reverse_compute_inline(s.get_block(block)))
        else:
            if not self.into_consumer:
                return [sch]
            done = try_on_copy(sch, lambda s: s.compute_inline(s.get_block(block)))
        return [done if done is not None else sch]


def _calls_costly(block) -> bool:
    return any(c.name in COSTLY_CALLS for c in collect(block.body, Call))
