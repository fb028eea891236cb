"""The search needs of its record store only records.RecordStore: a tuning loop and a task
scheduler run on a store offering the protocol's methods and nothing else, and the search's
sources call exactly the protocol's methods on their store."""
from __future__ import annotations

import ast
import hashlib
from collections import Counter
from pathlib import Path

import pytest

import cost_models
import search
from records import MemoryDatabase, RecordStore, RecordsWarning, TuningRecord, Workload
from schedules.space import DesignSpace
from search.config import SearchConfig
from search.simulation import SimulationBuilder, SimulationRunner
from search.task_scheduler import SchedulerTask, TaskScheduler
from tensor_ir import ops
from tensor_ir.target import Target

PROTOCOL = sorted(name for name, value in vars(RecordStore).items()
                  if callable(value) and not name.startswith("_"))


class ProtocolOnly:
    """A store with the protocol's methods and nothing more (they forward to ``store``):
    search code reaching for any other method of a Database fails with AttributeError.
    ``calls`` counts the calls per method."""

    def __init__(self, store):
        self._store = store
        self.calls: Counter = Counter()


def _forward(name: str):
    def method(self, *args, **kwargs):
        self.calls[name] += 1
        return getattr(self._store, name)(*args, **kwargs)
    method.__name__ = name
    return method


for _name in PROTOCOL:
    setattr(ProtocolOnly, _name, _forward(_name))


def hashed_cost(inp) -> float:
    """Seconds from the program's hash: deterministic, no features to compute."""
    digest = hashlib.sha256(inp.func.structural_hash().encode()).digest()
    return 1e-4 * (1.0 + digest[0] / 256)


def make_loop(space, store, seed: int = 0):
    return search.TuningLoop(space, search.create("random", seed=seed),
                             cost_models.create("random", seed=0), SimulationBuilder(),
                             SimulationRunner(hashed_cost), store,
                             config=SearchConfig(batch_size=4), log=False)


def test_the_wrapper_is_a_store_and_nothing_more():
    store = ProtocolOnly(MemoryDatabase())
    assert isinstance(store, RecordStore)
    with pytest.raises(AttributeError):
        store.count()  # a Database method outside the protocol


def test_a_tuning_loop_runs_resumes_and_remeasures_on_the_protocol_alone():
    space = DesignSpace(ops.matmul(16, 16, 16), "llvm")
    backing = MemoryDatabase()
    store = ProtocolOnly(backing)
    first = make_loop(space, store).run(8)
    assert len(first.trials) == 8
    # A stored record whose trace this release cannot replay: the resumed loop must set it
    # aside through the protocol (skip_unusable) and go on.  It is the slowest, so that the
    # top two re-measured below are real ones.
    key = Workload(space.func).key
    bad = {"format_version": 1, "instructions": [
        {"kind": "no_such_primitive", "inputs": [], "attrs": {}, "outputs": []}]}
    backing.commit_records([TuningRecord(key, first.target, bad, run_times=(1.0,))])
    loop = make_loop(space, store, seed=1)
    with pytest.warns(RecordsWarning, match="cannot be used"):
        second = loop.run(8)
    assert second.resumed_records == 8 and second.skipped_known == 9
    assert not {t.trace_hash for t in first.trials} & {t.trace_hash for t in second.trials}
    assert len(loop.remeasure_top(2, 1)) == 2
    assert backing.count(key) == 17
    assert {"commit_workload", "commit_records", "measured_hashes", "best_k", "claim",
            "skip_unusable", "update_best_remeasure"} <= set(store.calls)


def test_a_task_scheduler_runs_on_the_protocol_alone():
    store = ProtocolOnly(MemoryDatabase())
    target = Target("llvm")
    funcs = [ops.matmul(16, 16, 16), ops.softmax((8, 32), axis=-1)]
    tasks = [SchedulerTask(f"task{i}", f.structural_hash(), 1, 2.0 * 16 ** 3, bytes=4096.0,
                           group=f"group{i}", func=f) for i, f in enumerate(funcs)]
    result = TaskScheduler(tasks, lambda task: make_loop(DesignSpace(task.func, target), store),
                           store, target, trials=16,
                           search=SearchConfig(batch_size=4, remeasure_top=1)).run()
    assert result.trials == 16
    # The scheduler itself reads back through ``records`` (resuming) and ``best``.
    assert {"records", "best", "commit_records", "update_best_remeasure"} <= set(store.calls)


def test_the_search_calls_exactly_the_protocol_on_its_store():
    """Every call on ``self.database`` in the search's modules (paths a short run may miss,
    too) is a protocol method, and every protocol method is one the search calls."""
    called: dict[str, list[str]] = {}
    for path in sorted(Path(search.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "database"
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "self"):
                called.setdefault(node.attr, []).append(f"{path.name}:{node.lineno}")
    assert called, "no use of self.database found: the check reads nothing"
    outside = {name: where for name, where in called.items() if name not in PROTOCOL}
    assert not outside, f"search calls store methods outside RecordStore: {outside}"
    assert sorted(called) == PROTOCOL
