"""compute_at, reverse_compute_at, compute_inline, reverse_compute_inline: results match numpy
through the interpreter and LLVM; each documented precondition raises ScheduleError."""
from __future__ import annotations

import numpy as np
import pytest

from schedules import tree
from schedules.errors import ScheduleError
from schedules.primitives import loops
from schedules.primitives.cache import cache_write
from schedules.primitives.layout import transform_layout
from schedules.primitives.compute_at import (
    compute_at, compute_inline, reverse_compute_at, reverse_compute_inline,
)
from tensor_ir import te
from tensor_ir.stmt import For

from .block_workloads import check, conv2d, layer_norm, matmul, softmax


def loop_vars(func, block):
    return [lp.loop_var for lp in tree.find_block(func, block).loops]


def elementwise_chain(n=10):
    A = te.placeholder((6, n), "float32", name="A")
    B = te.compute((6, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, n), lambda i, j: B[i, j] + 1.0, name="C")
    a = np.random.default_rng(5).standard_normal((6, n)).astype("float32")
    return te.create_prim_func([A, C]), [a], [a * 2 + 1]


# ---------------------------------------------------------------------------------------------
# compute_at
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", range(7))
def test_compute_at_conv_pad_every_loop(depth):
    func, inputs, refs = conv2d()
    lv = loop_vars(func, "conv")[depth]
    out = compute_at(func, "pad", lv)
    # The pad block now sits under the chosen loop, before the conv nest.
    loc = tree.find_block(out, "pad")
    assert any(isinstance(n, For) and n.loop_var is lv for n in loc.path)
    check(out, inputs, refs, llvm=depth in (0, 3))


def test_compute_at_pad_region_is_a_window():
    func, inputs, refs = conv2d()
    out = compute_at(func, "pad", loop_vars(func, "conv")[2])  # under y: rows y .. y+2
    pad_loops = tree.find_block(out, "pad").loops[-4:]
    assert [lp.extent.value for lp in pad_loops] == [1, 3, 3, 10]
    check(out, inputs, refs)


def test_compute_at_non_divisible_split_is_guarded():
    func, inputs, refs = elementwise_chain(10)
    _, j = loop_vars(func, "C")
    func, (jo, _) = loops.split(func, j, [None, 4])
    out = compute_at(func, "B", jo)
    realize = tree.find_block(out, "B").node
    assert not (hasattr(realize.predicate, "value") and realize.predicate.value == 1)
    check(out, inputs, refs)


def test_compute_at_softmax_chain():
    func, inputs, refs = softmax()
    out = reverse_compute_at(func, "norm", loop_vars(func, "expsum")[0])
    out = compute_at(out, "exp", loop_vars(out, "expsum")[0])
    out = compute_at(out, "maxelem", loop_vars(out, "expsum")[0])
    # One outer row loop now holds all four blocks.
    root = out.body.block
    assert isinstance(root.body, For)
    check(out, inputs, refs)


def test_compute_at_layer_norm_reductions():
    func, inputs, refs = layer_norm()
    i = loop_vars(func, "ln")[0]
    out = compute_at(func, "sqsum", i)
    out = compute_at(out, "xsum", i)
    check(out, inputs, refs)


def test_compute_at_into_tiled_matmul():
    A = te.placeholder((16, 16), "float32", name="A")
    Bt = te.placeholder((16, 16), "float32", name="B")
    Ap = te.compute((16, 16), lambda i, k: A[i, k] * 0.5, name="Ascaled")
    r = te.reduce_axis(16, name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(Ap[i, r] * Bt[r, j], axis=r), name="C")
    func = te.create_prim_func([A, Bt, C])
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 16, 16)).astype("float32")
    i, j, k = loop_vars(func, "C")
    func, (io, ii) = loops.split(func, i, [None, 4])
    out = compute_at(func, "Ascaled", io)
    ext = [lp.extent.value for lp in tree.find_block(out, "Ascaled").loops[-2:]]
    assert ext == [4, 16]
    check(out, [a, b], [(a * 0.5) @ b])


def test_compute_at_errors():
    func, _, _ = softmax()
    i_norm = loop_vars(func, "norm")[0]
    # A consumer (expsum) of exp is not under norm's loop.
    with pytest.raises(ScheduleError, match="does not enclose consumer"):
        compute_at(func, "exp", i_norm)
    # The block writes the function output.
    with pytest.raises(ScheduleError, match="function output"):
        compute_at(func, "norm", loop_vars(func, "expsum")[0])
    # The loop already encloses the block.
    with pytest.raises(ScheduleError, match="already encloses"):
        compute_at(func, "exp", loop_vars(func, "exp")[0])
    # No such block.
    with pytest.raises(ScheduleError, match="no block named"):
        compute_at(func, "nope", i_norm)


def fan_out():
    """B feeds two outputs C and D (two consumers of one intermediate)."""
    A = te.placeholder((6, 8), "float32", name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 8), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((6, 8), lambda i, j: B[i, j] - 1.0, name="D")
    a = np.random.default_rng(6).standard_normal((6, 8)).astype("float32")
    return te.create_prim_func([A, C, D]), [a], [a * 2 + 1, a * 2 - 1]


def test_compute_at_fan_out():
    func, inputs, refs = fan_out()
    with pytest.raises(ScheduleError, match="does not enclose consumer"):
        compute_at(func, "B", loop_vars(func, "C")[0])
    out = reverse_compute_at(func, "D", loop_vars(func, "B")[0])
    out = reverse_compute_at(out, "C", loop_vars(out, "B")[0])
    check(out, inputs, refs)
    # Both consumers now sit under B's row loop; B can go under... its own loop is taken.
    with pytest.raises(ScheduleError, match="already encloses"):
        compute_at(out, "B", loop_vars(out, "B")[0])


def test_compute_at_reduction_block_under_its_write_back():
    func, inputs, refs = matmul(relu=True)
    func, wb = cache_write(func, "C", 0, "local")
    # C (a reduction) writes C_local, read only by the write-back block: compute one row of
    # C_local per row of the write-back.
    out = compute_at(func, "C", loop_vars(func, wb)[0])
    assert [lp.extent.value for lp in tree.find_block(out, "C").loops[-3:]] == [1, 16, 16]
    check(out, inputs, refs)


def test_compute_at_error_store_not_at_iteration_variables():
    func, _, _ = softmax()
    func = reverse_compute_at(func, "norm", loop_vars(func, "expsum")[0])
    func = transform_layout(func, "exp", 0, lambda i, j: (j // 4, i, j % 4))
    with pytest.raises(ScheduleError, match="region cannot be inferred"):
        compute_at(func, "exp", loop_vars(func, "expsum")[0])


# ---------------------------------------------------------------------------------------------
# reverse_compute_at
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [0, 1])
def test_reverse_compute_at_relu_into_tiled_matmul(depth):
    func, inputs, refs = matmul(relu=True)
    i, j, k = loop_vars(func, "C")
    func, (io, ii) = loops.split(func, i, [None, 4])
    func, (jo, ji) = loops.split(func, j, [None, 8])
    func = loops.reorder(func, [io, jo, ii, ji])
    out = reverse_compute_at(func, "D", [io, jo][depth])
    d_loops = tree.find_block(out, "D").loops
    assert [lp.extent.value for lp in d_loops[-2:]] == [[4, 16], [4, 8]][depth]
    check(out, inputs, refs)


def test_reverse_compute_at_non_divisible():
    func, inputs, refs = elementwise_chain(10)
    _, j = loop_vars(func, "B")
    func, (jo, _) = loops.split(func, j, [None, 4])
    out = reverse_compute_at(func, "C", jo)
    check(out, inputs, refs)


def test_reverse_compute_at_errors():
    func, _, _ = matmul(relu=True)
    i, j, k = loop_vars(func, "C")
    # Inside the reduction of C, its values are incomplete.
    with pytest.raises(ScheduleError, match="inside the reduction"):
        reverse_compute_at(func, "D", k)
    sfunc, _, _ = softmax()
    # norm's producers exp and expsum come after maxelem's loop.
    with pytest.raises(ScheduleError, match="producer exp of block norm comes after"):
        reverse_compute_at(sfunc, "norm", loop_vars(sfunc, "maxelem")[0])
    ffunc, _, _ = fan_out()
    # D's only producer B is before C's loop, not under it.
    with pytest.raises(ScheduleError, match="no producer"):
        reverse_compute_at(ffunc, "D", loop_vars(ffunc, "C")[0])
    # expsum reads exp[i, k2] for all k2; under exp's j loop only one element exists.
    with pytest.raises(ScheduleError, match="outside the region"):
        reverse_compute_at(sfunc, "expsum", loop_vars(sfunc, "exp")[1])


# ---------------------------------------------------------------------------------------------
# compute_inline / reverse_compute_inline
# ---------------------------------------------------------------------------------------------

def test_compute_inline_conv_pad():
    func, inputs, refs = conv2d()
    out = compute_inline(func, "pad")
    assert [loc.node.block.name for loc in tree.all_blocks(out)] == ["conv"]
    assert out.body.block.alloc_buffers == ()
    conv = tree.find_block(out, "conv").node.block
    assert "pad" not in {r.buffer.name for r in conv.reads}
    assert "data" in {r.buffer.name for r in conv.reads}
    check(out, inputs, refs)


def test_compute_inline_softmax_exp():
    func, inputs, refs = softmax()
    out = compute_inline(func, "exp")
    check(out, inputs, refs)


def test_compute_inline_errors():
    func, _, _ = softmax()
    with pytest.raises(ScheduleError, match="not a complete block"):
        compute_inline(func, "maxelem")          # a reduction
    with pytest.raises(ScheduleError, match="function parameter"):
        compute_inline(func, "norm")             # writes the output


def test_reverse_compute_inline_relu():
    func, inputs, refs = elementwise_chain()
    out = reverse_compute_inline(func, "C")
    assert [loc.node.block.name for loc in tree.all_blocks(out)] == ["B"]
    check(out, inputs, refs)


def test_reverse_compute_inline_after_cache_write():
    func, inputs, refs = matmul(relu=True)
    func, wb = cache_write(func, "C", 0, "local")
    out = reverse_compute_inline(func, "D")
    assert wb in [loc.node.block.name for loc in tree.all_blocks(out)]
    check(out, inputs, refs)


def test_reverse_compute_inline_errors():
    func, _, _ = matmul(relu=True)
    with pytest.raises(ScheduleError, match="producer block C is not a complete block"):
        reverse_compute_inline(func, "D")         # into a reduction
    lfunc, _, _ = layer_norm()
    with pytest.raises(ScheduleError, match="exactly one producer"):
        reverse_compute_inline(lfunc, "ln")       # two producers
    ffunc, _, _ = fan_out()
    with pytest.raises(ScheduleError, match="other consumers"):
        reverse_compute_inline(ffunc, "C")        # B is also read by D
    sfunc, _, _ = softmax()
    with pytest.raises(ScheduleError, match="consumer block expsum is not a complete block"):
        reverse_compute_inline(sfunc, "expsum")


def test_primitives_do_not_mutate_input():
    func, inputs, refs = conv2d()
    before = str(func)
    compute_inline(func, "pad")
    compute_at(func, "pad", loop_vars(func, "conv")[1])
    assert str(func) == before
    check(func, inputs, refs, llvm=False)
