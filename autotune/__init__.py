"""autotune: the public API of the schedule-search autotuner (build, load_module, ...)."""
from __future__ import annotations

from .build import Kernel, ParamSpec, TargetError, build, load_module, parse_target

__all__ = ["build", "load_module", "Kernel", "ParamSpec", "TargetError", "parse_target"]
