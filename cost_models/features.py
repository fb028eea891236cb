"""Per-store feature vectors of lowered programs, aggregated to one fixed-length row per candidate.

In the spirit of Ansor's per-store features.  Extraction runs in two steps so that the first
can be cached per sketch later (only loop extents change between candidates of one sketch):

1. :func:`analyze` walks the lowered program once and records, for every ``BufferStore``, its
   enclosing loops (extent, kind, annotations), its guard conditions, its arithmetic counted
   by kind (per execution), and for every buffer it touches the *stride matrix*: the partial
   derivative of each index dimension with respect to each enclosing loop variable, taken
   analytically from the index expressions (``v // c`` has slope ``1/c``, ``v % c`` slope 1).
2. :func:`store_features` turns that record into numbers with numpy: executions are products
   of extents; footprints (unique elements, cache lines) at every loop level follow from the
   stride matrix and the extents, never from iterating loops.  :func:`program_features`
   aggregates the stores (sum, max and the dominant store) and appends global features.

GPU programs (a target that ``is_gpu``, or with no target given, a program with loops bound
to ``blockIdx``/``threadIdx``/``vthread``) are lowered as the GPU build lowers them
(:func:`tensor_ir.thread_reduce.lower_for_gpu`: cross-thread reductions become a per-thread
accumulation and a shared-memory tree) and fill the GPU block, the last ``len(GPU_FEATURES)``
columns of the global section (``global.gpu_*``); for CPU programs it is all zeros, so a CPU row
means what it meant in version 1.  The block holds the dominant kernel's launch (threads per
block, blocks, vthreads, warps), its shared memory per block, local bytes and an estimate of the
registers per thread, the blocks per multiprocessor each resource allows under the target's
limits (:class:`GpuLimits`) and the occupancy that follows, global traffic and arithmetic per
global byte, and the per-store GPU values (:data:`GPU_STORE_FEATURES`) aggregated like the
store rows (sum, max, dominant store): accesses per thread, the coalescing of each global
access (the stride, in elements, of the access along the kernel's innermost-varying thread
index: 0 broadcast, 1 coalesced, more strided), shared accesses whose stride makes bank
conflicts likely, and whether the store belongs to a cross-thread reduction.

A tensorized tile (``TensorIntrinCall``) is featurised as what it computes: the intrinsic's
description expanded onto the program's buffers (:func:`tensor_ir.intrinsics.expand`), so its
arithmetic, loads and footprints count like any store's; its stores also say how many
iterations one intrinsic call covers (``tensor_intrin_tile``) and how many calls run
(``tensor_intrin_calls``): the same loops cost far less as one instruction.

Every value is non-negative and log-transformed (``log2(1 + x)``).  :func:`extract` is the
batched entry point: ``extract(funcs, target=None) -> ndarray [n, NUM_FEATURES]`` (float32).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tensor_ir import dtype as dt
from tensor_ir import intrinsics
from tensor_ir.arith import int_bound
from tensor_ir.buffer import Buffer
from tensor_ir.expr import (
    And,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Not,
    Or,
    Select,
    Var,
)
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.stmt import (
    PARALLEL,
    SERIAL,
    THREAD_BINDING,
    UNROLLED,
    VECTORIZED,
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    TensorIntrinCall,
)
from tensor_ir.target import Target
from tensor_ir.thread_reduce import lower_cross_thread_reductions
from tensor_ir.visitor import collect

# Bump when the layout or meaning of the vector changes: stored models check it.
# 2: the GPU block at the end of the global section (zeros for CPU programs).
# 3: tensor_intrin_tile and tensor_intrin_calls at the end of the loop features.
# 4: prefetch_bytes at the end of the loop features.
# 5: unroll_by after it.
FEATURE_VERSION = 5

CACHE_LINE_BYTES = 64
# The loop annotation the LLVM codegen prefetches by (tensor_ir.codegen.llvm.PREFETCH_KEY).
_PREFETCH_KEY = "pragma_prefetch_bytes"
# The loop annotation the LLVM codegen copies a loop's body by (tensor_ir.codegen.llvm.
# UNROLL_BY_KEY).
_UNROLL_BY_KEY = "pragma_unroll_by"
TOP_BUFFERS = 4          # buffers per store, the largest by accessed bytes first
CURVE_POINTS = 10        # samples of the arithmetic-intensity curve over loop levels
UNKNOWN_EXTENT = 1       # a loop extent that is not a constant and has no bound

_LOOP_KINDS = (SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD_BINDING)


class FeatureError(ValueError):
    """A candidate could not be featurised (it does not lower, or holds unsupported IR)."""


# ---------------------------------------------------------------------------------------------
# Feature layout
# ---------------------------------------------------------------------------------------------

# Arithmetic per store execution, by kind; multiplied by the number of executions.
OP_KINDS = (
    "float_addsub", "float_mul", "float_div", "float_minmax", "float_fma", "float_cmp",
    "float_math", "int_addsub", "int_mul", "int_divmod", "int_minmax", "int_cmp", "bool_op",
    "select", "cast", "load",
)
_OP_INDEX = {k: i for i, k in enumerate(OP_KINDS)}
_FLOAT_OPS = ("float_addsub", "float_mul", "float_div", "float_minmax", "float_cmp",
              "float_math")

LOOP_FEATURES = (
    "executions", "executions_unguarded", "guard_evals", "num_loops", "innermost_extent",
    *(f"innermost_{k}" for k in _LOOP_KINDS),
    "vectorized_num", "vectorized_lanes", "unrolled_num", "unrolled_prod", "parallel_num",
    "parallel_prod", "work_per_thread", "block_idx_prod", "thread_idx_prod", "vthread_prod",
    "auto_unroll_max_step", "auto_unroll_covered", "accumulate", "annotated_loops",
    "tensor_intrin_tile", "tensor_intrin_calls", "prefetch_bytes", "unroll_by",
)

BUFFER_FEATURES = (
    "present", "is_read", "is_write", "is_local", "elem_bytes", "bytes", "unique_bytes",
    "lines", "unique_lines", "reuse_loop", "reuse_serial", "reuse_none", "reuse_dis_iter",
    "reuse_dis_bytes", "reuse_ct", "bytes_per_reuse", "stride_innermost", "stride_nonzero",
    "contiguous_inner", "broadcast_inner", "contiguous_run_bytes",
)

INTENSITY_FEATURES = ("flops", "intensity_bytes", "intensity_unique",
                      *(f"intensity_curve_{k}" for k in range(CURVE_POINTS)))

STORE_FEATURE_NAMES = (
    tuple(f"op_{k}" for k in OP_KINDS) + LOOP_FEATURES
    + tuple(f"buf{b}_{k}" for b in range(TOP_BUFFERS) for k in BUFFER_FEATURES)
    + INTENSITY_FEATURES
)
NUM_STORE_FEATURES = len(STORE_FEATURE_NAMES)

GLOBAL_FEATURES = (
    "num_stores", "num_loops", "num_nests", "alloc_num", "alloc_bytes_global",
    "alloc_bytes_local", "alloc_bytes_shared", "alloc_bytes_max", "param_bytes", "total_flops",
    "total_bytes", "total_unique_bytes", "total_intensity", "outer_parallel_max",
)  # the first nine come from the walk (ProgramAnalysis.globals_), the rest from the numbers

# Per-store GPU values, "per thread" meaning per launched thread (averaged over the threads
# of the kernel: a store only thread 0 runs counts 1 / threads).
GPU_STORE_FEATURES = (
    "exec_per_thread", "flops_per_thread", "global_loads_per_thread",
    "global_stores_per_thread", "global_coalesced", "global_broadcast", "global_strided",
    "global_stride_max", "global_sectors", "shared_accesses_per_thread",
    "shared_conflict_accesses", "shared_conflict_degree", "cross_thread_reduction",
)
# Launch and resources of the dominant kernel (the one holding the dominant store).
GPU_KERNEL_FEATURES = (
    "is_gpu", "num_kernels", "threads_per_block", "threads_x", "num_blocks", "vthreads",
    "warps_per_block", "idle_lanes", "shared_bytes_per_block", "local_bytes_per_thread",
    "registers_per_thread", "blocks_per_sm_threads", "blocks_per_sm_shared",
    "blocks_per_sm_registers", "blocks_per_sm", "occupancy", "global_bytes",
    "arith_per_global_byte", "cross_thread_reduction_stores",
)
GPU_FEATURES = (
    tuple(f"gpu_{name}" for name in GPU_KERNEL_FEATURES)
    + tuple(f"gpu_{agg}_{name}" for agg in ("sum", "max", "top")
            for name in GPU_STORE_FEATURES)
)
_CPU_GLOBAL_FEATURES = GLOBAL_FEATURES
GLOBAL_FEATURES = _CPU_GLOBAL_FEATURES + GPU_FEATURES

# Aggregations of the per-store rows: sum (of raw values, logged after summing), max (of the
# logged values) and the row of the dominant store (the one with the most weighted work).
AGGREGATIONS = ("sum", "max", "top")

FEATURE_NAMES = (
    tuple(f"{agg}.{name}" for agg in AGGREGATIONS for name in STORE_FEATURE_NAMES)
    + tuple(f"global.{name}" for name in GLOBAL_FEATURES)
)
NUM_FEATURES = len(FEATURE_NAMES)
GPU_OFFSET = NUM_FEATURES - len(GPU_FEATURES)   # first column of the GPU block

_LOOP_OFFSET = len(OP_KINDS)
_BUF_OFFSET = _LOOP_OFFSET + len(LOOP_FEATURES)
_INT_OFFSET = _BUF_OFFSET + TOP_BUFFERS * len(BUFFER_FEATURES)
_LOOP_INDEX = {k: _LOOP_OFFSET + i for i, k in enumerate(LOOP_FEATURES)}
_BUF_INDEX = {k: i for i, k in enumerate(BUFFER_FEATURES)}


def feature_names() -> tuple[str, ...]:
    """Names of the columns :func:`extract` returns, in order."""
    return FEATURE_NAMES


# ---------------------------------------------------------------------------------------------
# Step 1: structural analysis of one lowered program
# ---------------------------------------------------------------------------------------------

# Loop kind codes in ProgramAnalysis.kinds (-1 pads the loop axis).
_KIND_CODES = {SERIAL: 0, PARALLEL: 1, VECTORIZED: 2, UNROLLED: 3}
_BLOCK_IDX, _THREAD_IDX, _VTHREAD = 4, 5, 6
# Hardware axis codes in ProgramAnalysis.axes: 1-3 threadIdx.x/y/z, 4-6 blockIdx.x/y/z, else 0.
_AXIS_CODES = {"threadIdx.x": 1, "threadIdx.y": 2, "threadIdx.z": 3,
               "blockIdx.x": 4, "blockIdx.y": 5, "blockIdx.z": 6}


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """The per-multiprocessor resources the occupancy estimate divides among blocks.

    A CUDA target knows them all; an OpenCL target only its per-block limits, so the rest
    take the values of a common NVIDIA multiprocessor (as does featurising without a target).
    """

    warp_size: int = 32
    threads_per_sm: int = 2048
    shared_per_sm: int = 48 * 1024
    registers_per_sm: int = 65536
    max_blocks_per_sm: int = 32
    banks: int = 32

    @classmethod
    def from_target(cls, target: Target | None) -> GpuLimits:
        if target is None or not target.is_gpu:
            return cls()
        base = cls()
        per_block_threads = getattr(target, "max_threads_per_block", None) or 0
        shared = (getattr(target, "max_shared_memory_per_block_optin", None)
                  or getattr(target, "max_shared_memory_per_block", None) or base.shared_per_sm)
        return cls(
            warp_size=getattr(target, "warp_size", None) or base.warp_size,
            threads_per_sm=(getattr(target, "max_threads_per_multiprocessor", None)
                            or max(base.threads_per_sm, per_block_threads)),
            shared_per_sm=shared,
            registers_per_sm=getattr(target, "registers_per_block", None)
            or base.registers_per_sm)

    def as_row(self) -> list:
        return [self.warp_size, self.threads_per_sm, self.shared_per_sm, self.registers_per_sm,
                self.max_blocks_per_sm, self.banks]


@dataclass(slots=True)
class ProgramAnalysis:
    """Everything :func:`store_features` needs, as arrays (the reusable, cacheable step).

    Loop axes are right-aligned: column ``N - 1`` is every store's innermost loop, and a store
    with fewer loops is padded on the outer side with extent-1 loops of kind -1, which change
    no product, footprint or stride.  Index dimensions are right-aligned the same way (padding
    dimensions have extent 1 and slope 0).  Rows of ``slopes``/``shapes`` are accesses; an
    access belongs to a *group* (one buffer within one store), and a group to a store.
    """

    names: list              # program name per program (one for a single analysis)
    store_starts: np.ndarray  # [P + 1] first store of each program, then the total
    extents: np.ndarray      # [S, N] loop extents, innermost last
    kinds: np.ndarray        # [S, N] loop kind codes
    auto_unroll: np.ndarray  # [S, N] pragma_auto_unroll_max_step, 0 when absent
    annotated: np.ndarray    # [S, N] the loop carries annotations
    guard_mask: np.ndarray   # [S, N] loops that an enclosing `v == c` guard pins to one value
    num_loops: np.ndarray    # [S] real loops around the store
    op_counts: np.ndarray    # [S, len(OP_KINDS)] per execution
    accumulate: np.ndarray   # [S] the stored element is also read (a reduction update)
    guards: np.ndarray       # [Q, 3] (store, loop column of the If, comparisons in it)
    slopes: np.ndarray       # [A, D, N] d index[d] / d loop var, signed
    shapes: np.ndarray       # [A, D] buffer shape, padded with 1
    row_strides: np.ndarray  # [A, D] row-major element strides, padded with 0
    access_group: np.ndarray  # [A] group of each access
    group_store: np.ndarray  # [G] store of each group
    group_reads: np.ndarray  # [G]
    group_writes: np.ndarray  # [G]
    group_local: np.ndarray  # [G] the buffer is not in global scope
    group_elem_bytes: np.ndarray  # [G]
    globals_: np.ndarray     # [P, 9] per-program counts (see _GLOBAL_STATIC)
    # GPU structure (filled for every program; used where is_gpu holds).
    axes: np.ndarray         # [S, N] hardware axis codes (_AXIS_CODES), 0 padding
    store_kernel: np.ndarray  # [S] kernel of each store (numbered across the batch)
    store_ctr: np.ndarray    # [S] the store belongs to a lowered cross-thread reduction
    group_shared: np.ndarray  # [G] the buffer is in shared scope
    kernel_starts: np.ndarray  # [P + 1] first kernel of each program, then the total
    kernel_shared: np.ndarray  # [K] shared bytes allocated per block
    kernel_local: np.ndarray  # [K] local bytes allocated per thread
    is_gpu: np.ndarray       # [P]
    gpu_limits: np.ndarray   # [P, 6] GpuLimits.as_row()
    # Tensorized tiles: iterations one intrinsic call covers, 0 for a plain store.
    tensor_tile: np.ndarray  # [S]
    # Software prefetch distance (bytes) of the loads under the nearest enclosing loop that
    # sets one (pragma_prefetch_bytes), 0 for none.
    prefetch: np.ndarray     # [S]
    # Copies of its body per iteration of the nearest enclosing loop annotated with
    # pragma_unroll_by (at most its extent), 1 for none.
    unroll_by: np.ndarray    # [S]

    @property
    def num_programs(self) -> int:
        return len(self.names)

    @property
    def num_stores(self) -> int:
        return int(self.extents.shape[0])


# Columns of ProgramAnalysis.globals_: the global features known from the walk alone.
_GLOBAL_STATIC = ("num_stores", "num_loops", "num_nests", "alloc_num", "alloc_bytes_global",
                  "alloc_bytes_local", "alloc_bytes_shared", "alloc_bytes_max", "param_bytes")


class _Walker:
    """One walk over a lowered body; keeps the loop stack, guards and let bindings and writes
    plain Python lists that :func:`analyze` turns into arrays."""

    def __init__(self, ctr_buffers: frozenset = frozenset()):
        self.loops: list[tuple] = []       # (var, extent, code, auto_unroll, annotated, axis)
        self.guards: list[tuple] = []      # (depth, condition, then-branch?)
        self.lets: dict[Var, object] = {}
        self.stores: list[tuple] = []      # (loops, pinned positions, guards, counts, acc)
        self.accesses: list[tuple] = []    # (group, shape, [(d, j, rate)])
        self.groups: list[list] = []       # [store, reads, writes, local, elem bytes]
        self.allocations: list[tuple] = []  # (scope, bytes, kernel or -1 outside all loops)
        self.num_loops = 0
        # A kernel is a nest at the top of the body (one launch in the GPU build).
        self.num_kernels = 0
        self.kernel = -1
        # Buffers the cross-thread-reduction pass allocated; stores inside them belong to it.
        self.ctr_buffers = ctr_buffers
        self.ctr_depth = 0
        self._slope_memo: dict[int, tuple] = {}
        # Iterations of the tensorized tile being walked (0 outside one).
        self.intrin_tile = 0
        # The prefetch distance in force (the nearest annotated enclosing loop's).
        self.prefetch = 0
        # The copies per iteration in force (the nearest annotated enclosing loop's).
        self.unroll_by = 1

    # -- statements ---------------------------------------------------------------------------
    def visit(self, s) -> None:
        if isinstance(s, SeqStmt):
            for child in s.stmts:
                self.visit(child)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, BufferStore):
            self._store(s)
        elif isinstance(s, IfThenElse):
            self.guards.append((len(self.loops), s.condition, True))
            self.visit(s.then_case)
            self.guards.pop()
            if s.else_case is not None:
                self.guards.append((len(self.loops), s.condition, False))
                self.visit(s.else_case)
                self.guards.pop()
        elif isinstance(s, LetStmt):
            self.lets[s.var] = s.value
            self.visit(s.body)
            del self.lets[s.var]
        elif isinstance(s, Allocate):
            self.allocations.append((s.buffer.scope, _buffer_bytes(s.buffer),
                                     self.kernel if self.loops else -1))
            inside = s.buffer in self.ctr_buffers
            self.ctr_depth += inside
            self.visit(s.body)
            self.ctr_depth -= inside
        elif isinstance(s, Evaluate):
            return
        elif isinstance(s, TensorIntrinCall):
            self._tensor_intrin(s)
        elif isinstance(s, (BlockRealize, Block)):
            block = s.block if isinstance(s, BlockRealize) else s
            raise FeatureError(f"found block {block.name!r}: features are extracted from "
                               f"lowered programs")
        else:
            raise FeatureError(f"unsupported statement {type(s).__name__} in a lowered program")

    def _tensor_intrin(self, s: TensorIntrinCall) -> None:
        """Walk the tile as the loops it stands for (the description on the program's
        buffers), its stores marked with the tile's size."""
        try:
            tile = intrinsics.expand(s)
        except intrinsics.IntrinsicError as err:
            raise FeatureError(f"cannot featurise the tile of {s.intrin}: {err}") from None
        size, node = 1, tile
        while isinstance(node, For):
            size *= self._extent(node)
            node = node.body
        outer, self.intrin_tile = self.intrin_tile, max(size, 1)
        self.visit(tile)
        self.intrin_tile = outer

    def _for(self, s: For) -> None:
        self.num_loops += 1
        if not self.loops:
            self.kernel = self.num_kernels
            self.num_kernels += 1
        axis_code = 0
        if s.kind == THREAD_BINDING:
            axis_code = _AXIS_CODES.get(s.thread_binding or "", 0)
            axis = s.thread_binding or ""
            code = (_BLOCK_IDX if axis.startswith("blockIdx")
                    else _THREAD_IDX if axis.startswith("threadIdx") else _VTHREAD)
        else:
            code = _KIND_CODES.get(s.kind, 0)
        step = s.annotation("pragma_auto_unroll_max_step", 0) if s.annotations else 0
        self.loops.append((s.loop_var, self._extent(s), code,
                           step if isinstance(step, (int, float)) else 0, bool(s.annotations),
                           axis_code))
        saved = self.prefetch
        ahead = s.annotation(_PREFETCH_KEY) if s.annotations else None
        if ahead is not None:
            self.prefetch = ahead if isinstance(ahead, int) and not isinstance(ahead, bool) \
                and ahead > 0 else 0
        saved_copies = self.unroll_by
        copies = s.annotation(_UNROLL_BY_KEY) if s.annotations else None
        if copies is not None:
            self.unroll_by = min(copies, max(self._extent(s), 1)) \
                if isinstance(copies, int) and not isinstance(copies, bool) and copies > 1 else 1
        self.visit(s.body)
        self.prefetch, self.unroll_by = saved, saved_copies
        self.loops.pop()

    def _extent(self, s: For) -> int:
        if isinstance(s.extent, IntImm):
            return max(int(s.extent.value), 0)
        # A non-constant extent (a partial tile): its upper bound over the outer loops.
        dom = {lp[0]: (0, max(lp[1] - 1, 0)) for lp in self.loops}
        bound = int_bound(s.extent, dom)
        return max(int(bound[1]), 0) if bound is not None else UNKNOWN_EXTENT

    def _store(self, s: BufferStore) -> None:
        if not self.loops:
            # A store outside every loop runs on its own (a single-thread launch on a GPU).
            self.kernel = self.num_kernels
            self.num_kernels += 1
        store_id = len(self.stores)
        position = {lp[0]: j for j, lp in enumerate(self.loops)}
        counts = [0] * len(OP_KINDS)
        groups: dict[Buffer, int] = {}
        self._access(s.buffer, s.indices, position, groups, store_id, write=True)
        for index in s.indices:
            self._count(index, counts, position, groups, store_id)
        self._count(s.value, counts, position, groups, store_id)
        accumulate = self.groups[groups[s.buffer]][1] > 0
        pinned, guards = self._guards(position)
        self.stores.append((tuple(self.loops), pinned, guards, counts, accumulate,
                            self.kernel, self.ctr_depth > 0, self.intrin_tile, self.prefetch,
                            self.unroll_by))

    # -- guards -------------------------------------------------------------------------------
    def _guards(self, position: dict) -> tuple[set, list]:
        """Loops pinned by the enclosing conditions, and each condition's (depth, compares).

        ``v == c`` over loop variables (a reduction init, run at the reduction's start) keeps
        one iteration of the loops it names; other comparisons (partial-tile predicates) are
        taken to hold almost always."""
        pinned: set[int] = set()
        guards = []
        for depth, cond, taken in self.guards:
            terms = _conjuncts(cond) if taken else [cond]
            compares = 0
            for term in terms:
                compares += _count_compares(term)
                if taken and isinstance(term, Cmp) and term.op == "==":
                    for var in (*self._slope(term.a), *self._slope(term.b)):
                        j = position.get(var)
                        if j is not None:
                            pinned.add(j)
            guards.append((depth, compares))
        return pinned, guards

    # -- expressions --------------------------------------------------------------------------
    def _count(self, e, counts: list, position: dict, groups: dict, store_id: int) -> None:
        stack = [e]
        while stack:
            n = stack.pop()
            cls = type(n)
            if cls is BinOp:
                is_float = dt.is_float(n.a.dtype)
                op = n.op
                if op == "+" or op == "-":
                    counts[0 if is_float else 7] += 1
                    if is_float and ((type(n.a) is BinOp and n.a.op == "*")
                                     or (type(n.b) is BinOp and n.b.op == "*")):
                        counts[4] += 1
                elif op == "*":
                    counts[1 if is_float else 8] += 1
                elif op == "/" or op == "//" or op == "%":
                    counts[2 if is_float else 9] += 1
                else:
                    counts[3 if is_float else 10] += 1
                stack.append(n.a)
                stack.append(n.b)
            elif cls is BufferLoad:
                counts[15] += 1
                self._access(n.buffer, n.indices, position, groups, store_id, write=False)
                stack.extend(n.indices)
            elif cls is Cmp:
                counts[5 if dt.is_float(n.a.dtype) else 11] += 1
                stack.append(n.a)
                stack.append(n.b)
            elif cls is And or cls is Or:
                counts[12] += 1
                stack.append(n.a)
                stack.append(n.b)
            elif cls is Not:
                counts[12] += 1
                stack.append(n.a)
            elif cls is Select:
                counts[13] += 1
                stack.append(n.condition)
                stack.append(n.true_value)
                stack.append(n.false_value)
            elif cls is Cast:
                counts[14] += 1
                stack.append(n.value)
            elif cls is Call:
                counts[6] += 1
                stack.extend(n.args)
            elif cls is Var:
                value = self.lets.get(n)
                if value is not None:
                    stack.append(value)

    def _access(self, buf: Buffer, indices: tuple, position: dict, groups: dict,
                store_id: int, write: bool) -> None:
        group = groups.get(buf)
        if group is None:
            group = len(self.groups)
            groups[buf] = group
            self.groups.append([store_id, 0, 0, buf.scope != "global", dt.nbytes(buf.dtype),
                                buf.scope == "shared"])
        self.groups[group][2 if write else 1] += 1
        entries = []
        for d, index in enumerate(indices):
            for var, rate in self._slope(index).items():
                j = position.get(var)
                if j is not None and rate:
                    entries.append((d, j, rate))
        self.accesses.append((group, _shape(buf), entries))

    def _slope(self, e) -> dict:
        """``{var: d e / d var}`` for the variables ``e`` depends on (analytic, memoised)."""
        key = id(e)
        hit = self._slope_memo.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._slope_uncached(e)
        self._slope_memo[key] = (e, out)
        return out

    def _slope_uncached(self, e) -> dict:
        cls = type(e)
        if cls is IntImm or cls is FloatImm:
            return {}
        if cls is Var:
            value = self.lets.get(e)
            return self._slope(value) if value is not None else {e: 1.0}
        if cls is BinOp:
            op = e.op
            if op == "+" or op == "-":
                out = dict(self._slope(e.a))
                sign = 1.0 if op == "+" else -1.0
                for v, r in self._slope(e.b).items():
                    out[v] = out.get(v, 0.0) + sign * r
                return out
            if op == "*":
                if type(e.b) is IntImm:
                    return _scaled(self._slope(e.a), e.b.value)
                if type(e.a) is IntImm:
                    return _scaled(self._slope(e.b), e.a.value)
            elif op == "//" or op == "/":
                if type(e.b) is IntImm and e.b.value != 0:
                    return _scaled(self._slope(e.a), 1.0 / e.b.value)
            elif op == "%":
                return self._slope(e.a)
            return _merged_abs(self._slope(e.a), self._slope(e.b))
        if cls is Cast:
            return self._slope(e.value)
        if cls is Select:
            return _merged_abs(self._slope(e.true_value), self._slope(e.false_value))
        # Indirect indices (a load) and anything else: no affine information.
        return {}


def _scaled(slope: dict, k) -> dict:
    return {v: r * k for v, r in slope.items()}


def _merged_abs(a: dict, b: dict) -> dict:
    out = {v: abs(r) for v, r in a.items()}
    for v, r in b.items():
        out[v] = max(out.get(v, 0.0), abs(r))
    return out


def _conjuncts(cond) -> list:
    out, stack = [], [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, And):
            stack.append(c.b)
            stack.append(c.a)
        else:
            out.append(c)
    return out


def _count_compares(cond) -> int:
    n, stack = 0, [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, Cmp):
            n += 1
        elif isinstance(c, (And, Or)):
            stack.append(c.a)
            stack.append(c.b)
        elif isinstance(c, Not):
            stack.append(c.a)
    return n


def _shape(buf: Buffer) -> tuple:
    # A symbolic dimension is taken as unbounded for clipping footprints.
    return tuple(s.value if isinstance(s, IntImm) else 1 << 31 for s in buf.shape)


def _buffer_bytes(buf: Buffer) -> int:
    return math.prod(_shape(buf)) * dt.nbytes(buf.dtype)


def _has_thread_bindings(func: PrimFunc) -> bool:
    return any(loop.kind == THREAD_BINDING for loop in collect(func.body, For))


def _as_target(target: Target | str | None) -> Target | None:
    if target is None or isinstance(target, Target):
        return target
    return Target(target)


def analyze(func: PrimFunc, target: Target | str | None = None) -> ProgramAnalysis:
    """Walk ``func`` (lowered first when it is not) and record every store's structure.

    A GPU program (``target.is_gpu``; without a target, one with thread-bound loops) is
    lowered as the GPU build lowers it, cross-thread reductions included, and its GPU block is
    filled with ``target``'s limits (:class:`GpuLimits`).  A function passed in already
    lowered keeps no trace of its cross-thread reductions (``cross_thread_reduction`` is 0).
    """
    if not isinstance(func, PrimFunc):
        raise FeatureError(f"expected a PrimFunc, got {type(func).__name__}")
    target = _as_target(target)
    is_gpu = target.is_gpu if target is not None else _has_thread_bindings(func)
    ctr_buffers: frozenset = frozenset()
    if func.attr("lowered"):
        lowered = func
    elif is_gpu:
        staged = lower_cross_thread_reductions(func)
        # Scheduled functions allocate in blocks, never with Allocate statements: every
        # Allocate here is the pass's accumulator or tree (buffers compare by identity and
        # survive lowering).
        ctr_buffers = frozenset(a.buffer for a in collect(staged.body, Allocate))
        lowered = lower(staged)
    else:
        lowered = lower(func)
    w = _Walker(ctr_buffers)
    w.visit(lowered.body)

    S = len(w.stores)
    N = max([len(st[0]) for st in w.stores] + [1])
    D = max([len(acc[1]) for acc in w.accesses] + [1])
    extents = np.ones((S, N))
    kinds = np.full((S, N), -1, dtype=np.int8)
    auto_unroll = np.zeros((S, N))
    annotated = np.zeros((S, N), dtype=bool)
    guard_mask = np.zeros((S, N), dtype=bool)
    num_loops = np.zeros(S, dtype=np.int64)
    guards = []
    axes = np.zeros((S, N), dtype=np.int8)
    for s, (loops, pinned, store_guards, *_) in enumerate(w.stores):
        n = len(loops)
        pad = N - n
        num_loops[s] = n
        if n:
            extents[s, pad:] = [lp[1] for lp in loops]
            kinds[s, pad:] = [lp[2] for lp in loops]
            auto_unroll[s, pad:] = [lp[3] for lp in loops]
            annotated[s, pad:] = [lp[4] for lp in loops]
            axes[s, pad:] = [lp[5] for lp in loops]
        for j in pinned:
            guard_mask[s, pad + j] = True
        for depth, compares in store_guards:
            guards.append((s, pad + depth, compares))
    op_counts = np.array([st[3] for st in w.stores], dtype=np.float64).reshape(S, len(OP_KINDS))
    accumulate = np.array([st[4] for st in w.stores], dtype=bool)

    A = len(w.accesses)
    slopes = np.zeros((A, D, N))
    shapes = np.ones((A, D))
    row_strides = np.zeros((A, D))
    access_group = np.zeros(A, dtype=np.int64)
    for a, (group, shape, entries) in enumerate(w.accesses):
        access_group[a] = group
        nd = len(shape)
        dpad = D - nd
        lpad = N - len(w.stores[w.groups[group][0]][0])
        if nd:
            shapes[a, dpad:] = shape
            stride = 1
            for d in range(nd - 1, -1, -1):
                row_strides[a, dpad + d] = stride
                stride *= shape[d]
        for d, j, rate in entries:
            slopes[a, dpad + d, lpad + j] += rate
    groups = np.array(w.groups, dtype=np.float64).reshape(len(w.groups), 6)

    body = lowered.body
    while isinstance(body, Allocate):
        body = body.body
    scopes = {"global": 0, "local": 0, "shared": 0}
    K = w.num_kernels
    kernel_shared = np.zeros(K)
    kernel_local = np.zeros(K)
    for scope, nbytes, kernel in w.allocations:
        scopes[scope] = scopes.get(scope, 0) + nbytes
        per_kernel = (kernel_shared if scope == "shared"
                      else kernel_local if scope == "local" else None)
        if per_kernel is not None:
            # Allocated outside every loop: each kernel that runs sees it.
            if kernel >= 0:
                per_kernel[kernel] += nbytes
            else:
                per_kernel += nbytes
    static = [S, w.num_loops, len(body.stmts) if isinstance(body, SeqStmt) else 1,
              len(w.allocations), scopes["global"], scopes["local"], scopes["shared"],
              max((b for _, b, _ in w.allocations), default=0),
              sum(_buffer_bytes(b) for b in lowered.params)]
    return ProgramAnalysis(
        names=[lowered.name], store_starts=np.array([0, S], dtype=np.int64),
        extents=extents, kinds=kinds, auto_unroll=auto_unroll, annotated=annotated,
        guard_mask=guard_mask, num_loops=num_loops, op_counts=op_counts, accumulate=accumulate,
        guards=np.array(guards, dtype=np.int64).reshape(len(guards), 3),
        slopes=slopes, shapes=shapes, row_strides=row_strides, access_group=access_group,
        group_store=groups[:, 0].astype(np.int64), group_reads=groups[:, 1],
        group_writes=groups[:, 2], group_local=groups[:, 3] > 0,
        group_elem_bytes=groups[:, 4], globals_=np.array([static], dtype=np.float64),
        axes=axes, store_kernel=np.array([st[5] for st in w.stores], dtype=np.int64),
        store_ctr=np.array([st[6] for st in w.stores], dtype=bool),
        group_shared=groups[:, 5] > 0, kernel_starts=np.array([0, K], dtype=np.int64),
        kernel_shared=kernel_shared, kernel_local=kernel_local,
        is_gpu=np.array([is_gpu]),
        gpu_limits=np.array([GpuLimits.from_target(target).as_row()], dtype=np.float64),
        tensor_tile=np.array([st[7] for st in w.stores], dtype=np.float64),
        prefetch=np.array([st[8] for st in w.stores], dtype=np.float64),
        unroll_by=np.array([st[9] for st in w.stores], dtype=np.float64))


def concat(analyses: Sequence[ProgramAnalysis]) -> ProgramAnalysis:
    """One analysis holding the programs of all of ``analyses`` (axes padded to the largest),
    so that :func:`store_features` runs once over a whole batch."""
    if not analyses:
        raise FeatureError("concat needs at least one analysis")
    if len(analyses) == 1:
        return analyses[0]
    N = max(a.extents.shape[1] for a in analyses)
    D = max(a.slopes.shape[1] for a in analyses)
    S = sum(a.num_stores for a in analyses)
    A = sum(a.slopes.shape[0] for a in analyses)
    extents = np.ones((S, N))
    kinds = np.full((S, N), -1, dtype=np.int8)
    auto_unroll = np.zeros((S, N))
    annotated = np.zeros((S, N), dtype=bool)
    guard_mask = np.zeros((S, N), dtype=bool)
    axes = np.zeros((S, N), dtype=np.int8)
    slopes = np.zeros((A, D, N))
    shapes = np.ones((A, D))
    row_strides = np.zeros((A, D))
    names, starts, guards = [], [0], []
    kernel_starts = [0]
    s0 = a0 = 0
    for an in analyses:
        s1 = s0 + an.num_stores
        a1 = a0 + an.slopes.shape[0]
        n, d = an.extents.shape[1], an.slopes.shape[1]
        extents[s0:s1, N - n:] = an.extents
        kinds[s0:s1, N - n:] = an.kinds
        auto_unroll[s0:s1, N - n:] = an.auto_unroll
        annotated[s0:s1, N - n:] = an.annotated
        guard_mask[s0:s1, N - n:] = an.guard_mask
        axes[s0:s1, N - n:] = an.axes
        slopes[a0:a1, D - d:, N - n:] = an.slopes
        shapes[a0:a1, D - d:] = an.shapes
        row_strides[a0:a1, D - d:] = an.row_strides
        if len(an.guards):
            guards.append(an.guards + np.array([s0, N - n, 0]))
        names.extend(an.names)
        starts.extend((an.store_starts[1:] + s0).tolist())
        kernel_starts.extend((an.kernel_starts[1:] + kernel_starts[-1]).tolist())
        s0, a0 = s1, a1
    cat = np.concatenate
    group_offsets = np.cumsum([0] + [a.group_store.shape[0] for a in analyses[:-1]])
    store_offsets = np.cumsum([0] + [a.num_stores for a in analyses[:-1]])
    kernel_offsets = np.cumsum([0] + [int(a.kernel_starts[-1]) for a in analyses[:-1]])
    return ProgramAnalysis(
        names=names, store_starts=np.array(starts, dtype=np.int64), extents=extents,
        kinds=kinds, auto_unroll=auto_unroll, annotated=annotated, guard_mask=guard_mask,
        num_loops=cat([a.num_loops for a in analyses]),
        op_counts=cat([a.op_counts for a in analyses]),
        accumulate=cat([a.accumulate for a in analyses]),
        guards=cat(guards) if guards else np.zeros((0, 3), dtype=np.int64),
        slopes=slopes, shapes=shapes, row_strides=row_strides,
        access_group=cat([a.access_group + off for a, off in zip(analyses, group_offsets)]),
        group_store=cat([a.group_store + off for a, off in zip(analyses, store_offsets)]),
        group_reads=cat([a.group_reads for a in analyses]),
        group_writes=cat([a.group_writes for a in analyses]),
        group_local=cat([a.group_local for a in analyses]),
        group_elem_bytes=cat([a.group_elem_bytes for a in analyses]),
        globals_=cat([a.globals_ for a in analyses]),
        axes=axes,
        store_kernel=cat([a.store_kernel + k for a, k in zip(analyses, kernel_offsets)]),
        store_ctr=cat([a.store_ctr for a in analyses]),
        group_shared=cat([a.group_shared for a in analyses]),
        kernel_starts=np.array(kernel_starts, dtype=np.int64),
        kernel_shared=cat([a.kernel_shared for a in analyses]),
        kernel_local=cat([a.kernel_local for a in analyses]),
        is_gpu=cat([a.is_gpu for a in analyses]),
        gpu_limits=cat([a.gpu_limits for a in analyses]),
        tensor_tile=cat([a.tensor_tile for a in analyses]),
        prefetch=cat([a.prefetch for a in analyses]),
        unroll_by=cat([a.unroll_by for a in analyses]))


# ---------------------------------------------------------------------------------------------
# Step 2: numbers from the analysis, for all stores of a batch at once
# ---------------------------------------------------------------------------------------------

def _reverse_cumprod(x: np.ndarray) -> np.ndarray:
    """``out[..., l] = prod(x[..., l:])`` with a trailing 1: shape ``[..., N + 1]``."""
    out = np.ones(x.shape[:-1] + (x.shape[-1] + 1,))
    out[..., :-1] = np.cumprod(x[..., ::-1], axis=-1)[..., ::-1]
    return out


def _innermost_true(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the last column where ``mask`` holds, and whether any does."""
    n = mask.shape[1]
    last = n - 1 - np.argmax(mask[:, ::-1], axis=1)
    return last, mask.any(axis=1)


def store_features(analysis: ProgramAnalysis) -> tuple[np.ndarray, np.ndarray]:
    """Raw (not yet logged) rows ``[S, NUM_STORE_FEATURES]``, one per store, and each store's
    weight (its weighted work), used to pick a program's dominant store."""
    an = analysis
    S, N = an.extents.shape
    rows = np.zeros((S, NUM_STORE_FEATURES))
    if S == 0:
        return rows, np.zeros(0)
    E = an.extents
    kinds = an.kinds
    inner = _reverse_cumprod(E)                 # [S, N+1] iterations of loops l..N-1
    outer = np.ones((S, N + 1))                 # [S, N+1] iterations of loops 0..l-1
    outer[:, 1:] = np.cumprod(E, axis=1)
    unguarded = inner[:, 0]
    fraction = 1.0 / np.prod(np.where(an.guard_mask, np.maximum(E, 1.0), 1.0), axis=1)
    executions = unguarded * fraction
    has_loops = an.num_loops > 0
    sr = np.arange(S)

    # 1. Arithmetic by kind, times the executions.
    rows[:, :_LOOP_OFFSET] = an.op_counts * executions[:, None]
    float_cols = [_OP_INDEX[k] for k in _FLOAT_OPS]
    flops_per = an.op_counts[:, float_cols].sum(axis=1)

    # 2. Loop structure.
    L = _LOOP_INDEX
    rows[:, L["executions"]] = executions
    rows[:, L["executions_unguarded"]] = unguarded
    if len(an.guards):
        evals = np.zeros(S)
        gs, gc, gn = an.guards[:, 0], an.guards[:, 1], an.guards[:, 2]
        np.add.at(evals, gs, gn * outer[gs, gc])
        rows[:, L["guard_evals"]] = evals
    rows[:, L["num_loops"]] = an.num_loops
    rows[:, L["innermost_extent"]] = np.where(has_loops, E[:, -1], 0.0)
    inner_kind = np.minimum(kinds[:, -1], _BLOCK_IDX)
    for code, name in enumerate(_LOOP_KINDS):
        rows[:, L[f"innermost_{name}"]] = inner_kind == code

    def prod_of(mask):
        count = mask.sum(axis=1)
        return count, np.where(count > 0, np.prod(np.where(mask, E, 1.0), axis=1), 0.0)

    par = kinds == _KIND_CODES[PARALLEL]
    for name, code in (("vectorized", VECTORIZED), ("unrolled", UNROLLED),
                       ("parallel", PARALLEL)):
        count, prod = prod_of(kinds == _KIND_CODES[code])
        rows[:, L[f"{name}_num"]] = count
        rows[:, L["vectorized_lanes" if name == "vectorized" else f"{name}_prod"]] = prod
    first_par = np.argmax(par, axis=1)
    rows[:, L["work_per_thread"]] = np.where(par.any(axis=1), inner[sr, first_par + 1],
                                             unguarded)
    rows[:, L["block_idx_prod"]] = prod_of(kinds == _BLOCK_IDX)[1]
    rows[:, L["thread_idx_prod"]] = prod_of(kinds == _THREAD_IDX)[1]
    rows[:, L["vthread_prod"]] = prod_of(kinds == _VTHREAD)[1]
    step = an.auto_unroll.max(axis=1)
    rows[:, L["auto_unroll_max_step"]] = step
    # How much of the nest under the pragma fits the unroll budget: the largest product of
    # innermost extents below the annotated loop that stays within the step.
    at = np.argmax(an.auto_unroll, axis=1)
    levels = np.arange(N + 1)
    fits = (levels[None, :] >= at[:, None]) & (inner <= step[:, None])
    rows[:, L["auto_unroll_covered"]] = np.where(
        step > 0, np.max(np.where(fits, inner, 0.0), axis=1), 0.0)
    rows[:, L["accumulate"]] = an.accumulate
    rows[:, L["annotated_loops"]] = an.annotated.sum(axis=1)
    tiled = an.tensor_tile > 0
    rows[:, L["tensor_intrin_tile"]] = an.tensor_tile
    rows[:, L["tensor_intrin_calls"]] = np.where(
        tiled, executions / np.maximum(an.tensor_tile, 1.0), 0.0)
    rows[:, L["prefetch_bytes"]] = an.prefetch
    rows[:, L["unroll_by"]] = an.unroll_by

    # 3. Buffers.  Footprints when loops l..N-1 vary, per access, for every level l: the
    #    touched range of a dimension is 1 + sum_j |slope[d, j]| * (extent_j - 1), and its
    #    distinct indices at most the product of the extents it depends on, both clipped to
    #    the dimension.  Several accesses of one buffer in a store take the largest.
    G = an.group_store.shape[0]
    gs = an.group_store
    ga = an.access_group
    ast = gs[ga]
    slope_abs = np.abs(an.slopes)                           # [A, D, N]
    Ea = E[ast][:, None, :]                                 # [A, 1, N]
    spread = np.zeros(slope_abs.shape[:2] + (N + 1,))
    spread[:, :, :N] = np.cumsum((slope_abs * (Ea - 1.0))[:, :, ::-1], axis=2)[:, :, ::-1]
    distinct = _reverse_cumprod(np.where(slope_abs > 0, Ea, 1.0))
    span = np.minimum(1.0 + spread, an.shapes[:, :, None])
    uniq = np.minimum(span, distinct)
    elems = np.prod(uniq, axis=1)                           # [A, N+1]
    eb_a = an.group_elem_bytes[ga]
    lines = np.prod(uniq[:, :-1], axis=1) * np.ceil(span[:, -1] * eb_a[:, None]
                                                     / CACHE_LINE_BYTES)
    flat = np.abs(np.einsum("adn,ad->an", an.slopes, an.row_strides))   # [A, N]
    depends = slope_abs.sum(axis=1) > 0                                 # [A, N]
    unit_last = (slope_abs[:, -1, -1] == 1.0).astype(np.float64)

    g_elems = np.zeros((G, N + 1))
    g_lines = np.zeros((G, N + 1))
    g_flat = np.zeros((G, N))
    g_dep = np.zeros((G, N))
    g_unit = np.zeros(G)
    g_last = np.zeros(G)
    np.maximum.at(g_elems, ga, elems)
    np.maximum.at(g_lines, ga, lines)
    np.maximum.at(g_flat, ga, flat)
    np.maximum.at(g_dep, ga, depends.astype(np.float64))
    np.maximum.at(g_unit, ga, unit_last)
    np.maximum.at(g_last, ga, an.shapes[:, -1])

    gr = np.arange(G)
    eb = an.group_elem_bytes
    count = an.group_reads + an.group_writes
    nbytes = executions[gs] * count * eb
    Eg = E[gs]
    # Reuse: the innermost loop (of extent > 1) that none of the accesses depends on.
    reuse_at, has_reuse = _innermost_true((g_dep == 0) & (Eg > 1.0))
    serial = ~has_reuse & (count > 1)
    dis_iter = np.where(has_reuse, inner[gs, reuse_at + 1], np.where(serial, 1.0, 0.0))
    dis_bytes = np.where(has_reuse, g_elems[gr, reuse_at + 1] * eb,
                         np.where(serial, count * eb, 0.0))
    reuse_ct = np.where(has_reuse, Eg[gr, reuse_at], np.where(serial, count, 0.0))
    # Cache lines moved: the reuse loop's footprint once per iteration of the loops around
    # it; without reuse, every line of the whole footprint once.
    moved = np.where(has_reuse, g_lines[gr, reuse_at] * outer[gs, reuse_at], g_lines[:, 0])
    stride_inner = g_flat[:, -1]
    nz_at, has_nz = _innermost_true(g_flat > 0)
    stride_nz = np.where(has_nz, g_flat[gr, nz_at], 0.0)
    contiguous = stride_inner == 1.0
    run = np.where(contiguous & (g_unit > 0) & has_loops[gs],
                   np.minimum(Eg[:, -1], g_last) * eb, 0.0)

    values = np.zeros((G, len(BUFFER_FEATURES)))
    B = _BUF_INDEX
    values[:, B["present"]] = 1.0
    values[:, B["is_read"]] = an.group_reads > 0
    values[:, B["is_write"]] = an.group_writes > 0
    values[:, B["is_local"]] = an.group_local
    values[:, B["elem_bytes"]] = eb
    values[:, B["bytes"]] = nbytes
    values[:, B["unique_bytes"]] = g_elems[:, 0] * eb
    values[:, B["lines"]] = moved
    values[:, B["unique_lines"]] = g_lines[:, 0]
    values[:, B["reuse_loop"]] = has_reuse
    values[:, B["reuse_serial"]] = serial
    values[:, B["reuse_none"]] = ~has_reuse & ~serial
    values[:, B["reuse_dis_iter"]] = dis_iter
    values[:, B["reuse_dis_bytes"]] = dis_bytes
    values[:, B["reuse_ct"]] = reuse_ct
    values[:, B["bytes_per_reuse"]] = nbytes / np.maximum(reuse_ct, 1.0)
    values[:, B["stride_innermost"]] = stride_inner
    values[:, B["stride_nonzero"]] = stride_nz
    values[:, B["contiguous_inner"]] = contiguous & has_loops[gs]
    values[:, B["broadcast_inner"]] = (stride_inner == 0.0) & has_loops[gs]
    values[:, B["contiguous_run_bytes"]] = run

    # The TOP_BUFFERS largest groups of each store (by bytes, then unique bytes, then order
    # of appearance) fill the buffer slots.
    order = np.lexsort((gr, -values[:, B["unique_bytes"]], -nbytes, gs))
    sorted_store = gs[order]
    rank = np.arange(G) - np.searchsorted(sorted_store, sorted_store, side="left")
    keep = rank < TOP_BUFFERS
    slots = np.zeros((S, TOP_BUFFERS, len(BUFFER_FEATURES)))
    slots[sorted_store[keep], rank[keep]] = values[order[keep]]
    rows[:, _BUF_OFFSET:_INT_OFFSET] = slots.reshape(S, -1)

    # 4. Arithmetic intensity, overall and as a curve from the outermost level inwards.
    total_bytes = np.zeros(S)
    np.add.at(total_bytes, gs, nbytes)
    level_bytes = np.zeros((S, N + 1))
    np.add.at(level_bytes, gs, g_elems * eb[:, None])
    flops = flops_per * executions
    rows[:, _INT_OFFSET] = flops
    rows[:, _INT_OFFSET + 1] = np.divide(flops, total_bytes, out=np.zeros(S),
                                         where=total_bytes > 0)
    rows[:, _INT_OFFSET + 2] = np.divide(flops, level_bytes[:, 0], out=np.zeros(S),
                                         where=level_bytes[:, 0] > 0)
    level_flops = (flops_per * fraction)[:, None] * inner
    curve = np.divide(level_flops, level_bytes, out=np.zeros((S, N + 1)), where=level_bytes > 0)
    # Resample each store's real levels (columns N - n .. N) onto CURVE_POINTS points.
    n_real = an.num_loops.astype(np.float64)
    pos = (N - n_real)[:, None] + n_real[:, None] * np.linspace(0.0, 1.0, CURVE_POINTS)[None]
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, N)
    w = pos - lo
    rows[:, _INT_OFFSET + 3:] = (np.take_along_axis(curve, lo, axis=1) * (1.0 - w)
                                 + np.take_along_axis(curve, hi, axis=1) * w)
    weights = executions * (1.0 + flops_per) + total_bytes
    return rows, weights


_GPU_STORE_INDEX = {k: i for i, k in enumerate(GPU_STORE_FEATURES)}
SECTOR_BYTES = 32        # the unit a GPU's memory system moves global data in


def gpu_store_features(analysis: ProgramAnalysis, rows: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw per-store GPU values ``[S, len(GPU_STORE_FEATURES)]``, and each store's global
    traffic in bytes and its flops over the whole launch, from the analysis and the store rows of
    :func:`store_features`.  Computed for every program; meaningful for GPU programs.

    A thread-bound loop is the thread's index wherever it sits, so loops bound to one axis
    (a cooperative fetch re-binding ``threadIdx.x`` inside the compute's own ``threadIdx.x``
    loop) are one index: a store's work per thread is its executions over the product of its
    bound loops, and an access's stride along a thread axis sums the slopes of all the loops
    bound to it.  A store's traffic over the launch counts each hardware axis once, too
    (its work per thread times the extents of the axes it sits under)."""
    an = analysis
    S = an.extents.shape[0]
    out = np.zeros((S, len(GPU_STORE_FEATURES)))
    if S == 0:
        return out, np.zeros(0), np.zeros(0)
    X = _GPU_STORE_INDEX
    E = an.extents
    executions = rows[:, _LOOP_INDEX["executions"]]
    bound = (an.kinds == _THREAD_IDX) | (an.kinds == _BLOCK_IDX)
    per_thread = executions / np.prod(np.where(bound, E, 1.0), axis=1)
    axis_extents = np.stack([np.max(np.where(an.axes == code, E, 1.0), axis=1)
                             for code in range(1, 7)], axis=1)
    launched = per_thread * np.prod(axis_extents, axis=1)      # executions over the launch
    sk = an.store_kernel
    program = np.repeat(np.arange(an.num_programs), np.diff(an.store_starts))
    limits = an.gpu_limits[program]                               # [S, 6]
    launch = _kernel_launch(an)                                   # [K, 7]
    threads = np.prod(launch[:, 1:4], axis=1)[sk]                 # [S]
    # Consecutive lanes of a warp step the lowest thread axis the kernel launches wide.
    wide = launch[:, 1:4] > 1
    vary = np.where(wide.any(axis=1), 1 + np.argmax(wide, axis=1), 0)[sk]     # [S]

    gs = an.group_store
    ga = an.access_group
    ast = gs[ga]
    flat = np.einsum("adn,ad->an", an.slopes, an.row_strides)    # [A, N] signed
    on_vary = (an.axes[ast] == vary[ast][:, None]) & (vary[ast] > 0)[:, None]
    stride_a = np.abs(np.sum(np.where(on_vary, flat, 0.0), axis=1))
    G = gs.shape[0]
    stride = np.zeros(G)
    np.maximum.at(stride, ga, stride_a)

    eb = an.group_elem_bytes
    ept = per_thread[gs]
    count = an.group_reads + an.group_writes
    is_global = ~an.group_local
    is_shared = an.group_shared
    lanes = np.maximum(np.minimum(limits[gs, 0], threads[gs]), 1.0)
    one = np.isclose(stride, 1.0)

    def add(name, mask, values):
        np.add.at(out[:, X[name]], gs, np.where(mask, values, 0.0))

    def peak(name, mask, values):
        np.maximum.at(out[:, X[name]], gs, np.where(mask, values, 0.0))

    add("global_loads_per_thread", is_global, an.group_reads * ept)
    add("global_stores_per_thread", is_global, an.group_writes * ept)
    add("global_coalesced", is_global & one, count * ept)
    add("global_broadcast", is_global & ~one & (stride < 1.0), count * ept)
    add("global_strided", is_global & ~one & (stride > 1.0), count * ept)
    peak("global_stride_max", is_global, stride)
    # Sectors one warp-wide access touches: the span of its lanes' addresses, at least one
    # sector, at most one per lane; spread over the lanes, per access of a thread.
    sectors = np.clip(np.ceil(lanes * stride * eb / SECTOR_BYTES), 1.0, lanes)
    add("global_sectors", is_global, count * ept * sectors / lanes)
    add("shared_accesses_per_thread", is_shared, count * ept)
    # Lanes a stride of w words sends to one bank: gcd(w, banks) (0: a broadcast, none).
    words = stride * eb / 4.0
    whole = (words >= 1.0) & np.isclose(words, np.round(words))
    degree = np.where(whole, np.gcd(np.round(words).astype(np.int64),
                                    limits[gs, 5].astype(np.int64)), 1)
    degree = np.minimum(degree, lanes)
    add("shared_conflict_accesses", is_shared & (degree >= 2), count * ept)
    peak("shared_conflict_degree", is_shared, degree)
    out[:, X["exec_per_thread"]] = per_thread
    out[:, X["flops_per_thread"]] = rows[:, _INT_OFFSET] * per_thread / np.maximum(
        executions, 1e-30)
    out[:, X["cross_thread_reduction"]] = an.store_ctr
    global_bytes = np.zeros(S)
    np.add.at(global_bytes, gs, np.where(is_global, launched[gs] * count * eb, 0.0))
    flops = out[:, X["flops_per_thread"]] * launched / np.maximum(per_thread, 1e-30)
    return out, global_bytes, flops


def _kernel_launch(an: ProgramAnalysis) -> np.ndarray:
    """``[K, 7]``: per kernel, the extent launched along each hardware axis (column = axis
    code; the widest loop bound to it), and in column 0 the vthreads (largest product)."""
    K = int(an.kernel_starts[-1])
    launch = np.ones((K, 7))
    if an.num_stores == 0:
        return launch
    E = an.extents
    for code in range(1, 7):
        np.maximum.at(launch[:, code], an.store_kernel,
                      np.max(np.where(an.axes == code, E, 1.0), axis=1))
    np.maximum.at(launch[:, 0], an.store_kernel,
                  np.prod(np.where(an.kinds == _VTHREAD, E, 1.0), axis=1))
    return launch


def gpu_block(analysis: ProgramAnalysis, rows: np.ndarray, top: np.ndarray,
              busy: np.ndarray) -> np.ndarray:
    """Logged GPU block ``[P, len(GPU_FEATURES)]``; ``top`` is the dominant store of each
    program in ``busy`` (those with stores).  Zero for programs that are not GPU programs."""
    an = analysis
    P = an.num_programs
    block = np.zeros((P, len(GPU_FEATURES)))
    if not len(busy):
        return block
    srows, global_bytes, launch_flops = gpu_store_features(an, rows)
    seg = an.store_starts[:-1][busy]
    nk = len(GPU_KERNEL_FEATURES)
    ns = len(GPU_STORE_FEATURES)
    block[busy, nk:nk + ns] = _log(np.add.reduceat(srows, seg, axis=0))
    block[busy, nk + ns:nk + 2 * ns] = np.maximum.reduceat(_log(srows), seg, axis=0)
    block[busy, nk + 2 * ns:] = _log(srows[top])

    lim = an.gpu_limits[busy]
    warp, per_sm_threads, per_sm_shared, per_sm_regs, max_blocks = (lim[:, i] for i in range(5))
    launch = _kernel_launch(an)[an.store_kernel[top]]            # dominant kernel per program
    kernel = an.store_kernel[top]
    threads = np.prod(launch[:, 1:4], axis=1)
    warps = np.ceil(threads / warp)
    slots = warps * warp                                         # threads a block occupies
    shared = an.kernel_shared[kernel]
    local = an.kernel_local[kernel]
    # Registers per thread: a base for indices and addresses, plus the thread's local
    # buffers held in registers (4 bytes each), at most the 255 a thread can address.
    regs = np.minimum(255.0, 16.0 + np.ceil(local / 4.0))
    by_threads = np.minimum(np.floor(per_sm_threads / slots), max_blocks)
    by_shared = np.where(shared > 0, np.minimum(np.floor(per_sm_shared / np.maximum(shared, 1)),
                                                max_blocks), max_blocks)
    by_regs = np.minimum(np.floor(per_sm_regs / (regs * slots)), max_blocks)
    per_sm = np.minimum(np.minimum(by_threads, by_shared), by_regs)
    occupancy = np.minimum(per_sm * slots / per_sm_threads, 1.0)
    flops = np.add.reduceat(launch_flops, seg)
    traffic = np.add.reduceat(global_bytes, seg)
    values = {
        "is_gpu": np.ones(len(busy)),
        "num_kernels": np.diff(an.kernel_starts)[busy],
        "threads_per_block": threads,
        "threads_x": launch[:, 1],
        "num_blocks": np.prod(launch[:, 4:7], axis=1),
        "vthreads": launch[:, 0],
        "warps_per_block": warps,
        "idle_lanes": slots - threads,
        "shared_bytes_per_block": shared,
        "local_bytes_per_thread": local,
        "registers_per_thread": regs,
        "blocks_per_sm_threads": by_threads,
        "blocks_per_sm_shared": by_shared,
        "blocks_per_sm_registers": by_regs,
        "blocks_per_sm": per_sm,
        "occupancy": occupancy,
        "global_bytes": traffic,
        "arith_per_global_byte": np.divide(flops, traffic, out=np.zeros(len(busy)),
                                           where=traffic > 0),
        "cross_thread_reduction_stores": np.add.reduceat(an.store_ctr.astype(np.float64), seg),
    }
    block[busy, :nk] = _log(np.stack([values[k] for k in GPU_KERNEL_FEATURES], axis=1))
    block[~an.is_gpu] = 0.0
    return block


def _log(x: np.ndarray) -> np.ndarray:
    return np.log2(1.0 + np.maximum(x, 0.0))


def program_features(analysis: ProgramAnalysis) -> np.ndarray:
    """Fixed-length logged rows ``[P, NUM_FEATURES]``, one per program of ``analysis``."""
    an = analysis
    P = an.num_programs
    rows, weights = store_features(an)
    out = np.zeros((P, NUM_FEATURES))
    D = NUM_STORE_FEATURES
    starts = an.store_starts[:-1]
    sizes = np.diff(an.store_starts)
    busy = np.nonzero(sizes > 0)[0]
    dynamic = np.zeros((P, len(_CPU_GLOBAL_FEATURES) - len(_GLOBAL_STATIC)))
    if len(busy):
        seg = starts[busy]
        logged = _log(rows)
        out[busy, :D] = _log(np.add.reduceat(rows, seg, axis=0))
        out[busy, D:2 * D] = np.maximum.reduceat(logged, seg, axis=0)
        program = np.repeat(np.arange(P), sizes)
        order = np.lexsort((-weights, program))
        top = order[np.searchsorted(program[order], busy)]
        out[busy, 2 * D:3 * D] = logged[top]
        out[:, GPU_OFFSET:] = gpu_block(an, rows, top, busy)
        b = _BUF_INDEX
        width = len(BUFFER_FEATURES)
        flops = np.add.reduceat(rows[:, _INT_OFFSET], seg)
        # Bytes over the buffer slots (the TOP_BUFFERS largest of each store).
        cols = [_BUF_OFFSET + k * width for k in range(TOP_BUFFERS)]
        total = np.add.reduceat(rows[:, [c + b["bytes"] for c in cols]].sum(axis=1), seg)
        unique = np.add.reduceat(rows[:, [c + b["unique_bytes"] for c in cols]].sum(axis=1),
                                 seg)
        dynamic[busy, 0] = flops
        dynamic[busy, 1] = total
        dynamic[busy, 2] = unique
        dynamic[busy, 3] = np.divide(flops, total, out=np.zeros(len(busy)), where=total > 0)
        dynamic[busy, 4] = np.maximum.reduceat(rows[:, _LOOP_INDEX["parallel_prod"]], seg)
    out[:, 3 * D:GPU_OFFSET] = _log(np.concatenate([an.globals_, dynamic], axis=1))
    return out


def features(func: PrimFunc, target: Target | str | None = None) -> np.ndarray:
    """The feature row (``NUM_FEATURES``, float32) of one scheduled or lowered PrimFunc
    (``target``: see :func:`analyze`)."""
    return program_features(analyze(func, target))[0].astype(np.float32)


def extract(funcs: Iterable[PrimFunc], target: Target | str | None = None) -> np.ndarray:
    """Feature rows of many PrimFuncs: ``float32 [len(funcs), NUM_FEATURES]``.

    Each function is walked once (:func:`analyze`, for ``target``: a GPU target lowers
    every program as the GPU build does; None tells GPU programs by their thread bindings);
    the numbers of the whole batch are then computed together.  A function that does not
    lower or holds unsupported IR raises :class:`FeatureError` naming its position and name.
    """
    analyses = []
    target = _as_target(target)
    for i, func in enumerate(funcs):
        try:
            analyses.append(analyze(func, target))
        except Exception as err:  # reported with the candidate's position
            raise FeatureError(f"candidate {i} ({getattr(func, 'name', type(func).__name__)!r})"
                               f" could not be featurised: {type(err).__name__}: {err}") from err
    if not analyses:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    return program_features(concat(analyses)).astype(np.float32)


__all__ = [
    "FEATURE_NAMES",
    "FEATURE_VERSION",
    "GLOBAL_FEATURES",
    "GPU_FEATURES",
    "GPU_KERNEL_FEATURES",
    "GPU_OFFSET",
    "GPU_STORE_FEATURES",
    "NUM_FEATURES",
    "NUM_STORE_FEATURES",
    "STORE_FEATURE_NAMES",
    "FeatureError",
    "GpuLimits",
    "ProgramAnalysis",
    "analyze",
    "concat",
    "extract",
    "feature_names",
    "features",
    "gpu_block",
    "gpu_store_features",
    "program_features",
    "store_features",
]
