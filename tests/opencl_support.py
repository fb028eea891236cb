"""Whether OpenCL kernels can be built and run in this test process, and why not.

A device can be listed and still unable to compile (PoCL's bundled LLVM refuses CPUs newer
than itself), so the question is ``autotune.runtime.opencl.opencl_problem``'s: one probe compile per
process, whose answer becomes the skip reason.

When the default device cannot compile, the tests run on Oclgrind instead: a simulated
OpenCL device with real work-groups, local memory and barriers, fast enough at the tests'
sizes (the tuning tests' candidates included) (:data:`RUN_TARGET`, :func:`require_opencl`,
:func:`pocl_or_default`).
"""
from __future__ import annotations

import pytest

from autotune.runtime.opencl import opencl_problem

PROBLEM = opencl_problem()
OPENCL = PROBLEM is None


def _run_target() -> str | None:
    if OPENCL:
        return "opencl"
    if opencl_problem("oclgrind") is None:
        return "opencl -platform=oclgrind"
    return None


# The target that runs kernels for a result check: the default device, else Oclgrind.
RUN_TARGET = _run_target()
needs_opencl_run = pytest.mark.skipif(
    RUN_TARGET is None, reason=f"no usable OpenCL device, and no Oclgrind: {PROBLEM}")


def require_opencl() -> None:
    """Skip the calling test when no OpenCL kernel can be built and run here (Oclgrind
    counts: see :func:`pocl_or_default`)."""
    if RUN_TARGET is None:
        pytest.skip(f"no usable OpenCL device, and no Oclgrind: {PROBLEM}")


def pocl_or_default() -> str:
    """PoCL when it can build (real work-groups and barriers on the CPU), else the first
    OpenCL device that can, else Oclgrind."""
    if opencl_problem("portable") is None:
        return "opencl -platform=portable"
    return RUN_TARGET or "opencl"
