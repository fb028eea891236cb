"""Default schedules for functions without a tuning record: design-space sketches with
decisions chosen by a rule of thumb instead of at random.

A random sample of the design space is a valid program but often a slow one (a conv2d at a
few GFLOPS).  Here the first sketch is replayed with decisions set the way a hand-written CPU
schedule would set them:

* multi-level tiling (S0 S1 R0 S2 R1 S3): the innermost spatial axis is the vector axis, its
  register tile a multiple of the vector lanes (or the largest divisor up to the lanes); the
  largest other spatial axis is register-blocked (up to 8 rows, fewer for wide vector tiles)
  and its tiles iterate at level S1, inside the parallel S0 loops, so the operand they share
  stays in cache; every other spatial axis is parallel (S0); the first reduction axis is the
  outer reduction loop, the others (kernel window) run whole inside;
* compute locations: at the root (a padding stage is materialised once instead of guarding
  every load of the inner loop);
* parallel extent: 16 jobs per core; auto-unroll step 64.

Decisions of other rules keep the values of a seeded sample.  When the rule-of-thumb trace is
refused, the seeded sample itself is the default; when the first sketch cannot be sampled, a
seeded sample of any sketch.
"""
from __future__ import annotations

from tensor_ir.errors import TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from .errors import ScheduleError
from .space import Candidate, DesignSpace

__all__ = ["default_candidate"]

PARALLEL_KEY = "meta_schedule.parallel"
UNROLL_KEY = "meta_schedule.unroll_explicit"
JOBS_PER_CORE = 16
UNROLL_STEP = 64
MAX_REGISTER_ROWS = 8
# Accumulator budget of the register tile, in vector registers.
REGISTER_BUDGET = 24


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _vector_width(extent: int, lanes: int, bound: int) -> int:
    wide = [d for d in _divisors(extent) if d % lanes == 0 and d <= min(2 * lanes, bound)]
    if wide:
        return max(wide)
    return max(d for d in _divisors(extent) if d <= min(lanes, bound))


def _tiling_groups(insts) -> list[list[int]]:
    """Indices of consecutive sample_perfect_tile instructions (splits in between) of one
    multi-level tiling."""
    groups, current = [], []
    for k, inst in enumerate(insts):
        if inst.kind == "sample_perfect_tile":
            current.append(k)
        elif inst.kind == "split" and current:
            continue
        else:
            if current:
                groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def _loop_order(insts) -> dict[str, int]:
    """Loop variable -> its position in the nest that a get_loops instruction returned."""
    order = {}
    for inst in insts:
        if inst.kind == "get_loops":
            for position, loop in enumerate(inst.outputs):
                order.setdefault(loop, position)
    return order


def _tile_decisions(insts, group: list[int], lanes: int) -> dict[int, list[int]] | None:
    """Rule-of-thumb tile sizes for one tiling group; None when its shape is not the
    expected S/R structure."""
    # The tiling samples its loops in the order its budgets need (the innermost spatial loop
    # first, see MultiLevelTiling), not in nest order: the rule reads them in nest order.
    order = _loop_order(insts)
    group = sorted(group, key=lambda k: order.get(insts[k].inputs[0], len(order)))
    tiles = []
    for k in group:
        inst = insts[k]
        attrs = dict(inst.attrs)
        n = int(attrs.get("n", len(inst.decision)))
        extent = 1
        for f in inst.decision:
            extent *= int(f)
        tiles.append((k, n, extent, int(attrs.get("max_innermost_factor", 64))))
    levels = sorted({n for _, n, _, _ in tiles})
    if levels not in ([2, 4], [2, 3, 4], [2, 3]):
        return None
    n_s = max(levels)
    spatial = [t for t in tiles if t[1] >= 3]
    reduce = [t for t in tiles if t[1] == 2]
    if not spatial or not reduce:
        return None
    out: dict[int, list[int]] = {}
    vec = spatial[-1]
    packed = vec[1] == n_s - 1 and n_s == 4  # the lane split was done by the packing rule
    if packed:
        out[vec[0]] = [vec[2], 1, 1]
        width = lanes
    else:
        width = _vector_width(vec[2], lanes, vec[3])
        out[vec[0]] = [vec[2] // width, 1, 1, width]
    others = [t for t in spatial[:-1] if t[1] == 4]
    if len(others) != len(spatial) - 1:
        return None
    if others:
        reg = max(others, key=lambda t: (t[2], others.index(t)))
        rows_cap = max(1, min(MAX_REGISTER_ROWS, REGISTER_BUDGET * lanes // max(1, width),
                              reg[3]))
        rows = max(d for d in _divisors(reg[2]) if d <= rows_cap)
        for t in others:
            if t is reg:
                out[t[0]] = [1, t[2] // rows, 1, rows]
            else:
                out[t[0]] = [t[2], 1, 1, 1]
    for position, t in enumerate(reduce):
        if position == 0 or t[2] > t[3]:
            out[t[0]] = [t[2], 1]
        else:
            out[t[0]] = [1, t[2]]
    return out


def _annotation_sources(insts) -> dict[str, int]:
    """Annotation key -> index of the sample_categorical instruction whose value it takes."""
    producer = {}
    for k, inst in enumerate(insts):
        if inst.kind == "sample_categorical":
            for out in inst.outputs:
                producer[out] = k
    out = {}
    for inst in insts:
        if inst.kind == "annotate":
            key = dict(inst.attrs).get("key")
            for value in inst.inputs:
                if isinstance(value, str) and value in producer:
                    out[key] = producer[value]
    return out


def _closest(candidates, goal) -> int:
    return min(range(len(candidates)), key=lambda i: (abs(candidates[i] - goal), i))


def _rule_of_thumb(trace, target: Target):
    """``trace`` with the tile sizes, compute locations and annotations the module text
    describes."""
    insts = list(trace)
    lanes = max(1, target.vector_lanes("float32"))
    cores = max(1, target.num_cores or 1)
    changes: dict[int, object] = {}
    for group in _tiling_groups(insts):
        decided = _tile_decisions(insts, group, lanes)
        if decided:
            changes.update(decided)
    for k, inst in enumerate(insts):
        if inst.kind == "sample_compute_location":
            changes[k] = -1  # at the root
    sources = _annotation_sources(insts)
    for key, goal in ((PARALLEL_KEY, cores * JOBS_PER_CORE), (UNROLL_KEY, UNROLL_STEP)):
        k = sources.get(key)
        if k is not None:
            candidates = list(dict(insts[k].attrs)["candidates"])
            changes[k] = _closest(candidates, goal)
    for k, decision in changes.items():
        trace = trace.with_decision(k, decision)
    return trace


def default_candidate(func: PrimFunc, target: Target, seed: int = 0) -> Candidate | None:
    """The default schedule of ``func`` (see the module text) as a post-processed Candidate,
    or None when the design space yields no valid program at all.  A build without a record
    uses its ``func``; the tuner measures its ``final_trace`` first, so that tuning never ends
    with a record slower than that build: one construction serves both."""
    try:
        space = DesignSpace(func, target)
        base = space.sample(seed=seed, sketch=0)
    except (ScheduleError, TensorIRError):
        try:
            return DesignSpace(func, target).sample(seed=seed)
        except (ScheduleError, TensorIRError):
            return None
    return space.replay(_rule_of_thumb(base.trace, target), seed=seed, sketch=0) or base
