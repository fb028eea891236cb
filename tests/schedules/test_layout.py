"""transform_layout and pack_layout: results match numpy through the interpreter and LLVM;
preconditions raise ScheduleError."""
from __future__ import annotations

import pytest

from schedules import tree
from schedules.errors import ScheduleError
from schedules.primitives.cache import cache_read
from schedules.primitives.compute_at import compute_at
from schedules.primitives.layout import pack_layout, transform_layout
from tensor_ir.expr import BufferLoad
from tensor_ir.visitor import collect

from .block_workloads import check, conv2d, matmul, softmax


def loop_vars(func, block):
    return [lp.loop_var for lp in tree.find_block(func, block).loops]


@pytest.mark.parametrize("n", [32, 20])
def test_pack_layout_matmul_b(n):
    func, inputs, refs = matmul(m=8, n=n, k=12)
    out, name = pack_layout(func, "C", "B", lambda k, j: (j // 16, k, j % 16))
    assert name == "B_pack"
    packed = tree.find_block(out, name).node.block.writes[0].buffer
    assert packed.const_shape == (-(-n // 16), 12, 16)     # padded when 16 does not divide n
    c = tree.find_block(out, "C").node.block
    assert {ld.buffer.name for ld in collect(c.body, BufferLoad)} == {"A", packed.name, "C"}
    check(out, inputs, refs)


def test_pack_layout_then_compute_at():
    func, inputs, refs = matmul(m=8, n=32, k=12)
    out, name = pack_layout(func, "C", ("read", 1), lambda k, j: (j // 8, k, j % 8))
    out = compute_at(out, name, loop_vars(out, "C")[1])      # pack the panel j needs
    check(out, inputs, refs)


def test_transform_layout_intermediate():
    func, inputs, refs = softmax()
    out = transform_layout(func, "exp", 0, lambda i, j: (j // 4, i, j % 4))
    buf = tree.find_block(out, "exp").node.block.writes[0].buffer
    assert buf.const_shape == (4, 8, 4)
    for name in ("exp", "expsum", "norm"):
        blk = tree.find_block(out, name).node.block
        assert all(r.buffer is buf for r in blk.reads + blk.writes if r.buffer.name == "exp")
    check(out, inputs, refs)


def test_transform_layout_after_cache_read():
    func, inputs, refs = matmul()
    out, name = cache_read(func, "C", 1, "global")
    out = transform_layout(out, name, 0, lambda k, j: (j, k))
    check(out, inputs, refs)


def test_transform_layout_conv_pad_by_name():
    func, inputs, refs = conv2d()
    out = transform_layout(func, "conv", "pad", lambda b, c, y, x: (b, y, x, c))
    check(out, inputs, refs)


def test_layout_errors():
    func, _, _ = matmul()
    with pytest.raises(ScheduleError, match="pack_layout"):
        transform_layout(func, "C", "B", lambda k, j: (j, k))
    with pytest.raises(ScheduleError, match="neither reads nor writes"):
        transform_layout(func, "C", "Z", lambda k, j: (j, k))
    with pytest.raises(ScheduleError, match="does not take"):
        pack_layout(func, "C", "B", lambda k: (k,))
    with pytest.raises(ScheduleError, match="drops index"):
        pack_layout(func, "C", "B", lambda k, j: (j,))
    with pytest.raises(ScheduleError, match="cannot invert"):
        pack_layout(func, "C", "B", lambda k, j: (j + k, k))
    with pytest.raises(ScheduleError, match="overlap"):
        pack_layout(func, "C", "B", lambda k, j: (j, k, j % 4))
    with pytest.raises(ScheduleError, match="only a buffer it reads"):
        pack_layout(func, "C", "C", lambda i, j: (j, i))
    sfunc, _, _ = softmax()
    with pytest.raises(ScheduleError, match="negative"):
        transform_layout(sfunc, "exp", 0, lambda i, j: (i - 1, j))
