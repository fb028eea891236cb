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
  reduction by a sampled whole number of vector registers and factors out the inner part (a
  vector accumulator per row).  The innermost row loop of the final block is split by a
  sampled row count R, and the partials are computed at the outer row loop with the
  reduction loop outside the R rows (unrolled) and the lanes innermost:

      for rows in parallel(N / R):                  # row groups shared by the threads
          acc[R, w] = 0
          for ko in range(K / w):
              for r in unrolled(R):                 # R independent FMA chains; x[ko] is
                  for l in vectorized(w):           # loaded once for the R rows
                      acc[r, l] += x[ko*w + l] * W[rows*R + r, ko*w + l]
          for r in unrolled(R): y[rows*R + r] = sum(acc[r, :])

  With R unrolled the accumulators have constant indices, so LLVM keeps them in registers,
  and the R horizontal sums are independent (LLVM interleaves them with shuffles).  Each
  row's sum is still w dependent scalar adds (in order: no reassociation), so w is 1 or 2
  registers and the narrower is sampled more often: at 4 registers (64 lanes) that chain,
  not the stream of W, bounded the one-row form.

The rule returns the unchanged schedule as well as each rfactor variant, so search chooses.
The split factor is a ``sample_perfect_tile`` decision ("stream": two ``sample_categorical``
decisions, the accumulator width over the divisors of the reduction that are whole vector
registers, and the row count R over the divisors of the row loop up to ``MAX_STREAM_ROWS``).
"""
from __future__ import annotations

from tensor_ir.stmt import REDUCE, SPATIAL
from tensor_ir.target import Target

from ..errors import ScheduleError
from ..schedule import Schedule
from .base import ScheduleRule, try_on_copy
from .analysis import (
    block_info, const_extent, divisors, has_data_reuse, single_store, streams_along_reduction,
)
from .multi_level_tiling import TILING_KEY

RFACTOR_KEY = "meta_schedule.rfactor"
# "stream" variant: widest vector accumulator per row, in registers, and most rows per
# iteration.  2 x 8 = 16 accumulators leave half of AVX-512's 32 registers for x and W; on a
# 16-register target the widest combinations spill, and search measures them as slow.
MAX_STREAM_REGISTERS = 2
MAX_STREAM_ROWS = 8


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
        few_rows = spatial_extent < self.cores * self.max_jobs_per_core
        if few_rows:
            variants.append("outer")
        if not has_data_reuse(info.block):
            variants.append("inner")
            if few_rows and self.cores > 1 and reduce_extent >= 4 * self.lanes * self.cores:
                variants.append("outer_inner")
        elif first_reduce > 0 and streams_along_reduction(info.block) and self._stream_factors(
                reduce_extent):
            variants.append("stream")
        out = [sch]
        for variant in variants:
            done = try_on_copy(sch, lambda s, v=variant: self._rfactor(
                s, block, first_reduce, v, len(info.block.writes[0].region), reduce_extent))
            if done is not None:
                out.append(done)
        return out

    def _stream_factors(self, extent: int) -> list[int]:
        """Vector-accumulator widths for the "stream" variant: divisors of the reduction
        extent below it that are one or ``MAX_STREAM_REGISTERS`` whole registers wide (rows,
        not registers per row, give the independent FMA chains, and R rows of wider
        accumulators would run out of registers); when no divisor is a whole register, half
        then quarter registers (a reduction of 100 still streams 4 or 20 lanes at a time)."""
        for unit in (self.lanes, self.lanes // 2, self.lanes // 4):
            if unit < 2:
                break
            widths = [d for d in divisors(extent)
                      if d % unit == 0 and d <= MAX_STREAM_REGISTERS * self.lanes
                      and d < extent]
            if widths:
                return widths
        return []

    def _sketch_split(self, variant: str, extent: int) -> tuple[int, int]:
        """(outer, inner) for generating an "inner" or "outer" sketch, the factored part at
        least 2 long: for "inner" the widest inner part within the bound (whole vector
        registers where a divisor allows), for "outer" the widest inner part that still
        leaves two chunks or more."""
        fits = [d for d in divisors(extent) if 2 <= d <= self.max_innermost_factor]
        if variant == "outer":
            fits = [d for d in fits if d < extent] or [1]
            inner = max(fits)
        else:
            inner = max([d for d in fits if d % self.lanes == 0] or fits or [1])
        return extent // inner, inner

    @staticmethod
    def _stream_rows(extent: int) -> list[int]:
        """Row counts R for the "stream" variant: divisors of the row loop's extent up to
        MAX_STREAM_ROWS (1 keeps the one-row form; a prime extent offers only that)."""
        return [d for d in divisors(extent) if d <= MAX_STREAM_ROWS]

    def _rfactor(self, sch: Schedule, block: str, first_reduce: int, variant: str,
                 ndim: int, reduce_extent: int) -> None:
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        reduce_loops = loops[first_reduce:]
        fused = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
        if variant == "stream":
            rf = self._stream(sch, b, fused, first_reduce, ndim, reduce_extent)
        elif variant == "outer_inner":
            rf = self._outer_inner(sch, fused, ndim, reduce_extent)
        else:
            # The rule runs while sketches are generated, where a sampled split that leaves
            # the factored part one iteration long (1 is among the divisors drawn) makes
            # rfactor refuse and the variant vanish from the space: softmax's row maximum lost
            # its vectorised sketch to the draw while its row sum kept one.  The split is
            # given here; the sketch keeps only its structure, and sampling draws it afresh.
            tiles = sch.sample_perfect_tile(fused, n=2,
                                            max_innermost_factor=self.max_innermost_factor,
                                            decision=self._sketch_split(variant, reduce_extent))
            outer, inner = sch.split(fused, tiles)
            if variant == "outer":
                rf = sch.rfactor(outer, 0)
            else:
                rf = sch.rfactor(inner, ndim)
        sch.annotate(rf, RFACTOR_KEY, variant)
        sch.annotate(b, RFACTOR_KEY, "final")

    def _outer_inner(self, sch: Schedule, fused, ndim: int, reduce_extent: int):
        """Both at once, for a full reduction of streamed data (a norm, a sum to a scalar):
        "outer" alone spreads it over the cores with a scalar loop per chunk, "inner" alone
        vectorises it on one core.  The outer part (a sampled number of chunks, at least one
        per core) is factored out first, then each chunk's loop is split by a whole number of
        vector registers and that inner part is factored out of the chunk's partial block:

            for c in parallel(chunks):                       # C_rf_rf[c, lanes]
                for k in range(K / chunks / w):
                    for l in vectorized(w): acc[c, l] += A[...] * A[...]
            C_rf[c] = sum(acc[c, :]);  C = sum(C_rf[:])

        Returns the vectorised partials' block."""
        chunk_counts = [d for d in divisors(reduce_extent)
                        if self.cores <= d <= self.cores * self.max_jobs_per_core
                        and (reduce_extent // d) % self.lanes == 0]
        if not chunk_counts:
            raise ScheduleError("outer_inner rfactor: no chunk count leaves whole registers")
        uniform = [1.0 / len(chunk_counts)] * len(chunk_counts)
        chunks = sch.sample_categorical(chunk_counts, uniform)
        outer, _ = sch.split(fused, [chunks, None])
        chunk_rf = sch.rfactor(outer, 0)
        sch.annotate(chunk_rf, RFACTOR_KEY, "outer")
        per_chunk = reduce_extent // int(chunks)
        widths = [w for w in (self.lanes, 2 * self.lanes, 4 * self.lanes)
                  if per_chunk % w == 0 and w < per_chunk]
        if not widths:
            raise ScheduleError("outer_inner rfactor: a chunk is too short to vectorise")
        width = sch.sample_categorical(widths, [1.0 / len(widths)] * len(widths))
        (chunk_loop,) = sch.get_loops(chunk_rf)[-1:]  # the chunk's reduction loop
        _, lanes = sch.split(chunk_loop, [None, width])
        return sch.rfactor(lanes, ndim + 1)

    def _stream(self, sch: Schedule, b, fused, first_reduce: int, ndim: int,
                reduce_extent: int):
        """The "stream" structure of the module text; returns the partials' block."""
        widths = self._stream_factors(reduce_extent)
        # Narrow accumulators first: each row ends with ``width`` dependent scalar adds (the
        # lanes' sum, in order), which a wide accumulator makes the bound of the kernel
        # (one row at 64 lanes ran at 45 GFLOPS where 16 lanes ran at 67 on a 2-core Zen4).
        weights = [1.0 / w for w in widths]
        width = sch.sample_categorical(widths, [v / sum(weights) for v in weights])
        _, inner = sch.split(fused, [None, width])
        rf = sch.rfactor(inner, ndim)
        # rfactor rebuilt the final block's nest: its spatial loops, then the lanes' sum.
        row_loop = sch.get_loops(b)[first_reduce - 1]
        row_extent = const_extent(sch.get(row_loop))
        if row_extent is None:
            raise ScheduleError("stream rfactor: the row loop has no constant extent")
        counts = self._stream_rows(row_extent)
        count = sch.sample_categorical(counts, [1.0 / len(counts)] * len(counts))
        row_outer, row_inner = sch.split(row_loop, [None, count])
        sch.compute_at(rf, row_outer)
        # compute_at gives the partials one loop per iteration variable under row_outer:
        # the spatial axes (the last one spans the R rows), the outer reduction, the lanes.
        inside = sch.get_loops(rf)[first_reduce:]
        if len(inside) != first_reduce + 2:
            raise ScheduleError(f"stream rfactor: expected {first_reduce + 2} loops of the "
                                f"partials under the row loop, found {len(inside)}")
        rows, reduce_outer = inside[first_reduce - 1], inside[first_reduce]
        # Reduction outside the rows: each vector of the streamed operand's partner (x) is
        # loaded once for R rows, and the R accumulators are R independent FMA chains.
        sch.reorder(reduce_outer, rows)
        # Unrolled rows give the accumulators constant indices (registers, not memory) and
        # leave the R horizontal sums side by side for LLVM to interleave.
        sch.unroll(rows)
        sch.unroll(row_inner)
        return rf
