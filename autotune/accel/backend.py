"""The simulated accelerator as a backend: how a custom target plugs into autotune.backends.

Its targets are CPU targets with the vendor field ``simaccel`` (see .hardware): code runs on
the host, and every GEMM tile calls the functional model.  The backend claims them ahead of the
generic CPU backend (it is registered after it, when this package is imported) and differs in
two things: a build first makes sure the functional model is compiled, and a function without a
tuning record takes the accelerator's naive schedule (one GEMM instruction per tile, .space)
where the function has the GEMM it maps, the CPU's default schedule elsewhere."""
from __future__ import annotations

from schedules.errors import ScheduleError
from tensor_ir.target import Target

from ..backends import CPUBackend, register
from .hardware import VENDOR

__all__ = ["AcceleratorBackend"]


class AcceleratorBackend(CPUBackend):
    name = "simaccel"
    kind = "llvm"

    def claims(self, target: Target) -> bool:
        if target.kind != self.kind:
            return False
        parts = target.triple.split("-")
        return len(parts) > 1 and parts[1] == VENDOR

    def compile(self, func, target: Target, name: str | None = None):
        from .intrinsic import functional_model

        functional_model()  # the kernel calls it for every GEMM tile
        return super().compile(func, target, name)

    def default_schedule(self, func, target: Target, seed: int = 0):
        from .space import default_schedule

        try:
            return default_schedule(func).func
        except ScheduleError:  # no GEMM block the accelerator maps
            return super().default_schedule(func, target, seed)


register(AcceleratorBackend())
