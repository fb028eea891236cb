"""Typed errors raised by the IR, algorithm definitions and code generation."""
from __future__ import annotations


class TensorIRError(Exception):
    """Base class of every error the IR raises."""


class DTypeError(TensorIRError, TypeError):
    """A dtype is unknown, or two operands of different dtypes meet without a cast."""


class TEError(TensorIRError, ValueError):
    """Wrong use of an algorithm definition; the message names the stage."""


class BuildError(TensorIRError, RuntimeError):
    """Lowering or code generation failed, or a built kernel was called wrongly."""


class LoweringError(BuildError):
    """The program cannot be lowered (for example an unsupported construct)."""


class KernelIndexError(TensorIRError, IndexError):
    """A compiled kernel read or wrote a buffer at an index taken from data (``A[I[i]]``)
    that lies outside the buffer; the kernel stopped and wrote nothing more.  ``buffer``,
    ``axis``, ``index`` and ``extent`` say where; ``kernel`` names the kernel, ``value`` the
    model value the buffer holds where a model ran it (else None)."""

    def __init__(self, kernel: str, buffer: str, axis: int, index: int, extent: int,
                 value: str | None = None):
        self.kernel, self.buffer, self.axis = kernel, buffer, axis
        self.index, self.extent, self.value = index, extent, value
        where = f"buffer {buffer!r}" + (f" (model value {value!r})" if value else "")
        super().__init__(f"kernel {kernel}: index {index} on axis {axis} of {where} is out "
                         f"of range [0, {extent}); the kernel stopped (its outputs are "
                         f"incomplete)")
