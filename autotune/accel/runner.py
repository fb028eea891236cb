"""AcceleratorRunner: a Runner (search.measure contract) whose "time" is the simulated cycle
count of the accelerator, converted to seconds at its clock.

    runner = AcceleratorRunner()                       # compiles the functional model if needed
    result = autotune.tune(func, "simaccel", trials=64, space=design_space(func),
                           runner=runner, builder=AcceleratorBuilder())

Per candidate:

1. The cycles come from the timing model (:func:`autotune.accel.timing.simulate`) on the
   candidate's lowered program.  A program the accelerator cannot run (a scratchpad overflow,
   an operation it has no instruction for) is an error result of kind "build" naming why --
   like a GPU kernel over its shared-memory limit, it cannot be built for the hardware.
2. When the output is to be checked (``MeasureConfig.check``: "all" every candidate, "best"
   the first of a workload and each would-be new best, "none" never), the program runs in an
   isolated worker process: the loops as host code (the builder's object file, or built in the
   worker when the builder made none, e.g. search.SimulationBuilder), every GEMM tile in the
   functional model.  Its outputs are compared exactly with the reference's (the workload's
   definition built for the host) on fixed random int8 inputs, and the number of GEMM
   instructions the model executed with the number the timing model counted; a difference is a
   "wrong_result" (outputs) or "runtime" (count) error, a crash or hang a "crash" or
   "timeout" error.  Nothing raises for a bad candidate.
3. The result's run time is ``cycles / clock_hz`` seconds (one "repeat", exact: the model is
   deterministic), so search, records, ``tune``'s report and ``apply_history_best`` work on it
   unchanged; ``cycles(result)`` turns it back into cycles.
"""
from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from search.measure import (
    BuildResult,
    MeasureConfig,
    MeasureInput,
    MeasureResult,
    SequentialRunner,
)
from tensor_ir.errors import TensorIRError

from ..measure.protocol import compare_outputs
from ..measure.runner import param_spec, workload_seed
from ..measure.worker import WorkerProcess
from .hardware import DEFAULT_ACCELERATOR, Accelerator, AcceleratorError
from .intrinsic import functional_model
from .timing import CycleReport, simulate

__all__ = ["AcceleratorRunner", "cycles_of"]

# Seconds the tuner adds to the time-out for loading the artifact and the pipe round trip.
_GRACE_SECONDS = 2.0


def cycles_of(seconds: float, accelerator: Accelerator = DEFAULT_ACCELERATOR) -> int:
    """A time stored by :class:`AcceleratorRunner` back in cycles."""
    return round(seconds * accelerator.clock_hz)


class AcceleratorRunner(SequentialRunner):
    """Simulated cycles of candidates on ``accelerator`` (see the module text).

    ``config``: the check mode and time-out are read from it (default: check "best", 10 s);
    the timing fields do not apply, a simulation is exact in one repeat.  ``cache_dir`` and
    ``compiler``: where and with what the functional model is compiled (see
    :func:`autotune.accel.functional_model`); a missing compiler raises AcceleratorError here,
    before any tuning starts.  ``reports`` keeps the CycleReport of each candidate simulated,
    by the candidate's structural hash."""

    def __init__(self, accelerator: Accelerator = DEFAULT_ACCELERATOR,
                 config: MeasureConfig | None = None, cache_dir: str | None = None,
                 compiler: str | None = None, reference_timeout: float = 120.0):
        if not isinstance(accelerator, Accelerator):
            raise AcceleratorError(f"AcceleratorRunner: accelerator must be an Accelerator, "
                                   f"got {type(accelerator).__name__}")
        super().__init__()
        self.accelerator = accelerator
        self.config = config or MeasureConfig(number=1, repeat=1, min_repeat_ms=0.0)
        self.library = functional_model(cache_dir, compiler)
        self.reference_timeout = float(reference_timeout)
        self._worker = WorkerProcess(f"{__name__}:handle_request", "autotune-accel")
        self.reports: dict[str, CycleReport] = {}
        self.runs = 0  # programs actually executed (checked) by the functional model

    def _run_one(self, inp: MeasureInput, build: BuildResult) -> MeasureResult:
        start = time.perf_counter()

        def error(kind: str, msg: str, kernel_seconds: float = 0.0) -> MeasureResult:
            return MeasureResult.error(kind, msg, build.build_seconds,
                                       time.perf_counter() - start, kernel_seconds)

        if build.error is not None:
            return MeasureResult.error("build", build.error, build.build_seconds)
        # 1. Cycles from the timing model.
        try:
            report = simulate(inp.func, self.accelerator)
        except (AcceleratorError, TensorIRError) as err:
            return error("build", f"accelerator: {err}")
        self.reports[inp.func.structural_hash()] = report
        seconds = report.seconds
        # 2. Run and check, when the check mode asks for it.
        key = inp.workload_key
        best = self._best.get(key)
        mode = self.config.check
        check = inp.reference is not None and (
            mode == "all" or (mode == "best" and (best is None or seconds < best)))
        kernel_seconds = 0.0
        if check:
            verdict = self._execute(inp, build, report)
            if isinstance(verdict, MeasureResult):
                return MeasureResult.error(verdict.error_kind, verdict.error_msg,
                                           build.build_seconds, time.perf_counter() - start,
                                           verdict.kernel_seconds)
            kernel_seconds = verdict
        # 3. Cycles as seconds.
        if best is None or seconds < best:
            self._best[key] = seconds
        return MeasureResult.success([seconds], number=1, checked=check,
                                     build_seconds=build.build_seconds,
                                     run_seconds=time.perf_counter() - start,
                                     kernel_seconds=kernel_seconds)

    def _execute(self, inp: MeasureInput, build: BuildResult,
                 report: CycleReport) -> float | MeasureResult:
        """Run the candidate in the worker; its kernel seconds, or an error result."""
        try:
            request = {"op": "run", "key": inp.workload_key, "library": self.library,
                       "params": param_spec(inp.reference), "seed": workload_seed(
                           inp.workload_key),
                       "reference": inp.reference.to_json(),
                       "path": build.artifact_path,
                       "func": None if build.artifact_path else inp.func.to_json(),
                       "target": str(inp.target), "macs": report.macs}
        except Exception as err:  # noqa: BLE001 - e.g. a symbolic shape: nothing to run
            return MeasureResult.error("runtime", f"cannot describe the workload's "
                                                  f"parameters: {err}")
        # The first request of a workload computes its reference in the worker too.
        timeout = self.config.timeout + _GRACE_SECONDS + self.reference_timeout
        status, reply = self._worker.call(request, timeout)
        self.runs += 1
        if status == "timeout":
            return MeasureResult.error("timeout", f"the program did not finish within "
                                                  f"{timeout:g} s; its worker was killed")
        if status == "crash":
            return MeasureResult.error("crash", f"the program crashed: {reply}; the worker "
                                                f"was restarted")
        if "exception" in reply:
            return MeasureResult.error("runtime", f"accelerator worker failed: "
                                                  f"{reply['exception']}")
        if reply.get("error_kind"):
            return MeasureResult.error(reply["error_kind"], reply["error_msg"],
                                       kernel_seconds=reply.get("kernel_seconds", 0.0))
        return float(reply["kernel_seconds"])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._worker.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------

def _inputs(params: list, seed: int) -> list[np.ndarray]:
    """Inputs over the whole int8 range (extreme products must come out exact too); outputs
    filled with a value no correct program leaves behind."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in params:
        dtype = np.dtype(p["dtype"])
        if p["written"]:
            a = np.full(tuple(p["shape"]), np.iinfo(dtype).max if dtype.kind in "iu"
                        else np.nan, dtype)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            a = rng.integers(info.min, info.max + 1, tuple(p["shape"])).astype(dtype)
        else:
            a = rng.uniform(-1.0, 1.0, tuple(p["shape"])).astype(dtype)
        arrays.append(a)
    return arrays


def _reference(request: dict, state: dict) -> dict:
    from autotune.runtime.build import build
    from tensor_ir.func import PrimFunc

    cache = state.setdefault("references", {})
    work = cache.get(request["key"])
    if work is None:
        params = request["params"]
        arrays = _inputs(params, request["seed"])
        kernel = build(PrimFunc.from_json(request["reference"]), "llvm")
        kernel(*arrays)
        outputs = [i for i, p in enumerate(params) if p["written"]]
        work = {"params": params, "inputs": [a.copy() for a in arrays],
                "outputs": outputs, "reference": [arrays[i].copy() for i in outputs]}
        cache.clear()  # one workload at a time: a tuning run has one
        cache[request["key"]] = work
    return work


def handle_request(request: dict, state: dict) -> dict:
    """Entry point of the runner's worker process: run one program and check it."""
    import ctypes

    from autotune.runtime.build import build, load_module
    from tensor_ir.func import PrimFunc
    from tensor_ir.intrinsics import load_libraries

    from .intrinsic import functional_model as model

    if request.get("op") != "run":
        return {"exception": f"unknown request {request.get('op')!r}"}
    library = request["library"]
    # Registers the intrinsic for this library (a program given as IR is tensorized with it)
    # and loads it before the JIT resolves the kernel's call to the model.
    model(os.path.dirname(library))
    load_libraries([library])
    lib = state.get("model")
    if lib is None:
        lib = state["model"] = ctypes.CDLL(library)
        lib.simaccel_gemm_calls.restype = ctypes.c_uint64
    work = _reference(request, state)
    if request["path"]:
        kernel = load_module(request["path"])
    else:
        kernel = build(PrimFunc.from_json(request["func"]), request["target"])
    arrays = [a.copy() for a in work["inputs"]]
    lib.simaccel_reset_gemm_calls()
    t0 = time.perf_counter()
    kernel(*arrays)
    elapsed = time.perf_counter() - t0
    executed = int(lib.simaccel_gemm_calls())
    params = work["params"]
    for i, p in enumerate(params):
        if not p["written"] and not np.array_equal(arrays[i], work["inputs"][i]):
            return {"error_kind": "wrong_result", "kernel_seconds": elapsed,
                    "error_msg": f"wrong result: the program wrote into its input {p['name']}"}
    names = [params[i]["name"] for i in work["outputs"]]
    problem = compare_outputs([arrays[i] for i in work["outputs"]], work["reference"], names,
                              0.0, 0.0)
    if problem is not None:
        return {"error_kind": "wrong_result", "error_msg": problem, "kernel_seconds": elapsed}
    if executed != request["macs"]:
        return {"error_kind": "runtime", "kernel_seconds": elapsed,
                "error_msg": f"the functional model executed {executed} GEMM instructions, "
                             f"the timing model counted {request['macs']}"}
    return {"kernel_seconds": elapsed}
