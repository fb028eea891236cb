"""GPU candidates (OpenCL and CUDA) for LocalBuilder and LocalRunner.

Builder side: a candidate is lowered for the GPU, printed as OpenCL C or CUDA C and checked by
the GPU verifier in the build worker; the artifact is JSON (the source text, each kernel's
launch shape and buffer indices, the parameters and temporaries; for CUDA also the cubin nvcc
compiled in the builder, which needs no GPU), so that an illegal candidate is a build error
and the runner needs no IR to load it.

Worker side: the runner's isolated worker loads the artifact (pyopencl compiles the OpenCL C;
pycuda loads the cubin) and times the kernels alone, the arrays copied to the device once,
following the run's MeasureConfig (CUDA kernels timed with CUDA events); the outputs of the
warm-up launch are read back and compared with the reference as on CPUs.  A CUDA fault
leaves the process's context unusable: the reply says so and the runner starts a new worker.
"""
from __future__ import annotations

import base64
import json
import time
from dataclasses import asdict

import numpy as np

from tensor_ir.target import Target

__all__ = ["ARTIFACT_SUFFIX", "build_gpu_artifact", "load_module", "measure_gpu"]

ARTIFACT_SUFFIX = ".gpu.json"


def build_gpu_artifact(func_json: dict, target: Target, path: str) -> None:
    """Lower, print and verify one candidate (for CUDA, compile it too); write its JSON
    artifact to ``path``.  Raises the codegen's BuildError, the verifier's typed error or
    nvcc's CudaCompileError for a program that cannot be a kernel on ``target``."""
    from autotune.gpu import gpu_program
    from tensor_ir.codegen.gpu_verify import compile_cubin
    from tensor_ir.func import PrimFunc

    _, module = gpu_program(PrimFunc.from_json(func_json), target)
    data = asdict(module)
    data["target"] = str(target)
    if target.kind == "cuda":
        data["cubin"] = base64.b64encode(compile_cubin(module.code, target.arch)[0]).decode()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def load_module(path: str):
    """(GPUModule, target string, cubin bytes or None) of an artifact written by
    build_gpu_artifact."""
    from tensor_ir.codegen.gpu_c import GPUModule, GPUParam, GPUSource

    with open(path, encoding="utf-8") as f:
        data = json.load(f)

    def param(p: dict) -> GPUParam:
        return GPUParam(p["name"], tuple(p["shape"]), p["dtype"], bool(p["written"]))

    kernels = tuple(GPUSource(k["name"], k["dialect"], k["code"],
                              tuple(param(p) for p in k["params"]), tuple(k["grid"]),
                              tuple(k["block"]), tuple(k["buffers"])) for k in data["kernels"])
    module = GPUModule(data["name"], data["dialect"], data["code"],
                       tuple(param(p) for p in data["params"]),
                       tuple(param(p) for p in data["temps"]), kernels)
    cubin = base64.b64decode(data["cubin"]) if "cubin" in data else None
    return module, data["target"], cubin


def measure_gpu(request: dict, work: dict, poison, timed_repeats, check_after_timing) -> dict:
    """Worker side of one GPU candidate: the reply LocalRunner's worker gives for a CPU one
    (run_times, number, checked, stopped_early, kernel_seconds, or an error kind), by the
    same protocol: ``poison``, ``timed_repeats`` and ``check_after_timing`` are the CPU
    worker's (autotune.measure.runner).  A CUDA driver error (a fault, a launch the device
    refuses) adds ``restart_worker``: the context it leaves cannot run anything more."""
    from tensor_ir.errors import BuildError

    try:
        module, target, cubin = load_module(request["path"])
        target = Target(target)
        if target.kind == "cuda":
            from autotune.cuda import CUDAKernel

            kernel = CUDAKernel(module, None, target, cubin=cubin)
        else:
            from autotune.gpu import GPUKernel

            kernel = GPUKernel(module, None, target)
    except BuildError as err:
        return {"error_kind": "runtime", "error_msg": f"{type(err).__name__}: {err}"}
    try:
        return _measure_kernel(kernel, module, request, work, poison, timed_repeats,
                               check_after_timing)
    except Exception as err:  # noqa: BLE001 - the runtime's own error types
        if target.kind != "cuda" or not _is_cuda_error(err):
            raise
        return {"error_kind": "runtime", "restart_worker": True,
                "error_msg": f"CUDA error while running the kernel: {type(err).__name__}: "
                             f"{err}"}


def _is_cuda_error(err: Exception) -> bool:
    try:
        import pycuda.driver as drv
    except ImportError:
        return False
    return isinstance(err, drv.Error)


def _measure_kernel(kernel, module, request, work, poison, timed_repeats,
                    check_after_timing) -> dict:
    params = work["params"]
    got = [(tuple(p.shape), p.dtype) for p in module.params]
    want = [(tuple(p["shape"]), p["dtype"]) for p in params]
    if got != want:
        return {"error_kind": "runtime",
                "error_msg": f"candidate parameters {got} differ from the workload's {want}"}
    arrays = work["arrays"]
    outputs = [arrays[i] for i in work["outputs"]]
    # Outputs poisoned before they are copied to the device, so that an element the kernel
    # never writes shows up in the check.
    poison(outputs)
    buffers = kernel.device_buffers(arrays)
    kernel_seconds = 0.0

    def timed(n: int) -> float:
        nonlocal kernel_seconds
        elapsed = kernel.elapsed(buffers, n)
        kernel_seconds += elapsed
        return elapsed

    deadline = time.perf_counter() + request["timeout"]
    check_possible = request["check"] and work["reference"] is not None
    # The first launch also pays for setting the kernel up on the device; its outputs are
    # the ones checked, since later launches run on what earlier ones left behind.
    warm = timed(1)
    snapshot = kernel.read(buffers, work["outputs"]) if check_possible else None

    times, number, stopped_early = timed_repeats(timed, warm, request, deadline)
    median = float(np.median(times))
    # A kernel writing into an input would make every later launch read other data.
    verdict = check_after_timing(work, request, kernel.read(buffers, work["inputs"]), snapshot,
                                 median, check_possible, kernel_seconds)
    if "error_kind" in verdict:
        return verdict
    return {"run_times": times, "number": number, "checked": verdict["checked"],
            "stopped_early": stopped_early, "kernel_seconds": kernel_seconds}
