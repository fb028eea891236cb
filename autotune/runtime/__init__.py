"""autotune.runtime: what runs a program once it is scheduled.

Compiling a function into a callable kernel (``build``: LLVM for CPUs, ``opencl`` and ``cuda``
for GPUs, with the weight-packing split of ``prepack``), the model executors that run a
built model's kernels in order (``executor``, ``gpu_executor``), and the exported artifact
with its numpy-and-ctypes loader (``export``, ``deploy_loader``).
"""
