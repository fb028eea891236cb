"""Buffer: a named, typed, multi-dimensional array in a storage scope."""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import dtype as dt
from .errors import TensorIRError
from .expr import BufferLoad, IntImm, Node, PrimExpr, const

SCOPES = ("global", "local", "shared")

# A tagged local scope, "local.<tag>": storage private to the code that allocates it, as
# "local" is, in a memory the tag names (an accelerator's scratchpad: "local.inp_buffer").
# Code generation treats it as "local"; a target's verifier and timing model read the tag.
_TAGGED_LOCAL = re.compile(r"local\.[A-Za-z_][A-Za-z0-9_]*")


def is_scope(scope) -> bool:
    """Whether ``scope`` is a storage scope: one of SCOPES or a tagged ``local.<tag>``."""
    return isinstance(scope, str) and (scope in SCOPES or bool(_TAGGED_LOCAL.fullmatch(scope)))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Buffer(Node):
    """A buffer definition.  Compares by identity, like ``Var``: two buffers with one name are
    still two buffers.  ``shape`` holds index expressions (usually constants)."""

    name: str
    shape: tuple
    dtype: str = "float32"
    scope: str = "global"

    def __post_init__(self):
        if not is_scope(self.scope):
            raise TensorIRError(f"buffer {self.name}: unknown scope {self.scope!r}")

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        dims = ", ".join(str(s.value) if isinstance(s, IntImm) else "?" for s in self.shape)
        return f"Buffer({self.name}: {self.dtype}[{dims}], {self.scope})"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def const_shape(self) -> tuple[int, ...]:
        """The shape as Python ints; raises when a dimension is not a constant."""
        out = []
        for s in self.shape:
            if not isinstance(s, IntImm):
                raise TensorIRError(f"buffer {self.name} has a non-constant shape {self.shape}")
            out.append(s.value)
        return tuple(out)

    @property
    def size(self) -> int:
        n = 1
        for s in self.const_shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)

    def load(self, *indices) -> BufferLoad:
        return self[indices]

    def __getitem__(self, indices) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise TensorIRError(
                f"buffer {self.name} has rank {len(self.shape)} but was indexed with "
                f"{len(indices)} indices"
            )
        return BufferLoad(self, tuple(_index(i) for i in indices))

    def with_scope(self, scope: str) -> "Buffer":
        return Buffer(self.name, self.shape, self.dtype, scope)


def _index(i) -> PrimExpr:
    e = const(i) if not isinstance(i, PrimExpr) else i
    if not dt.is_int(e.dtype):
        raise TensorIRError(f"buffer index must be an integer expression, got {e.dtype}")
    return e


def decl_buffer(shape, dtype="float32", name="buf", scope="global") -> Buffer:
    """Create a buffer; ``shape`` may hold Python ints or index expressions."""
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    return Buffer(name, tuple(const(s, dt.INDEX_DTYPE) if not isinstance(s, PrimExpr) else s
                              for s in shape), dt.canonical(dtype), scope)
