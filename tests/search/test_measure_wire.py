"""The measurement contract's wire form: MeasureInput.to_json / from_json is what builders and
runners send their workers, and ``built`` pairs a batch's build with its clean-up."""
from __future__ import annotations

import json
import os

import pytest

from search.measure import BuildResult, MeasureInput, built
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
