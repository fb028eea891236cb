"""ONNX's operator conformance cases (``onnx.backend.test``) through the importer, build_model
and the executor, held to the lists of ``autotune.frontends.conformance``:

* no case is wrong (ran but mismatched) or crashes (an exception that is not a typed error);
* every refused case is explained: an out-of-scope operator, or a known failure;
* a known failure that starts passing fails the test, so that the list is kept true.

The default suite runs one case per operator of those expected to pass (the first by name)
and every listed refusal (most are refused while importing, before any build); the whole set
runs under the ``slow`` marker.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from autotune.frontends import conformance  # noqa: E402
from autotune.frontends.onnx import from_onnx  # noqa: E402
from autotune.graph import FrontendError  # noqa: E402
from autotune.graph.build import build_model  # noqa: E402


@functools.lru_cache(maxsize=1)
def _cases():
    """(in-scope cases, {name: why excluded}) of onnx's node test cases."""
    included, excluded = [], {}
    for case in conformance.collect_cases():
        why = conformance.case_scope(case)
        if why is None:
            included.append(case)
        else:
            excluded[case.name] = why
    return included, excluded


def _listed(case) -> bool:
    return conformance.explain_refusal(case) is not None


def _problems(cases, expect_pass: bool) -> list[str]:
    """What is wrong with the results of ``cases``: a wrong or crashed case, an unexplained
    refusal, a listed case that passes (when refusals are expected)."""
    problems = []
    for case in cases:
        result = conformance.run_case(case)
        if result.status in ("wrong", "crash"):
            problems.append(f"{case.name}: {result.status} {result.error_type or ''} "
                            f"{result.message}")
        elif result.status == "refused" and not _listed(case):
            problems.append(f"{case.name}: refused, on neither list: {result.error_type}: "
                            f"{result.message}")
        elif result.status == "refused" and expect_pass:
            problems.append(f"{case.name}: refused: {result.message}")
        elif result.status == "pass" and case.name in conformance.KNOWN_FAILURES:
            problems.append(f"{case.name}: passes; remove it from KNOWN_FAILURES")
    return problems


def test_representative_cases_pass():
    included, _ = _cases()
    expected = [c for c in included if not _listed(c)]
    sample = conformance.sample_names(expected, per_operator=1)
    chosen = [c for c in expected if c.name in sample]
    assert len(chosen) > 100  # one per operator
    problems = _problems(chosen, expect_pass=True)
    assert not problems, "\n".join(problems)


def test_listed_refusals_are_still_refused():
    included, _ = _cases()
    listed = [c for c in included if _listed(c)]
    problems = _problems(listed, expect_pass=False)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_every_case_passes_or_is_listed():
    included, _ = _cases()
    problems = _problems(included, expect_pass=False)
    assert not problems, "\n".join(problems)


def test_lists_name_real_cases():
    included, excluded = _cases()
    names = {c.name for c in included}
    stale = sorted(set(conformance.KNOWN_FAILURES) - names)
    assert not stale, f"KNOWN_FAILURES names cases that are not in-scope cases: {stale[:10]}"
    assert all(conformance.KNOWN_FAILURES.values()) and all(conformance.OUT_OF_SCOPE.values())
    assert len(included) + len(excluded) > 1500


def test_outputs_match_rules():
    match = conformance.outputs_match
    a = np.array([1.0, np.nan, 3.0], np.float32)
    assert match(a, a.copy()) is None
    assert match(a + 1e-6, a) is None  # within atol
    assert "differ" in match(a * 1.01, a)  # beyond rtol 1e-3
    assert "dtype" in match(a.astype(np.float64), a)
    assert "shape" in match(a[:2], a)
    ints = np.array([1, 2, 3], np.int64)
    assert match(ints, ints) is None
    assert "differ" in match(ints + np.array([0, 0, 1]), ints)  # integers exactly
    assert "differ" in match(np.array([np.nan], np.float32), np.array([1.0], np.float32))


def _reshape_model():
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3)),
         helper.make_tensor_value_info("shape", TensorProto.INT64, (2,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_inputs_fix_a_shape_input():
    proto = _reshape_model()
    with pytest.raises(FrontendError, match="must be a constant"):
        from_onnx(proto)
    model = from_onnx(proto, constant_inputs={"shape": np.array([3, 2], np.int64)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = build_model(model, warn=False).run({"x": x})["y"]
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    with pytest.raises(FrontendError, match="not inputs of the graph"):
        from_onnx(proto, constant_inputs={"nope": np.array([1])})
    with pytest.raises(FrontendError, match="int32 array"):
        from_onnx(proto, constant_inputs={"shape": np.array([3, 2], np.int32)})


def test_static_inputs_are_the_shape_positions():
    case = next(c for c in _cases()[0] if c.name == "test_reshape_reordered_all_dims")
    assert conformance.static_inputs(case) == ["shape"]
    assert conformance.case_operator(case) == "Reshape"
