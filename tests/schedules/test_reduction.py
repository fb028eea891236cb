"""rfactor and decompose_reduction: results match numpy through the interpreter and LLVM;
preconditions raise ScheduleError."""
from __future__ import annotations

import numpy as np
import pytest

from schedules import tree
from schedules.errors import ScheduleError
from schedules.primitives import loops
from schedules.primitives.cache import cache_write
from schedules.primitives.compute_at import reverse_compute_at
from schedules.primitives.reduction import decompose_reduction, rfactor
from tensor_ir import te
from tensor_ir.expr import IntImm

from .block_workloads import check, conv2d, layer_norm, matmul, softmax


def loop_vars(func, block):
    return [lp.loop_var for lp in tree.find_block(func, block).loops]


@pytest.mark.parametrize("which,axis", [(1, 0), (1, 2), (0, 1), (1, -1)])
def test_rfactor_split_matmul(which, axis):
    func, inputs, refs = matmul()
    i, j, k = loop_vars(func, "C")
    func, ks = loops.split(func, k, [None, 4])
    out, rf = rfactor(func, ks[which], axis)
    assert rf == "C_rf"
    rf_buf = tree.find_block(out, rf).node.block.writes[0].buffer
    shape = [16, 16]
    shape.insert(axis % 3, 4)
    assert rf_buf.const_shape == tuple(shape)
    final = tree.find_block(out, "C").node.block
    assert {r.buffer.name for r in final.reads} >= {"C_rf"}
    check(out, inputs, refs)


def test_rfactor_whole_reduction_softmax_max():
    func, inputs, refs = softmax()
    out, rf = rfactor(func, loop_vars(func, "maxelem")[1], 0)
    check(out, inputs, refs)


def test_rfactor_layer_norm_then_decompose():
    func, inputs, refs = layer_norm()
    k = loop_vars(func, "sqsum")[1]
    func, (ko, ki) = loops.split(func, k, [None, 4])
    out, rf = rfactor(func, ki, 1)
    out, init = decompose_reduction(out, rf, loop_vars(out, rf)[0])
    check(out, inputs, refs)


def test_rfactor_errors():
    func, _, _ = matmul()
    i, j, k = loop_vars(func, "C")
    with pytest.raises(ScheduleError, match="does not bind a reduce variable"):
        rfactor(func, j, 0)
    with pytest.raises(ScheduleError, match="out of range"):
        rfactor(func, k, 5)
    sfunc, _, _ = softmax()
    with pytest.raises(ScheduleError, match="not a reduction block"):
        rfactor(sfunc, loop_vars(sfunc, "exp")[1], 0)
    with pytest.raises(ScheduleError, match="encloses 2 blocks"):
        moved = reverse_compute_at(sfunc, "norm", loop_vars(sfunc, "expsum")[0])
        rfactor(moved, loop_vars(moved, "expsum")[0], 0)
    fused, _ = loops.fuse(func, [j, k])
    with pytest.raises(ScheduleError, match="both spatial and reduce"):
        rfactor(fused, loop_vars(fused, "C")[1], 0)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_decompose_reduction_matmul(depth):
    func, inputs, refs = matmul()
    lv = loop_vars(func, "C")[depth]
    out, init = decompose_reduction(func, "C", lv)
    assert init == "C_init"
    assert tree.find_block(out, "C").node.block.init is None
    init_loops = tree.find_block(out, init).loops
    # The init runs over the spatial loops only: those above the loop stay shared.
    assert len(init_loops) == 2
    check(out, inputs, refs)


def test_decompose_reduction_tiled_cache_write():
    func, inputs, refs = matmul(relu=True)
    i, j, k = loop_vars(func, "C")
    func, (io, ii) = loops.split(func, i, [None, 4])
    func, (jo, ji) = loops.split(func, j, [None, 8])
    func = loops.reorder(func, [io, jo, ii, ji])
    func, wb = cache_write(func, "C", 0, "local")
    func = reverse_compute_at(func, wb, jo)
    out, init = decompose_reduction(func, "C", ii)
    assert [lp.loop_var for lp in tree.find_block(out, init).loops[:2]] == [io, jo]
    check(out, inputs, refs)


def test_decompose_reduction_conv():
    func, inputs, refs = conv2d()
    out, init = decompose_reduction(func, "conv", loop_vars(func, "conv")[2])
    check(out, inputs, refs)


def test_decompose_reduction_errors():
    func, _, _ = matmul()
    i, j, k = loop_vars(func, "C")
    func2 = loops.reorder(func, [k, j])   # loops i, k, j
    with pytest.raises(ScheduleError, match="binds a reduce variable"):
        decompose_reduction(func2, "C", j)
    sfunc, _, _ = softmax()
    with pytest.raises(ScheduleError, match="not a reduction block"):
        decompose_reduction(sfunc, "exp", loop_vars(sfunc, "exp")[0])
    with pytest.raises(ScheduleError, match="does not enclose"):
        decompose_reduction(sfunc, "maxelem", loop_vars(sfunc, "exp")[0])
    fused, _ = loops.fuse(func, [j, k])
    with pytest.raises(ScheduleError, match="both spatial and reduce"):
        decompose_reduction(fused, "C", loop_vars(fused, "C")[0])


@pytest.mark.parametrize("k,factor,which", [(3, 4, 1), (10, 4, 1), (10, 4, 0), (5, 8, 1),
                                            (10, 3, 0)])
def test_rfactor_non_divisible_split_initialises_every_partial(k, factor, which):
    # Partials whose rf index no iteration reaches (ki = 3 when k = 3 is split by 4) were never
    # initialised, and the final reduction read whatever the allocation held (NaN in the
    # interpreter).
    func, inputs, refs = matmul(k=k)
    _, _, kv = loop_vars(func, "C")
    func, ks = loops.split(func, kv, [None, factor])
    out, rf = rfactor(func, ks[which], 0)
    rf_realize = tree.find_block(out, rf).node
    # The reduce guard moved into the update; no spatial guard was there to keep.
    assert isinstance(rf_realize.predicate, IntImm) and rf_realize.predicate.value
    check(out, inputs, refs)


def test_rfactor_non_divisible_max_and_spatial_guard_kept():
    # max needs -inf, not 0, in untouched partials; the guard of a non-divisible spatial split
    # stays on the realize (it keeps the stores inside the buffer).
    func, inputs, refs = softmax(m=6, n=3)
    i, k = loop_vars(func, "maxelem")
    func, _ = loops.split(func, i, [None, 4])
    func, (ko, ki) = loops.split(func, k, [None, 4])
    out, rf = rfactor(func, ki, 1)
    pred = tree.find_block(out, rf).node.predicate
    assert not isinstance(pred, IntImm)
    check(out, inputs, refs)


def test_rfactor_partials_start_at_identity_not_init():
    A = te.placeholder((4, 6), "float32", name="A")
    r = te.reduce_axis(6, name="k")
    C = te.compute((4,), lambda i: te.sum(A[i, r], axis=r, init=5.0), name="C")
    func = te.create_prim_func([A, C])
    a = np.random.default_rng(4).standard_normal((4, 6)).astype("float32")
    _, kv = loop_vars(func, "C")
    func, (ko, ki) = loops.split(func, kv, [None, 4])
    out, _ = rfactor(func, ki, 0)
    check(out, [a], [a.sum(axis=1) + 5.0])
