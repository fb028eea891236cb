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
import math
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


def measure_opencl(request: dict, work: dict, poison, compare_outputs) -> dict:
    """Worker side of one OpenCL candidate: the reply LocalRunner's worker gives for a CPU
    one (run_times, number, checked, stopped_early, kernel_seconds, or an error kind)."""
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

    best = request["best"]
    slow_limit = best * request["slow_factor"] if best is not None else math.inf
    min_repeat = request["min_repeat_ms"] / 1000.0
    times: list[float] = []
    stopped_early = False
    number = max(request["number"], math.ceil(1.15 * min_repeat / max(warm, 1e-9)))
    if (warm > slow_limit and warm >= min_repeat) or \
            time.perf_counter() + warm * number > deadline:
        times, number, stopped_early = [warm], 1, True
    regrows = 0
    while len(times) < request["repeat"] and not stopped_early:
        per_call = times[-1] if times else warm
        if times and time.perf_counter() + per_call * number * 1.1 > deadline:
            stopped_early = True
            break
        elapsed = timed(number)
        if elapsed < min_repeat and regrows < 4:
            number = max(number + 1, math.ceil(number * 1.15 * min_repeat / max(elapsed, 1e-9)))
            regrows += 1
            continue
        times.append(elapsed / number)
        if times[-1] > slow_limit:
            stopped_early = True
    median = float(np.median(times))

    # A kernel writing into an input would make every later launch read other data.
    for i, now in zip(work["inputs"], kernel.read(buffers, work["inputs"])):
        pristine = work["pristine"][work["inputs"].index(i)]
        if not np.array_equal(now, pristine, equal_nan=now.dtype.kind == "f"):
            name = params[i]["name"]
            return {"error_kind": "wrong_result", "kernel_seconds": kernel_seconds,
                    "error_msg": f"wrong result: the candidate wrote into its input {name}"}

    checked = False
    if check_possible and (request["check_always"] or best is None or median < best):
        names = [params[i]["name"] for i in work["outputs"]]
        problem = compare_outputs(snapshot, work["reference"], names, request["rtol"],
                                  request["atol"])
        if problem is not None:
            return {"error_kind": "wrong_result", "error_msg": problem,
                    "kernel_seconds": kernel_seconds}
        checked = True
    return {"run_times": times, "number": number, "checked": checked,
            "stopped_early": stopped_early, "kernel_seconds": kernel_seconds}
