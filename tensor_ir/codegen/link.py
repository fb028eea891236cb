"""Linking LLVM objects (and compiling C) into shared libraries without the system's toolchain.

A built kernel or model is a position-independent ELF object (see ``compile.py``).  Turning it
into a ``.so`` used to take ``cc -shared``; here it takes the LLVM linker that the ``ziglang``
wheel ships (``ld.lld``, with clang behind ``zig cc``), so exporting needs nothing from the
system but the C library the result runs against.

Why the wheel's linker, and not an ELF writer of our own: ``ld.lld`` already handles every
relocation kind LLVM emits for every target, symbol versions, GOT / PLT, RELRO and the dynamic
tables, and reports an unresolved symbol at link time by name.  Writing the shared object in
Python would mean re-implementing that for x86-64 and aarch64 and keeping it right as LLVM's
output changes.  The price is the wheel: about 100 MB to download, 400 MB unpacked (mostly the C
library headers of every target, which ``compile_c_shared`` uses).

How the libraries the result needs (DT_NEEDED) are found:

* Objects for this machine are linked by ``ld.lld`` against the very ``libc.so.6`` /
  ``libm.so.6`` this process runs with, located through the dynamic loader (``dlopen`` then
  ``dlinfo``), not through the linker's search path: a minimal image has ``libm.so.6`` but
  often neither the ``libm.so`` development link nor a linker script.  The result records the
  libraries' sonames and the symbol versions of this host (``expf@GLIBC_2.27``), as
  ``cc -shared ... -lm`` would.
* Objects for another machine (an aarch64 export on an x86-64 host) are linked by ``zig cc``
  against the glibc stub libraries that zig generates for the target (cached by zig after the
  first use, about two seconds).  Only glibc's own libraries have stubs.

Neither route links a compiler runtime (``-rtlib=none``): of what the code generator emits
for these two architectures, only half-precision conversion on x86 CPUs without F16C calls
into one (``__extendhfsf2``, ``__truncsfhf2``); ``libgcc_s.so.1`` in ``needed`` provides them.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import platform
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from ..errors import BuildError

# ELF e_machine -> the architecture name zig's targets use.  Only architectures whose generated
# code needs no compiler runtime (no soft-float helpers; see the module text).
_MACHINES = {62: "x86_64", 183: "aarch64"}
# platform.machine() spellings of the same architectures.
_HOST_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
# glibc's libraries, by soname, as zig cc's -l names: the ones zig has stubs for.
_GLIBC_LIBRARIES = {"libc.so.6": "c", "libm.so.6": "m", "libpthread.so.0": "pthread",
                    "libdl.so.2": "dl", "librt.so.1": "rt"}
# Flags that compile_c_shared supplies itself (it always builds a position-independent object
# and links it as a shared library), so that a caller's "cc -O2 -shared -fPIC" flags carry over.
_IMPLIED_FLAGS = {"-shared", "-fPIC", "-fpic", "-c"}
_RTLD_DI_LINKMAP = 2
_RTLD_LAZY = 1


class _LinkMap(ctypes.Structure):
    """The head of glibc's ``struct link_map``: what ``dlinfo(RTLD_DI_LINKMAP)`` points at."""
    _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]


def link_shared_library(objects: Sequence[bytes], path: str | os.PathLike,
                        needed: Sequence[str] = ("libm.so.6",), *,
                        allow_undefined: bool = False) -> None:
    """Link the ELF relocatable ``objects`` into the shared library ``path``.

    ``needed`` names the libraries the result depends on besides ``libc.so.6``, by soname
    (``"libm.so.6"``) or as a path to a shared library; one that no object uses is not
    recorded.  A symbol that neither the objects nor these libraries define is an error,
    unless ``allow_undefined`` (then it must be in the process when the library is loaded).
    Raises BuildError naming ``path`` and the cause: no ``ziglang`` package, an input that is
    not an object, objects for different machines, a library that cannot be found, or the
    linker's own error."""
    path = os.fspath(path)
    if not objects:
        raise BuildError(f"linking {path}: no object files given")
    arch = None
    for index, data in enumerate(objects):
        what = f"object {index + 1} of {len(objects)}"
        machine = _object_machine(data, what, path)
        if arch is not None and machine != arch:
            raise BuildError(f"linking {path}: {what} is compiled for {machine}, the first for "
                             f"{arch}; one library holds code for one machine")
        arch = machine
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BuildError(f"linking {path}: the folder {folder} does not exist")
    zig = _zig_executable(f"linking {path}")
    with tempfile.TemporaryDirectory(prefix="tensor-ir-link-") as tmp:
        # Fixed names: the same objects give the same library bytes (an export names its
        # library by a digest of them), and "object2.o" in a linker message is "object 2".
        inputs = []
        for index, data in enumerate(objects):
            name = os.path.join(tmp, f"object{index + 1}.o")
            with open(name, "wb") as f:
                f.write(data)
            inputs.append(name)
        if arch == _host_arch():
            cmd = _host_link_command(zig, inputs, path, needed, allow_undefined)
        else:
            cmd = _cross_link_command(zig, arch, inputs, path, needed, allow_undefined)
        _run(cmd, f"linking {path}", tmp)


def compile_c_shared(source_path: str | os.PathLike, out_path: str | os.PathLike,
                     flags: Sequence[str] = ("-O2",),
                     needed: Sequence[str] = ("libm.so.6",)) -> None:
    """Compile the C file ``source_path`` into the shared library ``out_path`` for this
    machine, with the clang of the ``ziglang`` wheel (``zig cc``) and the C library headers it
    ships; then link it as :func:`link_shared_library` does (``needed`` as there).

    ``flags`` are compiler flags (``-O2``, ``-march=native``, ``-DNAME=1``, ``-I...``).
    ``-shared``, ``-fPIC`` and ``-c`` are implied and dropped, so the flags of a
    ``cc -shared -fPIC`` command carry over; linker flags (``-l``, ``-L``, ``-Wl,``) are
    refused: name libraries in ``needed``.  The code targets the baseline CPU of this
    architecture unless the flags say otherwise, as cc does.  Raises BuildError naming the
    source file and the compiler's messages."""
    source_path, out_path = os.fspath(source_path), os.fspath(out_path)
    if not os.path.isfile(source_path):
        raise BuildError(f"compiling {source_path}: no such file")
    compile_flags = []
    for flag in flags:
        if flag in _IMPLIED_FLAGS:
            continue
        if flag.startswith(("-l", "-L", "-Wl,", "-o")):
            raise BuildError(f"compiling {source_path}: the linker flag {flag!r} is not taken; "
                             f"name the libraries the code needs in needed= (sonames or paths)")
        compile_flags.append(flag)
    arch = _host_arch()
    if arch is None:
        raise BuildError(f"compiling {source_path}: this host ({platform.machine()}, "
                         f"{sys.platform}) is not one compile_c_shared builds for (Linux on "
                         f"{', '.join(sorted(set(_HOST_ARCH.values())))})")
    zig = _zig_executable(f"compiling {source_path}")
    with tempfile.TemporaryDirectory(prefix="tensor-ir-cc-") as tmp:
        obj = os.path.join(tmp, "source.o")
        # -fno-sanitize=undefined: zig cc instruments unoptimised builds with UBSan, whose
        # runtime would then have to be linked in.  The caller's flags come after and win.
        cmd = [zig, "cc", "-target", f"{arch}-linux-gnu", "-c", "-fPIC",
               "-fno-sanitize=undefined", *compile_flags, "-o", obj,
               os.path.abspath(source_path)]
        _run(cmd, f"compiling {source_path}", tmp)
        with open(obj, "rb") as f:
            data = f.read()
    link_shared_library([data], out_path, needed)


# ---------------------------------------------------------------------------------------------
# the two link routes
# ---------------------------------------------------------------------------------------------

def _host_link_command(zig: str, inputs: list[str], path: str, needed: Sequence[str],
                       allow_undefined: bool) -> list[str]:
    libraries = [_library_file(name, path) for name in ("libc.so.6", *needed)]
    strict = [] if allow_undefined else ["--no-undefined"]
    # gnu + sysv hash tables and binding at load, as distributions' compilers link: a symbol
    # missing at run time shows when the library is loaded, not at its first call.
    return [zig, "ld.lld", "-shared", *strict, "--hash-style=both", "-z", "now", "-z", "relro",
            "--eh-frame-hdr", "-o", os.path.abspath(path), *inputs, "--as-needed", *libraries]


def _cross_link_command(zig: str, arch: str, inputs: list[str], path: str,
                        needed: Sequence[str], allow_undefined: bool) -> list[str]:
    libraries = []
    for name in needed:
        if "/" in name:
            libraries.append(name)
        elif name in _GLIBC_LIBRARIES:
            libraries.append(f"-l{_GLIBC_LIBRARIES[name]}")
        else:
            raise BuildError(f"linking {path} for {arch}: there is no {arch} copy of {name} to "
                             f"link against (zig has stub libraries only for glibc's "
                             f"{', '.join(_GLIBC_LIBRARIES)}); pass the path of an {arch} "
                             f"build of it in needed=")
    # -rtlib=none: no compiler runtime (module text); -fno-sanitize: no UBSan runtime either.
    strict = [] if allow_undefined else ["-Wl,-z,defs"]
    return [zig, "cc", "-target", f"{arch}-linux-gnu", "-shared", "-rtlib=none",
            "-fno-sanitize=undefined", *strict, "-o", os.path.abspath(path), *inputs,
            "-Wl,--as-needed", *libraries]


def _library_file(name: str, path: str) -> str:
    """The file of the shared library ``name`` (a soname, or a path) as this process's dynamic
    loader finds it.

    NOTE: finding it means loading it into this process (``dlopen``; glibc's libraries are
    loaded already).  Asking the loader is the only answer that matches where the library
    will be found when the result is loaded; reimplementing its search (``LD_LIBRARY_PATH``,
    ``ld.so.cache``, the default folders) would drift from it."""
    if "/" in name:
        if not os.path.isfile(name):
            raise BuildError(f"linking {path}: the library {name} given in needed= does not "
                             f"exist")
        return name
    process = ctypes.CDLL(None)
    process.dlopen.restype = ctypes.c_void_p
    process.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    handle = process.dlopen(name.encode(), _RTLD_LAZY)
    if not handle:
        process.dlerror.restype = ctypes.c_char_p
        why = (process.dlerror() or b"not found").decode(errors="replace")
        raise BuildError(f"linking {path}: the library {name} is not installed on this host "
                         f"({why})")
    try:
        dlinfo = process.dlinfo
    except AttributeError as err:
        raise BuildError(f"linking {path}: this C library has no dlinfo, so the file of {name} "
                         f"cannot be located; pass its path in needed=") from err
    entry = ctypes.POINTER(_LinkMap)()
    dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    if dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(entry)) != 0 or not entry:
        raise BuildError(f"linking {path}: the dynamic loader does not say which file {name} "
                         f"is; pass its path in needed=")
    file = (entry.contents.l_name or b"").decode()
    if not os.path.isfile(file):
        raise BuildError(f"linking {path}: the dynamic loader reports {name} as {file!r}, "
                         f"which is not a file; pass its path in needed=")
    return file


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def _object_machine(data: bytes, what: str, path: str) -> str:
    """The architecture of the ELF relocatable object ``data`` (checked here, so that a wrong
    input is named by its place in the list rather than by a temporary file name)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BuildError(f"linking {path}: {what} must be bytes, got {type(data).__name__}")
    data = bytes(data[:64])
    if len(data) < 20 or data[:4] != b"\x7fELF":
        raise BuildError(f"linking {path}: {what} is not an ELF object file (it starts with "
                         f"{data[:4]!r}); linking without the system compiler takes ELF "
                         f"objects (Linux targets) only")
    order = "<" if data[5] == 1 else ">"
    kind, machine = struct.unpack_from(order + "HH", data, 16)
    if kind != 1:  # ET_REL
        raise BuildError(f"linking {path}: {what} is an ELF file of type {kind}, not a "
                         f"relocatable object (type 1)")
    if machine not in _MACHINES:
        raise BuildError(f"linking {path}: {what} is for ELF machine {machine}; this linker "
                         f"takes {', '.join(sorted(_MACHINES.values()))}")
    return _MACHINES[machine]


@functools.lru_cache(maxsize=1)
def _host_arch() -> str | None:
    """This machine's architecture if it runs Linux with glibc, the C library the host route
    links against; None otherwise (every object then takes the stub route)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    return _HOST_ARCH.get(platform.machine().lower())


def _zig_executable(doing: str) -> str:
    # The ziglang package is located, not imported: running ``python -m ziglang`` would cost
    # a Python start-up per link, and the package holds nothing else.
    spec = importlib.util.find_spec("ziglang")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(f"{doing}: the ziglang package, whose linker and C compiler this "
                         f"uses, is not installed (pip install ziglang)")
    for folder in spec.submodule_search_locations:
        for name in ("zig", "zig.exe"):
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    raise BuildError(f"{doing}: the ziglang package is installed but holds no zig executable; "
                     f"reinstall it (pip install --force-reinstall ziglang)")


def _zig_environment() -> dict[str, str] | None:
    """The environment for zig: this process's, unless zig would find no cache folder in it.

    NOTE: zig cc keeps what it builds (a target's C library stubs, its own bookkeeping) in a
    per-user cache it finds through ZIG_GLOBAL_CACHE_DIR, XDG_CACHE_HOME or HOME, and refuses
    to start when none is set, as in some service processes; it is then given a folder of its
    own under the temporary directory."""
    if any(os.environ.get(key) for key in ("ZIG_GLOBAL_CACHE_DIR", "XDG_CACHE_HOME", "HOME")):
        return None
    env = dict(os.environ)
    user = os.getuid() if hasattr(os, "getuid") else "user"
    env["ZIG_GLOBAL_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"zig-cache-{user}")
    return env


def _run(cmd: list[str], doing: str, cwd: str) -> None:
    # cwd: a temporary folder, so that nothing the tools write lands in the caller's.
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False,
                              env=_zig_environment())
    except OSError as err:
        raise BuildError(f"{doing}: cannot run {cmd[0]}: {err}") from err
    if proc.returncode != 0:
        # The temporary folder's name says nothing to the reader; the file names within do.
        message = (proc.stderr or proc.stdout).strip().replace(cwd + os.sep, "")
        raise BuildError(f"{doing} failed (zig {cmd[1]} exited with {proc.returncode}):\n"
                         f"{message}")
