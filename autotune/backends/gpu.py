"""The GPU backends: ``opencl`` (any OpenCL device through pyopencl; PoCL runs it on the CPU)
and ``cuda`` (NVIDIA GPUs through pycuda).  One lowering and one C printer serve both
(:func:`autotune.runtime.opencl.gpu_program`, in the backend's dialect); they differ in how a
device is found, how a kernel is loaded and which errors leave the device unusable.

The default schedule of a GPU build is a sample, at the build's seed, of the GPU design space
restricted to inlining and thread binding (DEFAULT_RULES: one output element per thread,
reductions serial in their thread), else of the full GPU space.  The tiled programs of the
full space (shared-memory staging, barriers) are left to tuning on purpose: the tuner runs
each candidate in an isolated worker, where a program that faults the OpenCL runtime costs
one record, while a default schedule runs in the caller's process (PoCL was seen to crash on a
valid-looking staged sample).  No default is seeded into tuning: the CPU rule of thumb sets
vector and parallel decisions a GPU has no use for and no thread counts.
"""
from __future__ import annotations

from tensor_ir.errors import BuildError, TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from .base import Backend, backend_for, register
from .cpu import host_reference_kernel

__all__ = ["CUDABackend", "DEFAULT_RULES", "GPUBackend", "OpenCLBackend", "build_gpu",
           "gpu_default_candidate"]

# The rules of a GPU default schedule (see the module text).
DEFAULT_RULES = ("auto_inline", "auto_bind")


def gpu_default_candidate(func: PrimFunc, target: Target, seed: int = 0):
    """The default schedule's Candidate of ``func`` on a GPU target (see the module text);
    None when neither space yields a valid program."""
    from schedules.errors import ScheduleError
    from schedules.rules import create as create_rule
    from schedules.space import DesignSpace

    for rules in ([create_rule(kind) for kind in DEFAULT_RULES], None):
        try:
            return DesignSpace(func, target, rules=rules).sample(seed=seed)
        except (ScheduleError, TensorIRError):
            continue
    return None


def build_gpu(func: PrimFunc, target: str | Target = "opencl", name: str | None = None):
    """Lower ``func`` (if needed) for the GPU, print it in the target's dialect and compile it
    for the target's device: an ``opencl`` target gives an
    :class:`autotune.runtime.opencl.GPUKernel`, a ``cuda`` one an
    :class:`autotune.runtime.cuda.CUDAKernel`.  TargetError for a target no GPU
    backend serves; BuildError for a program a kernel cannot be, one the verifier refuses, or
    a missing device or runtime.  A function whose top level is a sequence of nests becomes
    one kernel per nest, launched in order."""
    from tensor_ir.target import TargetError

    t = Target(target)
    backend = backend_for(t)
    if not isinstance(backend, GPUBackend):
        raise TargetError(f"build_gpu runs GPU (opencl, cuda) targets; {str(t)!r} is served "
                          f"by the {backend.name} backend")
    return backend.compile(func, t, name)


class GPUBackend(Backend):
    """What the OpenCL and CUDA backends share; ``dialect`` names the C they print."""

    dialect = ""

    @property
    def artifact_suffix(self) -> str:
        from autotune.measure.gpu import ARTIFACT_SUFFIX

        return ARTIFACT_SUFFIX

    def compile(self, func, target: Target, name: str | None = None):
        if not isinstance(func, PrimFunc):
            raise BuildError(f"build_gpu takes a PrimFunc, got {type(func).__name__}")
        problem = self.unavailable(target)  # say so before spending a compile
        if problem is not None:
            raise BuildError(problem)
        from autotune.runtime.opencl import gpu_program

        lowered, source = gpu_program(func, target, name, dialect=self.dialect)
        return self.kernel(source, lowered, target)

    def kernel(self, source, lowered, target: Target, cubin: bytes | None = None):
        """The runtime's kernel object of a printed module (``lowered``: its PrimFunc, None
        when loaded from an artifact)."""
        raise BuildError(f"the {self.name} backend has no kernel runtime")

    def binary(self, module, target: Target) -> bytes | None:
        """Device code compiled from a printed module in the build worker (which needs no
        device), carried in the artifact; None where the runtime compiles the source."""
        return None

    def fatal(self, err: Exception) -> bool:
        """Whether ``err``, raised while running a kernel, leaves the device unusable for the
        worker process (its context must be thrown away)."""
        return False

    def default_schedule(self, func, target: Target, seed: int = 0):
        candidate = gpu_default_candidate(func, target, seed)
        return None if candidate is None else candidate.func

    def build_artifact(self, inp, path: str) -> None:
        """Lower, print and verify one candidate (the verifier's typed error for a program
        that cannot be a kernel on the target), and write its JSON artifact."""
        from autotune.runtime.opencl import gpu_program
        from autotune.measure.gpu import write_artifact

        _, module = gpu_program(inp.func, inp.target, dialect=self.dialect)
        write_artifact(module, inp.target, path, self.binary(module, inp.target))

    def measure(self, request: dict, work: dict, state: dict) -> dict:
        """The GPU worker's side of one candidate: load its artifact and time it by the
        shared protocol (autotune.measure.gpu.measure_kernel).  An error that leaves the
        device unusable (a CUDA fault) adds ``restart_worker`` to the reply."""
        from autotune.measure.gpu import load_module, measure_kernel

        try:
            module, target, cubin = load_module(request["path"])
            target = Target(target)
            kernel = self.kernel(module, None, target, cubin=cubin)
        except BuildError as err:
            return {"error_kind": "runtime", "error_msg": f"{type(err).__name__}: {err}"}
        try:
            return measure_kernel(kernel, module, request, work)
        except Exception as err:  # noqa: BLE001 - the runtime's own error types
            if not self.fatal(err):
                raise
            return {"error_kind": "runtime", "restart_worker": True,
                    "error_msg": f"{self.name} error while running the kernel: "
                                 f"{type(err).__name__}: {err}"}

    def reference_kernel(self, func, target: Target):
        return host_reference_kernel(func)


class OpenCLBackend(GPUBackend):
    name = "opencl"
    kind = "opencl"
    dialect = "opencl"

    def unavailable(self, target: Target) -> str | None:
        from autotune.runtime.opencl import opencl_problem

        return opencl_problem(dict(target.options).get("platform"))

    def kernel(self, source, lowered, target: Target, cubin: bytes | None = None):
        from autotune.runtime.opencl import GPUKernel

        return GPUKernel(source, lowered, target)

    def model_device(self, target: Target):
        from autotune.runtime.opencl import device_context
        from autotune.runtime.gpu_executor import OpenCLDevice

        return OpenCLDevice(device_context(target))


class CUDABackend(GPUBackend):
    name = "cuda"
    kind = "cuda"
    dialect = "cuda"

    def unavailable(self, target: Target) -> str | None:
        from autotune.runtime.cuda import cuda_problem

        return cuda_problem()

    def kernel(self, source, lowered, target: Target, cubin: bytes | None = None):
        from autotune.runtime.cuda import CUDAKernel

        return CUDAKernel(source, lowered, target, cubin=cubin)

    def binary(self, module, target: Target) -> bytes | None:
        from tensor_ir.codegen.gpu_verify import compile_cubin

        return compile_cubin(module.code, target.arch)[0]

    def fatal(self, err: Exception) -> bool:
        try:
            import pycuda.driver as drv
        except ImportError:
            return False
        return isinstance(err, drv.Error)

    def model_device(self, target: Target):
        from autotune.runtime.gpu_executor import CUDADevice

        return CUDADevice()


register(OpenCLBackend())
register(CUDABackend())
