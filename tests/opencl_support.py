"""Whether OpenCL kernels can be built and run in this test process, and why not.

A device can be listed and still unable to compile (PoCL's bundled LLVM refuses CPUs newer
than itself), so the question is ``autotune.gpu.opencl_problem``'s: one probe compile per
process, whose answer becomes the skip reason.
"""
from __future__ import annotations

import pytest

from autotune.gpu import opencl_problem

PROBLEM = opencl_problem()
OPENCL = PROBLEM is None
needs_opencl = pytest.mark.skipif(not OPENCL, reason=f"no usable OpenCL device: {PROBLEM}")


def require_opencl() -> None:
    """Skip the calling test when no OpenCL kernel can be built here."""
    if not OPENCL:
        pytest.skip(f"no usable OpenCL device: {PROBLEM}")


def pocl_or_default() -> str:
    """PoCL when it can build (real work-groups and barriers on the CPU), else the first
    OpenCL device."""
    return "opencl -platform=portable" if opencl_problem("portable") is None else "opencl"
