"""Features of tensorized programs: a TensorIntrinCall counts as the arithmetic its intrinsic
describes, plus the tile's size and the number of calls."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import features as F
from tensor_ir import intrinsics
from tensor_ir.intrinsics import ReferenceImpl
from tests.schedules.test_tensorize import int8_matmul, schedule_dot

VNNI = "dot_16x4_u8i8i32_vnni"
INTRIN_COLUMNS = {f"{agg}.tensor_intrin_{name}" for agg in F.AGGREGATIONS
                  for name in ("tile", "calls")}


def _column(rows: np.ndarray, name: str) -> np.ndarray:
    return rows[:, F.FEATURE_NAMES.index(name)]


def _raw(rows: np.ndarray, name: str) -> np.ndarray:
    """Undo the log2(1 + x) of a summed column."""
    return np.exp2(_column(rows, name).astype(np.float64)) - 1.0


def test_layout_has_the_intrinsic_columns_under_version_3():
    assert F.FEATURE_VERSION >= 3  # the columns came in 3 and stay
    assert {"tensor_intrin_tile", "tensor_intrin_calls"} <= set(F.LOOP_FEATURES)
    assert INTRIN_COLUMNS <= set(F.FEATURE_NAMES)
    assert len(F.FEATURE_NAMES) == F.NUM_FEATURES


def test_tensorized_tile_counts_the_intrinsics_arithmetic():
    m, n, k = 32, 64, 64
    func = int8_matmul(m, n, k)
    tensorized, _ = schedule_dot(func, 16, VNNI)
    plain, _ = schedule_dot(func, 16, None)  # the same loops, not tensorized
    rows = F.extract([tensorized.func, plain.func], "llvm")
    assert rows.shape == (2, F.NUM_FEATURES) and np.isfinite(rows).all()
    # Two int32 casts per multiply-accumulate of the whole matmul, tensorized or not.
    np.testing.assert_allclose(_raw(rows, "sum.op_cast"), [2 * m * n * k] * 2, rtol=1e-4)
    # One call covers 16 x 4 iterations; m * n * k / 64 calls run.
    np.testing.assert_allclose(_raw(rows, "max.tensor_intrin_tile"), [64, 0], rtol=1e-4)
    np.testing.assert_allclose(_raw(rows, "sum.tensor_intrin_calls"), [m * n * k / 64, 0],
                               rtol=1e-4)
    # Everything else -- loops, footprints, strides -- is what the plain loops have.
    others = [i for i, name in enumerate(F.FEATURE_NAMES) if name not in INTRIN_COLUMNS]
    np.testing.assert_allclose(rows[0, others], rows[1, others], rtol=1e-6)


def test_batched_and_single_extraction_agree():
    func = int8_matmul(16, 32, 16)
    tensorized, _ = schedule_dot(func, 16, VNNI)
    batch = F.extract([func, tensorized.func], "llvm")
    np.testing.assert_array_equal(batch[1], F.features(tensorized.func, "llvm"))
    np.testing.assert_array_equal(batch[0], F.features(func, "llvm"))
    assert _column(batch, "sum.tensor_intrin_tile")[0] == 0


def test_a_tile_the_registry_no_longer_matches_is_a_feature_error():
    name = "test_features_ref_dot_16x4"
    intrinsics.register(name, intrinsics.dot_description(16, "uint8", "int8", name),
                        ReferenceImpl(), override=True)
    sch, _ = schedule_dot(int8_matmul(16, 16, 16), 16, name)
    # Re-registered with another tile: the program's call no longer fits the description.
    intrinsics.register(name, intrinsics.dot_description(8, "uint8", "int8", name),
                        ReferenceImpl(), override=True)
    with pytest.raises(F.FeatureError, match=f"cannot featurise the tile of {name}"):
        F.extract([sch.func], "llvm")
