"""cost_models: program features, the models that rank candidates from them, and pre-training.

    from cost_models import create, features
    X = features.extract(funcs)                 # float32 [n, features.NUM_FEATURES]
    model = create("xgb", seed=0)               # or "random", or a CostModel instance
    model.update(measured_funcs, run_times)     # seconds; None / inf for errors
    scores = model.predict(new_funcs)           # higher = predicted faster
    model.save("model.json"); model = cost_models.load("model.json")

Pre-training from a tuning-record database (:mod:`cost_models.pretrain`): a model trained on the
records of other workloads of the same target family ranks a new workload's candidates before
any of them is measured, and is what ``autotune.tune(func, search=SearchConfig(cost_model="model.json"))`` and
``tune-model --cost-model-file`` start from.

    data = cost_models.training_set("tuning.db", target="llvm")   # replayed, featurised
    model = cost_models.pretrain("tuning.db", out="model.json", exclude=[key])
    report = cost_models.evaluate("tuning.db", folds=5)  # held-out workloads vs random
    # command line: python -m cost_models pretrain|evaluate --db tuning.db ...

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
from .pretrain import TrainingSet, evaluate, from_spec, pretrain, target_family, training_set
from .random_model import RandomCostModel
from .transfer import TransferCostModel
from .xgb import TrainingData, XGBCostModel

__all__ = [
    "CostModel",
    "CostModelError",
    "FeatureError",
    "ModelInput",
    "RandomCostModel",
    "TrainingData",
    "TrainingSet",
    "TransferCostModel",
    "XGBCostModel",
    "create",
    "default_workload_key",
    "evaluate",
    "extract",
    "feature_matrix",
    "features",
    "from_spec",
    "kinds",
    "load",
    "normalized_throughput",
    "pairwise_accuracy",
    "pretrain",
    "register",
    "run_times",
    "target_family",
    "training_set",
]
