"""Sampling instructions as pure functions of a random generator and an optional decision.

Each function validates a given decision (a decision from a trace, possibly mutated by search)
or draws one from ``rng`` (a ``random.Random``) when the decision is None, and returns it.  The
Schedule methods of the same names record the decision in the trace.
"""
from __future__ import annotations

import math
import random
from collections import OrderedDict

from tensor_ir.expr import BufferLoad, IntImm
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import For
from tensor_ir.visitor import collect

from .errors import ScheduleError, check
from .primitives import block_primitives
from .tree import consumers, find_block, find_loop

# Decisions of sample_compute_location that are not loop indices.
ROOT_DECISION = -1
INLINE_DECISION = -2


def prime_factors(n: int) -> list[int]:
    """Prime factors of n in ascending order, with multiplicity (also used by search)."""
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
                        decision=None, where: str = "loop", inner_budget: int | None = None,
                        inner_levels: int = 1, budget_used: int = 1) -> list[int]:
    """``n`` positive factors whose product is ``extent``, innermost at most
    ``max_innermost_factor`` (-1: unbounded).

    ``inner_budget`` (optional) bounds a tile shared by several loops: the product of the
    ``inner_levels`` innermost factors times ``budget_used`` (what the loops sampled before
    this one already take of it) stays within it.  Multi-level tiling bounds its
    accumulator tile this way, so that it fits the vector registers.

    Sampling: the innermost factor is drawn uniformly from the divisors of ``extent`` within the
    bounds, then each prime factor of the rest goes to one of the outer positions uniformly
    (positions inside the budget only while it holds).
    """
    check(isinstance(n, int) and n >= 1, f"sample_perfect_tile on {where}: n must be >= 1, got "
                                         f"{n!r}")
    check(isinstance(max_innermost_factor, int) and
          (max_innermost_factor >= 1 or max_innermost_factor == -1),
          f"sample_perfect_tile on {where}: max_innermost_factor must be >= 1 or -1, got "
          f"{max_innermost_factor!r}")
    check(extent >= 1, f"sample_perfect_tile on {where}: extent {extent} is not positive")
    bound = extent if max_innermost_factor == -1 else max_innermost_factor
    budget = None
    if inner_budget is not None:
        check(isinstance(inner_budget, int) and inner_budget >= 1 and
              isinstance(inner_levels, int) and 0 <= inner_levels <= n,
              f"sample_perfect_tile on {where}: inner_budget {inner_budget!r} must be a "
              f"positive int and inner_levels {inner_levels!r} in [0, {n}]")
        # What is left of the budget for this loop's inner levels.
        budget = inner_budget // max(1, budget_used)
        check(budget >= 1, f"sample_perfect_tile on {where}: the loops before it already "
                           f"take {budget_used} of inner_budget {inner_budget}")
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
        if budget is not None and inner_levels:
            inner = math.prod(factors[n - inner_levels:])
            check(inner <= budget,
                  f"sample_perfect_tile on {where}: the inner {inner_levels} factors of "
                  f"decision {factors} multiply to {inner}, over the {budget} left of "
                  f"inner_budget {inner_budget}")
        return [int(f) for f in factors]
    if n == 1:
        check(budget is None or not inner_levels or extent <= budget,
              f"sample_perfect_tile on {where}: extent {extent} is over the {budget} left of "
              f"inner_budget {inner_budget}")
        return [extent]
    first_inner = n - inner_levels if budget is not None else n
    if first_inner < n:
        bound = min(bound, budget)
    divisors = [d for d in _divisors(extent) if d <= bound]
    inner = rng.choice(divisors)
    factors = [1] * n
    factors[-1] = inner
    for p in prime_factors(extent // inner):
        k = rng.randrange(n - 1)
        if k >= first_inner and math.prod(factors[first_inner:]) * p > budget:
            # Over the budget: the prime goes to a level outside it instead.
            check(first_inner > 0, f"sample_perfect_tile on {where}: extent {extent} does "
                                   f"not fit the {budget} left of inner_budget "
                                   f"{inner_budget}")
            k = rng.randrange(first_inner)
        factors[k] *= p
    return factors


def fit_perfect_tile(decision, extent: int, n: int, max_innermost_factor: int = 16,
                     inner_budget: int | None = None, inner_levels: int = 1,
                     budget_used: int = 1) -> list[int] | None:
    """The tile of a loop of ``extent`` nearest to ``decision``, a tile decided for a loop of
    another extent (another workload's program carried into this one): from the innermost
    level outwards each factor is the largest divisor of the decided one that the rest of
    the extent still takes, and the outermost level takes what is left.  The inner levels
    are the register and cache tiles, which the decision is worth carrying for; a factor
    that fits keeps its value.  Within the bounds of sample_perfect_tile (a prime moved out
    of the inner levels until they hold); None when ``decision`` is not ``n`` positive ints,
    or no tile of ``extent`` within the bounds exists."""
    if not isinstance(decision, (list, tuple)) or len(decision) != n or n < 1 or extent < 1 \
            or not all(isinstance(f, int) and not isinstance(f, bool) and f >= 1
                       for f in decision):
        return None
    factors, rest = [1] * n, extent
    for level in range(n - 1, 0, -1):
        factors[level] = math.gcd(decision[level], rest)
        rest //= factors[level]
    factors[0] = rest
    bound = extent if max_innermost_factor == -1 else max_innermost_factor
    budget = None if inner_budget is None else inner_budget // max(1, budget_used)
    inner = range(n - inner_levels, n) if budget is not None and inner_levels else range(0)

    def over() -> int | None:
        """A level whose factor breaks a bound (the innermost first), or None."""
        if factors[-1] > bound:
            return n - 1
        if inner and math.prod(factors[k] for k in inner) > budget:
            return next((k for k in reversed(inner) if factors[k] > 1), None)
        return None

    level = over()
    while level is not None:
        if level == 0:
            return None  # the outermost level itself breaks a bound: nothing to move it to
        p = prime_factors(factors[level])[0]
        factors[level] //= p
        factors[0] *= p
        level = over()
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


class _LocationProbe:
    """The compute locations of one block in one func: the loops (outer to inner) around every
    consumer under which compute_at of the block is legal, and whether inlining is.

    The defining test is a trial of the compute_at primitive at each loop.  Trials are kept
    (the compute_at that follows a sampled location reuses its trial: the primitives are
    pure), and are made only where needed:

    * a recorded decision k needs the loops up to the (k+1)-th legal one, root needs none;
    * every loop is first screened by the conditions of compute_at that differ from loop to
      loop (same block scope, the loop encloses every consumer, producers come before it, and
      under it before the first consumer).  The conditions on the block itself are the same at
      every loop, so one successful trial -- at the loop wanted, when there is one -- settles
      them for all.  A loop the screen rejects is still tried (normally it fails at once), so
      only "passes the screen and the block is movable somewhere" is taken for "legal"; a
      trial that disagrees with the screen switches the probe to trying every loop.
    """

    def __init__(self, func: PrimFunc, block: str):
        self.func = func
        self.block = block
        located = find_block(func, block)
        users = consumers(func, block)
        common: list | None = None
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
        primitives = block_primitives()
        self.compute_at = primitives.get("compute_at")
        self.compute_inline = primitives.get("compute_inline")
        # The loops to try, in order: those around every consumer that do not already
        # enclose the block.
        self.loops = [v for v in common or [] if v not in own] \
            if self.compute_at is not None else []
        self.trials: dict[int, bool] = {}
        self.results: dict[int, PrimFunc] = {}
        self.screen: list[bool] | None = None
        self.exhaustive = not SCREEN_LOCATIONS
        self.inline: PrimFunc | None = None
        self.inline_known = False

    # -- trials ------------------------------------------------------------------------------
    def trial(self, var) -> bool:
        """Whether compute_at at ``var`` succeeds (tried once; a success keeps its result)."""
        done = self.trials.get(id(var))
        if done is None:
            try:
                self.results[id(var)] = self.compute_at(self.func, self.block, var)
                done = True
            except ScheduleError:
                done = False
            self.trials[id(var)] = done
        return done

    def can_inline(self) -> bool:
        if not self.inline_known:
            self.inline_known = True
            if self.compute_inline is not None:
                try:
                    self.inline = self.compute_inline(self.func, self.block)
                except ScheduleError:
                    pass
        return self.inline is not None

    # -- listing -----------------------------------------------------------------------------
    def legal_loops(self, want: int | None = None, settle: bool = True) -> list:
        """The legal loops in order -- with ``want``, only up to the want-th.  ``settle=False``
        leaves the block's own conditions unsettled (see :meth:`settle`)."""
        if not self.exhaustive and self.screen is None:
            self.screen = self._screen_all()
            if self.screen is None:
                self.exhaustive = True
        if self.exhaustive:
            out = []
            for var in self.loops:
                if want is not None and len(out) > want:
                    break
                if self.trial(var):
                    out.append(var)
            return out
        out = []
        for var, ok in zip(self.loops, self.screen):
            if want is not None and len(out) > want:
                break
            if ok:
                out.append(var)
            elif self.trial(var):
                return self._give_up(want)
        if settle:
            anchor = out[want] if want is not None and want < len(out) else (
                out[0] if out else None)
            if not self.settle(anchor):
                return self._give_up(want)
        return out

    def settle(self, var) -> bool:
        """Confirm a screened loop by its trial (which settles the block's own conditions for
        every loop); False -- the screen disagrees -- switches to trying every loop."""
        if self.exhaustive or var is None or self.trial(var):
            return True
        self.exhaustive = True
        return False

    def _give_up(self, want):
        self.exhaustive = True
        return self.legal_loops(want)

    # -- screen ------------------------------------------------------------------------------
    def _screen_all(self) -> list[bool] | None:
        """The loop-dependent conditions of compute_at at every loop, or None when they cannot
        be evaluated here (the trials then decide alone)."""
        if not self.loops:
            return []
        try:
            return self._screen()
        except Exception:  # noqa: BLE001 -- anything unexpected: fall back to the trials
            return None

    def _screen(self) -> list[bool] | None:
        from .primitives import blocks as B

        func, block = self.func, self.block
        loc = find_block(func, block)
        blk = loc.node.block
        if len(blk.writes) != 1:
            return None
        out = blk.writes[0].buffer
        readers = B.readers(func, out)
        if not readers:
            return None
        order = {name: i for i, name in enumerate(B.block_names(func))}
        inputs = [r.buffer for r in blk.reads] + [ld.buffer for ld in collect(blk.body,
                                                                              BufferLoad)]
        producers = {p for buf in inputs if buf is not out for p in B.writers(func, buf)}
        producers.discard(block)
        # compute_at inserts into the function with the block removed: its position check
        # sees the loop body there.
        removed = B.remove(func, B.own_subtree(loc))
        screen = []
        for var in self.loops:
            lloc = find_loop(func, var)
            loop = lloc.node
            if loc.parent_block is not lloc.parent_block or any(n is loop for n in loc.path):
                screen.append(False)
                continue
            under = {b.name for b in B.blocks_in(loop.body)}
            if any(name not in under for name in readers):
                screen.append(False)
                continue
            first = min(order[name] for name in under)
            if any(p not in under and order[p] >= first for p in producers):
                screen.append(False)
                continue
            items = B.seq_children(find_loop(removed, var).node.body)
            cons = B.child_index(items, set(readers))
            prods = B.child_index(items, producers)
            if not cons:
                return None
            screen.append(not prods or prods[-1] < cons[0])
        return screen


# Screen candidate loops before trying compute_at (see _LocationProbe); False tries every loop.
SCREEN_LOCATIONS = True


# Probes by (id(func), block); a probe holds its func, so a live entry's id is not reused.
_PROBES: OrderedDict[tuple, _LocationProbe] = OrderedDict()
_PROBE_CACHE_SIZE = 8


def _probe(func: PrimFunc, block: str) -> _LocationProbe:
    key = (id(func), block)
    probe = _PROBES.get(key)
    primitives = block_primitives()
    if probe is not None and probe.func is func and \
            probe.compute_at is primitives.get("compute_at") and \
            probe.compute_inline is primitives.get("compute_inline"):
        _PROBES.move_to_end(key)
        return probe
    probe = _LocationProbe(func, block)
    _PROBES[key] = probe
    while len(_PROBES) > _PROBE_CACHE_SIZE:
        _PROBES.popitem(last=False)
    return probe


def probed_result(func: PrimFunc, block: str, location) -> PrimFunc | None:
    """The program a location listing already computed for moving ``block`` of ``func`` to
    ``location`` (a loop variable, or "inline"), or None when it was not tried (or failed)."""
    probe = _PROBES.get((id(func), block))
    if probe is None or probe.func is not func:
        return None
    primitives = block_primitives()
    if location == "inline":
        if probe.compute_inline is not primitives.get("compute_inline"):
            return None
        return probe.inline
    if probe.compute_at is not primitives.get("compute_at"):
        return None
    return probe.results.get(id(location))


def compute_location_candidates(func: PrimFunc, block: str) -> tuple[list, bool]:
    """Where block ``block`` may be computed: (loop variables, outer to inner, under which
    compute_at of the block is legal, whether compute_inline is legal).

    The candidate loops are the loops that enclose every consumer of the block (below the
    consumers' common root-level nest), kept when the compute_at primitive accepts them.
    """
    probe = _probe(func, block)
    return probe.legal_loops(), probe.can_inline()


def sample_compute_location(rng: random.Random, func: PrimFunc, block: str,
                            decision=None) -> tuple[int, object]:
    """(decision, location): decision -2 inline, -1 root (stay where it is), k >= 0 the k-th
    candidate loop; location is the loop variable, or "inline" / "root"."""
    probe = _probe(func, block)
    plain = isinstance(decision, int) and not isinstance(decision, bool)
    if plain and decision == ROOT_DECISION:
        return decision, "root"  # always a choice: nothing to check
    if plain and decision == INLINE_DECISION and probe.can_inline():
        return decision, "inline"
    if plain and decision >= 0:
        loops = probe.legal_loops(want=decision)
        if decision < len(loops):
            return decision, loops[decision]
    if decision is None:
        # Draw from the screened list, then settle it with the trial of the loop drawn (the
        # one compute_at needs next anyway); should the trial disagree, draw again from the
        # tried list with the generator as it was.
        state = rng.getstate()
        loops = probe.legal_loops(settle=False)
        choices = _location_choices(loops, probe.can_inline())
        decision = rng.choice(choices)
        anchor = loops[decision] if decision >= 0 else (loops[0] if loops else None)
        if probe.settle(anchor):
            return decision, (loops[decision] if decision >= 0 else
                              "root" if decision == ROOT_DECISION else "inline")
        rng.setstate(state)
        decision = None
    loops = probe.legal_loops()
    choices = _location_choices(loops, probe.can_inline())
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


def _location_choices(loops: list, can_inline: bool) -> list[int]:
    return [ROOT_DECISION] + ([INLINE_DECISION] if can_inline else []) + list(
        range(len(loops)))


def loop_extent(func: PrimFunc, loop_var, what: str) -> int:
    loop: For = find_loop(func, loop_var).node
    check(isinstance(loop.extent, IntImm),
          f"{what}: loop {loop_var.name} has a non-constant extent {loop.extent}")
    return int(loop.extent.value)
