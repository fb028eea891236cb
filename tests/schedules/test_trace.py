"""Traces: JSON form, replay, decisions, printing as Python."""
from __future__ import annotations

import json

import pytest

from schedules import Instruction, Schedule, ScheduleError, Trace
from schedules.instructions import get_kind, kinds
from tensor_ir.func import structural_equal

from .workloads import check_interp, matmul, softmax


def sampled_schedule(seed=0):
    func, ref = matmul(8, 12, 6)
    sch = Schedule(func, seed=seed)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=4)
    i0, i1 = sch.split(i, ti)
    j0, j1 = sch.split(j, [None, 5])
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    step = sch.sample_categorical([0, 16, 64], [0.5, 0.25, 0.25])
    sch.annotate(c, "pragma_auto_unroll_max_step", step)
    return func, ref, sch


def test_json_is_stable_and_names_handles():
    func, _, sch = sampled_schedule()
    text = json.dumps(sch.trace.to_json(), sort_keys=True)
    _, _, again = sampled_schedule()
    assert json.dumps(again.trace.to_json(), sort_keys=True) == text
    data = sch.trace.to_json()
    split = [d for d in data["instructions"] if d["kind"] == "split"][0]
    assert split["inputs"][0] == "l1" and split["outputs"] == ["l6", "l7"]
    assert split["inputs"][1:] == ["v4", "v5"]          # sampled factors are handles
    assert "0x" not in text and "object at" not in text


def test_str_is_python_that_replays():
    func, _, sch = sampled_schedule()
    text = str(sch.trace)
    lines = text.splitlines()
    assert lines[0] == 'b0 = sch.get_block("C")'
    assert lines[1] == "l1, l2, l3 = sch.get_loops(b0)"
    assert lines[2].startswith("v4, v5 = sch.sample_perfect_tile(l1, n=2, "
                               "max_innermost_factor=4, decision=[")
    assert "l8, l9 = sch.split(l2, [None, 5])" in lines
    assert 'sch.annotate(b0, "pragma_auto_unroll_max_step", v10)' in lines
    replay = Schedule(func)
    exec(text, {"sch": replay})
    assert structural_equal(replay.func, sch.func)
    assert replay.trace == sch.trace


def test_from_json_apply_and_text_round_trip():
    func, ref, sch = sampled_schedule()
    for data in (sch.trace.to_json(), sch.trace.to_text(), json.dumps(sch.trace.to_json())):
        replay = Trace.from_json(data).apply(func)
        assert structural_equal(replay.func, sch.func)
    check_interp(sch.func, ref)


def test_with_decision_changes_program_on_replay():
    func, ref, sch = sampled_schedule()
    trace = sch.trace
    index = next(k for k, inst in enumerate(trace) if inst.kind == "sample_perfect_tile")
    old = trace[index].decision
    new = [8, 1] if list(old) != [8, 1] else [2, 4]
    mutated = trace.with_decision(index, new)
    assert trace[index].decision == old               # the original is not modified
    replay = mutated.apply(func)
    i0 = replay.get_loops(replay.get_block("C"))[0]
    assert replay.get(i0).extent.value == new[0]
    check_interp(replay.func, ref)
    cat = next(k for k, inst in enumerate(trace) if inst.kind == "sample_categorical")
    replay = trace.with_decision(cat, 2).apply(func)
    assert replay.get(replay.get_block("C")).annotation("pragma_auto_unroll_max_step") == 64
    with pytest.raises(ScheduleError, match="not a sampling"):
        trace.with_decision(0, 1)
    with pytest.raises(ScheduleError, match="no index"):
        trace.with_decision(len(trace), 1)


def test_missing_decision_is_sampled_and_seeded():
    func, _, sch = sampled_schedule()
    sketch = sch.trace.without_decisions()
    assert sketch.decisions == {}
    a = sketch.apply(func, seed=7)
    b = sketch.apply(func, seed=7)
    assert a.trace == b.trace and structural_equal(a.func, b.func)
    assert set(a.trace.decisions) == set(sch.trace.decisions)
    seen = {json.dumps(sketch.apply(func, seed=s).trace.to_json()) for s in range(12)}
    assert len(seen) > 1


def test_invalid_decision_on_replay_raises():
    func, _, sch = sampled_schedule()
    index = sch.trace.sampling_indices()[0]
    with pytest.raises(ScheduleError, match="multiplies to"):
        sch.trace.with_decision(index, [3, 3]).apply(func)
    with pytest.raises(ScheduleError, match="exceeds max_innermost_factor"):
        sch.trace.with_decision(index, [1, 8]).apply(func)
    cat = next(k for k, inst in enumerate(sch.trace) if inst.kind == "sample_categorical")
    with pytest.raises(ScheduleError, match="not an index"):
        sch.trace.with_decision(cat, 3).apply(func)


def test_malformed_json():
    with pytest.raises(ScheduleError, match="format_version"):
        Trace.from_json({"format_version": 99, "instructions": []})
    with pytest.raises(ScheduleError, match="unknown instruction kind"):
        Trace.from_json({"format_version": 1, "instructions": [{"kind": "nope"}]})
    with pytest.raises(ScheduleError, match="does not parse"):
        Trace.from_json("{")
    bad = Trace([Instruction("split", ["l9", None, 2], {}, ["l1", "l2"])])
    with pytest.raises(ScheduleError, match="before it is defined"):
        bad.apply(matmul()[0])


def test_failed_primitive_is_not_recorded():
    func, _ = softmax()
    sch = Schedule(func)
    b = sch.get_block("maxelem")
    i, k = sch.get_loops(b)
    before = sch.trace
    with pytest.raises(ScheduleError):
        sch.parallel(k)
    assert sch.trace == before and len(sch.trace) == 2


def test_registry_covers_schedule_methods():
    for name in kinds():
        kind = get_kind(name)
        assert hasattr(Schedule, kind.method or kind.name), name
    for name in ("split", "fuse", "reorder", "parallel", "vectorize", "unroll", "bind",
                 "annotate", "unannotate", "sample_perfect_tile", "sample_categorical",
                 "sample_compute_location", "compute_at", "compute_inline"):
        assert name in kinds()


def _block_schedule_cases():
    from .workloads import matmul_relu

    def caches(sch):
        c = sch.get_block("C")
        sch.cache_read(c, 0, "local")
        sch.cache_write(c, 0, "local")
        sch.transform_layout(c, 0, lambda a, b: (b // 4, a, b % 4))

    def rfactor(sch):
        c = sch.get_block("C")
        i, j, k = sch.get_loops(c)
        ko, ki = sch.split(k, [2, None])
        sch.rfactor(ko, 0)

    def decompose_and_pack(sch):
        c = sch.get_block("C")
        i, j, k = sch.get_loops(c)
        sch.decompose_reduction(c, k)
        sch.pack_layout(c, "B", lambda kk, n: (n // 4, kk, n % 4))

    def compute_at_inline(sch):
        c, d = sch.get_block("C"), sch.get_block("D")
        i, j = sch.get_loops(d)
        sch.compute_at(c, j)

    return [(matmul_relu, caches), (matmul, rfactor), (matmul, decompose_and_pack),
            (matmul_relu, compute_at_inline)]


@pytest.mark.parametrize("case", range(4))
def test_block_primitives_record_and_replay(case):
    make, schedule = _block_schedule_cases()[case]
    func, ref = make()
    sch = Schedule(func)
    schedule(sch)
    check_interp(sch.func, ref)
    replay = Trace.from_json(sch.trace.to_text()).apply(func)
    assert structural_equal(replay.func, sch.func)
    # The printed trace is Python that rebuilds the same program.
    from tensor_ir import te

    again = Schedule(func)
    exec(str(sch.trace), {"sch": again, "te": te})
    assert structural_equal(again.func, sch.func)
