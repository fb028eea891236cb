"""MultiLevelTiling: Ansor's "SSRSRS" tiling of reductions with data reuse, for CPUs.

Each spatial loop is split into 4 sampled levels and each reduction loop into 2; the levels
are interleaved as S0 S1 R0 S2 R1 S3::

    for i0, j0:                  S0  -- fused and parallelised by the postproc
      for i1, j1:                S1
        for k0:                  R0
          for i2, j2:            S2
            for k1:              R1
              for i3, j3:        S3  -- register tile: j3 vectorised, i3 unrolled
                C_local[i, j] += A[i, k] * B[k, j]
        (write-back of C_local, or the fused elementwise consumer, at level 1 or 2)

The result is accumulated in a register-level ``local`` buffer (cache_write) whose write-back
is placed by reverse_compute_at after the S0 (level 1) or S1 (level 2) loops; when the block's
only consumer is elementwise (a bias add, a relu), that consumer is fused there instead, so
the intermediate never round-trips through memory.  With ``pack``, an input read along the
vectorised axis and a reduction axis (B of a matmul) is also read through a copy packed into
panels as wide as the register tile (see rules/packing.py); the vectorised loop is then split
by the panel width first so that the register tile's width is exactly one panel.

Tile sizes are ``sample_perfect_tile`` decisions, sampled innermost loop first within the
vector register file: for a short reduction (a 3x3 depthwise or pooling window, at most
SHORT_REDUCTION iterations) the whole accumulator tile -- the levels inside the write-back --
since such a block cannot amortise accumulators that live in memory; for a long one the
register tile (S3) alone, so that its FMAs do not round-trip through memory.  Sketch-level
alternatives (one schedule each): the write-back level, packed / not packed, and, where the
loop outside the vectorised one has no divisor near the rows the registers hold (7 or 14 pixels
on AVX2), a fixed row count that does not divide it, its last iteration guarded.  The block is
annotated ``meta_schedule.tiling_structure`` so later rules leave it alone.

A packed sketch on a CPU also samples how far ahead its register tile prefetches the panel it
streams (``sample_categorical`` over ``prefetch_bytes``, 0 for none, mutated by search): the
first loop of the innermost reduction level is annotated ``pragma_prefetch_bytes`` (see the
LLVM codegen).  It pays where the panel comes from L3 (8x32 tiles on the BERT layer's FFN2
ran 5-18% faster 1-2 KiB ahead) and costs where a tile reuses each panel slice from L1 over
many rows, so it is the search's choice, not a default.

Every sketch of a long reduction on a CPU likewise samples how many copies of the register
tile's step one iteration of the reduction loop around it holds (``unroll_by``, 1 for a plain
loop): the innermost loop of the innermost reduction level, of the last reduction axis longer
than 1, is annotated ``pragma_unroll_by``.  LLVM does not unroll that loop (it is too long to
unroll whole), and a tile with registers to spare runs its FMAs closer to peak with copies
(BERT's 4x24 matmul tiles 2-5% faster, its attention matmuls 15-20%), while a tile that
fills the register file spills with them (ResNet-18's 7x16 Winograd tiles ran 1.3-1.4x).

When the target offers tensor intrinsics (``Target.intrinsics``) and the block matches one
(see rules/auto_tensorize.py: after packing an operand if its tile is not laid out as the
intrinsic needs), the sketches keep the intrinsic's tile innermost and tensorize it instead:
one per write-back level and matching loop assignment, and no plain ones -- the intrinsic does
the tile's arithmetic in one instruction where plain code needs several per element.
"""
from __future__ import annotations

from tensor_ir.arith import linear_form
from tensor_ir.expr import BufferLoad
from tensor_ir.stmt import REDUCE, SPATIAL
from tensor_ir.target import Target
from tensor_ir.visitor import uses_var

from ..errors import ScheduleError
from ..schedule import Schedule
from .base import ScheduleRule, try_on_copy
from .analysis import (
    block_info, divisors, has_data_reuse, is_elementwise_consumer, read_loads, single_store,
    writes_param,
)
from .auto_tensorize import finish_tensorized, match, resolve_intrinsics, tile_tensorized
from .packing import PackPlan, plan_packing
from .. import tree

TILING_KEY = "meta_schedule.tiling_structure"
# Reductions of at most this many iterations per output (pooling and depthwise windows) get
# their accumulator tile bounded by the vector register file.
SHORT_REDUCTION = 32
# Panel prefetch distances a packed sketch samples from (bytes ahead; 0: none).  1-2 KiB is
# 8-16 reduction steps of a 32-float panel, what measured best on the BERT layer's matmuls.
PREFETCH_BYTES = (0, 512, 1024, 2048)
# The loop annotation the LLVM codegen prefetches by (tensor_ir.codegen.llvm.PREFETCH_KEY;
# spelled out like postproc's unroll pragma, so that schedules need no code generator).
PREFETCH_KEY = "pragma_prefetch_bytes"
# Copies of the register tile's step per iteration of the reduction loop around it that a
# long reduction's sketch samples from (1: a plain loop), and the annotation the LLVM codegen
# copies by (tensor_ir.codegen.llvm.UNROLL_BY_KEY).  8 copies of a 4x24 tile ran at 0.80 of
# the FMA peak on Zen 3 where the plain loop ran at 0.72.
UNROLL_BY = (1, 4, 8)
UNROLL_BY_KEY = "pragma_unroll_by"
# Bound of the innermost sampled factor around a tensorized tile: that level counts whole
# intrinsic calls (16 int32 lanes each for VNNI), whose accumulators should stay in registers.
TENSORIZED_INNERMOST_FACTOR = 8
# The wider packed panel a sketch may also take, in vector registers (see _pack_plans).
PANEL_REGISTERS_WIDE = 3


class MultiLevelTiling(ScheduleRule):
    """Options: ``structure`` (letters S and R, outer to inner), ``max_innermost_factor``
    (bound of the innermost sampled factor), ``write_levels`` (write-back levels to offer,
    1-based: after the first / second S group), ``pack`` (offer packed sketches),
    ``intrinsics`` (tensor intrinsic names to tensorize with; None: the target's, empty:
    never tensorize), ``prefetch_bytes`` (the panel prefetch distances a packed sketch samples
    from on a CPU, 0 for none; empty: never prefetch), ``unroll_by`` (the copies of the
    register tile's step per reduction iteration a long reduction's sketch samples from on a
    CPU; empty or only 1: never copied)."""

    name = "multi_level_tiling"

    def __init__(self, structure: str = "SSRSRS", max_innermost_factor: int = 64,
                 write_levels=(1, 2), pack: bool = True, intrinsics=None,
                 prefetch_bytes=PREFETCH_BYTES, unroll_by=UNROLL_BY):
        structure = structure.upper()
        if not structure or set(structure) - {"S", "R"} or "S" not in structure:
            raise ScheduleError(f"MultiLevelTiling: structure {structure!r} must be letters S "
                                f"and R with at least one S")
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        n_s = structure.count("S")
        self.write_levels = tuple(lv for lv in write_levels if 1 <= lv < n_s) or (None,)
        self.pack = pack
        self.lanes = 16
        self.register_elements = 32 * 16
        self.intrinsic_names = None if intrinsics is None else tuple(intrinsics)
        self.intrinsics: tuple = ()
        distances = tuple(prefetch_bytes)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in distances):
            raise ScheduleError(f"MultiLevelTiling: prefetch_bytes {prefetch_bytes!r} must be "
                                f"whole numbers of bytes, 0 for none")
        self.prefetch_options = distances if len(set(distances)) > 1 or any(distances) else ()
        self.prefetch_bytes: tuple = ()
        copies = tuple(unroll_by)
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in copies):
            raise ScheduleError(f"MultiLevelTiling: unroll_by {unroll_by!r} must be whole "
                                f"numbers of copies, 1 for a plain loop")
        self.unroll_options = copies if any(c > 1 for c in copies) else ()
        self.unroll_by: tuple = ()

    def initialize(self, target: Target) -> None:
        self.lanes = max(1, target.vector_lanes("float32"))
        self.intrinsics = resolve_intrinsics(target, self.intrinsic_names)
        # AVX-512 (and AArch64) have 32 vector registers, AVX2 and SSE 16.  A GPU thread's
        # registers are another matter (its rules bound them by thread count): no budget.
        if target.is_cpu:
            registers = 32 if (target.vector_bits or 0) >= 512 or target.triple.startswith(
                "aarch64") else 16
            self.register_elements = registers * self.lanes
        else:
            self.register_elements = None
        # The annotation is the LLVM codegen's: other targets never see it.
        self.prefetch_bytes = self.prefetch_options if target.is_cpu else ()
        self.unroll_by = self.unroll_options if target.is_cpu else ()

    # -- applicability ---------------------------------------------------------------------
    def applicable(self, sch: Schedule, block: str):
        info = block_info(sch.func, block)
        if info is None or block == "root" or not info.trivially_bound:
            return None
        if not info.is_reduction or single_store(info.block) is None:
            return None
        if info.block.init is None or info.annotation(TILING_KEY) is not None:
            return None
        if info.annotation("meta_schedule.rfactor") is not None:
            return None  # one half of an rfactor pair: its sketch chose rfactor over tiling
        if not has_data_reuse(info.block):
            return None
        if info.extent_product(SPATIAL) <= 1:
            return None  # nothing to tile spatially: a full reduction is rfactor's job
        return info

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        info = self.applicable(sch, block)
        if info is None:
            return [sch]
        inlined = _inline_layout_copies(sch, block)
        if inlined is not sch:
            sch, info = inlined, self.applicable(inlined, block)
            if info is None:
                return [sch]
        if self.intrinsics:
            tensorized = self._tensorized_sketches(sch, block, info)
            if tensorized:
                return tensorized
        spatial = [k for k, kind in enumerate(info.loop_kinds) if kind == SPATIAL]
        last = spatial[-1]
        # (vectorised loop, packing plan, register-tile width): the innermost spatial loop,
        # packed or not; the same with its register tile cut to half registers when its
        # extent is no whole number of registers (56 pixels: 8 lanes rather than 14, 28 or
        # 56, which split into odd pieces and spill once rows are unrolled); and, when the
        # innermost loop vectorises badly, an outer one read through a packed operand.
        # The fourth member, where not None, is a row count (loop, rows) for a register tile
        # whose rows need not divide their loop (see _remainder_rows).
        variants: list[tuple[int, PackPlan | None, int | None, tuple[int, int] | None]] = [
            (last, None, None, None)]
        rows = self._remainder_rows(info, spatial)
        if rows is not None:
            variants.append((last, None, None, rows))
        extent, half = info.loops[last].extent.value, self.lanes // 2
        if extent % self.lanes and half >= 4 and extent % half == 0 and extent > half:
            variants.append((last, None, half, None))
        if self.pack:
            variants.extend((last, plan, plan.width, None)
                            for plan in self._pack_plans(sch, info, last))
            variants.extend((k, p, p.width, None)
                            for k, p in self._outer_vector_variants(sch, info, spatial))
        out = []
        for vec, plan, width, rows in variants:
            for level in self.write_levels:
                done = try_on_copy(sch, lambda s: self._tile(s, block, info, level, plan, vec,
                                                             width, rows))
                if done is not None:
                    out.append(done)
        return out or [sch]

    def _remainder_rows(self, info, spatial: list[int]) -> tuple[int, int] | None:
        """(loop, rows) for a register tile of ``rows`` rows along the spatial loop just
        outside the vectorised one, when its extent has no divisor near the row count the
        register file holds and a count that does not divide it comes nearer.  Sampled
        tiles divide their loops, so a 7x7 convolution on AVX2 had a tile of 1 or 7 pixels:
        7 rows of two-register accumulators are 14 of the 16 registers, and the panel and the
        broadcast spill (MobileNetV2's late 1x1 convolutions ran 1.13-1.44x onnxruntime's
        time).  Rows are what fits beside a two-register panel and a broadcast (6 on AVX2,
        14 with 32 registers), evened out over the iterations: 7 -> 4 + 3, 14 -> 5 + 5 + 4
        (with 32 registers 7 and 14 divide themselves, and nothing changes).
        The split guards its last iteration with a predicate; the tile sizes left to
        sample are the outer loop's, which stay perfect."""
        if self.register_elements is None or len(spatial) < 2:
            return None
        row = next((k for k in reversed(spatial[:-1]) if info.loops[k].extent.value > 1), None)
        if row is None:
            return None
        extent = info.loops[row].extent.value
        registers = self.register_elements // self.lanes
        most = (registers - 3) // 2
        rows = -(-extent // -(-extent // most))
        best_divisor = max(d for d in divisors(extent) if d <= most)
        # Only where the divisors fall short by half: a 4-row tile of 28 or 56 pixels, or 128
        # matmul rows, holds 8 accumulators, and a fixed sketch more would thin the search
        # of the sampled ones for little.
        if extent <= most or 2 * best_divisor >= most or extent % rows == 0:
            return None
        return row, rows

    def _tensorized_sketches(self, sch: Schedule, block: str, info) -> list[Schedule]:
        """One sketch per matching plan of the target's intrinsics and write-back level (the
        first intrinsic that matches wins: a target lists its intrinsics best first)."""
        for intrin in self.intrinsics:
            out = []
            for plan in match(sch.func, info, intrin):
                for level in self.write_levels:
                    done = try_on_copy(sch, lambda s, p=plan, lv=level: self._tile_tensorized(
                        s, block, info, p, lv))
                    if done is not None:
                        out.append(done)
            if out:
                return out
        return []

    def _tile_tensorized(self, sch: Schedule, block: str, info, plan, level) -> None:
        innermost = min(self.max_innermost_factor, TENSORIZED_INNERMOST_FACTOR)
        b, s_groups, first_reduce, tile_loop = tile_tensorized(
            sch, block, info, plan, self.structure, innermost)
        sch.annotate(b, TILING_KEY, self.structure)
        if level is not None:
            self._write(sch, b, block, s_groups[level - 1][-1])
        finish_tensorized(sch, b, plan, first_reduce, tile_loop)

    def _pack_plan(self, sch: Schedule, info, vec: int) -> PackPlan | None:
        extent = info.loops[vec].extent.value
        width = 2 * self.lanes if extent >= 2 * self.lanes else self.lanes
        if extent < width or width < 2:
            return None
        return plan_packing(sch.func, info.block, info.loop_iters[vec].var, width)

    def _pack_plans(self, sch: Schedule, info, vec: int) -> list[PackPlan]:
        """Packing plans for a register tile vectorised over the innermost loop: panels two
        registers wide, and three where they divide the loop.  A tile of R rows holds R
        accumulators per register of width; three wide, 8 rows keep 24 accumulators (of 32
        AVX-512 registers) and load 3 panel vectors and 8 broadcasts per 24 FMAs, against
        16 accumulators and 2 + 8 loads per 16 FMAs two wide -- the 12x32 shape of MLAS's
        kernel, turned for row counts that 12 does not divide.  On the BERT layer's matmul
        shapes (128 rows, 2 threads, hand-written schedules alike but for the width) 8x48
        tiles ran 4-20% faster than 8x32 (10th percentiles), in the same rounds."""
        first = self._pack_plan(sch, info, vec)
        if first is None:
            return []
        plans = [first]
        extent, wide = info.loops[vec].extent.value, PANEL_REGISTERS_WIDE * self.lanes
        if wide > first.width and extent % wide == 0:
            plan = plan_packing(sch.func, info.block, info.loop_iters[vec].var, wide)
            if plan is not None:
                plans.append(plan)
        return plans

    def _outer_vector_variants(self, sch: Schedule, info, spatial: list[int]):
        """Sketches vectorised over an outer spatial loop (the output channels of an NCHW
        convolution) when the innermost one is a poor vector axis: its extent is not a whole
        number of registers (7, 14, 28 or 56 pixels) or it walks an input with a stride
        (a strided convolution gathers).  The operand indexed by the outer loop (the weights)
        is packed so that each register-tile step loads one contiguous vector of it and
        broadcasts one element of the other input."""
        last = spatial[-1]
        if self._vectorises_well(info, last):
            return []
        out = []
        for k in reversed(spatial[:-1]):
            extent = info.loops[k].extent.value
            if extent % self.lanes or extent < self.lanes:
                continue
            plan = self._pack_plan(sch, info, k)
            var = info.loop_iters[k].var
            if plan is None or any(uses_var(i, var) for ld in read_loads(info.block)
                                   if ld.buffer.name != plan.buffer for i in ld.indices):
                continue  # the other inputs must be broadcast along the vector (not depthwise)
            out.append((k, plan))
            break
        return out

    def _vectorises_well(self, info, k: int) -> bool:
        if info.loops[k].extent.value % self.lanes:
            return False
        var = info.loop_iters[k].var
        for ld in read_loads(info.block):
            for index in ld.indices:
                if uses_var(index, var) and linear_form(index).coeff(var) not in (0, 1):
                    return False
        return True

    # -- the rule's instructions -----------------------------------------------------------
    def _tile(self, sch: Schedule, block: str, info, level, plan: PackPlan | None,
              vec: int, width: int | None, rows: tuple[int, int] | None = None) -> None:
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        kinds = info.loop_kinds
        n_s, n_r = self.structure.count("S"), self.structure.count("R")
        spatial = [k for k, kind in enumerate(kinds) if kind == SPATIAL]
        # Register budget.  A short reduction (a 3x3 window) cannot amortise accumulators
        # kept in memory: its accumulator tile -- the S levels inside the write-back -- must
        # fit the vector registers.  A long reduction amortises an accumulator tile in L1 over
        # its many steps, but its register tile -- the innermost S level, vectorised and
        # unrolled inside the innermost reduction loop -- must still fit, or its FMAs
        # round-trip through memory: only that level is bounded (unbounded, 141 of 200 samples
        # of a 1x1x1 conv3d and 36 of 200 of a 1024^3 matmul had a larger one).  Each spatial
        # loop's inner factors are sampled within what the loops sampled before it left of the
        # budget, innermost loop first: the loops that walk memory contiguously get the first
        # claim on the registers.
        short = info.extent_product(REDUCE) <= SHORT_REDUCTION
        acc_levels = n_s - (level or n_s - 1) if short else 1
        budget = self.register_elements if n_s >= 2 and self.register_elements else None
        # Register-tile factors fixed by the sketch, per loop: the register width (one panel
        # of a packed operand) and a row count that need not divide its loop.
        fixed = {vec: width} if width is not None else {}
        if rows is not None:
            fixed[rows[0]] = rows[1]
        # Factors (sampled handles or ints) already in the accumulator tile; the fixed ones
        # are in it from the start, whichever loop carries them.
        used: list = list(fixed.values())

        def sample(loop, n, levels=None):
            """Tile ``loop`` in ``n``; ``levels`` inner ones in the accumulator budget."""
            if budget is None or levels is None:
                return sch.sample_perfect_tile(loop, n=n,
                                               max_innermost_factor=self.max_innermost_factor)
            tiles = sch.sample_perfect_tile(loop, n=n,
                                            max_innermost_factor=self.max_innermost_factor,
                                            inner_budget=budget, inner_levels=levels,
                                            budget_used=list(used))
            used.extend(tiles[n - levels:])
            return tiles

        parts: dict[int, list] = {}
        for k in (range(len(loops) - 1, -1, -1) if budget is not None else range(len(loops))):
            loop, kind = loops[k], kinds[k]
            n = n_s if kind == SPATIAL else n_r
            if k in fixed and n >= 2:
                # Split the fixed factor off first, tile the rest over the outer levels.  A
                # row count that does not divide the loop makes the split guard its last
                # iteration.
                outer, inner = sch.split(loop, [None, fixed[k]])
                tiles = sample(outer, n - 1, acc_levels - 1)
                parts[k] = sch.split(outer, tiles) + [inner] if n > 2 else [outer, inner]
                continue
            tiles = sample(loop, n, acc_levels if kind == SPATIAL and n >= 2 else None)
            parts[k] = sch.split(loop, tiles) if n > 1 else [loop]
        # Interleave: the k-th S letter takes level k of every spatial loop, likewise for R.
        order, s_seen, r_seen, s_groups, r_groups = [], 0, 0, [], []
        for letter in self.structure:
            if letter == "S":
                group = [parts[k][s_seen] for k in range(len(kinds)) if kinds[k] == SPATIAL]
                if s_seen == n_s - 1 and vec != spatial[-1]:
                    # The register tile's vectorised level goes innermost.
                    group.append(group.pop(spatial.index(vec)))
                s_groups.append(group)
                s_seen += 1
            else:
                group = [parts[k][r_seen] for k in range(len(kinds)) if kinds[k] == REDUCE]
                r_groups.append(group)
                r_seen += 1
            order.extend(group)
        sch.reorder(*order)
        sch.annotate(b, TILING_KEY, self.structure)
        if vec != spatial[-1]:
            self._write_transposed(sch, b, block, info, vec,
                                   s_groups[(level or n_s - 1) - 1][-1])
        elif level is not None:
            self._write(sch, b, block, s_groups[level - 1][-1])
        if plan is not None:
            sch.pack_layout(b, plan.buffer, plan.index_map())
            if self.prefetch_bytes and r_groups and r_groups[-1]:
                # The register tile streams the packed panel along the innermost reduction
                # level; every panel load under that level's first loop walks along it.
                n = len(self.prefetch_bytes)
                ahead = sch.sample_categorical(list(self.prefetch_bytes), [1.0 / n] * n)
                sch.annotate(r_groups[-1][0], PREFETCH_KEY, ahead)
        long_axes = [k for k in range(len(kinds))
                     if kinds[k] == REDUCE and info.loops[k].extent.value > 1]
        if self.unroll_by and not short and budget is not None and long_axes and n_r >= 1:
            # The loop directly around the register tile, or as near it as a loop that can
            # have more than one iteration gets (a 1x1 convolution's window loops cannot).
            n = len(self.unroll_by)
            copies = sch.sample_categorical(list(self.unroll_by), [1.0 / n] * n)
            sch.annotate(parts[long_axes[-1]][n_r - 1], UNROLL_BY_KEY, copies)

    def _write(self, sch: Schedule, b, block: str, at) -> None:
        """Fuse the single elementwise consumer at loop ``at``; otherwise accumulate in a
        local buffer whose write-back goes there."""
        user = _elementwise_consumer(sch.func, block)
        if user is not None:
            # A refused fusion leaves only a get_block behind, which changes nothing.
            try:
                sch.reverse_compute_at(sch.get_block(user), at)
                return
            except ScheduleError:
                pass
        write_back = sch.cache_write(b, 0, "local")
        sch.reverse_compute_at(write_back, at)

    def _write_transposed(self, sch: Schedule, b, block: str, info, vec: int, at) -> None:
        """Accumulate in a local buffer whose innermost dimension is the vectorised one (so the
        register tile's accumulators are whole vectors), written back at loop ``at``; a single
        elementwise consumer is folded into the write-back."""
        store = single_store(info.block)
        var = info.loop_iters[vec].var
        dims = [d for d, e in enumerate(store.indices) if e is var]
        if len(dims) != 1:
            raise ScheduleError(f"MultiLevelTiling: {block} does not store along its "
                                f"vectorised loop")
        dim = dims[0]
        user = _elementwise_consumer(sch.func, block)  # asked before the cache changes it
        write_back = sch.cache_write(b, 0, "local")
        if dim != len(store.indices) - 1:
            sch.transform_layout(b, 0, lambda *idx: idx[:dim] + idx[dim + 1:] + (idx[dim],))
        sch.reverse_compute_at(write_back, at)
        if user is not None:
            try:
                sch.reverse_compute_inline(sch.get_block(user))
            except ScheduleError:
                pass  # a refused inline records nothing


def _elementwise_consumer(func, block: str) -> str | None:
    """The name of ``block``'s only consumer when that consumer is elementwise in it."""
    users = tree.consumers(func, block)
    if len(users) != 1:
        return None
    producer = tree.find_block(func, block).node.block
    consumer = tree.find_block(func, users[0]).node.block
    return users[0] if is_elementwise_consumer(func, consumer, producer) else None


def _inline_layout_copies(sch: Schedule, block: str) -> Schedule:
    """Inline the producers of ``block`` that only copy a function parameter to a new layout
    (a transpose or reshape stage: ``value_T[b, h, d, s] = value[b, s, h, d]``), before the
    block is tiled.  AutoInline inlines them anyway, but it comes to a producer after its
    consumer: tiled first, the block reads the intermediate, and the packing plan (which
    packs parameters only) misses the operand whose real layout makes the vector loads
    gathers.  Inlined first, the block reads the parameter and its transposed operand is
    packed into panels like any other (the attention-score matmul ``Q K^T``)."""
    current = sch
    for name in tree.producers(current.func, block):
        info = block_info(current.func, name)
        if info is None or not info.is_spatial or info.block.alloc_buffers:
            continue
        store = single_store(info.block)
        if store is None or not isinstance(store.value, BufferLoad):
            continue
        if store.value.buffer not in set(current.func.params) or writes_param(current.func,
                                                                               info.block):
            continue
        done = try_on_copy(current, lambda s, n=name: s.compute_inline(s.get_block(n)))
        if done is not None:
            current = done
    return current
