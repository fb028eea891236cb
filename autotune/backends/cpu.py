"""The CPU backend (``llvm`` targets): kernels compiled by LLVM and run in this process; the
build worker writes object files, the run worker loads them into the JIT and times them
(:mod:`autotune.measure.cpu`)."""
from __future__ import annotations

from tensor_ir import intrinsics
from tensor_ir.errors import TensorIRError
from tensor_ir.target import Target, host_info

from .base import Backend, register

__all__ = ["CPUBackend"]


class CPUBackend(Backend):
    name = "llvm"
    kind = "llvm"
    cpu = True
    artifact_suffix = ".o"

    def unavailable(self, target: Target) -> str | None:
        if target.is_host:
            return None
        host = host_info()
        return (f"code for {target.triple} (cpu {target.cpu}) cannot run on this machine "
                f"({host.triple}, cpu {host.cpu})")

    def compile(self, func, target: Target, name: str | None = None):
        from autotune.runtime.build import build

        return build(func, target, name=name)

    def default_schedule(self, func, target: Target, seed: int = 0):
        from schedules.default_schedule import default_candidate

        candidate = default_candidate(func, target, seed)
        return None if candidate is None else candidate.func

    def tuning_seeds(self, func, target: Target) -> list:
        from schedules.default_schedule import default_candidate

        candidate = default_candidate(func, target)
        return [] if candidate is None else [candidate.final_trace]

    def model_device(self, target: Target):
        return None

    def build_request(self, inp, request: dict) -> None:
        # Intrinsics registered at run time exist in this process only (see
        # tensor_ir.intrinsics.portable): their definitions travel with the candidate.
        shipped = intrinsics.portables(inp.func)
        if shipped:
            request["intrinsics"] = shipped

    def run_request(self, inp, request: dict, config) -> str | None:
        from autotune.runtime.prepack import split_packing

        target = inp.target
        if not target.is_host:
            return (f"target {target} is not this machine; the candidate was built "
                    f"({request['path']}) but is not run locally")
        # Shared libraries of external intrinsics: the object file names their symbols, not
        # where they live, and only this process knows the registrations.
        try:
            libraries = intrinsics.libraries_of(inp.func)
        except intrinsics.IntrinsicError as err:
            return str(err)
        if libraries:
            request["libraries"] = libraries
        if inp.weight_params:
            # The builder split these packings off the candidate (see
            # MeasureInput.weight_params): the worker runs them once, before timing.
            _, packs = split_packing(inp.func, inp.weight_params)
            if packs:
                request["packs"] = [{"index": p.index, "func": p.pack.to_json(),
                                     "hash": p.pack.structural_hash()} for p in packs]
            if inp.cold_weights:
                request["cold_params"] = list(inp.weight_params)
                request["cold_bytes"] = inp.cold_bytes
        if inp.fresh_inputs:
            # The inputs that are not weights are rewritten before each timed call.
            request["fresh_inputs"] = True
            request["weights"] = list(inp.weight_params)
        if target.num_cores >= 2 and config.quiet_wait > 0:
            # Time on a host whose cores talk at their usual speed (autotune.measure.host).
            request["quiet_wait"] = config.quiet_wait
        return None

    def build_artifact(self, inp, path: str) -> None:
        from autotune.runtime.build import build_object
        from autotune.runtime.prepack import split_packing

        func = inp.func
        if inp.weight_params:
            # The packing of model weights is split off, as a model build does; the runner
            # packs the weights once before timing (see MeasureInput.weight_params).
            func, _ = split_packing(func, inp.weight_params)
        object_code = build_object(func, target=inp.target)
        with open(path, "wb") as f:
            f.write(object_code)

    def measure(self, request: dict, work: dict, state: dict) -> dict:
        from autotune.measure.cpu import measure_cpu

        return measure_cpu(request, work, state)

    def reference_kernel(self, func, target: Target):
        # The definition as written, on the target itself: the plain loop nest is the
        # meaning every schedule must preserve.
        from autotune.runtime.build import build

        return build(func, target=target)


def host_reference_kernel(func):
    """A kernel of ``func`` for the host CPU computing a device workload's reference: the
    unscheduled definition is no valid device kernel, and device workloads are large (an
    SGEMM of 4096^3 takes minutes as a plain loop nest), so the CPU's default schedule
    computes it (parallel and tiled, seconds), the plain nest where there is none."""
    from autotune.runtime.build import build
    from schedules.default_schedule import default_candidate

    host = Target("llvm")
    try:
        scheduled = default_candidate(func, host)
    except TensorIRError:
        scheduled = None
    return build(func if scheduled is None else scheduled.func, target=host)


register(CPUBackend())
