"""LocalRunner: times built candidates in an isolated, persistent worker process.

The tuner never calls a candidate itself.  A worker process (see :mod:`.worker`) loads each
artifact, runs it and reports back; a candidate that segfaults, aborts or hangs kills only the
worker, which is restarted for the next candidate, and the candidate gets an error record.

Timing protocol (in the worker, per candidate):

1. Warm-up: one call with the outputs poisoned (NaN), then a snapshot of the outputs for the
   check.  Its time estimates the per-call cost.
2. ``number`` grows so that one repeat lasts at least ``min_repeat_ms``; then ``repeat``
   repeats, each optionally after flushing the arrays from the CPU caches.  The calls of a
   repeat run in a loop compiled to native code (one ctypes call per repeat), so Python's
   call overhead does not pollute short kernels.
3. A candidate already ``slow_factor`` times slower than its workload's best stops after one
   repeat (when the warm-up alone is long enough, one more call confirms it and is that
   repeat; a warm-up stalled by the host does not write a good candidate off), and repeats that
   would overrun the time-out are dropped while one is kept.
4. Check: the first candidate of a workload, every candidate that would become its new best,
   or every candidate under ``check="all"``, is compared with the reference outputs.  A
   candidate that wrote into an input is a wrong result too (the inputs are restored).
5. A crash or a wrong result is confirmed once on a fresh worker before it is recorded: an
   earlier candidate's stray write could have corrupted the worker's heap or its reference.

A candidate that names model weights (``MeasureInput.weight_params``) is built without its
packing of them (the builder splits it off, see autotune.runtime.prepack); before step 1 the worker
runs those packing nests once on the workload's arrays and times the candidate on the packed
copies, as a built model runs it.  When those weights are read cold in the model
(``MeasureInput.cold_weights``), the timed calls rotate over copies of them (``weight_sets``)
while the activations stay warm: over twice the last-level cache when the model's data take
more than half of it (autotune.tuning.tune_model.weights_read_cold), so each call reads its weights
from memory; else over what the model streams between two calls of the kernel
(``MeasureInput.cold_bytes``, see autotune.tuning.tune_model.streamed_bytes), so each call finds
them evicted from the core's private caches, as in the model.

A candidate of a model's task (``MeasureInput.fresh_inputs``, set by tune_model on CPUs) has
its activation inputs (the inputs that are not weights) copied back from their pristine
values before each call, and only the calls are timed (``_Harness.fresh_loop``): in a model
the kernel before it has just written them, so they sit dirty in the writer's cache rather
than in every core's, as calls that re-read them leave them.  Measured on ResNet-18's
128-channel Winograd input transform (memory-bound), tuned each way at 2000 model trials:
16.3 us a call on re-read inputs against 22.3 us in the model (1.35x), 20.1 us on rewritten
inputs against 20.8 us in the model (1.03x).

Inputs are fixed random data allocated once per workload (seeded from the workload key, so the
same key gives the same data in every process); the reference outputs are computed once per
workload by building the workload's own definition, and kept by the tuner-side runner so a
restarted worker gets them back without recomputing.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from search.measure import (
    BuildResult,
    MeasureConfig,
    MeasureInput,
    MeasureResult,
    SequentialRunner,
)
from tensor_ir.codegen.checks import index_bounds
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import BufferStore
from tensor_ir.target import Target
from tensor_ir.visitor import walk

from ..backends import backend_for
from .cpu import aligned_empty
from .protocol import DEFAULT_TOLERANCE, EPSILON, poison
from .worker import WorkerProcess

__all__ = ["LocalRunner", "aligned_empty", "param_spec", "workload_inputs"]

# Seconds the tuner adds to MeasureConfig.timeout before declaring a worker hung: loading the
# artifact, the output check and the pipe round trip happen outside the worker's own budget.
_GRACE_SECONDS = 2.0
# Workloads a worker keeps inputs and reference outputs for (least recently used go first).
_MAX_WORKLOADS = 8


# ---------------------------------------------------------------------------------------------
# Tuner side
# ---------------------------------------------------------------------------------------------

def param_spec(func: PrimFunc) -> list[dict]:
    """Per parameter: name, shape, dtype, whether the function writes it, and for one whose
    values index another buffer (a gather's indices) the ``bound`` they must stay below."""
    written = set()

    def visit(node):
        if isinstance(node, BufferStore):
            written.add(node.buffer)

    walk(func.body, visit)
    bounds = index_bounds(func)
    specs = []
    for b in func.params:
        spec = {"name": b.name, "shape": tuple(b.const_shape), "dtype": b.dtype,
                "written": b in written}
        if b in bounds:
            spec["bound"] = bounds[b]
        specs.append(spec)
    return specs


class LocalRunner(SequentialRunner):
    """Measures candidates built for this machine, one at a time, in a worker process.

    ``config`` is the timing protocol; ``reference_timeout`` bounds computing a workload's
    reference outputs (a naive build and one run of the workload's definition).
    """

    def __init__(self, config: MeasureConfig | None = None, reference_timeout: float = 300.0):
        super().__init__()
        self.config = config or MeasureConfig()
        self.reference_timeout = float(reference_timeout)
        self._worker = WorkerProcess(f"{__name__}:handle_run_request", "autotune-runner")
        self._references: dict[str, list | None] = {}
        self._failed_workloads: dict[str, str] = {}
        self._prepared: dict[str, int] = {}  # workload -> worker generation holding it
        self._rtols: dict[str, float | None] = {}
        # Candidates timed after waiting for a quiet host, and the seconds waited (see .host).
        self.host_waits = 0
        self.host_wait_seconds = 0.0

    @property
    def worker_restarts(self) -> int:
        return self._worker.restarts

    def _run_one(self, inp: MeasureInput, build: BuildResult) -> MeasureResult:
        start = time.perf_counter()

        def error(kind: str, msg: str, kernel_seconds: float = 0.0) -> MeasureResult:
            return MeasureResult.error(kind, msg, build.build_seconds,
                                       time.perf_counter() - start, kernel_seconds)

        if build.error is not None:
            return MeasureResult.error("build", build.error, build.build_seconds)
        target = inp.target
        key = inp.workload_key
        best = self._best.get(key)
        cfg = self.config
        request = {"op": "measure", "key": key, "path": build.artifact_path,
                   "target": str(target),
                   "number": cfg.number, "repeat": cfg.repeat,
                   "min_repeat_ms": cfg.min_repeat_ms, "flush_cache": cfg.flush_cache,
                   "timeout": cfg.timeout, "slow_factor": cfg.slow_factor, "best": best,
                   "rtol": cfg.rtol if cfg.rtol is not None else self._rtol(inp),
                   "atol": cfg.atol}
        problem = backend_for(target).run_request(inp, request, cfg)
        if problem is None:
            problem = self._prepare(inp)
        if problem is not None:
            return error("runtime", problem)
        request["check"] = cfg.check != "none" and self._references.get(key) is not None
        request["check_always"] = cfg.check == "all" or best is None
        status, reply = self._call_measure(inp, request)
        if status == "crash" or (isinstance(reply, dict)
                                 and reply.get("error_kind") == "wrong_result"):
            # Confirm on a fresh worker before blaming this candidate: an earlier candidate's
            # stray write may have corrupted the worker's heap or its reference outputs.
            self._worker.kill()
            status, reply = self._call_measure(inp, request)
        if status == "timeout":
            return error("timeout", f"kernel did not finish within {cfg.timeout:g} s; its "
                                    "worker process was killed and restarted",
                         kernel_seconds=float(cfg.timeout))
        if status == "crash":
            return error("crash", f"kernel crashed: {reply}; the worker was restarted")
        if isinstance(reply, str):  # preparing the workload failed
            return error("runtime", reply)
        if "exception" in reply:
            return error("runtime", f"runner worker failed: {reply['exception']}")
        if reply.get("restart_worker"):
            # A CUDA fault leaves the worker's context unusable: the next candidate gets a
            # fresh process (and context).
            self._worker.kill()
        if reply.get("host_wait"):
            self.host_waits += 1
            self.host_wait_seconds += reply["host_wait"]
        if reply.get("error_kind"):
            return error(reply["error_kind"], reply["error_msg"], reply.get("kernel_seconds", 0))
        result = MeasureResult.success(
            reply["run_times"], reply["number"], reply["checked"], reply["stopped_early"],
            build.build_seconds, time.perf_counter() - start, reply["kernel_seconds"])
        # A candidate becomes the best only if it was checked (or no check is possible or
        # wanted): the worker checks every would-be best, so an unchecked faster one cannot
        # occur unless checking is off.
        if best is None or result.median < best:
            self._best[key] = result.median
        return result

    def _call_measure(self, inp: MeasureInput, request: dict) -> tuple[str, object]:
        """Send one measure request, preparing the workload in the worker first if needed.
        A preparation failure comes back as ("ok", message)."""
        problem = self._prepare(inp)
        if problem is not None:
            return "ok", problem
        limit = self.config.timeout + request.get("quiet_wait", 0.0) + _GRACE_SECONDS
        status, reply = self._worker.call(request, limit)
        if status == "ok" and reply.get("need_workload"):
            # The worker dropped this workload's arrays (it keeps a few): send them again.
            self._prepared.pop(inp.workload_key, None)
            problem = self._prepare(inp)
            if problem is not None:
                return "ok", problem
            status, reply = self._worker.call(request, limit)
        return status, reply

    def _rtol(self, inp: MeasureInput) -> float | None:
        """The check's relative tolerance for the workload (see reduction_rtol), once per
        workload; None (the dtype's default) when the outputs are not floating point."""
        key = inp.workload_key
        if key not in self._rtols:
            func = inp.reference if inp.reference is not None else inp.func
            dtypes = {b.dtype for b in func.params if str(b.dtype).startswith("float")}
            self._rtols[key] = max(reduction_rtol(func, d) for d in dtypes) if dtypes else None
        return self._rtols[key]

    def _prepare(self, inp: MeasureInput) -> str | None:
        """Make sure the worker holds the workload's inputs and reference outputs; returns
        why it cannot, or None."""
        key = inp.workload_key
        if key in self._failed_workloads:
            return self._failed_workloads[key]
        if self._prepared.get(key) == self._worker.generation and self._worker.alive:
            return None
        have_reference = key in self._references
        func = inp.reference if inp.reference is not None else inp.func
        try:
            request = {"op": "workload", "key": key, "params": param_spec(func),
                       "seed": workload_seed(key),
                       "reference": None if have_reference or inp.reference is None
                       else inp.reference.to_json(),
                       "reference_outputs": self._references.get(key),
                       "target": str(inp.target)}
        except Exception as err:  # noqa: BLE001 - e.g. a symbolic shape: no arrays to make
            return f"workload {key}: cannot describe its parameters: {err}"
        status, reply = self._worker.call(request, self.reference_timeout)
        if status == "ok" and "exception" not in reply and not reply.get("error"):
            if not have_reference:
                self._references[key] = reply.get("reference_outputs")
            self._prepared[key] = self._worker.generation
            return None
        if status == "timeout":
            why = f"computing the reference took over {self.reference_timeout:g} s"
        elif status == "crash":
            why = f"the reference crashed the worker ({reply})"
        else:
            why = reply.get("error") or reply.get("exception")
        message = f"workload {key}: cannot prepare inputs and reference outputs: {why}"
        self._failed_workloads[key] = message
        return message

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._worker.close()

    def __del__(self):
        # Interpreter shutdown may have torn modules down already; nothing is left to do then.
        with contextlib.suppress(Exception):
            self.close()


def workload_seed(workload_key: str) -> int:
    """A seed that depends only on the workload key (stable across processes and runs)."""
    return int.from_bytes(hashlib.sha256(workload_key.encode()).digest()[:8], "little")


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------

def workload_inputs(params: Sequence[dict], seed: int) -> list[np.ndarray]:
    """Fixed random arrays for the parameters: inputs filled, outputs allocated.

    Floats are uniform in [-1, 1) (negative values matter: a max-reduction initialised with 0
    instead of -inf passes on positive data), integers small, so sums stay exact; indices
    (a parameter with a ``bound``) in [0, bound), where the kernel's index checks pass."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in params:
        a = aligned_empty(tuple(p["shape"]), p["dtype"])
        if not p["written"]:
            kind = a.dtype.kind
            if kind == "f":
                a[...] = rng.uniform(-1.0, 1.0, a.shape)
            elif kind == "b":
                a[...] = rng.random(a.shape) < 0.5
            elif "bound" in p:
                a[...] = rng.integers(0, max(1, p["bound"]), a.shape)
            elif kind == "u":
                a[...] = rng.integers(0, 16, a.shape)
            else:
                a[...] = rng.integers(-8, 8, a.shape)
        arrays.append(a)
    return arrays




def longest_reduction(func: PrimFunc) -> int:
    """The most terms any one output element of ``func`` sums (the product of a block's
    constant reduction extents, the largest over blocks; 1 without reductions)."""
    from tensor_ir.stmt import REDUCE, Block
    from tensor_ir.visitor import collect

    longest = 1
    for block in collect(func.body, Block):
        terms = 1
        for iv in block.iter_vars:
            extent = getattr(iv.dom.extent, "value", None)
            if iv.kind == REDUCE and isinstance(extent, int):
                terms *= extent
        longest = max(longest, terms)
    return longest


def reduction_rtol(func: PrimFunc, dtype: str = "float32") -> float:
    """The relative tolerance of the output check for ``func``: the dtype's default, widened
    for very long reductions.  The reference is the definition run as written -- one serial
    sum -- whose own rounding error grows like sqrt(terms) * epsilon (a float32 norm over a
    million elements is off by about 2e-4), while a vectorised or parallel candidate sums in
    a tree and lands nearer the exact value: with the plain 1e-4 the accurate programs were
    the ones refused.  8 * sqrt(terms) * epsilon stays below the default up to ~10^4 terms
    (every matmul and convolution here), and is 1e-3 at a million."""
    base = DEFAULT_TOLERANCE.get(dtype, 1e-4)
    eps = EPSILON.get(dtype)
    if eps is None:
        return base
    return max(base, 8.0 * eps * math.sqrt(longest_reduction(func)))


def _prepare_workload(request: dict, state: dict) -> dict:
    workloads: OrderedDict = state.setdefault("workloads", OrderedDict())
    key = request["key"]
    params = request["params"]
    arrays = workload_inputs(params, request["seed"])
    outputs = [i for i, p in enumerate(params) if p["written"]]
    inputs = [i for i, p in enumerate(params) if not p["written"]]
    reference = request.get("reference_outputs")
    computed = None
    if reference is None and request.get("reference") is not None:
        target = Target(request["target"])
        kernel = backend_for(target).reference_kernel(PrimFunc.from_json(request["reference"]),
                                                      target)
        if [tuple(p.shape) for p in kernel.params] != [tuple(p["shape"]) for p in params]:
            return {"error": "the reference's parameters differ from the workload's"}
        poison([arrays[i] for i in outputs])
        kernel(*arrays)
        computed = [arrays[i].copy() for i in outputs]
        reference = computed
    workloads[key] = {
        "params": params, "arrays": arrays, "inputs": inputs, "outputs": outputs,
        "pristine": [arrays[i].copy() for i in inputs], "reference": reference,
        "argv": (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]),
    }
    workloads.move_to_end(key)
    while len(workloads) > _MAX_WORKLOADS:
        workloads.popitem(last=False)
    return {"reference_outputs": computed}


def _measure(request: dict, state: dict) -> dict:
    """Worker side of one candidate (see the module docstring for the protocol)."""
    workloads: OrderedDict = state.setdefault("workloads", OrderedDict())
    work = workloads.get(request["key"])
    if work is None:
        return {"need_workload": True}
    workloads.move_to_end(request["key"])
    backends = state.setdefault("backends", {})
    backend = backends.get(request["target"])
    if backend is None:
        backend = backends[request["target"]] = backend_for(Target(request["target"]))
    return backend.measure(request, work, state)


def handle_run_request(request: dict, state: dict) -> dict:
    """Entry point of the runner's worker process."""
    op = request.get("op")
    if op == "workload":
        return _prepare_workload(request, state)
    if op == "measure":
        return _measure(request, state)
    return {"exception": f"unknown request {op!r}"}
