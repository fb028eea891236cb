"""Pure primitives: PrimFunc -> PrimFunc rewrites addressed by block name and loop variable.

loops.py (split, fuse, reorder, tile) and annotate.py (parallel, vectorize, unroll, bind,
annotate, unannotate) hold the loop primitives; compute_at.py, cache.py, layout.py,
reduction.py and tensorize.py (blockize, tensorize) the block primitives, which Schedule and the samplers find by name through
:func:`block_primitives`.
"""
from __future__ import annotations

from . import annotate as annotate_ops
from .annotate import annotate, bind, parallel, unannotate, unroll, vectorize
from .cache import cache_read, cache_write, set_scope, storage_align
from .compute_at import compute_at, compute_inline, reverse_compute_at, reverse_compute_inline
from .layout import pack_layout, transform_layout
from .loops import fuse, reorder, split, tile
from .reduction import decompose_reduction, rfactor
from .tensorize import blockize, tensorize, tensorize_loop

__all__ = ["split", "fuse", "reorder", "tile", "parallel", "vectorize", "unroll", "bind",
           "annotate", "unannotate", "block_primitives", "annotate_ops"]

# Block primitive name -> pure function.
_BLOCK_PRIMITIVES = {
    "compute_at": compute_at, "reverse_compute_at": reverse_compute_at,
    "compute_inline": compute_inline, "reverse_compute_inline": reverse_compute_inline,
    "cache_read": cache_read, "cache_write": cache_write, "set_scope": set_scope,
    "storage_align": storage_align, "transform_layout": transform_layout,
    "pack_layout": pack_layout, "rfactor": rfactor, "decompose_reduction": decompose_reduction,
    "blockize": blockize, "tensorize": tensorize, "tensorize_loop": tensorize_loop,
}


def block_primitives() -> dict:
    """``{name: pure function}`` of the block primitives."""
    return _BLOCK_PRIMITIVES
