"""Offline measurement for search tests: a builder that compiles nothing and a runner whose
run times are a synthetic, deterministic function of the program.

The synthetic cost is a distance in feature space from a hidden optimum: the features of one
program of the design space (sampled with a seed the search never uses), standardised by
their spread over random samples.  The cost model sees the same features, so it can learn the
landscape, as with real run times; random search has no such help.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from cost_models import features as F
from records import MeasureResult
from schedules.space import DesignSpace
from tensor_ir import ops


def small_matmul(n: int = 64):
    return ops.matmul(n, n, n)


@dataclass(frozen=True)
class FakeBuild:
    artifact_path: str | None
    error: str | None = None
    build_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


class FakeBuilder:
    """Builds nothing; counts what it was asked to build."""

    def __init__(self):
        self.built = 0

    def build(self, inputs):
        self.built += len(inputs)
        return [FakeBuild(None) for _ in inputs]


class SyntheticRunner:
    """Run time = ``base * (1 + d^2)``, ``d`` the mean standardised distance of a program's
    varying features from the hidden optimum's.  ``fail_every``: every n-th distinct program
    (by feature row) is an error, to exercise error handling.  Records every func it ran."""

    def __init__(self, space: DesignSpace, optimum_seed: int = 987654, samples: int = 48,
                 base: float = 1e-3, fail_every: int = 0):
        rng = random.Random(optimum_seed)
        cands = [space.sample(rng) for _ in range(samples)]
        x = F.extract([c.func for c in cands]).astype(np.float64)
        spread = x.std(axis=0)
        self.columns = np.nonzero(spread > 1e-6)[0]
        self.scale = spread[self.columns]
        self.optimum = x[0, self.columns]
        self.base = base
        self.fail_every = fail_every
        self.ran: list = []
        self.calls = 0
        self._best: dict[str, float] = {}

    def cost(self, func) -> float:
        row = F.extract([func])[0].astype(np.float64)[self.columns]
        d = np.abs(row - self.optimum) / self.scale
        return self.base * (1.0 + float(np.mean(d)) ** 2)

    def seed_best(self, key, seconds):
        self._best[key] = seconds

    def run(self, inputs, builds):
        self.calls += 1
        out = []
        for inp in inputs:
            func = getattr(inp, "func", inp)  # a MeasureInput, or the bare program
            self.ran.append(func)
            if self.fail_every and len(self.ran) % self.fail_every == 0:
                out.append(MeasureResult.error("runtime", "synthetic failure"))
                continue
            t = self.cost(func)
            out.append(MeasureResult.success([t, t * 1.01, t * 0.99], number=1, checked=True,
                                             kernel_seconds=3 * t))
        return out
