"""Sampling instructions as pure functions of a random generator and an optional decision.

Each function validates a given decision (a decision from a trace, possibly mutated by search)
or draws one from ``rng`` (a ``random.Random``) when the decision is None, and returns it.  The
Schedule methods of the same names record the decision in the trace.
"""
from __future__ import annotations

import math
import random

from tensor_ir.expr import IntImm
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import For

from .errors import ScheduleError, check
from .tree import consumers, find_block, find_loop

# Decisions of sample_compute_location that are not loop indices.
ROOT_DECISION = -1
INLINE_DECISION = -2


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def sample_perfect_tile(rng: random.Random, extent: int, n: int, max_innermost_factor: int = 16,
                        decision=None, where: str = "loop") -> list[int]:
    """``n`` positive factors whose product is ``extent``, innermost at most
    ``max_innermost_factor`` (-1: unbounded).

    Sampling: the innermost factor is drawn uniformly from the divisors of ``extent`` within the
    bound, then each prime factor of the rest goes to one of the outer positions uniformly.
    """
    check(isinstance(n, int) and n >= 1, f"sample_perfect_tile on {where}: n must be >= 1, got "
                                         f"{n!r}")
    check(isinstance(max_innermost_factor, int) and
          (max_innermost_factor >= 1 or max_innermost_factor == -1),
          f"sample_perfect_tile on {where}: max_innermost_factor must be >= 1 or -1, got "
          f"{max_innermost_factor!r}")
    check(extent >= 1, f"sample_perfect_tile on {where}: extent {extent} is not positive")
    bound = extent if max_innermost_factor == -1 else max_innermost_factor
    if decision is not None:
        factors = list(decision)
        check(len(factors) == n and all(isinstance(f, int) and not isinstance(f, bool) and f >= 1
                                        for f in factors),
              f"sample_perfect_tile on {where}: decision {factors} is not {n} positive ints")
        check(math.prod(factors) == extent,
              f"sample_perfect_tile on {where}: decision {factors} multiplies to "
              f"{math.prod(factors)}, not the extent {extent}")
        check(factors[-1] <= bound,
              f"sample_perfect_tile on {where}: innermost factor {factors[-1]} of decision "
              f"{factors} exceeds max_innermost_factor {max_innermost_factor}")
        return [int(f) for f in factors]
    if n == 1:
        return [extent]
    inner = rng.choice([d for d in _divisors(extent) if d <= bound])
    factors = [1] * n
    factors[-1] = inner
    for p in _prime_factors(extent // inner):
        factors[rng.randrange(n - 1)] *= p
    return factors


def sample_categorical(rng: random.Random, candidates, probs, decision=None) -> int:
    """Index of the chosen candidate, drawn with the given probabilities."""
    candidates, probs = list(candidates), list(probs)
    check(len(candidates) >= 1, "sample_categorical needs at least one candidate")
    check(len(candidates) == len(probs),
          f"sample_categorical: {len(candidates)} candidates but {len(probs)} probabilities")
    check(all(isinstance(c, int) and not isinstance(c, bool) for c in candidates),
          f"sample_categorical: candidates must be ints, got {candidates}")
    check(all(isinstance(p, (int, float)) and p >= 0 and math.isfinite(p) for p in probs)
          and sum(probs) > 0,
          f"sample_categorical: probabilities {probs} must be non-negative with a positive sum")
    if decision is not None:
        check(isinstance(decision, int) and 0 <= decision < len(candidates),
              f"sample_categorical: decision {decision!r} is not an index into {candidates}")
        return int(decision)
    return rng.choices(range(len(candidates)), weights=probs)[0]


def compute_location_candidates(func: PrimFunc, block: str) -> tuple[list, bool]:
    """Where block ``block`` may be computed: (loop variables, outer to inner, under which
    compute_at of the block is legal, whether compute_inline is legal).

    The candidate loops are the loops that enclose every consumer of the block (below the
    consumers' common root-level nest), kept when the compute_at primitive accepts them.
    """
    from .primitives import block_primitives

    located = find_block(func, block)
    users = consumers(func, block)
    loops: list = []
    if users:
        common = None
        for name in users:
            chain = [lp.loop_var for lp in find_block(func, name).loops]
            if common is None:
                common = chain
            else:
                k = 0
                while k < min(len(common), len(chain)) and common[k] is chain[k]:
                    k += 1
                common = common[:k]
        own = {lp.loop_var for lp in located.loops}
        compute_at = block_primitives().get("compute_at")
        for var in common or []:
            if var in own:
                continue  # the block already sits under this loop
            if compute_at is None:
                continue
            try:
                compute_at(func, block, var)
            except ScheduleError:
                continue
            loops.append(var)
    can_inline = False
    inline = block_primitives().get("compute_inline")
    if inline is not None:
        try:
            inline(func, block)
            can_inline = True
        except ScheduleError:
            pass
    return loops, can_inline


def sample_compute_location(rng: random.Random, func: PrimFunc, block: str,
                            decision=None) -> tuple[int, object]:
    """(decision, location): decision -2 inline, -1 root (stay where it is), k >= 0 the k-th
    candidate loop; location is the loop variable, or "inline" / "root"."""
    loops, can_inline = compute_location_candidates(func, block)
    choices = [ROOT_DECISION] + ([INLINE_DECISION] if can_inline else []) + list(
        range(len(loops)))
    if decision is None:
        decision = rng.choice(choices)
    check(isinstance(decision, int) and decision in choices,
          f"sample_compute_location of block {block}: decision {decision!r} is not one of "
          f"{choices} (-1 root, -2 inline when legal, else a candidate loop index)")
    if decision == ROOT_DECISION:
        return decision, "root"
    if decision == INLINE_DECISION:
        return decision, "inline"
    return decision, loops[decision]


def loop_extent(func: PrimFunc, loop_var, what: str) -> int:
    loop: For = find_loop(func, loop_var).node
    check(isinstance(loop.extent, IntImm),
          f"{what}: loop {loop_var.name} has a non-constant extent {loop.extent}")
    return int(loop.extent.value)
