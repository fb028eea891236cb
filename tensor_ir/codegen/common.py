"""What every code generator (LLVM, GPU C) needs of a buffer: its constant shape and the
row-major element offset of an access."""
from __future__ import annotations

from ..buffer import Buffer
from ..errors import BuildError
from ..expr import IntImm, PrimExpr, binary, cast

__all__ = ["const_shape", "flat_index"]


def const_shape(buf: Buffer, backend: str, what: str = "") -> tuple[int, ...]:
    """The shape as ints; a BuildError naming the backend when a dimension is not constant."""
    shape = []
    for s in buf.shape:
        if not isinstance(s, IntImm):
            raise BuildError(f"{backend}: {what + ' ' if what else ''}buffer {buf.name}: shape "
                             f"{s} is not a constant; dynamic shapes are not supported")
        shape.append(s.value)
    return tuple(shape)


def flat_index(buf: Buffer, indices: tuple, backend: str) -> PrimExpr:
    """Row-major element offset of ``buf[indices]`` as an int64 expression."""
    if len(indices) != len(buf.shape):
        raise BuildError(f"{backend}: buffer {buf.name} of rank {len(buf.shape)} accessed "
                         f"with {len(indices)} indices")
    flat = IntImm(0)
    for idx, ext in zip(indices, buf.shape):
        flat = binary("+", binary("*", flat, cast("int64", ext)), cast("int64", idx))
    return flat
