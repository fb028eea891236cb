"""Random matmul schedules and a hidden synthetic cost, for offline cost-model tests."""
from __future__ import annotations

import math
import random

import numpy as np

from benchmarks.cost_model_accuracy import random_matmul_schedule
from tensor_ir import ops

__all__ = ["matmul_candidates", "random_matmul_schedule", "synthetic_time"]


def synthetic_time(d: dict, rng: np.random.Generator, noise: float = 0.1) -> float:
    """A hidden, plausible cost of the decisions: vector lanes and register blocking help,
    a B tile that overflows a 32 KiB cache and a missing parallel loop hurt; log-normal noise."""
    i2, j2, k1 = d["ti"][2], d["tj"][2], d["tk"][1]
    j1 = d["tj"][1]
    speed = 1.0
    if d["vectorize"]:
        speed *= min(j2, 16) ** 0.8
    accumulators = i2 * max(j2 // 8, 1)
    speed *= math.log2(1 + i2) if accumulators <= 32 else 0.5
    if k1 * j1 * j2 * 4 > 32 * 1024:
        speed *= 0.6
    if d["parallel"]:
        speed *= min(d["ti"][0] * d["tj"][0], 2)
    if d["cache"]:
        speed *= 1.2
    if d["unroll"] and i2 > 1:
        speed *= 1.1
    return float(1e-3 / speed * math.exp(noise * rng.standard_normal()))


def matmul_candidates(n: int, size: int = 64, seed: int = 0):
    """``n`` random schedules of a size^3 matmul: (scheduled funcs, decisions)."""
    rng = random.Random(seed)
    func = ops.matmul(size, size, size)
    funcs, decisions = [], []
    for _ in range(n):
        sch, d = random_matmul_schedule(func, rng)
        funcs.append(sch.func)
        decisions.append(d)
    return funcs, decisions
