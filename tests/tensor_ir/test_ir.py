"""Core IR: constant folding, identity semantics, JSON round trip, structural equality/hash."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tensor_ir import te
from tensor_ir.buffer import decl_buffer
from tensor_ir.errors import DTypeError, TensorIRError
from tensor_ir.expr import (
    BinOp, FloatImm, IntImm, Var, cast, const, equal, select,
)
from tensor_ir.func import from_json, structural_equal, structural_hash, to_json
from tensor_ir.lower import lower


def _func(M=4, N=5, K=6, name_a="A"):
    A = te.placeholder((M, K), name=name_a)
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.if_then_else(C[i, j] > 0.0, C[i, j], 0.0), name="D")
    return te.create_prim_func([A, B, D])


def test_constant_folding_and_identities():
    x = Var("x")
    assert x + 0 is x and 1 * x is x and x * 0 == IntImm(0)
    assert const(7) // 2 == IntImm(3) and const(-7) // 2 == IntImm(-4)
    assert const(-7) % 3 == IntImm(2)
    f = Var("f", "float32")
    assert isinstance(f * 0.0, BinOp)  # no float x*0 -> 0 (inf, nan)
    assert const(1.5) + 2.25 == FloatImm(3.75)
    assert cast("int32", const(-2.7)) == IntImm(-2, "int32")
    assert cast("int8", const(200, "int32")) == IntImm(-56, "int8")
    assert select(const(True), x, x + 1) is x


def test_var_identity_and_structural_node_equality():
    x, y = Var("x"), Var("x")
    assert x != y
    assert x + 1 == x + 1
    assert x + 1 != y + 1
    assert len({x + 1, x + 1}) == 1


def test_expression_has_no_truth_value():
    with pytest.raises(TypeError):
        bool(Var("x") < 3)


def test_int_promotion_and_float_mismatch():
    a = Var("a", "int32")
    b = Var("b", "int64")
    assert (a + b).dtype == "int64"
    with pytest.raises(DTypeError):
        Var("f", "float32") + Var("g", "float64")


def test_buffer_rank_and_index_checks():
    buf = decl_buffer((3, 4), "float32", name="X")
    with pytest.raises(TensorIRError, match="rank 2"):
        buf[1]
    with pytest.raises(TensorIRError, match="integer"):
        buf[1, const(1.0)]
    assert buf.nbytes == 48


def test_json_round_trip_is_structurally_equal():
    f = _func()
    text = json.dumps(to_json(f))
    g = from_json(text)
    assert structural_equal(f, g)
    assert structural_hash(f) == structural_hash(g)
    assert [p.name for p in g.params] == ["A", "B", "D"]
    lf = lower(f)
    assert structural_equal(lf, from_json(to_json(lf)))


def test_structural_hash_ignores_names_but_not_structure():
    assert structural_hash(_func()) == structural_hash(_func(name_a="Other"))
    assert structural_hash(_func()) != structural_hash(_func(M=8))


def test_structural_hash_is_stable_across_processes():
    code = ("from tests.tensor_ir.test_ir import _func;"
            "from tensor_ir.func import structural_hash;print(structural_hash(_func()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == structural_hash(_func())


def test_from_json_rejects_other_versions():
    data = to_json(_func())
    data["format_version"] = 99
    with pytest.raises(TensorIRError, match="format_version"):
        from_json(data)


def test_lower_removes_blocks_and_guards_init():
    from tensor_ir.stmt import Allocate, Block, BlockRealize, IfThenElse
    from tensor_ir.visitor import collect

    lf = lower(_func())
    assert not collect(lf.body, Block) and not collect(lf.body, BlockRealize)
    assert isinstance(lf.body, Allocate)
    inits = collect(lf.body, IfThenElse)
    assert inits and inits[0].condition == equal(inits[0].condition.a, 0)
