"""Navigation of scheduled PrimFuncs: find blocks and loops, their ancestors, and replace
subtrees by identity.  Shared by every primitive."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace as dc_replace

from tensor_ir.expr import BufferLoad, Var
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import Block, BlockRealize, For, SeqStmt, Stmt
from tensor_ir.visitor import collect, field_values, node_fields, transform

from .errors import ScheduleError


@dataclass
class Located:
    """A node and its ancestors (outermost first, starting at func.body)."""

    node: object
    path: list

    @property
    def loops(self) -> list[For]:
        """Enclosing loops, outer to inner, below the nearest enclosing block."""
        out = []
        for n in reversed(self.path):
            if isinstance(n, Block):
                break
            if isinstance(n, For):
                out.append(n)
        out.reverse()
        return out

    @property
    def parent_block(self) -> Block | None:
        for n in reversed(self.path):
            if isinstance(n, Block):
                return n
        return None


class _Index:
    """Where the blocks and loops of one PrimFunc are: built by one walk over its statements
    (the walk the lookups below used to repeat for every query) and kept per func object.

    ``realizes``: every BlockRealize (the root's too) in program order; ``by_name``: block
    name -> those of ``realizes`` with that name; ``loops``: id(loop var) -> the first For (in
    program order) over it; ``parent``: id(statement) -> its parent statement (None for the
    body), from which paths are read back on demand and which lets :func:`replace` rebuild
    only the path to a node; ``empty_seq``: whether some SeqStmt holds an empty SeqStmt
    (replace's cleanup then may touch nodes off that path, so it takes the full transform).

    A statement object occurring twice (a shared subtree) has no single path: such a function
    keeps ``parent`` None and answers from ``paths``, every visit's ancestors recorded as the
    walk goes (the general but slower form).
    """

    __slots__ = ("func", "realizes", "by_name", "loops", "parent", "paths", "empty_seq")

    def __init__(self, func: PrimFunc):
        self.func = func
        self.paths: dict[int, tuple] | None = None
        if not self._walk(func.body):
            self._walk_shared(func.body)

    def _reset(self) -> None:
        self.realizes: list = []
        self.by_name: dict[str, list] = {}
        self.loops: dict[int, object] = {}
        self.empty_seq = False

    def _note(self, n) -> None:
        if isinstance(n, BlockRealize):
            self.realizes.append(n)
            self.by_name.setdefault(n.block.name, []).append(n)
        elif isinstance(n, For):
            self.loops.setdefault(id(n.loop_var), n)
        elif isinstance(n, SeqStmt) and not self.empty_seq:
            self.empty_seq = any(isinstance(c, SeqStmt) and not c.stmts for c in n.stmts)

    def _walk(self, body) -> bool:
        """Pre-order walk recording parents; False when a statement occurs twice."""
        self._reset()
        parent: dict[int, object] = {id(body): None}
        stack = [body]
        note = self._note
        while stack:
            n = stack.pop()
            note(n)
            kids = stmt_children(n)
            if kids:
                for k in kids:
                    if id(k) in parent:
                        return False
                    parent[id(k)] = n
                kids.reverse()
                stack.extend(kids)
        self.parent = parent
        return True

    def _walk_shared(self, body) -> None:
        self._reset()
        self.parent = None
        paths: dict[int, tuple] = {}
        path: list = []

        def visit(n):
            # The first visit of a node is the one the lookups report (program order).
            paths.setdefault(id(n), tuple(path))
            self._note(n)
            path.append(n)
            for c in stmt_children(n):
                visit(c)
            path.pop()

        visit(body)
        self.paths = paths

    def path(self, node) -> list:
        """The ancestors of ``node`` (outermost first), at its first occurrence."""
        if self.parent is None:
            return list(self.paths[id(node)])
        out = []
        up = self.parent[id(node)]
        while up is not None:
            out.append(up)
            up = self.parent[id(up)]
        out.reverse()
        return out

    def located(self, node) -> Located:
        return Located(node, self.path(node))


def stmt_children(node) -> list:
    """The statements directly under statement ``node`` (what :func:`children` gives, kept
    to statements), in field order."""
    out = []
    for value in field_values(type(node))(node):
        if isinstance(value, Stmt):
            out.append(value)
        elif isinstance(value, tuple) and value:
            _stmts_in(value, out)
    return out


def _stmts_in(values: tuple, out: list) -> None:
    for v in values:
        if isinstance(v, Stmt):
            out.append(v)
        elif isinstance(v, tuple):
            _stmts_in(v, out)


# PrimFuncs are immutable and compare by identity, so an index stays valid for as long as its
# func lives; the entries hold their funcs, which keeps their ids from being reused.  A
# schedule queries the func it has just produced over and over (and the sampler tries many
# rewrites of one func), so a short most-recently-used list catches nearly every repeat.
_INDEX_CACHE: OrderedDict[int, _Index] = OrderedDict()
_INDEX_CACHE_SIZE = 16


def _index(func: PrimFunc) -> _Index:
    key = id(func)
    index = _INDEX_CACHE.get(key)
    if index is not None and index.func is func:
        _INDEX_CACHE.move_to_end(key)
        return index
    index = _Index(func)
    _INDEX_CACHE[key] = index
    while len(_INDEX_CACHE) > _INDEX_CACHE_SIZE:
        _INDEX_CACHE.popitem(last=False)
    return index


class IdentityMemo:
    """Results of a pure function of immutable IR, keyed by the identity of its arguments.

    The IR never changes in place, so equal identities mean equal answers.  Each entry holds
    its argument objects, so their ids cannot be reused while it is cached; the oldest entries
    go first once ``size`` is reached.  ``get`` returns :data:`MISS` when nothing is cached.
    """

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()

    def get(self, objects: tuple, extra: tuple = ()):
        key = tuple(map(id, objects)) + extra
        entry = self._entries.get(key)
        if entry is None or not all(a is b for a, b in zip(entry[0], objects)):
            return MISS
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, objects: tuple, extra: tuple, value) -> None:
        self._entries[tuple(map(id, objects)) + extra] = (objects, value)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


MISS = object()


def find_block(func: PrimFunc, name: str) -> Located:
    """The BlockRealize of the block called ``name`` (located, with its ancestors)."""
    index = _index(func)
    found = index.by_name.get(name)
    if not found:
        raise ScheduleError(f"no block named {name!r} in {func.name}")
    if len(found) > 1:
        raise ScheduleError(f"block name {name!r} is not unique in {func.name}")
    return index.located(found[0])


def find_loop(func: PrimFunc, loop_var: Var) -> Located:
    """The For whose loop variable is ``loop_var``."""
    index = _index(func)
    found = index.loops.get(id(loop_var))
    if found is None or found.loop_var is not loop_var:
        raise ScheduleError(f"loop {loop_var.name} is not in {func.name} (stale handle?)")
    return index.located(found)


def all_blocks(func: PrimFunc) -> list[Located]:
    """Every BlockRealize except the root's, in program order."""
    index = _index(func)
    return [index.located(n) for n in index.realizes
            if n.block.name != "root" and n is not func.body]


def child_blocks(func: PrimFunc, parent: str | None = None) -> list[str]:
    """Names of the blocks directly under block ``parent`` (the root when None)."""
    out = []
    for loc in all_blocks(func):
        pb = loc.parent_block
        pname = pb.name if pb is not None else None
        if (parent is None and pname in (None, "root")) or pname == parent:
            out.append(loc.node.block.name)
    return out


def _drop_empty(n):
    """A SeqStmt without its empty SeqStmt children (what deleting a statement leaves)."""
    if isinstance(n, SeqStmt) and any(isinstance(s, SeqStmt) and not s.stmts
                                      for s in n.stmts):
        return SeqStmt(tuple(s for s in n.stmts
                             if not (isinstance(s, SeqStmt) and not s.stmts)))
    return None


def _swap_child(parent, old, new):
    """``parent`` rebuilt with its one child ``old`` (in a field or a tuple field) replaced."""
    for name in node_fields(type(parent)):
        value = getattr(parent, name)
        if value is old:
            return dc_replace(parent, **{name: new})
        if isinstance(value, tuple):
            swapped = _swap_in_tuple(value, old, new)
            if swapped is not value:
                return dc_replace(parent, **{name: swapped})
    raise ScheduleError("internal: replaced node is not a child of its parent")


def _swap_in_tuple(items: tuple, old, new) -> tuple:
    for k, v in enumerate(items):
        if v is old:
            return items[:k] + (new,) + items[k + 1:]
        if isinstance(v, tuple):
            inner = _swap_in_tuple(v, old, new)
            if inner is not v:
                return items[:k] + (inner,) + items[k + 1:]
    return items


def replace(func: PrimFunc, old, new) -> PrimFunc:
    """Replace the node ``old`` (by identity) with ``new`` (a node, or None to delete it from a
    sequence)."""
    replacement = new if new is not None else SeqStmt(())
    index = _index(func)
    # NOTE: the index holds its function, so every statement it knows is alive, and a live
    # ``old`` with a known id is that statement.
    if index.parent is not None and not index.empty_seq and id(old) in index.parent:
        # The statement occurs once and no sequence elsewhere needs cleaning: rebuild only
        # its ancestors, innermost first, with the cleanup the full transform would apply to
        # them.  Everything off the path is unchanged either way.
        child_old, child_new = old, replacement
        for parent in reversed(index.path(old)):
            if child_new is child_old:
                return func.with_body(func.body)
            rebuilt = _swap_child(parent, child_old, child_new)
            cleaned = _drop_empty(rebuilt)
            child_old, child_new = parent, rebuilt if cleaned is None else cleaned
        return func.with_body(child_new)

    hit = False

    def fn(n):
        nonlocal hit
        if n is old:
            hit = True
            return replacement
        return _drop_empty(n)

    body = transform(func.body, fn)
    if not hit:
        raise ScheduleError("internal: node to replace not found")
    return func.with_body(body)


def block_reads(block: Block) -> set:
    bufs = {r.buffer for r in block.reads}
    for ld in collect(block.body, BufferLoad):
        bufs.add(ld.buffer)
    return bufs


def block_writes(block: Block) -> set:
    return {w.buffer for w in block.writes}


def producers(func: PrimFunc, name: str) -> list[str]:
    """Blocks (in program order) that write a buffer block ``name`` reads."""
    target = find_block(func, name).node.block
    reads = block_reads(target) - block_writes(target)
    return [loc.node.block.name for loc in all_blocks(func)
            if loc.node.block is not target and block_writes(loc.node.block) & reads]


def consumers(func: PrimFunc, name: str) -> list[str]:
    """Blocks (in program order) that read a buffer block ``name`` writes."""
    target = find_block(func, name).node.block
    writes = block_writes(target)
    return [loc.node.block.name for loc in all_blocks(func)
            if loc.node.block is not target
            and (block_reads(loc.node.block) - block_writes(loc.node.block)) & writes]
