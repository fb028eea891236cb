"""Pure primitives: PrimFunc -> PrimFunc rewrites addressed by block name and loop variable.

loops.py (split, fuse, reorder, tile) and annotate.py (parallel, vectorize, unroll, bind,
annotate, unannotate) are always present; the block primitives (compute_at.py, cache.py,
layout.py, reduction.py) are looked up by :func:`block_primitives`.
"""
from __future__ import annotations

import importlib

from . import annotate as annotate_ops
from .annotate import annotate, bind, parallel, unannotate, unroll, vectorize
from .loops import fuse, reorder, split, tile

__all__ = ["split", "fuse", "reorder", "tile", "parallel", "vectorize", "unroll", "bind",
           "annotate", "unannotate", "block_primitives", "annotate_ops"]

# Block primitive name -> module defining it.
_BLOCK_PRIMITIVES = {
    "compute_at": "compute_at", "reverse_compute_at": "compute_at",
    "compute_inline": "compute_at", "reverse_compute_inline": "compute_at",
    "cache_read": "cache", "cache_write": "cache", "set_scope": "cache",
    "storage_align": "cache", "transform_layout": "layout", "pack_layout": "layout",
    "rfactor": "reduction", "decompose_reduction": "reduction",
}

_cache: dict | None = None


def block_primitives() -> dict:
    """``{name: pure function}`` of the block primitives whose modules import."""
    global _cache
    if _cache is None:
        found = {}
        for name, module in _BLOCK_PRIMITIVES.items():
            full = f"{__name__}.{module}"
            try:
                mod = importlib.import_module(full)
            except ModuleNotFoundError as err:
                if err.name != full:
                    raise  # the module exists but one of its imports is broken
                continue
            fn = getattr(mod, name, None)
            if fn is not None:
                found[name] = fn
        _cache = found
    return _cache
