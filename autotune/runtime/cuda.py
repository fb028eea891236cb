"""CUDA kernels: a PrimFunc printed as CUDA C, compiled by nvcc to a cubin and run through
pycuda on numpy arrays.

    kernel = autotune.build(func, target="cuda -arch=sm_90")
    kernel(a, b, c)                    # copied to the GPU, outputs copied back in place
    print(kernel.get_source("cuda"))   # the CUDA C text
    kernel.time(a, b, c)               # seconds per call, timed with CUDA events

pycuda is an optional extra (``pip install 'autotune[cuda]'``) and is imported only inside
the functions here: importing ``autotune`` needs no CUDA, and building for a cuda target
without pycuda or without a GPU raises BuildError saying which.  The compile itself is nvcc's
(:func:`tensor_ir.codegen.gpu_verify.compile_cubin`, cached in memory and on disk) and needs
no GPU: the builder pool compiles there, the runner's worker only loads the cubin.

One primary context per process, on device 0 (``CUDA_VISIBLE_DEVICES`` picks another), made
current on each thread that uses it.
"""
from __future__ import annotations

import threading

import numpy as np

from tensor_ir.codegen.gpu_c import GPUModule, GPUSource
from tensor_ir.codegen.gpu_verify import compile_cubin
from tensor_ir.devices import cuda_device, cuda_device_facts
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from .kernel_args import check_arrays

__all__ = ["CUDAKernel", "cuda_available", "cuda_device_facts", "cuda_problem", "cuda_target",
           "driver_and_device"]

_LOCK = threading.Lock()
_STATE: dict = {}  # "driver", "context", "device", or "error": the BuildError of a failed init
_THREAD = threading.local()


def _driver():
    """pycuda.driver with a current context on device 0, initialised once per process."""
    with _LOCK:
        if "error" in _STATE:
            raise _STATE["error"]
        if "context" in _STATE:
            # A context is current per thread: a thread other than the first pushes the
            # same primary context once, so kernels built anywhere in the process run there.
            if not getattr(_THREAD, "pushed", False):
                _STATE["context"].push()
                _THREAD.pushed = True
            return _STATE["driver"]
        device, problem = cuda_device()
        if device is None:
            _STATE["error"] = BuildError(problem)
            raise _STATE["error"]
        import pycuda.driver as drv

        try:
            context = device.retain_primary_context()
            context.push()
        except Exception as err:  # noqa: BLE001 - pycuda raises its own error types
            _STATE["error"] = BuildError(f"cuda target: no usable GPU: {type(err).__name__}: "
                                         f"{err}")
            raise _STATE["error"] from None
        import atexit

        def release() -> None:
            try:
                context.pop()
            except Exception:  # noqa: BLE001 - at exit, a context already gone is fine
                pass

        atexit.register(release)
        _STATE.update(driver=drv, context=context, device=device)
        _THREAD.pushed = True
        return drv


def driver_and_device():
    """(pycuda.driver, the Device) with the context current on this thread (BuildError
    without a GPU); for the model executor's device calls."""
    drv = _driver()
    return drv, _STATE["device"]


def cuda_problem() -> str | None:
    """Why no CUDA kernel can run here (no pycuda, no driver, no GPU), or None."""
    try:
        _driver()
    except BuildError as err:
        return str(err)
    return None


def cuda_available() -> bool:
    """Whether pycuda imports and the driver sees a GPU."""
    return cuda_problem() is None


def cuda_target() -> Target:
    """``cuda -arch=sm_XY`` for the GPU here (BuildError without one)."""
    facts = cuda_device_facts() if cuda_problem() is None else {}
    if not facts:
        raise BuildError(f"cuda target: {cuda_problem()}")
    return Target(f"cuda -arch={facts['arch']}")


class CUDAKernel:
    """A PrimFunc built for a cuda target: ``kernel(*arrays)`` runs it on C-contiguous numpy
    arrays of the parameters' shapes and dtypes, writing outputs back in place.

    A function printed as several kernels runs them in order on the default stream, on the
    same device buffers, with the temporaries between them allocated on the device.  The
    timing interface (``device_buffers``, ``launch``, ``finish``, ``read``, ``elapsed``) is
    :class:`autotune.runtime.opencl.GPUKernel`'s, so the runner's worker times both alike."""

    def __init__(self, source: GPUModule | GPUSource, func: PrimFunc | None, target: Target,
                 cubin: bytes | None = None):
        source = GPUModule.of(source)
        if source.dialect != "cuda":
            raise BuildError(f"cuda target: kernel {source.name} is {source.dialect} C, not "
                             "CUDA C")
        self.source = source
        self.func = func
        self.target = target
        self.params = source.params
        self.entry_name = source.name
        drv = _driver()
        self._drv = drv
        if cubin is None:
            cubin = compile_cubin(source.code, target.arch)[0]
        try:
            self._module = drv.module_from_buffer(cubin)
        except drv.Error as err:
            facts = cuda_device_facts()
            raise BuildError(f"cuda target: kernel {source.name} built for {target.arch} does "
                             f"not load on {facts.get('name')} ({facts.get('arch')}): "
                             f"{err}") from None
        # (function, grid, block, buffer indices) per launch, in order; each function
        # prepared once ("P" per pointer), so a launch is one driver call with no argument
        # inspection.
        self._launches = []
        for k in source.kernels:
            indices = k.buffers or tuple(range(len(source.params)))
            function = self._module.get_function(k.name)
            function.prepare("P" * len(indices))
            grid = tuple(k.grid) + (1,) * (3 - len(k.grid))
            block = tuple(int(b) for b in k.block) + (1,) * (3 - len(k.block))
            self._launches.append((function, grid, block, indices))

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.params)
        more = f", {len(self._launches)} kernels" if len(self._launches) > 1 else ""
        return f"CUDAKernel({self.entry_name}({args}), {self.target}{more})"

    def get_source(self, fmt: str = "cuda") -> str:
        """The CUDA C text (``fmt`` "cuda" or "cu"): every kernel."""
        if fmt not in ("cuda", "cu"):
            raise BuildError(f"kernel {self.entry_name}: get_source({fmt!r}); a CUDA kernel "
                             "has source format 'cuda'")
        return self.source.code

    # -- device memory ---------------------------------------------------------------------
    def _alloc(self, nbytes: int):
        # cuMemAlloc refuses zero bytes; a zero-sized buffer is never read.
        return self._drv.mem_alloc(max(int(nbytes), 1))

    def device_buffers(self, arrays) -> list:
        """Device copies of ``arrays`` (checked against the parameters) and zeroed
        temporaries, for :meth:`launch` and :meth:`read`."""
        check_arrays(self.entry_name, self.params, arrays)
        buffers = []
        for a in arrays:
            buf = self._alloc(a.nbytes)
            if a.nbytes:
                self._drv.memcpy_htod(buf, a)
            buffers.append(buf)
        for t in self.source.temps:
            nbytes = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
            buf = self._alloc(nbytes)
            # Zeroed, so that a program reading a temporary before writing it reads the same
            # thing on every call (as on OpenCL).
            self._drv.memset_d8(buf, 0, max(nbytes, 1))
            buffers.append(buf)
        return buffers

    def launch(self, buffers) -> None:
        """Enqueue every kernel once on ``buffers`` (does not wait).  Launches on the default
        stream run in order: each kernel starts after the previous one has finished."""
        for function, grid, block, indices in self._launches:
            function.prepared_async_call(grid, block, None, *[buffers[i] for i in indices])

    def finish(self) -> None:
        """Wait until everything enqueued has run; a fault in a kernel surfaces here as the
        driver's error (the context is unusable after it: the runner's worker exits)."""
        self._drv.Context.synchronize()

    def elapsed(self, buffers, number: int) -> float:
        """Seconds for ``number`` back-to-back calls on ``buffers``, between two CUDA events
        (the host's launch overhead overlaps the kernels, as in a model that enqueues them)."""
        start, end = self._drv.Event(), self._drv.Event()
        start.record()
        for _ in range(number):
            self.launch(buffers)
        end.record()
        end.synchronize()
        return start.time_till(end) / 1e3

    def bind(self, buffers, temps: list | None = None) -> tuple[list, list]:
        """Launches of this function on fixed device ``buffers`` (one per parameter, in
        order), for a caller that enqueues them again and again (a model executor):
        ``(launches, temps)`` with ``launches`` a list of (function, grid, block, arguments)
        for ``function.prepared_async_call(grid, block, None, *arguments)``, and ``temps`` the
        temporaries: those given (from an earlier ``bind`` whose launches never run at the
        same time as these), else allocated here, zeroed; keep them alive as long as the
        launches."""
        if len(buffers) != len(self.params):
            raise BuildError(f"kernel {self.entry_name} takes {len(self.params)} buffers, got "
                             f"{len(buffers)}")
        if temps is None:
            temps = []
            for t in self.source.temps:
                nbytes = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
                buf = self._alloc(nbytes)
                self._drv.memset_d8(buf, 0, max(nbytes, 1))
                temps.append(buf)
        elif len(temps) != len(self.source.temps):
            raise BuildError(f"kernel {self.entry_name} has {len(self.source.temps)} "
                             f"temporaries, got {len(temps)} buffers for them")
        every = list(buffers) + list(temps)
        launches = [(function, grid, block, tuple(every[i] for i in indices))
                    for function, grid, block, indices in self._launches]
        return launches, temps

    def read(self, buffers, indices) -> list[np.ndarray]:
        """Host copies of the parameter buffers at ``indices``."""
        self.finish()
        out = []
        for i in indices:
            p = self.params[i]
            host = np.empty(tuple(p.shape), p.dtype)
            if host.nbytes:
                self._drv.memcpy_dtoh(host, buffers[i])
            out.append(host)
        return out

    def __call__(self, *arrays) -> None:
        buffers = self.device_buffers(arrays)  # checks the arrays, writability included
        self.launch(buffers)
        written = [i for i, p in enumerate(self.params) if p.written]
        for i, host in zip(written, self.read(buffers, written)):
            arrays[i][...] = host
        for buf in buffers:
            buf.free()

    def time(self, *arrays, repeat: int = 5, min_repeat_ms: float = 20.0) -> list[float]:
        """Seconds per call of the kernels alone, one entry per repeat, timed with CUDA
        events: the arrays are copied to the device once; a repeat launches every kernel
        ``number`` times, ``number`` grown until a repeat lasts ``min_repeat_ms``."""
        buffers = self.device_buffers(arrays)
        try:
            self.elapsed(buffers, 1)  # warm-up: the first launch loads the module's code
            number = 1
            while (seconds := self.elapsed(buffers, number)) < min_repeat_ms / 1e3 \
                    and number < 1 << 20:
                number *= 2
            times = [seconds / number]
            times += [self.elapsed(buffers, number) / number for _ in range(repeat - 1)]
        finally:
            for buf in buffers:
                buf.free()
        return times
