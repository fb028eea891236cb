"""AddRFactor: split a reduction into partial results (rfactor) where that pays on a CPU.

Two situations:

* little spatial parallelism (a GEMV with one row, a full reduction to a scalar, a norm over a
  few rows): the reduction itself must be spread over the cores.  The fused reduction loop is
  split by a sampled factor and the *outer* part is factored out, so the partial-result block
  has a spatial loop over the outer part that the postproc parallelises;
* a reduction along contiguous memory without data reuse (softmax's and layer norm's row sums):
  a plain reduction loop cannot be vectorised (every iteration updates the same element).
  Factoring out the *inner* part gives partials ``C_rf[i, ki]`` whose loop over ``ki`` is
  spatial and innermost, which the postproc vectorises; a short serial reduction then adds the
  ``ki`` partials.

* a reduction whose dominant input is streamed along the reduction axis with no reuse (the
  weight ``W[n, k]`` of a batch-1 dense): the kernel is bound by reading that input once, so
  each row must be reduced with contiguous vector loads.  The "stream" variant splits the
  reduction by a sampled whole number of vector registers, factors out the inner part (a
  vector accumulator per row) and computes the partials at the row loop of the final block,
  so the accumulator is reused across rows and the horizontal sum follows each row.

The rule returns the unchanged schedule as well as each rfactor variant, so search chooses.
The split factor is a ``sample_perfect_tile`` decision ("stream": a ``sample_categorical``
over the divisors that are multiples of the vector width).
"""
from __future__ import annotations

from tensor_ir.stmt import REDUCE, SPATIAL
from tensor_ir.target import Target

from ..schedule import Schedule
from . import ScheduleRule, try_on_copy
from .analysis import (
    block_info, divisors, has_data_reuse, single_store, streams_along_reduction,
)
from .multi_level_tiling import TILING_KEY

RFACTOR_KEY = "meta_schedule.rfactor"


class AddRFactor(ScheduleRule):
    """``max_jobs_per_core``: below ``cores * max_jobs_per_core`` spatial iterations a
    reduction counts as poorly parallel; ``max_innermost_factor`` bounds the sampled inner
    factor (the vector width of the partials)."""

    name = "rfactor"

    def __init__(self, max_jobs_per_core: int = 16, max_innermost_factor: int = 64):
        self.max_jobs_per_core = max_jobs_per_core
        self.max_innermost_factor = max_innermost_factor
        self.cores = 1
        self.lanes = 16

    def initialize(self, target: Target) -> None:
        self.cores = max(1, target.num_cores or 1)
        self.lanes = max(1, target.vector_lanes("float32"))

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        info = block_info(sch.func, block)
        if info is None or block == "root" or not info.trivially_bound:
            return [sch]
        if not info.is_reduction or single_store(info.block) is None or info.block.init is None:
            return [sch]
        if info.annotation(TILING_KEY) is not None or info.annotation(RFACTOR_KEY) is not None:
            return [sch]
        kinds = info.loop_kinds
        first_reduce = kinds.index(REDUCE)
        if any(k == SPATIAL for k in kinds[first_reduce:]):
            return [sch]  # reduction loops must be innermost to be fused into one
        reduce_extent = info.extent_product(REDUCE)
        spatial_extent = info.extent_product(SPATIAL)
        if reduce_extent < 2 * self.lanes:
            return [sch]
        variants = []
        if spatial_extent < self.cores * self.max_jobs_per_core:
            variants.append("outer")
        if not has_data_reuse(info.block):
            variants.append("inner")
        elif first_reduce > 0 and streams_along_reduction(info.block) and self._stream_factors(
                reduce_extent):
            variants.append("stream")
        out = [sch]
        for variant in variants:
            done = try_on_copy(sch, lambda s: self._rfactor(s, block, first_reduce, variant,
                                                           len(info.block.writes[0].region),
                                                           reduce_extent))
            if done is not None:
                out.append(done)
        return out

    def _stream_factors(self, extent: int) -> list[int]:
        """Vector-accumulator widths for the "stream" variant: divisors of the reduction
        extent that are 1 to 4 registers wide (more registers only lengthen the final sum)."""
        return [d for d in divisors(extent)
                if d % self.lanes == 0 and d <= 4 * self.lanes and d < extent]

    def _rfactor(self, sch: Schedule, block: str, first_reduce: int, variant: str,
                 ndim: int, reduce_extent: int) -> None:
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        reduce_loops = loops[first_reduce:]
        fused = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
        if variant == "stream":
            widths = self._stream_factors(reduce_extent)
            width = sch.sample_categorical(widths, [1.0 / len(widths)] * len(widths))
            outer, inner = sch.split(fused, [None, width])
            rf = sch.rfactor(inner, ndim)
            # Partials of one row at a time, next to the row's horizontal sum: the
            # accumulator stays hot and the postproc parallelises the rows of both stages.
            sch.compute_at(rf, sch.get_loops(b)[first_reduce - 1])
        else:
            tiles = sch.sample_perfect_tile(fused, n=2,
                                            max_innermost_factor=self.max_innermost_factor)
            outer, inner = sch.split(fused, tiles)
            if variant == "outer":
                rf = sch.rfactor(outer, 0)
            else:
                rf = sch.rfactor(inner, ndim)
        sch.annotate(rf, RFACTOR_KEY, variant)
        sch.annotate(b, RFACTOR_KEY, "final")
