"""Device probes: what pycuda and pyopencl say about the devices here, asked once per process.

No probe raises: without the library, a driver or a device the facts are empty, and
:func:`cuda_device` / :func:`opencl_device` say why in the words a backend reports.  The
runtimes (``autotune.runtime``) import pycuda / pyopencl to compile and launch, not to ask.
"""
from __future__ import annotations

from functools import lru_cache

__all__ = ["cuda_device", "cuda_device_facts", "cuda_version", "opencl_device",
           "opencl_device_facts"]


@lru_cache(maxsize=None)
def cuda_version() -> str | None:
    """The CUDA version pycuda was built against, e.g. "12.4" (no GPU needed), or None."""
    try:
        import pycuda.driver as drv

        return ".".join(str(v) for v in drv.get_version())
    except Exception:  # noqa: BLE001 - ImportError, or a broken CUDA install failing at import
        return None


@lru_cache(maxsize=None)
def cuda_device() -> tuple:
    """(device 0 after the driver's init, None), no context made (``CUDA_VISIBLE_DEVICES``
    picks another); (None, why not) without pycuda, a driver or a GPU."""
    try:
        import pycuda.driver as drv
    except Exception as err:  # noqa: BLE001 - not installed, or installed where libcuda is not
        return None, (f"cuda target: pycuda cannot be imported ({err}); install the extra with "
                      f"pip install 'autotune[cuda]' (it builds from source against the CUDA "
                      f"toolkit) on a machine with an NVIDIA driver")
    try:
        drv.init()
        if drv.Device.count() == 0:
            return None, "cuda target: the CUDA driver sees no GPU"
        return drv.Device(0), None
    except Exception as err:  # noqa: BLE001 - pycuda raises its own error types
        return None, f"cuda target: no usable GPU: {type(err).__name__}: {err}"


@lru_cache(maxsize=None)
def cuda_device_facts() -> dict:
    """Name, compute capability, driver and CUDA versions, memory, multiprocessors and the
    limits a cuda target reads of :func:`cuda_device`'s GPU; empty without one."""
    device, _ = cuda_device()
    if device is None:
        return {}
    import pycuda.driver as drv

    attr, get = drv.device_attribute, device.get_attribute
    try:
        major, minor = device.compute_capability()
        return {"name": device.name(), "compute_capability": f"{major}.{minor}",
                "arch": f"sm_{major}{minor}", "driver": drv.get_driver_version(),
                "cuda": cuda_version(), "memory_bytes": device.total_memory(),
                "multiprocessors": get(attr.MULTIPROCESSOR_COUNT),
                "max_threads_per_block": get(attr.MAX_THREADS_PER_BLOCK),
                "max_shared_memory_per_block": get(attr.MAX_SHARED_MEMORY_PER_BLOCK),
                "registers_per_block": get(attr.MAX_REGISTERS_PER_BLOCK),
                "warp_size": get(attr.WARP_SIZE)}
    except Exception:  # noqa: BLE001 - a device that stops answering: no facts
        return {}


@lru_cache(maxsize=None)
def _opencl_devices() -> tuple:
    """((platform, device) for every OpenCL device here, None), or ((), why none)."""
    try:
        import pyopencl as cl
    except Exception:  # noqa: BLE001 - ImportError, or a broken install failing at import
        return (), ("opencl target: pyopencl is not installed (pip install 'autotune[opencl]', "
                    "which brings PoCL, a CPU OpenCL runtime)")
    try:
        return tuple((p, d) for p in cl.get_platforms() for d in p.get_devices()), None
    except Exception as err:  # noqa: BLE001 - no ICD, a broken driver
        return (), f"opencl target: no OpenCL platform: {err}"


def opencl_device(platform: str | None = None) -> tuple:
    """(device, None) for ``-platform``: the first OpenCL device whose platform name, vendor
    or device name contains ``platform`` (case-insensitive); with None, the first device of
    the best kind: a GPU, then an accelerator, then a CPU, then a simulator.  Oclgrind (a
    simulator that reports itself as every kind) is only taken when named, so installing it
    for race checks never makes it the device that is timed.  (None, why not) when pyopencl,
    a platform or a matching device is missing; the reason lists the devices seen."""
    devices, problem = _opencl_devices()
    if problem is not None:
        return None, problem
    import pyopencl as cl  # importable: it listed the devices

    found = []
    for plat, device in devices:
        names = f"{plat.name} {plat.vendor} {device.name}".lower()
        if platform is not None:
            if platform.lower() in names:
                return device, None
            continue
        rank = (3 if "oclgrind" in names else 0 if device.type & cl.device_type.GPU
                else 1 if device.type & cl.device_type.ACCELERATOR else 2)
        found.append((rank, len(found), device))
    if found:
        return min(found, key=lambda item: item[:2])[2], None
    which = "no OpenCL device" if platform is None else f"no device matches -platform={platform}"
    seen = ", ".join(f"{p.name}: {d.name.strip()}" for p, d in devices)
    return None, f"opencl target: {which}; devices: " + (seen or "none")


@lru_cache(maxsize=None)
def opencl_device_facts(platform: str | None = None) -> dict:
    """Name, max work-group size and local memory size of the device :func:`opencl_device`
    picks; empty when there is none."""
    device, _ = opencl_device(platform)
    try:
        return {} if device is None else {
            "name": device.name.strip(), "max_work_group_size": int(device.max_work_group_size),
            "local_mem_size": int(device.local_mem_size)}
    except Exception:  # noqa: BLE001 - a broken driver: the target's defaults apply
        return {}
