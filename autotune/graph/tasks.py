"""Fused groups as PrimFuncs, their FLOP counts, and task extraction.

    tasks = extract_tasks(model)       # one Task per structurally unique fused function
    for task in tasks:
        task.func, task.weight, task.flops, task.key

A fused group becomes one PrimFunc by composing the operators' te-level definitions: the
group's external inputs are placeholders (in first-use order), each operator's stages follow
the previous ones, and the last operator's tensor is the output parameter.  Stage and function
names are derived from the operators only, so two groups of the same operators on the same
shapes give structurally equal functions (the same ``structural_hash``) whatever the node and
weight names.  A constant of one element read by a broadcast operator is inlined as a number
(a scale such as 1/sqrt(d) is part of the computation, not an argument).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tensor_ir import te
from tensor_ir.expr import BinOp, Call
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BlockRealize
from tensor_ir.visitor import collect

from .errors import GraphError
from .ir import Model
from .operators import VIEW, get_op
from .passes import FusedGroup, fuse_ops, optimize

__all__ = ["GroupFunc", "group_func", "count_flops", "Task", "extract_tasks", "partition"]

_FLOAT_OPS = ("+", "-", "*", "/", "min", "max")


@dataclass
class GroupFunc:
    """The PrimFunc of a fused group; ``params`` are the values passed for its parameters
    (all but the last, which is the group's output)."""

    func: PrimFunc
    params: list[str]
    key: str
    flops: int


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
    return GroupFunc(func, order, func.structural_hash(), count_flops(func))


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


def partition(model: Model, optimized: bool = False
              ) -> tuple[Model, list[FusedGroup], dict[str, GroupFunc]]:
    """The optimized model, its fused groups and each kernel group's function (keyed by the
    group's output value)."""
    if not optimized:
        model = optimize(model)
    groups = fuse_ops(model)
    funcs = {g.output: group_func(model, g) for g in groups if g.kind != VIEW}
    return model, groups, funcs


def extract_tasks(model: Model) -> list[Task]:
    """One Task per structurally unique fused function, in first-occurrence order."""
    optimized, groups, funcs = partition(model)
    tasks: dict[str, Task] = {}
    for group in groups:
        if group.kind == VIEW:
            continue
        gf = funcs[group.output]
        constant = frozenset(k for k, v in enumerate(gf.params) if v in optimized.constants)
        task = tasks.get(gf.key)
        if task is None:
            task = tasks[gf.key] = Task(group.name, gf.func, gf.key, 0, gf.flops,
                                        weight_params=constant)
        else:
            task.weight_params &= constant
        task.weight += 1
        task.groups.append(group.output)
    return list(tasks.values())

