"""records.RecordStore: Database and MemoryDatabase are stores, the protocol keeps Database's
signatures, and a store does what the search relies on when used through the protocol only."""
from __future__ import annotations

import inspect
import statistics
import warnings

import pytest

from records import Database, MemoryDatabase, RecordStore, RecordsWarning, Workload

from .helpers import HOST, make_records, sketch

PROTOCOL = sorted(name for name, value in vars(RecordStore).items()
                  if callable(value) and not name.startswith("_"))


def test_databases_are_record_stores_and_other_objects_are_not():
    with Database() as db, MemoryDatabase() as memory:
        assert isinstance(db, RecordStore) and isinstance(memory, RecordStore)
    assert not isinstance(object(), RecordStore)

    # One method short of the protocol is not a store: the check looks at every method.
    class Partial:
        pass
    for name in PROTOCOL[1:]:
        setattr(Partial, name, getattr(Database, name))
    assert not isinstance(Partial(), RecordStore)
    setattr(Partial, PROTOCOL[0], getattr(Database, PROTOCOL[0]))
    assert isinstance(Partial(), RecordStore)


@pytest.mark.parametrize("name", PROTOCOL)
def test_the_protocol_keeps_the_signatures_of_database(name):
    def shape(method):
        return [(p.name, p.kind, p.default)
                for p in inspect.signature(method).parameters.values()]
    assert shape(getattr(RecordStore, name)) == shape(getattr(Database, name))


def use_through_the_protocol(store: RecordStore) -> None:
    """What a tuning loop does with its store, asserted step by step."""
    func, _ = sketch()
    key = store.commit_workload(Workload(func))
    assert store.commit_workload(func) == key
    records = make_records(key, HOST, 5, errors=1)  # 5 successes, then a crash
    committed, pending = records[:3] + records[5:], records[3:5]
    # 1. A batch is stored once: committing it again adds nothing.
    assert store.commit_records(committed) == 4
    assert store.commit_records(committed) == 0
    # 2. The best is the fastest success; errors count as measured but never rank.
    ranked = sorted(committed[:3], key=lambda r: r.median)
    best = store.best(key, HOST)
    assert (best.trace_hash, best.median) == (ranked[0].trace_hash, ranked[0].median)
    assert [r.trace_hash for r in store.best_k(key, HOST, k=10)] == \
        [r.trace_hash for r in ranked]
    assert store.measured_hashes(key, HOST) == {r.trace_hash for r in committed}
    assert [r.uid for r in store.records(key, HOST)] == [r.uid for r in committed]
    assert len(store.records(key, HOST, include_errors=False)) == 3
    # 3. A claim grants only what was never measured.
    granted = store.claim(key, HOST, [r.trace_hash for r in records])
    assert granted == {r.trace_hash for r in pending}
    # 4. A slow re-measurement pools into the score and demotes the best.
    slow = [1.0] * 7
    score = store.update_best_remeasure(best.record_id, slow)
    assert score == statistics.median(list(best.run_times) + slow)
    assert store.best(key, HOST).trace_hash == ranked[1].trace_hash
    # 5. An unusable record is reported once.
    with pytest.warns(RecordsWarning, match="cannot be used"):
        store.skip_unusable(best, "its trace does not replay")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.skip_unusable(best, "asked again")


def test_a_database_file_serves_through_the_protocol(tmp_path):
    with Database(tmp_path / "tuning.db") as db:
        use_through_the_protocol(db)


def test_a_memory_database_serves_through_the_protocol():
    with MemoryDatabase() as db:
        use_through_the_protocol(db)
