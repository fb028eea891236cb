"""Algorithm definitions in TVM's tensor-expression style.

    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])

``create_prim_func`` produces a PrimFunc with one block per compute stage, each inside its own
loop nest, under a root block that allocates the intermediate tensors.
"""
from __future__ import annotations

import builtins
import inspect
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import dtype as dt
from .analysis import access_region
from .bounds import check_loads
from .buffer import Buffer
from .errors import DTypeError, TEError, TensorIRError
from .expr import (
    INTRINSICS, BufferLoad, CommReducer, FloatImm, IntImm, PrimExpr, Reduce, Var, call, cast,
    compare, const, equal, logic_and, logic_not, logic_or, maximum, minimum, not_equal, select,
)
from .func import PrimFunc
from .stmt import (
    REDUCE, SERIAL, SPATIAL, TRUE, Block, BlockRealize, BufferRegion, BufferStore, For, IterVar,
    Range, seq,
)
from .visitor import collect, substitute, transform, walk

__all__ = [
    "Tensor", "placeholder", "compute", "reduce_axis", "sum", "max", "min", "comm_reducer",
    "if_then_else", "all", "any", "create_prim_func", "var", "const", "floordiv", "floormod",
    "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "power", "pow", "abs", "floor",
    "ceil", "round", "equal", "not_equal", "max_value", "min_value", "cast", "AxisVar",
]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AxisVar(Var):
    """An iteration axis of a stage: a variable that also knows its domain and kind.

    It is a ``Var``, so it can be used in index expressions directly; ``.var`` and ``.dom``
    mirror TVM's IterVar.
    """

    dom: Range | None = None
    kind: str = SPATIAL

    @property
    def var(self) -> "AxisVar":
        return self

    def __repr__(self) -> str:
        return f"AxisVar({self.name}, {self.kind})"


class Operation:
    """What produces a tensor: a placeholder or a compute stage."""

    name: str
    tag: str = ""

    @property
    def input_tensors(self) -> tuple:
        return ()


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape: tuple, dtype: str):
        self.name, self.shape, self.dtype = name, shape, dtype


class ComputeOp(Operation):
    def __init__(self, name, axis, reduce_axis, body, inputs, tag, attrs):
        self.name = name
        self.axis = axis
        self.reduce_axis = reduce_axis
        self.body = body
        self.inputs = inputs
        self.tag = tag
        self.attrs = attrs

    @property
    def input_tensors(self) -> tuple:
        return self.inputs


class Tensor:
    """A tensor of an algorithm definition.  Indexing it builds a load expression."""

    def __init__(self, op: Operation, shape: tuple, dtype: str, name: str):
        self.op, self.shape, self.dtype, self.name = op, shape, dtype, name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> "ProducerLoad":
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise TEError(
                f"tensor {self.name} has rank {len(self.shape)} but was indexed with "
                f"{len(indices)} indices"
            )
        conv = []
        for i in indices:
            e = i if isinstance(i, PrimExpr) else const(i)
            if not dt.is_int(e.dtype):
                raise TEError(f"tensor {self.name} indexed with a {e.dtype} expression")
            conv.append(e)
        return ProducerLoad(self, tuple(conv))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


@dataclass(frozen=True, slots=True)
class ProducerLoad(PrimExpr):
    """``tensor[indices]`` inside an algorithm definition (becomes a BufferLoad)."""

    tensor: Tensor
    indices: tuple

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


def _shape(shape, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, IntImm)):
        shape = (shape,)
    out = []
    for s in shape:
        if isinstance(s, IntImm):
            s = s.value
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise TEError(f"{what}: shape must hold non-negative ints, got {shape!r}")
        out.append(int(s))
    return tuple(out)


def placeholder(shape, dtype="float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    shape = _shape(shape, f"placeholder {name}")
    try:
        dtype = dt.canonical(dtype)
    except DTypeError as err:
        raise TEError(f"placeholder {name}: {err}") from None
    return Tensor(PlaceholderOp(name, shape, dtype), shape, dtype, name)


def var(name: str = "v", dtype: str = dt.INDEX_DTYPE) -> Var:
    return Var(name, dt.canonical(dtype))


def _axis_int(value, name: str) -> int:
    """An int bound of reduce_axis ``name`` (Python / numpy int or an IntImm)."""
    if isinstance(value, IntImm) and value.dtype != "bool":
        return value.value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise TEError(f"reduce_axis {name}: dom must be an int extent or a (begin, end) pair of "
                  f"ints, got {value!r}")


def reduce_axis(dom, name: str = "rv") -> AxisVar:
    """A reduction axis over ``dom``: an extent ``n`` (0..n-1) or a ``(begin, end)`` pair."""
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise TEError(f"reduce_axis {name}: expected (begin, end), got {dom!r}")
        begin, end = _axis_int(dom[0], name), _axis_int(dom[1], name)
        rng = Range(IntImm(begin), IntImm(end - begin))
    else:
        rng = Range(IntImm(0), IntImm(_axis_int(dom, name)))
    if isinstance(rng.extent, IntImm) and rng.extent.value < 0:
        raise TEError(f"reduce_axis {name}: negative extent {rng.extent.value}")
    return AxisVar(name, dt.INDEX_DTYPE, rng, REDUCE)


# ---------------------------------------------------------------------------------------------
# Reducers
# ---------------------------------------------------------------------------------------------

class _Reducer:
    """A commutative reducer usable as ``reducer(expr, axis=k, where=cond)``."""

    def __init__(self, name: str, fcombine: Callable, fidentity: Callable):
        self.name = name
        self.fcombine = fcombine
        self.fidentity = fidentity

    def make(self, dtype: str) -> CommReducer:
        lhs, rhs = Var("x", dtype), Var("y", dtype)
        result = self.fcombine(lhs, rhs)
        if not isinstance(result, PrimExpr) or result.dtype != dtype:
            raise TEError(f"reducer {self.name}: combine must return a {dtype} expression")
        identity = self.fidentity(dtype)
        identity = identity if isinstance(identity, PrimExpr) else const(identity, dtype)
        return CommReducer(self.name, lhs, rhs, result, identity)

    def __call__(self, expr, axis=None, where=None, init=None):
        if axis is None:
            raise TEError(f"reducer {self.name} needs an axis")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not (isinstance(a, AxisVar) and a.kind == REDUCE):
                raise TEError(f"reducer {self.name}: axis {a!r} is not a te.reduce_axis")
        source = expr if isinstance(expr, PrimExpr) else const(expr)
        combiner = self.make(source.dtype)
        if init is not None:
            combiner = CommReducer(combiner.name, combiner.lhs, combiner.rhs, combiner.result,
                                   const(init, source.dtype))
        cond = TRUE if where is None else _no_python_bool(where, f"reducer {self.name}: where=")
        if not isinstance(cond, PrimExpr) or cond.dtype != "bool":
            raise TEError(f"reducer {self.name}: where= must be a boolean expression")
        return Reduce(combiner, source, axes, cond)


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reduce") -> _Reducer:
    """Define a commutative reducer: ``fcombine(x, y)`` and ``fidentity(dtype)``.

    Example: ``prod = te.comm_reducer(lambda x, y: x * y, lambda t: 1, name="prod")``.
    """
    return _Reducer(name, fcombine, fidentity)


_sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")
_max = comm_reducer(lambda x, y: maximum(x, y), lambda t: const(dt.min_value(t), t), name="max")
_min = comm_reducer(lambda x, y: minimum(x, y), lambda t: const(dt.max_value(t), t), name="min")


def _is_axis_arg(axis) -> bool:
    if isinstance(axis, AxisVar) and axis.kind == REDUCE:
        return True
    # NOTE: builtins.all -- this module defines te.all, which builds IR.
    return isinstance(axis, (list, tuple)) and len(axis) > 0 and builtins.all(
        isinstance(a, AxisVar) and a.kind == REDUCE for a in axis)


def sum(expr, axis=None, where=None, init=None):  # noqa: A001 - TVM's name
    return _sum(expr, axis, where, init)


def max(expr, axis=None, where=None, init=None):  # noqa: A001
    """``max(expr, axis=k)`` reduces; ``max(a, b)`` of two expressions is elementwise."""
    if axis is not None and not _is_axis_arg(axis):
        return maximum(expr, axis)
    return _max(expr, axis, where, init)


def min(expr, axis=None, where=None, init=None):  # noqa: A001
    """``min(expr, axis=k)`` reduces; ``min(a, b)`` of two expressions is elementwise."""
    if axis is not None and not _is_axis_arg(axis):
        return minimum(expr, axis)
    return _min(expr, axis, where, init)


# ---------------------------------------------------------------------------------------------
# Elementwise helpers
# ---------------------------------------------------------------------------------------------

def _no_python_bool(value, what: str):
    """Refuse a Python bool where an expression is expected.

    A bool here is almost always a comparison Python answered instead of building IR (``is``,
    ``in``, a comparison of plain ints, or ``==`` between operands of unrelated dtypes); taking
    it as a constant would silently compute the wrong thing.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TEError(f"{what} got the Python bool {bool(value)}, not an expression; build "
                      f"comparisons as expressions, e.g. te.equal(a, b) / te.not_equal(a, b), "
                      f"or te.const(True) for a constant")
    return value


def if_then_else(cond, then_value, else_value) -> PrimExpr:
    """Select lazily: the branch not taken is never evaluated (used for padding)."""
    _no_python_bool(cond, "if_then_else condition")
    _no_python_bool(then_value, "if_then_else true value")
    _no_python_bool(else_value, "if_then_else false value")
    return select(cond, then_value, else_value)


def all(*conds) -> PrimExpr:  # noqa: A001
    out = const(True)
    for d, c in enumerate(conds):
        out = logic_and(out, _no_python_bool(c, f"te.all argument {d}"))
    return out


def any(*conds) -> PrimExpr:  # noqa: A001
    out = const(False)
    for d, c in enumerate(conds):
        out = logic_or(out, _no_python_bool(c, f"te.any argument {d}"))
    return out


def floordiv(a, b) -> PrimExpr:
    from .expr import binary

    return binary("//", a, b)


def floormod(a, b) -> PrimExpr:
    from .expr import binary

    return binary("%", a, b)


def max_value(dtype) -> PrimExpr:
    dtype = dt.canonical(dtype)
    return const(dt.max_value(dtype), dtype)


def min_value(dtype) -> PrimExpr:
    dtype = dt.canonical(dtype)
    return const(dt.min_value(dtype), dtype)


def _intrinsic(name):
    def fn(*args):
        return call(name, *args)

    fn.__name__ = name
    fn.__doc__ = f"Math intrinsic {name}."
    return fn


exp = _intrinsic("exp")
log = _intrinsic("log")
sqrt = _intrinsic("sqrt")
rsqrt = _intrinsic("rsqrt")
tanh = _intrinsic("tanh")
erf = _intrinsic("erf")
sigmoid = _intrinsic("sigmoid")
power = _intrinsic("pow")
pow = power  # noqa: A001
floor = _intrinsic("floor")
ceil = _intrinsic("ceil")
round = _intrinsic("round")  # noqa: A001
exp2 = _intrinsic("exp2")
log2 = _intrinsic("log2")


def abs(x) -> PrimExpr:  # noqa: A001
    return call("abs", x)


# ---------------------------------------------------------------------------------------------
# compute
# ---------------------------------------------------------------------------------------------

def _axis_names(fcompute: Callable, ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == 1 and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        return [f"i{d}" for d in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != ndim:
        return None  # reported by the caller, which knows the stage name
    return names


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: dict | None = None) -> Tensor:
    """A stage computing each element of a tensor of ``shape`` with ``fcompute(*indices)``."""
    shape = _shape(shape, f"stage {name}")
    names = _axis_names(fcompute, len(shape))
    if names is None:
        raise TEError(f"stage {name}: fcompute takes a different number of indices than the "
                      f"shape's rank {len(shape)}")
    axis = tuple(AxisVar(n, dt.INDEX_DTYPE, Range(IntImm(0), IntImm(s)), SPATIAL)
                 for n, s in zip(names, shape))
    try:
        body = fcompute(*axis)
        if isinstance(body, (list, tuple)):
            raise TEError("returning several values from one stage is not supported")
        _no_python_bool(body, "the body")
        if not isinstance(body, PrimExpr):
            body = const(body)
        if not isinstance(body, Reduce) and collect(body, Reduce):
            body = _split_reductions(name, shape, axis, body)
        _check_body(body, axis)
    except (TensorIRError, TypeError) as err:
        if isinstance(err, TEError) and str(err).startswith(f"stage {name}:"):
            raise
        raise TEError(f"stage {name}: {err}") from err
    return _stage(name, shape, axis, body, tag, attrs)


def _stage(name: str, shape: tuple, axis: tuple, body: PrimExpr, tag: str = "",
           attrs: dict | None = None) -> Tensor:
    reduce_axes = body.axis if isinstance(body, Reduce) else ()
    inputs = []
    for load in collect(body, ProducerLoad):
        if load.tensor not in inputs:
            inputs.append(load.tensor)
    op = ComputeOp(name, axis, reduce_axes, body, tuple(inputs), tag, dict(attrs or {}))
    return Tensor(op, shape, body.dtype, name)


def _split_reductions(name: str, shape: tuple, axis: tuple, body: PrimExpr) -> PrimExpr:
    """``body`` with each reduction inside it computed by a stage of its own.

    ``te.sum(X[i, k], axis=k) / L`` becomes a stage ``<name>_red`` holding the sum and a body
    reading it: ``<name>_red[i] / L``; the caller's stage keeps ``name``, so the output tensor
    (and the records and reports naming it) reads as the user wrote it.  A second reduction in
    the same body gets ``<name>_red1``, and so on.
    """
    stages: list = []

    def lift(node):
        if not isinstance(node, Reduce):
            return None
        if collect(node.source, Reduce) or collect(node.condition, Reduce):
            raise TEError("a reduction inside another reduction is not supported; "
                          "compute the inner one in a stage of its own")
        red_name = f"{name}_red" if not stages else f"{name}_red{len(stages)}"
        _check_body(node, axis)
        tensor = _stage(red_name, shape, axis, node)
        stages.append(tensor)
        return ProducerLoad(tensor, tuple(axis))

    return transform(body, lift)


def _check_body(body: PrimExpr, axis: tuple) -> None:
    top_reduce = body if isinstance(body, Reduce) else None
    if top_reduce is not None:
        nested = collect(top_reduce.source, Reduce) + collect(top_reduce.condition, Reduce)
    else:
        nested = collect(body, Reduce)
    if nested:
        raise TEError("a reduction inside another reduction is not supported; compute the "
                      "inner one in a stage of its own")
    bound = set(axis)
    if top_reduce is not None:
        bound |= set(top_reduce.axis)
        if top_reduce.source.dtype != top_reduce.combiner.identity.dtype:
            raise DTypeError("reduction identity dtype differs from its source")
    for v in collect(body, Var):
        if isinstance(v, AxisVar) and v.kind == REDUCE and v not in bound:
            raise TEError(f"reduction axis {v.name} is used outside a reduction over it "
                          f"(unbound reduce_axis)")
        if v not in bound and not _is_reducer_var(v, body):
            raise TEError(f"variable {v.name} is not an axis of this stage")


def _is_reducer_var(v: Var, body: PrimExpr) -> bool:
    return isinstance(body, Reduce) and v in (body.combiner.lhs, body.combiner.rhs)


# ---------------------------------------------------------------------------------------------
# create_prim_func
# ---------------------------------------------------------------------------------------------

def _topo_stages(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    state: dict[int, int] = {}

    def visit(t: Tensor):
        s = state.get(id(t))
        if s == 2:
            return
        if s == 1:
            raise TEError(f"stage {t.name} depends on itself")
        state[id(t)] = 1
        for inp in t.op.input_tensors:
            visit(inp)
        state[id(t)] = 2
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def create_prim_func(tensors: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """Build a PrimFunc whose parameters are ``tensors`` (inputs and outputs, in order).

    Every stage reachable from a compute tensor in the list becomes a block; stages not in the
    list become intermediate buffers allocated by the root block.
    """
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TEError(f"create_prim_func takes te tensors, got {type(t).__name__}")
    if len({id(t) for t in tensors}) != len(tensors):
        raise TEError("create_prim_func: a tensor appears twice in the argument list")
    order = _topo_stages([t for t in tensors if isinstance(t.op, ComputeOp)])
    params = set(id(t) for t in tensors)
    for t in order:
        if isinstance(t.op, PlaceholderOp) and id(t) not in params:
            users = [s.name for s in order if isinstance(s.op, ComputeOp) and t in s.op.inputs]
            raise TEError(f"placeholder {t.name} is used by stage {', '.join(users)} but is not "
                          f"in the argument list")

    used_names: set[str] = set()

    def unique(n: str) -> str:
        base, k = n, 1
        while n in used_names:
            n = f"{base}_{k}"
            k += 1
        used_names.add(n)
        return n

    buffers: dict[int, Buffer] = {}
    for t in tensors:
        buffers[id(t)] = Buffer(unique(t.name), tuple(IntImm(s) for s in t.shape), t.dtype)
    intermediates = []
    for t in order:
        if id(t) not in buffers:
            buf = Buffer(unique(t.name), tuple(IntImm(s) for s in t.shape), t.dtype)
            buffers[id(t)] = buf
            intermediates.append(buf)

    block_names: set[str] = set()
    nests = []
    for t in order:
        if isinstance(t.op, ComputeOp):
            nests.append(_stage_nest(t, buffers, block_names))
    root = Block("root", (), (), (), seq(*nests) if nests else seq(), None,
                 tuple(intermediates))
    return PrimFunc(tuple(buffers[id(t)] for t in tensors), BlockRealize((), TRUE, root), name)


def _stage_nest(t: Tensor, buffers: dict, block_names: set):
    op: ComputeOp = t.op
    out = buffers[id(t)]
    name = op.name
    k = 1
    while name in block_names:
        name = f"{op.name}_{k}"
        k += 1
    block_names.add(name)

    body = op.body
    axes = list(op.axis) + list(op.reduce_axis)
    # Fresh variables: block iteration variables v_*, loop variables named after the axes.
    block_vars = {a: Var(f"v_{a.name}", dt.INDEX_DTYPE) for a in axes}
    loop_vars = {a: Var(a.name, dt.INDEX_DTYPE) for a in axes}

    def to_buffer(n):
        if isinstance(n, ProducerLoad):
            return BufferLoad(buffers[id(n.tensor)], n.indices)
        return None

    def rewrite(e):
        e = transform(e, to_buffer)
        return transform(e, lambda n: block_vars.get(n) if isinstance(n, Var) else None)

    store_idx = tuple(block_vars[a] for a in op.axis)
    if isinstance(body, Reduce):
        source = rewrite(body.source)
        cond = rewrite(body.condition)
        current = BufferLoad(out, store_idx)
        combiner = body.combiner
        update = substitute(combiner.result, {combiner.lhs: current, combiner.rhs: source})
        if not (isinstance(cond, IntImm) and cond.value):
            update = select(cond, update, current)
        block_body = BufferStore(out, update, store_idx)
        init = BufferStore(out, body.combiner.identity, store_idx)
    else:
        block_body = BufferStore(out, rewrite(body), store_idx)
        init = None
    # Refuse loads proven to leave their buffer, guard those that cannot be proven inside.
    dom = {block_vars[a]: (a.dom.min.value, a.dom.min.value + a.dom.extent.value - 1)
           for a in axes if isinstance(a.dom.min, IntImm) and isinstance(a.dom.extent, IntImm)}
    block_body = check_loads(op.name, block_body, dom,
                             {block_vars[a]: loop_vars[a] for a in axes})

    loads = collect(block_body, BufferLoad)
    accesses: dict[int, tuple] = {}
    for ld in loads:
        if ld.buffer is out:
            continue
        accesses.setdefault(id(ld.buffer), (ld.buffer, []))[1].append(ld.indices)
    reads = tuple(BufferRegion(buf, access_region(buf, idxs)) for buf, idxs in accesses.values())
    if init is not None:
        reads = reads + (BufferRegion(out, tuple(Range(v, IntImm(1)) for v in store_idx)),)
    writes = (BufferRegion(out, tuple(Range(v, IntImm(1)) for v in store_idx)),)
    iter_vars = tuple(IterVar(block_vars[a], a.dom, a.kind) for a in axes)
    attrs = tuple(sorted((k, v) for k, v in op.attrs.items())) if op.attrs else ()
    if op.tag:
        attrs = attrs + (("tag", op.tag),)
    block = Block(name, iter_vars, reads, writes, block_body, init, (), attrs)
    stmt = BlockRealize(tuple(loop_vars[a] for a in axes), TRUE, block)
    for a in reversed(axes):
        stmt = For(loop_vars[a], a.dom.min, a.dom.extent, SERIAL, stmt)
    return stmt


# Re-exports for users who write te.cast / te.equal.
cast = cast
equal = equal
not_equal = not_equal
const = const
_ = (INTRINSICS, FloatImm, compare, logic_not, walk)
