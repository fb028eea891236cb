"""Instruction and Trace: the replayable, JSON-serialisable record of a schedule.

An instruction names its kind (a key of the instruction registry), its inputs (handle names
such as ``b0``, ``l3``, ``v5``, or literal ints / None), its attributes (JSON values), its
outputs (handle names) and, for a sampling instruction, its decision.  Handle names are
assigned in creation order, so the JSON form does not depend on object identity or on the
process that wrote it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import ScheduleError
from .frozen import freeze, thaw
from .instructions import get_kind, new_schedule

TRACE_FORMAT_VERSION = 1


@dataclass(frozen=True)
class Instruction:
    """One applied primitive.  ``inputs`` hold handle names (str) and literals (int / None)."""

    kind: str
    inputs: tuple = ()
    attrs: dict = field(default_factory=dict)
    outputs: tuple = ()
    decision: Any = None

    def __post_init__(self):
        object.__setattr__(self, "inputs", freeze(tuple(self.inputs)))
        object.__setattr__(self, "attrs", freeze(dict(self.attrs)))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "decision", freeze(self.decision))

    def __hash__(self):
        return hash((self.kind, self.inputs, json.dumps(thaw(self.attrs), sort_keys=True),
                     self.outputs, json.dumps(thaw(self.decision))))

    def with_decision(self, decision) -> "Instruction":
        return Instruction(self.kind, self.inputs, self.attrs, self.outputs, decision)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "inputs": thaw(self.inputs), "attrs": thaw(self.attrs),
               "outputs": list(self.outputs)}
        if self.decision is not None:
            out["decision"] = thaw(self.decision)
        return out

    @staticmethod
    def from_json(data: dict) -> "Instruction":
        try:
            return Instruction(data["kind"], data.get("inputs", ()), data.get("attrs", {}),
                               data.get("outputs", ()), data.get("decision"))
        except (KeyError, TypeError, AttributeError) as err:
            raise ScheduleError(f"malformed trace instruction {data!r}: {err}") from None

    def as_python(self) -> str:
        return get_kind(self.kind).as_python(self)


class Trace:
    """An immutable sequence of instructions."""

    __slots__ = ("instructions",)

    def __init__(self, instructions=()):
        insts = tuple(instructions)
        for inst in insts:
            if not isinstance(inst, Instruction):
                raise ScheduleError(f"trace: {inst!r} is not an Instruction")
        self.instructions = insts

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self):
        return iter(self.instructions)

    def __getitem__(self, index):
        return self.instructions[index]

    def __eq__(self, other) -> bool:
        return isinstance(other, Trace) and self.to_json() == other.to_json()

    def __hash__(self):
        return hash(self.to_text())

    def __repr__(self) -> str:
        return f"Trace({len(self.instructions)} instructions)"

    def __str__(self) -> str:
        return "\n".join(inst.as_python() for inst in self.instructions)

    # -- decisions --------------------------------------------------------------------------
    @property
    def decisions(self) -> dict[int, Any]:
        """``{instruction index: decision}`` of every sampling instruction that has one."""
        return {k: inst.decision for k, inst in enumerate(self.instructions)
                if inst.decision is not None}

    def sampling_indices(self) -> list[int]:
        """Indices of the sampling instructions (whether or not they hold a decision)."""
        return [k for k, inst in enumerate(self.instructions) if get_kind(inst.kind).is_sampling]

    def with_decision(self, index: int, decision) -> "Trace":
        """A new trace with instruction ``index``'s decision replaced (None: sample afresh on
        replay).  This is what search mutates."""
        if not 0 <= index < len(self.instructions):
            raise ScheduleError(f"trace has {len(self.instructions)} instructions; no index "
                                f"{index}")
        inst = self.instructions[index]
        if not get_kind(inst.kind).is_sampling:
            raise ScheduleError(f"instruction {index} ({inst.kind}) is not a sampling "
                                f"instruction and has no decision")
        insts = list(self.instructions)
        insts[index] = inst.with_decision(decision)
        return Trace(insts)

    def without_decisions(self) -> "Trace":
        """The same instructions with every decision dropped (a sketch to sample from)."""
        return Trace(inst.with_decision(None) if inst.decision is not None else inst
                     for inst in self.instructions)

    def truncated(self, length: int) -> "Trace":
        return Trace(self.instructions[:length])

    # -- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format_version": TRACE_FORMAT_VERSION,
                "instructions": [inst.to_json() for inst in self.instructions]}

    def to_text(self) -> str:
        """Compact, stable JSON text (sorted keys)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(data) -> "Trace":
        """Rebuild a trace from :meth:`to_json` output (a dict or its JSON text)."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as err:
                raise ScheduleError(f"trace JSON does not parse: {err}") from None
        if not isinstance(data, dict) or "instructions" not in data:
            raise ScheduleError("trace JSON must be an object with an 'instructions' list")
        version = data.get("format_version")
        if version != TRACE_FORMAT_VERSION:
            raise ScheduleError(f"trace JSON has format_version {version!r}; this release reads "
                                f"{TRACE_FORMAT_VERSION}")
        insts = [Instruction.from_json(d) for d in data["instructions"]]
        for inst in insts:
            get_kind(inst.kind)  # unknown kinds fail here, not halfway through a replay
        return Trace(insts)

    # -- replay -------------------------------------------------------------------------------
    def apply(self, func, seed: int | None = None, fit_tiles: bool = False):
        """Replay on a fresh ``Schedule(func, seed)``.  Recorded decisions are reused; a missing
        decision is sampled from the schedule's random generator.  ``fit_tiles``: tile
        decisions made for loops of other extents are fitted to these (Schedule.fit_tiles)."""
        sch = new_schedule(func, seed)
        sch.fit_tiles = fit_tiles
        self.apply_to(sch)
        return sch

    def apply_to(self, sch) -> None:
        """Replay every instruction on ``sch`` (which records them again in its own trace)."""
        names: dict[str, Any] = {}
        for index, inst in enumerate(self.instructions):
            kind = get_kind(inst.kind)
            inputs = []
            for value in inst.inputs:
                if isinstance(value, str):
                    if value not in names:
                        raise ScheduleError(f"trace instruction {index} ({inst.kind}) uses "
                                            f"handle {value} before it is defined")
                    inputs.append(names[value])
                else:
                    inputs.append(value)
            outputs = kind.apply(sch, inputs, dict(inst.attrs), inst.decision)
            outputs = _flatten_outputs(outputs)
            if len(outputs) != len(inst.outputs):
                raise ScheduleError(
                    f"trace instruction {index} ({inst.kind}) produced {len(outputs)} handles "
                    f"on replay but {len(inst.outputs)} were recorded")
            for name, handle in zip(inst.outputs, outputs):
                names[name] = handle


def _flatten_outputs(outputs) -> list:
    if outputs is None:
        return []
    if isinstance(outputs, (list, tuple)):
        flat = []
        for o in outputs:
            flat.extend(_flatten_outputs(o) if isinstance(o, (list, tuple)) else [o])
        return flat
    return [outputs]
