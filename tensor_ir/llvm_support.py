"""What this process's LLVM accepts for a target triple: CPU names, feature names, and the CPUs
that can generate code for the triple at all.

LLVM has no API that answers "is this CPU valid" without side effects: an unknown ``-mcpu`` is
only warned about, and a CPU that cannot produce code for the triple (``i386`` for x86-64)
aborts the process at code generation ("64-bit code requested on a subtarget that doesn't
support it").  So the answers come from a child process running the same llvmlite:

1. It asks for the ``help`` CPU, which makes LLVM print its CPU and feature tables (to the
   child's stderr, read back through a temporary file).
2. For each CPU it forks, and the fork compiles a one-instruction function for that CPU; the
   CPUs whose fork exits normally can generate code for the triple.
3. It prints the three lists as JSON.

The answer is cached per triple for the life of this process; one probe takes about a second.
When no answer can be had (no fork, a child that fails to start), :func:`llvm_names` returns
None and callers skip the check rather than refuse a target they cannot judge.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass

__all__ = ["LLVMNames", "llvm_names"]


@dataclass(frozen=True)
class LLVMNames:
    """LLVM's tables for one triple."""

    triple: str
    cpus: frozenset        # every CPU name LLVM knows for the triple
    features: frozenset    # every feature name (without + / -)
    usable_cpus: frozenset  # the CPUs that can generate code for the triple


_PROBE = r'''
import json, os, sys, tempfile
import llvmlite.binding as llvm

llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
triple = sys.argv[1]
target = llvm.Target.from_triple(triple)

# 1. LLVM prints its tables to stderr when asked for the CPU "help".
with tempfile.TemporaryFile(mode="w+b") as table:
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(table.fileno(), 2)
    try:
        target.create_target_machine(cpu="help", features="")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    table.seek(0)
    text = table.read().decode("utf-8", "replace")

cpus, features, section = [], [], None
for line in text.splitlines():
    if line.startswith("Available CPUs"):
        section = cpus
    elif line.startswith("Available features"):
        section = features
    elif section is not None and line.startswith("  ") and " - " in line:
        section.append(line.split()[0])

# 2. A CPU that cannot generate code for the triple aborts LLVM: try each in a fork.
source = "define i32 @f(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n"
usable = []
for cpu in cpus:
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            module = llvm.parse_assembly(source)
            module.triple = triple
            target.create_target_machine(cpu=cpu, features="").emit_object(module)
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        usable.append(cpu)

# 3. The answer.
print(json.dumps({"cpus": cpus, "features": features, "usable": usable}))
'''

_CACHE: dict[str, LLVMNames | None] = {}
_LOCK = threading.Lock()


def llvm_names(triple: str) -> LLVMNames | None:
    """LLVM's CPU and feature tables for ``triple`` (cached), or None when they cannot be had."""
    with _LOCK:
        if triple in _CACHE:
            return _CACHE[triple]
    names = _probe(triple)
    with _LOCK:
        _CACHE[triple] = names
    return names


def _probe(triple: str) -> LLVMNames | None:
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, triple], capture_output=True,
                              text=True, timeout=120, check=False)
        if done.returncode != 0:
            return None
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    if not data.get("cpus"):
        return None  # the tables could not be read: no basis for a decision
    return LLVMNames(triple, frozenset(data["cpus"]), frozenset(data["features"]),
                     frozenset(data["usable"]))
