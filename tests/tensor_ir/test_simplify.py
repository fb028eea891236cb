"""Simplifier and canonical arithmetic: rule unit tests and random equivalence properties."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensor_ir import interp, te
from tensor_ir.arith import (
    Analyzer, canonical, const_diff, int_bound, linear_form, prove, relax,
)
from tensor_ir.buffer import decl_buffer
from tensor_ir.errors import DTypeError
from tensor_ir.expr import (
    And, BinOp, BufferLoad, Cast, Cmp, FloatImm, IntImm, Not, Or, Select, Var, cast, const, equal,
    logic_and, logic_not, logic_or, maximum, minimum, not_equal, select,
)
from tensor_ir.func import PrimFunc, structural_equal
from tensor_ir.lower import lower
from tensor_ir.simplify import simplify, simplify_expr
from tensor_ir.stmt import (
    Block, BlockRealize, BufferStore, For, IfThenElse, IterVar, LetStmt, Range, SeqStmt, seq,
)
from tensor_ir.visitor import collect

# ---------------------------------------------------------------------------------------------
# A tiny reference evaluator (Python ints, floor semantics, lazy select)
# ---------------------------------------------------------------------------------------------

_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max,
    "/": lambda a, b: a / b,
}
_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def ev(e, env: dict, mem: dict | None = None):
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, BinOp):
        return _ARITH[e.op](ev(e.a, env, mem), ev(e.b, env, mem))
    if isinstance(e, Cmp):
        return int(_CMP[e.op](ev(e.a, env, mem), ev(e.b, env, mem)))
    if isinstance(e, And):
        return int(bool(ev(e.a, env, mem)) and bool(ev(e.b, env, mem)))
    if isinstance(e, Or):
        return int(bool(ev(e.a, env, mem)) or bool(ev(e.b, env, mem)))
    if isinstance(e, Not):
        return int(not ev(e.a, env, mem))
    if isinstance(e, Select):
        return ev(e.true_value if ev(e.condition, env, mem) else e.false_value, env, mem)
    if isinstance(e, Cast):
        v = ev(e.value, env, mem)
        return int(v) if not e.dtype.startswith("float") else float(v)
    if isinstance(e, BufferLoad):
        return mem[e.buffer][tuple(ev(i, env, mem) for i in e.indices)]
    raise TypeError(f"evaluator: {type(e).__name__}")


def run(s, env: dict, mem: dict) -> None:
    """Execute a lowered statement; stores go to ``mem[buffer][index tuple]``."""
    if isinstance(s, SeqStmt):
        for x in s.stmts:
            run(x, env, mem)
    elif isinstance(s, For):
        lo, n = ev(s.min, env, mem), ev(s.extent, env, mem)
        for v in range(lo, lo + n):
            run(s.body, {**env, s.loop_var: v}, mem)
    elif isinstance(s, IfThenElse):
        if ev(s.condition, env, mem):
            run(s.then_case, env, mem)
        elif s.else_case is not None:
            run(s.else_case, env, mem)
    elif isinstance(s, LetStmt):
        run(s.body, {**env, s.var: ev(s.value, env, mem)}, mem)
    elif isinstance(s, BufferStore):
        idx = tuple(ev(i, env, mem) for i in s.indices)
        mem.setdefault(s.buffer, {})[idx] = ev(s.value, env, mem)
    else:
        raise TypeError(f"runner: {type(s).__name__}")


def _v(*names):
    return tuple(Var(n) for n in names)


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------

io, ii, f, ko, ki, x, y = _v("io", "ii", "f", "ko", "ki", "x", "y")
DOM = {io: (0, 3), ii: (0, 31), f: (0, 19), ko: (0, 3), ki: (0, 3)}


def s(e, dom=DOM):
    return simplify_expr(e, dom)


def test_split_index_recovers_the_original_loop_variables():
    assert s((io * 32 + ii) // 32) is io
    assert s((io * 32 + ii) % 32) is ii
    assert s((ii + io * 32) // 32 * 32 + (io * 32 + ii) % 32) == io * 32 + ii


def test_fused_index_recombines():
    assert s((f // 5) * 5 + f % 5) is f
    assert s((f % 5) + (f // 5) * 5 + 3) == f + 3
    # Three-level fusion: the middle division nests into f // 15.
    assert s((f // 15) * 15 + ((f // 5) % 3) * 5 + f % 5) is f
    # The reverse direction: x - (x // c) * c is x % c.
    assert s(x - (x // 4) * 4) == x % 4
    assert s(x * 2 - (x // 4) * 8) == (x % 4) * 2


def test_linear_terms_merge_and_order_deterministically():
    assert s(x + y - x) is y
    assert s(x * 3 + 2 - x * 3) == IntImm(2)
    assert s(ii + io * 32 + 1) == io * 32 + ii + 1      # larger coefficient first, const last
    assert s(1 - x) == BinOp("-", IntImm(1), x)
    assert s((x + 1) * 2 - 2) == x * 2
    assert s(x * y * 2 - y * x) == BinOp("*", x, y)    # products are atoms, factors ordered
    assert s((x * 2) * (y * 3)) == s(x * y * 6)


def test_floordiv_rules():
    assert s(x // 1) is x
    assert s((x * 8 + 16) // 8) == x + 2               # exact multiples leave the division
    assert s((x * 4 + 2) // 8) == x // 2               # constant below the step of x*4
    assert s((x * 4 + ki) // 8) == x // 2              # ki in [0, 3] below the step of x*4
    assert s((x * 6) // 4) == (x * 3) // 2             # common factor cancels
    assert s((x * 4) // 2) == x * 2
    assert s((x // 4) // 8) == x // 32                 # nested division
    assert s((x // 4 + 1) // 2) == (x + 4) // 8        # nested with an offset
    assert s(ii // 32) == IntImm(0) and s(ii // 16, {ii: (16, 31)}) == IntImm(1)
    assert s((ii - 40) // 8) == ii // 8 - 5
    assert s(x // -4) == BinOp("//", BinOp("-", IntImm(0), x), IntImm(4))


def test_floormod_rules():
    assert s(x % 1) == IntImm(0)
    assert s(ii % 32) is ii and s(ii % 40) is ii
    assert s((ii + 32) % 32) is ii
    assert s((x + 12) % 4) == x % 4
    assert s((x * 6) % 4) == ((x * 3) % 2) * 2
    assert s((x * 4 + ki) % 8) == (x % 2) * 4 + ki
    assert s((x % 16) % 4) == x % 4
    assert s((x % 4) % 16) == x % 4                      # bound: x % 4 < 16
    assert s((ii - 32) % 32) is ii                       # one period below
    # Negative dividends follow floor semantics: [-8, -1] % 8 is x + 8.
    assert s(y % 8, {y: (-8, -1)}) == y + 8


def test_comparisons_decided_by_bounds():
    assert s(io * 32 + ii < 128) == IntImm(1, "bool")
    assert s(io * 32 + ii >= 128) == IntImm(0, "bool")
    assert s(io * 32 + ii < 100) == Cmp("<", io * 32 + ii, IntImm(100))
    assert s(ii <= 31) == IntImm(1, "bool") and s(ii > 31) == IntImm(0, "bool")
    assert s(equal(ii, 40)) == IntImm(0, "bool") and s(not_equal(ii, 40)) == IntImm(1, "bool")
    assert prove(x < x + 1) is True and prove(equal(x * 2, x * 2 + 1)) is False
    assert prove(x < y) is None


def test_comparison_normal_forms():
    assert s(equal(ko * 4 + ki, 0)) == logic_and(equal(ko, 0), equal(ki, 0))
    assert s(equal(ko * 4 + ki, 15)) == logic_and(equal(ko, 3), equal(ki, 3))
    assert s(equal(x * 2, 3)) == IntImm(0, "bool")
    assert s(x * 2 < 5) == Cmp("<", x, IntImm(3))
    assert s(x * 4 + 4 <= y * 4) == Cmp("<", x, y)
    assert s(x + 3 > 5) == Cmp(">=", x, IntImm(3))
    assert s(x >= 1) == Cmp(">=", x, IntImm(1))
    assert s(5 < x) == s(x > 5) == Cmp(">=", x, IntImm(6))
    assert s(equal(y, x)) == s(equal(x, y))
    assert s(logic_not(x < 3)) == Cmp(">=", x, IntImm(3))


def test_logic_folds():
    c = x < 3
    assert s(logic_and(c, logic_not(c))) == IntImm(0, "bool")
    assert s(logic_or(c, logic_not(c))) == IntImm(1, "bool")
    assert s(logic_and(ii < 32, c)) == Cmp("<", x, IntImm(3))
    assert s(logic_or(ii < 32, c)) == IntImm(1, "bool")
    assert s(logic_and(c, c)) == c


def test_min_max():
    assert s(minimum(ii, 40)) is ii and s(maximum(ii, 40)) == IntImm(40)
    assert s(minimum(x, x + 1)) is x and s(maximum(x, x + 1)) == x + 1
    assert s(minimum(y, x)) == s(minimum(x, y))
    assert s(minimum(x, x)) is x
    assert int_bound(minimum(ii, io), DOM) == (0, 3)


def test_select_and_narrowing():
    assert s(select(ii < 40, ii, 0)) is ii
    assert s(select(x < 3, x, x)) is x
    # In the true branch x is in [0, 2], so x // 4 is 0; in the false branch x >= 3.
    e = select(x < 3, x // 4, minimum(x, 2))
    assert s(e, {x: (0, 9)}) == select(x < 3, 0, 2)
    assert s(select(x < 3, x // 4, 0), {x: (0, 9)}) == IntImm(0)


def test_floats_fold_constants_only():
    a = Var("a", "float32")
    assert isinstance(s(a * 0.0), BinOp)
    # Floats fold constants only: (a + 0.0) - a is no 0.0 (inf - inf is NaN, -0.0 + 0.0 is
    # +0.0), and (a + 1.0) + 2.0 is not regrouped as a + 3.0 (the rounding would differ).
    e = a + 0.0 - a
    assert s(e) is e
    assert s(e) == BinOp("-", BinOp("+", a, FloatImm(0.0)), a)
    assert s((a + 1.0) + 2.0) == BinOp("+", BinOp("+", a, FloatImm(1.0)), FloatImm(2.0))
    assert isinstance(s(a - a), BinOp)
    assert s(const(1.5) + const(2.0)) == FloatImm(3.5)
    assert s(cast("float32", io * 0 + 2)) == FloatImm(2.0)
    assert s(Cmp("<", a, a)) == Cmp("<", a, a)   # NaN: a < a is not decidable
    fb = Var("fb", "float32")
    either = logic_or(Cmp("<", a, fb), Cmp(">=", a, fb))
    assert s(either) == either                    # both false when a or fb is NaN


def test_narrow_integers_are_not_rewritten():
    b = Var("b", "int8")
    e = b + 1 - 1
    assert simplify_expr(e) == e   # int8 wraps: only constants fold
    assert s(cast("int64", b) < 200) == IntImm(1, "bool")   # but the dtype range is a bound


def test_singleton_domain_becomes_a_constant():
    assert s(x * 4 + y, {x: (2, 2)}) == y + 8


def test_linear_form_api():
    lf = linear_form(ii + io * 32 - 3, DOM)
    assert lf.terms == ((io, 32), (ii, 1)) and lf.const == -3 and lf.coeff(ii) == 1
    assert lf.coeff(x) == 0
    assert linear_form((io * 32 + ii) // 8, DOM).terms == ((io, 4), (BinOp("//", ii, IntImm(8)), 1))
    with pytest.raises(DTypeError, match="float32"):
        linear_form(Var("a", "float32"))


def test_canonical_and_analyzer_reuse():
    an = Analyzer({x: (0, 7)})
    assert an.prove(x < 8) is True
    assert an.bound(x * 2 - 1) == (-1, 13)
    assert canonical((x * 4 + 3) // 4) is x


def test_relax_const_diff_and_sum_bound():
    # Symbolic bounds over the relaxed variables; the others stay symbolic.
    lo, hi = relax(io * 32 + ii, {ii: (IntImm(0), IntImm(31))})
    assert const_diff(lo, io * 32) == 0 and const_diff(hi, io * 32) == 31
    assert relax((io * 32 + ii) // 8, {ii: (IntImm(0), IntImm(7))}) == (io * 4, io * 4)
    assert relax(x % 4, {x: (y, y + 9)}) == (IntImm(0), IntImm(3))
    assert const_diff(x + y, y) is None and const_diff(x * 2 + 3, x * 2) == 3
    # Like atoms cancel before bounding.
    an = Analyzer(DOM)
    assert an.sum_bound([(ii, 1), (io, 2), (ii, -1)], 1) == (1, 7)
    assert an.sum_bound([(x, 1)]) is None
    # keep_order changes the spelling only: same value, written order.
    assert structural_equal(canonical(ii + io * 4, keep_order=True), ii + io * 4)
    assert structural_equal(canonical(ii + io * 4), io * 4 + ii)


# ---------------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------------

def _split_nest(n: int, factor: int):
    """for io, ii: if io*factor + ii < n: B[io*factor + ii] = A[(io*factor + ii) // 2]"""
    A = decl_buffer((n,), "int64", name="A")
    B = decl_buffer((n,), "int64", name="B")
    o, i = Var("io"), Var("ii")
    idx = o * factor + i
    store = BufferStore(B, BufferLoad(A, ((idx // factor) * factor + idx % factor,)) * 2, (idx,))
    body = IfThenElse(idx < n, store)
    nest = For(o, IntImm(0), IntImm(-(-n // factor)), "serial",
               For(i, IntImm(0), IntImm(factor), "serial", body))
    return nest, A, B


def _run_nest(nest, A, n):
    mem = {A: {(k,): 3 * k - 7 for k in range(n)}}
    run(nest, {}, mem)
    return mem.get(next(b for b in mem if b is not A), {}) if len(mem) > 1 else {}


def test_split_nest_guard_removed_when_factor_divides():
    nest, A, B = _split_nest(32, 8)
    out = simplify(nest)
    assert not collect(out, IfThenElse)
    store = collect(out, BufferStore)[0]
    assert store.indices[0] == out.loop_var * 8 + out.body.loop_var
    assert store.value.a.indices[0] == store.indices[0]
    assert _run_nest(out, A, 32) == _run_nest(nest, A, 32)


def test_split_nest_guard_kept_when_needed():
    nest, A, B = _split_nest(30, 8)
    out = simplify(nest)
    assert len(collect(out, IfThenElse)) == 1
    assert _run_nest(out, A, 30) == _run_nest(nest, A, 30)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), factor=st.integers(1, 12))
def test_split_nest_equivalence(n, factor):
    nest, A, B = _split_nest(n, factor)
    out = simplify(nest)
    assert _run_nest(out, A, n) == _run_nest(nest, A, n)
    assert bool(collect(out, IfThenElse)) == (n % factor != 0)


def test_if_then_else_folds_and_narrows():
    B = decl_buffer((8,), "int64", name="B")
    i = Var("i")
    store = BufferStore(B, i // 4, (i,))
    loop = For(i, IntImm(0), IntImm(8), "serial",
               IfThenElse(i < 4, store, BufferStore(B, i // 4 + 1, (i,))))
    out = simplify(loop)
    then_case, else_case = out.body.then_case, out.body.else_case
    assert then_case.value == IntImm(0) and else_case.value == IntImm(2)
    # A provable condition folds away; a loop whose body vanished disappears.
    assert simplify(For(i, IntImm(0), IntImm(8), "serial", IfThenElse(i < 8, store))).body is store
    assert simplify(For(i, IntImm(0), IntImm(8), "serial", IfThenElse(i >= 8, store))) \
        == SeqStmt(())
    # A branch that narrowing proves dead goes: i < 2 and i > 5 cannot both hold.
    dead = IfThenElse(logic_and(i < 2, i > 5), store)
    assert simplify(dead, {i: (0, 7)}) == SeqStmt(())


def test_let_binds_a_domain():
    B = decl_buffer((8,), "int64", name="B")
    i, t = Var("i"), Var("t")
    loop = For(i, IntImm(0), IntImm(8), "serial",
               LetStmt(t, i % 4, BufferStore(B, t // 4, (i,))))
    out = simplify(loop)
    assert out.body.body.value == IntImm(0)


def test_reused_loop_variable_does_not_leak_facts():
    B = decl_buffer((64,), "int64", name="B")
    i = Var("i")
    first = For(i, IntImm(0), IntImm(4), "serial", BufferStore(B, i // 4, (i,)))
    second = For(i, IntImm(0), IntImm(64), "serial", BufferStore(B, i // 4, (i,)))
    out = simplify(seq(first, second))
    assert out.stmts[0].body.value == IntImm(0)
    assert out.stmts[1].body.value == i // 4


def test_blocks_use_iteration_domains_and_survive():
    B = decl_buffer((16,), "int64", name="B")
    i, vi = Var("i"), Var("vi")
    block = Block("B", (IterVar(vi, Range.of(0, 16)),), (), (),
                  BufferStore(B, vi // 16, (vi,)))
    loop = For(i, IntImm(0), IntImm(16), "serial",
               BlockRealize(((i // 16) * 16 + i % 16,), i < 16, block))
    out = simplify(loop)
    realize = out.body
    assert isinstance(realize, BlockRealize) and realize.iter_values == (i,)
    assert realize.predicate == IntImm(1, "bool")
    assert realize.block.body.value == IntImm(0)
    func = PrimFunc((B,), loop)
    assert simplify(func).body.body.iter_values == (i,)


def test_lower_matmul_keeps_simple_init_guard():
    M, N, K = 4, 5, 6
    A = te.placeholder((M, K), name="A")
    Bt = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * Bt[k, j], axis=k), name="C")
    lf = lower(te.create_prim_func([A, Bt, C]))
    guard = collect(lf.body, IfThenElse)[0].condition
    assert isinstance(guard, Cmp) and guard.op == "==" and guard.b == IntImm(0)
    assert structural_equal(simplify(lf.body), lf.body)   # idempotent


# ---------------------------------------------------------------------------------------------
# Random expressions: simplified and original agree everywhere on the domain
# ---------------------------------------------------------------------------------------------

VARS = _v("a", "b", "c")


@st.composite
def domains(draw):
    dom = {}
    for v in VARS:
        lo = draw(st.integers(-8, 8))
        dom[v] = (lo, lo + draw(st.integers(0, 9)))
    return dom


_CMP_OPS = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


def _cmps(ints):
    return st.tuples(_CMP_OPS, ints, ints).map(lambda t: Cmp(*t))


def _int_exprs():
    leaves = st.one_of(st.sampled_from(VARS), st.integers(-10, 10).map(IntImm))
    divisors = st.integers(-9, 9).filter(lambda v: v != 0)

    def extend(sub):
        cond = st.one_of(_cmps(sub), _cmps(sub).map(Not))
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), sub, sub)
            .map(lambda t: BinOp(t[0], t[1], t[2])),
            st.tuples(st.sampled_from(["//", "%"]), sub, divisors)
            .map(lambda t: BinOp(t[0], t[1], IntImm(t[2]))),
            st.tuples(sub, st.integers(-6, 6)).map(lambda t: BinOp("*", t[0], IntImm(t[1]))),
            st.tuples(cond, sub, sub).map(lambda t: Select(*t)),
        )

    return st.recursive(leaves, extend, max_leaves=14)


INT_EXPRS = _int_exprs()
BOOL_EXPRS = st.recursive(_cmps(INT_EXPRS), lambda sub: st.one_of(
    st.tuples(sub, sub).map(lambda t: And(*t)),
    st.tuples(sub, sub).map(lambda t: Or(*t)),
    sub.map(Not)), max_leaves=4)


def _points(dom, rng, limit=60):
    ranges = [range(dom[v][0], dom[v][1] + 1) for v in VARS]
    total = 1
    for r in ranges:
        total *= len(r)
    if total <= limit:
        return [dict(zip(VARS, p)) for p in itertools.product(*ranges)]
    return [{v: rng.randint(*dom[v]) for v in VARS} for _ in range(limit)]


_SETTINGS = settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(e=INT_EXPRS, dom=domains(), seed=st.integers(0, 2**16))
def test_random_int_expressions_keep_their_value(e, dom, seed):
    out = simplify_expr(e, dom)
    for env in _points(dom, random.Random(seed)):
        assert ev(out, env) == ev(e, env), (e, out, env)
    bnd = int_bound(e, dom)
    if bnd is not None:
        for env in _points(dom, random.Random(seed + 1), 20):
            assert bnd[0] <= ev(e, env) <= bnd[1]
    assert simplify_expr(out, dom) == out   # a fixed point


@_SETTINGS
@given(e=INT_EXPRS, seed=st.integers(0, 2**16))
def test_random_int_expressions_without_domains(e, seed):
    out = simplify_expr(e)
    rng = random.Random(seed)
    for _ in range(40):
        env = {v: rng.randint(-50, 50) for v in VARS}
        assert ev(out, env) == ev(e, env), (e, out, env)


@_SETTINGS
@given(c=BOOL_EXPRS, dom=domains(), seed=st.integers(0, 2**16))
def test_random_conditions_keep_their_value(c, dom, seed):
    out = simplify_expr(c, dom)
    verdict = prove(c, dom)
    for env in _points(dom, random.Random(seed)):
        want = bool(ev(c, env))
        assert bool(ev(out, env)) == want, (c, out, env)
        if verdict is not None:
            assert verdict == want


# ---------------------------------------------------------------------------------------------
# The interpreter as a second oracle
# ---------------------------------------------------------------------------------------------

def _fused_split_func(m: int, n: int, factor: int) -> PrimFunc:
    """B[i, j] = A[i, j] * 2 over a fused-then-split loop:
    for fo, fi: if fo*factor + fi < m*n: f = fo*factor + fi; B[f // n, f % n] = ..."""
    A = decl_buffer((m, n), "float32", name="A")
    B = decl_buffer((m, n), "float32", name="B")
    fo, fi = Var("fo"), Var("fi")
    fused = fo * factor + fi
    i, j = fused // n, fused % n
    store = BufferStore(B, BufferLoad(A, (i, j)) * 2.0, (i, j))
    body = For(fo, IntImm(0), IntImm(-(-(m * n) // factor)), "serial",
               For(fi, IntImm(0), IntImm(factor), "serial", IfThenElse(fused < m * n, store)))
    return PrimFunc((A, B), body, "fused_split", (("lowered", True),))


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 6), n=st.integers(1, 6), factor=st.integers(1, 8))
def test_fused_split_nest_matches_interpreter(m, n, factor):
    func = _fused_split_func(m, n, factor)
    simple = simplify(func)
    a = np.arange(m * n, dtype="float32").reshape(m, n)
    want, got = np.zeros_like(a), np.zeros_like(a)
    interp.run(func, a, want)
    interp.run(simple, a, got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, a * 2)
    assert bool(collect(simple.body, IfThenElse)) == ((m * n) % factor != 0)
