"""OpenCL kernels: build a PrimFunc into OpenCL C and run it through pyopencl on numpy arrays.

    kernel = autotune.build(func, target="opencl")           # or "opencl -platform=pocl"
    kernel(a, b, c)               # copied to the device, outputs copied back in place
    print(kernel.get_source())    # the OpenCL C text

pyopencl is imported only inside the functions here, so importing ``autotune`` needs no
OpenCL runtime; building without one raises BuildError saying what to install.
"""
from __future__ import annotations

import threading

import numpy as np

from tensor_ir.codegen.gpu_c import GPUSource, gpu_source
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.lower import lower
from tensor_ir.target import Target, TargetError

__all__ = ["GPUKernel", "build_gpu", "opencl_available"]

_CONTEXTS: dict[str | None, tuple] = {}
_CONTEXT_LOCK = threading.Lock()


def opencl_available(platform: str | None = None) -> bool:
    """Whether pyopencl imports and a device matching ``platform`` exists."""
    try:
        _context(platform)
    except BuildError:
        return False
    return True


def _context(platform: str | None) -> tuple:
    """(context, queue) of the first device whose platform or device name contains
    ``platform``; one per process and platform string."""
    with _CONTEXT_LOCK:
        if platform in _CONTEXTS:
            return _CONTEXTS[platform]
        try:
            import pyopencl as cl
        except ImportError:
            raise BuildError("opencl target: pyopencl is not installed (pip install "
                             "'autotune[opencl]', which brings PoCL, a CPU OpenCL runtime)"
                             ) from None
        try:
            platforms = cl.get_platforms()
        except cl.Error as err:
            raise BuildError(f"opencl target: no OpenCL platform: {err}") from None
        seen = []
        for plat in platforms:
            for device in plat.get_devices():
                names = f"{plat.name} {device.name}"
                seen.append(names.strip())
                if platform is None or platform.lower() in names.lower():
                    context = cl.Context([device])
                    _CONTEXTS[platform] = (context, cl.CommandQueue(context))
                    return _CONTEXTS[platform]
        raise BuildError(f"opencl target: no device matches -platform={platform}; devices: "
                         + (", ".join(seen) or "none"))


class GPUKernel:
    """A PrimFunc built for OpenCL: ``kernel(*arrays)`` runs it on C-contiguous numpy arrays
    of the parameters' shapes and dtypes, writing outputs back in place."""

    def __init__(self, source: GPUSource, func: PrimFunc, target: Target):
        import pyopencl as cl

        self.source = source
        self.func = func
        self.target = target
        self.params = source.params
        self.entry_name = source.name
        context, self._queue = _context(dict(target.options).get("platform"))
        self._context = context
        try:
            program = cl.Program(context, source.code).build()
        except cl.Error as err:
            raise BuildError(f"opencl target: kernel {source.name} does not compile: "
                             f"{err}") from None
        self._kernel = getattr(program, source.name)
        self._global_size = tuple(g * b for g, b in zip(source.grid, source.block))

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.params)
        return f"GPUKernel({self.entry_name}({args}), opencl)"

    def get_source(self, fmt: str = "cl") -> str:
        """The OpenCL C text (``fmt`` "cl"; "opencl" is accepted too)."""
        if fmt not in ("cl", "opencl"):
            raise BuildError(f"kernel {self.entry_name}: get_source({fmt!r}); an OpenCL kernel "
                             "has source format 'cl'")
        return self.source.code

    def _check(self, arrays) -> None:
        if len(arrays) != len(self.params):
            raise BuildError(f"kernel {self.entry_name} takes {len(self.params)} arrays, got "
                             f"{len(arrays)}")
        for p, a in zip(self.params, arrays):
            if not isinstance(a, np.ndarray):
                raise BuildError(f"kernel {self.entry_name}: argument {p.name} must be a numpy "
                                 f"array, got {type(a).__name__}")
            if a.shape != tuple(p.shape) or a.dtype != np.dtype(p.dtype):
                raise BuildError(f"kernel {self.entry_name}: argument {p.name} must be "
                                 f"{p.dtype}{list(p.shape)}, got {a.dtype}{list(a.shape)}")
            if not a.flags.c_contiguous:
                raise BuildError(f"kernel {self.entry_name}: argument {p.name} must be "
                                 "C-contiguous")
            if p.written and not a.flags.writeable:
                raise BuildError(f"kernel {self.entry_name}: argument {p.name} is written but "
                                 "the array is read-only")

    def __call__(self, *arrays) -> None:
        import pyopencl as cl

        self._check(arrays)
        flags = cl.mem_flags
        buffers = []
        for p, a in zip(self.params, arrays):
            # NOTE: every buffer starts from the host array, outputs too: a kernel may read
            # what it writes (a reduction accumulates into its output).
            mode = flags.READ_WRITE if p.written else flags.READ_ONLY
            buffers.append(cl.Buffer(self._context, mode | flags.COPY_HOST_PTR, hostbuf=a))
        self._kernel(self._queue, self._global_size, self.source.block, *buffers)
        for p, a, buf in zip(self.params, arrays, buffers):
            if p.written:
                cl.enqueue_copy(self._queue, a, buf)
        self._queue.finish()


    def time(self, *arrays, repeat: int = 5, min_repeat_ms: float = 20.0) -> list[float]:
        """Seconds per call of the kernel alone, one entry per repeat: the arrays are copied
        to the device once; a repeat launches the kernel ``number`` times between two waits
        for the queue, ``number`` grown until a repeat lasts ``min_repeat_ms``."""
        import time

        import pyopencl as cl

        self._check(arrays)
        flags = cl.mem_flags
        buffers = [cl.Buffer(self._context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=a)
                   for a in arrays]

        def run(number: int) -> float:
            self._queue.finish()
            start = time.perf_counter()
            for _ in range(number):
                self._kernel(self._queue, self._global_size, self.source.block, *buffers)
            self._queue.finish()
            return time.perf_counter() - start

        run(1)  # warm-up: the first launch pays for setting the kernel up
        number = 1
        while (elapsed := run(number)) < min_repeat_ms / 1000 and number < 1 << 20:
            number *= 2
        times = [elapsed / number]
        times += [run(number) / number for _ in range(repeat - 1)]
        return times


def build_gpu(func: PrimFunc, target: str | Target = "opencl",
              name: str | None = None) -> GPUKernel:
    """Lower ``func`` (if needed), print it as OpenCL C and compile it for ``target``'s
    device.  Raises TargetError for a non-OpenCL target and BuildError for a program a kernel
    cannot be (see :func:`tensor_ir.codegen.gpu_c.gpu_source`) or a missing runtime."""
    t = Target(target)
    if t.kind != "opencl":
        raise TargetError(f"build_gpu runs OpenCL targets; {str(t)!r} is a {t.kind} target")
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build_gpu takes a PrimFunc, got {type(func).__name__}")
    lowered = lower(func)
    source = gpu_source(lowered, "opencl", name=name,
                        max_threads_per_block=t.max_threads_per_block,
                        max_shared_memory_per_block=t.max_shared_memory_per_block)
    _context(dict(t.options).get("platform"))  # a clear BuildError before pyopencl is imported
    return GPUKernel(source, lowered, t)
