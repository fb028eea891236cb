"""A model's partition (fused groups as PrimFuncs, their tasks), FLOP counts.

    part = Partition.of(model)         # optimised once: groups, functions, memory plan, tasks
    for task in part.tasks:            # one Task per structurally unique fused function
        task.func, task.weight, task.flops, task.key

A fused group becomes one PrimFunc by composing the operators' te-level definitions: the
group's external inputs are placeholders (in first-use order), each operator's stages follow
the previous ones, and the last operator's tensor is the output parameter.  Stage and function
names are derived from the operators only, so two groups of the same operators on the same
shapes give structurally equal functions (the same ``structural_hash``) whatever the node and
weight names.  A constant of one element read by a broadcast operator is inlined as a number
(a scale such as 1/sqrt(d) is part of the computation, not an argument).
Optimising and fusing a large model takes seconds: tuning, re-ranking and building it take
the one Partition made for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensor_ir import te
from tensor_ir.expr import BinOp, Call
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BlockRealize
from tensor_ir.visitor import collect

from .errors import GraphError
from .ir import Model
from .operators import VIEW, get_op
from .passes import FusedGroup, MemoryPlan, fuse_ops, optimize, plan_memory

__all__ = ["GroupFunc", "group_func", "count_flops", "Task", "Partition", "extract_tasks",
           "partition"]

_FLOAT_OPS = ("+", "-", "*", "/", "min", "max")


@dataclass
class GroupFunc:
    """The PrimFunc of a fused group; ``params`` are the values passed for its parameters
    (all but the last, which is the group's output), ``weight_params`` the indices of those
    that are the model's constant weights (a CPU build packs them once)."""

    func: PrimFunc
    params: list[str]
    key: str
    flops: int
    weight_params: frozenset[int] = frozenset()


def group_func(model: Model, group: FusedGroup) -> GroupFunc:
    """Compose the group's operators into one PrimFunc."""
    if group.kind == VIEW:
        raise GraphError(f"group {group.name} is a view; it has no kernel")
    placeholders: dict[str, te.Tensor] = {}
    env: dict[str, object] = {}
    order: list[str] = []
    for node in group.nodes:
        opdef = get_op(node.op)
        args = []
        for value in node.inputs:
            if value in env:
                args.append(env[value])
                continue
            array = model.constants.get(value)
            if opdef.scalar_operands and array is not None and array.size == 1 and \
                    len(model.types[value].shape) <= len(model.types[node.output].shape):
                # Broadcasting a one-element constant cannot change the result's shape
                # (checked above), so it can be a number in the expression.
                args.append(array.reshape(()).item())
                continue
            if value not in placeholders:
                t = model.types[value]
                placeholders[value] = te.placeholder(t.shape, t.dtype, name=f"p{len(order)}")
                order.append(value)
            args.append(placeholders[value])
        try:
            env[node.output] = opdef.te(args, node.attrs, node.op)
        except GraphError:
            raise
        except Exception as err:
            raise GraphError(f"node {node.name} ({node.op}): cannot build its te definition: "
                             f"{err}") from err
    out = env[group.output]
    if not isinstance(out, te.Tensor) or out in placeholders.values():
        raise GraphError(f"group {group.name} computes nothing")
    func = te.create_prim_func([placeholders[v] for v in order] + [out], name=group.name)
    weights = frozenset(k for k, v in enumerate(order) if v in model.constants)
    return GroupFunc(func, order, func.structural_hash(), count_flops(func), weights)


def count_flops(func: PrimFunc) -> int:
    """Floating-point operations of an unscheduled function: for every block, the arithmetic
    operations and math calls of its body on float values times its iteration count (a
    multiply-accumulate counts two)."""
    total = 0
    for realize in collect(func.body, BlockRealize):
        block: Block = realize.block
        if not block.iter_vars:
            continue
        count = 1
        for iv in block.iter_vars:
            count *= int(iv.dom.extent.value)
        ops = sum(1 for e in collect(block.body, BinOp)
                  if e.op in _FLOAT_OPS and e.dtype.startswith("float"))
        ops += sum(1 for e in collect(block.body, Call) if e.dtype.startswith("float"))
        total += count * ops
    return total


@dataclass
class Task:
    """A structurally unique fused function: ``weight`` is how many groups of the model it
    serves, ``flops`` the FLOPs of one call, ``groups`` the names of those groups' output
    values."""

    name: str
    func: PrimFunc
    key: str
    weight: int
    flops: int
    groups: list[str] = field(default_factory=list)
    # Indices of the parameters that are the model's constant weights in every group the
    # task serves (a built model packs those once, at build; the tuner times it so too).
    weight_params: frozenset[int] = frozenset()

    @property
    def total_flops(self) -> int:
        return self.weight * self.flops

    def __repr__(self) -> str:
        return (f"Task({self.name}, weight={self.weight}, flops={self.flops}, "
                f"key={self.key[:12]})")


@dataclass(frozen=True, eq=False)
class Partition:
    """A model compiled once: ``source`` as given, ``model`` optimised, its fused ``groups``
    (topological order), each kernel group's function (``funcs``, by output value), the
    executor's memory ``plan``, and ``tasks`` in first-occurrence order."""

    source: Model
    model: Model
    groups: list[FusedGroup]
    funcs: dict[str, GroupFunc]
    plan: MemoryPlan
    tasks: list[Task]

    @classmethod
    def of(cls, model: Model | Partition, optimized: bool = False) -> Partition:
        """The partition of ``model`` (itself if one); ``optimized``: no optimize pass."""
        if isinstance(model, Partition):
            return model
        source, model = model, (model if optimized else optimize(model))
        groups = fuse_ops(model)
        funcs = {g.output: group_func(model, g) for g in groups if g.kind != VIEW}
        tasks: dict[str, Task] = {}
        for group in groups:
            gf = funcs.get(group.output)  # None for a view
            if gf is not None:
                task = tasks.setdefault(gf.key, Task(group.name, gf.func, gf.key, 0, gf.flops,
                                                     weight_params=gf.weight_params))
                task.weight_params &= gf.weight_params  # weights in every group it serves
                task.weight += 1
                task.groups.append(group.output)
        return cls(source, model, groups, funcs, plan_memory(model, groups),
                   list(tasks.values()))

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def run_bytes(self) -> int:
        """The bytes one run of the built model touches: its planned activation storages
        and its (optimised) weights."""
        return self.plan.total_bytes + sum(np.asarray(array).nbytes
                                           for array in self.model.constants.values())


def partition(model: Model, optimized: bool = False
              ) -> tuple[Model, list[FusedGroup], dict[str, GroupFunc]]:
    """The optimized model, its fused groups and each kernel group's function (keyed by the
    group's output value): the first fields of ``Partition.of(model, optimized)``."""
    part = Partition.of(model, optimized)
    return part.model, part.groups, part.funcs


def extract_tasks(model: Model) -> list[Task]:
    """One Task per structurally unique fused function, in first-occurrence order."""
    return Partition.of(model).tasks
