"""XGBCostModel: gradient-boosted trees over program features, trained to rank (the default).

Targets are normalised throughput per workload (``min_time / time``, 1 for the fastest
candidate seen, 0 for errors).  The default objective, ``rank:pairwise``, learns only the order
within each workload (one query group per workload), which is all the search needs and is
robust to the scale of run times across workloads.  After every ``update`` the model is
retrained from scratch on everything it has seen, deterministically for a given seed.

Saved as one JSON file: XGBoost's own JSON model plus our metadata and the training data
(features as base64 float32, run times, workload keys); nothing is pickled.
"""
from __future__ import annotations

import base64
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import features as _features
from .base import (
    KIND_KEY,
    CostModel,
    CostModelError,
    as_candidates,
    feature_matrix,
    normalized_throughput,
    read_saved,
    register,
    run_times,
    write_saved,
)

FORMAT_VERSION = 1
# rank:pairwise learns the order within each workload; reg:squarederror regresses the
# normalised throughput itself.  (rank:ndcg is left out: it needs integer relevance degrees,
# and binning throughput into them ranked no better than chance in our tests.)
OBJECTIVES = ("rank:pairwise", "reg:squarederror")


@dataclass(frozen=True)
class TrainingData:
    """What a model learned from: ``features [n, NUM_FEATURES]`` (float32), ``times [n]``
    (seconds, inf for errors) and ``workloads`` (the query group of each row)."""

    features: np.ndarray
    times: np.ndarray
    workloads: tuple

    def __len__(self) -> int:
        return int(self.times.shape[0])


def _xgboost():
    try:
        import xgboost
    except ImportError as err:  # pragma: no cover - xgboost is a dependency of the project
        raise CostModelError("the 'xgb' cost model needs the xgboost package "
                             "(pip install xgboost)") from err
    return xgboost


class XGBCostModel(CostModel):
    """Boosted-tree cost model.

    Options (all keyword): ``seed``; ``objective`` in OBJECTIVES; ``num_rounds`` boosting rounds
    per training; ``max_depth``, ``learning_rate``, ``min_child_weight``, ``subsample``,
    ``colsample_bytree`` as in XGBoost; ``pairs_per_sample`` pairs drawn per row by the ranking
    objectives; ``nthread`` threads for training and prediction (1 leaves the cores to the
    kernels being measured).
    """

    kind = "xgb"

    def __init__(self, seed: int = 0, objective: str = "rank:pairwise", num_rounds: int = 200,
                 max_depth: int = 4, learning_rate: float = 0.1, min_child_weight: float = 1.0,
                 subsample: float = 1.0, colsample_bytree: float = 1.0,
                 pairs_per_sample: int = 32, nthread: int = 1):
        if objective not in OBJECTIVES:
            raise CostModelError(f"XGBCostModel objective {objective!r} is not one of "
                                 f"{', '.join(OBJECTIVES)}")
        for name, value in (("num_rounds", num_rounds), ("max_depth", max_depth),
                            ("pairs_per_sample", pairs_per_sample), ("nthread", nthread)):
            if not isinstance(value, int) or value < 1:
                raise CostModelError(f"XGBCostModel {name} must be a positive int, got "
                                     f"{value!r}")
        for name, value in (("subsample", subsample), ("colsample_bytree", colsample_bytree)):
            if not 0.0 < value <= 1.0:
                raise CostModelError(f"XGBCostModel {name} must be in (0, 1], got {value!r}")
        if not learning_rate > 0:
            raise CostModelError(f"XGBCostModel learning_rate must be positive, got "
                                 f"{learning_rate!r}")
        self.options = {
            "seed": int(seed), "objective": objective, "num_rounds": num_rounds,
            "max_depth": max_depth, "learning_rate": float(learning_rate),
            "min_child_weight": float(min_child_weight), "subsample": float(subsample),
            "colsample_bytree": float(colsample_bytree), "pairs_per_sample": pairs_per_sample,
            "nthread": nthread,
        }
        self._x: list[np.ndarray] = []
        self._times: list[np.ndarray] = []
        self._workloads: list[str] = []
        self._booster = None

    # -- data ---------------------------------------------------------------------------------
    def training_data(self) -> TrainingData:
        """Every measured candidate the model has seen (to be stored beside the database)."""
        if self._x:
            x = np.concatenate(self._x).astype(np.float32, copy=False)
            t = np.concatenate(self._times)
        else:
            x = np.zeros((0, _features.NUM_FEATURES), dtype=np.float32)
            t = np.zeros(0)
        return TrainingData(x, t, tuple(self._workloads))

    @property
    def is_trained(self) -> bool:
        return self._booster is not None

    def update(self, candidates: Sequence, results: Sequence) -> None:
        """Add measured candidates (PrimFuncs, Candidates, or a feature matrix for a single
        workload) with their run times in seconds (None / inf for errors), then retrain."""
        x = feature_matrix(candidates)
        times = run_times(results, x.shape[0])
        if isinstance(candidates, np.ndarray):
            workloads = [""] * x.shape[0]
        else:
            workloads = [c.workload for c in as_candidates(candidates)]
        if not x.shape[0]:
            return
        self._x.append(np.array(x, dtype=np.float32))
        self._times.append(times)
        self._workloads.extend(workloads)
        self._train()

    def _train(self) -> None:
        xgb = _xgboost()
        data = self.training_data()
        label = normalized_throughput(data.times, data.workloads)
        if len(data) < 2 or np.ptp(label) == 0.0:
            # Nothing to learn an order from yet (one row, or all equal / all errors).
            self._booster = None
            return
        opts = self.options
        objective = opts["objective"]
        params = {
            "objective": objective, "eta": opts["learning_rate"], "max_depth": opts["max_depth"],
            "min_child_weight": opts["min_child_weight"], "subsample": opts["subsample"],
            "colsample_bytree": opts["colsample_bytree"], "seed": opts["seed"],
            "nthread": opts["nthread"], "tree_method": "hist", "verbosity": 0,
        }
        x = data.features
        if objective.startswith("rank:"):
            # One query group per workload; XGBoost wants each group's rows contiguous.
            keys = {k: i for i, k in enumerate(dict.fromkeys(data.workloads))}
            qid = np.array([keys[w] for w in data.workloads], dtype=np.int64)
            order = np.argsort(qid, kind="stable")
            x, label, qid = x[order], label[order], qid[order]
            params["lambdarank_pair_method"] = "mean"
            params["lambdarank_num_pair_per_sample"] = opts["pairs_per_sample"]
            dtrain = xgb.DMatrix(x, label=label, qid=qid, nthread=opts["nthread"])
        else:
            dtrain = xgb.DMatrix(x, label=label, nthread=opts["nthread"])
        self._booster = xgb.train(params, dtrain, num_boost_round=opts["num_rounds"])

    # -- scoring ------------------------------------------------------------------------------
    def predict(self, candidates) -> np.ndarray:
        """Scores, higher for faster candidates; all zeros before the first training."""
        x = feature_matrix(candidates)
        if self._booster is None or not x.shape[0]:
            return np.zeros(x.shape[0])
        return np.asarray(self._booster.inplace_predict(x), dtype=np.float64)

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        data = self.training_data()
        booster = None
        if self._booster is not None:
            booster = bytes(self._booster.save_raw("json")).decode("utf-8")
        doc = {
            KIND_KEY: self.kind, "format_version": FORMAT_VERSION,
            "feature_version": _features.FEATURE_VERSION,
            "num_features": _features.NUM_FEATURES, "options": dict(self.options),
            "booster": booster,
            "training_data": {
                "rows": len(data),
                "features": base64.b64encode(
                    data.features.astype("<f4").tobytes()).decode("ascii"),
                "times": [t if math.isfinite(t) else None for t in data.times.tolist()],
                "workloads": list(data.workloads),
            },
        }
        write_saved(path, doc)

    def load(self, path: str | os.PathLike) -> None:
        doc = read_saved(path, self.kind)
        where = os.fspath(path)
        if doc.get("format_version") != FORMAT_VERSION:
            raise CostModelError(f"{where}: xgb model format_version {doc.get('format_version')!r}"
                                 f"; this release reads {FORMAT_VERSION}")
        if (doc.get("feature_version") != _features.FEATURE_VERSION
                or doc.get("num_features") != _features.NUM_FEATURES):
            raise CostModelError(
                f"{where}: model was trained on feature version {doc.get('feature_version')!r} "
                f"({doc.get('num_features')!r} features); this release extracts version "
                f"{_features.FEATURE_VERSION} ({_features.NUM_FEATURES} features)")
        try:
            options = dict(doc["options"])
            fresh = XGBCostModel(**options)
            data = doc["training_data"]
            rows = int(data["rows"])
            x = np.frombuffer(base64.b64decode(data["features"]), dtype="<f4")
            x = x.reshape(rows, _features.NUM_FEATURES).astype(np.float32)
            times = np.array([math.inf if t is None else float(t) for t in data["times"]])
            workloads = [str(w) for w in data["workloads"]]
        except (KeyError, TypeError, ValueError) as err:
            raise CostModelError(f"{where}: malformed xgb cost model file: {err}") from err
        if times.shape[0] != rows or len(workloads) != rows:
            raise CostModelError(f"{where}: training data holds {rows} feature rows, "
                                 f"{times.shape[0]} times and {len(workloads)} workloads")
        booster = None
        if doc.get("booster") is not None:
            xgb = _xgboost()
            booster = xgb.Booster(params={"nthread": fresh.options["nthread"]})
            booster.load_model(bytearray(doc["booster"].encode("utf-8")))
        self.options = fresh.options
        self._x = [x] if rows else []
        self._times = [times] if rows else []
        self._workloads = workloads
        self._booster = booster


register("xgb", XGBCostModel)
