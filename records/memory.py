"""MemoryDatabase: an in-memory tuning-record database for tests and notebooks.

It is the SQLite database on ``":memory:"``, so it behaves exactly as a file does (same
queries, same validation, same JSON forms), and ``save(path)`` writes it to a file when a
notebook session's records turn out to be worth keeping.
"""
from __future__ import annotations

import os
import sqlite3

from .database import Database
from .errors import DatabaseError

__all__ = ["MemoryDatabase"]


class MemoryDatabase(Database):
    """``MemoryDatabase()``: a fresh, empty database that lives as long as the object."""

    def __init__(self):
        super().__init__(":memory:")

    def save(self, path) -> Database:
        """Copy everything into a new database file at ``path`` (which must not exist) and
        return it, opened.  Uses SQLite's online backup, so the copy is consistent."""
        path = os.fspath(path)
        if os.path.exists(path):
            raise DatabaseError(f"cannot save to {path}: the file exists (merge into it with "
                                f"export_jsonl / import_jsonl instead)")
        with self._read(f"saving to {path}") as conn:
            target = sqlite3.connect(path)
            try:
                conn.backup(target)
            finally:
                target.close()
        return Database(path)
