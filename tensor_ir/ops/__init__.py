"""Operator library: TVM/topi-style operators written with ``tensor_ir.te``.

Each operator comes at two levels, beside its numpy reference:

* ``te_<op>(tensors..., attrs) -> te.Tensor`` for composing several operators into one PrimFunc
  (graph-level fusion);
* ``<op>(shape ints..., attrs, dtype="float32") -> PrimFunc`` whose parameters are the inputs
  followed by the output;
* ``ref_<op>(arrays..., attrs) -> np.ndarray``.

``REGISTRY`` maps every operator name to an ``OpSpec`` (maker, reference, example configs and
input generator) so that tests and benchmarks can iterate over all of them.  Shape errors raise
``tensor_ir.errors.TEError`` naming the operator and the failed condition.

NOTE: ``ops.sum`` / ``ops.max`` / ``ops.min`` are PrimFunc makers, as in topi; they shadow the
builtins only inside this namespace.
"""
from __future__ import annotations

from . import elemwise, layout, nn, norm, reduce, transform, winograd
from .elemwise import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .registry import REGISTRY, OpSpec, cases, get
from .transform import *  # noqa: F401,F403
from .winograd import *  # noqa: F401,F403

__all__ = (
    ["REGISTRY", "OpSpec", "cases", "get", "elemwise", "layout", "nn", "norm", "reduce",
     "transform", "winograd"]
    + elemwise.__all__ + layout.__all__ + nn.__all__ + norm.__all__ + reduce.__all__
    + transform.__all__
    + winograd.__all__
)
