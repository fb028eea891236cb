"""cost_models: program features and the models that rank candidates from them.

    from cost_models import create, features
    X = features.extract(funcs)                 # float32 [n, features.NUM_FEATURES]
    model = create("xgb", seed=0)               # or "random", or a CostModel instance
    model.update(measured_funcs, run_times)     # seconds; None / inf for errors
    scores = model.predict(new_funcs)           # higher = predicted faster
    model.save("model.json"); model = cost_models.load("model.json")

A custom model subclasses :class:`CostModel` (update, predict, save, load) and is made
available by name with :func:`register`.
"""
from __future__ import annotations

from . import features
from .base import (
    CostModel,
    CostModelError,
    ModelInput,
    create,
    default_workload_key,
    feature_matrix,
    kinds,
    load,
    normalized_throughput,
    pairwise_accuracy,
    register,
    run_times,
)
from .features import FeatureError, extract
from .random_model import RandomCostModel
from .xgb import TrainingData, XGBCostModel

__all__ = [
    "ModelInput",
    "CostModel",
    "CostModelError",
    "FeatureError",
    "RandomCostModel",
    "TrainingData",
    "XGBCostModel",
    "create",
    "default_workload_key",
    "extract",
    "feature_matrix",
    "features",
    "kinds",
    "load",
    "normalized_throughput",
    "pairwise_accuracy",
    "register",
    "run_times",
]
