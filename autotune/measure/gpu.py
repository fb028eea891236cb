"""OpenCL candidates for LocalBuilder and LocalRunner.

Builder side: a candidate is lowered for the GPU, printed as OpenCL C and checked by the GPU
verifier in the build worker; the artifact is JSON (the source text, each kernel's launch
shape and buffer indices, the parameters and temporaries), so that an illegal candidate is a
build error and the runner needs no IR to load it.

Worker side: the runner's isolated worker compiles the artifact with pyopencl and times the
kernels alone, the arrays copied to the device once, following the run's MeasureConfig; the
outputs of the warm-up launch are read back and compared with the reference as on CPUs.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict

import numpy as np

from tensor_ir.target import Target

__all__ = ["ARTIFACT_SUFFIX", "build_opencl_artifact", "load_module", "measure_opencl"]

ARTIFACT_SUFFIX = ".cl.json"


def build_opencl_artifact(func_json: dict, target: Target, path: str) -> None:
    """Lower, print and verify one candidate; write its JSON artifact to ``path``.  Raises the
    codegen's BuildError or the verifier's typed error for a program that cannot be a
    kernel on ``target``."""
    from tensor_ir.codegen.gpu_c import gpu_module, split_kernels
    from tensor_ir.codegen.gpu_verify import verify_gpu_kernel
    from tensor_ir.func import PrimFunc
    from tensor_ir.thread_reduce import lower_for_gpu

    lowered = lower_for_gpu(PrimFunc.from_json(func_json))
    module = gpu_module(lowered, "opencl", max_threads_per_block=target.max_threads_per_block,
                        max_shared_memory_per_block=target.max_shared_memory_per_block)
    _, bodies = split_kernels(lowered.body)
    for kernel, body in zip(module.kernels, bodies):
        verify_gpu_kernel(kernel, target, func=body)
    data = asdict(module)
    data["target"] = str(target)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def load_module(path: str):
    """(GPUModule, target string) of an artifact written by build_opencl_artifact."""
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
    return module, data["target"]


def measure_opencl(request: dict, work: dict, poison, timed_repeats, check_after_timing) -> dict:
    """Worker side of one OpenCL candidate: the reply LocalRunner's worker gives for a CPU
    one (run_times, number, checked, stopped_early, kernel_seconds, or an error kind), by
    the same protocol: ``poison``, ``timed_repeats`` and ``check_after_timing`` are the CPU
    worker's (autotune.measure.runner)."""
    from autotune.gpu import GPUKernel
    from tensor_ir.errors import BuildError

    try:
        module, target = load_module(request["path"])
        kernel = GPUKernel(module, None, Target(target))
    except BuildError as err:
        return {"error_kind": "runtime", "error_msg": f"{type(err).__name__}: {err}"}
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
        kernel.finish()
        t0 = time.perf_counter()
        for _ in range(n):
            kernel.launch(buffers)
        kernel.finish()
        elapsed = time.perf_counter() - t0
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
