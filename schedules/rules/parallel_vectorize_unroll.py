"""ParallelVectorizeUnroll: whole-function annotations on the root block, with sampled values,
that the postproc (schedules/postproc.py, RewriteParallelVectorizeUnroll) turns into loop
kinds once every tile size is known:

    meta_schedule.parallel         sampled parallel extent P: each top-level loop nest fuses
                                   its leading parallelisable loops until their extent
                                   reaches P, and runs them on threads (P = 1: serial)
    meta_schedule.vectorize        the longest loop to vectorise (a target fact, not sampled)
    meta_schedule.unroll_explicit  sampled auto-unroll step: pragma_auto_unroll_max_step on
                                   each top-level loop (0: none)

Annotating instead of fusing here keeps the sketch valid for every tile size search may try:
the number of loops to fuse depends on the sampled extents, and the postproc recomputes it on
each replay.  The sampled values are recorded as sample_categorical decisions that the
annotate instructions consume, so mutating a decision changes the annotation.
"""
from __future__ import annotations

from tensor_ir.target import Target

from ..schedule import Schedule
from .base import ScheduleRule

PARALLEL_KEY = "meta_schedule.parallel"
VECTORIZE_KEY = "meta_schedule.vectorize"
UNROLL_KEY = "meta_schedule.unroll_explicit"

# The code generator emits vectors of up to 64 lanes (wider ones are split by LLVM anyway).
MAX_VECTOR_EXTENT = 64


class ParallelVectorizeUnroll(ScheduleRule):
    """``parallel_jobs_per_core``: candidate parallel extents as multiples of the core count
    (1 stands for "serial" and is offered as the first candidate); ``unroll_steps`` with their
    probabilities; ``vectorize_lanes``: the vector registers' worth of lanes a vectorised loop
    may span (times the target's lanes, capped at 64)."""

    name = "parallel_vectorize_unroll"

    def __init__(self, parallel_jobs_per_core=(1, 4, 16, 64), serial_prob: float = 0.1,
                 unroll_steps=(0, 16, 64, 512), unroll_probs=(0.25, 0.25, 0.25, 0.25),
                 vectorize_registers: int = 4):
        self.parallel_jobs_per_core = tuple(parallel_jobs_per_core)
        self.serial_prob = serial_prob
        self.unroll_steps = tuple(unroll_steps)
        self.unroll_probs = tuple(unroll_probs)
        self.vectorize_registers = vectorize_registers
        self.cores = 1
        self.lanes = 16

    def initialize(self, target: Target) -> None:
        self.cores = max(1, target.num_cores or 1)
        self.lanes = max(1, target.vector_lanes("float32"))

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        if block != "root":
            return [sch]
        new = sch.copy()
        root = new.get_block("root")
        if self.cores > 1:
            extents = sorted({self.cores * j for j in self.parallel_jobs_per_core})
            candidates = [1] + extents
            rest = (1.0 - self.serial_prob) / len(extents)
            extent = new.sample_categorical(candidates, [self.serial_prob] + [rest] * len(extents))
            new.annotate(root, PARALLEL_KEY, extent)
        if self.lanes > 1:
            new.annotate(root, VECTORIZE_KEY,
                         min(MAX_VECTOR_EXTENT, self.lanes * self.vectorize_registers))
        if self.unroll_steps:
            step = new.sample_categorical(list(self.unroll_steps), list(self.unroll_probs))
            new.annotate(root, UNROLL_KEY, step)
        return [new]
