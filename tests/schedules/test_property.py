"""Property test: random sequences of primitives with random arguments.

Every step either raises ScheduleError and leaves the schedule exactly as it was, or keeps the
program equal to numpy (checked through the interpreter at the end, at tiny sizes), and the
trace always replays from its JSON form to a structurally equal function.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis import event, given

from schedules import Schedule, ScheduleError, Trace
from tensor_ir.func import structural_equal

from .workloads import check_interp, conv2d, elementwise_chain, matmul

settings.register_profile("schedule-properties", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
PROFILE = settings.get_profile("schedule-properties")

WORKLOADS = {
    "matmul": lambda: matmul(4, 6, 3),
    "conv2d": lambda: conv2d(n=1, c=2, h=3, w=4, f=2, r=3, pad=1),
    "elementwise": lambda: elementwise_chain(4, 6),
}
_FUNCS = {name: make() for name, make in WORKLOADS.items()}

OPS = ("split", "split_sampled", "fuse", "reorder", "parallel", "vectorize", "unroll",
       "annotate", "compute_at", "bind")


def _blocks(sch):
    return [b for b in sch.get_child_blocks(sch.get_block("root"))]


def _step(sch: Schedule, data):
    """Draw one primitive; do its navigation (and sampling) now and return the primitive call
    itself, which is the part that may fail."""
    op = data.draw(st.sampled_from(OPS), label="op")
    action = _action(sch, data, op)
    action.op = op
    return action


def _action(sch: Schedule, data, op: str):
    blocks = _blocks(sch)
    block = blocks[data.draw(st.integers(0, len(blocks) - 1), label="block")]
    loops = sch.get_loops(block)
    if not loops:
        return lambda: None  # a block whose loops were all fused away into none cannot occur
    pick = lambda label: loops[data.draw(st.integers(0, len(loops) - 1), label=label)]  # noqa
    if op == "split":
        factors = data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=2),
                            label="factors")
        if data.draw(st.booleans(), label="infer one"):
            factors.insert(data.draw(st.integers(0, len(factors)), label="at"), None)
        loop = pick("loop")
        return lambda: sch.split(loop, factors)
    elif op == "split_sampled":
        loop = pick("loop")
        n = data.draw(st.integers(2, 3), label="n")
        tiles = sch.sample_perfect_tile(loop, n=n, max_innermost_factor=4)
        return lambda: sch.split(loop, tiles)
    elif op == "fuse":
        start = data.draw(st.integers(0, len(loops) - 1), label="start")
        count = data.draw(st.integers(1, 3), label="count")
        return lambda: sch.fuse(*loops[start:start + count])
    elif op == "reorder":
        chosen = data.draw(st.permutations(range(len(loops))), label="order")
        size = data.draw(st.integers(1, len(loops)), label="size")
        return lambda: sch.reorder(*[loops[k] for k in chosen[:size]])
    elif op in ("parallel", "vectorize", "unroll"):
        loop = pick("loop")
        return lambda: getattr(sch, op)(loop)
    elif op == "bind":
        axis = data.draw(st.sampled_from(["blockIdx.x", "threadIdx.x", "vthread"]), label="ax")
        loop = pick("loop")
        return lambda: sch.bind(loop, axis)
    elif op == "annotate":
        loop = pick("loop")
        value = data.draw(st.sampled_from([0, 16, 64]), label="value")
        return lambda: sch.annotate(loop, "pragma_auto_unroll_max_step", value)
    elif op == "compute_at":
        location = sch.sample_compute_location(block)
        return lambda: sch.compute_at(block, location)
    raise AssertionError(op)


def _run(name: str, data) -> None:
    func, ref = _FUNCS[name]
    sch = Schedule(func, seed=data.draw(st.integers(0, 2**16), label="seed"))
    steps = data.draw(st.integers(1, 6), label="steps")
    for _ in range(steps):
        action = _step(sch, data)
        before_func, before_trace = sch.func, sch.trace
        try:
            action()
            event(f"{getattr(action, 'op', 'step')} applied")
        except ScheduleError:
            event(f"{getattr(action, 'op', 'step')} rejected")
            assert sch.func is before_func
            assert sch.trace == before_trace
    check_interp(sch.func, ref)
    replay = Trace.from_json(sch.trace.to_text()).apply(func)
    assert structural_equal(replay.func, sch.func)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@PROFILE
@given(data=st.data())
def test_random_schedules_match_numpy(name, data):
    _run(name, data)
