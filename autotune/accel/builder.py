"""AcceleratorBuilder: the LocalBuilder, with worker processes that know the GEMM intrinsic.

A LocalBuilder worker is a fresh interpreter: it knows the tensor intrinsics registered when
``tensor_ir`` is imported, not those a user module registers (this package's GEMM intrinsic),
so it could not generate the call of a tensorized tile.  This builder's workers import
``autotune.accel`` before serving, and otherwise build exactly as LocalBuilder's do (object
files of the host code; the GEMM tiles are calls the runner resolves against the functional
model's library).
"""
from __future__ import annotations

from ..measure.builder import LocalBuilder
from ..measure.worker import WorkerProcess

__all__ = ["AcceleratorBuilder", "handle_build_request"]


class AcceleratorBuilder(LocalBuilder):
    """A LocalBuilder (same options) whose workers import autotune.accel first."""

    def __init__(self, max_workers: int | None = None, timeout: float = 30.0,
                 work_dir: str | None = None):
        super().__init__(max_workers, timeout, work_dir)
        # NOTE: LocalBuilder's workers start lazily, on their first request; replacing them
        # before any request starts no process.
        self._workers = [WorkerProcess(f"{__name__}:handle_build_request",
                                       f"autotune-accel-build-{i}")
                         for i in range(self.max_workers)]


def handle_build_request(request: dict, state: dict) -> dict:
    """Worker side: register the accelerator's intrinsic, then build as LocalBuilder does."""
    from ..measure.builder import handle_build_request as build
    from .intrinsic import GEMM_INTRIN  # noqa: F401 - importing registers the intrinsic

    return build(request, state)
