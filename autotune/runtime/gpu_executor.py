"""A model built for a GPU (OpenCL or CUDA): device-resident buffers, kernels enqueued in order
on one queue (an OpenCL in-order queue; CUDA's default stream).

    lib = autotune.build(model, target="opencl")      # build_model picks this executor
    lib = autotune.build(model, target="cuda -arch=sm_90")
    out = lib.run({"input": x})          # inputs copied in, kernels enqueued, outputs read back
    lib.benchmark()                      # the queue is drained before each timing stops
    print(lib.report)                    # which fused functions use a tuning record

Everything lives on the device for the executor's life, allocated once at build: one buffer
per storage of the memory plan (graph/passes.py; values sharing a storage all start at its
first byte, as the CPU executor's views do), one read-only buffer per weight (uploaded once),
and each fused function's temporaries.  A reshape is the buffer of its source: the memory plan
keeps every value contiguous, so a view needs no copy on the device either.  ``run`` enqueues
one host-to-device copy per model input, every kernel of every step (arguments bound at build,
no wait between them: the queue is in order), one device-to-host copy per output, and waits
once.  Each executor has kernel launches (and on OpenCL a queue) of its own, so two executors
never overwrite each other's arguments; a lock makes concurrent calls of one executor take
turns.  The runtime calls are a device object's (:class:`OpenCLDevice`, :class:`CUDADevice`).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import numpy as np

from tensor_ir.errors import BuildError

from .executor import BuildReport, Executor, Step, checked_inputs
from ..graph.ir import Model
from ..graph.passes import MemoryPlan
from ..graph.types import contiguous

__all__ = ["CUDADevice", "GPUExecutor", "OpenCLDevice"]


class OpenCLDevice:
    """The runtime calls of a GPUExecutor on an OpenCL device: a queue of its own."""

    def __init__(self, context):
        import pyopencl as cl

        self._cl = cl
        self._context = context
        self._queue = cl.CommandQueue(context)

    @property
    def name(self) -> str:
        return self._context.devices[0].name.strip()

    def alloc(self, size: int):
        return self._cl.Buffer(self._context, self._cl.mem_flags.READ_WRITE, max(size, 1))

    def upload(self, host: np.ndarray):
        """A read-only device copy of ``host`` (OpenCL has no empty buffers: one byte for an
        empty array, which no kernel reads)."""
        flags = self._cl.mem_flags
        if host.nbytes == 0:
            return self._cl.Buffer(self._context, flags.READ_ONLY, 1)
        return self._cl.Buffer(self._context, flags.READ_ONLY | flags.COPY_HOST_PTR,
                               hostbuf=host)

    def copy_in(self, buffer, host: np.ndarray) -> None:
        # Not waited for: the caller keeps ``host`` alive until the queue is drained.
        self._cl.enqueue_copy(self._queue, buffer, host, is_blocking=False)

    def copy_out(self, host: np.ndarray, buffer) -> None:
        self._cl.enqueue_copy(self._queue, host, buffer, is_blocking=False)

    def enqueue(self, launches) -> None:
        enqueue = self._cl.enqueue_nd_range_kernel
        for kernel, global_size, local_size in launches:
            enqueue(self._queue, kernel, global_size, local_size)

    def finish(self) -> None:
        self._queue.finish()


class CUDADevice:
    """The runtime calls of a GPUExecutor on the CUDA GPU (autotune.runtime.cuda's context): the
    default stream, in whose order copies and kernels run."""

    def __init__(self):
        from .cuda import driver_and_device

        self._drv, self._device = driver_and_device()

    @property
    def name(self) -> str:
        return self._device.name()

    def alloc(self, size: int):
        return self._drv.mem_alloc(max(size, 1))

    def upload(self, host: np.ndarray):
        buffer = self.alloc(host.nbytes)
        if host.nbytes:
            self._drv.memcpy_htod(buffer, host)
        return buffer

    def copy_in(self, buffer, host: np.ndarray) -> None:
        if host.nbytes:
            self._drv.memcpy_htod(buffer, host)

    def copy_out(self, host: np.ndarray, buffer) -> None:
        # Synchronous, and on the default stream: after every kernel enqueued before it.
        if host.nbytes:
            self._drv.memcpy_dtoh(host, buffer)

    def enqueue(self, launches) -> None:
        for function, grid, block, args in launches:
            function.prepared_async_call(grid, block, None, *args)

    def finish(self) -> None:
        self._drv.Context.synchronize()


class GPUExecutor(Executor):
    """A model compiled for a GPU; see the module text.  ``steps`` hold kernels built for
    ``device`` (:class:`autotune.runtime.opencl.GPUKernel` for an :class:`OpenCLDevice`,
    :class:`autotune.runtime.cuda.CUDAKernel` for a :class:`CUDADevice`)."""

    def __init__(self, model: Model, steps: list[Step], plan: MemoryPlan,
                 views: Mapping[str, str], report: BuildReport, target: str, device):
        self.model = model
        self.steps = steps
        self.plan = plan
        self.report = report
        self.target = target
        self._device = device
        self._lock = threading.Lock()
        self._staged: list[np.ndarray] = []

        # 1. Storages of the memory plan (inputs, intermediates, outputs) and the weights
        #    the kernels read, each uploaded here once.
        storages = [device.alloc(size) for size in plan.sizes]
        buffers = {value: storages[sid] for value, sid in plan.storage.items()
                   if value not in views}
        used = {v for s in steps for v in s.args} | set(model.outputs)
        self.weight_bytes = 0
        for value in sorted(used):
            root = _root(value, views)
            if root in model.constants and root not in buffers:
                host = contiguous(model.constants[root])
                buffers[root] = device.upload(host)
                self.weight_bytes += host.nbytes
        # 2. Views: their source's buffer (sources are defined before their views).
        for value, source in views.items():
            if source in buffers:
                buffers[value] = buffers[source]
        missing = sorted(v for v in used if v not in buffers)
        if missing:
            raise BuildError(f"executor of {model.name}: values {missing[:5]} have no device "
                             f"buffer")
        self._buffers = buffers
        self._storages = storages

        # 3. Every step's launches with their arguments set once; the temporaries of a
        #    function are shared by its steps, which never run at the same time.
        self._temps: dict[str, list] = {}
        self._launches: list[list[tuple]] = []
        for step in steps:
            launches, temps = step.kernel.bind([buffers[v] for v in step.args],
                                               self._temps.get(step.key))
            self._temps[step.key] = temps
            self._launches.append(launches)
        self._calls = [self._step_call(launches) for launches in self._launches]

    # -- information --------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return self._device.name

    def __repr__(self) -> str:
        return (f"GPUExecutor({self.model.name}, {len(self.steps)} steps, "
                f"{self.memory_bytes / 2**20:.1f} MiB buffers and "
                f"{self.weight_bytes / 2**20:.1f} MiB weights on {self.device}, "
                f"target={self.target!r})")

    # -- running ------------------------------------------------------------------------------
    def _set_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Enqueue the copy of every input to its device buffer."""
        staged = []
        for name, value in checked_inputs(self.model, inputs).items():
            dtype = np.dtype(self.model.types[name].dtype)
            host = np.ascontiguousarray(value.astype(dtype, casting="same_kind", copy=False))
            if host.nbytes:
                self._device.copy_in(self._buffers[name], host)
            staged.append(host)
        # NOTE: kept until the next call, by which time the queue has been drained: a
        # non-blocking copy reads the host array after the copy call returns.
        self._staged = staged

    def _enqueue(self, launches_of_steps) -> None:
        for launches in launches_of_steps:
            self._device.enqueue(launches)

    def _step_call(self, launches) -> Callable[[], None]:
        # One step and a wait: what ``profile`` times per kernel.
        def call() -> None:
            self._device.enqueue(launches)
            self._device.finish()
        return call

    def _execute(self) -> None:
        # The whole model, then one wait: ``benchmark`` times runs including that wait.
        self._enqueue(self._launches)
        self._device.finish()

    def _read_outputs(self) -> dict[str, np.ndarray]:
        out = {}
        for name in self.model.outputs:
            t = self.model.types[name]
            host = np.empty(t.shape, t.dtype)
            if host.nbytes:
                self._device.copy_out(host, self._buffers[name])
            out[name] = host
        self._device.finish()
        return out

    def run(self, inputs: Mapping[str, np.ndarray] | None = None, **named
            ) -> dict[str, np.ndarray]:
        """Run the model on ``{input name: array}`` (or keyword arguments); returns
        ``{output name: array}`` (fresh host arrays)."""
        feed = dict(inputs or {})
        feed.update(named)
        with self._lock:
            self._set_inputs(feed)
            self._enqueue(self._launches)
            return self._read_outputs()

    __call__ = run


def _root(value: str, views: Mapping[str, str]) -> str:
    while value in views:
        value = views[value]
    return value
