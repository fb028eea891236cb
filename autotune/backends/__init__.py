"""Backends: one per kind of hardware, registered by name (see :mod:`.base`).

    from autotune.backends import backend_for
    backend = backend_for(target)          # the CPU, OpenCL or CUDA backend, or a custom one
    backend.unavailable(target)            # why code for it cannot run here, or None
    kernel = backend.compile(func, target) # a callable kernel in this process

Built in: :class:`CPUBackend` (``llvm``), :class:`OpenCLBackend` (``opencl``) and
:class:`CUDABackend` (``cuda``).  A custom target plugs in by registering a Backend subclass
that claims its targets (``autotune.accel`` registers the simulated accelerator's).
"""
from __future__ import annotations

from .base import Backend, backend_for, register, registered
from .cpu import CPUBackend
from .gpu import CUDABackend, GPUBackend, OpenCLBackend, build_gpu, gpu_default_candidate

__all__ = ["Backend", "CPUBackend", "CUDABackend", "GPUBackend", "OpenCLBackend",
           "backend_for", "build_gpu", "gpu_default_candidate", "register",
           "registered"]
