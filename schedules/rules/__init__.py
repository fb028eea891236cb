"""Design-space rules: each rule looks at one block of a schedule and returns the schedules it
turns it into (sketches), recording sampling instructions for every choice search should make.

    rules = default_rules(Target("llvm"))
    for rule in rules: states = [s for st in states for s in rule.apply(st, "C")]

A rule that does not apply to a block returns ``[sch]`` unchanged; a rule never raises
ScheduleError for a block it cannot handle (it works on a copy and skips).  The space
generator (schedules/space.py) visits the blocks of a function from its last block to its
first, so consumers are tiled before their producers pick a compute location inside them, and
the root block comes last (whole-function annotations).

Rules for CPUs (the order of ``default_rules``, as in MetaSchedule):

    auto_inline               inline elementwise / broadcast stages
    rfactor                   rfactor reductions with little parallelism or contiguous
                              reduction axes (GEMV, softmax, norms)
    multi_level_tiling        "SSRSRS" tiling with sampled tile sizes, register-level
                              cache_write (or fused elementwise consumer), operand packing
    parallel_vectorize_unroll annotate the root block with sampled parallel extent and unroll
                              step (realised by schedules.postproc)
    random_compute_location   sampled compute_at of producers that were not tiled or inlined
"""
from __future__ import annotations

from tensor_ir.target import Target

from ..errors import ScheduleError
from .auto_inline import AutoInline
from .base import ScheduleRule, try_on_copy
from .multi_level_tiling import MultiLevelTiling
from .parallel_vectorize_unroll import ParallelVectorizeUnroll
from .random_compute_location import RandomComputeLocation
from .rfactor import AddRFactor


_REGISTRY = {"auto_inline": AutoInline, "rfactor": AddRFactor,
             "multi_level_tiling": MultiLevelTiling,
             "parallel_vectorize_unroll": ParallelVectorizeUnroll,
             "random_compute_location": RandomComputeLocation}


def create(kind: str | ScheduleRule, **options) -> ScheduleRule:
    """A rule by its short name ("auto_inline", "rfactor", "multi_level_tiling",
    "parallel_vectorize_unroll", "random_compute_location") or an instance passed through."""
    if isinstance(kind, ScheduleRule):
        if options:
            raise ScheduleError(f"create: options {sorted(options)} given with a rule instance")
        return kind
    if kind not in _REGISTRY:
        raise ScheduleError(f"unknown schedule rule {kind!r}; known: "
                            f"{', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[kind](**options)


def default_rules(target: Target) -> list[ScheduleRule]:
    """The CPU rule set, in application order, initialised for ``target``."""
    if not isinstance(target, Target):
        raise ScheduleError(f"default_rules takes a resolved Target, got "
                            f"{type(target).__name__}")
    if not target.is_cpu:
        raise ScheduleError(f"default_rules: only CPU (llvm) targets have a rule set yet, got "
                            f"{target}")
    rules = [create(k) for k in ("auto_inline", "rfactor", "multi_level_tiling",
                                 "parallel_vectorize_unroll", "random_compute_location")]
    for rule in rules:
        rule.initialize(target)
    return rules


__all__ = ["ScheduleRule", "create", "default_rules", "try_on_copy"]
