"""Notes: named text that the tools above the records keep in the database (a tuned model's
task list, say), beside the records."""
from __future__ import annotations


class NoteTables:
    """The notes of a Database."""

    # NOTE: kept in the meta table under a "note:" prefix, so the schema stays as it is and
    # the keys the database itself reads (application, schema_version, ...) cannot be hit.
    def set_note(self, name: str, value: str) -> None:
        """Store ``value`` (text, e.g. JSON) under ``name``, replacing what was there, in one
        transaction.  Used for what is not a record: the task list of a tuned model, say."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a note name must be a non-empty string, got {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"a note value is text, got {type(value).__name__}")
        with self._write(f"storing note {name!r}") as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                         ("note:" + name, value))

    def notes(self, prefix: str = "") -> dict[str, str]:
        """The stored notes whose names start with ``prefix``, by name."""
        with self._read("reading notes") as conn:
            rows = conn.execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ? "
                                "ORDER BY key", (5 + len(prefix), "note:" + prefix)).fetchall()
        return {key[5:]: value for key, value in rows}
