"""The measurement contract's wire form: MeasureInput.to_json / from_json is what builders and
runners send their workers, and ``built`` pairs a batch's build with its clean-up."""
from __future__ import annotations

import json
import os

import pytest

from search.measure import BuildResult, MeasureContext, MeasureInput, built
from tensor_ir import ops
from tensor_ir.target import Target


def _input(**kw) -> MeasureInput:
    func = ops.matmul(16, 16, 16)
    return MeasureInput(func, "llvm -num-cores=2", func.structural_hash(), reference=func,
                        **kw)


def test_a_measure_input_round_trips_through_json():
    inp = _input(weight_params=(1,), cold_weights=True, fresh_inputs=True, cold_bytes=4096)
    data = json.loads(json.dumps(inp.to_json()))  # JSON-able, as a pipe or Ray sends it
    back = MeasureInput.from_json(data)
    assert back.func.structural_hash() == inp.func.structural_hash()
    assert back.reference.structural_hash() == inp.reference.structural_hash()
    assert str(back.target) == str(inp.target) == data["target"]
    assert (back.workload_key, back.weight_params, back.cold_weights, back.fresh_inputs,
            back.cold_bytes) == (inp.workload_key, (1,), True, True, 4096)


def test_the_target_travels_resolved_and_the_reference_can_stay_behind():
    data = _input().to_json(reference=False)
    # Resolved here: a worker elsewhere must not read plain "llvm" as its own CPU.
    assert data["target"] == str(Target("llvm -num-cores=2")) != "llvm -num-cores=2"
    assert data["reference"] is None
    assert MeasureInput.from_json(data).reference is None
    held = ops.matmul(16, 16, 16)
    assert MeasureInput.from_json(data, reference=held).reference is held


def test_a_measure_context_fills_each_input_and_checks_itself():
    context = MeasureContext(weight_params=[2, 1, 1], cold_weights=True, cold_bytes=4096,
                             fresh_inputs=True)
    assert context.weight_params == (1, 2)  # one sorted tuple, whatever was given
    func = ops.matmul(16, 16, 16)
    inp = context.measure_input(func, "llvm", "key", reference=func)
    assert (inp.weight_params, inp.cold_weights, inp.cold_bytes, inp.fresh_inputs) == \
        ((1, 2), True, 4096, True)
    # The wire form is MeasureInput's own: the context leaves no field of its own in it.
    assert set(inp.to_json()) == set(_input().to_json())
    alone = MeasureContext().measure_input(func, "llvm", "key")
    assert (alone.weight_params, alone.cold_weights, alone.cold_bytes, alone.fresh_inputs,
            alone.reference) == ((), False, 0, False, None)
    for bad, error in (({"weight_params": 3}, TypeError), ({"weight_params": (-1,)}, ValueError),
                       ({"weight_params": ("a",)}, ValueError),
                       ({"cold_weights": 1}, TypeError), ({"fresh_inputs": "yes"}, TypeError),
                       ({"cold_bytes": -1}, ValueError), ({"cold_bytes": True}, ValueError)):
        with pytest.raises(error, match="MeasureContext"):
            MeasureContext(**bad)
    # An index is checked against the function when an input is made from it.
    with pytest.raises(ValueError, match="weight_params"):
        MeasureContext(weight_params=(3,)).measure_input(func, "llvm", "key")


def test_a_form_without_its_fields_is_a_value_error():
    data = _input().to_json()
    del data["workload_key"]
    with pytest.raises(ValueError, match="workload_key"):
        MeasureInput.from_json(data)


class _FileBuilder:
    def __init__(self, folder):
        self.folder = folder

    def build(self, inputs):
        out = []
        for i, _ in enumerate(inputs):
            path = os.path.join(self.folder, f"c{i}.o")
            with open(path, "wb") as f:
                f.write(b"x")
            out.append(BuildResult(path, None, 0.0))
        out.append(BuildResult(None, "a build that failed has no file", 0.0))
        return out


def test_built_removes_the_artifacts_however_the_block_ends(tmp_path):
    builder = _FileBuilder(str(tmp_path))
    with built(builder, [_input(), _input()]) as builds:
        assert all(os.path.exists(b.artifact_path) for b in builds[:2])
    assert not os.listdir(tmp_path)
    with pytest.raises(RuntimeError):
        with built(builder, [_input()]):
            raise RuntimeError("the run failed")
    assert not os.listdir(tmp_path)
    with built(builder, [_input()], keep_artifacts=True) as builds:
        pass
    assert os.path.exists(builds[0].artifact_path)
