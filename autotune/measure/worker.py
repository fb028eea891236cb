"""Persistent worker processes that may die: the isolation under LocalBuilder and LocalRunner.

A ``WorkerProcess`` is a child Python interpreter (``python -m autotune.measure._worker_main``; it
shares no threads, locks or JIT state with the tuner, and unlike multiprocessing's "spawn" it
does not re-import the tuner's main script, so a plain script or notebook needs no
``if __name__ == "__main__"`` guard).  It serves requests one at a time over a socket pair,
pickled by ``multiprocessing.connection``.  The parent sends a request and waits with a
deadline.  Three things can come back:

    ("ok", reply)       the handler returned ``reply``;
    ("timeout", msg)    no reply in time: the child is killed (SIGKILL) and restarted lazily;
    ("crash", msg)      the child died (segfault, abort, os._exit): msg names the signal.

A Python exception inside the handler is not a crash: it becomes the reply
``{"exception": ..., "traceback": ...}``.  The child exits when the parent goes away, even in
the middle of a kernel that never returns (parent-death signal on Linux, and a watchdog
thread elsewhere).
"""
from __future__ import annotations

import importlib
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

__all__ = ["WorkerProcess", "describe_exit", "wait_any"]

# The directory holding the autotune package, put on the child's import path so that it
# imports the same code as the parent wherever the parent was started from.
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def describe_exit(exitcode: int | None) -> str:
    """'killed by signal SIGSEGV (segmentation fault)' and the like."""
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
            desc = signal.strsignal(sig) or ""
            return f"killed by signal {sig.name}" + (f" ({desc.lower()})" if desc else "")
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def _die_with_parent() -> None:
    """Make sure the child does not outlive the tuner, even while stuck in a kernel."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def watch():
        # Kernels are called through ctypes, which releases the GIL, so this thread runs
        # even while a kernel loops forever.
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(fd: int, handler_path: str) -> None:
    """The child's main loop: import the handler once, then answer requests until EOF."""
    # Ctrl-C in a terminal reaches the whole process group; the tuner decides what happens,
    # the worker must not die of it mid-measurement and be taken for a crashed kernel.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    conn = multiprocessing.connection.Connection(fd)
    module_name, _, attr = handler_path.partition(":")
    handler = getattr(importlib.import_module(module_name), attr)
    state: dict = {}
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            reply = handler(request, state)
        except BaseException as err:  # noqa: BLE001 - every failure must become a reply
            reply = {"exception": f"{type(err).__name__}: {err}",
                     "traceback": traceback.format_exc(limit=6)}
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class WorkerProcess:
    """One persistent child process running ``handler(request, state)`` for each request.

    ``handler_path`` is "module:function"; the function takes the request and a dict that
    lives as long as the child (for caches such as inputs and reference outputs).
    """

    def __init__(self, handler_path: str, name: str = "autotune-worker"):
        self.handler_path = handler_path
        self.name = name
        self._process = None
        self._conn = None
        self.restarts = 0  # how many times a dead or hung child was replaced
        self.generation = 0  # bumped on every start, so callers can tell when state was lost

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.alive:
            return
        if self._process is not None:
            self._reap()
            self.restarts += 1
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_PROJECT_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "autotune.measure._worker_main", str(child_sock.fileno()),
                 self.handler_path],
                pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, env=env)
        finally:
            # The parent must drop its copy of the child's end, or a dead child would never
            # show as end-of-file on the parent's side.
            child_sock.close()
        self._process = process
        self._conn = multiprocessing.connection.Connection(parent_sock.detach())
        self.generation += 1

    def kill(self) -> None:
        """Kill the child now (it is restarted by the next request)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        self._reap()

    def close(self) -> None:
        """Ask the child to exit, then make sure it has."""
        if self._process is None:
            return
        if self._process.poll() is None and self._conn is not None:
            try:
                self._conn.send(None)
                self._process.wait(timeout=2.0)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self._process = None

    def _reap(self) -> None:
        if self._process is not None:
            try:
                self._process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- requests --------------------------------------------------------------------------------
    def send(self, request: Any) -> None:
        """Send a request (starting the child if needed); collect the reply with ``receive``."""
        self.start()
        self._conn.send(request)

    @property
    def connection(self):
        """The parent's end of the pipe, for ``multiprocessing.connection.wait``."""
        return self._conn

    def receive(self, timeout: float) -> tuple[str, Any]:
        """Wait up to ``timeout`` seconds for the reply to the last request."""
        try:
            ready = self._conn.poll(max(0.0, timeout))
        except (EOFError, OSError):
            ready = True
        if not ready:
            self.kill()
            return "timeout", f"no answer within {timeout:.3g} s; worker killed"
        try:
            return "ok", self._conn.recv()
        except (EOFError, OSError):
            return "crash", self._death_note()

    def call(self, request: Any, timeout: float) -> tuple[str, Any]:
        try:
            self.send(request)
        except (BrokenPipeError, OSError):
            # The child died between requests (e.g. killed from outside): start a new one.
            self.kill()
            self.send(request)
        return self.receive(timeout)

    def _death_note(self) -> str:
        process = self._process
        code = None
        if process is not None:
            try:
                code = process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                code = None
        note = describe_exit(code)
        self.kill()
        return f"worker process {note}"


def wait_any(workers: list[WorkerProcess], timeout: float) -> list[WorkerProcess]:
    """Workers among ``workers`` whose reply (or end-of-file) is ready within ``timeout``."""
    by_conn = {id(w.connection): w for w in workers if w.connection is not None}
    ready = multiprocessing.connection.wait([w.connection for w in workers
                                             if w.connection is not None],
                                            timeout=max(0.0, timeout))
    return [by_conn[id(c)] for c in ready]
