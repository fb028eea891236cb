"""The readable printer: golden snapshots of whole functions and unit checks of its rules."""
from __future__ import annotations

from tensor_ir import te
from tensor_ir.buffer import decl_buffer
from tensor_ir.expr import BinOp, Cast, FloatImm, IntImm, Var, cast, const, select
from tensor_ir.func import PrimFunc, from_json, to_json
from tensor_ir.lower import lower
from tensor_ir.printer import to_text
from tensor_ir.stmt import (
    Allocate, Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse,
    IterVar, LetStmt, Range, SeqStmt, seq,
)


def matmul():
    A = te.placeholder((4, 6), "float32", name="A")
    B = te.placeholder((6, 5), "float32", name="B")
    k = te.reduce_axis(6, name="k")
    C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((4, 5), lambda i, j: te.max(C[i, j], const(0.0, "float32")), name="D")
    return te.create_prim_func([A, B, D])


def padded_conv():
    # NCHW-like 1x1-channel convolution over a zero-padded input.
    X = te.placeholder((1, 2, 5, 5), "float32", name="X")
    W = te.placeholder((3, 2, 3, 3), "float32", name="W")
    pad = te.compute((1, 2, 7, 7), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 6, w >= 1, w < 6), X[n, c, h - 1, w - 1], const(0.0, "float32")),
        name="pad")
    rc = te.reduce_axis(2, name="rc")
    rh = te.reduce_axis(3, name="rh")
    rw = te.reduce_axis(3, name="rw")
    Y = te.compute((1, 3, 5, 5), lambda n, f, y, x: te.sum(
        pad[n, rc, y + rh, x + rw] * W[f, rc, rh, rw], axis=[rc, rh, rw]), name="conv")
    return te.create_prim_func([X, W, Y])


def softmax():
    A = te.placeholder((4, 8), "float32", name="A")
    r = te.reduce_axis(8, name="r")
    mx = te.compute((4,), lambda i: te.max(A[i, r], axis=r), name="maxelem")
    ex = te.compute((4, 8), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    r2 = te.reduce_axis(8, name="r2")
    sm = te.compute((4,), lambda i: te.sum(ex[i, r2], axis=r2), name="expsum")
    out = te.compute((4, 8), lambda i, j: ex[i, j] / sm[i], name="softmax")
    return te.create_prim_func([A, out])


def every_loop_kind():
    A = decl_buffer((64, 64), "float32", "A")
    B = decl_buffer((64, 64), "float32", "B")
    L = decl_buffer((8,), "float32", "A_local", scope="local")
    S = decl_buffer((64,), "float32", "A_shared", scope="shared")
    bx, tx, io, ii, j, vj, u = (Var(n) for n in ("blockIdx_x", "threadIdx_x", "i_outer",
                                                  "i_inner", "j", "j_vec", "u"))
    t = Var("t", "float32")
    row = bx * 32 + tx
    inner = seq(
        For(vj, const(0), const(8), "vectorized",
            BufferStore(L, A[row, j * 8 + vj], (vj,))),
        For(u, const(0), const(8), "unrolled",
            LetStmt(t, L[u] * 2.0,
                    IfThenElse(te.all(row < 60, j * 8 + u >= 4),
                               BufferStore(B, t, (row, j * 8 + u)),
                               IfThenElse(te.equal(row % 2, 0),
                                          BufferStore(B, -t, (row, j * 8 + u)),
                                          BufferStore(B, const(0.0, "float32"),
                                                      (row, j * 8 + u))))),
            annotations=(("pragma_unroll_explicit", True),)),
    )
    body = For(bx, const(0), const(2), "thread_binding", For(
        tx, const(0), const(32), "thread_binding", seq(
            Allocate(S, seq(
                BufferStore(S, A[row, tx], (tx,)),
                Evaluate(Cast("int32", S[tx])),
            )),
            For(io, const(1), const(7), "parallel", For(
                ii, const(0), const(1), "serial",
                For(j, const(0), const(8), "serial", Allocate(L, inner),
                    annotations=(("software_pipeline", [0, 1]), ("note", "a \"quoted\" str")))),
                annotations=(("pragma_auto_unroll_max_step", 16),)),
        ), "threadIdx.x"), "blockIdx.x")
    return PrimFunc((A, B), body, "kernel", (("lowered", True), ("target", "cuda")))


# ---------------------------------------------------------------------------------------------
# Golden snapshots
# ---------------------------------------------------------------------------------------------

def test_golden_matmul(golden):
    golden.check("printer_matmul", to_text(matmul()))


def test_golden_matmul_with_regions(golden):
    golden.check("printer_matmul_regions", to_text(matmul(), show_regions=True))


def test_golden_matmul_lowered(golden):
    golden.check("printer_matmul_lowered", to_text(lower(matmul())))


def test_golden_padded_conv(golden):
    golden.check("printer_padded_conv", to_text(padded_conv()))


def test_golden_softmax(golden):
    golden.check("printer_softmax", to_text(softmax()))


def test_golden_every_loop_kind(golden):
    golden.check("printer_every_loop_kind", to_text(every_loop_kind()))


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------

def test_str_of_func_stmt_and_expr_use_the_printer():
    func = matmul()
    assert str(func) == to_text(func)
    i = Var("i")
    assert str(i * 2 + 1) == "i * 2 + 1"
    A = decl_buffer((4,), "float32", "A")
    assert str(BufferStore(A, A[i], (i,))) == "A[i] = A[i]"


def test_output_is_deterministic_and_survives_json_round_trip():
    func = padded_conv()
    assert to_text(func) == to_text(func)
    assert to_text(from_json(to_json(func))) == to_text(func)
    assert to_text(padded_conv()) == to_text(func)


def test_minimal_parentheses_by_precedence():
    a, b, c = Var("a"), Var("b"), Var("c")
    assert to_text((a + b) * c) == "(a + b) * c"
    assert to_text(a + b * c) == "a + b * c"
    assert to_text(a - (b - c)) == "a - (b - c)"
    assert to_text((a - b) - c) == "a - b - c"
    assert to_text(a // (b * c)) == "a // (b * c)"
    assert to_text((a // b) % c) == "a // b % c"
    assert to_text(te.floordiv(a, 4) * 4 + te.floormod(a, 4)) == "a // 4 * 4 + a % 4"
    assert to_text(te.all(a < b, te.any(b < c, c < a))) == "a < b and (b < c or c < a)"
    assert to_text(te.any(te.all(a < b, b < c), c < a)) == "a < b and b < c or c < a"
    assert to_text(~(a < b)) == "not a < b"
    assert to_text(te.equal(a < b, b < c)) == "(a < b) == (b < c)"
    assert to_text(a + IntImm(-3)) == "a + -3"


def test_function_like_forms():
    x = Var("x", "float32")
    n = Var("n")
    assert to_text(te.max(x, 1.0)) == "max(x, 1.0f)"
    assert to_text(te.min(n, 3)) == "min(n, 3)"
    assert to_text(select(n < 3, x, x * 2.0)) == "select(n < 3, x, x * 2.0f)"
    assert to_text(cast("float32", n) + x) == "float32(n) + x"
    assert to_text(te.exp(x) + te.power(x, x)) == "exp(x) + pow(x, x)"
    assert to_text(Cast("int32", FloatImm(float("inf")))) == "int32(float32(inf))"


def test_constants_show_non_default_dtypes():
    assert to_text(const(0.5, "float32")) == "0.5f"
    assert to_text(const(0.1, "float32")) == "0.1f"
    assert to_text(const(2.0, "float32")) == "2.0f"
    assert to_text(const(0.5, "float64")) == "float64(0.5)"
    assert to_text(const(0.5, "float16")) == "float16(0.5)"
    assert to_text(const(float("-inf"), "float32")) == "float32(-inf)"
    assert to_text(const(7)) == "7"
    assert to_text(const(7, "int32")) == "int32(7)"
    assert to_text(const(True)) == "True"


def test_shadowed_names_get_suffixes_and_disjoint_scopes_reuse():
    A = decl_buffer((4, 4), "float32", "A")
    outer, inner, again = Var("i"), Var("i"), Var("i")
    body = seq(
        For(outer, const(0), const(4), "serial",
            For(inner, const(0), const(4), "serial",
                BufferStore(A, const(0.0, "float32"), (outer, inner)))),
        For(again, const(0), const(4), "serial",
            BufferStore(A, const(1.0, "float32"), (again, again))),
    )
    assert to_text(body).splitlines() == [
        "for i in range(4):",
        "  for i_1 in range(4):",
        "    A[i, i_1] = 0.0f",
        "for i in range(4):",
        "  A[i, i] = 1.0f",
    ]


def test_distinct_buffers_with_one_name_are_distinguished():
    A1 = decl_buffer((4,), "float32", "A")
    A2 = decl_buffer((4,), "float32", "A")
    T = decl_buffer((4,), "float32", "A", scope="local")
    i = Var("i")
    func = PrimFunc((A1, A2), Allocate(T, For(i, const(0), const(4), "serial", seq(
        BufferStore(T, A1[i], (i,)), BufferStore(A2, T[i], (i,))))))
    assert to_text(func).splitlines() == [
        "def main(A: float32[4], A_1: float32[4]):",
        "  alloc A_2: local float32[4]",
        "  for i in range(4):",
        "    A_2[i] = A[i]",
        "    A_1[i] = A_2[i]",
    ]


def test_block_predicate_offset_domain_and_annotations():
    A = decl_buffer((10,), "float32", "A")
    i, v = Var("i"), Var("v")
    block = Block("B", (IterVar(v, Range.of(2, 8), "spatial"),),
                  (), (BufferRegion(A, (Range(v, IntImm(1)),)),),
                  BufferStore(A, const(1.0, "float32"), (v,)), None, (), (("tag", "ew"),))
    realize = BlockRealize((i + 2,), i < 6, block)
    text = to_text(For(i, const(0), const(8), "serial", realize), show_regions=True)
    assert text.splitlines() == [
        "for i in range(8):",
        "  block B(v = spatial(range(2, 10), i + 2)):",
        "    where i < 6",
        "    reads: ",
        "    writes: A[v]",
        '    annotations: {"tag": "ew"}',
        "    A[v] = 1.0f",
    ]


def test_allocate_not_last_in_sequence_is_nested():
    A = decl_buffer((2,), "float32", "A")
    T = decl_buffer((2,), "float32", "T")
    body = SeqStmt((Allocate(T, BufferStore(T, A[0], (const(0),))),
                    BufferStore(A, const(0.0, "float32"), (const(1),))))
    assert to_text(body).splitlines() == [
        "alloc T: float32[2]:",
        "  T[0] = A[0]",
        "A[1] = 0.0f",
    ]


def test_regions_ranges_and_te_expressions():
    A = decl_buffer((8, 8), "float32", "A")
    i = Var("i")
    region = BufferRegion(A, (Range(i * 4, IntImm(4)), Range(IntImm(0), IntImm(8))))
    assert to_text(region) == "A[i * 4:i * 4 + 4, 0:8]"
    assert to_text(A) == "A: float32[8, 8]"
    X = te.placeholder((4, 4), "float32", name="X")
    k = te.reduce_axis(4, name="k")
    Y = te.compute((4,), lambda i: te.sum(X[i, k], axis=k, where=k < i), name="Y")
    assert to_text(Y.op.body) == "sum(X[i, k], axis=[k], where=k < i)"


def test_let_with_typed_var_and_integer_ops():
    x = Var("x", "int32")
    A = decl_buffer((4,), "int32", "A")
    stmt = LetStmt(x, A[1] * 2, BufferStore(A, BinOp("%", x, const(3, "int32")), (const(0),)))
    assert to_text(stmt).splitlines() == [
        "let x: int32 = A[1] * int32(2)",
        "A[0] = x % int32(3)",
    ]
