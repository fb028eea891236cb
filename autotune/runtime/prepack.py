"""Weight pre-packing: run a scheduled function's packing of a constant operand once, at build.

A schedule that reads a parameter through ``pack_layout`` (MultiLevelTiling's packed sketches:
a matmul's B in panels, a convolution's weights with the output channels innermost) copies
that parameter into the packed layout on every call.  When the parameter is a model weight,
the copy is the same each time: inside a model it costs a pass over the weight per call (for
a 512-channel 3x3 convolution, 9.4 MB read and written around a ~1.5 ms kernel).

``split_packing`` cuts such a function in two: a packing function ``(weight, packed)`` made
of the packing loop nest alone, and the main function, which takes the packed buffer as a
parameter in the weight's place.  The model builder runs the first once on the constant and
calls the second on its result, as TVM does by folding a layout transform of the weights.

Only a packing nest that stands alone under the root (not computed at a loop of the main
computation) is split off, and only when nothing else reads the original parameter: then it
fills the whole packed buffer before anything uses it, and the split is exact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tensor_ir.buffer import Buffer
from tensor_ir.expr import BufferLoad, IntImm
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BlockRealize, For, SeqStmt, Stmt, seq
from tensor_ir.visitor import collect

__all__ = ["PackedParam", "split_packing"]


@dataclass(frozen=True)
class PackedParam:
    """The parameter at ``index`` of the original function is replaced in the main function
    by its packed copy, which ``pack`` (parameters: the original buffer, the packed buffer)
    computes."""

    index: int
    pack: PrimFunc


def _root(func: PrimFunc) -> Block | None:
    body = func.body
    if isinstance(body, BlockRealize) and body.block.name == "root":
        return body.block
    return None


def _items(stmt: Stmt) -> list[Stmt]:
    return list(stmt.stmts) if isinstance(stmt, SeqStmt) else [stmt]


def _full_packing_nest(item: Stmt, root: Block, params: dict) -> tuple[int, Buffer] | None:
    """(parameter index, packed buffer) when ``item`` is a top-level nest holding one block
    that copies one parameter into a buffer the root allocates, covering all of it."""
    realizes = collect(item, BlockRealize)
    if len(realizes) != 1:
        return None
    block = realizes[0].block
    if block.init is not None or len(block.writes) != 1 or len(block.reads) != 1:
        return None
    packed = block.writes[0].buffer
    source = block.reads[0].buffer
    if source not in params or packed not in root.alloc_buffers or packed.scope != "global":
        return None
    loads = collect(block.body, BufferLoad)
    if not loads or any(ld.buffer is not source for ld in loads):
        return None
    # Trivially covering: the block's domain is the packed shape, and the loops around it
    # (all inside ``item``) run that many iterations, so every element is written once.
    shape = packed.const_shape
    doms = [iv.dom.extent for iv in block.iter_vars]
    if len(doms) != len(shape) or any(not isinstance(d, IntImm) or d.value != s
                                      for d, s in zip(doms, shape)):
        return None
    loops = collect(item, For)
    if any(not isinstance(lp.extent, IntImm) for lp in loops):
        return None
    if math.prod(lp.extent.value for lp in loops) != math.prod(shape):
        return None
    return params[source], packed


def split_packing(func: PrimFunc, constant_params) -> tuple[PrimFunc, list[PackedParam]]:
    """Split the packing of the parameters at ``constant_params`` (indices) off ``func``, a
    scheduled function with blocks (not lowered).  Returns the main function and one
    PackedParam per parameter split off (none: ``func`` itself and an empty list)."""
    root = _root(func)
    if root is None or root.init is not None:
        return func, []
    params = {buf: k for k, buf in enumerate(func.params) if k in set(constant_params)}
    items = _items(root.body)
    found: dict[int, tuple[int, Buffer]] = {}
    for pos, item in enumerate(items):
        hit = _full_packing_nest(item, root, params)
        if hit is not None and all(other[0] != hit[0] for other in found.values()):
            found[pos] = hit
    if not found:
        return func, []
    # The original parameter must have no other reader: the main function will not get it.
    rest = [item for pos, item in enumerate(items) if pos not in found]
    read_elsewhere = {ld.buffer for item in rest for ld in collect(item, BufferLoad)}
    found = {pos: hit for pos, hit in found.items()
             if func.params[hit[0]] not in read_elsewhere}
    if not found:
        return func, []

    new_params = list(func.params)
    packs = []
    for pos, (index, packed) in sorted(found.items(), key=lambda kv: kv[1][0]):
        new_params[index] = packed
        pack_root = Block("root", (), (), (), items[pos])
        pack_body = BlockRealize((), IntImm(1, "bool"), pack_root)
        pack = PrimFunc((func.params[index], packed), pack_body,
                        f"{func.name}_pack_{func.params[index].name}", func.attrs)
        packs.append(PackedParam(index, pack))
    hoisted = {hit[1] for hit in found.values()}
    main_root = replace(root, body=seq(*rest),
                        alloc_buffers=tuple(b for b in root.alloc_buffers if b not in hoisted))
    main = PrimFunc(tuple(new_params), replace(func.body, block=main_root), func.name,
                    func.attrs)
    return main, packs
