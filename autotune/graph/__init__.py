"""Model graphs: IR, passes (folding, fusion, memory planning) and task extraction."""
from __future__ import annotations

from .errors import FrontendError, GraphError, UnsupportedOperatorError
from .ir import GraphBuilder, Model, Node
from .operators import OPS, OpDef, get_op
from . import operators_more  # noqa: F401 - registers the operators defined there
from . import operators_nd  # noqa: F401 - registers the n-D window operators
from . import operators_layout  # noqa: F401 - registers the Winograd and blocked forms
from .passes import (
    LAYOUT_BLOCK, FusedGroup, MemoryPlan, blocked_layout, eliminate_dead_code, fold_batch_norm,
    fold_constants, fuse_ops, optimize, plan_memory, winograd_conv2d,
)
from .tasks import GroupFunc, Task, count_flops, extract_tasks, group_func, partition
from .types import TensorType

__all__ = [
    "FrontendError", "GraphError", "UnsupportedOperatorError", "GraphBuilder", "Model", "Node",
    "OPS", "OpDef", "get_op", "FusedGroup", "MemoryPlan", "eliminate_dead_code",
    "fold_batch_norm", "fold_constants", "fuse_ops", "optimize", "plan_memory",
    "winograd_conv2d", "blocked_layout", "LAYOUT_BLOCK", "GroupFunc",
    "Task", "count_flops", "extract_tasks", "group_func", "partition", "TensorType",
]
