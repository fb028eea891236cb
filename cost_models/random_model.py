"""RandomCostModel: uniform random scores, the baseline every learned model must beat."""
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
    run_times,
    write_saved,
)


class RandomCostModel(CostModel):
    """Scores are independent uniform draws from a seeded generator; ``update`` learns nothing
    (it only counts what it was shown).  The generator state is saved, so a reloaded model
    continues the same sequence."""

    kind = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        self.seen = 0

    def update(self, candidates: Sequence, results: Sequence) -> None:
        n = len(candidates)
        run_times(results, n)  # validates the results like every model does
        self.seen += n

    def predict(self, candidates) -> np.ndarray:
        # Featurising is not needed for random scores; only the count matters.
        n = candidates.shape[0] if isinstance(candidates, np.ndarray) else len(candidates)
        if isinstance(candidates, np.ndarray):
            feature_matrix(candidates)  # a matrix of the wrong width is still an error
        return self._rng.random(n)

    def save(self, path: str | os.PathLike) -> None:
        write_saved(path, {KIND_KEY: self.kind, "seed": self.seed, "seen": self.seen,
                           "rng_state": self._rng.bit_generator.state})

    def load(self, path: str | os.PathLike) -> None:
        doc = read_saved(path, self.kind)
        try:
            rng = np.random.default_rng(int(doc["seed"]))
            rng.bit_generator.state = doc["rng_state"]
            seed, seen = int(doc["seed"]), int(doc["seen"])
        except (KeyError, TypeError, ValueError) as err:
            raise CostModelError(f"{os.fspath(path)}: malformed random cost model file: "
                                 f"{err}") from err
        self.seed, self.seen, self._rng = seed, seen, rng


register("random", RandomCostModel)
