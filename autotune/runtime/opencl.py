"""GPU kernels: a PrimFunc printed as OpenCL C and run through pyopencl on numpy arrays; the
lowering and printing both GPU backends use (:func:`gpu_program`; CUDA kernels:
:mod:`autotune.runtime.cuda`; building one: :func:`autotune.backends.build_gpu`).

    kernel = autotune.build(func, target="opencl")           # or "opencl -platform=pocl"
    kernel(a, b, c)               # copied to the device, outputs copied back in place
    print(kernel.get_source())    # the OpenCL C text

pyopencl is imported only inside the functions here, so importing ``autotune`` needs no
OpenCL runtime; building without one raises BuildError saying what to install.
"""
from __future__ import annotations

import threading

import numpy as np

from tensor_ir.codegen.gpu_c import GPUModule, GPUSource, gpu_module, split_kernels
from tensor_ir.codegen.gpu_verify import verify_gpu_kernel
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.devices import opencl_device
from tensor_ir.target import Target
from tensor_ir.thread_reduce import lower_for_gpu

from .kernel_args import check_arrays

__all__ = ["GPUKernel", "device_context", "gpu_program",
           "opencl_available", "opencl_problem"]

# platform string -> (context, queue), or the BuildError of a device that cannot compile.
_CONTEXTS: dict[str | None, tuple | BuildError] = {}
_CONTEXT_LOCK = threading.Lock()


def opencl_available(platform: str | None = None) -> bool:
    """Whether pyopencl imports and a device matching ``platform`` exists and compiles."""
    return opencl_problem(platform) is None


def opencl_problem(platform: str | None = None) -> str | None:
    """Why no kernel can be built for ``opencl -platform=PLATFORM`` here (no pyopencl, no
    matching device, a device that cannot compile), or None when one can."""
    try:
        _context(platform)
    except BuildError as err:
        return str(err)
    return None


def device_context(target: Target):
    """The pyopencl context of ``target``'s device, shared by every kernel built for it in
    this process; BuildError naming the platform and the devices seen when there is none."""
    return _context(dict(target.options).get("platform"))[0]


def _context(platform: str | None) -> tuple:
    """(context, queue) of the device ``tensor_ir.devices.opencl_device`` picks for
    ``platform``; one per process and platform string."""
    with _CONTEXT_LOCK:
        if platform in _CONTEXTS:
            known = _CONTEXTS[platform]
            if isinstance(known, BuildError):
                raise known
            return known
        device, problem = opencl_device(platform)
        if device is None:
            raise BuildError(problem)
        import pyopencl as cl

        context = cl.Context([device])
        problem = _compile_probe(cl, context)
        if problem is not None:
            # Remembered: the probe costs a compile, and the answer holds for the process.
            _CONTEXTS[platform] = BuildError(
                f"opencl target: device {device.name.strip()} "
                f"({device.platform.name.strip()}) cannot compile OpenCL C on this host: "
                f"{problem}")
            raise _CONTEXTS[platform]
        _CONTEXTS[platform] = (context, cl.CommandQueue(context))
        return _CONTEXTS[platform]


_PROBE = "__kernel void autotune_probe(__global float* a) { a[get_global_id(0)] *= 2.0f; }"


def _compile_probe(cl, context) -> str | None:
    """None when ``context``'s device compiles a trivial kernel, else the compiler's last
    words.  A device can be listed and still unable to compile: PoCL's bundled LLVM does not
    know CPUs newer than itself (on AMD Zen 5 it asks its own clang for target CPU
    'generic', which that clang refuses), and every build would fail the same way."""
    try:
        cl.Program(context, _PROBE).build()
    except cl.Error as err:
        lines = [line.strip() for line in str(err).splitlines() if "error" in line.lower()]
        return lines[-1] if lines else str(err).strip().splitlines()[-1]
    return None


class GPUKernel:
    """A PrimFunc built for OpenCL: ``kernel(*arrays)`` runs it on C-contiguous numpy arrays
    of the parameters' shapes and dtypes, writing outputs back in place.

    A function printed as several kernels (:class:`~tensor_ir.codegen.gpu_c.GPUModule`) runs
    them in order on the same device buffers; the buffers it allocates in global memory
    between kernels are allocated on the device for each call, not passed by the caller."""

    def __init__(self, source: GPUModule | GPUSource, func: PrimFunc | None, target: Target):
        import pyopencl as cl

        source = GPUModule.of(source)
        self.source = source
        self.func = func
        self.target = target
        self.params = source.params
        self.entry_name = source.name
        context, self._queue = _context(dict(target.options).get("platform"))
        self._context = context
        device = context.devices[0]
        if "cl_khr_fp16" in source.code and "cl_khr_fp16" not in device.extensions.split():
            raise BuildError(f"opencl target: kernel {source.name} computes in float16 but "
                             f"device {device.name.strip()} lacks the cl_khr_fp16 extension")
        try:
            program = cl.Program(context, source.code).build()
        except cl.Error as err:
            raise BuildError(f"opencl target: kernel {source.name} does not compile: "
                             f"{err}") from None
        # (kernel, global size, local size, buffer indices) per launch, in order.
        self._launches = []
        for k in source.kernels:
            indices = k.buffers or tuple(range(len(source.params)))
            global_size = tuple(g * b for g, b in zip(k.grid, k.block))
            self._launches.append((getattr(program, k.name), global_size, k.block, indices))

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.params)
        more = f", {len(self._launches)} kernels" if len(self._launches) > 1 else ""
        return f"GPUKernel({self.entry_name}({args}), opencl{more})"

    def get_source(self, fmt: str = "cl") -> str:
        """The OpenCL C text (``fmt`` "cl"; "opencl" is accepted too): every kernel."""
        if fmt not in ("cl", "opencl"):
            raise BuildError(f"kernel {self.entry_name}: get_source({fmt!r}); an OpenCL kernel "
                             "has source format 'cl'")
        return self.source.code

    def _check(self, arrays) -> None:
        check_arrays(self.entry_name, self.params, arrays)

    def _device_buffers(self, arrays, all_writable: bool) -> list:
        """Device buffers of the caller's arrays (copied in), then of the temporaries."""
        import pyopencl as cl

        flags = cl.mem_flags
        buffers = []
        for p, a in zip(self.params, arrays):
            # NOTE: every buffer starts from the host array, outputs too: a kernel may read
            # what it writes (a reduction accumulates into its output).
            mode = flags.READ_WRITE if p.written or all_writable else flags.READ_ONLY
            buffers.append(cl.Buffer(self._context, mode | flags.COPY_HOST_PTR, hostbuf=a))
        for t in self.source.temps:
            # Zeroed, so that a program reading a temporary before writing it reads the same
            # thing on every call.
            zeros = np.zeros(t.shape, t.dtype)
            buffers.append(cl.Buffer(self._context, flags.READ_WRITE | flags.COPY_HOST_PTR,
                                     hostbuf=zeros))
        return buffers

    def _launch(self, buffers) -> None:
        # An in-order queue: each kernel starts after the previous one has finished, which
        # is the barrier between stages.
        for kernel, global_size, local_size, indices in self._launches:
            kernel(self._queue, global_size, local_size, *[buffers[i] for i in indices])

    # -- the pieces a timing harness needs (the runner's worker times kernels this way) ------
    def device_buffers(self, arrays) -> list:
        """Device copies of ``arrays`` (every one writable, as a timing loop needs) and of
        the temporaries, for :meth:`launch` and :meth:`read`."""
        self._check(arrays)
        return self._device_buffers(arrays, all_writable=True)

    def launch(self, buffers) -> None:
        """Enqueue every kernel once on ``buffers`` (does not wait)."""
        self._launch(buffers)

    def finish(self) -> None:
        """Wait until everything enqueued has run."""
        self._queue.finish()

    def elapsed(self, buffers, number: int) -> float:
        """Seconds for ``number`` calls on ``buffers``, by the host's clock between two
        waits for the queue (the same interface as a CUDA kernel's event timing)."""
        import time

        self._queue.finish()
        start = time.perf_counter()
        for _ in range(number):
            self._launch(buffers)
        self._queue.finish()
        return time.perf_counter() - start

    def bind(self, buffers, temps: list | None = None) -> tuple[list, list]:
        """Launches of this function on fixed device ``buffers`` (one per parameter, in
        order), for a caller that enqueues them again and again (a model executor):
        ``(launches, temps)`` with ``launches`` a list of (kernel, global size, local size)
        for ``pyopencl.enqueue_nd_range_kernel``, arguments set once here, and ``temps`` the
        temporaries: those given (from an earlier ``bind`` whose launches never run at the
        same time as these), else allocated here, zeroed; keep them alive as long as the
        launches.  The kernel objects are new ones: the arguments set on a kernel object
        are state, so two callers sharing one would overwrite each other's."""
        import pyopencl as cl

        if len(buffers) != len(self.params):
            raise BuildError(f"kernel {self.entry_name} takes {len(self.params)} buffers, got "
                             f"{len(buffers)}")
        flags = cl.mem_flags
        if temps is None:
            temps = [cl.Buffer(self._context, flags.READ_WRITE | flags.COPY_HOST_PTR,
                               hostbuf=np.zeros(t.shape, t.dtype)) for t in self.source.temps]
        elif len(temps) != len(self.source.temps):
            raise BuildError(f"kernel {self.entry_name} has {len(self.source.temps)} "
                             f"temporaries, got {len(temps)} buffers for them")
        every = list(buffers) + temps
        launches = []
        for kernel, global_size, local_size, indices in self._launches:
            own = cl.Kernel(kernel.program, kernel.function_name)
            own.set_args(*[every[i] for i in indices])
            launches.append((own, global_size, local_size))
        return launches, temps

    def read(self, buffers, indices) -> list[np.ndarray]:
        """Host copies of the parameter buffers at ``indices``."""
        import pyopencl as cl

        out = []
        for i in indices:
            p = self.params[i]
            host = np.empty(tuple(p.shape), p.dtype)
            cl.enqueue_copy(self._queue, host, buffers[i])
            out.append(host)
        self._queue.finish()
        return out

    def __call__(self, *arrays) -> None:
        import pyopencl as cl

        self._check(arrays)
        buffers = self._device_buffers(arrays, all_writable=False)
        self._launch(buffers)
        for p, a, buf in zip(self.params, arrays, buffers):
            if p.written:
                cl.enqueue_copy(self._queue, a, buf)
        self._queue.finish()

    def time(self, *arrays, repeat: int = 5, min_repeat_ms: float = 20.0) -> list[float]:
        """Seconds per call of the kernels alone, one entry per repeat: the arrays are copied
        to the device once; a repeat launches every kernel ``number`` times between two waits
        for the queue, ``number`` grown until a repeat lasts ``min_repeat_ms``."""
        self._check(arrays)
        buffers = self._device_buffers(arrays, all_writable=True)

        def run(number: int) -> float:
            return self.elapsed(buffers, number)

        run(1)  # warm-up: the first launch pays for setting the kernel up
        number = 1
        while (elapsed := run(number)) < min_repeat_ms / 1000 and number < 1 << 20:
            number *= 2
        times = [elapsed / number]
        times += [run(number) / number for _ in range(repeat - 1)]
        return times


def gpu_program(func: PrimFunc, target: Target, name: str | None = None, *, dialect: str):
    """``(lowered function, GPUModule)`` of ``func`` for GPU ``target``, printed in
    ``dialect`` ("opencl" or "cuda", the backend's), checked by the verifier kernel by
    kernel: the target's limits (for CUDA with nvcc here,
    ptxas's register count too), and no global store that a launch axis leaves to several
    threads (an unbound loop every thread would repeat, a reduction bound to threads without
    the cross-thread lowering).  Needs no device."""
    lowered = lower_for_gpu(func)
    source = gpu_module(lowered, dialect, name=name,
                        max_threads_per_block=target.max_threads_per_block,
                        max_shared_memory_per_block=target.max_shared_memory_per_block)
    _, bodies = split_kernels(lowered.body)
    for kernel, body in zip(source.kernels, bodies):
        verify_gpu_kernel(kernel, target, func=body)
    return lowered, source
