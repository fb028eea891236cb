"""autotune: the public API of the schedule-search autotuner (build, load_module, ...)."""
from __future__ import annotations

from tensor_ir.target import Target, TargetError

from .build import Kernel, ParamSpec, build, load_module, parse_target
from .history import MissingRecordError, apply_history_best

__all__ = [
    "build", "load_module", "apply_history_best", "MissingRecordError", "Kernel", "ParamSpec",
    "Target", "TargetError", "parse_target",
]
