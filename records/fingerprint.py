"""Target fingerprints: the hardware a record was measured on, beyond its target string.

A canonical target string for the host names its triple and LLVM CPU name, but two machines
with one CPU name can still differ (a virtual machine that hides AVX-512, another microcode).
The fingerprint adds the resolved facts: for a CPU target the triple, CPU name, the full set of
enabled features and the vector width; for a GPU target the architecture.  Those are its
*hardware* part: a record is applied only where the hardware part matches.  The library
versions (LLVM, CUDA, the NVIDIA driver) and the CPU model name are kept for reports but do
not decide (a new LLVM or driver still runs a schedule tuned under the old one correctly).
A GPU's name does decide: for ``opencl`` it is all the target string leaves to tell a GPU from
PoCL on a CPU, whose limits (work-group size, local memory) and speed differ; for ``cuda`` two
GPUs of one architecture (an H100 and an H200 are both sm_90) differ in memory bandwidth and
size, so the best schedule of one is not the other's.

A fingerprint is computed by the process that resolves the target, i.e. from
``Target(target_string)`` on the machine that commits (or queries) the records.  A remote
runner may hand its own fingerprint to ``Database.commit_records``.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import lru_cache

from tensor_ir.devices import cuda_device_facts, cuda_version, opencl_device_facts

from .keys import canonical_json

__all__ = ["HARDWARE_FIELDS", "fingerprint_differences", "hardware_hash", "target_fingerprint"]

# The fields that decide whether a record applies (for opencl targets also "device").
HARDWARE_FIELDS = ("kind", "triple", "cpu", "features", "vector_bits", "arch")


def _hardware_fields(fingerprint: Mapping) -> tuple:
    # Only GPU targets add a field, so the hash of every CPU fingerprint is what it was before
    # (records already stored keep matching).
    if fingerprint.get("kind") in ("opencl", "cuda"):
        return HARDWARE_FIELDS + ("device",)
    return HARDWARE_FIELDS


@lru_cache(maxsize=None)
def _llvm_version() -> str | None:
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return None
    return ".".join(str(v) for v in llvm.llvm_version_info)


@lru_cache(maxsize=256)
def _fingerprint_of(canonical: str) -> tuple:
    from tensor_ir.target import Target

    target = Target(canonical)
    # The GPU it runs on here (for cuda device 0, as autotune.runtime.cuda uses); empty facts
    # (no runtime or device here) leave its name unknown rather than failing the record.
    device = (opencl_device_facts(dict(target.options).get("platform"))
              if target.kind == "opencl" else cuda_device_facts() if target.kind == "cuda"
              else {})
    data = {"target": str(target), "kind": target.kind, "triple": target.triple,
            "cpu": target.cpu, "features": sorted(target.features),
            "vector_bits": target.vector_bits, "arch": target.arch,
            "model_name": target.model_name, "llvm_version": _llvm_version(),
            "cuda_version": cuda_version() if target.kind == "cuda" else None,
            "device": device.get("name"), "driver": device.get("driver")}
    return tuple(data.items())


def target_fingerprint(target) -> dict:
    """The fingerprint of ``target`` (a Target or target string) as resolved on this machine."""
    return dict(_fingerprint_of(str(target)))


def hardware_hash(fingerprint: Mapping) -> str:
    """SHA-256 of the hardware part of a fingerprint (what must match for a record to apply)."""
    part = {name: fingerprint.get(name) for name in _hardware_fields(fingerprint)}
    if part["features"] is not None:
        part["features"] = sorted(part["features"])
    return hashlib.sha256(canonical_json(part).encode()).hexdigest()


def fingerprint_differences(stored: Mapping, current: Mapping) -> list[str]:
    """Readable differences in the hardware part, e.g. ``features: -avx512f, +amx-tile`` (what
    the current machine lacks with a minus, what it has in addition with a plus)."""
    out = []
    for name in dict.fromkeys(_hardware_fields(stored) + _hardware_fields(current)):
        a, b = stored.get(name), current.get(name)
        if name == "features":
            a, b = set(a or ()), set(b or ())
            if a != b:
                changes = [f"-{f}" for f in sorted(a - b)] + [f"+{f}" for f in sorted(b - a)]
                shown = ", ".join(changes[:8]) + (", ..." if len(changes) > 8 else "")
                out.append(f"features: {shown}")
        elif a != b:
            out.append(f"{name}: {a} (measured) vs {b} (here)")
    return out
