"""Hardening of schedule primitives: transform_layout refuses maps that are not injective,
typed errors for bad annotation values, and the public storage-scope check."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.errors import ScheduleError
from schedules.primitives import cache
from schedules.primitives.layout import transform_layout
from schedules.schedule import Schedule
from tensor_ir import interp, te


def _two_stage(m: int, n: int):
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


# ---------------------------------------------------------------------------------------------
# 4. transform_layout: injective maps only
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("index_map", [
    lambda i, j: (i % 2, j),
    lambda i, j: (i + j,),
    lambda i, j: (j // 2, i),
    lambda i, j: (te.min(i, 3), j),
])
def test_non_injective_map_is_refused(index_map):
    func = _two_stage(8, 16)
    sch = Schedule(func)
    before = sch.func
    with pytest.raises(ScheduleError, match="transform_layout: index_map is not injective.*B"):
        sch.transform_layout(sch.get_block("B"), 0, index_map)
    assert sch.func is before


@pytest.mark.parametrize("index_map", [
    lambda i, j: (j // 4, i, j % 4),
    lambda i, j: (j, i),
    lambda i, j: (i * 16 + j,),
    lambda i, j: (i + j, j),
])
def test_injective_map_gives_numpy_answer(index_map):
    func = _two_stage(8, 16)
    out = transform_layout(func, "B", 0, index_map)
    a = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
    c = np.zeros((8, 16), "float32")
    interp.run(out, a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_large_domain_needs_a_proof(monkeypatch):
    from schedules.primitives import layout

    monkeypatch.setattr(layout, "_EXACT_CHECK_POINTS", 16)  # no point-by-point check
    func = _two_stage(8, 16)
    transform_layout(func, "B", 0, lambda i, j: (i + j, j))             # affine, full rank
    transform_layout(func, "B", 0, lambda i, j: (j // 4, i, j % 4))     # a blocking
    with pytest.raises(ScheduleError, match="not injective|cannot prove"):
        transform_layout(func, "B", 0, lambda i, j: (i % 2, j))
    with pytest.raises(ScheduleError, match="cannot prove"):
        transform_layout(func, "B", 0, lambda i, j: (i + j,))


def test_check_scope_is_public():
    cache.check_scope("global", "cache_read")
    with pytest.raises(ScheduleError, match="cache_read: unknown storage scope 'nowhere'"):
        cache.check_scope("nowhere", "cache_read")


# ---------------------------------------------------------------------------------------------
# 13. typed errors naming the argument; read-only inputs may alias
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["lots", -1, 2.5, True, None])
def test_unroll_step_annotation_must_be_a_count(value):
    sch = Schedule(_two_stage(4, 4))
    loop = sch.get_loops(sch.get_block("B"))[0]
    with pytest.raises(ScheduleError, match="pragma_auto_unroll_max_step.*non-negative int"):
        sch.annotate(loop, "pragma_auto_unroll_max_step", value)
    sch.annotate(loop, "pragma_auto_unroll_max_step", 16)


def test_same_array_for_two_read_only_inputs():
    import autotune
    from tensor_ir.errors import BuildError

    A = te.placeholder((8,), name="A")
    B = te.placeholder((8,), name="B")
    C = te.compute((8,), lambda i: A[i] * B[i], name="C")
    kernel = autotune.build(te.create_prim_func([A, B, C]), target="llvm")
    a = np.arange(8, dtype="float32")
    c = np.zeros(8, "float32")
    kernel(a, a, c)
    np.testing.assert_array_equal(c, a * a)
    with pytest.raises(BuildError, match="overlap.*written"):
        kernel(a, c, c)  # an output may not share memory with anything
