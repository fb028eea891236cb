"""DatabaseError and RecordsWarning: what the tuning-record database raises and warns."""
from __future__ import annotations


class DatabaseError(RuntimeError):
    """A database file cannot be used (not SQLite, corrupt, foreign, newer schema), a record
    or an import line is malformed, or an operation refers to something the database lacks.
    The message names the file (and line, for imports) and what was wrong."""


class RecordsWarning(UserWarning):
    """Records exist but are not used (measured on other hardware)."""
