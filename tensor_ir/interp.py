"""Reference interpreter: the executable meaning of the IR, run on numpy arrays.

    interp.run(func, A, B, C)              # writes C in place, like a built kernel
    (C,) = interp.evaluate(func, A, B)     # allocates the trailing outputs (zero-filled)

A function is lowered first when it still holds blocks, then compiled once to Python source
(nested ``for`` loops over scalar expressions with explicit bounds checks), exec'd, and cached
per function object.  Walking the tree node by node per element would be orders of magnitude
slower; the generated source keeps a 32x32x32 matmul well under a second.

Semantics, chosen so that a program the interpreter accepts is also well defined as C/LLVM:

- Arithmetic happens in the IR dtype: floats are numpy scalars of that dtype (float32 math
  rounds to float32), integers are Python ints wrapped to the dtype's width after any operation
  that can leave its range (the range is tracked statically from loop bounds, so index
  arithmetic usually needs no wrapping at all).
- ``//`` and ``%`` are floordiv / floormod (round toward negative infinity).  Integer division
  follows numpy: ``x // 0 == 0``, ``x % 0 == 0`` and ``INT_MIN // -1`` wraps to ``INT_MIN``, as
  the code generators compute it (no trap).  Float ``/`` by zero gives inf or nan as IEEE says.
- Casts from float to int truncate toward zero (C); a non-finite or out-of-range value raises
  :class:`InterpError` because C leaves it undefined.
- ``Select`` is lazy (only the taken branch runs); ``And`` / ``Or`` evaluate both operands,
  as a vectorising backend may, so a program cannot hide an out-of-bounds access behind them.
- ``min`` / ``max`` on floats propagate NaN (as ``np.minimum`` / ``np.maximum``).
- ``round`` rounds half to even (as ``np.round``).
- ``Allocate`` makes a fresh buffer filled with NaN (floats) or the dtype's extreme value
  (ints: the minimum for signed, the maximum for unsigned; bool: True), so reading before
  writing shows up in the results.
- Parallel, vectorized, unrolled and thread-bound loops run serially.
- Loads and stores outside a buffer raise :class:`OutOfBoundsError` (an ``IndexError``) naming
  the buffer, the index and the loop variables; negative indices are never wrapped.
"""
from __future__ import annotations

import keyword
import linecache
import math
import re
from collections import OrderedDict

import numpy as np

from . import dtype as dt
from .buffer import Buffer
from .errors import TensorIRError
from .expr import (
    INTRINSICS, And, BinOp, BufferLoad, Call, Cast, Cmp, FloatImm, IntImm, Not, Or, PrimExpr,
    Select, Var,
)
from .func import PrimFunc
from .intrinsics import IntrinsicError, expand
from .stmt import (
    Allocate, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, LetStmt, SeqStmt,
    TensorIntrinCall,
)
from .visitor import walk

__all__ = ["run", "evaluate", "python_source", "InterpError", "OutOfBoundsError",
           "ArgumentError"]


class InterpError(TensorIRError, RuntimeError):
    """The interpreter met a program it cannot run or an operation C leaves undefined."""


class OutOfBoundsError(InterpError, IndexError):
    """A load or store outside its buffer; the message names buffer, index and loop vars."""


class ArgumentError(InterpError, ValueError):
    """The arrays passed do not match the function's parameters (count, type, dtype, shape)."""


# Generated functions nest at most this many for/if statements before the rest of the nest is
# outlined into a helper function: CPython refuses more than 20 nested loop blocks.
_MAX_NEST = 12
# Expressions deeper than this are outlined too: the tokenizer allows 200 nested parentheses.
_MAX_EXPR_DEPTH = 40
_CACHE_SIZE = 256

_NP_UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "floor": np.floor,
    "ceil": np.ceil, "round": np.rint, "exp2": np.exp2, "log2": np.log2, "sin": np.sin,
    "cos": np.cos,
}
_RESERVED = set(keyword.kwlist) | {"range", "int", "float", "bool", "abs", "min", "max", "np",
                                   "math", "True", "False", "None"}


# ---------------------------------------------------------------------------------------------
# Runtime helpers called from the generated code
# ---------------------------------------------------------------------------------------------

def _oob(kind: str, name: str, arr, index: tuple, scope: dict):
    where = ", ".join(f"{k}={v}" for k, v in scope.items())
    raise OutOfBoundsError(
        f"out-of-bounds {kind} {name}[{', '.join(str(int(i)) for i in index)}]: buffer {name} "
        f"has shape {tuple(arr.shape)}" + (f" (at {where})" if where else ""))


def _floordiv(a: int, b: int) -> int:
    # numpy's integer semantics (see the module docstring); the caller wraps INT_MIN // -1.
    return a // b if b else 0


def _floormod(a: int, b: int) -> int:
    return a % b if b else 0


def _f2i(x, dtype: str) -> int:
    f = float(x)
    if not math.isfinite(f):
        raise InterpError(f"cast of {f} to {dtype} is undefined (the value is not finite)")
    v = int(f)  # truncation toward zero, as C
    if not dt.min_value(dtype) <= v <= dt.max_value(dtype):
        raise InterpError(f"cast of {f} to {dtype} is undefined (out of the {dtype} range)")
    return v


def _fill_value(dtype: str):
    if dt.is_float(dtype):
        return np.nan
    if dtype == "bool":
        return True
    return dt.max_value(dtype) if dt.is_unsigned(dtype) else dt.min_value(dtype)


def _alloc(name: str, shape: tuple, dtype: str):
    for s in shape:
        if s < 0:
            raise InterpError(f"allocate {name}: negative extent in shape {shape}")
    return np.full(shape, _fill_value(dtype), dtype=dtype)


_HELPERS = {
    "_oob": _oob, "_floordiv": _floordiv, "_floormod": _floormod, "_f2i": _f2i,
    "_alloc": _alloc, "_erf": math.erf, "_np_power": np.power,
    **{f"_np_{k}": v for k, v in _NP_UNARY.items()},
    **{f"_{d}": np.dtype(d).type for d in dt.DTYPES if dt.is_float(d)},
}


# ---------------------------------------------------------------------------------------------
# Compiler: lowered PrimFunc -> Python source
# ---------------------------------------------------------------------------------------------

class _E:
    """A compiled expression: its code, integer bounds (None for floats) and nesting depth."""

    __slots__ = ("code", "bound", "depth")

    def __init__(self, code: str, bound, depth: int):
        self.code, self.bound, self.depth = code, bound, depth


class _Fn:
    def __init__(self, name: str, params: list):
        self.name, self.params = name, params
        self.lines: list[str] = []
        self.nest = 0

    def source(self) -> str:
        head = f"def {self.name}({', '.join(self.params)}):"
        return "\n".join([head] + (self.lines or ["    pass"]))


def _int_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return (0, 1)
    return (dt.min_value(dtype), dt.max_value(dtype))


class _Compiler:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.namespace: dict = dict(_HELPERS)
        self.consts: dict = {}
        self.names: dict = {}       # Var / Buffer -> Python name while in scope
        self.scope: list = []       # (node, python name) in definition order
        self.bounds: dict = {}      # int Var -> inclusive (lo, hi)
        self.taken: set = set()
        self.counter = 0
        self.fns: list[_Fn] = []
        self.fn: _Fn | None = None
        self.indent = 1
        self.shape_vars: list[Var] = []

    # -- names ----------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def pyname(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "v"
        if base[0].isdigit() or base[0] == "_":
            base = "v" + base
        if base in _RESERVED:
            base += "_"
        name, k = base, 1
        while name in self.taken:
            name = f"{base}_{k}"
            k += 1
        self.taken.add(name)
        return name

    def define(self, node, bound=None) -> tuple:
        """Bring ``node`` into scope; returns a token for :meth:`undefine`."""
        name = self.pyname(node.name)
        token = (node, self.names.get(node), self.bounds.get(node), node in self.bounds)
        self.names[node] = name
        self.scope.append((node, name))
        if bound is not None:
            self.bounds[node] = bound
        elif node in self.bounds:
            del self.bounds[node]
        return token

    def undefine(self, token) -> None:
        node, old_name, old_bound, had_bound = token
        self.scope.pop()
        if old_name is None:
            del self.names[node]
        else:
            self.names[node] = old_name
        if had_bound:
            self.bounds[node] = old_bound
        else:
            self.bounds.pop(node, None)

    def const(self, value) -> str:
        key = (type(value).__name__, repr(value))
        name = self.consts.get(key)
        if name is None:
            name = f"_c{len(self.consts)}"
            self.consts[key] = name
            self.namespace[name] = value
        return name

    # -- emission ---------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.fn.lines.append("    " * self.indent + line)

    def scope_names(self) -> list[str]:
        return [name for _, name in self.scope]

    def scope_dict(self) -> str:
        items = [f"{name!r}: {name}" for node, name in self.scope if isinstance(node, Var)]
        return "{" + ", ".join(items) + "}"

    def outline(self, body) -> None:
        """Emit a call to a new helper function and compile ``body()`` into it."""
        params = self.scope_names()
        fn = _Fn(self.fresh("f"), params)
        self.emit(f"{fn.name}({', '.join(params)})")
        self.fns.append(fn)
        saved = (self.fn, self.indent)
        self.fn, self.indent = fn, 1
        body()
        self.fn, self.indent = saved

    # -- entry ----------------------------------------------------------------------------------
    def compile(self) -> str:
        func = self.func
        params = []
        for buf in func.params:
            if not isinstance(buf, Buffer):
                raise InterpError(f"function {func.name}: parameter {buf!r} is not a Buffer")
            self.define(buf)
            params.append(self.names[buf])
        # Shape variables of parameters are bound from the arrays' shapes by the caller.
        for buf in func.params:
            for s in buf.shape:
                if isinstance(s, Var) and s not in self.names:
                    self.define(s, (0, dt.max_value(s.dtype)))
                    self.shape_vars.append(s)
                    params.append(self.names[s])
        main = _Fn("_kernel", params)
        self.fns.append(main)
        self.fn = main
        self.stmt(func.body)
        return "\n\n".join(fn.source() for fn in self.fns) + "\n"

    # -- statements -------------------------------------------------------------------------------
    def stmt(self, s) -> None:
        if isinstance(s, For):
            if self.fn.nest >= _MAX_NEST:
                self.outline(lambda: self.loop(s))
            else:
                self.loop(s)
        elif isinstance(s, SeqStmt):
            if not s.stmts:
                self.emit("pass")
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, BufferStore):
            self.store(s)
        elif isinstance(s, IfThenElse):
            if self.fn.nest >= _MAX_NEST:
                self.outline(lambda: self.branch(s))
            else:
                self.branch(s)
        elif isinstance(s, LetStmt):
            value = self.expr(s.value)
            if s.var.dtype != s.value.dtype:
                raise InterpError(f"let {s.var.name}: variable is {s.var.dtype} but the value "
                                  f"is {s.value.dtype}")
            code = value.code
            token = self.define(s.var, value.bound)
            self.emit(f"{self.names[s.var]} = {code}")
            self.stmt(s.body)
            self.undefine(token)
        elif isinstance(s, Allocate):
            buf = s.buffer
            dims = [self.expr(d).code for d in buf.shape]
            token = self.define(buf)
            shape = "(" + "".join(f"{d}, " for d in dims) + ")"
            self.emit(f"{self.names[buf]} = _alloc({buf.name!r}, {shape}, {buf.dtype!r})")
            self.stmt(s.body)
            self.undefine(token)
        elif isinstance(s, Evaluate):
            value = self.expr(s.value)
            self.emit("pass" if isinstance(s.value, (IntImm, FloatImm)) else value.code)
        elif isinstance(s, TensorIntrinCall):
            # A tensor intrinsic means its description's update on the tile: run that.
            try:
                tile = expand(s)
            except IntrinsicError as err:
                raise InterpError(f"function {self.func.name}: {err}") from None
            self.stmt(tile)
        elif isinstance(s, (Block, BlockRealize)):
            raise InterpError(f"function {self.func.name}: block "
                              f"{getattr(s, 'name', None) or s.block.name} left after lowering")
        else:
            raise InterpError(f"function {self.func.name}: the interpreter does not know "
                              f"statement {type(s).__name__}")

    def loop(self, s: For) -> None:
        if not dt.is_int(s.loop_var.dtype):
            raise InterpError(f"loop {s.loop_var.name} has non-integer dtype {s.loop_var.dtype}")
        lo, ext = self.expr(s.min), self.expr(s.extent)
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
            header = f"range({s.min.value}, {s.min.value + s.extent.value})"
        else:
            start = self.fresh("t")
            self.emit(f"{start} = {lo.code}")
            header = f"range({start}, {start} + {ext.code})"
        bound = None
        if lo.bound is not None and ext.bound is not None:
            bound = (lo.bound[0], lo.bound[1] + max(ext.bound[1], 1) - 1)
        token = self.define(s.loop_var, bound)
        self.emit(f"for {self.names[s.loop_var]} in {header}:")
        self.nested(s.body)
        self.undefine(token)

    def branch(self, s: IfThenElse) -> None:
        cond = self.expr(s.condition)
        if s.condition.dtype != "bool":
            raise InterpError(f"if condition must be bool, got {s.condition.dtype}")
        self.emit(f"if {cond.code}:")
        self.nested(s.then_case)
        if s.else_case is not None:
            self.emit("else:")
            self.nested(s.else_case)

    def nested(self, body) -> None:
        self.indent += 1
        self.fn.nest += 1
        fn = self.fn
        self.stmt(body)
        fn.nest -= 1
        self.indent -= 1

    def store(self, s: BufferStore) -> None:
        buf = s.buffer
        arr = self.buffer_name(buf, "store to")
        if s.value.dtype != buf.dtype:
            raise InterpError(f"store to {buf.name}: value is {s.value.dtype} but the buffer "
                              f"is {buf.dtype}")
        value = self.expr(s.value)
        parts, checks, raw, _ = self.indices(buf, s.indices, "store to")
        for temp, code in checks:
            self.emit(f"{temp} = {code}")
        conds = [c.format(p) for (_, _, c), p in zip(raw, parts) if c]
        if conds:
            index = "".join(p + ", " for p in parts)
            self.emit(f"if not ({' and '.join(conds)}):")
            self.emit(f"    _oob('store to', {buf.name!r}, {arr}, ({index}), "
                      f"{self.scope_dict()})")
        self.emit(f"{arr}[{self.subscript(parts)}] = {value.code}")

    # -- buffers ----------------------------------------------------------------------------------
    def buffer_name(self, buf, what: str) -> str:
        name = self.names.get(buf)
        if name is None or not isinstance(buf, Buffer):
            raise InterpError(f"{what} buffer {getattr(buf, 'name', buf)}: it is neither a "
                              f"parameter of {self.func.name} nor allocated around this use")
        return name

    def indices(self, buf, indices, what):
        """Compile indices.  Returns (parts used in the subscript, [(temp, code)] for indices
        that need a check, [(index code, bound, check template or '')], deepest index depth)."""
        if len(indices) != len(buf.shape):
            raise InterpError(f"{what} {buf.name}: {len(indices)} indices for a buffer of rank "
                              f"{len(buf.shape)}")
        arr = self.names[buf]
        parts, checks, raw = [], [], []
        depth = 0
        for d, index in enumerate(indices):
            if not dt.is_int(index.dtype):
                raise InterpError(f"{what} {buf.name}: index {d} has dtype {index.dtype}")
            e = self.expr(index)
            depth = max(depth, e.depth)
            extent = buf.shape[d]
            const_extent = extent.value if isinstance(extent, IntImm) else None
            lo_ok = e.bound is not None and e.bound[0] >= 0
            hi_ok = (e.bound is not None and const_extent is not None
                     and e.bound[1] < const_extent)
            if lo_ok and hi_ok:
                parts.append(e.code)
                raw.append((e.code, e.bound, ""))
                continue
            temp = self.fresh("t")
            dim = str(const_extent) if const_extent is not None else f"{arr}.shape[{d}]"
            # A template: the store fills in the temporary, the load an assignment to it.
            if lo_ok:
                cond = "{} < " + dim
            elif hi_ok:
                cond = "0 <= {}"
            else:
                cond = "0 <= {} < " + dim
            parts.append(temp)
            checks.append((temp, e.code))
            raw.append((e.code, e.bound, cond))
        return parts, checks, raw, depth

    @staticmethod
    def subscript(parts) -> str:
        return ", ".join(parts) if parts else "()"

    def load(self, e: BufferLoad) -> _E:
        buf = e.buffer
        arr = self.buffer_name(buf, "load from")
        parts, checks, raw, depth = self.indices(buf, e.indices, "load from")
        depth += 1
        if dt.is_float(buf.dtype):
            access = f"{arr}[{self.subscript(parts)}]"
        else:
            # .item gives Python ints / bools, which the integer code paths expect.
            access = f"{arr}.item({', '.join(parts)})"
        bound = None if dt.is_float(buf.dtype) else _int_range(buf.dtype)
        if not checks:
            return _E(access, bound, depth)
        # Assign each checked index to its temporary inside the condition, in order; the
        # error branch recomputes the indices (pure) for the message.
        code_of = dict(checks)
        conds = []
        for (code, _, cond), part in zip(raw, parts):
            if cond:
                conds.append(cond.format(f"({part} := {code_of[part]})"))
        index_codes = "".join(c + ", " for c, _, _ in raw)
        code = (f"({access} if {' and '.join(conds)} else _oob('load from', {buf.name!r}, "
                f"{arr}, ({index_codes}), {self.scope_dict()}))")
        return _E(code, bound, depth + 1)

    # -- expressions -----------------------------------------------------------------------------

    def expr(self, e) -> _E:
        r = self._expr(e)
        if r.depth > _MAX_EXPR_DEPTH:
            params = self.scope_names()
            fn = _Fn(self.fresh("e"), params)
            fn.lines.append(f"    return {r.code}")
            self.fns.append(fn)
            r = _E(f"{fn.name}({', '.join(params)})", r.bound, 1)
        return r

    def _expr(self, e) -> _E:
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return _E("True" if e.value else "False", (e.value, e.value), 0)
            code = str(e.value) if e.value >= 0 else f"({e.value})"
            return _E(code, (e.value, e.value), 0)
        if isinstance(e, FloatImm):
            return _E(self.const(np.dtype(e.dtype).type(e.value)), None, 0)
        if isinstance(e, Var):
            name = self.names.get(e)
            if name is None:
                raise InterpError(f"variable {e.name} is used outside any loop, let or shape "
                                  f"that defines it (function {self.func.name})")
            bound = None
            if not dt.is_float(e.dtype):
                bound = self.bounds.get(e, _int_range(e.dtype))
            return _E(name, bound, 0)
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Cmp):
            a, b = self.expr(e.a), self.expr(e.b)
            return _E(f"({a.code} {e.op} {b.code})", (0, 1), 1 + max(a.depth, b.depth))
        if isinstance(e, (And, Or)):
            self.check_bool(e.a, type(e).__name__)
            self.check_bool(e.b, type(e).__name__)
            a, b = self.expr(e.a), self.expr(e.b)
            op = "&" if isinstance(e, And) else "|"
            # Both sides evaluate (see the module docstring); bool() keeps the result a bool.
            return _E(f"bool({a.code} {op} {b.code})", (0, 1), 1 + max(a.depth, b.depth))
        if isinstance(e, Not):
            self.check_bool(e.a, "Not")
            a = self.expr(e.a)
            return _E(f"(not {a.code})", (0, 1), 1 + a.depth)
        if isinstance(e, Select):
            self.check_bool(e.condition, "Select")
            c = self.expr(e.condition)
            t, f = self.expr(e.true_value), self.expr(e.false_value)
            bound = None
            if t.bound is not None and f.bound is not None:
                bound = (min(t.bound[0], f.bound[0]), max(t.bound[1], f.bound[1]))
            return _E(f"({t.code} if {c.code} else {f.code})", bound,
                      1 + max(c.depth, t.depth, f.depth))
        if isinstance(e, Cast):
            return self.cast(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, BufferLoad):
            return self.load(e)
        raise InterpError(f"the interpreter does not know expression {type(e).__name__} "
                          f"(te constructs must go through create_prim_func and lowering)")

    def check_bool(self, e, what: str) -> None:
        if e.dtype != "bool":
            raise InterpError(f"{what} needs a bool operand, got {e.dtype}")

    def wrap(self, code: str, bound, dtype: str, depth: int) -> _E:
        lo, hi = _int_range(dtype)
        if bound is not None and lo <= bound[0] and bound[1] <= hi:
            return _E(code, bound, depth)
        nbits = dt.bits(dtype)
        mask = (1 << nbits) - 1
        if dt.is_unsigned(dtype):
            return _E(f"({code} & {mask})", (lo, hi), depth + 1)
        half = 1 << (nbits - 1)
        return _E(f"((({code} + {half}) & {mask}) - {half})", (lo, hi), depth + 1)

    def binop(self, e: BinOp) -> _E:
        op, dtype = e.op, e.dtype
        if e.a.dtype != e.b.dtype:
            raise InterpError(f"operands of '{op}' have dtypes {e.a.dtype} and {e.b.dtype}")
        a, b = self.expr(e.a), self.expr(e.b)
        depth = 1 + max(a.depth, b.depth)
        if op in ("min", "max"):
            t1, t2 = self.fresh("t"), self.fresh("t")
            cmp = "<=" if op == "min" else ">="
            cond = f"({t1} := {a.code}) {cmp} ({t2} := {b.code})"
            if dt.is_float(dtype):
                cond = f"{cond} or {t1} != {t1}"  # NaN in a propagates; NaN in b fails cmp
            bound = None
            if a.bound is not None and b.bound is not None:
                pick = min if op == "min" else max
                bound = (pick(a.bound[0], b.bound[0]), pick(a.bound[1], b.bound[1]))
            return _E(f"({t1} if {cond} else {t2})", bound, depth + 1)
        if dt.is_float(dtype):
            if op not in ("+", "-", "*", "/", "//", "%"):
                raise InterpError(f"unknown arithmetic operator {op!r}")
            return _E(f"({a.code} {op} {b.code})", None, depth)
        if dtype == "bool":
            raise InterpError(f"arithmetic '{op}' on bool operands")
        if op == "/":
            raise InterpError("'/' on integers has no defined meaning here; use // (floordiv)")
        abound = a.bound or _int_range(dtype)
        bbound = b.bound or _int_range(dtype)
        if op in ("+", "-", "*"):
            if op == "+":
                bound = (abound[0] + bbound[0], abound[1] + bbound[1])
            elif op == "-":
                bound = (abound[0] - bbound[1], abound[1] - bbound[0])
            else:
                corners = [x * y for x in abound for y in bbound]
                bound = (min(corners), max(corners))
            return self.wrap(f"({a.code} {op} {b.code})", bound, dtype, depth)
        if op in ("//", "%"):
            divisor = e.b.value if isinstance(e.b, IntImm) else None
            if divisor is not None and divisor != 0:
                code = f"({a.code} {op} {b.code})"
                if op == "//":
                    q = (abound[0] // divisor, abound[1] // divisor)
                    bound = (min(q), max(q))
                elif divisor > 0:
                    inside = abound[0] >= 0 and abound[1] < divisor
                    bound = abound if inside else (0, divisor - 1)
                else:
                    bound = (divisor + 1, 0)
            else:
                helper = "_floordiv" if op == "//" else "_floormod"
                code = f"{helper}({a.code}, {b.code})"
                big = max(abs(bbound[0]), abs(bbound[1]))
                if op == "//":
                    top = max(abs(abound[0]), abs(abound[1]))
                    bound = (-top, top)
                else:
                    bound = (-big, big)
            return self.wrap(code, bound, dtype, depth)
        raise InterpError(f"unknown arithmetic operator {op!r}")

    def cast(self, e: Cast) -> _E:
        src, dst = e.value.dtype, e.dtype
        v = self.expr(e.value)
        depth = v.depth + 1
        if src == dst:
            return v
        if dt.is_float(dst):
            return _E(f"_{dst}({v.code})", None, depth)
        if dst == "bool":
            if dt.is_float(src):
                return _E(f"bool({v.code})", (0, 1), depth)  # nan is true, as in C
            return _E(f"({v.code} != 0)", (0, 1), depth)
        if src == "bool":
            return _E(f"int({v.code})", (0, 1), depth)
        if dt.is_float(src):
            return _E(f"_f2i({v.code}, {dst!r})", _int_range(dst), depth)
        return self.wrap(v.code, v.bound, dst, depth - 1)

    def call(self, e: Call) -> _E:
        if e.name not in INTRINSICS:
            raise InterpError(f"unknown intrinsic {e.name!r}")
        if len(e.args) != INTRINSICS[e.name]:
            raise InterpError(f"intrinsic {e.name} takes {INTRINSICS[e.name]} argument(s), "
                              f"got {len(e.args)}")
        args = [self.expr(a) for a in e.args]
        depth = 1 + max(a.depth for a in args)
        dtype = e.dtype
        for a in e.args:
            if a.dtype != dtype:
                raise InterpError(f"intrinsic {e.name}: argument is {a.dtype}, result {dtype}")
        if e.name == "abs":
            bound = None
            if args[0].bound is not None:
                lo, hi = args[0].bound
                top = max(abs(lo), abs(hi))
                bound = (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), top)
            if dt.is_float(dtype) or bound is None:
                return _E(f"abs({args[0].code})", bound, depth)
            return self.wrap(f"abs({args[0].code})", bound, dtype, depth)
        if not dt.is_float(dtype):
            raise InterpError(f"intrinsic {e.name} needs a float argument, got {dtype}")
        x = args[0].code
        if e.name == "erf":
            return _E(f"_{dtype}(_erf(float({x})))", None, depth)
        one = self.const(np.dtype(dtype).type(1))
        if e.name == "sigmoid":
            return _E(f"({one} / ({one} + _np_exp(-{x})))", None, depth + 2)
        if e.name == "rsqrt":
            return _E(f"({one} / _np_sqrt({x}))", None, depth + 1)
        if e.name == "pow":
            return _E(f"_np_power({x}, {args[1].code})", None, depth)
        return _E(f"_np_{e.name}({x})", None, depth)


# ---------------------------------------------------------------------------------------------
# Kernels: compiled functions with argument checking, cached per function object
# ---------------------------------------------------------------------------------------------

def _has_blocks(node) -> bool:
    found = False

    def fn(n):
        nonlocal found
        if found:
            return False
        if isinstance(n, (Block, BlockRealize)):
            found = True
            return False
        return not isinstance(n, PrimExpr)

    walk(node, fn)
    return found


def _shape_value(e, env: dict, where: str) -> int:
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise ArgumentError(f"{where}: shape variable {e.name} is not bound by any "
                                f"parameter dimension")
        return env[e]
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "//", "%", "min", "max"):
        a, b = _shape_value(e.a, env, where), _shape_value(e.b, env, where)
        if e.op in ("//", "%") and b == 0:
            raise ArgumentError(f"{where}: shape expression divides by zero")
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0,
                "%": a % b if b else 0, "min": min(a, b), "max": max(a, b)}[e.op]
    raise ArgumentError(f"{where}: unsupported shape expression {type(e).__name__}")


class _Kernel:
    def __init__(self, func: PrimFunc):
        self.func = func
        lowered = func
        if _has_blocks(func.body):
            from .lower import lower

            lowered = lower(func)
        self.lowered = lowered
        compiler = _Compiler(lowered)
        self.source = compiler.compile()
        self.shape_vars = compiler.shape_vars
        filename = f"<tensor_ir.interp {func.name} #{id(self):x}>"
        # Register the source so tracebacks through generated code show its lines.
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True),
                                     filename)
        namespace = compiler.namespace
        exec(compile(self.source, filename, "exec"), namespace)
        self.fn = namespace["_kernel"]

    def bind(self, arrays, allow_missing: bool = False) -> dict:
        """Check ``arrays`` against the leading parameters; returns shape-variable values."""
        func = self.func
        params = func.params
        if len(arrays) > len(params) or (not allow_missing and len(arrays) != len(params)):
            raise ArgumentError(
                f"function {func.name} takes {len(params)} arrays "
                f"({', '.join(b.name for b in params)}), got {len(arrays)}")
        env: dict = {}
        deferred = []
        for k, (buf, arr) in enumerate(zip(params, arrays)):
            where = f"function {func.name}, argument {k} ({buf.name})"
            if not isinstance(arr, np.ndarray):
                raise ArgumentError(f"{where}: expected a numpy array, got "
                                    f"{type(arr).__name__}")
            if arr.dtype != dt.to_numpy(buf.dtype):
                raise ArgumentError(f"{where}: expected dtype {buf.dtype}, got {arr.dtype}")
            if arr.ndim != len(buf.shape):
                raise ArgumentError(f"{where}: expected {len(buf.shape)} dimensions, got "
                                    f"shape {arr.shape}")
            for d, (s, n) in enumerate(zip(buf.shape, arr.shape)):
                if isinstance(s, Var):
                    if s in env and env[s] != n:
                        raise ArgumentError(
                            f"{where}: dimension {d} is {n} but shape variable {s.name} is "
                            f"already {env[s]}")
                    env[s] = n
                else:
                    deferred.append((where, buf, arr, d, s, n))
        for where, buf, arr, d, s, n in deferred:
            want = _shape_value(s, env, where)
            if want != n:
                raise ArgumentError(f"{where}: expected shape {self.expected_shape(buf, env)}, "
                                    f"got {arr.shape} (dimension {d} differs)")
        return env

    def expected_shape(self, buf, env) -> tuple:
        out = []
        for s in buf.shape:
            try:
                out.append(_shape_value(s, env, ""))
            except ArgumentError:
                out.append(getattr(s, "name", "?"))
        return tuple(out)

    def __call__(self, arrays) -> None:
        env = self.bind(arrays)
        extra = [env[v] for v in self.shape_vars]
        with np.errstate(all="ignore"):
            self.fn(*arrays, *extra)


_CACHE: OrderedDict = OrderedDict()


def _kernel(func: PrimFunc) -> _Kernel:
    if not isinstance(func, PrimFunc):
        raise InterpError(f"expected a PrimFunc, got {type(func).__name__}")
    key = id(func)
    hit = _CACHE.get(key)
    # The cache holds the function itself, so its id cannot be reused while the entry lives.
    if hit is not None and hit.func is func:
        _CACHE.move_to_end(key)
        return hit
    kernel = _Kernel(func)
    _CACHE[key] = kernel
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return kernel


def run(func: PrimFunc, *arrays: np.ndarray) -> None:
    """Execute ``func`` in place on ``arrays`` (one per parameter, outputs written into)."""
    _kernel(func)(arrays)


def evaluate(func: PrimFunc, *inputs: np.ndarray) -> tuple:
    """Run ``func`` on ``inputs`` (its leading parameters) and return the remaining parameters
    as new zero-filled arrays after the run."""
    kernel = _kernel(func)
    env = kernel.bind(inputs, allow_missing=True)
    outputs = []
    for buf in func.params[len(inputs):]:
        shape = tuple(_shape_value(s, env, f"function {func.name}, output {buf.name}")
                      for s in buf.shape)
        outputs.append(np.zeros(shape, dtype=dt.to_numpy(buf.dtype)))
    kernel(tuple(inputs) + tuple(outputs))
    return tuple(outputs)


def python_source(func: PrimFunc) -> str:
    """The Python source the interpreter runs for ``func`` (for debugging)."""
    return _kernel(func).source
