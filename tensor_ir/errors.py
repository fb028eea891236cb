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
