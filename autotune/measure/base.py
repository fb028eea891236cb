"""The measurement interface: what a builder and a runner take and return.

A tuning loop measures candidates in batches::

    inputs  = [MeasureInput(func, target, workload_key, reference=workload_func), ...]
    builds  = builder.build(inputs)           # list[BuildResult], one per input, same order
    results = runner.run(inputs, builds)      # list[MeasureResult], one per input, same order

A candidate is a scheduled, un-lowered PrimFunc; nothing here knows about schedules or traces.
Every failure is a result, never an exception: a build error, a time-out, a crashed kernel, a
wrong answer each come back as a ``MeasureResult`` with ``error_kind`` set and a readable
``error_msg``.  Exceptions are left for misuse (mismatched list lengths, a closed runner).
``MeasureResult`` and ``ERROR_KINDS`` live in :mod:`records.record` (the database stores them
and sits below this package) and are re-exported here.

Implementations: ``LocalBuilder`` (process pool) and ``LocalRunner`` (isolated worker process)
here; a CUDA runner and a distributed runner implement the same two ABCs.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from records.record import ERROR_KINDS, MeasureResult
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

__all__ = [
    "CHECK_MODES",
    "ERROR_KINDS",
    "BuildResult",
    "Builder",
    "MeasureConfig",
    "MeasureInput",
    "MeasureResult",
    "Runner",
    "measure",
]

# When outputs are compared with the reference.  "best": the first candidate of each workload
# and every candidate that would become the workload's new best; "all": every candidate;
# "none": never (for benchmarking kernels already known to be right).
CHECK_MODES = ("best", "all", "none")


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are timed.

    number         calls per repeat to start from; grown until a repeat lasts min_repeat_ms.
    repeat         timed repeats; the median of their per-call times is the result.
    min_repeat_ms  shortest repeat, so timer resolution and call overhead stay negligible.
    flush_cache    evict the kernel's arrays from the CPU caches before every repeat (the
                   first call of each repeat then starts cold).
    timeout        seconds one candidate may take in the runner (warm-up, timing and check);
                   repeats that would overrun it are dropped while at least one is kept.
    slow_factor    a candidate already this many times slower than its workload's best stops
                   after one repeat and is recorded with that time (math.inf: never).
    check          "best", "all" or "none" (see CHECK_MODES).
    rtol, atol     tolerances of the output check; None picks them per dtype, with atol scaled
                   by the largest reference magnitude.
    """

    # NOTE: five repeats rather than three: on a noisy (shared, virtualised) machine the
    # median of five is markedly steadier for the same total time.  Each repeat lasts at least
    # 70 ms because a parallel kernel sharing its cores with another process is descheduled
    # in whole scheduler ticks (~4 ms): a 20 ms repeat then moves by up to 20% from one tick,
    # a 70 ms one by about 6%.  It also keeps the tuner's own work (search, builds, about
    # 0.13 s per candidate on matmul 1024) under a quarter of a tuning run: about 0.45 s of
    # kernel runs per candidate, still over 90 candidates a minute.
    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 70.0
    flush_cache: bool = False
    timeout: float = 10.0
    slow_factor: float = 10.0
    check: str = "best"
    rtol: float | None = None
    atol: float | None = None

    def __post_init__(self):
        if not (isinstance(self.number, int) and self.number >= 1):
            raise ValueError(f"MeasureConfig.number must be an int >= 1, got {self.number!r}")
        if not (isinstance(self.repeat, int) and self.repeat >= 1):
            raise ValueError(f"MeasureConfig.repeat must be an int >= 1, got {self.repeat!r}")
        if not self.min_repeat_ms >= 0:
            raise ValueError(f"MeasureConfig.min_repeat_ms must be >= 0, got "
                             f"{self.min_repeat_ms!r}")
        if not self.timeout > 0:
            raise ValueError(f"MeasureConfig.timeout must be > 0 seconds, got {self.timeout!r}")
        if not self.slow_factor > 1:
            raise ValueError(f"MeasureConfig.slow_factor must be > 1, got {self.slow_factor!r}")
        if self.check not in CHECK_MODES:
            raise ValueError(f"MeasureConfig.check must be one of {', '.join(CHECK_MODES)}, "
                             f"got {self.check!r}")
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"MeasureConfig.{name} must be >= 0 or None, got {value!r}")


@dataclass(frozen=True)
class MeasureInput:
    """One candidate: a scheduled (un-lowered) PrimFunc, the target, and the workload it
    implements.  ``reference`` is the workload's own definition (typically the unscheduled
    PrimFunc from ``te.create_prim_func``); its outputs on the runner's fixed random inputs are
    what candidates are checked against.  Without it, outputs are not checked."""

    func: PrimFunc
    target: Target
    workload_key: str
    reference: PrimFunc | None = None

    def __post_init__(self):
        if not isinstance(self.target, Target):
            object.__setattr__(self, "target", Target(self.target))
        if not isinstance(self.func, PrimFunc):
            raise TypeError(f"MeasureInput.func must be a PrimFunc, got "
                            f"{type(self.func).__name__}")
        if not isinstance(self.workload_key, str) or not self.workload_key:
            raise TypeError("MeasureInput.workload_key must be a non-empty string")


@dataclass(frozen=True)
class BuildResult:
    """A built candidate: the path of its artifact (an object file), or why there is none."""

    artifact_path: str | None
    error: str | None
    build_seconds: float

    def __post_init__(self):
        if (self.artifact_path is None) == (self.error is None):
            raise ValueError("BuildResult holds exactly one of artifact_path and error")

    @property
    def ok(self) -> bool:
        return self.error is None


class Builder(ABC):
    """Turns candidates into artifacts a runner can load.  ``build`` never raises for a bad
    candidate: its BuildResult holds the error."""

    @abstractmethod
    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """Build every input; the result list is in input order."""

    def close(self) -> None:
        """Release worker processes and temporary files."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Runner(ABC):
    """Times built candidates and checks their outputs.  ``run`` never raises for a bad
    candidate: a crash, a hang or a wrong answer is a MeasureResult with an error kind."""

    @abstractmethod
    def run(self, inputs: Sequence[MeasureInput],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Measure ``inputs[i]`` using ``builds[i]``; the result list is in input order.  A
        failed build gives an error result of kind "build" without running anything."""

    def close(self) -> None:
        """Stop worker processes."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def measure(builder: Builder, runner: Runner, inputs: Sequence[MeasureInput],
            keep_artifacts: bool = False) -> list[MeasureResult]:
    """Build and run one batch; artifacts are deleted afterwards unless ``keep_artifacts``."""
    builds = builder.build(inputs)
    try:
        return runner.run(inputs, builds)
    finally:
        if not keep_artifacts:
            remove_artifacts(builds)


def remove_artifacts(builds: Sequence[BuildResult]) -> None:
    """Delete the artifact files of ``builds`` (those already gone are skipped)."""
    for b in builds:
        if b.artifact_path:
            try:
                os.remove(b.artifact_path)
            except OSError:
                pass


def check_lengths(inputs: Sequence, builds: Sequence) -> None:
    if len(inputs) != len(builds):
        raise ValueError(f"runner got {len(inputs)} inputs but {len(builds)} build results")
