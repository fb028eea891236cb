"""Program features: fixed length, finite, batched == single, deterministic, and sensitive to
the schedule the way a cost model needs (vectorisation, tile sizes, strides, guards)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.matmul_schedule import schedule_matmul
from cost_models import features as F
from cost_models.features import FeatureError, extract
from schedules import Schedule
from tensor_ir import ops
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower

from ..tensor_ir.test_codegen_prefetch import tiled_matmul


def value(vec: np.ndarray, name: str) -> float:
    return float(vec[F.FEATURE_NAMES.index(name)])


def raw_rows(func: PrimFunc) -> list[dict]:
    """Un-logged per-store features as dicts (name -> value)."""
    rows, _ = F.store_features(F.analyze(func))
    return [dict(zip(F.STORE_FEATURE_NAMES, row)) for row in rows]


def buffer_slots(row: dict) -> list[dict]:
    return [{k: row[f"buf{b}_{k}"] for k in F.BUFFER_FEATURES}
            for b in range(F.TOP_BUFFERS) if row[f"buf{b}_present"]]


def log2p(x: float):
    """The logged value of a raw feature ``x``, compared at float32 precision."""
    return pytest.approx(math.log2(1.0 + x), rel=1e-6)


def test_layout_names_are_unique_and_sized():
    assert len(F.FEATURE_NAMES) == F.NUM_FEATURES == len(set(F.FEATURE_NAMES))
    assert F.feature_names() == F.FEATURE_NAMES
    assert F.NUM_FEATURES == 3 * F.NUM_STORE_FEATURES + len(F.GLOBAL_FEATURES)


def test_every_registry_op_has_finite_fixed_length_features():
    funcs = [spec.func(config) for spec, config in ops.cases()]
    assert len(funcs) >= 60
    batch = extract(funcs)
    assert batch.shape == (len(funcs), F.NUM_FEATURES) and batch.dtype == np.float32
    assert np.isfinite(batch).all() and (batch >= 0).all()
    # Every operator stores something and does some work.
    assert (batch[:, F.FEATURE_NAMES.index("global.num_stores")] > 0).all()
    # The batched path (one numeric pass over all programs) equals one-at-a-time extraction.
    for func, row in zip(funcs[::7], batch[::7]):
        np.testing.assert_allclose(F.features(func), row, rtol=1e-6)


def scheduled_variants():
    """Scheduled programs exercising the primitives whose output the features must read."""
    out = {}
    func = ops.matmul(64, 48, 32)

    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, k, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)
    sch.unroll(ii)
    sch.annotate(k, "pragma_auto_unroll_max_step", 64)
    out["split_parallel_vectorize_unroll"] = sch.func

    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    write_back = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(write_back, i)
    out["cache_write"] = sch.func

    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    read = sch.cache_read(c, 0, "local")
    sch.compute_at(read, i)
    out["cache_read_compute_at"] = sch.func

    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, k)
    out["decompose_reduction"] = sch.func

    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    _, ki = sch.split(k, [None, 4])
    sch.rfactor(ki, 0)
    out["rfactor"] = sch.func

    out["packed_register_blocked"] = schedule_matmul(ops.matmul(64, 64, 64)).func
    # A non-perfect split leaves a predicate in the lowered program.
    sch = Schedule(ops.matmul(30, 20, 10))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(j, [None, 8])
    out["imperfect_split"] = sch.func
    return out


@pytest.mark.parametrize("name", sorted(scheduled_variants()))
def test_scheduled_variants_are_finite_and_differ_from_default(name):
    func = scheduled_variants()[name]
    vec = F.features(func)
    assert vec.shape == (F.NUM_FEATURES,) and np.isfinite(vec).all()
    default = F.features(ops.matmul(64, 48, 32))
    assert not np.array_equal(vec, default)
    # Lowered and scheduled inputs give the same row.
    np.testing.assert_array_equal(F.features(lower(func)), vec)


def test_loop_kinds_and_pragma_are_read():
    vec = F.features(scheduled_variants()["split_parallel_vectorize_unroll"])
    assert value(vec, "top.innermost_vectorized") == 1.0
    assert value(vec, "top.vectorized_lanes") == log2p(16)
    assert value(vec, "top.unrolled_prod") == log2p(8)
    assert value(vec, "top.parallel_prod") == log2p(64 // 8)
    assert value(vec, "top.auto_unroll_max_step") == log2p(64)
    # Under the pragma (at k, extent 32) the innermost 8 x 16 iterations exceed 64: only the
    # vector loop (16 iterations) fits the unroll budget.
    assert value(vec, "top.auto_unroll_covered") == log2p(16)
    assert value(vec, "global.outer_parallel_max") == log2p(8)


def test_vectorizing_the_inner_loop_changes_vector_features():
    def build(vectorize: bool):
        sch = Schedule(ops.matmul(64, 64, 64))
        i, j, k = sch.get_loops(sch.get_block("C"))
        jo, ji = sch.split(j, [None, 16])
        sch.reorder(i, jo, k, ji)
        if vectorize:
            sch.vectorize(ji)
        return F.features(sch.func)

    plain, vectorized = build(False), build(True)
    assert value(plain, "top.innermost_vectorized") == 0.0
    assert value(plain, "top.innermost_serial") == 1.0
    assert value(vectorized, "top.innermost_vectorized") == 1.0
    assert value(vectorized, "top.vectorized_num") == 1.0
    assert value(vectorized, "top.vectorized_lanes") == log2p(16)
    changed = {n for n, a, b in zip(F.FEATURE_NAMES, plain, vectorized) if a != b}
    assert changed <= {n for n in F.FEATURE_NAMES if "vectoriz" in n or "innermost_serial" in n}


@pytest.mark.parametrize("tile", [2, 8, 32])
def test_a_larger_tile_increases_reuse(tile):
    """With i split by ``tile`` and i_inner innermost, B[k, j] is reused across i_inner:
    reuse count == tile and the reused footprint stays one element."""
    sch = Schedule(ops.matmul(64, 64, 64))
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [None, tile])
    sch.reorder(io, j, k, ii)
    update = max(raw_rows(sch.func), key=lambda r: r["flops"])
    reuse = {(s["reuse_ct"], s["reuse_dis_iter"]) for s in buffer_slots(update)
             if s["is_read"] and not s["is_write"] and s["reuse_loop"]}
    assert (float(tile), 1.0) in reuse
    # A's element A[i, k] is reused across j (distance: the k and i_inner loops).
    assert (64.0, float(64 * tile)) in reuse


def test_strides_contiguity_and_transposes():
    def update_slots(func):
        row = max(raw_rows(func), key=lambda r: r["flops"])
        return {(s["is_read"], s["is_write"], s["stride_innermost"]) for s in buffer_slots(row)}

    # C[i, j] += A[i, k] * B[k, j] with k innermost: C broadcast (0), A contiguous (1),
    # B strided by N.
    slots = update_slots(ops.matmul(8, 12, 16))
    assert slots == {(1.0, 1.0, 0.0), (1.0, 0.0, 1.0), (1.0, 0.0, 12.0)}
    # A transposed is read as A[k, i]: stride M along k.
    slots = update_slots(ops.matmul(8, 12, 16, transpose_a=True))
    assert (1.0, 0.0, 8.0) in slots and (1.0, 0.0, 12.0) in slots


def test_reduction_init_guard_counts_executions_once_per_output():
    rows = raw_rows(ops.matmul(8, 12, 16))
    init = min(rows, key=lambda r: r["executions"])
    update = max(rows, key=lambda r: r["executions"])
    assert init["executions"] == 8 * 12 and init["executions_unguarded"] == 8 * 12 * 16
    assert update["executions"] == 8 * 12 * 16
    assert update["op_float_fma"] == 8 * 12 * 16 and update["accumulate"] == 1.0
    assert init["guard_evals"] > 0


def test_footprints_and_lines_are_analytic():
    """An elementwise add over 64 x 100 floats: every element once, 400-byte rows."""
    rows = raw_rows(ops.add((64, 100), (64, 100)))
    (row,) = rows
    for slot in buffer_slots(row):
        assert slot["unique_bytes"] == 64 * 100 * 4
        assert slot["unique_lines"] == 64 * math.ceil(400 / 64)
        assert slot["contiguous_inner"] == 1.0


def test_allocations_are_counted():
    vec = F.features(scheduled_variants()["packed_register_blocked"])
    assert value(vec, "global.alloc_num") == log2p(2)
    assert value(vec, "global.alloc_bytes_local") > 0
    assert value(vec, "global.alloc_bytes_global") == log2p(64 * 64 * 4)


def test_deterministic_across_calls_and_json_round_trip():
    funcs = list(scheduled_variants().values())
    first = extract(funcs)
    np.testing.assert_array_equal(first, extract(funcs))
    again = extract([PrimFunc.from_json(f.to_json()) for f in funcs])
    np.testing.assert_array_equal(first, again)


def test_bad_candidates_raise_feature_error_with_position():
    good = ops.matmul(4, 4, 4)
    with pytest.raises(FeatureError, match="candidate 1"):
        extract([good, "not a function"])
    assert extract([]).shape == (0, F.NUM_FEATURES)


def test_concat_matches_single_analyses():
    funcs = [ops.matmul(8, 8, 8), ops.softmax((4, 16)), ops.conv2d_nchw(1, 2, 6, 6, 3, 3, 3)]
    analyses = [F.analyze(f) for f in funcs]
    joint = F.program_features(F.concat(analyses))
    for an, row in zip(analyses, joint):
        np.testing.assert_allclose(F.program_features(an)[0], row, rtol=1e-12)


def test_feature_speed_benchmark_prints_json():
    import io
    import json
    from contextlib import redirect_stdout

    from benchmarks import feature_speed

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert feature_speed.main(["--batch", "2", "--rounds", "1"]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["num_features"] == F.NUM_FEATURES
    assert {r["workload"] for r in doc["results"]} == {
        "matmul_1024_tiled", "conv2d_56x56", "conv2d_56x56_tiled"}
    assert all(r["ms_per_candidate"] > 0 for r in doc["results"])


def _annotated_matmul(key: str, outer=None, inner=None) -> PrimFunc:
    """The prefetch codegen test's 8x32-tiled matmul; ``outer`` / ``inner`` annotate its k
    block loop (4 iterations) / the loop inside it (24) with ``key``."""
    sch = Schedule(tiled_matmul())
    k_outer, k_inner = sch.get_loops(sch.get_block("C"))[2:4]
    for loop, value in ((k_outer, outer), (k_inner, inner)):
        if value is not None:
            sch.annotate(loop, key, value)
    return sch.func


def _prefetched_matmul(outer=None, inner=None) -> PrimFunc:
    return _annotated_matmul("pragma_prefetch_bytes", outer, inner)


def test_prefetch_distance_is_a_feature_of_the_stores_under_it():
    assert F.FEATURE_VERSION >= 4 and "prefetch_bytes" in F.LOOP_FEATURES
    funcs = [_prefetched_matmul(), _prefetched_matmul(inner=1024), _prefetched_matmul(2048),
             _prefetched_matmul(2048, 0), _prefetched_matmul(512, 1024)]
    # The update store sits under both k loops; the nearest annotation wins, 0 switches off.
    got = [max(r["prefetch_bytes"] for r in raw_rows(f)) for f in funcs]
    assert got == [0, 1024, 2048, 0, 1024]
    rows = extract(funcs)
    assert value(rows[1], "max.prefetch_bytes") == log2p(1024)
    # Nothing else tells the programs apart: the loops and accesses are the same.
    differ = {F.FEATURE_NAMES[c] for c in np.flatnonzero((rows != rows[0]).any(axis=0))}
    assert differ and all(n.endswith("prefetch_bytes") or n.endswith("annotated_loops")
                          for n in differ), differ


def _copied_matmul(outer=None, inner=None) -> PrimFunc:
    return _annotated_matmul("pragma_unroll_by", outer, inner)


def test_copies_per_iteration_are_a_feature_of_the_stores_under_them():
    assert F.FEATURE_VERSION == 5 and F.LOOP_FEATURES[-1] == "unroll_by"
    funcs = [_copied_matmul(), _copied_matmul(inner=8), _copied_matmul(8),
             _copied_matmul(8, 1), _copied_matmul(2, 4)]
    # The nearest annotation wins, at most the loop's extent; 1 switches copies off.
    got = [max(r["unroll_by"] for r in raw_rows(f)) for f in funcs]
    assert got == [1, 8, 4, 1, 4]
    rows = extract(funcs)
    assert value(rows[1], "max.unroll_by") == log2p(8)
    differ = {F.FEATURE_NAMES[c] for c in np.flatnonzero((rows != rows[0]).any(axis=0))}
    assert differ and all(n.endswith("unroll_by") or n.endswith("annotated_loops")
                          for n in differ), differ
