"""A model built for OpenCL: device-resident buffers, kernels enqueued in order on one queue.

    lib = autotune.build(model, target="opencl")      # build_model picks this executor
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
once.  Each executor has a queue and kernel objects of its own, so two executors never wait on
or overwrite each other's work; a lock makes concurrent calls of one executor take turns.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import numpy as np

from tensor_ir.errors import BuildError

from .executor import BuildReport, Executor, Step, checked_inputs
from .graph.ir import Model
from .graph.passes import MemoryPlan
from .graph.types import contiguous

__all__ = ["GPUExecutor"]


class GPUExecutor(Executor):
    """A model compiled for an OpenCL device; see the module text.  ``steps`` hold
    :class:`autotune.gpu.GPUKernel` kernels built in ``context``."""

    def __init__(self, model: Model, steps: list[Step], plan: MemoryPlan,
                 views: Mapping[str, str], report: BuildReport, target: str, context):
        import pyopencl as cl

        self.model = model
        self.steps = steps
        self.plan = plan
        self.report = report
        self.target = target
        self._cl = cl
        self._lock = threading.Lock()
        self._context = context
        self._queue = cl.CommandQueue(context)
        self._staged: list[np.ndarray] = []
        flags = cl.mem_flags

        # 1. Storages of the memory plan (inputs, intermediates, outputs) and the weights
        #    the kernels read, each uploaded here once.
        storages = [cl.Buffer(context, flags.READ_WRITE, size) for size in plan.sizes]
        buffers = {value: storages[sid] for value, sid in plan.storage.items()
                   if value not in views}
        used = {v for s in steps for v in s.args} | set(model.outputs)
        self.weight_bytes = 0
        for value in sorted(used):
            root = _root(value, views)
            if root in model.constants and root not in buffers:
                host = contiguous(model.constants[root])
                buffers[root] = _upload(cl, context, host)
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
        return self._context.devices[0].name.strip()

    def __repr__(self) -> str:
        return (f"GPUExecutor({self.model.name}, {len(self.steps)} steps, "
                f"{self.memory_bytes / 2**20:.1f} MiB buffers and "
                f"{self.weight_bytes / 2**20:.1f} MiB weights on {self.device}, "
                f"target={self.target!r})")

    # -- running ------------------------------------------------------------------------------
    def _set_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Enqueue the copy of every input to its device buffer (not waited for)."""
        staged = []
        for name, value in checked_inputs(self.model, inputs).items():
            dtype = np.dtype(self.model.types[name].dtype)
            host = np.ascontiguousarray(value.astype(dtype, casting="same_kind", copy=False))
            if host.nbytes:
                self._cl.enqueue_copy(self._queue, self._buffers[name], host,
                                      is_blocking=False)
            staged.append(host)
        # NOTE: kept until the next call, by which time the queue has been drained: a
        # non-blocking copy reads the host array after enqueue_copy returns.
        self._staged = staged

    def _enqueue(self, launches_of_steps) -> None:
        enqueue = self._cl.enqueue_nd_range_kernel
        for launches in launches_of_steps:
            for kernel, global_size, local_size in launches:
                enqueue(self._queue, kernel, global_size, local_size)

    def _step_call(self, launches) -> Callable[[], None]:
        # One step and a wait: what ``profile`` times per kernel.
        def call() -> None:
            self._enqueue((launches,))
            self._queue.finish()
        return call

    def _execute(self) -> None:
        # The whole model, then one wait: ``benchmark`` times runs including that wait.
        self._enqueue(self._launches)
        self._queue.finish()

    def _read_outputs(self) -> dict[str, np.ndarray]:
        out = {}
        for name in self.model.outputs:
            t = self.model.types[name]
            host = np.empty(t.shape, t.dtype)
            if host.nbytes:
                self._cl.enqueue_copy(self._queue, host, self._buffers[name],
                                      is_blocking=False)
            out[name] = host
        self._queue.finish()
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


def _upload(cl, context, host: np.ndarray):
    """A read-only device copy of ``host`` (OpenCL has no empty buffers: one byte for an
    empty array, which no kernel reads)."""
    flags = cl.mem_flags
    if host.nbytes == 0:
        return cl.Buffer(context, flags.READ_ONLY, 1)
    return cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=host)
