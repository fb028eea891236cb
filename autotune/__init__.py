"""autotune: the public API of the schedule-search autotuner (build, load_module, ...)."""
from __future__ import annotations

from tensor_ir.target import Target, TargetError

from .build import Kernel, ParamSpec, build, load_module, parse_target

__all__ = [
    "build", "load_module", "Kernel", "ParamSpec", "Target", "TargetError", "parse_target",
]
