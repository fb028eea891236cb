"""Target: what a program is compiled for, and the hardware facts the design space needs.

A target is written as a string in TVM's style: a kind followed by ``-key=value`` (or
``-key value``) options::

    Target("llvm")                                        # this machine, detected
    Target("llvm -mcpu=znver4 -num-cores 2")
    Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    Target("cuda -arch=sm_90")

Facts not written in the string are filled in: for the host from the operating system
(``/proc/cpuinfo``, the CPU affinity mask and cgroup quota, ``/sys/devices/system/cpu``) and
LLVM's host CPU name and features; for a named CPU from a small table of well-known CPUs; for
CUDA from a table indexed by ``-arch``.  ``Target.register(name, spec)`` gives a string a name,
so ``Target("my-board -num-cores 2")`` starts from the registered spec and overrides one option;
its keyword arguments add the facts a user knows (cores, vector width, caches, intrinsics).

A CPU target also says which tensor intrinsics (:mod:`tensor_ir.intrinsics`) it offers: those
its features imply (AVX-512 VNNI: ``dot_16x4_u8i8i32_vnni``; AArch64 dotprod:
``dot_4x4_i8i8i32_sdot``) and those ``-intrinsics=a,b`` declares (an accelerator's C function,
a vendor micro-kernel).  The design space tensorizes blocks that match one of them.

``str(target)`` is the canonical string: deterministic, parseable again, and what tuning
records are keyed by.  Two targets are equal when their canonical strings are.

This module is the real Target; it is re-exported as ``autotune.Target``.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from . import dtype as dt
from .devices import opencl_device_facts
from .errors import TensorIRError
from .llvm_support import llvm_names

__all__ = ["KINDS", "HostInfo", "Target", "TargetError", "host_info"]


class TargetError(TensorIRError, ValueError):
    """A target string names an unknown kind, option or value; the message names it."""


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

KINDS = ("llvm", "cuda", "opencl")

# Options each kind accepts, with a one-line meaning (used in error messages and docs).
_OPTIONS: dict[str, dict[str, str]] = {
    "llvm": {
        "mtriple": "LLVM target triple, e.g. aarch64-linux-gnu (default: the host's)",
        "mcpu": "CPU name as LLVM spells it, e.g. znver4, skylake-avx512, cortex-a72",
        "mattr": "comma-separated feature changes, e.g. +avx2,+fma,-avx512f",
        "num-cores": "cores a parallel loop may use",
        "vector-width": "SIMD register width in bits (overrides what the features imply)",
        "l1d-cache": "L1 data cache size per core, bytes (suffix K or M allowed)",
        "l2-cache": "L2 cache size, bytes (suffix K or M allowed)",
        "l3-cache": "last-level cache size, bytes (suffix K or M allowed)",
        "cache-line": "cache line size in bytes",
        "intrinsics": "comma-separated tensor intrinsics offered besides those the features "
                      "imply, e.g. my_dot_8x4",
    },
    "cuda": {
        "arch": "compute architecture, e.g. sm_80, sm_90",
        "max-threads-per-block": "largest thread block",
        "max-shared-memory-per-block": "shared memory a block may use, bytes (suffix K allowed)",
        "warp-size": "threads per warp",
        "registers-per-block": "32-bit registers per block",
        "host": "the CPU target launching kernels, quoted, e.g. -host='llvm -num-cores 4'",
    },
    "opencl": {
        "platform": "substring of the OpenCL platform or device name picking the device",
        "max-work-group-size": "largest work-group (threads per block)",
        "local-memory-size": "local (shared) memory a work-group may use, bytes (suffix K "
                             "allowed)",
    },
}

# Well-known CPUs: SIMD width in bits and the features that must be present to run code
# compiled for them.  The feature set is deliberately the short list that decides which
# instructions the vectoriser may use; LLVM itself knows the full list.
_X86_AVX512 = frozenset({"sse2", "avx", "avx2", "fma", "avx512f"})
_X86_AVX2 = frozenset({"sse2", "avx", "avx2", "fma"})
_X86_AVX = frozenset({"sse2", "avx"})
_X86_SSE = frozenset({"sse2"})
_ARM_NEON = frozenset({"neon"})
_CPUS: dict[str, tuple[int, frozenset]] = {
    **{name: (512, _X86_AVX512) for name in (
        "skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "icelake-client",
        "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5",
        "x86-64-v4")},
    **{name: (256, _X86_AVX2) for name in (
        "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
        "znver1", "znver2", "znver3", "x86-64-v3")},
    **{name: (256, _X86_AVX) for name in ("sandybridge", "ivybridge", "btver2")},
    **{name: (128, _X86_SSE) for name in ("x86-64", "x86-64-v2", "nehalem", "westmere")},
    **{name: (128, _ARM_NEON) for name in (
        "cortex-a53", "cortex-a55", "cortex-a57", "cortex-a72", "cortex-a73", "cortex-a76",
        "cortex-a78", "neoverse-n1", "neoverse-n2", "neoverse-v1", "neoverse-v2", "apple-m1",
        "apple-m2", "apple-m3")},
}

# The baseline SIMD width of an architecture when nothing else is known.
_ARCH_BASELINE_BITS = {"x86_64": 128, "aarch64": 128, "arm": 0, "riscv64": 0, "riscv32": 0}

# CUDA facts by compute capability (NVIDIA's "technical specifications per compute capability"
# table): opt-in shared memory per block in KiB, resident threads per multiprocessor.
# Without opting in (a launch attribute), a block gets 48 KiB of shared memory on every
# architecture, which is what ``max_shared_memory_per_block`` reports by default.
_CUDA_ARCHS: dict[str, tuple[int, int]] = {
    "sm_50": (48, 2048), "sm_52": (48, 2048), "sm_53": (48, 2048),
    "sm_60": (48, 2048), "sm_61": (48, 2048), "sm_62": (48, 2048),
    "sm_70": (96, 2048), "sm_72": (96, 2048), "sm_75": (64, 1024),
    "sm_80": (163, 2048), "sm_86": (99, 1536), "sm_87": (163, 1536), "sm_89": (99, 1536),
    "sm_90": (227, 2048), "sm_90a": (227, 2048), "sm_100": (227, 2048), "sm_120": (99, 1536),
}
_CUDA_DEFAULT_SHARED = 48 * 1024

# OpenCL facts when no device can be asked (pyopencl missing, no platform): small values every
# device the runtime targets meets, so a schedule checked against them launches anywhere.
_OPENCL_DEFAULT_WORK_GROUP = 256
_OPENCL_DEFAULT_LOCAL_MEMORY = 16 * 1024

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}

# Tensor intrinsics a CPU offers because of one of its features: (architecture, LLVM feature)
# -> intrinsic name (registered by tensor_ir.intrinsics.builtin).  Names only, so that this
# module does not import the intrinsic registry (and its LLVM emitters) to parse a string.
_FEATURE_INTRINSICS = {
    ("x86_64", "avx512vnni"): "dot_16x4_u8i8i32_vnni",
    ("aarch64", "dotprod"): "dot_4x4_i8i8i32_sdot",
}
_INTRINSIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


# ---------------------------------------------------------------------------------------------
# Host detection
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostInfo:
    """What this machine says about itself; every field may be unknown (None / empty)."""

    triple: str
    cpu: str
    features: frozenset
    num_cores: int
    model_name: str | None
    l1d_cache: int | None
    l2_cache: int | None
    l3_cache: int | None
    cache_line: int | None


_HOST: HostInfo | None = None
_HOST_LOCK = threading.Lock()


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpuinfo() -> tuple[str | None, frozenset]:
    """Model name and feature flags from /proc/cpuinfo (Linux); empty elsewhere."""
    text = _read("/proc/cpuinfo") or ""
    model, flags = None, frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
    # /proc/cpuinfo spells some features differently from LLVM; only the ones the tables use
    # matter.  ARM's "asimd" is LLVM's "neon".
    if "asimd" in flags:
        flags = flags | {"neon"}
    return model, flags


def _usable_cores() -> int:
    """Cores this process may use: the affinity mask, capped by a cgroup v2 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _read("/sys/fs/cgroup/cpu.max")
    if quota:
        parts = quota.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                cores = min(cores, max(1, math.ceil(int(parts[0]) / int(parts[1]))))
            except ValueError:
                pass
    return max(1, cores)


def _parse_size(text: str) -> int | None:
    """'32K', '1024K', '32M', '49152' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KkMmGg]?)[iI]?[bB]?\s*", text)
    if not m:
        return None
    scale = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
    return int(m.group(1)) * scale


def _caches() -> dict[str, int | None]:
    """Cache sizes of cpu0 from sysfs: L1 data, L2, last level, line size."""
    out: dict[str, int | None] = {"l1d": None, "l2": None, "l3": None, "line": None}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        return out
    for entry in entries:
        level = _read(f"{base}/{entry}/level")
        kind = _read(f"{base}/{entry}/type")
        size = _parse_size(_read(f"{base}/{entry}/size") or "")
        line = _read(f"{base}/{entry}/coherency_line_size")
        if level is None or size is None or kind == "Instruction":
            continue
        if level == "1" and kind in ("Data", "Unified"):
            out["l1d"] = size
        elif level == "2":
            out["l2"] = size
        elif level == "3":
            out["l3"] = size
        if line and line.isdigit() and out["line"] is None:
            out["line"] = int(line)
    return out


def host_info() -> HostInfo:
    """Detect the host once per process (LLVM for the CPU name and features, the OS for the
    rest; where LLVM is unavailable, /proc/cpuinfo supplies the features)."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is not None:
            return _HOST
        model, flags = _cpuinfo()
        triple, cpu, features = None, "generic", flags
        try:
            import llvmlite.binding as llvm

            triple = llvm.get_process_triple()
            cpu = llvm.get_host_cpu_name() or "generic"
            try:
                feats = llvm.get_host_cpu_features()
                features = frozenset(k for k, on in feats.items() if on)
            except RuntimeError:
                # NOTE: LLVM cannot list host features on some platforms; /proc/cpuinfo's
                # flags are the fallback (their spelling matches LLVM's for the x86 SIMD
                # features the tables use).
                features = flags
        except ImportError:
            pass
        if triple is None:
            import platform

            machine = platform.machine().lower()
            machine = _ARCH_ALIASES.get(machine, machine)
            triple = f"{machine}-unknown-{platform.system().lower()}"
        caches = _caches()
        _HOST = HostInfo(triple=triple, cpu=cpu, features=frozenset(features),
                         num_cores=_usable_cores(), model_name=model, l1d_cache=caches["l1d"],
                         l2_cache=caches["l2"], l3_cache=caches["l3"], cache_line=caches["line"])
        return _HOST


def _arch_of(triple: str) -> str:
    arch = triple.split("-", 1)[0].lower()
    arch = _ARCH_ALIASES.get(arch, arch)
    if re.fullmatch(r"armv\d.*|arm", arch):
        return "arm"
    return arch


def _os_of(triple: str) -> str:
    parts = triple.lower().split("-")
    for os_name in ("linux", "darwin", "macos", "windows", "freebsd", "none"):
        if any(p.startswith(os_name) for p in parts[1:]):
            return "darwin" if os_name == "macos" else os_name
    return "unknown"


def _vector_bits_from_features(features: frozenset, arch: str) -> int:
    if "avx512f" in features:
        return 512
    if "avx" in features or "avx2" in features:
        return 256
    if "sse2" in features or "neon" in features or "sve" in features:
        # NOTE: SVE's width is a run-time property; 128 bits is the guaranteed minimum.
        return 128
    return _ARCH_BASELINE_BITS.get(arch, 0)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_REGISTRY: dict[str, str] = {}
_REGISTRY_LOCK = threading.Lock()


def _tokenize(spec: str) -> list[str]:
    try:
        return shlex.split(spec)
    except ValueError as err:
        raise TargetError(f"target {spec!r}: {err}") from None


def _parse_options(kind: str, tokens: list[str], spec: str) -> dict[str, str]:
    """'-key=value' or '-key value' pairs -> dict (later ones win)."""
    allowed = _OPTIONS[kind]
    options: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-") or token in ("-", "--"):
            raise TargetError(f"target {spec!r}: expected an option like -key=value, got "
                              f"{token!r}")
        body = token.lstrip("-")
        if "=" in body:
            key, value = body.split("=", 1)
            i += 1
        else:
            key = body
            # Every option takes a value, so the next token is it even if it starts with '-'
            # (e.g. "-mattr -avx512f").
            if i + 1 >= len(tokens):
                raise TargetError(f"target {spec!r}: option -{key} needs a value")
            value = tokens[i + 1]
            i += 2
        key = key.replace("_", "-")
        if key not in allowed:
            raise TargetError(
                f"target {spec!r}: unknown option -{key} for kind {kind!r}; known options: "
                + ", ".join("-" + k for k in allowed))
        if value == "":
            raise TargetError(f"target {spec!r}: option -{key} has an empty value")
        options[key] = value
    return options


def _int_option(options: Mapping[str, str], key: str, spec: str, size: bool = False):
    if key not in options:
        return None
    text = options[key]
    value = _parse_size(text) if size else (int(text) if re.fullmatch(r"\d+", text) else None)
    if value is None or value <= 0:
        raise TargetError(f"target {spec!r}: option -{key}={text} must be a positive "
                          + ("size in bytes" if size else "integer"))
    return value


def _resolve(spec: str) -> tuple[str, dict[str, str]]:
    """Kind and explicit options of ``spec``, following registered names."""
    tokens = _tokenize(spec)
    if not tokens:
        raise TargetError("empty target string; expected e.g. 'llvm' or 'cuda -arch=sm_80'")
    head, rest = tokens[0], tokens[1:]
    if head in KINDS:
        return head, _parse_options(head, rest, spec)
    with _REGISTRY_LOCK:
        registered = _REGISTRY.get(head)
    if registered is None:
        known = list(KINDS) + sorted(_REGISTRY)
        raise TargetError(f"unknown target {head!r} in {spec!r}; known targets: "
                          + ", ".join(known))
    kind, options = _resolve(registered)
    options.update(_parse_options(kind, rest, spec))
    return kind, options


_CPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def _check_llvm_names(triple: str, cpu: str | None, mattr: tuple, spec: str) -> None:
    """Refuse a -mcpu or -mattr that LLVM does not know for ``triple``, or a CPU that cannot
    generate code for it (i386 for x86-64): LLVM would only warn about the first, and abort
    the whole process on the second when the first kernel is compiled."""
    if cpu is not None and not _CPU_NAME.fullmatch(cpu):
        raise TargetError(f"target {spec!r}: -mcpu={cpu!r} is not a CPU name")
    if _arch_of(triple) == "x86_64" and "-64bit" in mattr:
        raise TargetError(f"target {spec!r}: -mattr entry '-64bit' cannot hold for {triple}")
    if cpu is None and not mattr:
        return
    names = llvm_names(triple)
    if names is None:
        return  # LLVM's tables could not be read here: nothing to judge by
    if cpu is not None:
        if cpu not in names.cpus:
            close = sorted(c for c in names.cpus if c.startswith(cpu[:3]))[:8]
            hint = f"; similar names: {', '.join(close)}" if close else ""
            raise TargetError(f"target {spec!r}: -mcpu={cpu} is not a CPU LLVM knows for "
                              f"{triple}{hint}")
        if cpu not in names.usable_cpus:
            raise TargetError(f"target {spec!r}: -mcpu={cpu} cannot generate code for {triple} "
                              f"(for x86-64, a 32-bit-only CPU)")
    for attr in mattr:
        if attr[1:] not in names.features:
            raise TargetError(f"target {spec!r}: -mattr entry {attr!r} is not a feature LLVM "
                              f"knows for {triple}")


# ---------------------------------------------------------------------------------------------
# Target
# ---------------------------------------------------------------------------------------------

class Target:
    """A compilation target with its hardware facts.

    CPU (kind ``llvm``) facts: ``triple``, ``cpu``, ``features`` (frozenset of LLVM feature
    names that are on), ``num_cores``, ``vector_bits`` / ``vector_lanes(dtype)``, cache sizes
    ``l1d_cache``, ``l2_cache``, ``l3_cache``, ``cache_line`` (bytes, None when unknown),
    ``intrinsics`` (names of the tensor intrinsics it offers: implied by its features, then
    declared with ``-intrinsics``; empty for GPU targets).
    GPU (kind ``cuda``) facts: ``arch``, ``compute_capability``, ``max_threads_per_block``,
    ``max_shared_memory_per_block`` (without opt-in), ``max_shared_memory_per_block_optin``,
    ``warp_size``, ``registers_per_block``, ``max_threads_per_multiprocessor``, and ``host``
    (the CPU target that launches kernels).  ``is_host`` says whether this process's machine
    can run code built for the target (only CPU targets matching the host; a GPU runner checks
    its device itself).
    """

    __slots__ = (
        "_canonical",
        "_declared_intrinsics",
        "_mattr",
        "arch",
        "cache_line",
        "compute_capability",
        "cpu",
        "features",
        "host",
        "intrinsics",
        "is_host",
        "kind",
        "l1d_cache",
        "l2_cache",
        "l3_cache",
        "max_shared_memory_per_block",
        "max_shared_memory_per_block_optin",
        "max_threads_per_block",
        "max_threads_per_multiprocessor",
        "model_name",
        "num_cores",
        "options",
        "registers_per_block",
        "triple",
        "vector_bits",
        "warp_size",
    )

    def __init__(self, spec: str | Target, host: str | Target | None = None):
        if isinstance(spec, Target):
            if host is None and spec.host is not None:
                host = spec.host
            spec = spec._canonical
        if not isinstance(spec, str):
            raise TargetError(f"a target is given as a string or Target, got "
                              f"{type(spec).__name__}")
        kind, options = _resolve(spec)
        self.kind = kind
        self.options = tuple(sorted(options.items()))
        # Every fact exists on every target, None where it does not apply, so code that
        # reads facts needs no hasattr checks.
        for name in self.__slots__:
            if name not in ("kind", "options"):
                setattr(self, name, None)
        self.features = frozenset()
        self._mattr = ()
        self.intrinsics = ()
        self._declared_intrinsics = ()
        if kind == "llvm":
            if host is not None:
                raise TargetError(f"target {spec!r}: a CPU target has no separate host")
            self._init_cpu(options, spec)
        elif kind == "cuda":
            self._init_cuda(options, spec, host)
        else:
            if host is not None:
                raise TargetError(f"target {spec!r}: an opencl target has no separate host")
            self._init_opencl(options, spec)
        self._canonical = self._make_canonical()

    # -- CPU -----------------------------------------------------------------------------------
    def _init_cpu(self, options: dict[str, str], spec: str) -> None:
        info = host_info()
        triple = options.get("mtriple", info.triple)
        if "mtriple" in options:
            try:
                import llvmlite.binding as llvm

                llvm.initialize_all_targets()
                llvm.Target.from_triple(triple)
            except RuntimeError:
                raise TargetError(f"target {spec!r}: unknown -mtriple={triple} (LLVM has no "
                                  "backend for it)") from None
            except ImportError:
                pass
        arch = _arch_of(triple)
        same_machine = (arch == _arch_of(info.triple) and _os_of(triple) == _os_of(info.triple))
        cpu = options.get("mcpu")
        if cpu == "native":
            cpu = info.cpu if same_machine else None
        mattr = tuple(a.strip() for a in options.get("mattr", "").split(",") if a.strip())
        for attr in mattr:
            if attr[0] not in "+-" or len(attr) < 2:
                raise TargetError(f"target {spec!r}: -mattr entry {attr!r} must start with + "
                                  "or - (e.g. +avx2)")
        # The host's own CPU name and "generic" need no look-up in LLVM's tables.
        known = cpu in (None, "generic") or (same_machine and cpu == info.cpu)
        explicit_cpu = None if known else cpu
        _check_llvm_names(triple, explicit_cpu, mattr, spec)
        # Base features: the host's when the target is the host CPU, otherwise the table's for
        # a known CPU plus the architecture's baseline SIMD.
        describes_host = same_machine and cpu in (None, info.cpu)
        if describes_host:
            cpu = info.cpu
            features = set(info.features)
        else:
            cpu = cpu or "generic"
            features = set(_CPUS.get(cpu, (0, frozenset()))[1])
            if arch == "aarch64":
                features.add("neon")  # AArch64 always has Advanced SIMD
            elif arch == "x86_64":
                features.add("sse2")
        for attr in mattr:
            (features.add if attr[0] == "+" else features.discard)(attr[1:])
        self.triple, self.cpu, self.features, self._mattr = triple, cpu, frozenset(features), mattr
        # Code for another CPU of this machine's architecture runs here when the features it
        # may use are all present; an unknown CPU name is not assumed to be compatible.
        required = (set(_CPUS[cpu][1]) if cpu in _CPUS else set()) | {
            a[1:] for a in mattr if a[0] == "+"}
        self.is_host = same_machine and (describes_host or cpu in _CPUS or cpu == "generic") \
            and required <= set(info.features)
        if describes_host:
            self.model_name = info.model_name
        bits = _int_option(options, "vector-width", spec)
        self.vector_bits = bits if bits is not None else _vector_bits_from_features(
            self.features, arch)
        cores = _int_option(options, "num-cores", spec)
        self.num_cores = cores if cores is not None else (info.num_cores if self.is_host else 1)
        # Cache sizes are known only for the machine we run on (or when the string gives them).
        local = describes_host
        self.l1d_cache = _int_option(options, "l1d-cache", spec, size=True) or (
            info.l1d_cache if local else None)
        self.l2_cache = _int_option(options, "l2-cache", spec, size=True) or (
            info.l2_cache if local else None)
        self.l3_cache = _int_option(options, "l3-cache", spec, size=True) or (
            info.l3_cache if local else None)
        self.cache_line = _int_option(options, "cache-line", spec) or (
            info.cache_line if local else 64)
        self._init_intrinsics(options, spec, arch)

    def _init_intrinsics(self, options: dict[str, str], spec: str, arch: str) -> None:
        """The intrinsics the features imply, then the declared ones (each name once).  Names
        are not looked up here: a record naming an intrinsic another process registers must
        still parse; the design space and the build resolve them."""
        implied = [name for (a, feature), name in sorted(_FEATURE_INTRINSICS.items())
                   if a == arch and feature in self.features]
        declared = []
        for name in options.get("intrinsics", "").split(","):
            name = name.strip()
            if not name:
                continue
            if not _INTRINSIC_NAME.fullmatch(name):
                raise TargetError(f"target {spec!r}: -intrinsics entry {name!r} is not an "
                                  f"intrinsic name (letters, digits, '_', '.')")
            if name not in implied and name not in declared:
                declared.append(name)
        self._declared_intrinsics = tuple(sorted(declared))
        self.intrinsics = tuple(implied) + self._declared_intrinsics

    # -- CUDA ----------------------------------------------------------------------------------
    def _init_cuda(self, options: dict[str, str], spec: str, host) -> None:
        arch = options.get("arch")
        if arch is None:
            raise TargetError(f"target {spec!r}: cuda needs -arch (e.g. 'cuda -arch=sm_80'); "
                              "the architecture decides shared memory and thread limits")
        if arch not in _CUDA_ARCHS:
            raise TargetError(f"target {spec!r}: unknown -arch={arch}; known: "
                              + ", ".join(_CUDA_ARCHS))
        optin_kib, threads_per_sm = _CUDA_ARCHS[arch]
        digits = re.fullmatch(r"sm_(\d+)(\d)a?", arch)
        self.arch = arch
        self.compute_capability = (int(digits.group(1)), int(digits.group(2)))
        self.max_threads_per_block = _int_option(options, "max-threads-per-block", spec) or 1024
        self.max_shared_memory_per_block = _int_option(
            options, "max-shared-memory-per-block", spec, size=True) or _CUDA_DEFAULT_SHARED
        self.max_shared_memory_per_block_optin = max(optin_kib * 1024,
                                                     self.max_shared_memory_per_block)
        self.warp_size = _int_option(options, "warp-size", spec) or 32
        self.registers_per_block = _int_option(options, "registers-per-block", spec) or 65536
        self.max_threads_per_multiprocessor = threads_per_sm
        self.is_host = False
        if host is None:
            host = options.get("host", "llvm")
        self.host = Target(host)
        if self.host.kind != "llvm":
            raise TargetError(f"target {spec!r}: the host of a cuda target must be a CPU "
                              f"target, got {self.host}")
        # A GPU target's vector width is a thread's: one lane.
        self.vector_bits = 0

    # -- OpenCL --------------------------------------------------------------------------------
    def _init_opencl(self, options: dict[str, str], spec: str) -> None:
        device = opencl_device_facts(options.get("platform"))
        self.max_threads_per_block = (
            _int_option(options, "max-work-group-size", spec)
            or device.get("max_work_group_size") or _OPENCL_DEFAULT_WORK_GROUP)
        self.max_shared_memory_per_block = (
            _int_option(options, "local-memory-size", spec, size=True)
            or device.get("local_mem_size") or _OPENCL_DEFAULT_LOCAL_MEMORY)
        self.model_name = device.get("name")
        self.is_host = False
        # A work-item's vector width is one lane, as a CUDA thread's.
        self.vector_bits = 0

    # -- canonical form --------------------------------------------------------------------------
    def _make_canonical(self) -> str:
        opts = dict(self.options)
        if self.kind == "llvm":
            # Resolved values are written out, so a record says what it was tuned for on any
            # machine that reads it; the host's full feature list is implied by -mcpu and left
            # out to keep the key short.
            for key in ("mtriple", "mcpu", "num-cores", "mattr", "intrinsics"):
                opts.pop(key, None)
            # Declared intrinsics the features already imply are left out (they add nothing),
            # the rest sorted: equal facts, equal strings.
            if self._declared_intrinsics:
                opts["intrinsics"] = ",".join(self._declared_intrinsics)
            parts = ["llvm", f"-mtriple={self.triple}", f"-mcpu={self.cpu}"]
            if self._mattr:
                parts.append("-mattr=" + ",".join(self._mattr))
            parts.append(f"-num-cores={self.num_cores}")
        elif self.kind == "opencl":
            # NOTE: facts read from the device are not written out: the key stays the same
            # string the user wrote, and -platform names the device when that matters.
            parts = ["opencl"]
        else:
            opts.pop("host", None)
            parts = ["cuda"]
            if self.host != Target("llvm"):
                opts["host"] = str(self.host)
        parts.extend(f"-{k}={shlex.quote(v)}" for k, v in sorted(opts.items()))
        return " ".join(parts)

    # -- public ------------------------------------------------------------------------------------
    def vector_lanes(self, dtype: str = "float32") -> int:
        """Elements of ``dtype`` in one SIMD register (1 where there is no SIMD)."""
        return max(1, (self.vector_bits or 0) // dt.bits(dt.canonical(dtype)))

    @property
    def mattr(self) -> tuple[str, ...]:
        """The -mattr feature changes as written ("+avx2", "-avx512f", ...)."""
        return self._mattr

    @property
    def is_cpu(self) -> bool:
        return self.kind == "llvm"

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "opencl")

    def has_feature(self, name: str) -> bool:
        return name.lstrip("+") in self.features

    @property
    def llvm_features(self) -> str:
        """Feature string for an LLVM target machine: the host's full list when the target is
        the host CPU, otherwise just the -mattr changes (the CPU name implies the rest)."""
        if self.kind != "llvm":
            raise TargetError(f"target {self}: llvm_features is for CPU targets")
        info = host_info()
        if self.is_host and self.cpu == info.cpu:
            # LLVM applies features in order and a later entry wins, so the -mattr changes
            # go last (disabling avx512f then also disables the features that need it).
            changed = {a[1:] for a in self._mattr}
            base = sorted(f"+{f}" for f in info.features if f not in changed)
            return ",".join(base + list(self._mattr))
        return ",".join(self._mattr)

    def facts(self) -> dict:
        """The hardware facts as a plain dict (for reports and notebooks)."""
        names = (("triple", "cpu", "model_name", "num_cores", "vector_bits", "l1d_cache",
                  "l2_cache", "l3_cache", "cache_line", "intrinsics", "is_host")
                 if self.kind == "llvm" else
                 ("model_name", "max_threads_per_block", "max_shared_memory_per_block")
                 if self.kind == "opencl" else
                 ("arch", "compute_capability", "max_threads_per_block",
                  "max_shared_memory_per_block", "max_shared_memory_per_block_optin",
                  "warp_size", "registers_per_block", "max_threads_per_multiprocessor"))
        out = {"kind": self.kind, "target": str(self)}
        out.update({n: getattr(self, n) for n in names})
        if self.kind == "llvm":
            out["vector_lanes_float32"] = self.vector_lanes("float32")
        elif self.kind == "cuda":
            out["host"] = str(self.host)
        return out

    # -- registry ----------------------------------------------------------------------------------
    @staticmethod
    def register(name: str, spec: str | Target = "llvm", overwrite: bool = False, *,
                 triple: str | None = None, cpu: str | None = None, features=None,
                 num_cores: int | None = None, vector_width: int | None = None,
                 caches: Mapping[str, int | str] | None = None, intrinsics=None) -> Target:
        """Give ``spec`` a name usable wherever a target string is (``Target(name)``, with
        further options allowed after it).  Returns the target the name stands for.

        The keyword arguments are the facts a user knows about a CPU, each written into the
        registered string as its option (so the canonical string, which tuning records are
        keyed by, carries them and parses again in a process that never registered the
        name): ``triple`` (-mtriple), ``cpu`` (-mcpu), ``features`` ("+avx2,-avx512f" or a
        list of such entries, added to the spec's -mattr), ``num_cores``, ``vector_width``
        (bits), ``caches`` (the sizes known, by level: "l1d", "l2", "l3" in bytes or as
        "32K", "1M", and "line", the cache line in bytes; -l1d-cache, ..., -cache-line) and
        ``intrinsics`` (names registered in :mod:`tensor_ir.intrinsics`, added to the spec's
        -intrinsics; each must exist and, for an LLVM implementation, suit the target's
        architecture and features)::

            Target.register("avx2-4core", "llvm -mcpu=haswell", num_cores=4,
                            caches={"l2": "1M", "line": 64})
            Target.register("my-accel-host", intrinsics=["my_dot_8x4"])
        """
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*", name or ""):
            raise TargetError(f"cannot register target name {name!r}: use letters, digits, "
                              "'_', '.', '-', not starting with '-'")
        if name in KINDS:
            raise TargetError(f"cannot register target name {name!r}: it is a built-in kind")
        text = spec._canonical if isinstance(spec, Target) else spec
        if not isinstance(text, str):
            raise TargetError(f"cannot register target {name!r}: the spec is a string or "
                              f"Target, got {type(spec).__name__}")
        extra = _fact_options(name, text, triple=triple, cpu=cpu, features=features,
                              num_cores=num_cores, vector_width=vector_width, caches=caches,
                              intrinsics=intrinsics)
        if extra:
            text = " ".join([text] + [f"-{k}={shlex.quote(v)}" for k, v in extra])
        target = Target(text)  # validate before storing
        if intrinsics:
            _check_intrinsics(name, target, list(_names_of(intrinsics, "intrinsics", name)))
        with _REGISTRY_LOCK:
            if name in _REGISTRY and not overwrite and _REGISTRY[name] != text:
                raise TargetError(f"target name {name!r} is already registered as "
                                  f"{_REGISTRY[name]!r}; pass overwrite=True to replace it")
            _REGISTRY[name] = text
        return target

    @staticmethod
    def registered() -> dict[str, str]:
        """Registered names and the strings they stand for."""
        with _REGISTRY_LOCK:
            return dict(_REGISTRY)

    @staticmethod
    def unregister(name: str) -> None:
        with _REGISTRY_LOCK:
            if name not in _REGISTRY:
                raise TargetError(f"target name {name!r} is not registered")
            del _REGISTRY[name]

    @staticmethod
    def current_host() -> Target:
        """The machine this process runs on."""
        return Target("llvm")

    # -- value semantics ---------------------------------------------------------------------------
    def __str__(self) -> str:
        return self._canonical

    def __repr__(self) -> str:
        return f"Target({self._canonical!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and other._canonical == self._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __reduce__(self):
        # Rebuilt from the canonical string in the receiving process; for the host target the
        # string names the CPU, so a worker on the same machine gets an equal target.
        return (Target, (self._canonical,))


# ---------------------------------------------------------------------------------------------
# Facts given to Target.register
# ---------------------------------------------------------------------------------------------

def _names_of(value, what: str, name: str) -> tuple[str, ...]:
    """A comma-separated string or a sequence of strings -> the stripped, non-empty entries."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    else:
        raise TargetError(f"cannot register target {name!r}: {what} is a string or a list of "
                          f"strings, got {type(value).__name__}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise TargetError(f"cannot register target {name!r}: {what} entry {item!r} is not "
                              f"a string")
        if item.strip():
            out.append(item.strip())
    return tuple(out)


_CACHE_OPTIONS = {"l1d": "l1d-cache", "l2": "l2-cache", "l3": "l3-cache", "line": "cache-line"}


def _fact_options(name: str, spec: str, **facts) -> list[tuple[str, str]]:
    """The options ``Target.register``'s keyword arguments stand for, in a fixed order.  A list
    option (-mattr, -intrinsics) extends what ``spec`` already says rather than replacing it."""
    written = _resolve(spec)[1]
    out: list[tuple[str, str]] = []
    for key, option in (("triple", "mtriple"), ("cpu", "mcpu")):
        value = facts[key]
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise TargetError(f"cannot register target {name!r}: {key} must be a "
                                  f"non-empty string, got {value!r}")
            out.append((option, value.strip()))
    for key, option in (("features", "mattr"), ("intrinsics", "intrinsics")):
        value = facts[key]
        if value is None:
            continue
        entries = _names_of(value, key, name)
        if key == "features":
            # A bare feature name means "on", as the feature lists of CPU manuals read.
            entries = tuple(e if e[0] in "+-" else "+" + e for e in entries)
        before = tuple(e for e in written.get(option, "").split(",") if e.strip())
        if entries:
            out.append((option, ",".join(before + entries)))
    caches = {} if facts["caches"] is None else facts["caches"]
    if not isinstance(caches, Mapping) or set(caches) - set(_CACHE_OPTIONS):
        raise TargetError(f"cannot register target {name!r}: caches maps some of "
                          f"{', '.join(map(repr, _CACHE_OPTIONS))} to sizes, got {caches!r}")
    for key, option, value, size in (
            ("num_cores", "num-cores", facts["num_cores"], False),
            ("vector_width", "vector-width", facts["vector_width"], False),
            *((f"caches[{k!r}]", opt, caches.get(k), k != "line")
              for k, opt in _CACHE_OPTIONS.items())):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, str)) or (
                isinstance(value, str) and not size):
            raise TargetError(f"cannot register target {name!r}: {key} must be a positive "
                              f"integer{' or a size such as 32K' if size else ''}, got "
                              f"{value!r}")
        out.append((option, str(value)))
    return out


def _check_intrinsics(name: str, target: Target, names: list[str]) -> None:
    """Each declared intrinsic is registered and, when LLVM emits it, fits the target's
    architecture and features (its kernels would fail to build otherwise)."""
    from . import intrinsics as registry  # imported here: it pulls in te and llvmlite

    arch = _arch_of(target.triple or "")
    for intrin_name in names:
        try:
            intrin = registry.get(intrin_name)
        except registry.IntrinsicError as err:
            raise TargetError(f"cannot register target {name!r}: {err}") from None
        impl = intrin.impl
        if isinstance(impl, registry.LLVMImpl):
            if arch not in {_ARCH_ALIASES.get(a, a) for a in impl.arch}:
                raise TargetError(f"cannot register target {name!r}: tensor intrinsic "
                                  f"{intrin_name} needs a {' or '.join(impl.arch)} target, "
                                  f"this one is {target.triple}")
            missing = [f for f in impl.features if not target.has_feature(f)]
            if missing:
                raise TargetError(f"cannot register target {name!r}: tensor intrinsic "
                                  f"{intrin_name} needs the features {', '.join(missing)}, "
                                  f"which {target} does not have (add them with features=)")
