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
packing of them (the builder splits it off, see autotune.prepack); before step 1 the worker
runs those packing nests once on the workload's arrays and times the candidate on the packed
copies, as a built model runs it.  When those weights are read cold in the model
(``MeasureInput.cold_weights``), the timed calls rotate over copies of them (``weight_sets``)
while the activations stay warm: over twice the last-level cache when the model's data take
more than half of it (autotune.tune_model.weights_read_cold), so each call reads its weights
from memory; else over what the model streams between two calls of the kernel
(``MeasureInput.cold_bytes``, see autotune.tune_model.streamed_bytes), so each call finds
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
from tensor_ir import intrinsics
from tensor_ir.errors import TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import BufferStore
from tensor_ir.target import Target
from tensor_ir.visitor import walk

from ..prepack import split_packing
from .host import NOW_IR, QuietHost
from .worker import WorkerProcess

__all__ = ["LocalRunner", "aligned_empty", "param_spec", "weight_sets", "workload_inputs"]

# Seconds the tuner adds to MeasureConfig.timeout before declaring a worker hung: loading the
# artifact, the output check and the pipe round trip happen outside the worker's own budget.
_GRACE_SECONDS = 2.0
# Workloads a worker keeps inputs and reference outputs for (least recently used go first).
_MAX_WORKLOADS = 8
# Arrays are aligned like the code generator's own allocations.
_ALIGN = 64


# ---------------------------------------------------------------------------------------------
# Tuner side
# ---------------------------------------------------------------------------------------------

def param_spec(func: PrimFunc) -> list[dict]:
    """Per parameter: name, shape, dtype and whether the function writes it."""
    written = set()

    def visit(node):
        if isinstance(node, BufferStore):
            written.add(node.buffer)

    walk(func.body, visit)
    return [{"name": b.name, "shape": tuple(b.const_shape), "dtype": b.dtype,
             "written": b in written} for b in func.params]


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
        if not target.is_gpu and (target.kind != "llvm" or not target.is_host):
            return error("runtime", f"target {target} is not this machine; the candidate was "
                                    f"built ({build.artifact_path}) but is not run locally")
        key = inp.workload_key
        problem = self._prepare(inp)
        if problem is not None:
            return error("runtime", problem)
        best = self._best.get(key)
        cfg = self.config
        request = {"op": "measure", "key": key, "path": build.artifact_path,
                   "kind": target.kind,
                   "number": cfg.number, "repeat": cfg.repeat,
                   "min_repeat_ms": cfg.min_repeat_ms, "flush_cache": cfg.flush_cache,
                   "timeout": cfg.timeout, "slow_factor": cfg.slow_factor, "best": best,
                   "check": cfg.check != "none" and self._references.get(key) is not None,
                   "check_always": cfg.check == "all" or best is None,
                   "rtol": cfg.rtol if cfg.rtol is not None else self._rtol(inp),
                   "atol": cfg.atol}
        if target.kind == "llvm":
            # Shared libraries of external intrinsics: the object file names their symbols,
            # not where they live, and only this process knows the registrations.
            try:
                libraries = intrinsics.libraries_of(inp.func)
            except intrinsics.IntrinsicError as err:
                return error("runtime", str(err))
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
            if target.num_cores >= 2 and cfg.quiet_wait > 0:
                # Time on a host whose cores talk at their usual speed (see .host).
                request["quiet_wait"] = cfg.quiet_wait
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

def aligned_empty(shape: tuple, dtype, align: int = _ALIGN) -> np.ndarray:
    """An uninitialised array whose data starts at a multiple of ``align`` bytes."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def workload_inputs(params: Sequence[dict], seed: int) -> list[np.ndarray]:
    """Fixed random arrays for the parameters: inputs filled, outputs allocated.

    Floats are uniform in [-1, 1) (negative values matter: a max-reduction initialised with 0
    instead of -inf passes on positive data), integers small, so sums stay exact."""
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
            elif kind == "u":
                a[...] = rng.integers(0, 16, a.shape)
            else:
                a[...] = rng.integers(-8, 8, a.shape)
        arrays.append(a)
    return arrays


def _poison(arrays: Sequence[np.ndarray]) -> None:
    """Fill outputs with values a kernel cannot leave behind unnoticed."""
    for a in arrays:
        if a.dtype.kind == "f":
            a.fill(np.nan)
        elif a.dtype.kind == "b":
            a.fill(True)
        else:
            a.fill(np.iinfo(a.dtype).max)


_DEFAULT_TOLERANCE = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}
_EPSILON = {"float16": 9.8e-4, "float32": 1.2e-7, "float64": 2.3e-16}


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
    base = _DEFAULT_TOLERANCE.get(dtype, 1e-4)
    eps = _EPSILON.get(dtype)
    if eps is None:
        return base
    return max(base, 8.0 * eps * math.sqrt(longest_reduction(func)))


def compare_outputs(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray],
                    names: Sequence[str], rtol: float | None,
                    atol: float | None) -> str | None:
    """None when every output matches its reference, else a readable description."""
    for out, ref, name in zip(outputs, references, names):
        if out.dtype.kind != "f":
            bad = out != ref
            if bad.any():
                where = tuple(int(i) for i in np.argwhere(bad)[0])
                return (f"wrong result: output {name} differs from the reference in "
                        f"{int(bad.sum())} of {out.size} elements (first at {name}{list(where)}: "
                        f"expected {ref[where]}, got {out[where]})")
            continue
        tol = _DEFAULT_TOLERANCE.get(str(out.dtype), 1e-4)
        finite = np.isfinite(ref)
        scale = float(np.abs(ref[finite]).max()) if finite.any() else 1.0
        r = tol if rtol is None else rtol
        a = tol * max(1.0, scale) if atol is None else atol
        ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isclose(out64, ref64, rtol=r, atol=a, equal_nan=True)
        if close.all():
            continue
        bad = ~close
        missing = bad & np.isnan(out64) & ~np.isnan(ref64)
        with np.errstate(invalid="ignore"):
            diff = np.where(bad & ~missing, np.abs(out64 - ref64), -np.inf)
        if np.isfinite(diff).any() and diff.max() > -np.inf:
            where = np.unravel_index(int(np.argmax(diff)), diff.shape)
            where_t = tuple(int(i) for i in where)
            return (f"wrong result: max abs diff {diff[where]:.6g} in output {name} at "
                    f"{name}{list(where_t)} (expected {ref64[where]:.6g}, got {out64[where]:.6g};"
                    f" {int(bad.sum())} of {out.size} elements off, rtol={r:g}, atol={a:.3g})")
        where_t = tuple(int(i) for i in np.argwhere(missing)[0])
        return (f"wrong result: output {name} has {int(missing.sum())} of {out.size} elements "
                f"not written (NaN) where the reference has values, first at {name}"
                f"{list(where_t)}")
    return None


# The step from one call of a timing loop to the next: call ``%i`` of ``%n`` and argument set
# ``%j`` of ``%sets`` (the set index wraps by a compare, not a division: a few cycles a call).
_NEXT_CALL = """  %next = add i64 %i, 1
  %j1 = add i64 %j, 1
  %wrap = icmp sge i64 %j1, %sets
  %jnext = select i1 %wrap, i64 0, i64 %j1
  %more = icmp slt i64 %next, %n"""


class _Harness:
    """Native helpers compiled once per worker: loops calling a kernel ``n`` times (plain, or
    with inputs rewritten before each call), and (on x86) a cache-line flush of an array."""

    def __init__(self):
        self._loops: dict[tuple[str, int], tuple] = {}
        self._flush = None
        self._scratch: np.ndarray | None = None

    def _compiled(self, name: str, arity: int, text, restype, *argtypes):
        """The function ``name`` of the module ``text(loads, args)``, compiled once per
        arity; ``loads`` reads the ``arity`` pointers of the current argument set ``%set``
        (the ``%j``-th set of ``%argv``) into ``%a0``..., ``args`` passes them to the
        kernel; ``_NEXT_CALL`` advances call ``%i`` and set ``%j``, ``%more`` says whether
        calls remain."""
        entry = self._loops.get((name, arity))
        if entry is None:
            from tensor_ir.codegen import LLVMTarget, compile_module

            loads = "\n".join(
                [f"  %offset = mul i64 %j, {arity}",
                 "  %set = getelementptr inbounds ptr, ptr %argv, i64 %offset"]
                + [f"  %p{i} = getelementptr inbounds ptr, ptr %set, i64 {i}\n"
                   f"  %a{i} = load ptr, ptr %p{i}" for i in range(arity)])
            args = ", ".join(f"ptr %a{i}" for i in range(arity))
            jit = compile_module(text(loads, args), LLVMTarget()).jit()
            proto = ctypes.CFUNCTYPE(restype, *argtypes)
            # The JIT is kept with the function: freeing it would free the code.
            entry = self._loops[name, arity] = (jit, proto(jit.function_address(name)))
        return entry[1]

    def loop(self, arity: int):
        """``time_loop(fn, argv, sets, n)``: ``n`` calls of ``fn``, call ``i`` taking the
        ``i % sets``-th of ``sets`` consecutive argument vectors of ``arity`` pointers in
        ``argv`` (one set but for weights read cold, see ``weight_sets``)."""
        def text(loads: str, args: str) -> str:
            return f"""
define void @time_loop(ptr %fn, ptr %argv, i64 %sets, i64 %n) {{
entry:
  %go = icmp sgt i64 %n, 0
  br i1 %go, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %j = phi i64 [0, %entry], [%jnext, %loop]
{loads}
  call void %fn({args})
{_NEXT_CALL}
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""
        return self._compiled("time_loop", arity, text, None, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

    def fresh_loop(self, arity: int):
        """``time_fresh(fn, argv, sets, n, copies, ncopies) -> seconds``: like ``loop``, but
        before each call it copies ``ncopies`` arrays (``copies``: triples destination,
        source, bytes) and it returns the seconds spent in the calls alone, each timed by
        the monotonic clock.  The copies put the inputs where a producer kernel leaves its
        output (written, in the writer's cache) instead of where the previous call of the
        same kernel left them (read, in every core's cache)."""
        def text(loads: str, args: str) -> str:
            return f"""
{NOW_IR}
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
define double @time_fresh(ptr %fn, ptr %argv, i64 %sets, i64 %n, ptr %copies,
                          i64 %ncopies) {{
entry:
  %ts = alloca [2 x i64], align 8
  %go = icmp sgt i64 %n, 0
  br i1 %go, label %call_head, label %done
call_head:
  %i = phi i64 [0, %entry], [%next, %timed]
  %j = phi i64 [0, %entry], [%jnext, %timed]
  %total = phi i64 [0, %entry], [%total1, %timed]
  %anycopy = icmp sgt i64 %ncopies, 0
  br i1 %anycopy, label %copy, label %call
copy:
  %c = phi i64 [0, %call_head], [%cnext, %copy]
  %base = mul i64 %c, 3
  %dp = getelementptr inbounds i64, ptr %copies, i64 %base
  %b1 = add i64 %base, 1
  %sp = getelementptr inbounds i64, ptr %copies, i64 %b1
  %b2 = add i64 %base, 2
  %bp = getelementptr inbounds i64, ptr %copies, i64 %b2
  %dst = load ptr, ptr %dp
  %src = load ptr, ptr %sp
  %bytes = load i64, ptr %bp
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %bytes, i1 false)
  %cnext = add i64 %c, 1
  %cmore = icmp slt i64 %cnext, %ncopies
  br i1 %cmore, label %copy, label %call
call:
{loads}
  %t0 = call i64 @now(ptr %ts)
  call void %fn({args})
  %t1 = call i64 @now(ptr %ts)
  br label %timed
timed:
  %dt = sub i64 %t1, %t0
  %total1 = add i64 %total, %dt
{_NEXT_CALL}
  br i1 %more, label %call_head, label %done
done:
  %sum = phi i64 [0, %entry], [%total1, %timed]
  %secs = uitofp i64 %sum to double
  %out = fdiv double %secs, 1.0e9
  ret double %out
}}
"""
        return self._compiled("time_fresh", arity, text, ctypes.c_double, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_int64)

    def flush(self, arrays: Sequence[np.ndarray], target: Target) -> None:
        """Evict ``arrays`` from the CPU caches."""
        if target.triple.startswith(("x86_64", "i686", "i386")):
            if self._flush is None:
                from tensor_ir.codegen import LLVMTarget, compile_module

                text = """
declare void @llvm.x86.sse2.clflush(ptr)
declare void @llvm.x86.sse2.mfence()
define void @flush_lines(ptr %p, i64 %nbytes, i64 %line) {
entry:
  %go = icmp sgt i64 %nbytes, 0
  br i1 %go, label %loop, label %done
loop:
  %off = phi i64 [0, %entry], [%next, %loop]
  %q = getelementptr inbounds i8, ptr %p, i64 %off
  call void @llvm.x86.sse2.clflush(ptr %q)
  %next = add i64 %off, %line
  %more = icmp slt i64 %next, %nbytes
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.sse2.mfence()
  ret void
}
"""
                jit = compile_module(text, LLVMTarget()).jit()
                proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
                self._flush = (jit, proto(jit.function_address("flush_lines")))
            line = target.cache_line or 64
            for a in arrays:
                self._flush[1](a.ctypes.data, a.nbytes, line)
            return
        # Elsewhere: stream through a buffer larger than the last-level cache.
        if self._scratch is None:
            size = 2 * (target.l3_cache or target.l2_cache or 32 * 1024 * 1024)
            self._scratch = np.zeros(size // 8, dtype=np.float64)
        self._scratch += 1.0


def timed_repeats(timed, warm: float, request: dict, deadline: float, before_repeat=None
                  ) -> tuple[list[float], int, bool]:
    """(seconds per call of each repeat, calls per repeat, stopped early) after a warm-up
    call of ``warm`` seconds; ``timed(n)`` runs the kernel ``n`` times and returns the
    seconds.  The protocol of the CPU and OpenCL workers alike: ``number`` aimed a little
    above ``min_repeat_ms`` (the warm-up ran cold and overestimates a call) and regrown from
    a repeat that came out short; a candidate far slower than the best, or one whose next
    repeat would pass ``deadline``, stops early with what it has."""
    best = request["best"]
    slow_limit = best * request["slow_factor"] if best is not None else math.inf
    min_repeat = request["min_repeat_ms"] / 1000.0
    if warm > slow_limit and warm >= min_repeat:
        # Far slower than the best, going by the warm-up alone.  That call ran cold and a
        # busy host can stall any single call (a 64x64 matmul's warm-up on a freshly
        # restarted worker has taken 7.9 ms), so one timed call confirms it before the
        # candidate is written off; one slow again stops with that call as its one repeat.
        if time.perf_counter() + warm > deadline:
            return [warm], 1, True
        if before_repeat is not None:
            before_repeat()
        again = timed(1)
        if again > slow_limit:
            return [again], 1, True
        warm = again  # the warm-up was the outlier: time the candidate as usual
    number = max(request["number"], math.ceil(1.15 * min_repeat / max(warm, 1e-9)))
    if time.perf_counter() + warm * number > deadline:
        # Not one full repeat fits in the time-out: the warm-up call is the one repeat.
        return [warm], 1, True
    times: list[float] = []
    regrows = 0
    while len(times) < request["repeat"]:
        per_call = times[-1] if times else warm
        if times and time.perf_counter() + per_call * number * 1.1 > deadline:
            return times, number, True
        if before_repeat is not None:
            before_repeat()
        elapsed = timed(number)
        if elapsed < min_repeat and regrows < 4:
            # The warm-up overestimated the per-call time (cold caches, page faults): grow
            # ``number`` from this repeat, with a margin, and time again.
            number = max(number + 1, math.ceil(number * 1.15 * min_repeat / max(elapsed, 1e-9)))
            regrows += 1
            continue
        times.append(elapsed / number)
        if times[-1] > slow_limit:
            return times, number, True
    return times, number, False


def check_after_timing(work: dict, request: dict, inputs_now: Sequence[np.ndarray], snapshot,
                       median: float, check_possible: bool, kernel_seconds: float,
                       restore=None) -> dict:
    """The checks after timing, for the CPU and OpenCL workers alike: an error reply when
    the candidate wrote into an input (it would corrupt every later measurement of the
    workload; ``restore(i)`` puts input ``i`` back) or its warm-up outputs ``snapshot``
    differ from the reference; otherwise ``{"checked": whether the outputs were compared}``
    (they are when the run asks always, or the candidate is the best so far)."""
    params = work["params"]
    for i, now in zip(work["inputs"], inputs_now):
        pristine = work["pristine"][work["inputs"].index(i)]
        if not np.array_equal(now, pristine, equal_nan=now.dtype.kind == "f"):
            if restore is not None:
                restore(i)
            return {"error_kind": "wrong_result", "kernel_seconds": kernel_seconds,
                    "error_msg": f"wrong result: the candidate wrote into its input "
                                 f"{params[i]['name']}"}
    best = request["best"]
    if not (check_possible and (request["check_always"] or best is None or median < best)):
        return {"checked": False}
    names = [params[i]["name"] for i in work["outputs"]]
    problem = compare_outputs(snapshot, work["reference"], names, request["rtol"],
                              request["atol"])
    if problem is not None:
        return {"error_kind": "wrong_result", "error_msg": problem,
                "kernel_seconds": kernel_seconds}
    return {"checked": True}


def _load_kernel(path: str):
    """(JIT engine, entry address, metadata) of an object file built by LocalBuilder."""
    import json

    from tensor_ir.codegen import META_SYMBOL, JITModule

    with open(path, "rb") as f:
        object_code = f.read()
    jit = JITModule(object_code)
    meta = json.loads(jit.read_string(META_SYMBOL))
    return jit, jit.function_address(meta["entry"]), meta


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
        from autotune.build import build

        func = PrimFunc.from_json(request["reference"])
        if Target(request["target"]).kind == "llvm":
            kernel = build(func, target=request["target"])
        else:
            # The reference of a GPU workload is computed on the host CPU: the unscheduled
            # definition is no valid kernel.  GPU workloads are large (an SGEMM of 4096^3
            # takes minutes as a plain loop nest), so the CPU's default schedule computes it
            # (parallel and tiled, seconds), the plain nest where there is none.
            from schedules.default_schedule import default_candidate

            host = Target("llvm")
            try:
                scheduled = default_candidate(func, host)
            except TensorIRError:
                scheduled = None
            kernel = build(func if scheduled is None else scheduled.func, target=host)
        if [tuple(p.shape) for p in kernel.params] != [tuple(p["shape"]) for p in params]:
            return {"error": "the reference's parameters differ from the workload's"}
        _poison([arrays[i] for i in outputs])
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


# Packing kernels kept per worker: candidates of one workload often pack alike.
_MAX_PACKING_KERNELS = 64


def _packed_arrays(packs: list[dict], arrays: list[np.ndarray], state: dict
                   ) -> list[np.ndarray]:
    """The workload's arrays with each weight the candidate packs replaced by its packed
    copy: the packing kernels run here once, outside the timed calls, as a model build runs
    them (see MeasureInput.weight_params)."""
    from autotune.build import build

    kernels: OrderedDict = state.setdefault("packing_kernels", OrderedDict())
    out = list(arrays)
    for pack in packs:
        kernel = kernels.get(pack["hash"])
        if kernel is None:
            kernel = kernels[pack["hash"]] = build(PrimFunc.from_json(pack["func"]))
            while len(kernels) > _MAX_PACKING_KERNELS:
                kernels.popitem(last=False)
        kernels.move_to_end(pack["hash"])
        spec = kernel.params[1]  # (the weight, its packed copy)
        packed = aligned_empty(tuple(spec.shape), spec.dtype)
        kernel(arrays[pack["index"]], packed)
        out[pack["index"]] = packed
    return out


# Copies of cold weights: at least this many bytes in all (twice a last-level cache, so
# LRU-like replacement has evicted a copy before its turn comes again), at most this many.
_COLD_BYTES_FALLBACK = 64 * 2**20
_MAX_WEIGHT_SETS = 4096


def weight_sets(arrays: Sequence[np.ndarray], cold: Sequence[int], cache_bytes: int | None,
                total_bytes: int | None = None) -> list[list[np.ndarray]]:
    """Argument sets that make every call read the ``cold`` parameters out of cache, as a
    model whose data do not stay in cache reads each weight once per inference: ``arrays``
    first, then copies of it whose cold arrays are fresh copies (the rest shared), enough
    that the cold bytes of all sets reach ``total_bytes`` (what the model streams between
    two calls of the kernel: each call finds its weights where the model's call does), or
    without it exceed twice ``cache_bytes`` (each call reads them from memory).  The timing
    loop calls them in turn; activations stay as warm as their producer left them in the
    model.  One set (``arrays``) when nothing is cold."""
    cold = [i for i in sorted(set(cold)) if arrays[i].nbytes]
    if not cold:
        return [list(arrays)]
    per_set = sum(arrays[i].nbytes for i in cold)
    target = total_bytes or 2 * (cache_bytes or _COLD_BYTES_FALLBACK // 2)
    count = min(_MAX_WEIGHT_SETS, max(2, -(-target // per_set)))
    sets = [list(arrays)]
    for _ in range(count - 1):
        copy = list(arrays)
        for i in cold:
            fresh = aligned_empty(arrays[i].shape, arrays[i].dtype)
            fresh[...] = arrays[i]
            copy[i] = fresh
        sets.append(copy)
    return sets


def _measure(request: dict, state: dict) -> dict:
    """Worker side of one candidate (see the module docstring for the protocol)."""
    workloads: OrderedDict = state.setdefault("workloads", OrderedDict())
    work = workloads.get(request["key"])
    if work is None:
        return {"need_workload": True}
    workloads.move_to_end(request["key"])
    if request.get("kind") in ("opencl", "cuda"):
        from .gpu import measure_gpu

        return measure_gpu(request, work, _poison, timed_repeats, check_after_timing)
    try:
        intrinsics.load_libraries(request.get("libraries", ()))
        jit, address, meta = _load_kernel(request["path"])
    except Exception as err:  # noqa: BLE001 - an unloadable artifact is this candidate's error
        return {"error_kind": "runtime",
                "error_msg": f"cannot load {request['path']}: {type(err).__name__}: {err}"}
    params = work["params"]
    arrays, argv = work["arrays"], work["argv"]
    want = [(tuple(p["shape"]), p["dtype"]) for p in params]
    if request.get("packs"):
        try:
            arrays = _packed_arrays(request["packs"], arrays, state)
        except Exception as err:  # noqa: BLE001 - a packing that fails is this candidate's
            return {"error_kind": "runtime",
                    "error_msg": f"packing the weights failed: {type(err).__name__}: {err}"}
        argv = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        want = [(tuple(a.shape), str(a.dtype)) for a in arrays]
    got = [(tuple(p["shape"]), p["dtype"]) for p in meta["params"]]
    if got != want:
        return {"error_kind": "runtime",
                "error_msg": f"candidate parameters {got} differ from the workload's {want}"}
    harness: _Harness = state.setdefault("harness", _Harness())
    loop = harness.loop(len(params))
    outputs = [arrays[i] for i in work["outputs"]]
    target = state.get("target")
    if target is None:
        target = state["target"] = Target.current_host()
    sets = 1
    if request.get("cold_params"):
        # Weights read from memory on every call (see weight_sets): the loop takes the
        # argument sets in turn.  The first set is ``arrays``: the check reads its outputs.
        table = weight_sets(arrays, request["cold_params"], target.l3_cache,
                            request.get("cold_bytes") or None)
        sets = len(table)
        argv = (ctypes.c_void_p * (sets * len(arrays)))(
            *[a.ctypes.data for group in table for a in group])
    kernel_seconds = 0.0
    weights = set(request.get("weights", ()))
    fresh = request.get("fresh_inputs") and [i for i in work["inputs"] if i not in weights]
    if fresh:
        # Activations rewritten from their pristine copies before each call, untimed (see
        # _Harness.fresh_loop): ``timed`` returns the calls' own seconds.
        fresh_loop = harness.fresh_loop(len(params))
        copies = (ctypes.c_uint64 * (3 * len(fresh)))(*[
            value for i in fresh for value in (
                arrays[i].ctypes.data, work["pristine"][work["inputs"].index(i)].ctypes.data,
                arrays[i].nbytes)])

    def timed(n: int) -> float:
        nonlocal kernel_seconds
        t0 = time.perf_counter()
        if fresh:
            elapsed = fresh_loop(address, argv, sets, n, copies, len(fresh))
        else:
            loop(address, argv, sets, n)
            elapsed = time.perf_counter() - t0
        kernel_seconds += time.perf_counter() - t0
        return elapsed

    # 0. A host whose cores exchange data slowly for now is waited out (see .host).
    host_wait = 0.0
    if request.get("quiet_wait"):
        host_wait = state.setdefault("host", QuietHost()).wait(request["quiet_wait"])

    # 1. Warm-up, on poisoned outputs, keeping them for the check.  The time-out counts from
    # here: loading the artifact and compiling the timing harness (once per worker) are not
    # the candidate's running time, and on a loaded machine they can take seconds.
    deadline = time.perf_counter() + request["timeout"]
    check_possible = request["check"] and work["reference"] is not None
    _poison(outputs)
    warm = timed(1)
    snapshot = [o.copy() for o in outputs] if check_possible else None

    # 2. Repeats.
    times, number, stopped_early = timed_repeats(
        timed, warm, request, deadline,
        before_repeat=(lambda: harness.flush(arrays, target)) if request["flush_cache"] else None)
    median = float(np.median(times))

    # 3. Inputs unchanged, 4. outputs checked.  The workload's own arrays: a packed copy
    # of a weight belongs to this candidate alone.
    originals = work["arrays"]

    def restore(i: int) -> None:
        originals[i][...] = work["pristine"][work["inputs"].index(i)]

    verdict = check_after_timing(work, request, [originals[i] for i in work["inputs"]],
                                 snapshot, median, check_possible, kernel_seconds, restore)
    if "error_kind" in verdict:
        return dict(verdict, host_wait=host_wait)
    del jit  # releases the candidate's JIT engine and its code
    return {"run_times": times, "number": number, "checked": verdict["checked"],
            "stopped_early": stopped_early, "kernel_seconds": kernel_seconds,
            "host_wait": host_wait}


def handle_run_request(request: dict, state: dict) -> dict:
    """Entry point of the runner's worker process."""
    op = request.get("op")
    if op == "workload":
        return _prepare_workload(request, state)
    if op == "measure":
        return _measure(request, state)
    return {"exception": f"unknown request {op!r}"}
