"""LocalBuilder: compiles batches of candidates in a pool of persistent worker processes.

Each worker lowers a candidate, generates LLVM code and compiles it to an object file in the
builder's work directory (``autotune.build`` + ``export_library``).  Workers run one candidate
at a time under a per-candidate deadline: a build that hangs (LLVM on a pathological unrolled
loop) is killed with its worker, and one that crashes the compiler costs only its worker; both
come back as a BuildResult error while the rest of the batch carries on.  Workers persist
across batches, so LLVM and the IR modules are imported once per worker, not per candidate.

The default work directory is a temporary folder ``autotune-build-<pid>-*`` holding an
``owner.json`` file (the owning process's id and host).  ``close`` removes it, but a tuner killed
with SIGKILL, or aborted by LLVM, cannot; so every LocalBuilder first removes the folders left
by such processes (:func:`clean_stale_build_dirs`): only those whose owner is on this host and
no longer alive, never one of a live process such as another tuner running beside it.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Sequence

from search.measure import Builder, BuildResult, MeasureInput
from tensor_ir import intrinsics
from tensor_ir.target import Target

from ..backends import backend_for
from .worker import WorkerProcess, wait_any

__all__ = ["LocalBuilder", "clean_stale_build_dirs"]

BUILD_DIR_PREFIX = "autotune-build-"
OWNER_FILE = "owner.json"


def make_build_dir() -> str:
    """A new temporary work directory, marked with the process that owns it."""
    path = tempfile.mkdtemp(prefix=f"{BUILD_DIR_PREFIX}{os.getpid()}-")
    owner = {"pid": os.getpid(), "host": socket.gethostname()}
    # Written under a temporary name and renamed: a cleaner never reads half a file, and a
    # folder without the file is left alone (see clean_stale_build_dirs).
    part = os.path.join(path, OWNER_FILE + ".part")
    with open(part, "w", encoding="utf-8") as f:
        json.dump(owner, f)
    os.replace(part, os.path.join(path, OWNER_FILE))
    return path


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    except OSError:
        return True  # cannot tell: keep the folder
    return True


# How old a half-written owner file must be before its folder counts as abandoned.
ABANDONED_SECONDS = 600.0


def _abandoned(path: str) -> bool:
    """A folder whose only entry is an old ``owner.json.part`` (see clean_stale_build_dirs)."""
    if os.listdir(path) != [OWNER_FILE + ".part"]:
        return False
    age = time.time() - os.path.getmtime(os.path.join(path, OWNER_FILE + ".part"))
    return age > ABANDONED_SECONDS


def clean_stale_build_dirs(root: str | None = None) -> list[str]:
    """Remove the ``autotune-build-*`` folders under ``root`` (default: the temporary
    directory) whose owning process has died without removing them; returns their paths.

    A folder is removed only when its ``owner.json`` names this host and a process id that
    no longer exists, or when it holds nothing but an owner file left half-written
    (``owner.json.part``) for over ABANDONED_SECONDS: writing it takes microseconds, so its
    writer was killed in between (a Ray task cancelled at that moment).  Other folders
    without a readable owner file (being created right now, or left by an older version) and
    those of other hosts (a temporary directory shared between containers, whose process ids
    are not ours to check) are kept.
    """
    if os.name != "posix":
        return []  # os.kill(pid, 0) is a liveness check on POSIX only
    root = tempfile.gettempdir() if root is None else root
    try:
        names = [n for n in os.listdir(root) if n.startswith(BUILD_DIR_PREFIX)]
    except OSError:
        return []
    host = socket.gethostname()
    removed = []
    for name in names:
        path = os.path.join(root, name)
        try:
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            if _abandoned(path):
                shutil.rmtree(path, ignore_errors=True)
                if not os.path.exists(path):
                    removed.append(path)
                continue
            with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as f:
                owner = json.load(f)
            pid = owner["pid"]
            if owner.get("host") != host or not isinstance(pid, int) or pid <= 0:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid == os.getpid() or _process_alive(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed


class LocalBuilder(Builder):
    """Builds candidates in ``max_workers`` processes (default: the cores this process may
    use), each candidate within ``timeout`` seconds.  Artifacts are object files under
    ``work_dir`` (default: a temporary directory removed by ``close``).  Starting a builder
    first removes the temporary directories of builders whose process died (see the module
    text)."""

    def __init__(self, max_workers: int | None = None, timeout: float = 30.0,
                 work_dir: str | None = None):
        if max_workers is None:
            max_workers = Target.current_host().num_cores
        if not (isinstance(max_workers, int) and max_workers >= 1):
            raise ValueError(f"LocalBuilder: max_workers must be an int >= 1, got "
                             f"{max_workers!r}")
        if not timeout > 0:
            raise ValueError(f"LocalBuilder: timeout must be > 0 seconds, got {timeout!r}")
        self.max_workers = max_workers
        self.timeout = float(timeout)
        clean_stale_build_dirs()
        self._own_dir = work_dir is None
        self.work_dir = make_build_dir() if work_dir is None else work_dir
        os.makedirs(self.work_dir, exist_ok=True)
        self._workers = [WorkerProcess(f"{__name__}:handle_build_request", f"autotune-build-{i}")
                         for i in range(max_workers)]
        self._counter = 0
        self._closed = False

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        if self._closed:
            raise RuntimeError("LocalBuilder.build called after close()")
        # Requests first: a candidate whose intrinsic cannot be sent to the workers stops the
        # batch here with its IntrinsicError, before any worker is busy.
        requests = [self._request(inp) for inp in inputs]
        results: list[BuildResult | None] = [None] * len(inputs)
        pending = list(range(len(inputs)))
        pending.reverse()  # pop() from the end hands candidates out in input order
        busy: dict[int, tuple[int, float, float]] = {}  # worker index -> (input, start, end)
        idle = list(range(len(self._workers)))
        while pending or busy:
            # 1. Hand candidates to idle workers.
            while pending and idle:
                w = idle.pop()
                i = pending.pop()
                request = requests[i]
                start = time.perf_counter()
                try:
                    self._workers[w].send(request)
                except (BrokenPipeError, OSError):
                    self._workers[w].kill()
                    self._workers[w].send(request)
                busy[w] = (i, start, time.monotonic() + self.timeout)
            # 2. Wait for the first reply or the nearest deadline.
            nearest = min(end for _, _, end in busy.values())
            ready = wait_any([self._workers[w] for w in busy], nearest - time.monotonic())
            ready_ids = {id(r) for r in ready}
            now = time.monotonic()
            for w in list(busy):
                worker = self._workers[w]
                i, start, end = busy[w]
                if id(worker) in ready_ids:
                    status, reply = worker.receive(0.0)
                elif now >= end:
                    worker.kill()
                    status, reply = "timeout", None
                else:
                    continue
                del busy[w]
                idle.append(w)
                results[i] = self._result(status, reply, time.perf_counter() - start)
        return results

    def _request(self, inp: MeasureInput) -> dict:
        self._counter += 1
        backend = backend_for(inp.target)
        path = os.path.join(self.work_dir, f"cand{self._counter:07d}{backend.artifact_suffix}")
        request = {"input": inp.to_json(reference=False), "path": path}
        backend.build_request(inp, request)
        return request

    def _result(self, status: str, reply, seconds: float) -> BuildResult:
        if status == "timeout":
            return BuildResult(None, f"build timed out after {self.timeout:g} s (lowering, "
                                     "codegen and LLVM compilation)", seconds)
        if status == "crash":
            return BuildResult(None, f"the compiler crashed: {reply}", seconds)
        if "exception" in reply:
            return BuildResult(None, f"build worker failed: {reply['exception']}", seconds)
        if reply.get("error"):
            return BuildResult(None, reply["error"], reply.get("seconds", seconds))
        return BuildResult(reply["path"], None, reply.get("seconds", seconds))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            worker.close()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __del__(self):
        # Interpreter shutdown may have torn modules down already; nothing is left to do then.
        with contextlib.suppress(Exception):
            self.close()


def handle_build_request(request: dict, state: dict) -> dict:
    """Worker side: build one candidate's artifact with its target's backend (a CPU
    object file, not loaded here: the runner loads it, so the build skips the JIT; a GPU
    candidate's verified OpenCL C or CUDA C, with its cubin: nvcc runs here, in the
    builder's pool)."""
    from tensor_ir.errors import TensorIRError

    start = time.perf_counter()
    try:
        # Intrinsics registered at run time in the tuner's process: before the function that
        # names them is read.
        for spec in request.get("intrinsics", ()):
            intrinsics.install(spec)
        inp = MeasureInput.from_json(request["input"])
        backend_for(inp.target).build_artifact(inp, request["path"])
    except TensorIRError as err:
        return {"error": f"{type(err).__name__}: {err}", "seconds": time.perf_counter() - start}
    except Exception as err:  # noqa: BLE001 - a bug in a lower layer is still a build error
        return {"error": f"{type(err).__name__} while building: {err}",
                "seconds": time.perf_counter() - start}
    return {"path": request["path"], "seconds": time.perf_counter() - start}
