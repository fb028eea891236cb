"""cache_read, cache_write, set_scope, storage_align: results match numpy through the
interpreter and LLVM; preconditions raise ScheduleError."""
from __future__ import annotations

import pytest

from schedules import tree
from schedules.errors import ScheduleError
from schedules.primitives import loops
from schedules.primitives.cache import cache_read, cache_write, set_scope, storage_align
from schedules.primitives.compute_at import compute_at, reverse_compute_at
from tensor_ir.lower import lower
from tensor_ir.stmt import Allocate
from tensor_ir.visitor import collect

from .block_workloads import check, conv2d, layer_norm, matmul, softmax


def loop_vars(func, block):
    return [lp.loop_var for lp in tree.find_block(func, block).loops]


def tiled_matmul(relu=False):
    func, inputs, refs = matmul(relu=relu)
    i, j, k = loop_vars(func, "C")
    func, (io, ii) = loops.split(func, i, [None, 4])
    func, (jo, ji) = loops.split(func, j, [None, 8])
    func = loops.reorder(func, [io, jo, ii, ji])
    return func, inputs, refs, (io, jo, ii, ji, k)


@pytest.mark.parametrize("scope", ["global", "local", "shared"])
def test_cache_read_matmul(scope):
    func, inputs, refs = matmul()
    out, name = cache_read(func, "C", 1, scope)
    assert name == f"B_{scope}"
    c = tree.find_block(out, "C").node.block
    assert [r.buffer.name for r in c.reads][1] == f"B_{scope}"
    copy = tree.find_block(out, name).node.block
    assert copy.writes[0].buffer.scope == scope
    check(out, inputs, refs, llvm=scope != "shared")


def test_cache_read_then_compute_at_copies_a_tile():
    func, inputs, refs, (io, jo, ii, ji, k) = tiled_matmul()
    out, name = cache_read(func, "C", 0, "local")
    out = compute_at(out, name, jo)
    copy_loops = tree.find_block(out, name).loops
    assert [lp.extent.value for lp in copy_loops[-2:]] == [4, 16]   # A rows io*4 .. +3
    check(out, inputs, refs)


def test_cache_read_conv_input():
    func, inputs, refs = conv2d()
    out, name = cache_read(func, "conv", 1, "global")     # the weights
    check(out, inputs, refs)


def test_cache_write_matmul_with_reverse_compute_at():
    func, inputs, refs, (io, jo, ii, ji, k) = tiled_matmul(relu=True)
    out, name = cache_write(func, "C", 0, "local")
    assert name == "C_local"
    assert tree.find_block(out, "C").node.block.writes[0].buffer.name == "C_local"
    out = reverse_compute_at(out, name, jo)
    assert [lp.extent.value for lp in tree.find_block(out, name).loops[-2:]] == [4, 8]
    check(out, inputs, refs)


def test_cache_write_softmax_reduction():
    func, inputs, refs = softmax()
    out, name = cache_write(func, "expsum", 0, "local")
    out = reverse_compute_at(out, name, loop_vars(out, "expsum")[0])
    check(out, inputs, refs)


def test_cache_errors():
    func, _, _ = matmul()
    with pytest.raises(ScheduleError, match="out of range"):
        cache_read(func, "C", 7, "local")
    with pytest.raises(ScheduleError, match="unknown storage scope"):
        cache_read(func, "C", 0, "texture")
    with pytest.raises(ScheduleError, match="also writes"):
        cache_read(func, "C", 2, "local")          # C reads its own output
    with pytest.raises(ScheduleError, match="out of range"):
        cache_write(func, "C", 1, "local")
    sfunc, _, _ = softmax()
    # exp is consumed inside the same loop nest once norm is moved under expsum's loop.
    moved = compute_at(reverse_compute_at(sfunc, "norm", loop_vars(sfunc, "expsum")[0]), "exp",
                       loop_vars(sfunc, "expsum")[0])
    with pytest.raises(ScheduleError, match="same loop nest"):
        cache_write(moved, "exp", 0, "local")
    with pytest.raises(ScheduleError, match="same loop nest"):
        cache_read(moved, "expsum", 0, "local")


def test_set_scope():
    func, inputs, refs = softmax()
    out = set_scope(func, "exp", 0, "local")
    allocs = {a.buffer.name: a.buffer.scope for a in collect(lower(out).body, Allocate)}
    assert allocs["exp"] == "local"
    check(out, inputs, refs)
    with pytest.raises(ScheduleError, match="function parameter"):
        set_scope(func, "norm", 0, "local")
    with pytest.raises(ScheduleError, match="unknown storage scope"):
        set_scope(func, "exp", 0, "register")


def test_storage_align_pads_the_allocation():
    func, inputs, refs = layer_norm()
    out, name = cache_read(func, "ln", 0, "shared")
    out = storage_align(out, name, 0, 0, 8, 1)
    buf = tree.find_block(out, name).node.block.writes[0].buffer
    assert buf.const_shape == (8, 17)        # row stride 17 % 8 == 1
    assert tree.find_block(out, name).node.block.annotation("buffer_dim_align") == \
        ((0, 0, 8, 1),)
    check(out, inputs, refs, llvm=False)
    out2, name2 = cache_read(func, "ln", 0, "global")
    out2 = storage_align(out2, name2, 0, 0, 16, 0)   # already 16 % 16 == 0: no padding
    assert tree.find_block(out2, name2).node.block.writes[0].buffer.const_shape == (8, 16)
    check(out2, inputs, refs)


def test_storage_align_errors():
    func, _, _ = layer_norm()
    out, name = cache_read(func, "ln", 0, "global")
    with pytest.raises(ScheduleError, match="innermost"):
        storage_align(out, name, 0, 1, 8, 1)
    with pytest.raises(ScheduleError, match="offset"):
        storage_align(out, name, 0, 0, 8, 8)
    with pytest.raises(ScheduleError, match="function parameter"):
        storage_align(func, "ln", 0, 0, 8, 1)
    cfunc, _, _ = conv2d()
    with pytest.raises(ScheduleError, match="no padding"):
        # pad is [1, 3, 10, 10]: the stride of axis 1 is a multiple of 10, never 1 mod 4.
        storage_align(cfunc, "pad", 0, 1, 4, 1)
