"""The registry of instruction kinds: name -> how to replay it on a Schedule and print it.

Every Schedule method that changes the program or hands out handles has one kind here.  Replay
calls ``kind.apply(sch, inputs, attrs, decision)`` where the inputs are already resolved to the
replaying schedule's handles; the Schedule method records the instruction again.  A kind also
says how the instruction prints as Python (``str(trace)``).

Attributes are stored as JSON values.  A kind whose Schedule method takes non-JSON arguments
provides ``attrs_to_python`` to turn stored attributes back into call arguments.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from .errors import ScheduleError
from .index_map import IndexMap

# How a method's result maps onto the instruction's outputs.
NONE, ONE, LIST = "none", "one", "list"


def py_literal(value) -> str:
    """Python source text of a JSON value (strings with double quotes, as in the docs)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise ScheduleError(f"cannot print {value!r} as a Python literal")


def _input_text(value) -> str:
    return value if isinstance(value, str) else py_literal(value)


@dataclass(frozen=True)
class InstructionKind:
    """How one kind of instruction replays and prints.

    ``apply(sch, inputs, attrs, decision)`` calls the Schedule method and returns its result.
    ``positional_attrs`` print (in order) as positional arguments after the inputs; other
    attributes print as keywords in ``keyword_attrs`` order.  ``list_inputs_from`` > 0 prints
    the inputs from that position on as one list argument (split's factors), passed as
    keyword ``list_inputs_keyword`` when that is set (and left out when empty).
    """

    name: str
    apply: Callable
    returns: str = NONE
    is_sampling: bool = False
    positional_attrs: tuple = ()
    keyword_attrs: tuple = ()
    list_inputs_from: int = 0
    list_inputs_keyword: str = ""
    method: str = ""
    formatter: Callable | None = None

    def as_python(self, inst) -> str:
        if self.formatter is not None:
            return self.formatter(inst)
        listed = ""
        if self.list_inputs_from:
            args = [_input_text(v) for v in inst.inputs[:self.list_inputs_from]]
            listed = "[" + ", ".join(_input_text(v) for v in
                                     inst.inputs[self.list_inputs_from:]) + "]"
            if not self.list_inputs_keyword:
                args.append(listed)
        else:
            args = [_input_text(v) for v in inst.inputs]
        attrs = dict(inst.attrs)
        for key in self.positional_attrs:
            if key in attrs:
                args.append(py_literal(attrs.pop(key)))
        for key in self.keyword_attrs:
            if key in attrs:
                args.append(f"{key}={py_literal(attrs.pop(key))}")
        for key in sorted(attrs):
            args.append(f"{key}={py_literal(attrs[key])}")
        if self.list_inputs_keyword and listed != "[]":
            args.append(f"{self.list_inputs_keyword}={listed}")
        if self.is_sampling and inst.decision is not None:
            args.append(f"decision={py_literal(inst.decision)}")
        call = f"sch.{self.method or self.name}({', '.join(args)})"
        outs = list(inst.outputs)
        if self.returns == NONE or (self.returns == LIST and not outs):
            return call if self.returns == NONE else f"_ = {call}"
        if self.returns == ONE:
            return f"{outs[0]} = {call}"
        if len(outs) == 1:
            return f"[{outs[0]}] = {call}"
        return f"{', '.join(outs)} = {call}"


_REGISTRY: dict[str, InstructionKind] = {}


def register(kind: InstructionKind, override: bool = False) -> InstructionKind:
    """Add an instruction kind.  Registering a name twice is an error unless ``override``."""
    if kind.name in _REGISTRY and not override:
        raise ScheduleError(f"instruction kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def get_kind(name: str) -> InstructionKind:
    kind = _REGISTRY.get(name)
    if kind is None:
        raise ScheduleError(f"unknown instruction kind {name!r}; known: "
                            f"{', '.join(sorted(_REGISTRY))}")
    return kind


def kinds() -> list[str]:
    return sorted(_REGISTRY)


# ---------------------------------------------------------------------------------------------
# The built-in kinds.  Each apply function calls the Schedule method of the same name.
# ---------------------------------------------------------------------------------------------

def _simple(name: str, returns: str = NONE, positional_attrs=(), keyword_attrs=(),
            call=None, is_sampling=False, list_inputs_from=0,
            list_inputs_keyword="") -> InstructionKind:
    def apply(sch, inputs, attrs, decision):
        if call is not None:
            return call(sch, inputs, attrs, decision)
        args = list(inputs) + [attrs.pop(k) for k in positional_attrs if k in attrs]
        return getattr(sch, name)(*args, **attrs)

    return register(InstructionKind(name, apply, returns, is_sampling, tuple(positional_attrs),
                                    tuple(keyword_attrs), list_inputs_from,
                                    list_inputs_keyword))


_simple("get_block", ONE, positional_attrs=("name",))
_simple("get_loops", LIST)
_simple("get_child_blocks", LIST)
_simple("get_producers", LIST)
_simple("get_consumers", LIST)
_simple("split", LIST, call=lambda sch, i, a, d: sch.split(i[0], list(i[1:])),
        list_inputs_from=1)
_simple("fuse", ONE)
_simple("reorder", NONE)
_simple("parallel")
_simple("vectorize")
_simple("unroll")
_simple("bind", positional_attrs=("thread_axis",))


def _apply_annotate(sch, inputs, attrs, decision):
    value = inputs[1] if len(inputs) > 1 else attrs["value"]
    return sch.annotate(inputs[0], attrs["key"], value)


def _format_annotate(inst) -> str:
    value = inst.inputs[1] if len(inst.inputs) > 1 else py_literal(inst.attrs["value"])
    return f"sch.annotate({inst.inputs[0]}, {py_literal(inst.attrs['key'])}, {value})"


register(InstructionKind("annotate", _apply_annotate, formatter=_format_annotate))
_simple("unannotate", positional_attrs=("key",))
_simple("sample_perfect_tile", LIST,
        keyword_attrs=("n", "max_innermost_factor", "inner_budget", "inner_levels"),
        is_sampling=True, list_inputs_from=1, list_inputs_keyword="budget_used",
        call=lambda sch, i, a, d: sch.sample_perfect_tile(i[0], decision=d,
                                                          budget_used=list(i[1:]), **a))
_simple("sample_categorical", ONE, keyword_attrs=("candidates", "probs"), is_sampling=True,
        call=lambda sch, i, a, d: sch.sample_categorical(list(a["candidates"]),
                                                         list(a["probs"]), decision=d))
_simple("sample_compute_location", ONE, is_sampling=True,
        call=lambda sch, i, a, d: sch.sample_compute_location(i[0], decision=d))


def _apply_at(method: str):
    def apply(sch, inputs, attrs, decision):
        return getattr(sch, method)(inputs[0], inputs[1])

    return apply


for _name in ("compute_at", "reverse_compute_at"):
    register(InstructionKind(_name, _apply_at(_name)))
_simple("compute_inline")
_simple("reverse_compute_inline")


def _index_map(attrs):
    return IndexMap.from_json(attrs["index_map"])


def _buffer_selector(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _format_layout(inst) -> str:
    args = [inst.inputs[0], py_literal(inst.attrs["buffer"]),
            IndexMap.from_json(inst.attrs["index_map"]).as_python()]
    if "scope" in inst.attrs:
        args.append(py_literal(inst.attrs["scope"]))
    call = f"sch.{inst.kind}({', '.join(args)})"
    return f"{inst.outputs[0]} = {call}" if inst.outputs else call


_simple("cache_read", ONE, positional_attrs=("read_buffer_index", "scope"))
_simple("cache_write", ONE, positional_attrs=("write_buffer_index", "scope"))
_simple("set_scope", positional_attrs=("buffer_index", "scope"))
_simple("storage_align", positional_attrs=("buffer_index", "axis", "factor", "offset"))
register(InstructionKind(
    "transform_layout",
    lambda sch, i, a, d: sch.transform_layout(i[0], _buffer_selector(a["buffer"]),
                                              _index_map(a)),
    formatter=_format_layout))
register(InstructionKind(
    "pack_layout",
    lambda sch, i, a, d: sch.pack_layout(i[0], _buffer_selector(a["buffer"]), _index_map(a),
                                         a.get("scope", "global")),
    returns=ONE, formatter=_format_layout))
_simple("rfactor", ONE, positional_attrs=("factor_axis",))
_simple("decompose_reduction", ONE)
_simple("blockize", ONE)
_simple("tensorize", positional_attrs=("intrin",))


# The Schedule class a replay starts from.  schedules.schedule registers it when imported (it
# records into a Trace, so trace.py cannot import it): Trace.apply then needs only this module.
_SCHEDULE_CLASS: list = []


def register_schedule(cls) -> None:
    _SCHEDULE_CLASS[:] = [cls]


def new_schedule(func, seed: int | None = None):
    """A fresh Schedule of ``func`` to replay a trace on."""
    if not _SCHEDULE_CLASS:
        raise ScheduleError("no Schedule class is registered; import schedules first")
    return _SCHEDULE_CLASS[0](func, seed=seed)
