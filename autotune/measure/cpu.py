"""The worker side of CPU (llvm) candidates: load the object file into the JIT, pack the
model weights the candidate names, and time it in loops compiled to native code (one ctypes
call per repeat) by the shared protocol (:mod:`.protocol`).  LocalRunner's worker process
calls :func:`measure_cpu` through the CPU backend (autotune.backends)."""
from __future__ import annotations

import ctypes
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from tensor_ir import intrinsics
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from .host import NOW_IR, QuietHost
from .protocol import check_after_timing, poison, timed_repeats

__all__ = ["aligned_empty", "measure_cpu", "weight_sets"]

# Arrays are aligned like the code generator's own allocations.
_ALIGN = 64


def aligned_empty(shape: tuple, dtype, align: int = _ALIGN) -> np.ndarray:
    """An uninitialised array whose data starts at a multiple of ``align`` bytes."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


# The step from one call of a timing loop to the next: call ``%i`` of ``%n`` and argument set
# ``%j`` of ``%sets`` (the set index wraps by a compare, not a division: a few cycles a call).
_NEXT_CALL = """  %next = add i64 %i, 1
  %j1 = add i64 %j, 1
  %wrap = icmp sge i64 %j1, %sets
  %jnext = select i1 %wrap, i64 0, i64 %j1
  %more = icmp slt i64 %next, %n"""
# The first failed index check of the calls so far (%status), after call %got.
_KEEP_STATUS = """  %failed_before = icmp ne i32 %status, 0
  %status1 = select i1 %failed_before, i32 %status, i32 %got"""


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
        """``time_loop(fn, argv, sets, n) -> status``: ``n`` calls of ``fn``, call ``i``
        taking the ``i % sets``-th of ``sets`` consecutive argument vectors of ``arity``
        pointers in ``argv`` (one set but for weights read cold, see ``weight_sets``); the
        first non-zero status a call returned (a failed index check), else 0."""
        def text(loads: str, args: str) -> str:
            return f"""
define i32 @time_loop(ptr %fn, ptr %argv, i64 %sets, i64 %n) {{
entry:
  %go = icmp sgt i64 %n, 0
  br i1 %go, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %j = phi i64 [0, %entry], [%jnext, %loop]
  %status = phi i32 [0, %entry], [%status1, %loop]
{loads}
  %got = call i32 %fn({args})
{_KEEP_STATUS}
{_NEXT_CALL}
  br i1 %more, label %loop, label %done
done:
  %result = phi i32 [0, %entry], [%status1, %loop]
  ret i32 %result
}}
"""
        return self._compiled("time_loop", arity, text, ctypes.c_int32, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

    def fresh_loop(self, arity: int):
        """``time_fresh(fn, argv, sets, n, copies, ncopies, status) -> seconds``: like
        ``loop`` (its status written to ``*status``), but
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
                          i64 %ncopies, ptr %status_out) {{
entry:
  %ts = alloca [2 x i64], align 8
  %go = icmp sgt i64 %n, 0
  br i1 %go, label %call_head, label %done
call_head:
  %i = phi i64 [0, %entry], [%next, %timed]
  %j = phi i64 [0, %entry], [%jnext, %timed]
  %total = phi i64 [0, %entry], [%total1, %timed]
  %status = phi i32 [0, %entry], [%status1, %timed]
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
  %got = call i32 %fn({args})
  %t1 = call i64 @now(ptr %ts)
{_KEEP_STATUS}
  br label %timed
timed:
  %dt = sub i64 %t1, %t0
  %total1 = add i64 %total, %dt
{_NEXT_CALL}
  br i1 %more, label %call_head, label %done
done:
  %sum = phi i64 [0, %entry], [%total1, %timed]
  %result = phi i32 [0, %entry], [%status1, %timed]
  store i32 %result, ptr %status_out
  %secs = uitofp i64 %sum to double
  %out = fdiv double %secs, 1.0e9
  ret double %out
}}
"""
        return self._compiled("time_fresh", arity, text, ctypes.c_double, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)

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


def _load_kernel(path: str):
    """(JIT engine, entry address, metadata) of an object file built by LocalBuilder."""
    import json

    from tensor_ir.codegen import META_SYMBOL, JITModule

    with open(path, "rb") as f:
        object_code = f.read()
    jit = JITModule(object_code)
    meta = json.loads(jit.read_string(META_SYMBOL))
    return jit, jit.function_address(meta["entry"]), meta


# Packing kernels kept per worker: candidates of one workload often pack alike.
_MAX_PACKING_KERNELS = 64


def _packed_arrays(packs: list[dict], arrays: list[np.ndarray], state: dict
                   ) -> list[np.ndarray]:
    """The workload's arrays with each weight the candidate packs replaced by its packed
    copy: the packing kernels run here once, outside the timed calls, as a model build runs
    them (see MeasureInput.weight_params)."""
    from autotune.runtime.build import build

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


def measure_cpu(request: dict, work: dict, state: dict) -> dict:
    """Worker side of one CPU candidate against its prepared workload ``work`` (see
    autotune.measure.runner's module text for the protocol)."""
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

    status = ctypes.c_int32(0)

    def timed(n: int) -> float:
        nonlocal kernel_seconds
        t0 = time.perf_counter()
        if fresh:
            elapsed = fresh_loop(address, argv, sets, n, copies, len(fresh),
                                 ctypes.byref(status))
        else:
            status.value = loop(address, argv, sets, n)
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
    poison(outputs)
    warm = timed(1)
    if status.value:
        # The workload's indices are drawn in range (runner.workload_inputs), so a failed
        # check is the candidate's: it reads or writes outside a buffer.
        checks = meta.get("checks", [])
        check = checks[status.value - 1] if 0 < status.value <= len(checks) else {}
        return {"error_kind": "runtime", "host_wait": host_wait,
                "error_msg": f"index check {status.value} failed (buffer "
                             f"{check.get('buffer')!r}, axis {check.get('axis')}, extent "
                             f"{check.get('extent')}) on in-range workload indices"}
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
