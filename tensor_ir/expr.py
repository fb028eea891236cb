"""Immutable expressions: variables, constants, arithmetic, comparisons, select, cast, calls, loads.

Nodes are frozen dataclasses with children in tuples.  Python operators on expressions build new
expressions (``a + b``, ``a // 4``, ``a < b``), and so do ``==`` and ``!=``, as in TVM: ``a == b``
is a :class:`Cmp` node usable in ``te.all``, ``if_then_else``, ``where=`` and compute bodies.  The
node built by ``==`` also answers Python's question: its truth value is structural equality of
the two operands (``Var`` compares by identity, as does ``Buffer``: a variable is a definition,
its name is only for printing), so ``a == b`` in plain Python code, dict keys, ``in`` tests and
dataclass equality of statements keep their meaning.  Hashes are structural too.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Union

import numpy as np

from . import dtype as dt
from .errors import DTypeError


class Node:
    """Marker base of every IR node (expressions, statements, buffers, functions)."""

    __slots__ = ()


# The readable text of expressions, statements and functions is tensor_ir.printer's.  The
# printer needs every node class, so the nodes cannot import it: it installs itself here when
# tensor_ir is imported.
_PRINTER: list = []


def set_printer(to_text) -> None:
    _PRINTER[:] = [to_text]


def node_text(node) -> str:
    """``str()`` of an IR node: its loop-nest text (its repr before a printer is installed)."""
    return _PRINTER[0](node) if _PRINTER else repr(node)


class PrimExpr(Node):
    """Base of scalar expressions.  Subclasses provide ``dtype``."""

    __slots__ = ()
    # Make numpy scalars defer to our reflected operators (np.float32(2) * expr).
    __array_ufunc__: ClassVar[Any] = None
    # Whether == means "the same object" (definitions: Var) rather than "the same structure".
    _by_identity: ClassVar[bool] = False

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other):
        return binary("+", self, other)

    def __radd__(self, other):
        return binary("+", other, self)

    def __sub__(self, other):
        return binary("-", self, other)

    def __rsub__(self, other):
        return binary("-", other, self)

    def __mul__(self, other):
        return binary("*", self, other)

    def __rmul__(self, other):
        return binary("*", other, self)

    def __truediv__(self, other):
        return binary("/", self, other)

    def __rtruediv__(self, other):
        return binary("/", other, self)

    def __floordiv__(self, other):
        return binary("//", self, other)

    def __rfloordiv__(self, other):
        return binary("//", other, self)

    def __mod__(self, other):
        return binary("%", self, other)

    def __rmod__(self, other):
        return binary("%", other, self)

    def __neg__(self):
        if isinstance(self, (IntImm, FloatImm)):
            return const(-self.value, self.dtype)
        return binary("-", const(0, self.dtype), self)

    def __pos__(self):
        return self

    def __abs__(self):
        return call("abs", self)

    # -- comparisons (build Cmp nodes; the truth of == / != is structural equality) -----------
    def __eq__(self, other):
        return _equality("==", self, other)

    def __ne__(self, other):
        return _equality("!=", self, other)

    def __lt__(self, other):
        return compare("<", self, other)

    def __le__(self, other):
        return compare("<=", self, other)

    def __gt__(self, other):
        return compare(">", self, other)

    def __ge__(self, other):
        return compare(">=", self, other)

    # -- logic on boolean expressions ----------------------------------------------------------
    def __and__(self, other):
        return logic_and(self, other)

    def __rand__(self, other):
        return logic_and(other, self)

    def __or__(self, other):
        return logic_or(self, other)

    def __ror__(self, other):
        return logic_or(other, self)

    def __invert__(self):
        return logic_not(self)

    def __bool__(self):
        raise TypeError(
            f"an IR expression ({type(self).__name__}) has no truth value; use "
            f"te.if_then_else / te.all / te.any to branch on it"
        )

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # NOTE: @dataclass(eq=True) would give every node class a generated __eq__ returning a
        # bool.  Putting the expression-building operators into each subclass's own namespace
        # before the decorator runs makes it keep them; it still generates the structural
        # __hash__ from the fields (frozen=True, eq=True), which is what dict keys need.
        cls.__eq__ = PrimExpr.__eq__
        cls.__ne__ = PrimExpr.__ne__
        # A class namespace holding __eq__ but no __hash__ gets __hash__ = None from Python
        # (dataclass(slots=True) rebuilds the class from such a namespace); inherit instead.
        if "__hash__" in cls.__dict__ and cls.__dict__["__hash__"] is None:
            del cls.__hash__

    def astype(self, dtype) -> "PrimExpr":
        return cast(dtype, self)

    def __str__(self) -> str:
        return node_text(self)


ExprLike = Union[PrimExpr, int, float, bool]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(PrimExpr):
    """A scalar variable (loop variable, block iteration variable, size).  Identity equality."""

    name: str
    dtype: str = dt.INDEX_DTYPE

    def __repr__(self) -> str:
        return f"Var({self.name}: {self.dtype})"

    _by_identity: ClassVar[bool] = True
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class IntImm(PrimExpr):
    """Integer (or boolean) constant."""

    value: int
    dtype: str = dt.INDEX_DTYPE


@dataclass(frozen=True, slots=True)
class FloatImm(PrimExpr):
    """Floating-point constant (may be inf or -inf, used as reduction identities)."""

    value: float
    dtype: str = "float32"


# Binary arithmetic operator symbols and their Python evaluation on constants.
ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
CMP_OPS = ("==", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True, slots=True)
class BinOp(PrimExpr):
    """``a op b`` for op in + - * / // (floordiv) % (floormod) min max; dtype is a's."""

    op: str
    a: PrimExpr
    b: PrimExpr

    @property
    def dtype(self) -> str:
        return self.a.dtype


class _Boolean(PrimExpr):
    """Base of the expressions whose value is a bool: comparisons and logic."""

    __slots__ = ()
    dtype: ClassVar[str] = "bool"


@dataclass(frozen=True, slots=True)
class Cmp(_Boolean):
    """Comparison ``a op b`` with op in == != < <= > >=; dtype bool.

    A node built by Python's ``==`` / ``!=`` on expressions also carries the structural answer
    to that comparison (``_truth``), which is its truth value; every other Cmp has none, and
    asking for it raises TypeError like any expression.  ``_truth`` is not part of the node's
    structure: it is left out of equality, hashing, printing, JSON and rebuilt copies.
    """

    op: str
    a: PrimExpr
    b: PrimExpr
    _truth: bool | None = field(default=None, init=False, compare=False, repr=False)

    def __bool__(self):
        if self._truth is None:
            return PrimExpr.__bool__(self)
        return self._truth


@dataclass(frozen=True, slots=True)
class And(_Boolean):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class Or(_Boolean):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class Not(_Boolean):
    a: PrimExpr


@dataclass(frozen=True, slots=True)
class Select(PrimExpr):
    """``true_value if condition else false_value``.

    Only the chosen branch is evaluated (as TVM's ``if_then_else``): a branch may hold a load
    that is out of bounds when the condition is false, which is how padding is written.
    """

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


# Math intrinsics: name -> number of arguments.  All take and return floats.
INTRINSICS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1, "sigmoid": 1, "abs": 1,
    "floor": 1, "ceil": 1, "round": 1, "pow": 2, "exp2": 1, "log2": 1, "sin": 1, "cos": 1,
}


@dataclass(frozen=True, slots=True)
class Call(PrimExpr):
    """Call of a math intrinsic (see INTRINSICS)."""

    name: str
    args: tuple
    dtype: str


@dataclass(frozen=True, slots=True)
class BufferLoad(PrimExpr):
    """``buffer[indices]``."""

    buffer: Any  # tensor_ir.buffer.Buffer (kept as Any to avoid an import cycle)
    indices: tuple

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


@dataclass(frozen=True, slots=True)
class CommReducer(Node):
    """A commutative reducer: ``combine(lhs, rhs)`` with an identity element per dtype.

    ``lhs``/``rhs`` are the placeholders of the combining expression ``result``.
    """

    name: str
    lhs: Var
    rhs: Var
    result: PrimExpr
    identity: PrimExpr

@dataclass(frozen=True, slots=True)
class Reduce(PrimExpr):
    """Reduction of ``source`` over ``axis`` (IterVars of kind reduce) with ``combiner``.

    Appears only as the whole body of a ``te.compute``; ``create_prim_func`` turns it into a
    block with an init statement and an update.
    """

    combiner: CommReducer
    source: PrimExpr
    axis: tuple
    condition: PrimExpr

    @property
    def dtype(self) -> str:
        return self.source.dtype


# ---------------------------------------------------------------------------------------------
# Constructors with dtype checking and constant folding
# ---------------------------------------------------------------------------------------------

def const(value, dtype: str | None = None) -> PrimExpr:
    """A constant of ``dtype`` (inferred from the Python / numpy type when omitted)."""
    if isinstance(value, PrimExpr):
        return value if dtype is None else cast(dtype, value)
    if dtype is None:
        if isinstance(value, (bool, np.bool_)):
            dtype = "bool"
        elif isinstance(value, np.generic):
            dtype = dt.canonical(value.dtype)
        elif isinstance(value, int):
            dtype = dt.INDEX_DTYPE
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise DTypeError(f"cannot make an IR constant from {value!r}")
    dtype = dt.canonical(dtype)
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    if dtype == "bool":
        return IntImm(int(bool(value)), "bool")
    if isinstance(value, float) and not float(value).is_integer():
        raise DTypeError(f"constant {value!r} is not an integer but dtype is {dtype}")
    return IntImm(int(value), dtype)


def _as_expr(value, like: str | None) -> PrimExpr:
    if isinstance(value, PrimExpr):
        return value
    if like is not None:
        if isinstance(value, float) and not dt.is_float(like) and not float(value).is_integer():
            raise DTypeError(
                f"float constant {value!r} meets an expression of dtype {like}; cast one side"
            )
        return const(value, like)
    return const(value)


def _unify(a, b, what: str) -> tuple[PrimExpr, PrimExpr]:
    """Convert Python scalars to the other operand's dtype; check expression dtypes agree."""
    a_like = a.dtype if isinstance(a, PrimExpr) else None
    b_like = b.dtype if isinstance(b, PrimExpr) else None
    a = _as_expr(a, b_like)
    b = _as_expr(b, a_like)
    if a.dtype != b.dtype:
        # Integers of different widths promote to the wider one (index arithmetic mixes
        # int32 data with int64 loop variables); anything involving floats must be cast.
        if dt.is_int(a.dtype) and dt.is_int(b.dtype):
            wide = a.dtype if dt.bits(a.dtype) >= dt.bits(b.dtype) else b.dtype
            return cast(wide, a), cast(wide, b)
        raise DTypeError(
            f"dtype mismatch in {what}: {a.dtype} vs {b.dtype}; cast one side with .astype()"
        )
    return a, b


_PY_ARITH = {
    "+": operator.add, "-": operator.sub, "*": operator.mul,
    "min": min, "max": max,
}


def _wrap_int(value: int, dtype: str) -> int:
    if dtype == "bool":
        return int(bool(value))
    nbits = dt.bits(dtype)
    value &= (1 << nbits) - 1
    if not dt.is_unsigned(dtype) and value >= 1 << (nbits - 1):
        value -= 1 << nbits
    return value


def _fold(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """Fold constants and trivial identities; None when nothing folds.

    Integer division and modulo follow numpy everywhere (here, the interpreter and the code
    generators): ``x // 0 == 0``, ``x % 0 == 0``, and ``INT_MIN // -1`` wraps to ``INT_MIN``.
    Nothing traps, so a kernel never dies of SIGFPE on data it was given.
    """
    ca = isinstance(a, (IntImm, FloatImm))
    cb = isinstance(b, (IntImm, FloatImm))
    is_int = dt.is_int(a.dtype)
    if ca and cb:
        x, y = a.value, b.value
        if op in _PY_ARITH:
            v = _PY_ARITH[op](x, y)
        elif op == "/":
            if is_int:
                return None
            v = x / y if y != 0 else (math.copysign(math.inf, x) if x != 0 else math.nan)
        elif op in ("//", "%"):
            if y == 0:
                if not is_int:
                    return None
                return IntImm(0, a.dtype)  # numpy's integer x // 0 and x % 0 (see _fold)
            v = x // y if op == "//" else x % y
            if not is_int:
                v = float(v)
        else:
            return None
        if is_int:
            return IntImm(_wrap_int(int(v), a.dtype), a.dtype)
        # Round through numpy so that float32 folding matches float32 arithmetic.
        return FloatImm(float(np.dtype(a.dtype).type(v)), a.dtype)
    if is_int:
        # Integer identities only: float x*0 is not 0 for inf/nan.
        if op == "+":
            if cb and b.value == 0:
                return a
            if ca and a.value == 0:
                return b
        elif op == "-":
            if cb and b.value == 0:
                return a
        elif op == "*":
            if cb and b.value == 1:
                return a
            if ca and a.value == 1:
                return b
            if (cb and b.value == 0) or (ca and a.value == 0):
                return IntImm(0, a.dtype)
        elif op in ("//",):
            if cb and b.value == 1:
                return a
            if cb and b.value == 0:
                return IntImm(0, a.dtype)
        elif op == "%":
            if cb and b.value in (1, 0):
                return IntImm(0, a.dtype)
    return None


def binary(op: str, a: ExprLike, b: ExprLike) -> PrimExpr:
    """Build ``a op b`` for an arithmetic op, with dtype checks and constant folding."""
    a, b = _unify(a, b, f"'{op}'")
    if op == "/" and dt.is_int(a.dtype):
        raise DTypeError("'/' on integers is ambiguous; use // (floordiv) or cast to a float dtype")
    if a.dtype == "bool" and op not in ("min", "max"):
        raise DTypeError(f"arithmetic '{op}' on bool operands; cast them first")
    folded = _fold(op, a, b)
    if folded is not None:
        return folded
    return BinOp(op, a, b)


def compare(op: str, a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = _unify(a, b, f"'{op}'")
    if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
        fn = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
              ">": operator.gt, ">=": operator.ge}[op]
        return IntImm(int(fn(a.value, b.value)), "bool")
    return Cmp(op, a, b)


# Per node class: a function returning the structural field values as a tuple.
_STRUCTURE: dict[type, Callable] = {}


def _structure(cls: type) -> Callable:
    getter = _STRUCTURE.get(cls)
    if getter is None:
        names = [f.name for f in fields(cls) if f.compare]
        if len(names) == 1:
            single = operator.attrgetter(names[0])
            getter = lambda n: (single(n),)  # noqa: E731 -- a tuple, like attrgetter(a, b)
        else:
            getter = operator.attrgetter(*names)
        _STRUCTURE[cls] = getter
    return getter


def _expr_equal(a: PrimExpr, b: PrimExpr) -> bool:
    """Structural equality of two expressions; variables compare by identity."""
    # NOTE: this runs for every == on expressions (dict keys, `in` tests, statement equality),
    # so it is one flat loop per node rather than a helper call per field.
    if a is b:
        return True
    cls = type(a)
    if cls is not type(b) or a._by_identity:
        return False
    getter = _STRUCTURE.get(cls) or _structure(cls)
    for x, y in zip(getter(a), getter(b)):
        if x is y:
            continue
        if isinstance(x, PrimExpr):
            if not _expr_equal(x, y):
                return False
        elif isinstance(x, tuple):
            if not (isinstance(y, tuple) and len(x) == len(y)):
                return False
            for u, v in zip(x, y):
                if u is v:
                    continue
                if isinstance(u, PrimExpr):
                    if not _expr_equal(u, v):
                        return False
                elif not u == v:
                    return False
        elif not x == y:  # buffers by identity, reducers and plain values by their own ==
            return False
    return True


_NUMBER = (int, float, np.number, np.bool_)


def _equality(op: str, a: PrimExpr, b) -> PrimExpr | bool:
    """``a == b`` / ``a != b`` on expressions: a Cmp node whose truth is structural equality."""
    if isinstance(b, PrimExpr):
        same = _expr_equal(a, b)
    elif isinstance(b, _NUMBER):
        same = False  # a number is no IR node, whatever its value
    else:
        return NotImplemented
    truth = same if op == "==" else not same
    if same:
        # Structurally equal operands have the same dtype: skip _unify, whose dtype queries
        # walk down long expressions, on the path every dict lookup and `in` test takes.
        node = Cmp(op, a, b)
        object.__setattr__(node, "_truth", truth)
        return node
    try:
        x, y = _unify(a, b, f"'{op}'")
    except DTypeError:
        # No IR comparison exists between these operands (a float and an int expression, say),
        # so this can only be Python's question: answer it plainly.
        return truth
    node = Cmp(op, x, y)
    object.__setattr__(node, "_truth", truth)
    return node


def equal(a: ExprLike, b: ExprLike) -> PrimExpr:
    return compare("==", a, b)


def not_equal(a: ExprLike, b: ExprLike) -> PrimExpr:
    return compare("!=", a, b)


def _as_bool(value, what: str) -> PrimExpr:
    value = _as_expr(value, "bool")
    if value.dtype != "bool":
        raise DTypeError(f"{what} needs a boolean operand, got {value.dtype}")
    return value


def logic_and(a, b) -> PrimExpr:
    a, b = _as_bool(a, "and"), _as_bool(b, "and")
    if isinstance(a, IntImm):
        return b if a.value else a
    if isinstance(b, IntImm):
        return a if b.value else b
    return And(a, b)


def logic_or(a, b) -> PrimExpr:
    a, b = _as_bool(a, "or"), _as_bool(b, "or")
    if isinstance(a, IntImm):
        return a if a.value else b
    if isinstance(b, IntImm):
        return b if b.value else a
    return Or(a, b)


def logic_not(a) -> PrimExpr:
    a = _as_bool(a, "not")
    if isinstance(a, IntImm):
        return IntImm(int(not a.value), "bool")
    if isinstance(a, Not):
        return a.a
    return Not(a)


def select(condition, true_value, false_value) -> PrimExpr:
    condition = _as_bool(condition, "select")
    t, f = _unify(true_value, false_value, "select")
    if isinstance(condition, IntImm):
        return t if condition.value else f
    return Select(condition, t, f)


def cast(dtype, value) -> PrimExpr:
    dtype = dt.canonical(dtype)
    value = _as_expr(value, None)
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)):
        v = value.value
        if dt.is_float(dtype):
            return FloatImm(float(np.dtype(dtype).type(v)), dtype)
        if dtype == "bool":
            return IntImm(int(bool(v)), "bool")
        if isinstance(value, FloatImm):
            if not math.isfinite(v):
                return Cast(dtype, value)
            v = int(v)  # C semantics: truncation toward zero
        return IntImm(_wrap_int(int(v), dtype), dtype)
    return Cast(dtype, value)


def call(name: str, *args) -> PrimExpr:
    """Call a math intrinsic; the result has the dtype of the (float) arguments."""
    if name not in INTRINSICS:
        raise DTypeError(f"unknown intrinsic {name!r}")
    if len(args) != INTRINSICS[name]:
        raise DTypeError(f"intrinsic {name} takes {INTRINSICS[name]} argument(s), got {len(args)}")
    exprs = [a for a in args if isinstance(a, PrimExpr)]
    like = exprs[0].dtype if exprs else "float32"
    conv = [_as_expr(a, like) for a in args]
    if len(conv) == 2:
        conv = list(_unify(conv[0], conv[1], name))
    dtype = conv[0].dtype
    if name == "abs" and not dt.is_float(dtype):
        return select(conv[0] < 0, -conv[0], conv[0])
    if not dt.is_float(dtype):
        raise DTypeError(f"intrinsic {name} needs a float argument, got {dtype}; cast it first")
    return Call(name, tuple(conv), dtype)


def minimum(a, b) -> PrimExpr:
    return binary("min", a, b)


def maximum(a, b) -> PrimExpr:
    return binary("max", a, b)


def is_const(e, value=None) -> bool:
    if not isinstance(e, (IntImm, FloatImm)):
        return False
    return value is None or e.value == value
