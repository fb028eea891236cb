"""Post-processors: turn the design-space annotations into loop kinds, and reject programs
that break the target's limits.

A sampled program (a sketch replayed with decisions) still carries the root-block annotations
of rules/parallel_vectorize_unroll.py and its reductions still initialise inside their loops.
The post-processors finish it, through Schedule primitives so that what they do is recorded:

    DecomposeReductions            each reduction's init goes into a loop nest of its own,
                                   before its outermost reduction loop (no init branch in the
                                   inner loops, and the init nest can be vectorised)
    RewriteParallelVectorizeUnroll meta_schedule.vectorize: vectorise each block's innermost
                                   spatial loop when it is short enough (splitting a long one
                                   by a divisor); meta_schedule.parallel: fuse the leading
                                   parallelisable loops of each top-level nest until their
                                   extent reaches the sampled value, run them on threads;
                                   meta_schedule.unroll_explicit: pragma_auto_unroll_max_step
                                   on each top-level loop
    RewriteUnrollGPU               a GPU-tiled block's meta_schedule.unroll_explicit:
                                   pragma_auto_unroll_max_step on the outermost loop of its
                                   nest (the blockIdx loop; the code generator unrolls the
                                   loops under it that fit the step)
    VerifyCPU / VerifyGPU          reject (return False) programs the target cannot run well

The final trace is the decided trace, a two-instruction marker (``get_block("root")`` and
``annotate(root, "meta_schedule.postprocessed", 1)``), then the post-processors'
instructions.  It replays to the final program without running the post-processors again;
:func:`strip_postproc` cuts it back at the marker to the trace search mutates.  Running the
post-processors on a program that carries the marker only verifies it.
"""
from __future__ import annotations

import abc
import math

from tensor_ir.compact import plan_allocations
from tensor_ir.expr import IntImm
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import (
    PARALLEL, REDUCE, SERIAL, THREAD_BINDING, VECTORIZED, Block, BlockRealize, For,
    TensorIntrinCall,
)
from tensor_ir.target import Target
from tensor_ir.visitor import collect, walk

from . import tree
from .dependence import carried_dependence, reduce_feeder
from .errors import ScheduleError
from .primitives import annotate_ops
from .primitives import loops as loop_ops
from .rules.multi_level_tiling_gpu import MAX_VTHREAD
from .rules.parallel_vectorize_unroll import (
    MAX_VECTOR_EXTENT, PARALLEL_KEY, UNROLL_KEY, VECTORIZE_KEY,
)
from .schedule import Schedule
from .trace import Trace

POSTPROC_MARKER = "meta_schedule.postprocessed"
UNROLL_PRAGMA = "pragma_auto_unroll_max_step"


class Postproc(abc.ABC):
    """One post-processor.  ``apply`` returns False to reject the program; a rewriting
    post-processor (``rewrites = True``) is skipped on an already post-processed program."""

    rewrites = True

    def initialize(self, target: Target) -> None:
        """Read the target's facts once."""

    @abc.abstractmethod
    def apply(self, sch: Schedule) -> bool:
        """Finish or check ``sch`` in place; False rejects it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _root_annotations(sch: Schedule) -> dict:
    root = tree.find_block(sch.func, "root").node.block
    return dict(root.annotations)


# ---------------------------------------------------------------------------------------------
# Rewriting post-processors
# ---------------------------------------------------------------------------------------------

class DecomposeReductions(Postproc):
    """decompose_reduction of every reduction block at its outermost reduction loop."""

    def apply(self, sch: Schedule) -> bool:
        for loc in tree.all_blocks(sch.func):
            realize: BlockRealize = loc.node
            block: Block = realize.block
            if block.init is None or self.keeps_init(loc):
                continue
            reduce_vals = [v for iv, v in zip(block.iter_vars, realize.iter_values)
                           if iv.kind == REDUCE]
            loops = loc.loops
            pos = next((k for k, lp in enumerate(loops)
                        if any(_uses(v, lp.loop_var) for v in reduce_vals)), None)
            if pos is None:
                continue  # every reduction loop has extent 1 and was simplified away
            rvs = sch.get_loops(sch.get_block(block.name))
            try:
                sch.decompose_reduction(sch.get_block(block.name), rvs[pos])
            except ScheduleError:
                continue  # e.g. a loop binds spatial and reduce variables; keep the init
        return True

    def keeps_init(self, loc: tree.Located) -> bool:
        """Whether the reduction block at ``loc`` must keep its init (none must here)."""
        return False


class DecomposeReductionsGPU(DecomposeReductions):
    """DecomposeReductions, except for cross-thread reductions (a reduction loop bound to a
    thread axis): the GPU lowering (tensor_ir.thread_reduce) needs such a block whole, its
    init inside, to know the identity each thread starts its share from."""

    def keeps_init(self, loc: tree.Located) -> bool:
        realize: BlockRealize = loc.node
        reduce_vals = [v for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                       if iv.kind == REDUCE]
        return any(isinstance(n, For) and n.kind == THREAD_BINDING
                   and any(_uses(v, n.loop_var) for v in reduce_vals) for n in loc.path)


def _uses(expr, var) -> bool:
    from tensor_ir.visitor import uses_var

    return uses_var(expr, var)


class RewriteParallelVectorizeUnroll(Postproc):
    """Realise the root block's meta_schedule.* annotations (see the module text)."""

    def __init__(self):
        self.lanes = 16

    def initialize(self, target: Target) -> None:
        self.lanes = max(1, target.vector_lanes("float32")) if target.is_cpu else 1

    def apply(self, sch: Schedule) -> bool:
        notes = _root_annotations(sch)
        keys = [k for k in (PARALLEL_KEY, VECTORIZE_KEY, UNROLL_KEY) if k in notes]
        if not keys:
            return True
        root = sch.get_block("root")
        for key in keys:
            sch.unannotate(root, key)
        max_vector = int(notes.get(VECTORIZE_KEY, 0) or 0)
        if max_vector > 1:
            self._vectorize(sch, max_vector)
        parallel = int(notes.get(PARALLEL_KEY, 1) or 1)
        if parallel > 1:
            self._parallel(sch, parallel)
        unroll = int(notes.get(UNROLL_KEY, 0) or 0)
        if unroll > 0:
            for name in _nest_heads(sch):
                loops = sch.get_loops(sch.get_block(name))
                if loops:
                    sch.annotate(loops[0], UNROLL_PRAGMA, unroll)
        return True

    # -- vectorize ---------------------------------------------------------------------------
    def _vectorize(self, sch: Schedule, max_vector: int) -> None:
        for loc in tree.all_blocks(sch.func):
            name = loc.node.block.name
            loc = tree.find_block(sch.func, name)  # earlier splits replaced its loops
            loops = loc.loops
            if not loops or loc.path[-1] is not loops[-1]:
                continue  # the block is not the whole body of its innermost loop
            if isinstance(loc.node.block.body, TensorIntrinCall):
                continue  # a tensorized tile is one vector operation already
            inner = loops[-1]
            if inner.kind != SERIAL or not isinstance(inner.extent, IntImm):
                continue
            extent = inner.extent.value
            if extent < 2:
                continue
            if not _concurrent_ok(sch, inner):
                continue
            rv = sch.get_loops(sch.get_block(name))[-1]
            if extent > max_vector:
                width = _vector_split(extent, max_vector, self.lanes)
                if width is None:
                    continue
                rv = sch.split(rv, [None, width])[1]
            try:
                sch.vectorize(rv)
            except ScheduleError:
                continue

    # -- parallel ----------------------------------------------------------------------------
    def _parallel(self, sch: Schedule, target_extent: int) -> None:
        for name in _nest_heads(sch):
            loc = tree.find_block(sch.func, name)
            chain = _perfect_prefix(loc.loops)
            legal = []
            for lp in chain:
                if not isinstance(lp.extent, IntImm) or not _concurrent_ok(sch, lp):
                    break
                legal.append(lp)
            count, product = 0, 1
            for lp in legal:
                count += 1
                product *= lp.extent.value
                if product >= target_extent:
                    break
            # Loops that are each parallelisable may not be provably so once fused (the
            # dependence test sees div/mod of the fused variable): try fewer on the pure
            # function before recording anything.
            while count > 0:
                if math.prod(lp.extent.value for lp in legal[:count]) < 2:
                    count = 0
                    break
                if _fused_parallel_ok(sch, legal[:count]):
                    break
                count -= 1
            if count == 0:
                continue
            rvs = sch.get_loops(sch.get_block(name))[:count]
            fused = sch.fuse(*rvs) if count > 1 else rvs[0]
            sch.parallel(fused)


def _fused_parallel_ok(sch: Schedule, loops: list[For]) -> bool:
    try:
        func = sch.func
        if len(loops) > 1:
            func, var = loop_ops.fuse(func, [lp.loop_var for lp in loops])
        else:
            var = loops[0].loop_var
        annotate_ops.parallel(func, var)
    except ScheduleError:
        return False
    return True


def _concurrent_ok(sch: Schedule, loop: For) -> bool:
    """Whether the loop's iterations may run at once: the parallel primitive's conditions
    (serial, feeds no reduction, carries no dependence), checked without rewriting the
    function so that nothing is recorded and no tree is rebuilt."""
    if loop.kind != SERIAL or loop.thread_binding is not None:
        return False
    if reduce_feeder(loop) is not None:
        return False
    outer = tree.find_loop(sch.func, loop.loop_var).loops
    return carried_dependence(sch.func.body, loop, outer=outer, as_kind=(PARALLEL, None)) is None


def _vector_split(extent: int, max_vector: int, lanes: int) -> int | None:
    """The inner factor a long loop is split by before vectorising: the largest divisor of its
    extent within ``max_vector`` that is a whole number of registers, else of half registers;
    None when no such divisor exists (a prime extent stays scalar)."""
    divisors = [d for d in range(2, max_vector + 1) if extent % d == 0]
    for unit in (lanes, max(2, lanes // 2)):
        fits = [d for d in divisors if d % unit == 0]
        if fits:
            return max(fits)
    return None


def _perfect_prefix(loops: list[For]) -> list[For]:
    """The leading loops of a nest that are perfectly nested (each the whole body of the
    previous): only those can be fused."""
    out = []
    for lp in loops:
        if out and out[-1].body is not lp:
            break
        out.append(lp)
    return out


def _nest_heads(sch: Schedule) -> list[str]:
    """One block name per top-level loop nest under the root (the first block of the nest)."""
    seen, names = set(), []
    for loc in tree.all_blocks(sch.func):
        loops = loc.loops
        parent = loc.parent_block
        if parent is not None and parent.name != "root":
            continue
        if not loops:
            continue
        head = loops[0].loop_var
        if head in seen:
            continue
        seen.add(head)
        names.append(loc.node.block.name)
    return names


class RewriteUnrollGPU(Postproc):
    """Realise the ``meta_schedule.unroll_explicit`` annotation the GPU tiling rule puts on
    the block it tiles (see the module text).  MetaSchedule annotates the first loop of each
    nest under the root; a GPU-tiled block's nest holds its init, fetches and write-back too,
    so all of them are under the pragma."""

    def apply(self, sch: Schedule) -> bool:
        for loc in tree.all_blocks(sch.func):
            block = loc.node.block
            if block.name == "root" or UNROLL_KEY not in dict(block.annotations):
                continue
            step = int(dict(block.annotations)[UNROLL_KEY] or 0)
            rv = sch.get_block(block.name)
            sch.unannotate(rv, UNROLL_KEY)
            loops = sch.get_loops(rv)
            if step > 0 and loops:
                sch.annotate(loops[0], UNROLL_PRAGMA, step)
        return True


# ---------------------------------------------------------------------------------------------
# Verifiers
# ---------------------------------------------------------------------------------------------

class VerifyCPU(Postproc):
    """Limits of a CPU target: no GPU thread bindings; no parallel loop inside another (the
    runtime would run it serially -- a waste of a sampled choice); vectorised loops of
    constant extent within the vector limit, with no parallel or vectorised loop and no
    tensorized tile inside."""

    rewrites = False

    def __init__(self, max_vector_extent: int = MAX_VECTOR_EXTENT):
        self.max_vector_extent = max_vector_extent

    def apply(self, sch: Schedule) -> bool:
        return verify_cpu(sch.func, self.max_vector_extent) is None


def verify_cpu(func, max_vector_extent: int = MAX_VECTOR_EXTENT) -> str | None:
    """Why ``func`` breaks a CPU limit, or None when it does not."""
    problems: list[str] = []

    def visit(node, in_parallel: bool, in_vector: bool):
        if isinstance(node, For):
            name = node.loop_var.name
            if node.kind == THREAD_BINDING:
                problems.append(f"loop {name} is bound to {node.thread_binding}")
                return
            if node.kind == PARALLEL and (in_parallel or in_vector):
                problems.append(f"parallel loop {name} is nested in a parallel or vectorised "
                                f"loop")
                return
            if node.kind == VECTORIZED:
                if in_vector:
                    problems.append(f"vectorised loop {name} is nested in another")
                    return
                if not isinstance(node.extent, IntImm):
                    problems.append(f"vectorised loop {name} has a non-constant extent")
                    return
                if node.extent.value > max_vector_extent:
                    problems.append(f"vectorised loop {name} has extent {node.extent.value} > "
                                    f"{max_vector_extent}")
                    return
            visit(node.body, in_parallel or node.kind == PARALLEL,
                  in_vector or node.kind == VECTORIZED)
            return
        if isinstance(node, TensorIntrinCall) and in_vector:
            # The code generator emits a tile once, as scalar code around its instruction.
            problems.append(f"tensor intrinsic {node.intrin} is inside a vectorised loop")
            return
        for child in _stmt_children(node):
            visit(child, in_parallel, in_vector)

    visit(func.body, False, False)
    return problems[0] if problems else None


def _stmt_children(node):
    from tensor_ir.stmt import Stmt
    from tensor_ir.visitor import children

    return [c for c in children(node) if isinstance(c, Stmt)]


class VerifyGPU(Postproc):
    """Limits of a CUDA target: threads per block (in all and along each axis), virtual
    threads per kernel and shared memory per block (counted on the compacted tiles)."""

    rewrites = False

    def __init__(self, max_vthread: int = MAX_VTHREAD):
        self.max_threads = 1024
        self.max_shared = 48 * 1024
        self.max_vthread = max_vthread

    def initialize(self, target: Target) -> None:
        self.max_threads = target.max_threads_per_block or self.max_threads
        self.max_shared = target.max_shared_memory_per_block or self.max_shared

    def apply(self, sch: Schedule) -> bool:
        return verify_gpu(sch.func, self.max_threads, self.max_shared,
                          self.max_vthread) is None


# Per-axis block dimensions CUDA allows (every GPU candidate must also build for CUDA; OpenCL
# devices report their own, at least as large on the devices this project targets).
MAX_THREAD_EXTENT = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}


def verify_gpu(func, max_threads: int, max_shared: int,
               max_vthread: int = MAX_VTHREAD) -> str | None:
    """Why ``func`` breaks a GPU limit, or None.  Virtual threads count per kernel: the
    product of the vthread loops around each statement (nested ones multiply, as their
    iterations all run in one real thread)."""
    threads: dict[str, int] = {}
    vthreads = _max_vthreads(func.body)
    if vthreads is not None and vthreads[0] > max_vthread:
        return f"{vthreads[0]} virtual threads (loop {vthreads[1]}) > {max_vthread}"
    for loop in collect(func.body, For):
        if loop.kind == THREAD_BINDING and loop.thread_binding.startswith("threadIdx"):
            if not isinstance(loop.extent, IntImm):
                return f"thread-bound loop {loop.loop_var.name} has a non-constant extent"
            axis = loop.thread_binding
            if loop.extent.value > MAX_THREAD_EXTENT.get(axis, max_threads):
                return (f"loop {loop.loop_var.name} has {loop.extent.value} threads along "
                        f"{axis} > {MAX_THREAD_EXTENT[axis]}")
            threads[axis] = max(threads.get(axis, 1), loop.extent.value)
    total = math.prod(threads.values()) if threads else 1
    if total > max_threads:
        return f"{total} threads per block > {max_threads}"
    # A shared buffer is allocated (by cache_read) with the operand's whole shape; what a block
    # holds is the tile compaction shrinks it to (tensor_ir.compact), so that is what counts.
    plans = plan_allocations(func)
    shared = 0

    def count(node):
        nonlocal shared
        if isinstance(node, Block):
            for buf in node.alloc_buffers:
                if buf.scope == "shared":
                    plan = plans.get(buf)
                    shared += (plan.new_buffer if plan is not None else buf).nbytes

    walk(func.body, count)
    if shared > max_shared:
        return f"{shared} bytes of shared memory per block > {max_shared}"
    return None


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------

def _max_vthreads(body) -> tuple[int, str] | None:
    """(the largest product of nested vthread loops, the innermost loop of it), or None when
    there is no vthread loop; a non-constant extent counts as unbounded."""
    best: tuple[int, str] | None = None

    def visit(node, product: int):
        nonlocal best
        if isinstance(node, For):
            if node.kind == THREAD_BINDING and node.thread_binding == "vthread":
                extent = node.extent.value if isinstance(node.extent, IntImm) else 1 << 30
                product *= extent
                if best is None or product > best[0]:
                    best = (product, node.loop_var.name)
            visit(node.body, product)
            return
        for child in _stmt_children(node):
            visit(child, product)

    visit(body, 1)
    return best


def default_postprocs(target: Target) -> list[Postproc]:
    """The post-processors of ``target``'s kind, initialised for it."""
    if not isinstance(target, Target):
        raise ScheduleError(f"default_postprocs takes a resolved Target, got "
                            f"{type(target).__name__}")
    if target.is_gpu:
        procs: list[Postproc] = [DecomposeReductionsGPU(), RewriteParallelVectorizeUnroll(),
                                 RewriteUnrollGPU(), VerifyGPU()]
    else:
        procs = [DecomposeReductions(), RewriteParallelVectorizeUnroll(), VerifyCPU()]
    for proc in procs:
        proc.initialize(target)
    return procs


def apply_postprocs(sch: Schedule, postprocs: list[Postproc]) -> bool:
    """Run ``postprocs`` on ``sch`` in place; False when one rejects the program.  The rewriting
    ones run only once per program (see the marker in the module text)."""
    done = POSTPROC_MARKER in _root_annotations(sch)
    if not done:
        sch.annotate(sch.get_block("root"), POSTPROC_MARKER, 1)
    for proc in postprocs:
        if done and proc.rewrites:
            continue
        if not proc.apply(sch):
            return False
    return True


def replay(trace: Trace, func: PrimFunc, target: Target) -> Schedule:
    """The program a stored trace stands for: ``trace`` replayed on ``func`` and
    post-processed for ``target``.  A final trace (what the database keeps) carries the
    post-processors' marker, so only the verifying ones run again.  Every consumer of a
    record -- a build, a model build, a tuning result, a re-measurement -- goes through here.
    Raises ScheduleError when a primitive refuses the trace or a verifier the program."""
    sch = trace.apply(func)
    if not apply_postprocs(sch, default_postprocs(target)):
        raise ScheduleError(f"the recorded schedule of {func.name} is rejected by the "
                            f"post-processors for {target}")
    return sch


def strip_postproc(trace: Trace) -> Trace:
    """The part of a final trace before the post-processors (what search mutates)."""
    for k, inst in enumerate(trace):
        if inst.kind == "annotate" and dict(inst.attrs).get("key") == POSTPROC_MARKER:
            start = k
            if k > 0 and trace[k - 1].kind == "get_block" and \
                    trace[k - 1].outputs == (inst.inputs[0],):
                start = k - 1
            return trace.truncated(start)
    return trace


__all__ = ["Postproc", "DecomposeReductions", "DecomposeReductionsGPU",
           "RewriteParallelVectorizeUnroll", "RewriteUnrollGPU", "VerifyCPU",
           "VerifyGPU", "default_postprocs", "apply_postprocs", "replay", "strip_postproc",
           "verify_cpu", "verify_gpu", "MAX_THREAD_EXTENT", "POSTPROC_MARKER"]
