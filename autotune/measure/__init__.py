"""Measurement: build candidates in worker processes and time them in an isolated runner.

    from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig, MeasureInput
    with LocalBuilder() as builder, LocalRunner(MeasureConfig(repeat=5)) as runner:
        inputs = [MeasureInput(candidate, "llvm", key, reference=func) for candidate in batch]
        results = runner.run(inputs, builder.build(inputs))

The interface they implement (and a CUDA or distributed runner implements) is the measurement
contract of :mod:`search.measure`, re-exported here.
"""
from __future__ import annotations

from search.measure import (
    CHECK_MODES,
    ERROR_KINDS,
    Builder,
    BuildResult,
    MeasureConfig,
    MeasureInput,
    MeasureResult,
    Runner,
    built,
    measure,
    remove_artifacts,
)

from .builder import LocalBuilder
from .runner import LocalRunner

__all__ = [
    "CHECK_MODES",
    "ERROR_KINDS",
    "BuildResult",
    "Builder",
    "LocalBuilder",
    "LocalRunner",
    "MeasureConfig",
    "MeasureInput",
    "MeasureResult",
    "Runner",
    "built",
    "measure",
    "remove_artifacts",
]
