"""autotune: the public API of the schedule-search autotuner (build, load_module, ...)."""
from __future__ import annotations

from tensor_ir.errors import BuildError, KernelIndexError
from tensor_ir.target import Target, TargetError

from .api import build
from .runtime.build import Kernel, ParamSpec, load_module, parse_target
from .runtime.executor import BenchmarkResult, BuildReport, Executor
from .frontends import load_model
from .frontends.pytorch import from_torch
from .graph import Model
from .graph.build import build_model
from .tuning.history import MissingRecordError, apply_history_best
from .tuning.tune import TuneError, TuneResult, tune
from .tuning.tune_model import BuildConfig, CoverageError, RunControl, TuneModelResult, tune_model

__all__ = [
    "build", "load_module", "apply_history_best", "MissingRecordError", "Kernel", "ParamSpec",
    "BuildError", "KernelIndexError",
    "Target", "TargetError", "parse_target", "tune", "TuneResult", "TuneError",
    "load_model", "from_torch", "build_model", "Model", "Executor", "BuildReport",
    "BenchmarkResult",
    "tune_model", "TuneModelResult", "CoverageError", "BuildConfig", "RunControl",
]
