"""Readable, deterministic text of IR: functions, statements and expressions.

The form reads like TVMScript without the ``T.`` prefixes::

    def main(A: float32[4, 6], B: float32[6, 5], D: float32[4, 5]):
      alloc C: float32[4, 5]
      for i in range(4):
        for j in range(5):
          for k in range(6):
            block C(v_i = spatial(4, i), v_j = spatial(5, j), v_k = reduce(6, k)):
              init:
                C[v_i, v_j] = 0.0f
              C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]

Conventions:

- Loops: ``range(n)`` / ``range(lo, hi)`` for serial, ``parallel(n)``, ``vectorized(n)``,
  ``unrolled(n)``, ``thread_binding(n, "threadIdx.x")``; annotations as ``annotations={...}``.
- Expressions use Python precedence with the fewest parentheses that keep the tree's shape;
  ``//`` is floordiv and ``%`` floormod; ``min``, ``max``, ``select``, casts (``float32(x)``)
  and intrinsics (``exp(x)``) are function-like.
- Constants: index ints (int64) bare, other ints as ``int32(5)``, bools ``True``/``False``,
  float32 with an ``f`` suffix (``0.5f``), other floats as ``float64(0.5)``.
- A variable or buffer is printed by name; when two distinct definitions with one name are
  live at once, the inner one gets a suffix (``i_1``) so the text stays unambiguous.  Disjoint
  scopes reuse names.
- ``Allocate`` prints as ``alloc X: float32[4]`` followed by its body at the same level when
  nothing follows it in its sequence, and as an indented ``alloc X: float32[4]:`` otherwise.
- Buffer scopes other than global appear before the dtype: ``alloc X: local float32[4]``.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from . import dtype as dt
from .buffer import Buffer
from .errors import TensorIRError
from .expr import (
    And, BinOp, BufferLoad, Call, Cast, Cmp, CommReducer, FloatImm, IntImm, Node, Not, Or,
    PrimExpr, Reduce, Select, Var, set_printer,
)
from .func import PrimFunc
from .stmt import (
    PARALLEL, SERIAL, THREAD_BINDING, UNROLLED, VECTORIZED, Allocate, Block, BlockRealize,
    BufferRegion, BufferStore, Evaluate, For, IfThenElse, IterVar, LetStmt, Range, SeqStmt, Stmt,
    TensorIntrinCall,
)
from .visitor import walk

__all__ = ["to_text"]

INDENT = "  "

# Precedence levels (higher binds tighter), following Python.
_P_OR, _P_AND, _P_NOT, _P_CMP, _P_ADD, _P_MUL, _P_ATOM = 1, 2, 3, 4, 5, 6, 10
_BIN_PREC = {"+": _P_ADD, "-": _P_ADD, "*": _P_MUL, "/": _P_MUL, "//": _P_MUL, "%": _P_MUL}
_LOOP_FORM = {SERIAL: "range", PARALLEL: "parallel", VECTORIZED: "vectorized",
              UNROLLED: "unrolled", THREAD_BINDING: "thread_binding"}


def to_text(node, show_regions: bool = False) -> str:
    """Text of a PrimFunc, statement, expression (or Buffer, Range, BufferRegion, IterVar,
    CommReducer).  ``show_regions`` adds each block's ``reads:`` / ``writes:`` lines."""
    return _Printer(show_regions).top(node)


class _Printer:
    def __init__(self, show_regions: bool):
        self.show_regions = show_regions
        self.names: dict = {}        # Var / Buffer -> printed name while defined
        self.live: Counter = Counter()
        self.lines: list[str] = []
        self.depth = 0

    # -- names ------------------------------------------------------------------------------------
    def define(self, node) -> tuple:
        base = node.name or "v"
        name, k = base, 1
        while self.live[name]:
            name = f"{base}_{k}"
            k += 1
        token = (node, self.names.get(node), name)
        self.names[node] = name
        self.live[name] += 1
        return token

    def undefine(self, token) -> None:
        node, old, name = token
        self.live[name] -= 1
        if old is None:
            del self.names[node]
        else:
            self.names[node] = old

    def reserve_free(self, node) -> None:
        """Name the variables and buffers ``node`` uses without defining, in first-use order;
        they stay live for the whole text."""
        defined: set = set()
        used: list = []
        seen: set = set()

        def fn(n):
            if isinstance(n, For):
                defined.add(n.loop_var)
            elif isinstance(n, LetStmt):
                defined.add(n.var)
            elif isinstance(n, Block):
                defined.update(iv.var for iv in n.iter_vars)
                defined.update(n.alloc_buffers)
            elif isinstance(n, Allocate):
                defined.add(n.buffer)
            elif isinstance(n, PrimFunc):
                defined.update(n.params)
            elif isinstance(n, CommReducer):
                defined.update((n.lhs, n.rhs))
            if isinstance(n, (Var, Buffer)) and n not in seen:
                seen.add(n)
                used.append(n)
                if isinstance(n, Buffer):
                    # walk() treats a buffer as a leaf; its shape may use variables too.
                    for dim in n.shape:
                        walk(dim, fn)
            return None

        walk(node, fn)
        for n in used:
            if n not in defined and n not in self.names:
                self.define(n)

    def name(self, node) -> str:
        name = self.names.get(node)
        if name is None:
            # Used outside its definition (malformed IR, or a fragment): name it on the spot.
            self.define(node)
            name = self.names[node]
        return name

    # -- output -----------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append(INDENT * self.depth + text)

    def top(self, node) -> str:
        self.reserve_free(node)
        if isinstance(node, PrimFunc):
            self.func(node)
        elif isinstance(node, Stmt):
            self.stmt(node)
        elif isinstance(node, PrimExpr):
            return self.expr(node)
        elif isinstance(node, Buffer):
            return self.decl(node)
        elif isinstance(node, Range):
            return self.range_text(node)
        elif isinstance(node, BufferRegion):
            return self.region(node)
        elif isinstance(node, IterVar):
            return f"{self.name(node.var)} = {self.iter_dom(node)}"
        elif isinstance(node, CommReducer):
            return self.reducer(node)
        else:
            raise TensorIRError(f"to_text: cannot print a {type(node).__name__}")
        return "\n".join(self.lines)

    # -- functions and statements ----------------------------------------------------------------
    def func(self, f: PrimFunc) -> None:
        if f.attrs:
            self.line(f"@attrs({self.value({k: v for k, v in f.attrs})})")
        tokens = [self.define(b) for b in f.params]
        params = ", ".join(self.decl(b) for b in f.params)
        self.line(f"def {f.name}({params}):")
        self.depth += 1
        body = f.body
        if self.is_plain_root(body):
            block = body.block
            alloc_tokens = [self.define(b) for b in block.alloc_buffers]
            for b in block.alloc_buffers:
                self.line(f"alloc {self.decl(b)}")
            self.stmt(block.body)
            for t in reversed(alloc_tokens):
                self.undefine(t)
        else:
            self.stmt(body)
        self.depth -= 1
        for t in reversed(tokens):
            self.undefine(t)

    def is_plain_root(self, s) -> bool:
        """The root block te.create_prim_func makes carries only allocations: print those at
        function level instead of as a block."""
        if not isinstance(s, BlockRealize):
            return False
        b = s.block
        return (b.name == "root" and not b.iter_vars and not s.iter_values and b.init is None
                and not b.annotations and _is_true(s.predicate)
                and (not self.show_regions or (not b.reads and not b.writes)))

    def decl(self, b: Buffer) -> str:
        dims = ", ".join(self.expr(s) for s in b.shape)
        scope = "" if b.scope == "global" else f"{b.scope} "
        return f"{self.name(b)}: {scope}{b.dtype}[{dims}]"

    def stmt(self, s) -> None:
        if isinstance(s, SeqStmt):
            if not s.stmts:
                self.line("pass")
            for k, x in enumerate(s.stmts):
                if isinstance(x, Allocate) and k < len(s.stmts) - 1:
                    self.allocate(x, flat=False)
                else:
                    self.stmt(x)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, BufferStore):
            self.line(f"{self.load_text(s.buffer, s.indices)} = {self.expr(s.value)}")
        elif isinstance(s, IfThenElse):
            self.branch(s, "if")
        elif isinstance(s, LetStmt):
            value = self.expr(s.value)
            token = self.define(s.var)
            typed = "" if s.var.dtype == dt.INDEX_DTYPE else f": {s.var.dtype}"
            self.line(f"let {self.name(s.var)}{typed} = {value}")
            self.stmt(s.body)
            self.undefine(token)
        elif isinstance(s, Allocate):
            self.allocate(s, flat=True)
        elif isinstance(s, Evaluate):
            self.line(f"evaluate({self.expr(s.value)})")
        elif isinstance(s, TensorIntrinCall):
            self.tensor_intrin(s)
        elif isinstance(s, BlockRealize):
            self.block(s.block, s)
        elif isinstance(s, Block):
            self.block(s, None)
        else:
            raise TensorIRError(f"to_text: unknown statement {type(s).__name__}")

    def allocate(self, s: Allocate, flat: bool) -> None:
        token = self.define(s.buffer)
        if flat:
            self.line(f"alloc {self.decl(s.buffer)}")
            self.stmt(s.body)
        else:
            self.line(f"alloc {self.decl(s.buffer)}:")
            self.nested(s.body)
        self.undefine(token)

    def nested(self, s) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def loop(self, s: For) -> None:
        args = []
        if _is_zero(s.min):
            args.append(self.expr(s.extent))
        else:
            args.append(self.expr(s.min))
            args.append(self.expr(_end(s.min, s.extent)))
        if s.kind == THREAD_BINDING or s.thread_binding is not None:
            args.append(self.value(s.thread_binding))
        if s.annotations:
            args.append(f"annotations={self.value(dict(s.annotations))}")
        form = _LOOP_FORM.get(s.kind, s.kind)
        token = self.define(s.loop_var)
        typed = "" if s.loop_var.dtype == dt.INDEX_DTYPE else f": {s.loop_var.dtype}"
        self.line(f"for {self.name(s.loop_var)}{typed} in {form}({', '.join(args)}):")
        self.nested(s.body)
        self.undefine(token)

    def branch(self, s: IfThenElse, keyword: str) -> None:
        self.line(f"{keyword} {self.expr(s.condition)}:")
        self.nested(s.then_case)
        other = s.else_case
        if other is None:
            return
        if isinstance(other, IfThenElse):
            self.branch(other, "elif")
        else:
            self.line("else:")
            self.nested(other)

    def block(self, b: Block, realize: BlockRealize | None) -> None:
        values = [self.expr(v) for v in realize.iter_values] if realize is not None else []
        predicate = None
        if realize is not None and not _is_true(realize.predicate):
            predicate = self.expr(realize.predicate)
        tokens = [self.define(iv.var) for iv in b.iter_vars]
        bindings = []
        for k, iv in enumerate(b.iter_vars):
            dom = self.iter_dom(iv, values[k] if k < len(values) else None)
            bindings.append(f"{self.name(iv.var)} = {dom}")
        self.line(f"block {b.name}({', '.join(bindings)}):")
        self.depth += 1
        if predicate is not None:
            self.line(f"where {predicate}")
        if self.show_regions:
            self.line("reads: " + ", ".join(self.region(r) for r in b.reads))
            self.line("writes: " + ", ".join(self.region(r) for r in b.writes))
        if b.annotations:
            self.line(f"annotations: {self.value(dict(b.annotations))}")
        alloc_tokens = [self.define(buf) for buf in b.alloc_buffers]
        for buf in b.alloc_buffers:
            self.line(f"alloc {self.decl(buf)}")
        if b.init is not None:
            self.line("init:")
            self.nested(b.init)
        self.stmt(b.body)
        for t in reversed(alloc_tokens):
            self.undefine(t)
        self.depth -= 1
        for t in reversed(tokens):
            self.undefine(t)

    def iter_dom(self, iv: IterVar, value: str | None = None) -> str:
        dom = iv.dom
        if _is_zero(dom.min):
            text = self.expr(dom.extent)
        else:
            text = f"range({self.expr(dom.min)}, {self.expr(_end(dom.min, dom.extent))})"
        if value is not None:
            text += f", {value}"
        return f"{iv.kind}({text})"

    def region(self, r: BufferRegion) -> str:
        return f"{self.name(r.buffer)}[{', '.join(self.range_text(x) for x in r.region)}]"

    def range_text(self, r: Range) -> str:
        if isinstance(r.extent, IntImm) and r.extent.value == 1:
            return self.expr(r.min)
        return f"{self.expr(r.min)}:{self.expr(_end(r.min, r.extent))}"

    def reducer(self, r: CommReducer) -> str:
        tokens = [self.define(r.lhs), self.define(r.rhs)]
        text = (f"reducer {r.name}({self.name(r.lhs)}, {self.name(r.rhs)}) = "
                f"{self.expr(r.result)}, identity {self.expr(r.identity)}")
        for t in reversed(tokens):
            self.undefine(t)
        return text

    def value(self, v) -> str:
        """Annotation and attribute values: JSON-like data, possibly holding IR."""
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self.value(x) for x in v) + "]"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, PrimExpr):
            return self.expr(v)
        if isinstance(v, Node):
            return to_text(v)
        return repr(v)

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, e) -> str:
        return self._expr(e)[0]

    def operand(self, e, min_prec: int) -> str:
        text, prec = self._expr(e)
        return f"({text})" if prec < min_prec else text

    def _expr(self, e) -> tuple[str, int]:
        if isinstance(e, Var):
            return self.name(e), _P_ATOM
        if isinstance(e, IntImm):
            return _int_text(e), _P_ATOM
        if isinstance(e, FloatImm):
            return _float_text(e), _P_ATOM
        if isinstance(e, BinOp):
            if e.op in ("min", "max"):
                return f"{e.op}({self.expr(e.a)}, {self.expr(e.b)})", _P_ATOM
            prec = _BIN_PREC.get(e.op, _P_ATOM)
            # Left-associative: an equal-precedence right operand keeps its parentheses.
            return (f"{self.operand(e.a, prec)} {e.op} {self.operand(e.b, prec + 1)}", prec)
        if isinstance(e, Cmp):
            # Python would chain a < b < c, so comparison operands always bind tighter.
            return (f"{self.operand(e.a, _P_CMP + 1)} {e.op} {self.operand(e.b, _P_CMP + 1)}",
                    _P_CMP)
        if isinstance(e, And):
            return f"{self.operand(e.a, _P_AND)} and {self.operand(e.b, _P_AND + 1)}", _P_AND
        if isinstance(e, Or):
            return f"{self.operand(e.a, _P_OR)} or {self.operand(e.b, _P_OR + 1)}", _P_OR
        if isinstance(e, Not):
            return f"not {self.operand(e.a, _P_NOT)}", _P_NOT
        if isinstance(e, Select):
            return (f"select({self.expr(e.condition)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})", _P_ATOM)
        if isinstance(e, Cast):
            return f"{e.dtype}({self.expr(e.value)})", _P_ATOM
        if isinstance(e, Call):
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})", _P_ATOM
        if isinstance(e, BufferLoad):
            return self.load_text(e.buffer, e.indices), _P_ATOM
        if isinstance(e, Reduce):
            axes = ", ".join(self.name(a) for a in e.axis)
            text = f"{e.combiner.name}({self.expr(e.source)}, axis=[{axes}]"
            if not _is_true(e.condition):
                text += f", where={self.expr(e.condition)}"
            return text + ")", _P_ATOM
        if type(e).__name__ == "ProducerLoad":  # te.ProducerLoad: te imports this module
            indices = ", ".join(self.expr(i) for i in e.indices)
            return f"{e.tensor.name}[{indices}]", _P_ATOM
        raise TensorIRError(f"to_text: unknown expression {type(e).__name__}")

    def tensor_intrin(self, s: TensorIntrinCall) -> None:
        """``tensor_intrin NAME(A[origin] 4 step (0, 1), ...)``: each operand's first element,
        its tile shape and the index steps along each tile dimension; ``out`` marks the
        written ones."""
        parts = []
        for load, steps, extents, written in zip(s.operands, s.steps, s.extents, s.written):
            shape = "x".join(str(e) for e in extents)
            step = ", ".join("(" + ", ".join(str(x) for x in st) + ")" for st in steps)
            mode = "out " if written else ""
            parts.append(f"{mode}{self.expr(load)} {shape} step {step}")
        self.line(f"tensor_intrin {s.intrin}({', '.join(parts)})")

    def load_text(self, buffer, indices) -> str:
        inner = ", ".join(self.expr(i) for i in indices) if indices else "()"
        return f"{self.name(buffer)}[{inner}]"


def _is_true(e) -> bool:
    return isinstance(e, IntImm) and e.dtype == "bool" and e.value == 1


def _is_zero(e) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def _end(lo, extent) -> PrimExpr:
    """``lo + extent`` folded when both are constants (the printed exclusive end)."""
    if isinstance(lo, IntImm) and isinstance(extent, IntImm):
        return IntImm(lo.value + extent.value, lo.dtype)
    return BinOp("+", lo, extent)


def _int_text(e: IntImm) -> str:
    if e.dtype == "bool":
        return "True" if e.value else "False"
    if e.dtype == dt.INDEX_DTYPE:
        return str(e.value)
    return f"{e.dtype}({e.value})"


def _float_text(e: FloatImm) -> str:
    v = e.value
    if not math.isfinite(v):
        return f"{e.dtype}({v})"
    if e.dtype == "float64":
        text = repr(float(v))
    else:
        # The shortest text that reads back to the same value in the constant's own dtype.
        text = str(np.dtype(e.dtype).type(v))
        if not any(c in text for c in ".en"):
            text += ".0"
    return f"{text}f" if e.dtype == "float32" else f"{e.dtype}({text})"


set_printer(to_text)
