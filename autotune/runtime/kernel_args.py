"""The argument check every GPU runtime's kernel call makes (OpenCL and CUDA alike)."""
from __future__ import annotations

import numpy as np

from tensor_ir.errors import BuildError

__all__ = ["check_arrays"]


def check_arrays(entry: str, params, arrays) -> None:
    """BuildError unless ``arrays`` are C-contiguous numpy arrays of ``params``' shapes and
    dtypes, writable where the kernel ``entry`` writes them."""
    if len(arrays) != len(params):
        raise BuildError(f"kernel {entry} takes {len(params)} arrays, got {len(arrays)}")
    for p, a in zip(params, arrays):
        if not isinstance(a, np.ndarray):
            raise BuildError(f"kernel {entry}: argument {p.name} must be a numpy array, got "
                             f"{type(a).__name__}")
        if a.shape != tuple(p.shape) or a.dtype != np.dtype(p.dtype):
            raise BuildError(f"kernel {entry}: argument {p.name} must be "
                             f"{p.dtype}{list(p.shape)}, got {a.dtype}{list(a.shape)}")
        if not a.flags.c_contiguous:
            raise BuildError(f"kernel {entry}: argument {p.name} must be C-contiguous")
        if p.written and not a.flags.writeable:
            raise BuildError(f"kernel {entry}: argument {p.name} is written but the array is "
                             "read-only")
