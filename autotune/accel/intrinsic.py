"""The accelerator's GEMM intrinsic: its tile description and its functional model, a C
function compiled from ``model.c`` on first use.

    from autotune.accel import GEMM_INTRIN, functional_model
    path = functional_model()          # compiles model.c once into the cache folder
    sch.tensorize(loop, GEMM_INTRIN)   # a 16x16x16 int8 -> int32 tile becomes one call

The cache folder is ``~/.cache/autotune/accel`` unless a call names its own (``cache_dir=``)
or :func:`set_cache_dir` moved the process's default (a test suite, a sandbox without a
writable home folder).

The intrinsic is registered when this module is imported, naming the library where the model
will be (the cache folder); nothing is compiled until :func:`functional_model` is called, as a
user builds a vendor's simulator once before using it.  Every entry point of
``autotune.accel`` that runs a program calls it (the runner, :func:`autotune.accel.build`).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import threading

from tensor_ir import intrinsics, te
from tensor_ir.codegen.link import compile_c_shared
from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc

from .hardware import AcceleratorError

__all__ = ["GEMM_INTRIN", "GEMM_SYMBOL", "MODEL_SOURCE", "default_cache_dir", "functional_model",
           "gemm_description", "get_cache_dir", "library_path", "set_cache_dir"]

GEMM_INTRIN = "simaccel_gemm_16x16x16_i8i8i32"
GEMM_SYMBOL = "simaccel_gemm_16x16x16"
MODEL_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.c")
# Flags are part of the cached library's name: a different build is a different file.
_CFLAGS = ("-O2", "-shared", "-fPIC")
_LOCK = threading.Lock()
# The folder set_cache_dir() chose for this process; None: default_cache_dir().
_cache_dir: str | None = None


def gemm_description(name: str = GEMM_INTRIN) -> PrimFunc:
    """The GEMM tile as a PrimFunc: ``C[i, j] += int32(A[i, k]) * int32(B[k, j])`` for
    i, j, k < 16, A and B int8, C int32."""
    a = te.placeholder((16, 16), "int8", name="A")
    b = te.placeholder((16, 16), "int8", name="B")
    k = te.reduce_axis(16, name="k")
    c = te.compute((16, 16), lambda i, j: te.sum(a[i, k].astype("int32")
                                                 * b[k, j].astype("int32"), axis=k), name="C")
    return te.create_prim_func([a, b, c], name=name)


def default_cache_dir() -> str:
    """Where compiled models are kept unless :func:`set_cache_dir` says otherwise:
    ``~/.cache/autotune/accel``."""
    return os.path.join(os.path.expanduser("~"), ".cache", "autotune", "accel")


def get_cache_dir() -> str:
    """The folder used by every call given no ``cache_dir``: the one :func:`set_cache_dir`
    named, else :func:`default_cache_dir`."""
    return _cache_dir if _cache_dir is not None else default_cache_dir()


def set_cache_dir(folder: str | os.PathLike | None) -> None:
    """Keep this process's compiled models in ``folder`` (made on first compile) from now on;
    None goes back to :func:`default_cache_dir`.  It is the folder of every call given no
    ``cache_dir``: :func:`functional_model`, ``AcceleratorRunner``, ``autotune.accel.build``.
    The intrinsic is re-registered to name the library there at once, so that programs
    tensorized from now on call it; nothing is compiled before :func:`functional_model`.
    Worker processes need no setting of their own: the builder and the runner send them the
    library's path.  Raises AcceleratorError for a ``folder`` that is no path (or empty)."""
    global _cache_dir
    if folder is not None and (not isinstance(folder, (str, os.PathLike))
                               or not os.fspath(folder)):
        raise AcceleratorError(f"set_cache_dir: the accelerator's model cache must be a "
                               f"folder path or None, got {folder!r}")
    # Absolute now: a later chdir must not move the cache (nor the registered library).
    chosen = None if folder is None else os.path.abspath(os.fspath(folder))
    with _LOCK:
        _cache_dir = chosen
        _register(library_path())


def _source_digest() -> str:
    try:
        with open(MODEL_SOURCE, "rb") as f:
            source = f.read()
    except OSError as err:
        raise AcceleratorError(f"the accelerator's functional model {MODEL_SOURCE} cannot be "
                               f"read: {err}") from err
    return hashlib.sha256(source + " ".join(_CFLAGS).encode()).hexdigest()[:16]


def library_path(cache_dir: str | None = None) -> str:
    """The path of the compiled model in ``cache_dir`` (default: the process's
    :func:`get_cache_dir`); its name holds a digest of the source and flags, so an edited model
    is rebuilt."""
    folder = cache_dir if cache_dir is not None else get_cache_dir()
    return os.path.join(os.path.abspath(folder), f"libsimaccel-{_source_digest()}.so")


def _register(path: str) -> None:
    # override: the same name stands for the same computation; only the library's place moves.
    intrinsics.register(GEMM_INTRIN, gemm_description(),
                        intrinsics.ExternCImpl(GEMM_SYMBOL, path), override=True)


def functional_model(cache_dir: str | None = None, compiler: str | None = None) -> str:
    """The path of the compiled functional model, compiling ``model.c`` first when the cache
    has none (with ``compiler``; by default the ``ziglang`` wheel's C compiler where it is
    installed, else ``cc`` or ``gcc`` from PATH).  The GEMM intrinsic
    is (re-)registered to call the returned library.  Raises AcceleratorError when no compiler
    is found or the compilation fails."""
    path = library_path(cache_dir)
    with _LOCK:
        if not os.path.exists(path):
            _compile(path, compiler)
        if intrinsics.get(GEMM_INTRIN).impl.library != path:
            _register(path)
    return path


def _compile(path: str, compiler: str | None) -> None:
    cc = None
    if compiler is not None:
        cc = shutil.which(compiler)
        if cc is None:
            raise AcceleratorError(f"the C compiler {compiler!r} given to build the "
                                   f"accelerator's functional model ({MODEL_SOURCE}) is not "
                                   f"an executable found on PATH")
    elif importlib.util.find_spec("ziglang") is None:
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise AcceleratorError(
                f"the simulated accelerator's functional model {MODEL_SOURCE} must be compiled "
                f"into a shared library before a program using {GEMM_INTRIN} can run, but no "
                f"C compiler (cc or gcc) is on PATH and the ziglang package is not installed; "
                f"pip install ziglang, install a compiler, or pass compiler=")
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise AcceleratorError(f"cannot create the cache folder {folder} for the "
                               f"accelerator's functional model: {err}") from err
    # Compiled under a temporary name and renamed: a process tuning beside this one never
    # loads half a library.
    fd, part = tempfile.mkstemp(prefix=".libsimaccel-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        if cc is None:
            # The C compiler of the ziglang wheel: nothing from the system's toolchain.
            try:
                compile_c_shared(MODEL_SOURCE, part, _CFLAGS)
            except BuildError as err:
                raise AcceleratorError(f"compiling the accelerator's functional model "
                                       f"failed: {err}") from err
        else:
            cmd = [cc, *_CFLAGS, "-o", part, MODEL_SOURCE]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise AcceleratorError(f"compiling the accelerator's functional model failed "
                                       f"({' '.join(cmd)}):\n{proc.stderr.strip()}")
        os.replace(part, path)
    finally:
        if os.path.exists(part):
            os.remove(part)


# Registered at import, naming the default cache's library: a trace that tensorizes with the
# intrinsic replays in any process that imported autotune.accel, compiled model or not.
_register(library_path())
