"""Simulated measurement: a builder that compiles nothing and a runner whose times come from a
cost function or from recorded measurements, never from running a kernel.

    runner = SimulationRunner(lambda inp: 1e-3 * my_model(inp.func))     # costs from a function
    runner = SimulationRunner.replay("records.jsonl")                    # or replayed records
    loop = TuningLoop(space, strategy, model, SimulationBuilder(), runner, database)

As Kernel Tuner's simulation mode does, this lets the search, the task scheduler, resumption
and notebooks be exercised and compared offline, in seconds and deterministically: a strategy
tried against recorded measurements of a real machine sees the times that machine gave.

A cost function takes the ``MeasureInput`` and returns seconds per call, or a
``MeasureResult`` for full control (an error of a given kind, say); a non-finite number is a
"runtime" error.  Replaying: every record of the export (or database) is replayed on its
workload, and a candidate whose program is structurally equal to a recorded one gets that
record's result; a program that was never recorded is a "runtime" error unless a ``cost``
function is given as the fallback.  ``noise`` adds seeded multiplicative noise to each repeat.
"""
from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Sequence

from records import Database, MemoryDatabase
from schedules.trace import Trace

from .measure import (
    Builder,
    BuildResult,
    MeasureConfig,
    MeasureInput,
    MeasureResult,
    Runner,
    check_lengths,
)

__all__ = ["SimulationBuilder", "SimulationRunner"]


class SimulationBuilder(Builder):
    """Builds nothing (a simulated runner loads no artifact); counts what it was given."""

    def __init__(self):
        self.built = 0

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        self.built += len(inputs)
        return [BuildResult(None, None) for _ in inputs]


class SimulationRunner(Runner):
    """Times from ``cost(measure_input)`` (see the module text), ``repeat`` repeats each.
    ``ran`` lists every program it was given, in order; ``calls`` counts ``run`` calls.
    Subclasses may override :meth:`cost`."""

    def __init__(self, cost: Callable[[MeasureInput], float | MeasureResult] | None = None, *,
                 repeat: int = 3, noise: float = 0.0, seed: int = 0,
                 config: MeasureConfig | None = None):
        if cost is not None and not callable(cost):
            raise TypeError(f"SimulationRunner: cost must be callable, got "
                            f"{type(cost).__name__}")
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"SimulationRunner: repeat must be an int >= 1, got {repeat!r}")
        if not 0 <= noise < 1:
            raise ValueError(f"SimulationRunner: noise is a relative spread in [0, 1), got "
                             f"{noise!r}")
        self._cost = cost
        self.repeat = repeat
        self.noise = float(noise)
        self.rng = random.Random(seed)
        self.config = config
        self.recorded: dict[str, MeasureResult] = {}
        self.ran: list = []
        self.calls = 0
        self.best: dict[str, float] = {}

    @classmethod
    def replay(cls, source, cost: Callable | None = None, **options) -> SimulationRunner:
        """A runner that replays ``source``: a JSON-lines export (``python -m records
        export``), a database file or a records.Database."""
        runner = cls(cost, **options)
        if isinstance(source, Database):
            runner._record(source)
        elif str(source).endswith(".jsonl"):
            with MemoryDatabase() as db:
                db.import_jsonl(source)
                runner._record(db)
        else:
            with Database(os.fspath(source), create=False) as db:
                runner._record(db)
        return runner

    def _record(self, db: Database) -> None:
        for workload in db.workloads():
            for record in db.records(workload.key):
                try:
                    func = Trace.from_json(record.trace_json).apply(workload.func).func
                except Exception:  # noqa: BLE001 - a record this version cannot replay
                    continue
                self.recorded[func.structural_hash()] = MeasureResult.from_record(record)

    def cost(self, inp: MeasureInput) -> float | MeasureResult:
        """Seconds per call of the candidate (or its whole result)."""
        if self.recorded:
            found = self.recorded.get(inp.func.structural_hash())
            if found is not None:
                return found
        if self._cost is None:
            return MeasureResult.error("runtime", "simulation: this program is not among the "
                                       "recorded measurements")
        return self._cost(inp)

    def seed_best(self, workload_key: str, seconds: float) -> None:
        self.best[workload_key] = min(seconds, self.best.get(workload_key, math.inf))

    def run(self, inputs: Sequence[MeasureInput],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        check_lengths(inputs, builds)
        self.calls += 1
        out = []
        for inp, build in zip(inputs, builds):
            self.ran.append(inp.func)
            if not build.ok:
                out.append(MeasureResult.error("build", build.error, build.build_seconds))
                continue
            result = self.cost(inp)
            if not isinstance(result, MeasureResult):
                seconds = float(result)
                if not (math.isfinite(seconds) and seconds > 0):
                    result = MeasureResult.error("runtime", f"simulation: the cost function "
                                                 f"gave {seconds!r} seconds")
                else:
                    times = [seconds * (1.0 + self.rng.uniform(-self.noise, self.noise))
                             for _ in range(self.repeat)]
                    result = MeasureResult.success(times, number=1, checked=True,
                                                   kernel_seconds=sum(times))
            if not result.is_error:
                self.seed_best(inp.workload_key, result.median)
            out.append(result)
        return out
