"""search: strategies that propose candidates to measure, and the tuning loop that runs them.

    import search
    strategy = search.create("evolutionary", seed=0)     # or "random", "optuna", an instance
    loop = search.TuningLoop(space, strategy, cost_model, builder, runner, db)
    result = loop.run(trials=64)                        # generate, build, run, record, retrain
    loop.remeasure_top(k=3)                             # noise-robust best

``autotune.tune`` is the public entry point built on this.  The measurement contract the
builder and runner implement is :mod:`search.measure` (implemented by ``autotune.measure``
and, offline, by :mod:`search.simulation`); this package sits below ``autotune`` and
receives its builder and runner as arguments.
"""
from __future__ import annotations

from . import measure, mutators, simulation
from .config import SchedulerConfig, SearchConfig
from .evolutionary import EvolutionConfig, EvolutionarySearch
from .measure import MeasureContext
from .loop import LoopResult, TrialResult, TuningLoop, make_logger, workload_cost
from .mutators import Mutator, default_mutators, mutate
from .optuna_search import OptunaSearch
from .pool import CandidatePool, PhaseTimers, SearchCandidate
from .random_search import RandomSearch
from .simulation import SimulationBuilder, SimulationRunner
from .strategy import SearchError, SearchStrategy, create, kinds, register

__all__ = [
    "CandidatePool",
    "EvolutionConfig",
    "EvolutionarySearch",
    "LoopResult",
    "MeasureContext",
    "Mutator",
    "OptunaSearch",
    "PhaseTimers",
    "RandomSearch",
    "SearchCandidate",
    "SearchError",
    "SchedulerConfig",
    "SearchConfig",
    "SearchStrategy",
    "SimulationBuilder",
    "SimulationRunner",
    "TrialResult",
    "TuningLoop",
    "create",
    "default_mutators",
    "kinds",
    "make_logger",
    "measure",
    "mutate",
    "mutators",
    "register",
    "simulation",
    "workload_cost",
]
