"""Algorithm definitions: stage construction, typed errors, create_prim_func structure."""
from __future__ import annotations

import pytest

from tensor_ir import te
from tensor_ir.errors import DTypeError, TEError
from tensor_ir.expr import BinOp, Cast, FloatImm, IntImm, Reduce, Select, Var
from tensor_ir.stmt import REDUCE, SPATIAL, BlockRealize, For
from tensor_ir.visitor import collect


def _matmul(M=4, N=5, K=6):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_compute_records_axes_and_inputs():
    A, B, C = _matmul()
    assert [a.name for a in C.op.axis] == ["i", "j"]
    assert [a.name for a in C.op.reduce_axis] == ["k"]
    assert C.op.input_tensors == (A, B)
    assert C.shape == (4, 5) and C.dtype == "float32"
    assert isinstance(C.op.body, Reduce)


def test_create_prim_func_one_block_per_stage():
    A, B, C = _matmul()
    D = te.compute(C.shape, lambda i, j: te.max(C[i, j], 0.0), name="D")
    f = te.create_prim_func([A, B, D])
    assert [p.name for p in f.params] == ["A", "B", "D"]
    root = f.body.block
    assert [b.name for b in root.alloc_buffers] == ["C"]
    realizes = collect(f.body, BlockRealize)[1:]
    assert [r.block.name for r in realizes] == ["C", "D"]
    c_block = realizes[0].block
    assert [iv.kind for iv in c_block.iter_vars] == [SPATIAL, SPATIAL, REDUCE]
    assert c_block.init is not None and realizes[1].block.init is None
    loops = collect(realizes[0], For)
    assert loops == []  # the loops are above the realize
    assert [lp.loop_var.name for lp in collect(f.body, For)][:3] == ["i", "j", "k"]


def test_reduce_axis_with_begin_end_and_where():
    A = te.placeholder((10,), name="A")
    r = te.reduce_axis((2, 7), name="r")
    S = te.compute((1,), lambda i: te.sum(A[r], axis=r, where=te.equal(r % 2, 0)), name="S")
    assert S.op.reduce_axis[0].dom.min == IntImm(2)
    assert S.op.reduce_axis[0].dom.extent == IntImm(5)
    # == builds the same condition as te.equal (as in TVM); a Python bool is refused.
    S2 = te.compute((1,), lambda i: te.sum(A[r], axis=r, where=r % 2 == 0), name="S2")
    assert S2.op.body.condition == S.op.body.condition
    with pytest.raises(TEError, match="te.equal"):
        te.compute((1,), lambda i: te.sum(A[r], axis=r, where=True), name="S3")


def test_max_min_two_args_are_elementwise():
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: te.max(A[i], te.min(A[i], 1.0)), name="B")
    body = B.op.body
    assert isinstance(body, BinOp) and body.op == "max"
    assert isinstance(body.b, BinOp) and body.b.op == "min"


def test_custom_comm_reducer():
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: 1, name="prod")
    A = te.placeholder((3, 4), name="A")
    k = te.reduce_axis(4, name="k")
    P = te.compute((3,), lambda i: prod(A[i, k], axis=k), name="P")
    assert P.op.body.combiner.name == "prod"
    assert P.op.body.combiner.identity == FloatImm(1.0, "float32")


def test_if_then_else_all_any_and_cast():
    A = te.placeholder((4,), "int32", name="A")
    B = te.compute((6,), lambda i: te.if_then_else(te.all(i >= 1, i < 5), A[i - 1], 0),
                   name="B")
    assert isinstance(B.op.body, Select)
    C = te.compute((4,), lambda i: A[i].astype("float32") * 2.0, name="C")
    assert isinstance(C.op.body.a, Cast)
    assert C.dtype == "float32"
    e = te.any(A[0] > 1, A[1] > 1)
    assert e.dtype == "bool"


def test_dtype_mix_without_cast_names_the_stage():
    A = te.placeholder((4,), "float32", name="A")
    B = te.placeholder((4,), "float16", name="B")
    with pytest.raises(TEError, match="stage Mix.*dtype mismatch"):
        te.compute((4,), lambda i: A[i] + B[i], name="Mix")
    I32 = te.placeholder((4,), "int32", name="I")
    with pytest.raises(TEError, match="stage Mix2"):
        te.compute((4,), lambda i: A[i] * I32[i], name="Mix2")


def test_rank_error_names_stage_and_tensor():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(TEError, match=r"stage Bad: tensor A has rank 2 but was indexed with 3"):
        te.compute((4,), lambda i: A[i, i, i], name="Bad")


def test_unbound_reduce_axis():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(TEError, match="stage U.*reduction axis k"):
        te.compute((4,), lambda i: A[i, k] * 2.0, name="U")


def test_nested_reduction_rejected():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="k")
    j = te.reduce_axis(4, name="j")
    with pytest.raises(TEError, match="stage N.*reduction inside another reduction"):
        te.compute((4,), lambda i: te.sum(te.sum(A[j, k], axis=k), axis=j), name="N")
    # A reduction inside an elementwise expression gets a stage of its own (N_red).
    N = te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="N")
    assert [t.name for t in N.op.input_tensors] == ["N_red"]


def test_wrong_arity_and_bad_shape():
    A = te.placeholder((4,), name="A")
    with pytest.raises(TEError, match="stage W"):
        te.compute((4, 4), lambda i: A[i], name="W")
    with pytest.raises(TEError, match="placeholder P"):
        te.placeholder((4, -1), name="P")
    with pytest.raises(TEError, match="placeholder Q"):
        te.placeholder((4,), "complex64", name="Q")


def test_missing_placeholder_in_arguments():
    A, B, C = _matmul()
    with pytest.raises(TEError, match="placeholder B is used by stage C"):
        te.create_prim_func([A, C])


def test_duplicate_stage_names_are_made_unique():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="T")
    C = te.compute((4,), lambda i: B[i] * 2.0, name="T")
    f = te.create_prim_func([A, C])
    names = [r.block.name for r in collect(f.body, BlockRealize)[1:]]
    assert len(set(names)) == 2
    assert len({p.name for p in f.params} | {b.name for b in f.body.block.alloc_buffers}) == 3


def test_free_variable_rejected():
    A = te.placeholder((4,), name="A")
    n = Var("n")
    with pytest.raises(TEError, match="variable n is not an axis"):
        te.compute((4,), lambda i: A[i % n], name="F")


def test_float_literal_with_int_expression():
    A = te.placeholder((4,), "int32", name="A")
    with pytest.raises(TEError, match="stage L.*float constant"):
        te.compute((4,), lambda i: A[i] + 1.5, name="L")
    with pytest.raises(DTypeError):
        Var("x") / Var("y")


def test_max_reduce_over_axis_list():
    A = te.placeholder((3, 4, 5), name="A")
    k = te.reduce_axis(4, name="k")
    r = te.reduce_axis(5, name="r")
    M = te.compute((3,), lambda i: te.max(A[i, k, r], axis=[k, r]), name="M")
    assert isinstance(M.op.body, Reduce) and len(M.op.body.axis) == 2
