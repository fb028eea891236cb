"""Errors of model graphs and their frontends."""
from __future__ import annotations

from tensor_ir.errors import TensorIRError

__all__ = ["GraphError", "FrontendError", "UnsupportedOperatorError"]


class GraphError(TensorIRError, ValueError):
    """A malformed model graph: unknown value, wrong arity, shapes that do not fit."""


class FrontendError(GraphError):
    """A model file or object that cannot be imported."""


class UnsupportedOperatorError(FrontendError):
    """A model uses an operator (or an operator variant) the importer does not handle; the
    message names the operator and the node."""
