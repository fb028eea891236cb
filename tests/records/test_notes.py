"""Notes (records.sqlite.notes): named text kept beside the records, which reports use."""
from __future__ import annotations

import pytest

from records import Database, DatabaseError


def test_notes_are_kept_replaced_and_listed_by_prefix(tmp_path):
    path = tmp_path / "tuning.db"
    with Database(path) as db:
        db.set_note("model:resnet18", '{"tasks": 3}')
        db.set_note("model:resnet18", '{"tasks": 4}')
        db.set_note("model:bert", "{}")
        db.set_note("other", "x")
        # A note named like a meta key of the database's own does not overwrite it.
        db.set_note("schema_version", "not a number")
        assert db.schema_version == 4
    with Database(path, readonly=True) as db:
        assert db.notes("model:") == {"model:bert": "{}", "model:resnet18": '{"tasks": 4}'}
        assert set(db.notes()) == {"model:bert", "model:resnet18", "other", "schema_version"}
        with pytest.raises(DatabaseError, match="read-only"):
            db.set_note("other", "y")


def test_a_note_needs_a_name_and_text():
    with Database() as db:
        with pytest.raises(ValueError, match="non-empty"):
            db.set_note("", "x")
        with pytest.raises(TypeError, match="text"):
            db.set_note("n", {"not": "text"})
        assert db.notes() == {}
