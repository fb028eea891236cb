"""Workload identity: the structural hash of a PrimFunc, its JSON form and a readable name.

A workload is what is tuned: an unscheduled PrimFunc (typically from ``te.create_prim_func``).
Its key is ``func.structural_hash()``, a SHA-256 of the canonical IR that ignores variable and
buffer names, so the same operator built twice (in another process, on another machine) has
the same key and finds the same records.
"""
from __future__ import annotations

import json
from collections.abc import Mapping

from tensor_ir.expr import IntImm
from tensor_ir.func import PrimFunc

__all__ = ["WORKLOAD_FORMAT_VERSION", "Workload", "describe"]

WORKLOAD_FORMAT_VERSION = 1


def describe(func: PrimFunc) -> str:
    """A short readable name: ``matmul(float32[64, 64], float32[64, 64], float32[64, 64])``."""
    params = []
    for buf in func.params:
        dims = ", ".join(str(s.value) if isinstance(s, IntImm) else "?" for s in buf.shape)
        params.append(f"{buf.dtype}[{dims}]")
    return f"{func.name}({', '.join(params)})"


class Workload:
    """A PrimFunc to tune, with its key and name.

    ``Workload(func, name=None)``: ``name`` defaults to :func:`describe` of the function.
    ``key`` is the structural hash; two workloads are equal when their keys are.
    """

    __slots__ = ("_json", "func", "key", "name")

    def __init__(self, func: PrimFunc, name: str | None = None, *, key: str | None = None):
        if not isinstance(func, PrimFunc):
            raise TypeError(f"a Workload is made from a PrimFunc, got {type(func).__name__}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError("a workload name must be a non-empty string or None")
        self.func = func
        self.name = name if name is not None else describe(func)
        # ``key`` may be passed by the database, which has it already; computing it again
        # for every workload read back would cost a full canonical serialisation each.
        self.key = key if key is not None else func.structural_hash()
        self._json: dict | None = None

    def to_json(self) -> dict:
        """``{"format_version", "key", "name", "func": PrimFunc JSON}``."""
        if self._json is None:
            self._json = {"format_version": WORKLOAD_FORMAT_VERSION, "key": self.key,
                          "name": self.name, "func": self.func.to_json()}
        return self._json

    @staticmethod
    def from_json(data, verify: bool = True) -> Workload:
        """Rebuild from :meth:`to_json` output (a dict or its JSON text).  With ``verify`` the
        stored key must equal the rebuilt function's structural hash (ValueError if not)."""
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, Mapping):
            raise ValueError(f"a workload is a JSON object, got {type(data).__name__}")
        version = data.get("format_version")
        if version != WORKLOAD_FORMAT_VERSION:
            raise ValueError(f"workload format_version is {version!r}; this release reads "
                             f"{WORKLOAD_FORMAT_VERSION}")
        missing = [k for k in ("key", "name", "func") if k not in data]
        if missing:
            raise ValueError(f"workload lacks field(s) {', '.join(missing)}")
        try:
            func = PrimFunc.from_json(data["func"])
        except Exception as err:  # malformed IR JSON fails in many ways (Key/Index/IR errors)
            raise ValueError(f"workload {data['key']}: its function does not load: "
                             f"{type(err).__name__}: {err}") from None
        key = data["key"]
        if verify:
            actual = func.structural_hash()
            if actual != key:
                raise ValueError(f"workload key {key} does not match its function's structural "
                                 f"hash {actual}")
        return Workload(func, data["name"], key=key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Workload) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Workload({self.name}, key={self.key[:12]})"
