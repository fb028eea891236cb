"""RandomSearch: every batch is fresh random samples of the design space.

The baseline the evolutionary search is compared with: same interface, same pool (so it too
never measures a program twice and resumes from a database without repeating itself), no cost
model in the choice.
"""
from __future__ import annotations

from .pool import SearchCandidate
from .strategy import SearchError, SearchStrategy, register

__all__ = ["RandomSearch"]


class RandomSearch(SearchStrategy):
    """``seed``: the sampler's seed; ``max_failures``: samples in a row that give nothing new
    before a batch is returned short (the space is then taken to be exhausted)."""

    kind = "random"

    def __init__(self, seed: int = 0, max_failures: int = 64):
        super().__init__(seed)
        if not isinstance(max_failures, int) or max_failures < 1:
            raise SearchError(f"RandomSearch: max_failures must be a positive int, got "
                              f"{max_failures!r}")
        self.max_failures = max_failures

    def propose(self, count: int) -> list[SearchCandidate]:
        if not isinstance(count, int) or count < 0:
            raise SearchError(f"propose: count must be an int >= 0, got {count!r}")
        batch = self._random_new(count, set(), self.max_failures)
        for c in batch:
            c.origin = "random"
        return batch


register("random", RandomSearch)
