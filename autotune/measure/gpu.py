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

from .protocol import check_after_timing, poison, timed_repeats

__all__ = ["ARTIFACT_SUFFIX", "load_module", "measure_kernel", "write_artifact"]

ARTIFACT_SUFFIX = ".gpu.json"


def write_artifact(module, target: Target, path: str, binary: bytes | None = None) -> None:
    """Write the JSON artifact of a printed and verified GPU module to ``path``; ``binary``:
    the device code the backend compiled in the build worker (a CUDA cubin), if any."""
    data = asdict(module)
    data["target"] = str(target)
    if binary is not None:
        data["cubin"] = base64.b64encode(binary).decode()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def load_module(path: str):
    """(GPUModule, target string, cubin bytes or None) of an artifact written by
    write_artifact."""
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


def measure_kernel(kernel, module, request: dict, work: dict) -> dict:
    """Time one loaded GPU kernel against its prepared workload ``work``: the reply
    LocalRunner's worker gives for a CPU candidate (run_times, number, checked,
    stopped_early, kernel_seconds, or an error kind), by the same protocol (:mod:`.protocol`).
    The backends load the kernel (autotune.backends.gpu)."""
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
