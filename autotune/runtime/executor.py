"""A built model: preallocated buffers, kernels called in order, ``run`` and ``benchmark``.

    lib = autotune.build(model, target="llvm")
    out = lib.run({"input": x})          # {output name: numpy array}
    lib.benchmark()                      # BenchmarkResult: end-to-end latency
    print(lib.report)                    # which fused functions use a tuning record

Buffers follow the memory plan (graph/passes.py): storages are allocated once, 64-byte
aligned, and every value is a numpy view into its storage; reshapes are views too.  ``run``
copies the inputs into their buffers, calls each kernel with pointers bound at build time,
and returns copies of the outputs, so an executor is reusable; a lock makes concurrent calls
take turns (one run at a time).  A model built for an ``opencl`` target runs in a
GPUExecutor instead (autotune/runtime/gpu_executor.py): the same interface, its buffers on the
device.
``lib.export_library(folder)`` writes a CPU model as one shared library, its weights and a
loader that needs numpy alone (autotune/runtime/export.py).
"""
from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from tensor_ir.codegen import threadpool
from tensor_ir.errors import BuildError

from ..graph.ir import Model
from ..graph.passes import ALIGNMENT, MemoryPlan
from ..graph.types import TensorType, contiguous
from ..measure.cpu import aligned_empty

__all__ = [
    "BenchmarkResult",
    "BuildReport",
    "Executor",
    "FunctionReport",
    "Step",
    "checked_inputs",
]


@dataclass
class FunctionReport:
    """One fused function of a built model: ``source`` is "record" (a tuning record's
    schedule), "default" (the default schedule) or "unscheduled" (the plain loop nest, when
    no default schedule could be sampled)."""

    name: str
    key: str
    count: int
    flops: int
    source: str

    @property
    def tuned(self) -> bool:
        return self.source == "record"


@dataclass
class BuildReport:
    """Coverage of a model build by tuning records."""

    model: str
    target: str
    functions: list[FunctionReport] = field(default_factory=list)

    @property
    def total_flops(self) -> int:
        return sum(f.flops * f.count for f in self.functions)

    @property
    def coverage(self) -> float:
        """Share of the model's FLOPs computed by functions that have a tuning record (1.0
        for a model without floating-point work where every function is tuned)."""
        total = self.total_flops
        if total == 0:
            return 1.0 if all(f.tuned for f in self.functions) else 0.0
        return sum(f.flops * f.count for f in self.functions if f.tuned) / total

    @property
    def fallbacks(self) -> list[FunctionReport]:
        return [f for f in self.functions if not f.tuned]

    @property
    def tuned(self) -> list[FunctionReport]:
        return [f for f in self.functions if f.tuned]

    def __str__(self) -> str:
        lines = [f"build of {self.model} for {self.target}: {len(self.tuned)} of "
                 f"{len(self.functions)} fused functions from tuning records, "
                 f"{self.coverage:.1%} of {self.total_flops / 1e9:.3f} GFLOP"]
        for f in sorted(self.functions, key=lambda f: -f.flops * f.count):
            share = f.flops * f.count / self.total_flops if self.total_flops else 0.0
            lines.append(f"  {f.source:<11} x{f.count:<3} {share:6.1%}  {f.name} "
                         f"[{f.key[:12]}]")
        return "\n".join(lines)


@dataclass
class Step:
    """One kernel call: ``kernel`` takes ``args`` (value names) in order."""

    name: str
    kernel: object
    args: list[str]
    key: str


@dataclass
class BenchmarkResult:
    """End-to-end latencies in milliseconds, one per repeat (``number`` runs each)."""

    times_ms: list[float]
    number: int

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.times_ms)

    @property
    def min_ms(self) -> float:
        return min(self.times_ms)

    @property
    def std_ms(self) -> float:
        return statistics.pstdev(self.times_ms) if len(self.times_ms) > 1 else 0.0

    def __str__(self) -> str:
        return (f"median {self.median_ms:.3f} ms, mean {self.mean_ms:.3f} ms, min "
                f"{self.min_ms:.3f} ms (std {self.std_ms:.3f}, {len(self.times_ms)} repeats "
                f"x {self.number})")


def _aligned_copy(array: np.ndarray) -> np.ndarray:
    """``array`` in storage aligned like the planned buffers.  numpy's own allocations are
    only 16-byte aligned, and a tuned kernel's 64-byte vector loads from such a weight split
    across cache lines: the large matmuls of a BERT layer ran up to 1.5x slower on weights
    left where numpy put them than on the aligned arrays they were tuned on."""
    if array.ctypes.data % ALIGNMENT == 0:
        return array
    copy = aligned_empty(array.shape, array.dtype, ALIGNMENT)
    copy[...] = array
    return copy


def _view(storage: np.ndarray, t: TensorType) -> np.ndarray:
    return storage[:t.nbytes].view(t.dtype).reshape(t.shape)


def _native_call(kernel, arrays: Sequence[np.ndarray]) -> tuple[int, tuple[int, ...]] | None:
    """(entry address, data pointers) of a native ``kernel`` on ``arrays``, after the
    argument checks of ``Kernel.__call__``; None for a kernel without a native entry."""
    check = getattr(kernel, "_check", None)
    cfunc = getattr(kernel, "_cfunc", None)
    if check is None or cfunc is None:
        return None
    return ctypes.cast(cfunc, ctypes.c_void_p).value, tuple(check(tuple(arrays)))


def _bind(kernel, arrays: Sequence[np.ndarray],
          native: tuple[int, tuple[int, ...]] | None) -> Callable[[], int | None]:
    """A call of ``kernel`` on ``arrays`` with the pointers resolved once (``native``, from
    ``_native_call``); it returns the kernel's status (0, or the failed index check: see
    ``Kernel.index_error``), None for a kernel called normally (which raises itself).

    The arrays are fixed for the executor's life, so the per-call argument checks of
    ``Kernel.__call__`` are done once, at build (they cost tens of microseconds per call,
    which adds up over a model's kernels).  Kernels without that fast path are called
    normally."""
    if native is None:
        return lambda: kernel(*arrays)
    cfunc, pointers = getattr(kernel, "_cfunc"), native[1]
    return lambda: cfunc(*pointers)


def _native_sequence(calls: Sequence[tuple[int, tuple[int, ...]]]) -> Callable[[], int]:
    """One native function calling every ``(entry address, pointers)`` in order: a model's
    run crosses from Python to native code once instead of once per kernel (a ctypes call
    costs a microsecond or two, tens of kernels a run).  The addresses and pointers sit in
    a table the function reads; only the arities are compiled in.  The thread pool's team is
    held for the run (see tensor_ir/codegen/threadpool.py): no worker sleeps between two
    kernels, and the sleeping ones are woken as the run starts.  It returns 0, or where a
    kernel's index check failed ``(step + 1) << 32 | status`` and runs no further kernel."""
    from tensor_ir.codegen import LLVMTarget, compile_module

    lines, slot = [], 0
    for k, (_, pointers) in enumerate(calls):
        loads = []
        for a in range(len(pointers) + 1):  # the entry, then its arguments
            lines.append(f"  %p{k}_{a} = getelementptr inbounds ptr, ptr %table, i64 {slot}")
            lines.append(f"  %v{k}_{a} = load ptr, ptr %p{k}_{a}")
            loads.append(f"%v{k}_{a}")
            slot += 1
        args = ", ".join(f"ptr {v}" for v in loads[1:])
        lines.append(f"  %s{k} = call i32 {loads[0]}({args})")
        lines.append(f"  %bad{k} = icmp ne i32 %s{k}, 0")
        lines.append(f"  br i1 %bad{k}, label %failed, label %ok{k}")
        lines.append(f"ok{k}:")
    hold, release = threadpool.HOLD, threadpool.RELEASE
    blocks = ["entry"] + [f"ok{k}" for k in range(len(calls) - 1)]
    steps = ", ".join(f"[{(k + 1) << 32}, %{b}]" for k, b in enumerate(blocks))
    statuses = ", ".join(f"[%s{k}, %{b}]" for k, b in enumerate(blocks))
    text = (f"declare void @{hold}()\ndeclare void @{release}()\n"
            f"define i64 @run_steps(ptr %table) {{\nentry:\n  call void @{hold}()\n"
            + "\n".join(lines) + f"\n  call void @{release}()\n  ret i64 0\n"
            f"failed:\n  %step = phi i64 {steps}\n  %status = phi i32 {statuses}\n"
            f"  call void @{release}()\n  %code = zext i32 %status to i64\n"
            f"  %both = or i64 %step, %code\n  ret i64 %both\n}}\n")
    jit = compile_module(text, LLVMTarget()).jit()
    table = (ctypes.c_void_p * max(1, slot))(
        *[value for address, pointers in calls for value in (address, *pointers)])
    run = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(jit.function_address("run_steps"))
    address = ctypes.addressof(table)

    def run_all(jit=jit, table=table) -> int:  # the defaults keep both alive
        return run(address)

    return run_all


def checked_inputs(model: Model, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``inputs`` as arrays, in the model's input order, once each is known to fit its input:
    every input given, no unknown name, the input's shape, a dtype of the input's kind
    (another precision of that kind is left for the caller to convert with
    ``casting="same_kind"``).  BuildError naming the input otherwise."""
    if not isinstance(inputs, Mapping):
        raise BuildError(f"run takes a dict {{input name: array}}, got "
                         f"{type(inputs).__name__}")
    unknown = sorted(set(inputs) - set(model.inputs))
    if unknown:
        raise BuildError(f"{model.name} has no input(s) {unknown}; its inputs are "
                         f"{model.inputs}")
    out = {}
    for name in model.inputs:
        if name not in inputs:
            raise BuildError(f"run: no value for input {name!r} ({model.types[name]})")
        value = np.asarray(inputs[name])
        expected = model.types[name]
        if value.shape != expected.shape:
            raise BuildError(f"run: input {name!r} must have shape {expected.shape}, got "
                             f"{value.shape}")
        # Another precision of the same kind (float64 for float32) is converted; a different
        # kind (integers for floats) is most likely a mistake.
        dtype = np.dtype(expected.dtype)
        if value.dtype.kind != dtype.kind:
            raise BuildError(f"run: input {name!r} must be {dtype}, got {value.dtype}")
        out[name] = value
    return out


class Executor:
    """A model compiled for one target; see the module text."""

    def __init__(self, model: Model, steps: list[Step], plan: MemoryPlan,
                 views: Mapping[str, str], report: BuildReport, target: str,
                 extra_constants: Mapping[str, np.ndarray] | None = None):
        self.model = model
        self.steps = steps
        self.plan = plan
        self.report = report
        self.target = target
        self._lock = threading.Lock()
        self._storages = [aligned_empty((n,), np.uint8, ALIGNMENT) for n in plan.sizes]
        arrays: dict[str, np.ndarray] = {}
        # The model's weights, and those the builder derived for its kernels (packed into a
        # kernel's layout).
        for name, array in {**model.constants, **(extra_constants or {})}.items():
            arrays[name] = _aligned_copy(contiguous(array))
        for value, sid in plan.storage.items():
            if value not in views:
                arrays[value] = _view(self._storages[sid], model.types[value])
        # Views in definition order: each source is defined before it.
        for value, source in views.items():
            arrays[value] = arrays[source].reshape(model.types[value].shape)
        self._arrays = arrays
        missing = [v for s in steps for v in s.args if v not in arrays]
        if missing:
            raise BuildError(f"executor of {model.name}: values {missing[:5]} have no buffer")
        operands = [[arrays[v] for v in s.args] for s in steps]
        natives = [_native_call(s.kernel, args) for s, args in zip(steps, operands)]
        self._calls = [_bind(s.kernel, args, native)
                       for s, args, native in zip(steps, operands, natives)]
        # ``_execute``: every kernel from one native call when all of them are native
        # (profile still calls them one by one, to time each).
        self._run_all = _native_sequence(natives) if steps and None not in natives else None

    # -- information --------------------------------------------------------------------------
    @property
    def input_types(self) -> dict[str, TensorType]:
        return self.model.input_types()

    @property
    def output_types(self) -> dict[str, TensorType]:
        return self.model.output_types()

    @property
    def memory_bytes(self) -> int:
        """Bytes of the planned intermediate, input and output buffers (not the weights)."""
        return self.plan.total_bytes

    def export_library(self, path: str | os.PathLike) -> str:
        """Write the model as a deployable folder at ``path``: one shared library holding
        every kernel and an entry that runs them in order, the weights, a JSON description
        and ``loader.py``, which loads and runs it with numpy and ctypes alone (see
        autotune/runtime/export.py).  Returns the folder.  TargetError for a model built for a GPU;
        BuildError when the kernels cannot be linked for this host."""
        from .export import export_executor

        return export_executor(self, path)

    def __repr__(self) -> str:
        return (f"Executor({self.model.name}, {len(self.steps)} kernels, "
                f"{self.memory_bytes / 2**20:.1f} MiB buffers, target={self.target!r})")

    # -- running ------------------------------------------------------------------------------
    def _set_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        for name, value in checked_inputs(self.model, inputs).items():
            np.copyto(self._arrays[name], value, casting="same_kind")

    def _execute(self) -> None:
        if self._run_all is not None:
            failed = self._run_all()  # holds the team itself
            if failed:
                self._failed((failed >> 32) - 1, failed & 0xFFFFFFFF)
            return
        with threadpool.held():
            for k, call in enumerate(self._calls):
                status = call()
                if status:
                    self._failed(k, status)

    def _failed(self, step: int, status: int) -> None:
        """Raise what kernel ``step`` returning ``status`` means (a KernelIndexError naming
        the model value whose buffer an index from data left)."""
        s = self.steps[step]
        raise s.kernel.index_error(status, s.args)

    def run(self, inputs: Mapping[str, np.ndarray] | None = None, **named
            ) -> dict[str, np.ndarray]:
        """Run the model on ``{input name: array}`` (or keyword arguments); returns
        ``{output name: array}`` (fresh arrays, not the executor's buffers)."""
        feed = dict(inputs or {})
        feed.update(named)
        with self._lock:
            self._set_inputs(feed)
            self._execute()
            return {name: np.array(self._arrays[name], copy=True)
                    for name in self.model.outputs}

    __call__ = run

    def profile(self, inputs: Mapping[str, np.ndarray] | None = None, repeat: int = 5
                ) -> list[tuple[str, float]]:
        """(step name, median milliseconds) of every kernel call, in execution order."""
        if inputs is None:
            inputs = self._random_inputs()
        with self._lock:
            self._set_inputs(inputs)
            samples: list[list[float]] = [[] for _ in self._calls]
            for _ in range(max(1, repeat)):
                with threadpool.held():
                    for k, call in enumerate(self._calls):
                        start = time.perf_counter()
                        status = call()
                        samples[k].append((time.perf_counter() - start) * 1e3)
                        if status:
                            self._failed(k, status)
        return [(step.name, statistics.median(s)) for step, s in zip(self.steps, samples)]

    def _random_inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        return {name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
                for name, t in self.input_types.items()}

    def benchmark(self, inputs: Mapping[str, np.ndarray] | None = None, repeat: int = 10,
                  number: int | None = None, min_repeat_ms: float = 50.0,
                  warmup: int = 2) -> BenchmarkResult:
        """End-to-end latency of ``run`` without the input and output copies.  ``number``
        runs per repeat (default: grown until a repeat lasts ``min_repeat_ms``); the
        inputs default to seeded random values."""
        if inputs is None:
            inputs = self._random_inputs()
        with self._lock:
            self._set_inputs(inputs)
            for _ in range(max(0, warmup)):
                self._execute()
            if number is None:
                number = 1
                while True:
                    start = time.perf_counter()
                    for _ in range(number):
                        self._execute()
                    elapsed = (time.perf_counter() - start) * 1e3
                    if elapsed >= min_repeat_ms or number >= 1 << 16:
                        break
                    number *= 2 if elapsed * 4 >= min_repeat_ms else 4
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                for _ in range(number):
                    self._execute()
                times.append((time.perf_counter() - start) * 1e3 / number)
        return BenchmarkResult(times, number)
