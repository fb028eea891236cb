"""Runtime index checks: an index read from data is checked against the buffer it indexes.

Each schedule below (plain, vectorized, parallel, both, and a scatter) runs a gather or a
scatter with in-range indices (the result must match numpy) and with one bad index (the call
must raise KernelIndexError naming the buffer, the axis, the index and the extent).
"""
from __future__ import annotations

import numpy as np
import pytest

from autotune.runtime.build import build
from schedules import Schedule
from tensor_ir import KernelIndexError, te
from tensor_ir.buffer import decl_buffer
from tensor_ir.expr import BufferLoad, Var, cast, const
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import BufferStore, For
from tensor_ir.codegen.checks import index_bounds, index_checks


def gather_func(rows=10, width=64, n=6):
    table = te.placeholder((rows, width), "float32", name="table")
    ids = te.placeholder((n,), "int64", name="ids")
    out = te.compute((n, width), lambda i, j: table[ids[i], j] * 2.0, name="out")
    return te.create_prim_func([table, ids, out], name="lookup")


def plain(sch):
    return sch


def vectorized(sch):
    i, j = sch.get_loops(sch.get_block("out"))
    _, ji = sch.split(j, [None, 16])
    sch.vectorize(ji)
    return sch


def parallel(sch):
    sch.parallel(sch.get_loops(sch.get_block("out"))[0])
    return sch


def parallel_vectorized(sch):
    vectorized(sch)
    parallel(sch)
    return sch


def lanes_of_indices(sch):
    # The index loop innermost and vectorized: each lane loads its own index (a gather).
    i, j = sch.get_loops(sch.get_block("out"))
    sch.reorder(j, i)
    sch.vectorize(i)
    return sch


SCHEDULES = [plain, vectorized, parallel, parallel_vectorized, lanes_of_indices]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda f: f.__name__)
def test_a_gather_matches_numpy_and_refuses_a_bad_index(schedule):
    func = gather_func()
    kernel = build(schedule(Schedule(func)).mod)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((10, 64)).astype("float32")
    ids = np.array([0, 9, 3, 3, 7, 1])
    out = np.zeros((6, 64), "float32")
    kernel(table, ids, out)
    np.testing.assert_array_equal(out, table[ids] * 2.0)

    for bad in (10, -1, 1 << 40):
        wrong = ids.copy()
        wrong[4] = bad
        with pytest.raises(KernelIndexError) as info:
            kernel(table, wrong, out)
        err = info.value
        assert (err.buffer, err.axis, err.index, err.extent) == ("table", 0, bad, 10)
        assert isinstance(err, IndexError)
        assert "index" in str(err) and "table" in str(err)
    # A good call after a failed one runs normally: the status is per call.
    out[...] = 0
    kernel(table, ids, out)
    np.testing.assert_array_equal(out, table[ids] * 2.0)


def test_a_scatter_store_is_checked():
    # dst[where[i]] = src[i]: te defines stages over their output, so the scatter is built
    # as IR directly.
    n, size = 8, 5
    src = decl_buffer((n,), "float32", "src")
    where = decl_buffer((n,), "int32", "where")
    dst = decl_buffer((size,), "float32", "dst")
    i = Var("i", "int64")
    store = BufferStore(dst, BufferLoad(src, (i,)), (cast("int64", BufferLoad(where, (i,))),))
    func = PrimFunc((src, where, dst), For(i, const(0), const(n), "serial", store),
                    name="scatter", attrs=(("lowered", True),))
    kernel = build(func)
    values = np.arange(n, dtype="float32")
    out = np.zeros(size, "float32")
    kernel(values, np.array([0, 1, 2, 3, 4, 4, 3, 2], "int32"), out)
    np.testing.assert_array_equal(out, [0, 1, 7, 6, 5])
    with pytest.raises(KernelIndexError) as info:
        kernel(values, np.array([0, 1, 2, 3, 4, 5, 3, 2], "int32"), out)
    assert (info.value.buffer, info.value.index, info.value.extent) == ("dst", 5, 5)


def test_functions_without_data_indices_have_no_checks():
    a = te.placeholder((8,), "float32", name="a")
    b = te.compute((8,), lambda i: a[i] + 1.0, name="b")
    func = te.create_prim_func([a, b])
    assert index_checks(func) == []
    kernel = build(func)
    assert kernel.checks == ()
    assert "__fault" not in kernel.get_source("ll-raw")


def test_index_bounds_name_the_index_inputs():
    func = gather_func(rows=10)
    bounds = {buf.name: bound for buf, bound in index_bounds(func).items()}
    assert bounds == {"ids": 10}


def test_an_index_from_data_is_not_silently_zeroed():
    # Before the runtime checks, an index that could not be proven in range read zero (a
    # guard added at te.create_prim_func); now the function keeps the plain load.
    from tensor_ir.expr import Select
    from tensor_ir.visitor import collect

    func = gather_func()
    assert not collect(func.body, Select)
