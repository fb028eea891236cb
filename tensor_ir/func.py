"""PrimFunc, its JSON form, structural equality and the stable structural hash.

The JSON form is the project's stable, versioned representation of IR (used by the tuning
database for workloads).  Variables and buffers are definitions: they are written once into
tables and referred to by index, so the form is independent of object identity.  The canonical
form additionally drops variable and buffer names; two functions are structurally equal when
their canonical forms are equal, and the structural hash is a SHA-256 of that form.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from . import expr as _expr_mod
from . import stmt as _stmt_mod
from .buffer import Buffer
from .errors import TensorIRError
from .expr import Node, Var, node_text
from .visitor import node_fields

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True, eq=False)
class PrimFunc(Node):
    """A function over buffers: ``params`` are its arguments (inputs then outputs)."""

    params: tuple
    body: object
    name: str = "main"
    attrs: tuple = ()

    def __str__(self) -> str:
        return node_text(self)

    def __repr__(self) -> str:
        return f"PrimFunc({self.name}, params={[b.name for b in self.params]})"

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_body(self, body) -> "PrimFunc":
        return PrimFunc(self.params, body, self.name, self.attrs)

    def structural_hash(self) -> str:
        return structural_hash(self)

    def to_json(self) -> dict:
        return to_json(self)

    @staticmethod
    def from_json(data) -> "PrimFunc":
        node = from_json(data)
        if not isinstance(node, PrimFunc):
            raise TensorIRError("JSON does not hold a PrimFunc")
        return node


def _node_classes() -> dict[str, type]:
    classes = {}
    for mod in (_expr_mod, _stmt_mod):
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, type) and issubclass(obj, Node) and hasattr(obj, "__dataclass_fields__"):
                classes[name] = obj
    classes["PrimFunc"] = PrimFunc
    return classes


_CLASSES: dict[str, type] | None = None


class _Writer:
    def __init__(self, canonical: bool):
        self.canonical = canonical
        self.var_ids: dict[int, int] = {}
        self.buf_ids: dict[int, int] = {}
        self.vars: list = []
        self.buffers: list = []
        self._keep: list = []  # keep referenced objects alive so ids stay unique

    def value(self, v):
        if isinstance(v, Var):
            idx = self.var_ids.get(id(v))
            if idx is None:
                idx = len(self.vars)
                self.var_ids[id(v)] = idx
                self._keep.append(v)
                self.vars.append([v.dtype] if self.canonical else [v.name, v.dtype])
            return ["$v", idx]
        if isinstance(v, Buffer):
            idx = self.buf_ids.get(id(v))
            if idx is None:
                idx = len(self.buffers)
                self.buf_ids[id(v)] = idx
                self._keep.append(v)
                self.buffers.append(None)  # reserve the slot before the shape's vars
                entry = [self.value(v.shape), v.dtype, v.scope]
                self.buffers[idx] = entry if self.canonical else [v.name] + entry
            return ["$b", idx]
        if isinstance(v, Node):
            cls = type(v)
            return [cls.__name__] + [self.value(getattr(v, f)) for f in node_fields(cls)]
        if isinstance(v, tuple):
            return ["("] + [self.value(x) for x in v]
        if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
            return v
        if isinstance(v, float):
            return {"f": v.hex()}
        if isinstance(v, list):
            return ["["] + [self.value(x) for x in v]
        raise TensorIRError(f"cannot serialise {type(v).__name__} value {v!r}")


def to_json(node, canonical: bool = False) -> dict:
    """JSON-compatible dict for any IR node (PrimFunc, statement or expression)."""
    w = _Writer(canonical)
    root = w.value(node)
    return {"format_version": FORMAT_VERSION, "vars": w.vars, "buffers": w.buffers, "root": root}


def from_json(data) -> Node:
    """Rebuild IR from :func:`to_json` output (a dict or its JSON text)."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _node_classes()
    if isinstance(data, str):
        data = json.loads(data)
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise TensorIRError(f"IR JSON has format_version {version!r}; this release reads "
                            f"{FORMAT_VERSION}")
    var_table = data["vars"]
    buf_table = data["buffers"]
    vars_: dict[int, Var] = {}
    bufs: dict[int, Buffer] = {}

    def read(v):
        if isinstance(v, list):
            if not v:
                raise TensorIRError("malformed IR JSON: empty list")
            tag = v[0]
            if tag == "$v":
                idx = v[1]
                if idx not in vars_:
                    entry = var_table[idx]
                    vars_[idx] = Var(entry[0], entry[1]) if len(entry) == 2 else Var(f"v{idx}", entry[0])
                return vars_[idx]
            if tag == "$b":
                idx = v[1]
                if idx not in bufs:
                    entry = buf_table[idx]
                    if len(entry) == 4:
                        name, shape, dtype, scope = entry
                    else:
                        shape, dtype, scope = entry
                        name = f"buf{idx}"
                    bufs[idx] = Buffer(name, read(shape), dtype, scope)
                return bufs[idx]
            if tag == "(":
                return tuple(read(x) for x in v[1:])
            if tag == "[":
                return [read(x) for x in v[1:]]
            cls = _CLASSES.get(tag)
            if cls is None:
                raise TensorIRError(f"malformed IR JSON: unknown node kind {tag!r}")
            args = [read(x) for x in v[1:]]
            return cls(*args)
        if isinstance(v, dict):
            return float.fromhex(v["f"])
        return v

    return read(data["root"])


def canonical_text(node) -> str:
    return json.dumps(to_json(node, canonical=True), separators=(",", ":"))


def structural_hash(node) -> str:
    """Stable hex digest, equal for structurally equal trees across processes and runs."""
    return hashlib.sha256(canonical_text(node).encode()).hexdigest()


def structural_equal(a, b) -> bool:
    """True when ``a`` and ``b`` are equal up to renaming of variables and buffers."""
    return canonical_text(a) == canonical_text(b)
