"""Claims: how tuning processes sharing one file avoid measuring the same candidate twice (a
batch's records, once committed, end its claims: records.sqlite.records)."""
from __future__ import annotations

import os
import time
from collections.abc import Iterable

from ..keys import canonical_target, workload_key
from ..record import host_name


class ClaimTables:
    """The claims table of a Database, held in the name of ``_owner`` (set by Database)."""

    def claim(self, workload, target, trace_hashes: Iterable[str],
              ttl: float = 3600.0) -> set[str]:
        """Claim candidates for measurement; returns the hashes this database object may
        measure: those neither measured for the target (on this hardware) nor claimed by
        another tuning process whose claim is still live.  Claims end when the records are
        committed, or after ``ttl`` seconds (a process killed mid-batch).  Two processes
        tuning one workload into one file thus never measure the same candidate twice."""
        key, primary = workload_key(workload), canonical_target(target)
        wanted = list(dict.fromkeys(trace_hashes))
        if not wanted:
            return set()
        # Only the batch's own hashes are looked up (not every record of the workload, which
        # grows with the run), inside the write lock, so a commit cannot slip in between.
        cond, params, _ = self._target_filter(primary, (), True)
        marks = ",".join("?" * len(wanted))
        now = time.time()
        with self._write(f"claiming {len(wanted)} candidates") as conn:
            measured = {h for (h,) in conn.execute(
                f"SELECT r.trace_hash FROM records r WHERE r.workload_key = ? AND {cond} AND "
                f"r.trace_hash IN ({marks})", [key, *params, *wanted])}
            conn.execute("DELETE FROM claims WHERE expires < ?", (now,))
            rows = conn.execute(
                f"SELECT trace_hash, owner FROM claims WHERE workload_key = ? AND target = ? "
                f"AND owner != ? AND trace_hash IN ({marks})",
                [key, primary, self._owner, *wanted]).fetchall()
            # A run killed mid-batch on this machine leaves its claims behind: they lapse at
            # once, not after ``ttl`` (its resumed run would otherwise skip that batch).
            dead = {owner for _, owner in rows if _owner_is_dead(owner)}
            if dead:
                conn.execute(f"DELETE FROM claims WHERE owner IN ({','.join('?' * len(dead))})",
                             sorted(dead))
            taken = {h for h, owner in rows if owner not in dead}
            granted = [h for h in wanted if h not in taken and h not in measured]
            conn.executemany("INSERT OR REPLACE INTO claims(workload_key, target, trace_hash, "
                             "owner, expires) VALUES (?, ?, ?, ?, ?)",
                             [(key, primary, h, self._owner, now + ttl) for h in granted])
        return set(granted)


def _owner_is_dead(owner: str) -> bool:
    """Whether a claim's owner ("host:pid:object") is a process of this machine that has
    exited.  Owners on other machines, and unreadable ones, count as alive: their claims
    lapse by time."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host_name() or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive under another user (PermissionError), or unknowable
        return False
    return False
