"""Keys and canonical forms shared by the records modules: canonical JSON text, canonical
target strings, workload keys and the spread of a set of run times."""
from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from tensor_ir.func import PrimFunc
from tensor_ir.target import KINDS, Target, TargetError

from .errors import DatabaseError
from .workload import Workload

__all__ = ["canonical_json", "canonical_target", "spread", "workload_key"]


def canonical_json(value: Any) -> str:
    """Compact JSON text with sorted keys: the form hashes are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=1024)
def _canonical_builtin(spec: str) -> str:
    return str(Target(spec))


def canonical_target(target) -> str:
    """``str(Target(target))``; a TargetError becomes a DatabaseError naming the string."""
    if isinstance(target, Target):
        return str(target)
    if not isinstance(target, str):
        raise TypeError(f"a target is a string or Target, got {type(target).__name__}")
    try:
        # Strings of a built-in kind resolve the same way for the life of the process; a
        # registered name may be re-registered, so it is resolved afresh each time.
        if target.split(" ", 1)[0] in KINDS:
            return _canonical_builtin(target)
        return str(Target(target))
    except TargetError as err:
        raise DatabaseError(f"target {target!r} does not parse: {err}") from None


def workload_key(workload) -> str:
    """The key of a workload given as its key, a Workload or a PrimFunc."""
    if isinstance(workload, Workload):
        return workload.key
    if isinstance(workload, PrimFunc):
        return workload.structural_hash()
    if isinstance(workload, str) and workload:
        return workload
    raise TypeError(f"a workload is given as its key, a Workload or a PrimFunc, got "
                    f"{type(workload).__name__}")


def spread(times: Sequence[float]) -> float:
    """(max - min) / median of run times (0 when the median is 0)."""
    median = statistics.median(times)
    return (max(times) - min(times)) / median if median > 0 else 0.0
