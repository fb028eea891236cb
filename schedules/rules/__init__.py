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
                              cache_write (or fused elementwise consumer), operand packing;
                              on a target offering tensor intrinsics, a matching block keeps
                              the intrinsic's tile innermost and is tensorized
                              (rules/auto_tensorize.py)
    transpose_tiling          cache-line tiles for a copy kernel that writes across its
                              innermost loop (a transpose, a relayout)
    parallel_vectorize_unroll annotate the root block with sampled parallel extent and unroll
                              step (realised by schedules.postproc)
    random_compute_location   sampled compute_at of producers that were not tiled or inlined

Rules for GPUs (``cuda``, ``opencl``), in order:

    auto_inline               as for CPUs
    cross_thread_reduction    row reductions over the threads of a block (one block per row),
                              with their per-row consumer in the same kernel
    multi_level_tiling_gpu    "SSSRRSRS" tiling of reductions with data reuse: blockIdx /
                              vthread / threadIdx levels, shared-memory cooperative fetch
                              of the operands (vectorised), register-level accumulator
                              written back per thread, a sampled unroll step
    auto_bind                 fuse, split by a sampled threads-per-block and bind to
                              blockIdx.x / threadIdx.x every block left unbound
"""
from __future__ import annotations

from tensor_ir.target import Target

from ..errors import ScheduleError
from .auto_bind import AutoBind
from .auto_inline import AutoInline
from .base import ScheduleRule, try_on_copy
from .cross_thread_reduction import CrossThreadReduction
from .multi_level_tiling import MultiLevelTiling
from .multi_level_tiling_gpu import MultiLevelTilingGPU
from .parallel_vectorize_unroll import ParallelVectorizeUnroll
from .random_compute_location import RandomComputeLocation
from .rfactor import AddRFactor
from .transpose_tiling import TransposeTiling


_REGISTRY = {"auto_inline": AutoInline, "rfactor": AddRFactor,
             "multi_level_tiling": MultiLevelTiling, "transpose_tiling": TransposeTiling,
             "parallel_vectorize_unroll": ParallelVectorizeUnroll,
             "random_compute_location": RandomComputeLocation,
             "cross_thread_reduction": CrossThreadReduction,
             "multi_level_tiling_gpu": MultiLevelTilingGPU, "auto_bind": AutoBind}

_CPU_RULES = ("auto_inline", "rfactor", "multi_level_tiling", "transpose_tiling",
              "parallel_vectorize_unroll", "random_compute_location")
_GPU_RULES = ("auto_inline", "cross_thread_reduction", "multi_level_tiling_gpu", "auto_bind")


def create(kind: str | ScheduleRule, **options) -> ScheduleRule:
    """A rule by its short name ("auto_inline", "rfactor", "multi_level_tiling",
    "transpose_tiling", "parallel_vectorize_unroll", "random_compute_location",
    "cross_thread_reduction", "multi_level_tiling_gpu", "auto_bind") or an instance passed
    through."""
    if isinstance(kind, ScheduleRule):
        if options:
            raise ScheduleError(f"create: options {sorted(options)} given with a rule instance")
        return kind
    if kind not in _REGISTRY:
        raise ScheduleError(f"unknown schedule rule {kind!r}; known: "
                            f"{', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[kind](**options)


def default_rules(target: Target) -> list[ScheduleRule]:
    """The rule set of ``target``'s kind (CPU or GPU), in application order, initialised for
    it."""
    if not isinstance(target, Target):
        raise ScheduleError(f"default_rules takes a resolved Target, got "
                            f"{type(target).__name__}")
    if target.is_cpu:
        names = _CPU_RULES
    elif target.is_gpu:
        names = _GPU_RULES
    else:
        raise ScheduleError(f"default_rules: no rule set for target kind {target.kind!r} "
                            f"({target})")
    rules = [create(k) for k in names]
    for rule in rules:
        rule.initialize(target)
    return rules


__all__ = ["ScheduleRule", "create", "default_rules", "try_on_copy"]
