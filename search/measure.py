"""The measurement contract: what a builder and a runner take and return.

The tuning loop measures candidates in batches::

    inputs  = [MeasureInput(func, target, workload_key, reference=workload_func), ...]
    builds  = builder.build(inputs)           # list[BuildResult], one per input, same order
    results = runner.run(inputs, builds)      # list[MeasureResult], one per input, same order

The contract lives here, beside the loop that consumes it, so the loop can check what it is
given; the implementations live above: ``autotune.measure`` (a local process pool and an
isolated worker process), and GPU or cluster runners implement the same two ABCs.  The
simulation runner of :mod:`search.simulation` implements it without running anything.

A candidate is a scheduled, un-lowered PrimFunc; nothing here knows about schedules or traces.
Every failure is a result, never an exception: a build error, a time-out, a crashed kernel, a
wrong answer each come back as a ``MeasureResult`` with ``error_kind`` set and a readable
``error_msg``.  Exceptions are left for misuse (mismatched list lengths, a closed runner).
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from records import ERROR_KINDS, TuningRecord, canonical_target, host_name, library_version
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

__all__ = [
    "CHECK_MODES",
    "ERROR_KINDS",
    "BuildResult",
    "Builder",
    "MeasureConfig",
    "MeasureContext",
    "MeasureInput",
    "MeasureResult",
    "Runner",
    "SequentialRunner",
    "built",
    "check_lengths",
    "measure",
    "remove_artifacts",
]

# When outputs are compared with the reference.  "best": the first candidate of each workload
# and every candidate that would become the workload's new best; "all": every candidate;
# "none": never (for benchmarking kernels already known to be right).
CHECK_MODES = ("best", "all", "none")


QUIET_WAIT_ENV = "AUTOTUNE_QUIET_WAIT"


def default_quiet_wait() -> float:
    """MeasureConfig.quiet_wait's default: AUTOTUNE_QUIET_WAIT seconds when set (e.g. 0 in a
    test suite, whose timings need no quiet host), else 10."""
    text = os.environ.get(QUIET_WAIT_ENV, "").strip()
    if not text:
        return 10.0
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{QUIET_WAIT_ENV} must be a number of seconds, got {text!r}") from None


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are timed (every runner follows this protocol; it is stored with each
    record).

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
    quiet_wait     seconds a CPU runner may wait, before timing a parallel candidate, for the
                   host's cross-core latency to come back to its quiet level (see
                   autotune.measure.host; 0: never wait).  Default: 10, or the environment's
                   AUTOTUNE_QUIET_WAIT.
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
    quiet_wait: float = field(default_factory=lambda: default_quiet_wait())

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
        if not (isinstance(self.quiet_wait, (int, float)) and 0 <= self.quiet_wait < math.inf):
            raise ValueError(f"MeasureConfig.quiet_wait must be a finite number of seconds "
                             f">= 0, got {self.quiet_wait!r}")


@dataclass(frozen=True)
class MeasureContext:
    """How a workload sits in its model, as its candidates are to be timed: one value per
    task, made where the model is partitioned, that the tuning loop copies into each
    MeasureInput (whose fields of the same names say what each one means).  The default is a
    workload timed on its own: no weights, warm caches, inputs left as they are.

    weight_params  indices of the parameters that are the model's constant weights.
    cold_weights   the model reads those weights out of cache on every call.
    cold_bytes     with ``cold_weights``: the bytes the weights are rotated over (0: twice the
                   host's last-level cache).
    fresh_inputs   the activations are rewritten before each timed call.

    The indices are checked against a function when a MeasureInput is made
    (:meth:`measure_input`); here only their kind."""

    weight_params: tuple[int, ...] = ()
    cold_weights: bool = False
    cold_bytes: int = 0
    fresh_inputs: bool = False

    def __post_init__(self):
        try:
            indices = tuple(self.weight_params)
        except TypeError:
            raise TypeError(f"MeasureContext.weight_params must be parameter indices, got "
                            f"{self.weight_params!r}") from None
        if any(not isinstance(k, int) or isinstance(k, bool) or k < 0 for k in indices):
            raise ValueError(f"MeasureContext.weight_params must be parameter indices "
                             f"(ints >= 0), got {self.weight_params!r}")
        object.__setattr__(self, "weight_params", tuple(sorted(set(indices))))
        for name in ("cold_weights", "fresh_inputs"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"MeasureContext.{name} must be a bool, got "
                                f"{type(getattr(self, name)).__name__}")
        if isinstance(self.cold_bytes, bool) or not isinstance(self.cold_bytes, int) \
                or self.cold_bytes < 0:
            raise ValueError(f"MeasureContext.cold_bytes must be an int >= 0 (bytes), got "
                             f"{self.cold_bytes!r}")

    def measure_input(self, func: PrimFunc, target: Target | str, workload_key: str,
                      reference: PrimFunc | None = None) -> MeasureInput:
        """The MeasureInput of candidate ``func`` of workload ``workload_key``, timed in this
        context."""
        return MeasureInput(func, target, workload_key, reference=reference,
                            weight_params=self.weight_params, cold_weights=self.cold_weights,
                            fresh_inputs=self.fresh_inputs, cold_bytes=self.cold_bytes)


@dataclass(frozen=True)
class MeasureInput:
    """One candidate: a scheduled (un-lowered) PrimFunc, the target (a string is resolved
    here), and the workload it implements.  ``reference`` is the workload's own definition
    (typically the unscheduled PrimFunc from ``te.create_prim_func``); its outputs on the
    runner's fixed random inputs are what candidates are checked against.  Without it,
    outputs are not checked.

    ``weight_params``: indices of parameters that are a model's constant weights.  A built model
    packs a weight into the layout the schedule reads it in once, at build (see
    autotune.runtime.prepack), so a CPU builder and runner time the candidate without that packing:
    the runner packs the workload's array once, before the timed calls.  ``cold_weights``:
    those weights are read from memory on every call in the model (its weights do not stay
    in the last-level cache), so a CPU runner times each call on weights not in cache.
    ``cold_bytes``: with ``cold_weights``, how many bytes the runner's copies of the weights
    total at least, which it calls in turn: what the model streams through the caches between
    two calls of the kernel (its weights and activations), so each call finds its weights
    evicted from the core's private caches by as much data as in the model.  0: twice the
    host's last-level cache (every call reads its weights from memory).
    ``fresh_inputs``: the candidate runs in a model, where each activation input (a parameter
    read and not a weight) was written by the kernel before it, so a CPU runner rewrites
    those inputs before each timed call (outside the time) rather than timing calls that
    re-read inputs their predecessor call left in cache."""

    func: PrimFunc
    target: Target
    workload_key: str
    reference: PrimFunc | None = None
    weight_params: tuple[int, ...] = ()
    cold_weights: bool = False
    fresh_inputs: bool = False
    cold_bytes: int = 0

    def __post_init__(self):
        if isinstance(self.target, str):
            # A user writing a batch by hand names the target; it is resolved once, here.
            object.__setattr__(self, "target", Target(self.target))
        if not isinstance(self.target, Target):
            raise TypeError(f"MeasureInput.target must be a Target or a target string, got "
                            f"{type(self.target).__name__}")
        if not isinstance(self.func, PrimFunc):
            raise TypeError(f"MeasureInput.func must be a PrimFunc, got "
                            f"{type(self.func).__name__}")
        if not isinstance(self.workload_key, str) or not self.workload_key:
            raise TypeError("MeasureInput.workload_key must be a non-empty string")
        indices = tuple(self.weight_params)
        if any(not isinstance(k, int) or isinstance(k, bool)
               or not 0 <= k < len(self.func.params) for k in indices):
            raise ValueError(f"MeasureInput.weight_params must be indices of the function's "
                             f"{len(self.func.params)} parameters, got {self.weight_params!r}")
        object.__setattr__(self, "weight_params", tuple(sorted(set(indices))))
        for name in ("cold_weights", "fresh_inputs"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"MeasureInput.{name} must be a bool, got "
                                f"{type(getattr(self, name)).__name__}")
        if isinstance(self.cold_bytes, bool) or not isinstance(self.cold_bytes, int) \
                or self.cold_bytes < 0:
            raise ValueError(f"MeasureInput.cold_bytes must be an int >= 0 (bytes), got "
                             f"{self.cold_bytes!r}")

    def to_json(self, reference: bool = True) -> dict:
        """The wire form builders and runners send to their workers (JSON-able; the target as
        its resolved string, so a worker on another machine builds for the tuner's CPU, not
        its own).  ``reference=False`` leaves the reference out: a worker that already holds
        the workload's gets the candidate alone."""
        return {"func": self.func.to_json(), "target": str(self.target),
                "workload_key": self.workload_key,
                "reference": (self.reference.to_json()
                              if reference and self.reference is not None else None),
                "weight_params": list(self.weight_params), "cold_weights": self.cold_weights,
                "fresh_inputs": self.fresh_inputs, "cold_bytes": self.cold_bytes}

    @staticmethod
    def from_json(data: dict, reference: PrimFunc | None = None) -> "MeasureInput":
        """The MeasureInput of :meth:`to_json`'s output; ``reference``: the workload's
        definition where the data leaves it out."""
        try:
            ref = data.get("reference")
            return MeasureInput(
                PrimFunc.from_json(data["func"]), data["target"], data["workload_key"],
                reference=PrimFunc.from_json(ref) if ref is not None else reference,
                weight_params=tuple(data.get("weight_params", ())),
                cold_weights=data.get("cold_weights", False),
                fresh_inputs=data.get("fresh_inputs", False),
                cold_bytes=data.get("cold_bytes", 0))
        except (KeyError, AttributeError) as err:
            raise ValueError(f"not a MeasureInput's JSON form: missing {err}") from None


@dataclass(frozen=True)
class BuildResult:
    """A built candidate: the path of its artifact (an object file, a CUDA module), or why
    there is none.  A builder for a runner that loads nothing (a simulator) gives neither."""

    artifact_path: str | None
    error: str | None
    build_seconds: float = 0.0

    def __post_init__(self):
        if self.artifact_path is not None and self.error is not None:
            raise ValueError("BuildResult holds an artifact_path or an error, not both")

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one candidate.

    run_times      seconds per call, one entry per repeat (empty on error).
    median         median of run_times; math.inf on error, so errors sort last.
    error_kind     None, or one of ERROR_KINDS.
    error_msg      readable cause ("wrong result: max abs diff 3.2 at C[4, 7] ...").
    number         calls per repeat that were timed.
    checked        whether the outputs were compared with the reference (and matched).
    stopped_early  the slow-candidate rule or the time-out budget cut the repeats short.
    build_seconds  time the builder spent on the candidate.
    run_seconds    wall time the runner spent on the candidate, overhead included.
    kernel_seconds time spent inside the kernel itself (warm-up, repeats, check run).
    host           the machine that measured it, when not this process's (a cluster node).
    fingerprint    that machine's fingerprint of the target (see records.fingerprint), when
                   it was measured elsewhere: the record is filed under the hardware that
                   produced the time, not under the tuner's.
    """

    run_times: list[float]
    median: float
    error_kind: str | None = None
    error_msg: str | None = None
    number: int = 0
    checked: bool = False
    stopped_early: bool = False
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    kernel_seconds: float = 0.0
    host: str | None = None
    fingerprint: dict | None = None

    def __post_init__(self):
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.error_kind!r}; expected one of "
                             f"{', '.join(ERROR_KINDS)}")

    @property
    def is_error(self) -> bool:
        return self.error_kind is not None

    @staticmethod
    def error(kind: str, message: str, build_seconds: float = 0.0,
              run_seconds: float = 0.0, kernel_seconds: float = 0.0) -> MeasureResult:
        return MeasureResult([], math.inf, kind, message, build_seconds=build_seconds,
                             run_seconds=run_seconds, kernel_seconds=kernel_seconds)

    @staticmethod
    def success(run_times: Sequence[float], number: int, checked: bool,
                stopped_early: bool = False, build_seconds: float = 0.0,
                run_seconds: float = 0.0, kernel_seconds: float = 0.0) -> MeasureResult:
        times = [float(t) for t in run_times]
        if not times:
            raise ValueError("a successful MeasureResult needs at least one run time")
        return MeasureResult(times, statistics.median(times), None, None, number, checked,
                             stopped_early, build_seconds, run_seconds, kernel_seconds)

    def to_json(self) -> dict:
        """JSON-compatible dict (math.inf becomes None)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["median"] = None if math.isinf(self.median) else self.median
        out["run_times"] = list(self.run_times)
        return out

    @staticmethod
    def from_json(data: dict) -> MeasureResult:
        values = dict(data)
        unknown = set(values) - set(MeasureResult.__dataclass_fields__)
        if unknown:
            raise ValueError(f"MeasureResult JSON has unknown fields: {', '.join(sorted(unknown))}")
        values["run_times"] = [float(t) for t in values.get("run_times", [])]
        values["median"] = math.inf if values.get("median") is None else float(values["median"])
        return MeasureResult(**values)

    # -- as the database keeps it ---------------------------------------------------------------
    def to_record(self, workload_key: str, target: Target | str, trace, config=None, *,
                  host: str | None = None, version: str | None = None,
                  timestamp: float | None = None) -> TuningRecord:
        """The record of this measurement: ``trace`` produced the program measured on
        ``target`` with settings ``config`` (a MeasureConfig).  The target is canonicalised
        here (this is the machine that resolved it); host, version and timestamp default to
        this process's, except that a result measured elsewhere keeps its own ``host`` and
        ``fingerprint``."""
        details = {name: getattr(self, name) for name in _DETAIL_FIELDS}
        return TuningRecord(
            workload_key, canonical_target(target), trace, run_times=tuple(self.run_times),
            median=None if self.is_error else self.median,
            error_kind=self.error_kind, error_msg=self.error_msg,
            host=host if host is not None else (self.host or host_name()),
            version=library_version() if version is None else version,
            timestamp=time.time() if timestamp is None else timestamp,
            config=config, details=details, fingerprint=self.fingerprint)

    @staticmethod
    def from_record(record: TuningRecord) -> MeasureResult:
        """The MeasureResult ``record`` was made from."""
        known = {k: v for k, v in record.details.items() if k in _DETAIL_FIELDS}
        return MeasureResult(list(record.run_times), record.median, record.error_kind,
                             record.error_msg, **known)


# The MeasureResult fields a TuningRecord keeps in its ``details`` (the rest are first-class).
_DETAIL_FIELDS = ("number", "checked", "stopped_early", "build_seconds", "run_seconds",
                  "kernel_seconds")


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
    candidate: a crash, a hang or a wrong answer is a MeasureResult with an error kind.
    ``config`` is the timing protocol the runner follows (stored with each record)."""

    config: MeasureConfig | None = None

    @abstractmethod
    def run(self, inputs: Sequence[MeasureInput],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """Measure ``inputs[i]`` using ``builds[i]``; the result list is in input order.  A
        failed build gives an error result of kind "build" without running anything."""

    def seed_best(self, workload_key: str, seconds: float) -> None:
        """A best time known from earlier (a resumed database) for the workload: a runner
        that cuts slow candidates short or checks only new bests may use it."""

    def close(self) -> None:
        """Stop worker processes."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SequentialRunner(Runner):
    """A runner that keeps each workload's best time (seeded from earlier runs, lowered by
    its own measurements) and, unless it overrides ``run``, measures a batch one candidate at
    a time through ``_run_one``.  The local, Ray and accelerator runners share it."""

    def __init__(self):
        self._best: dict[str, float] = {}
        self._closed = False

    def best(self, workload_key: str) -> float | None:
        """Best checked median (seconds per call) known for the workload."""
        return self._best.get(workload_key)

    def seed_best(self, workload_key: str, seconds: float) -> None:
        """Make a best known from earlier (a database of a previous run) count: the
        slow-candidate rule applies at once, and only faster candidates are then checked."""
        if not seconds > 0:
            raise ValueError(f"seed_best: seconds must be > 0, got {seconds!r}")
        current = self._best.get(workload_key)
        if current is None or seconds < current:
            self._best[workload_key] = float(seconds)

    def run(self, inputs: Sequence[MeasureInput],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.run called after close()")
        check_lengths(inputs, builds)
        return [self._run_one(inp, b) for inp, b in zip(inputs, builds)]

    def _run_one(self, inp: MeasureInput, build: BuildResult) -> MeasureResult:
        # The per-candidate hook: a subclass implements it, or overrides run() as a whole (the
        # Ray runner, which keeps several nodes busy at once).
        raise NotImplementedError(f"{type(self).__name__} must implement _run_one or "
                                  f"override run")


@contextlib.contextmanager
def built(builder: Builder, inputs: Sequence[MeasureInput], keep_artifacts: bool = False
          ) -> Iterator[list[BuildResult]]:
    """``with built(builder, inputs) as builds:`` the batch's build results, their artifact
    files deleted when the block ends however it ends (unless ``keep_artifacts``): the one
    place that pairs a build with its clean-up, for one run of the batch or several."""
    builds = builder.build(inputs)
    try:
        yield builds
    finally:
        if not keep_artifacts:
            remove_artifacts(builds)


def measure(builder: Builder, runner: Runner, inputs: Sequence[MeasureInput],
            keep_artifacts: bool = False) -> list[MeasureResult]:
    """Build and run one batch; artifacts are deleted afterwards unless ``keep_artifacts``."""
    with built(builder, inputs, keep_artifacts) as builds:
        results = runner.run(inputs, builds)
    if len(results) != len(inputs):
        raise ValueError(f"the runner returned {len(results)} results for {len(inputs)} "
                         f"candidates")
    return results


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
