"""TransferCostModel: a pre-trained model as a fading prior beside a model of this task alone.

Retraining a pre-trained model on its source rows plus a new task's first measurements drowns
the task: 600 source rows against 16 of its own, in a ranking objective that weighs every query
group's pairs alike.  Measured on ResNet-18 -> ResNet-50 / MobileNetV2 tasks, the retrained
model ranked each new batch worse (pairwise accuracy 0.65) than a cold model trained on the
task's own batches (0.68).  This model keeps the two apart:

    prior   the pre-trained model, never retrained here: it ranks the first batch, before
            anything of the task is measured, and stays as a prior
    local   an XGBCostModel trained on this task's measurements only, as a cold model would

    score = w * z(prior) + (1 - w) * z(local),   w = half_rows / (half_rows + rows measured)

``z`` standardises each model's scores over the candidates scored together (only their order
matters, and the two models' scales differ).  The prior decides alone until the local model is
trained, weighs as much as the local model after ``half_rows`` measurements and fades after;
a run that goes on long enough is ranked as a cold run would be.

Measured against retraining (``python -m benchmarks.search_efficiency transfer``, ResNet-18
source, two tasks each of ResNet-50 and MobileNetV2, 128 trials): ahead with seed 0 (median
trials to 90% of the cold best 0.65x cold against 0.97x), behind with seed 1 (1.01x against
0.63x).  Neither is consistently ahead, so a saved model passed as ``cost_model`` is still
retrained; this model is passed explicitly, ``cost_model=TransferCostModel(prior=load(path))``.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .base import (
    KIND_KEY,
    CostModel,
    CostModelError,
    feature_matrix,
    read_saved,
    register,
    write_saved,
)
from .xgb import XGBCostModel

__all__ = ["TransferCostModel"]

FORMAT_VERSION = 1


def _standardised(scores: np.ndarray) -> np.ndarray:
    spread = float(np.std(scores))
    if not np.isfinite(spread) or spread == 0.0:
        return np.zeros_like(scores)
    return (scores - float(np.mean(scores))) / spread


class TransferCostModel(CostModel):
    """See the module text.  ``prior``: a trained CostModel (typically loaded from a file
    ``cost_models.pretrain`` wrote); ``half_rows``: the task's measured rows at which prior and
    local model weigh alike; the other options configure the local XGBCostModel."""

    kind = "transfer"

    def __init__(self, prior: CostModel | None = None, half_rows: float = 64.0, seed: int = 0,
                 **local_options):
        if prior is not None and not isinstance(prior, CostModel):
            raise CostModelError(f"TransferCostModel: prior must be a CostModel, got "
                                 f"{type(prior).__name__}")
        if not isinstance(half_rows, (int, float)) or isinstance(half_rows, bool) \
                or not half_rows > 0:
            raise CostModelError(f"TransferCostModel: half_rows must be a number > 0, got "
                                 f"{half_rows!r}")
        self.prior = prior
        self.half_rows = float(half_rows)
        self.local = XGBCostModel(seed=seed, **local_options)
        self.rows = 0

    @property
    def is_trained(self) -> bool:
        return (self.prior is not None and self.prior.is_trained) or self.local.is_trained

    @property
    def prior_weight(self) -> float:
        """The prior's weight in the blend now (1 before the local model is trained)."""
        if self.prior is None or not self.prior.is_trained:
            return 0.0
        if not self.local.is_trained:
            return 1.0
        return self.half_rows / (self.half_rows + self.rows)

    def update(self, candidates: Sequence, results: Sequence) -> None:
        before = len(self.local.training_data())
        self.local.update(candidates, results)
        self.rows += len(self.local.training_data()) - before

    def predict(self, candidates) -> np.ndarray:
        x = feature_matrix(candidates)
        w = self.prior_weight
        if w == 0.0:
            return self.local.predict(x)
        prior = np.asarray(self.prior.predict(x), dtype=np.float64)
        if w == 1.0:
            return prior
        local = np.asarray(self.local.predict(x), dtype=np.float64)
        return w * _standardised(prior) + (1.0 - w) * _standardised(local)

    # -- persistence: the prior and the local model's data in one file ------------------------
    def save(self, path: str | os.PathLike) -> None:
        import tempfile

        docs = {}
        with tempfile.TemporaryDirectory() as folder:
            for name, model in (("prior", self.prior), ("local", self.local)):
                if model is None:
                    docs[name] = None
                    continue
                part = os.path.join(folder, name + ".json")
                model.save(part)
                docs[name] = read_saved(part)
        write_saved(path, {KIND_KEY: self.kind, "format_version": FORMAT_VERSION,
                           "half_rows": self.half_rows, "rows": self.rows, **docs})

    def load(self, path: str | os.PathLike) -> None:
        import tempfile

        from .base import create

        doc = read_saved(path, self.kind)
        if doc.get("format_version") != FORMAT_VERSION:
            raise CostModelError(f"{os.fspath(path)}: transfer model format_version "
                                 f"{doc.get('format_version')!r}; this release reads "
                                 f"{FORMAT_VERSION}")
        models = {}
        with tempfile.TemporaryDirectory() as folder:
            for name in ("prior", "local"):
                sub = doc.get(name)
                if sub is None:
                    models[name] = None
                    continue
                part = os.path.join(folder, name + ".json")
                write_saved(part, sub)
                model = create(sub[KIND_KEY])
                model.load(part)
                models[name] = model
        if not isinstance(models["local"], XGBCostModel):
            raise CostModelError(f"{os.fspath(path)}: a transfer model's local model is xgb")
        self.prior, self.local = models["prior"], models["local"]
        self.half_rows, self.rows = float(doc["half_rows"]), int(doc["rows"])


register("transfer", TransferCostModel)
