"""The settings of a tuning run, as frozen objects checked once when they are made.

    SearchConfig(batch_size=16, seed=0)          # how each workload is searched
    SchedulerConfig(policy="gradient")           # how a model's budget is shared among tasks

The public entry points (``autotune.tune``, ``autotune.tune_model``) take these objects
(``search=``, ``scheduler=``; the ``tune-model`` CLI makes them from its flags); everything
below them (the tuning loop, the task scheduler) receives them and checks nothing again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from cost_models import CostModel

from .strategy import SearchError, SearchStrategy, kinds

__all__ = ["POLICIES", "SchedulerConfig", "SearchConfig"]

POLICIES = ("gradient", "round-robin")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SearchConfig:
    """How one workload is searched.

    batch_size        candidates per measured batch.
    seed              the run's seed (strategies, cost models and samplers derive theirs).
    warm_start        best stored records a resumed run starts from.
    retrain_ratio     the cost model retrains once new data reach this share of what it has
                      seen (never less than a batch; see search.loop).
    remeasure_top     best candidates re-timed at the end (0: none) ...
    remeasure_rounds  ... this many times each, interleaved.
    top_up            ``autotune.tune``'s ``trials`` is the workload's total, the candidates
                      stored for it counting (False: that many new ones; a model's task
                      scheduler always counts what is stored).
    heldout           after ``autotune.tune``'s search, this many fresh random programs of the
                      space judge the trained cost model (0: none; see
                      TuningLoop.heldout_accuracy).
    strategy          the search strategy: a registered kind ("evolutionary", "random",
                      "optuna") or a SearchStrategy instance (``autotune.tune`` only; a model's
                      tasks each create their own of the kind, seeded per task).
    cost_model        the cost model: a registered kind ("xgb", "random"), a saved model's
                      path (``cost_models.pretrain``; loaded and kept training in memory) or a
                      CostModel instance.
    """

    batch_size: int = 16
    seed: int = 0
    warm_start: int = 64
    retrain_ratio: float = 0.25
    remeasure_top: int = 3
    remeasure_rounds: int = 3
    top_up: bool = True
    heldout: int = 0
    strategy: str | SearchStrategy = "evolutionary"
    cost_model: str | os.PathLike | CostModel = "xgb"

    def __post_init__(self):
        if not isinstance(self.strategy, SearchStrategy) and self.strategy not in kinds():
            raise SearchError(f"unknown search strategy {self.strategy!r}; known kinds: "
                              f"{', '.join(kinds())}")
        # Whether a string names a kind or a saved model's file is decided when the model is
        # made (cost_models.from_spec), where a wrong name is a CostModelError.
        if not isinstance(self.cost_model, (str, os.PathLike, CostModel)):
            raise SearchError(f"cost_model must be a kind, a saved model's path or a "
                              f"CostModel, got {type(self.cost_model).__name__}")
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise SearchError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if not _is_int(self.seed):
            raise SearchError(f"seed must be an int, got {self.seed!r}")
        for name in ("warm_start", "remeasure_top", "remeasure_rounds", "heldout"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise SearchError(f"{name} must be an int >= 0, got {value!r}")
        if not isinstance(self.top_up, bool):
            raise SearchError(f"top_up must be True or False, got {self.top_up!r}")
        if not (isinstance(self.retrain_ratio, (int, float)) and self.retrain_ratio >= 0):
            raise SearchError(f"retrain_ratio must be a number >= 0, got "
                              f"{self.retrain_ratio!r}")


@dataclass(frozen=True)
class SchedulerConfig:
    """How a model's trial budget is shared among its tasks (see search.task_scheduler).

    policy           "gradient" or "round-robin".
    patience         trials without an improvement of ``min_improvement`` after which a task
                     counts as converged (None: 12 batches).
    fail_after       failed trials in a row that set a never-successful task aside (None: 2
                     batches).
    alpha, beta, window, eps   the gradient policy's parameters.
    share_bests      before a task's batch, the best program of each other task of the run
                     whose decisions its sketches take is queued to be measured first (see
                     TaskScheduler: tasks alike but for their epilogue tune as one).
    fit_bests        with share_bests: the best program of a task whose loops have other
                     extents (a stride-2 convolution beside stride-1 ones) is offered too,
                     its tiles fitted to the receiving task's loops, when it runs at a higher
                     throughput than the receiver's best; one such program per batch.
    share_cost_model one cost model for all tasks, each task's loop retraining it on every
                     task's data, as Ansor does (``autotune.tune_model``; False: one per task).
    """

    policy: str = "gradient"
    patience: int | None = None
    min_improvement: float = 0.005
    fail_after: int | None = None
    alpha: float = 0.2
    beta: float = 2.0
    window: int = 3
    eps: float = 0.05
    share_bests: bool = True
    fit_bests: bool = True
    share_cost_model: bool = False

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise SearchError(f"unknown policy {self.policy!r}; expected one of "
                              f"{', '.join(POLICIES)}")
        for name in ("patience", "fail_after", "window"):
            value = getattr(self, name)
            if value is None and name != "window":
                continue
            if not _is_int(value) or value < 1:
                raise SearchError(f"{name} must be a positive int, got {value!r}")
        if not (0 <= self.alpha <= 1 and 0 <= self.eps <= 1 and self.beta > 0):
            raise SearchError(f"need 0 <= alpha <= 1, 0 <= eps <= 1, beta > 0 (got "
                              f"alpha={self.alpha}, eps={self.eps}, beta={self.beta})")
        for name in ("share_bests", "fit_bests", "share_cost_model"):
            if not isinstance(getattr(self, name), bool):
                raise SearchError(f"{name} must be True or False, got "
                                  f"{getattr(self, name)!r}")
        if not 0 <= self.min_improvement < 1:
            raise SearchError(f"min_improvement must be in [0, 1), got "
                              f"{self.min_improvement!r}")
