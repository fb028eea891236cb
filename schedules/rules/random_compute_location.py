"""RandomComputeLocation: a sampled compute location for producer stages that no other rule
placed -- a padding stage, a reduction feeding an elementwise stage, an unfused elementwise
stage.  The location (root, inline when legal, or one of the loops around every consumer) is a
``sample_compute_location`` decision, so search moves the stage by mutating it.
"""
from __future__ import annotations

from ..sampling import compute_location_candidates
from ..schedule import Schedule
from .base import ScheduleRule, try_on_copy
from .analysis import block_info, writes_param
from .multi_level_tiling import TILING_KEY
from .rfactor import RFACTOR_KEY


class RandomComputeLocation(ScheduleRule):
    name = "random_compute_location"

    def apply(self, sch: Schedule, block: str) -> list[Schedule]:
        info = block_info(sch.func, block)
        if info is None or block == "root" or writes_param(sch.func, info.block):
            return [sch]
        if info.annotation(TILING_KEY) is not None or info.annotation(RFACTOR_KEY) is not None:
            return [sch]
        loops, can_inline = compute_location_candidates(sch.func, block)
        if not loops and not can_inline:
            return [sch]  # the only choice would be where it already is

        def place(s: Schedule) -> None:
            b = s.get_block(block)
            s.compute_at(b, s.sample_compute_location(b))

        done = try_on_copy(sch, place)
        return [done if done is not None else sch]

