"""Cache and storage primitives: cache_read, cache_write, set_scope, storage_align."""
from __future__ import annotations

from dataclasses import replace as dc_replace

from tensor_ir.buffer import SCOPES, Buffer, is_scope
from tensor_ir.expr import BufferLoad, IntImm, binary
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BufferRegion, BufferStore, Range, Stmt, seq
from tensor_ir.visitor import substitute, transform

from .. import tree
from ..errors import check
from . import blocks as B
from .regions import loop_ranges, relax

__all__ = ["cache_read", "cache_write", "set_scope", "storage_align", "copy_region",
           "check_scope"]


def check_scope(scope: str, what: str) -> None:
    """Raise ScheduleError (naming the primitive ``what``) unless ``scope`` is a storage scope."""
    check(is_scope(scope), f"{what}: unknown storage scope {scope!r}; expected one of "
                           f"{', '.join(SCOPES)} or a tagged local.<tag>")


def copy_region(loc: tree.Located, buffer, accesses: str) -> list[tuple[int, int]]:
    """Constant ``(start, extent)`` per dimension of ``buffer`` covering what the located block
    reads (``accesses="reads"``) or writes (``"writes"``) over all its loops in the scope; a
    dimension that cannot be bounded by constants is taken whole."""
    realize = loc.node
    blk: Block = realize.block
    mapping = {iv.var: v for iv, v in zip(blk.iter_vars, realize.iter_values)}
    ranges = loop_ranges(loc.loops)
    regions = blk.reads if accesses == "reads" else blk.writes
    shape = buffer.const_shape
    out = []
    for d, size in enumerate(shape):
        lo_all, hi_all = None, None
        for r in regions:
            if r.buffer is not buffer:
                continue
            rng = r.region[d]
            lo = relax(substitute(rng.min, mapping), ranges) if ranges is not None else None
            hi = relax(substitute(binary("-", binary("+", rng.min, rng.extent), 1), mapping),
                       ranges) if ranges is not None else None
            if lo is None or hi is None or not isinstance(lo[0], IntImm) or \
                    not isinstance(hi[1], IntImm):
                lo_all, hi_all = 0, size - 1
                break
            lo_v, hi_v = max(lo[0].value, 0), min(hi[1].value, size - 1)
            lo_all = lo_v if lo_all is None else min(lo_all, lo_v)
            hi_all = hi_v if hi_all is None else max(hi_all, hi_v)
        if lo_all is None:
            lo_all, hi_all = 0, size - 1
        out.append((lo_all, max(hi_all - lo_all + 1, 0)))
    return out


def _copy_nest(name: str, src, dst, region: list[tuple[int, int]]) -> Stmt:
    iter_vars = [B.spatial_iter(f"v{d}", ext) for d, (_, ext) in enumerate(region)]
    iter_vars = [dc_replace(iv, dom=Range(IntImm(start), IntImm(ext)))
                 for iv, (start, ext) in zip(iter_vars, region)]
    idx = tuple(iv.var for iv in iter_vars)
    point = tuple(Range(v, IntImm(1)) for v in idx)
    body = BufferStore(dst, BufferLoad(src, idx), idx)
    nest, _ = B.fresh_nest(name, iter_vars, body, (BufferRegion(src, point),),
                           (BufferRegion(dst, point),), [ext for _, ext in region],
                           [IntImm(start) for start, _ in region], [])
    return nest


def _new_buffer(func: PrimFunc, like: Buffer, scope: str, suffix: str) -> Buffer:
    name = B.unique_name([b.name for b in B.all_buffers(func)], f"{like.name}_{suffix}")
    return Buffer(name, like.shape, like.dtype, scope)


def _resolve(items: list, blk_name: str, scope_name: str, what: str) -> int:
    idx = B.child_index(items, {blk_name})
    check(bool(idx), f"{what}: internal: block {blk_name} is not in scope {scope_name}")
    return idx[0]


def cache_read(func: PrimFunc, block: str, read_buffer_index: int,
               scope: str) -> tuple[PrimFunc, str]:
    """Read the ``read_buffer_index``-th buffer that ``block`` reads through a cache in
    ``scope``: a new buffer, and a copy block placed in the block's scope right before the loop
    nest holding ``block``.  Only ``block`` is redirected to the cache.  Returns the new function
    and the copy block's name (``<buffer>_<scope>``).

    Preconditions: the index is in range; ``block`` does not also write that buffer; no writer
    of the buffer sits in the same top-level loop nest as ``block``.

    Before / after (cache_read(C, 0, "local"))::

        for i, j: C[i, j] = A[i, j] + 1     =>   for ax0, ax1: A_local[v0, v1] = A[v0, v1]
                                                 for i, j: C[i, j] = A_local[i, j] + 1
    """
    what = "cache_read"
    check_scope(scope, what)
    loc = tree.find_block(func, block)
    blk = loc.node.block
    check(0 <= read_buffer_index < len(blk.reads),
          f"{what}: block {block} reads {len(blk.reads)} buffers; index {read_buffer_index} is "
          f"out of range")
    src = blk.reads[read_buffer_index].buffer
    check(all(w.buffer is not src for w in blk.writes),
          f"{what}: block {block} also writes {src.name}; use cache_write for it")
    scope_blk = B.scope_block(loc)
    items = B.seq_children(scope_blk.body)
    pos = _resolve(items, block, scope_blk.name, what)
    writer_pos = B.child_index(items, set(B.writers(func, src)))
    check(not writer_pos or writer_pos[-1] < pos,
          f"{what}: buffer {src.name} is written in the same loop nest as block {block}")
    # A tagged scope's dot is no part of a name ("local.acc_buffer" names A_local_acc_buffer).
    cache = _new_buffer(func, src, scope, scope.replace(".", "_"))
    name = B.unique_name(B.block_names(func), f"{src.name}_{scope.replace('.', '_')}")
    nest = _copy_nest(name, src, cache, copy_region(loc, src, "reads"))
    new_blk = B.replace_buffer(blk, src, cache)
    items = [transform(s, lambda n: new_blk if n is blk else None) for s in items]
    items.insert(pos, nest)
    new_scope = dc_replace(scope_blk, body=seq(*items),
                           alloc_buffers=scope_blk.alloc_buffers + (cache,))
    return tree.replace(func, scope_blk, new_scope), name


def cache_write(func: PrimFunc, block: str, write_buffer_index: int,
                scope: str) -> tuple[PrimFunc, str]:
    """Make ``block`` compute into a cache in ``scope`` and add a block, right after the loop
    nest holding ``block``, that writes the cache back.  Returns the new function and the
    write-back block's name (``<buffer>_<scope>``).

    Preconditions: the index is in range; ``block`` is the only writer of the buffer; no other
    reader of the buffer sits in the same top-level loop nest as ``block``.

    Before / after (cache_write(C, 0, "local"))::

        for i, j, k: C[i, j] += A[i, k] * B[k, j]
          =>  for i, j, k: C_local[i, j] += A[i, k] * B[k, j]
              for ax0, ax1: C[v0, v1] = C_local[v0, v1]
    """
    what = "cache_write"
    check_scope(scope, what)
    loc = tree.find_block(func, block)
    blk = loc.node.block
    check(0 <= write_buffer_index < len(blk.writes),
          f"{what}: block {block} writes {len(blk.writes)} buffers; index "
          f"{write_buffer_index} is out of range")
    dst = blk.writes[write_buffer_index].buffer
    ws = B.writers(func, dst)
    check(ws == [block], f"{what}: block {block} is not the only writer of {dst.name} "
                         f"(writers: {', '.join(ws)})")
    scope_blk = B.scope_block(loc)
    items = B.seq_children(scope_blk.body)
    pos = _resolve(items, block, scope_blk.name, what)
    reader_pos = B.child_index(items, set(B.readers(func, dst)))
    check(pos not in reader_pos,
          f"{what}: buffer {dst.name} is read in the same loop nest as block {block}")
    cache = _new_buffer(func, dst, scope, scope.replace(".", "_"))
    name = B.unique_name(B.block_names(func), f"{dst.name}_{scope.replace('.', '_')}")
    nest = _copy_nest(name, cache, dst, copy_region(loc, dst, "writes"))
    new_blk = B.replace_buffer(blk, dst, cache)
    items = [transform(s, lambda n: new_blk if n is blk else None) for s in items]
    items.insert(pos + 1, nest)
    new_scope = dc_replace(scope_blk, body=seq(*items),
                           alloc_buffers=scope_blk.alloc_buffers + (cache,))
    return tree.replace(func, scope_blk, new_scope), name


def _allocated_output(func: PrimFunc, block: str, buffer_index: int, what: str):
    loc = tree.find_block(func, block)
    blk = loc.node.block
    check(0 <= buffer_index < len(blk.writes),
          f"{what}: block {block} writes {len(blk.writes)} buffers; index {buffer_index} is "
          f"out of range")
    buf = blk.writes[buffer_index].buffer
    check(buf not in func.params,
          f"{what}: {buf.name} is a function parameter; its storage is the caller's")
    return blk, buf


def set_scope(func: PrimFunc, block: str, buffer_index: int, scope: str) -> PrimFunc:
    """Change the storage scope of the ``buffer_index``-th buffer ``block`` writes.

    Preconditions: the buffer is allocated inside the function (not a parameter); the scope is
    one of global/local/shared.

    Before / after (set_scope(B, 0, "shared"))::

        alloc B: float32[16] (global)    =>    alloc B: float32[16] (shared)
    """
    what = "set_scope"
    check_scope(scope, what)
    _, buf = _allocated_output(func, block, buffer_index, what)
    if buf.scope == scope:
        return func
    return func.with_body(B.replace_buffer(func.body, buf, buf.with_scope(scope)))


def storage_align(func: PrimFunc, block: str, buffer_index: int, axis: int, factor: int,
                  offset: int) -> PrimFunc:
    """Pad the allocation of the ``buffer_index``-th buffer ``block`` writes so that the stride
    of dimension ``axis`` is ``offset`` modulo ``factor`` (e.g. to avoid shared-memory bank
    conflicts).  The padding is done in the allocation's shape (the dimension after ``axis``
    grows), so lowering and code generation need nothing new; the request is also recorded on
    the block as the annotation ``buffer_dim_align`` = ((buffer_index, axis, factor, offset),).

    Preconditions: the buffer is allocated in the function; ``axis`` is a dimension other than
    the last (the last has stride 1); ``factor > 0`` and ``0 <= offset < factor``; some padding
    reaches the requested residue.

    Before / after (storage_align(B, 0, axis=0, factor=8, offset=1))::

        alloc B: float32[16, 16]    =>    alloc B: float32[16, 17]    (row stride 17 % 8 == 1)
    """
    what = "storage_align"
    blk, buf = _allocated_output(func, block, buffer_index, what)
    ndim = buf.ndim
    check(-ndim <= axis < ndim, f"{what}: axis {axis} is out of range for {buf.name} of rank "
                                f"{ndim}")
    axis = axis % ndim
    check(axis < ndim - 1, f"{what}: axis {axis} of {buf.name} is the innermost dimension, "
                           f"whose stride is 1 and cannot be padded")
    check(isinstance(factor, int) and factor > 0, f"{what}: factor must be a positive int, got "
                                                  f"{factor!r}")
    check(isinstance(offset, int) and 0 <= offset < factor,
          f"{what}: offset must satisfy 0 <= offset < factor, got {offset!r}")
    shape = list(buf.const_shape)
    inner = 1
    for s in shape[axis + 2:]:
        inner *= s
    base = shape[axis + 1]
    padded = next((s for s in range(base, base + factor) if (s * inner) % factor == offset),
                  None)
    check(padded is not None,
          f"{what}: no padding of dimension {axis + 1} of {buf.name} makes the stride of "
          f"dimension {axis} equal {offset} modulo {factor}")
    key = "buffer_dim_align"
    record = tuple(blk.annotation(key, ())) + ((buffer_index, axis, factor, offset),)
    annotations = tuple((k, v) for k, v in blk.annotations if k != key) + ((key, record),)
    func = tree.replace(func, blk, dc_replace(blk, annotations=annotations))
    if padded == base:
        return func
    shape[axis + 1] = padded
    new_buf = Buffer(buf.name, tuple(IntImm(s) for s in shape), buf.dtype, buf.scope)
    return func.with_body(B.replace_buffer(func.body, buf, new_buf))

