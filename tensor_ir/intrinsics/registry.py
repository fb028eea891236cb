"""Tensor intrinsics by name: a description (a PrimFunc computing one tile) and an implementation.

    A = te.placeholder((4,), "uint8", name="A")
    B = te.placeholder((16, 4), "int8", name="B")
    k = te.reduce_axis(4, name="k")
    C = te.compute((16,), lambda i: te.sum(A[k].astype("int32") * B[i, k].astype("int32"),
                                           axis=k), name="C")
    TensorIntrin.register("my_dot", te.create_prim_func([A, B, C]), ExternCImpl("my_dot", lib))

The description states one *update* of the tile: a perfect loop nest (constant extents from 0)
around one block whose body is a single store, every buffer indexed by loop variables, one per
dimension.  Its init, if ``te.sum`` made one, is not part of the intrinsic: the accumulator is
zeroed outside it (``decompose_reduction``), which is what matrix instructions do.

Implementations:

- :class:`LLVMImpl`: LLVM IR emitted in place of the tile (a sequence of LLVM intrinsics such
  as ``llvm.x86.avx512.vpdpbusd.512``), for one architecture and a set of target features.
  It sees one pointer per operand, so every operand tile must be contiguous.
- :class:`ExternCImpl`: a call to a C function (an accelerator instruction's functional model,
  a vendor micro-kernel) with, per operand, the pointer to the tile's first element followed by
  its element strides (one ``int64_t`` per description dimension).  The shared library that
  defines the symbol is loaded into the process before a kernel calling it is JIT-compiled.
- :class:`ReferenceImpl`: the description's own loops; what the interpreter runs for every
  intrinsic, and a way to develop a description before its instruction exists.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..buffer import Buffer
from ..errors import TensorIRError
from ..expr import BufferLoad, IntImm, Var
from ..func import PrimFunc
from ..stmt import (
    SERIAL,
    Block,
    BlockRealize,
    BufferStore,
    For,
    SeqStmt,
    Stmt,
    TensorIntrinCall,
)
from ..visitor import collect, substitute, transform

__all__ = [
    "EmitContext",
    "ExternCImpl",
    "IntrinsicError",
    "LLVMImpl",
    "ReferenceImpl",
    "TensorIntrin",
    "TileDescription",
    "expand",
    "freeze_builtins",
    "get",
    "install",
    "libraries_of",
    "load_libraries",
    "names",
    "operand_strides",
    "portable",
    "portables",
    "register",
    "used_in",
]


class IntrinsicError(TensorIRError, ValueError):
    """A tensor intrinsic is unknown, or its description or implementation is malformed."""


# ---------------------------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------------------------

@dataclass
class EmitContext:
    """What an :class:`LLVMImpl` emitter gets: the llvmlite ``builder`` positioned where the
    tile goes, ``pointers`` (one opaque pointer per description parameter, to the tile's first
    element, in the description's parameter order) and ``declare(name, ret, args)``, which
    declares a function (an LLVM intrinsic) in the module once and returns it."""

    builder: object
    pointers: tuple
    declare: Callable


class Implementation:
    """Base of the implementation kinds."""

    #: Whether every operand tile must be dense in memory (row-major, no gaps).
    contiguous: bool = False


@dataclass(frozen=True)
class LLVMImpl(Implementation):
    """LLVM IR emitted in place of the tile by ``emit(ctx: EmitContext)``.  ``arch`` names the
    triple architectures it is valid for (``("x86_64",)``); ``features`` the LLVM target
    features the target must have (``("+avx512vnni",)``): code generation refuses other
    targets with a BuildError, because LLVM aborts the process on an intrinsic the target
    cannot select."""

    emit: Callable
    arch: tuple
    features: tuple = ()
    contiguous = True


@dataclass(frozen=True)
class ExternCImpl(Implementation):
    """A call ``void symbol(T0 *p0, int64_t s0_0, ..., T1 *p1, ...)``: per description
    parameter the pointer to the tile's first element and its element strides, one per
    description dimension.  ``library`` is the shared library defining ``symbol`` (None: the
    process or the link provides it)."""

    symbol: str
    library: str | None = None


@dataclass(frozen=True)
class ReferenceImpl(Implementation):
    """The description's own loop nest, on the program's buffers."""


# ---------------------------------------------------------------------------------------------
# Descriptions
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TileDescription:
    """A description in the form ``tensorize`` matches against: the tile's loop variables
    (outer to inner) with their extents, the update store written in those variables, the
    description's parameters and which of them the update writes."""

    loops: tuple    # Var
    extents: tuple  # int
    store: BufferStore
    params: tuple   # Buffer
    written: tuple  # bool

    def dims_of(self, buffer: Buffer) -> tuple:
        """The loop positions indexing each dimension of ``buffer``."""
        return _dims_of(self.store, self.loops, buffer)


def _dims_of(store: BufferStore, loops: tuple, buffer: Buffer) -> tuple:
    for access in [store] + collect(store.value, BufferLoad):
        if access.buffer is buffer:
            return tuple(loops.index(i) for i in access.indices)
    raise IntrinsicError(f"buffer {buffer.name} is not accessed by the description")


def describe(func: PrimFunc, name: str) -> TileDescription:
    """Check that ``func`` is a tile description (see the module text) and take it apart."""
    what = f"tensor intrinsic {name}"
    if not isinstance(func, PrimFunc):
        raise IntrinsicError(f"{what}: the description must be a PrimFunc, got "
                             f"{type(func).__name__}")
    body = func.body
    if isinstance(body, BlockRealize) and not body.block.iter_vars:
        # The root block create_prim_func makes: it must allocate nothing (a tile has no
        # intermediate buffers).
        if body.block.alloc_buffers:
            raise IntrinsicError(f"{what}: the description allocates intermediate buffers; "
                                 f"describe one stage")
        body = body.block.body
    loops: list = []
    while isinstance(body, For):
        if not (isinstance(body.min, IntImm) and body.min.value == 0
                and isinstance(body.extent, IntImm) and body.extent.value >= 1):
            raise IntrinsicError(f"{what}: loop {body.loop_var.name} of the description needs "
                                 f"a constant extent starting at 0")
        loops.append(body)
        body = body.body
    if not isinstance(body, BlockRealize):
        kind = "several statements" if isinstance(body, SeqStmt) else type(body).__name__
        raise IntrinsicError(f"{what}: the description must be one perfect loop nest around "
                             f"one block, found {kind}")
    block: Block = body.block
    if not (isinstance(body.predicate, IntImm) and body.predicate.value):
        raise IntrinsicError(f"{what}: block {block.name} of the description is guarded by "
                             f"{body.predicate}; a tile has no partial iterations")
    if not isinstance(block.body, BufferStore):
        raise IntrinsicError(f"{what}: block {block.name} of the description must be one store")
    mapping = {iv.var: v for iv, v in zip(block.iter_vars, body.iter_values)}
    store = substitute(block.body, mapping)
    loop_vars = tuple(lp.loop_var for lp in loops)
    for access in [store] + collect(store.value, BufferLoad):
        buf = access.buffer
        if buf not in func.params:
            raise IntrinsicError(f"{what}: {buf.name} is not a parameter of the description")
        seen = []
        for index in access.indices:
            if not (isinstance(index, Var) and index in loop_vars) or index in seen:
                raise IntrinsicError(
                    f"{what}: {buf.name} is indexed with {index}; index every dimension of a "
                    f"description's buffer with its own loop variable")
            seen.append(index)
    used = {b for b in [store.buffer] + [ld.buffer for ld in collect(store.value, BufferLoad)]}
    for buf in func.params:
        if buf not in used:
            raise IntrinsicError(f"{what}: parameter {buf.name} is not used by the description")
        extents = tuple(loops[d].extent.value for d in _dims_of(store, loop_vars, buf))
        if tuple(buf.const_shape) != extents:
            raise IntrinsicError(f"{what}: {buf.name} has shape {buf.const_shape}, which is "
                                 f"not the extents of the loops indexing it")
    return TileDescription(loop_vars, tuple(lp.extent.value for lp in loops), store,
                           tuple(func.params), tuple(b is store.buffer for b in func.params))


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorIntrin:
    """A registered intrinsic: ``name``, its description ``desc`` (a PrimFunc), the
    implementation ``impl`` and ``tile``, the description taken apart."""

    name: str
    desc: PrimFunc
    impl: Implementation
    tile: TileDescription = field(repr=False, compare=False)

    @staticmethod
    def register(name: str, desc: PrimFunc, impl: Implementation,
                 override: bool = False) -> TensorIntrin:
        return register(name, desc, impl, override)

    @staticmethod
    def get(name: str) -> TensorIntrin:
        return get(name)


_REGISTRY: dict[str, TensorIntrin] = {}
_LOCK = threading.Lock()


def register(name: str, desc: PrimFunc, impl: Implementation,
             override: bool = False) -> TensorIntrin:
    """Register intrinsic ``name``.  Registering a name twice is an error unless ``override``
    (a trace names its intrinsics, so a name must keep meaning one computation)."""
    if not isinstance(name, str) or not name:
        raise IntrinsicError(f"a tensor intrinsic needs a non-empty name, got {name!r}")
    if not isinstance(impl, Implementation):
        raise IntrinsicError(f"tensor intrinsic {name}: implementation must be an LLVMImpl, "
                             f"ExternCImpl or ReferenceImpl, got {type(impl).__name__}")
    intrin = TensorIntrin(name, desc, impl, describe(desc, name))
    with _LOCK:
        if name in _REGISTRY and not override:
            raise IntrinsicError(f"tensor intrinsic {name!r} is already registered")
        _REGISTRY[name] = intrin
    return intrin


def get(name: str) -> TensorIntrin:
    intrin = _REGISTRY.get(name)
    if intrin is None:
        raise IntrinsicError(f"unknown tensor intrinsic {name!r}; registered: "
                             f"{', '.join(sorted(_REGISTRY)) or 'none'}")
    return intrin


def names() -> list[str]:
    return sorted(_REGISTRY)


# ---------------------------------------------------------------------------------------------
# Registrations other processes need
# ---------------------------------------------------------------------------------------------
#
# Build workers, measurement workers and cluster nodes are separate interpreters: they know the
# built-in intrinsics (registered when this package is imported) and nothing a user registered
# at run time.  A candidate tensorized with such an intrinsic therefore carries its definition
# as plain data (`portable`), which the worker registers (`install`) before building.

# Names registered by the package itself on import; every interpreter has them.
_BUILTIN: frozenset = frozenset()


def freeze_builtins() -> None:
    """Record the intrinsics registered so far as built in (called once, on import)."""
    global _BUILTIN
    _BUILTIN = frozenset(_REGISTRY)


def used_in(func) -> list[str]:
    """Names of the intrinsics tensorized in ``func`` (a PrimFunc or a statement), in
    first-use order."""
    body = func.body if isinstance(func, PrimFunc) else func
    return list(dict.fromkeys(call.intrin for call in collect(body, TensorIntrinCall)))


def portable(name: str) -> dict:
    """The definition of registered intrinsic ``name`` as JSON-able data that :func:`install`
    registers in another process.  An LLVM emitter travels as ``module:qualname`` and must be
    importable there: one defined in ``__main__`` (a script or a notebook) or inside a
    function is refused with an IntrinsicError that says so."""
    intrin = get(name)
    impl = intrin.impl
    if isinstance(impl, ExternCImpl):
        spec = {"kind": "extern_c", "symbol": impl.symbol, "library": impl.library}
    elif isinstance(impl, ReferenceImpl):
        spec = {"kind": "reference"}
    elif isinstance(impl, LLVMImpl):
        module = getattr(impl.emit, "__module__", None)
        qualname = getattr(impl.emit, "__qualname__", "")
        if not module or module == "__main__" or not qualname or "<" in qualname:
            where = "in __main__" if module == "__main__" else "inside a function or as a lambda"
            raise IntrinsicError(
                f"tensor intrinsic {name!r}: its LLVM emitter {qualname or impl.emit!r} is "
                f"defined {where}, so the build worker processes cannot import it; define the "
                f"emitter at the top level of an importable module (or build in this process "
                f"with autotune.build)")
        spec = {"kind": "llvm", "emit": f"{module}:{qualname}", "arch": list(impl.arch),
                "features": list(impl.features)}
    else:
        raise IntrinsicError(f"tensor intrinsic {name!r}: an implementation of kind "
                             f"{type(impl).__name__} cannot be sent to another process")
    return {"name": name, "desc": intrin.desc.to_json(), "impl": spec}


def portables(func) -> list[dict]:
    """:func:`portable` of every intrinsic ``func`` uses that is not built in."""
    with _LOCK:
        only_builtin = _REGISTRY.keys() <= _BUILTIN
    if only_builtin:
        return []  # nothing registered at run time: no walk of the program per candidate
    return [portable(name) for name in used_in(func) if name not in _BUILTIN]


def install(spec: dict) -> TensorIntrin:
    """Register the intrinsic :func:`portable` described, replacing a different definition
    under the same name (a long-lived worker may have served another tuning run)."""
    import importlib

    name = spec["name"]
    current = _REGISTRY.get(name)
    if current is not None:
        try:
            if portable(name) == spec:
                return current
        except IntrinsicError:
            pass  # not comparable: replace it with the definition the parent sent
    impl_spec = spec["impl"]
    kind = impl_spec["kind"]
    if kind == "extern_c":
        impl = ExternCImpl(impl_spec["symbol"], impl_spec.get("library"))
    elif kind == "reference":
        impl = ReferenceImpl()
    elif kind == "llvm":
        module, _, qualname = impl_spec["emit"].partition(":")
        try:
            emit = importlib.import_module(module)
            for part in qualname.split("."):
                emit = getattr(emit, part)
        except (ImportError, AttributeError) as err:
            raise IntrinsicError(f"tensor intrinsic {name!r}: cannot import its LLVM emitter "
                                 f"{impl_spec['emit']} in this process: {err}") from err
        impl = LLVMImpl(emit, tuple(impl_spec["arch"]), tuple(impl_spec["features"]))
    else:
        raise IntrinsicError(f"tensor intrinsic {name!r}: unknown implementation kind {kind!r}")
    return register(name, PrimFunc.from_json(spec["desc"]), impl, override=True)


# ---------------------------------------------------------------------------------------------
# Tiles in programs
# ---------------------------------------------------------------------------------------------

def _checked(call: TensorIntrinCall) -> TensorIntrin:
    intrin = get(call.intrin)
    tile = intrin.tile
    shapes = tuple(tuple(b.const_shape) for b in tile.params)
    if tuple(tuple(e) for e in call.extents) != shapes:
        raise IntrinsicError(f"a tile tensorized with {call.intrin} has operand shapes "
                             f"{call.extents}, but the intrinsic registered now has {shapes}")
    return intrin


def expand(call: TensorIntrinCall) -> Stmt:
    """The tile as plain loops over the program's buffers: the description's update with each
    description access ``D[i, k]`` moved to ``P[origin + i * step_i + k * step_k]``.  This is
    the meaning of a TensorIntrinCall (what the interpreter runs)."""
    intrin = _checked(call)
    tile = intrin.tile
    fresh = {v: Var(v.name, v.dtype) for v in tile.loops}
    position = {buf: q for q, buf in enumerate(tile.params)}

    def moved(buf, indices):
        q = position[buf]
        origin = call.operands[q]
        out = list(origin.indices)
        for d, index in enumerate(indices):
            for p, step in enumerate(call.steps[q][d]):
                if step:
                    out[p] = out[p] + fresh[index] * step
        return origin.buffer, tuple(out)

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer in position:
            return BufferLoad(*moved(n.buffer, n.indices))
        return None

    value = transform(tile.store.value, fn)
    value = substitute(value, fresh)
    buf, indices = moved(tile.store.buffer, tile.store.indices)
    stmt: Stmt = BufferStore(buf, value, indices)
    for v, extent in reversed(list(zip(tile.loops, tile.extents))):
        stmt = For(fresh[v], IntImm(0, v.dtype), IntImm(extent, v.dtype), SERIAL, stmt)
    return stmt


def operand_strides(call: TensorIntrinCall, q: int) -> tuple:
    """Element strides of operand ``q``'s tile in its (row-major) buffer, one per description
    dimension, from the buffer's current shape."""
    buf = call.operands[q].buffer
    shape = buf.const_shape
    row = [1] * len(shape)
    for p in range(len(shape) - 2, -1, -1):
        row[p] = row[p + 1] * shape[p + 1]
    return tuple(sum(s * r for s, r in zip(step, row)) for step in call.steps[q])


def dense_strides(extents: tuple) -> tuple:
    """Row-major strides of a dense tile of ``extents``."""
    out = [1] * len(extents)
    for d in range(len(extents) - 2, -1, -1):
        out[d] = out[d + 1] * extents[d + 1]
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Shared libraries of external implementations
# ---------------------------------------------------------------------------------------------

_LOADED: set = set()


def libraries_of(func) -> list[str]:
    """The shared libraries the external intrinsics tensorized in ``func`` (a PrimFunc or a
    statement) come from, in first-use order."""
    with _LOCK:
        registered = tuple(_REGISTRY.values())
    if not any(isinstance(i.impl, ExternCImpl) and i.impl.library for i in registered):
        return []  # the usual case, checked without walking the program (once per candidate)
    body = func.body if isinstance(func, PrimFunc) else func
    out: list = []
    for call in collect(body, TensorIntrinCall):
        impl = get(call.intrin).impl
        if isinstance(impl, ExternCImpl) and impl.library and impl.library not in out:
            out.append(impl.library)
    return out


def load_libraries(paths) -> None:
    """Load shared libraries into the process so that JIT-compiled kernels resolve their
    symbols (llvmlite's ``load_library_permanently``; each path once)."""
    import llvmlite.binding as llvm

    from ..errors import BuildError

    for path in paths:
        with _LOCK:
            if path in _LOADED:
                continue
            try:
                llvm.load_library_permanently(path)
            except RuntimeError as err:
                raise BuildError(f"cannot load the shared library {path} of an external "
                                 f"tensor intrinsic: {err}") from err
            _LOADED.add(path)
