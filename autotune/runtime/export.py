"""Exporting a built model: one shared library with an entry that runs every kernel, its
weights and its metadata, loadable with numpy and ctypes alone.

    lib = autotune.build(model, "llvm")
    lib.export_library("resnet18_artifact")      # a folder, see below

    # Elsewhere, with numpy installed and nothing else:
    from loader import load                      # sys.path holds the folder
    m = load("resnet18_artifact")
    outputs = m.run({"input": x})

The folder holds:

    model-<digest>.so
                  every kernel of the model, and the entry (C signature below) that calls them
                  in the executor's order with pointers into the workspace and the weights
    weights.bin   the weights the kernels read (pre-packed ones included), each at a 64-byte
                  aligned offset, as raw bytes in the machine's byte order
    model.json    format and version, inputs and outputs (name, shape, dtype, offset), the
                  workspace size and alignment, the weights' offsets, the entry's name
    loader.py     the loader (a copy of autotune/runtime/deploy_loader.py)

    int32_t model_run(void *workspace, const void *weights,
                      const void *const *inputs, void *const *outputs);

How the library is made: the optimised LLVM module of every distinct kernel (what the executor's
kernels were compiled from) is linked into one module with a generated entry function, and that
module is emitted as one object without optimising it again, so the kernels are the same machine
code the built model runs; ``autotune.runtime.build.link_shared`` links it against libm as
``Kernel.export_library`` does for one kernel (the ``ziglang`` wheel's linker where it is
installed, else the system's ``cc``).  When kernels have parallel loops the module also carries
the parallel runtime (tensor_ir/codegen/threadpool.py, a copy of its own, none of it exported),
and the entry holds the team for the run (``tir_pool_hold`` before the first kernel,
``tir_pool_release`` after the last), so no worker falls asleep between the kernels; libgomp is
linked only for kernels built with the "gomp" parallel runtime.  Each kernel's symbols but its
entry are internal already (outlined parallel bodies); its entry is renamed to a name unique in
the model and made internal too, and so is its metadata constant (``META_SYMBOL``, which every
kernel module defines): the library exports the entry alone.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from tensor_ir.codegen import threadpool
from tensor_ir.codegen.checks import FAULT_SUFFIX
from tensor_ir.codegen.compile import LLVMTarget, host_triple, target_machine
from tensor_ir.codegen.types import I1, I8, I32, I64, PTR, VOID, symbol_name
from tensor_ir.errors import BuildError
from tensor_ir.intrinsics import libraries_of
from tensor_ir.target import Target, TargetError

from . import deploy_loader
from .build import link_shared
from ..graph.passes import ALIGNMENT

__all__ = ["ENTRY", "export_executor"]

ENTRY = "model_run"
# What model_run returns when a kernel's index check failed, and the exported array of three
# int64 it then fills: the step, the check's number (1-based), the index.
INDEX_ERROR = 3
FAULT_RECORD = "model_fault"
WEIGHTS_FILE = "weights.bin"
LOADER_FILE = "loader.py"


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


class _Layout:
    """Where every value of the executor lives: ("workspace" | "weights", byte offset).

    The workspace places the memory plan's storages one after another (each size is a
    multiple of ALIGNMENT already); a value in a storage starts at the storage's start, as in
    the executor.  Values without storage are weights, or views of weights: the executor's
    arrays for them are its aligned copies, and a view shares its source's data, so the
    weights file holds one copy per distinct (data pointer, size)."""

    def __init__(self, executor):
        self._executor = executor
        self.storage_offsets = []
        offset = 0
        for size in executor.plan.sizes:
            self.storage_offsets.append(offset)
            offset += _align(size)
        self.workspace_bytes = offset
        self.weights: list[dict] = []
        self.weights_bytes = 0
        self._arrays: list[np.ndarray] = []
        self._offsets: dict[tuple[int, int], int] = {}

    def locate(self, value: str) -> tuple[str, int]:
        ex = self._executor
        sid = ex.plan.storage.get(value)
        if sid is not None:
            return "workspace", self.storage_offsets[sid]
        array = ex._arrays.get(value)
        if array is None:
            raise BuildError(f"export_library: value {value!r} of {ex.model.name} has neither "
                             f"storage nor data")
        key = (array.ctypes.data, array.nbytes)
        offset = self._offsets.get(key)
        if offset is None:
            offset = self._offsets[key] = self.weights_bytes
            self._arrays.append(np.ascontiguousarray(array))
            self.weights.append({"name": value, "shape": list(array.shape),
                                 "dtype": str(array.dtype), "offset": offset})
            self.weights_bytes = _align(offset + array.nbytes)
        return "weights", offset

    def write_weights(self, path: str) -> str:
        """Write the weights file (each weight at its offset, zeros between); returns its
        SHA-256."""
        digest = hashlib.sha256()
        written = 0
        with open(path, "wb") as f:
            for entry, array in zip(self.weights, self._arrays):
                for chunk in (b"\0" * (entry["offset"] - written), array.tobytes()):
                    f.write(chunk)
                    digest.update(chunk)
                written = entry["offset"] + array.nbytes
            pad = b"\0" * (self.weights_bytes - written)
            f.write(pad)
            digest.update(pad)
        return digest.hexdigest()


def _kernel_module(kernel, symbol: str) -> llvm.ModuleRef:
    """The optimised module of ``kernel`` with its entry renamed to ``symbol``, its fault
    global (the index of a failed check) to ``symbol + FAULT_SUFFIX``, and every other
    definition internal (those two are made internal once the entry is linked to them)."""
    module = llvm.parse_assembly(kernel.compiled_module.llvm_ir)
    for fn in module.functions:
        if fn.is_declaration:
            continue
        if fn.name == kernel.entry_name:
            fn.name = symbol
        else:
            fn.linkage = "internal"
    fault = kernel.entry_name + FAULT_SUFFIX
    for gv in module.global_variables:
        if gv.is_declaration:
            continue
        if gv.name == fault:
            gv.name = symbol + FAULT_SUFFIX
        else:
            gv.linkage = "internal"
    return module


def _entry_module(steps: list[tuple[str, list[tuple[str, int]]]], nparams: dict,
                  inputs: list[tuple[int, int]], outputs: list[tuple[str, int, int]],
                  weights_needed: bool, triple: str, hold_team: bool = False,
                  checked: frozenset = frozenset()) -> ir.Module:
    """``int32_t model_run(workspace, weights, inputs, outputs)``: copy the inputs in, call
    ``steps`` ((kernel symbol, [(region, offset)]) in order), copy the outputs out.
    ``hold_team``: the thread pool's team is held from before the input copies (which gives
    sleeping workers that time to wake) until after the last kernel.

    ``inputs``: (workspace offset, bytes) per input; ``outputs``: (region, offset, bytes)
    per output.  Returns 1 or 2 for an unusable workspace or weights pointer (NULL or not
    aligned: the kernels were compiled for, and tuned on, aligned buffers), 3 when a kernel
    of ``checked`` (symbols) failed an index check: ``model_fault`` then holds the step, the
    check's number and the index (FAULT_RECORD)."""
    module = ir.Module(name="model_entry")
    module.triple = triple
    fn = ir.Function(module, ir.FunctionType(I32, [PTR] * 4), ENTRY)
    workspace, weights, input_ptrs, output_ptrs = fn.args
    for arg, name in zip(fn.args, ("workspace", "weights", "inputs", "outputs")):
        arg.name = name
    memcpy = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, I1]),
                         "llvm.memcpy.p0.p0.i64")
    kernels, faults = {}, {}
    for symbol, count in nparams.items():
        kernels[symbol] = ir.Function(module, ir.FunctionType(I32, [PTR] * count), symbol)
        if symbol in checked:
            faults[symbol] = ir.GlobalVariable(module, I64, symbol + FAULT_SUFFIX)
    record = None
    if faults:
        record = ir.GlobalVariable(module, ir.ArrayType(I64, 3), FAULT_RECORD)
        record.initializer = ir.Constant(ir.ArrayType(I64, 3), [0, 0, 0])

    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)

    def fail_unless_aligned(ptr, code: int, label: str) -> None:
        # ptr != NULL and ptr % ALIGNMENT == 0, else return code.
        bits = b.ptrtoint(ptr, I64)
        bad = b.or_(b.icmp_unsigned("==", bits, ir.Constant(I64, 0)),
                    b.icmp_unsigned("!=", b.and_(bits, ir.Constant(I64, ALIGNMENT - 1)),
                                    ir.Constant(I64, 0)))
        fail = fn.append_basic_block(f"bad_{label}")
        ok = fn.append_basic_block(f"{label}_ok")
        b.cbranch(bad, fail, ok)
        b.position_at_end(fail)
        b.ret(ir.Constant(I32, code))
        b.position_at_end(ok)

    fail_unless_aligned(workspace, 1, "workspace")
    if weights_needed:
        fail_unless_aligned(weights, 2, "weights")

    bases = {"workspace": workspace, "weights": weights}

    def at(region: str, offset: int):
        return b.gep(bases[region], [ir.Constant(I64, offset)], inbounds=True,
                     source_etype=I8)

    def copies(table, label: str, copy) -> None:
        # Skipped as a whole when the caller passes NULL for the table.
        if not table:
            return
        do = fn.append_basic_block(f"copy_{label}")
        done = fn.append_basic_block(f"{label}_copied")
        is_null = b.icmp_unsigned("==", b.ptrtoint(copy[0], I64), ir.Constant(I64, 0))
        b.cbranch(is_null, done, do)
        b.position_at_end(do)
        for k, item in enumerate(table):
            slot = b.gep(copy[0], [ir.Constant(I64, k)], inbounds=True, source_etype=PTR)
            copy[1](b.load(slot, typ=PTR), item)
        b.branch(done)
        b.position_at_end(done)

    def copy_in(src, item) -> None:
        offset, nbytes = item
        b.call(memcpy, [at("workspace", offset), src, ir.Constant(I64, nbytes),
                        ir.Constant(I1, 0)])

    def copy_out(dst, item) -> None:
        region, offset, nbytes = item
        b.call(memcpy, [dst, at(region, offset), ir.Constant(I64, nbytes), ir.Constant(I1, 0)])

    release = ir.Function(module, ir.FunctionType(VOID, []), threadpool.RELEASE) \
        if hold_team else None
    if hold_team:
        b.call(ir.Function(module, ir.FunctionType(VOID, []), threadpool.HOLD), [])
    copies(inputs, "inputs", (input_ptrs, copy_in))
    for k, (symbol, args) in enumerate(steps):
        status = b.call(kernels[symbol], [at(region, offset) for region, offset in args])
        if symbol not in faults:
            continue
        fail = fn.append_basic_block(f"step{k}_failed")
        ok = fn.append_basic_block(f"step{k}_ok")
        b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), fail, ok)
        b.position_at_end(fail)
        for slot, value in enumerate((ir.Constant(I64, k), b.zext(status, I64),
                                      b.load(faults[symbol], typ=I64))):
            # (By address: llvmlite types a global's pointer, and a GEP from it would be
            # typed as the array, not as its int64 elements.)
            at_slot = b.add(b.ptrtoint(record, I64), ir.Constant(I64, 8 * slot))
            b.store(value, b.inttoptr(at_slot, PTR))
        if hold_team:
            b.call(release, [])
        b.ret(ir.Constant(I32, INDEX_ERROR))
        b.position_at_end(ok)
    if hold_team:
        b.call(release, [])
    copies(outputs, "outputs", (output_ptrs, copy_out))
    b.ret(ir.Constant(I32, 0))
    return module


def export_executor(executor, path: str | os.PathLike) -> str:
    """Write ``executor`` (a CPU Executor) as a deployable folder at ``path`` (created, or
    replaced when it holds an earlier export); see the module text.  Returns the folder.
    BuildError when the model cannot be exported (a kernel for another machine, no C
    compiler); TargetError for a non-CPU executor."""
    target = Target(executor.target)
    if not target.is_cpu:
        raise TargetError(f"export_library writes CPU (llvm) models; this executor runs on "
                          f"a {target.kind} target ({executor.target!r})")
    folder = os.fspath(path)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise BuildError(f"export_library({folder!r}): the path exists and is not a folder")
    if os.path.isdir(folder) and os.listdir(folder) and not os.path.exists(
            os.path.join(folder, deploy_loader.METADATA_FILE)):
        raise BuildError(f"export_library({folder!r}): the folder is not empty and holds no "
                         f"earlier export; choose an empty or new folder")
    model = executor.model
    layout = _Layout(executor)

    # 1. One symbol per distinct kernel, and the calls in the executor's order.
    symbols: dict[int, str] = {}
    nparams: dict[str, int] = {}
    modules = []
    machines = set()
    triple = ""
    steps = []
    for k, step in enumerate(executor.steps):
        kernel = step.kernel
        symbol = symbols.get(id(kernel))
        if symbol is None:
            triple = getattr(kernel, "triple", "") or triple
            if triple and triple.split("-")[0] != host_triple().split("-")[0]:
                raise BuildError(f"export_library: kernel {kernel.entry_name} is compiled for "
                                 f"{triple}; the system C compiler links shared libraries "
                                 f"for this host ({host_triple()}) only")
            compiled = getattr(kernel, "compiled_module", None)
            if compiled is None:
                raise BuildError(f"export_library: kernel {kernel.entry_name} of step "
                                 f"{step.name} holds no compiled module (was it loaded from a "
                                 f"file?); build the model again to export it")
            machines.add(compiled.target)
            func = getattr(kernel, "func", None)
            external = libraries_of(func) if func is not None else []
            if external:
                # Refused rather than exported broken: the library would find these symbols
                # only in a process that loaded them already.  Copying the libraries beside
                # it and linking with an $ORIGIN rpath would lift this.
                raise BuildError(f"export_library: kernel {kernel.entry_name} calls external "
                                 f"tensor intrinsics from {external}; models using them "
                                 f"cannot be exported yet")
            symbol = symbols[id(kernel)] = f"k{len(symbols)}_{symbol_name(kernel.entry_name)}"
            nparams[symbol] = len(kernel.params)
            modules.append((kernel, symbol))
        if len(step.args) != nparams[symbol]:
            raise BuildError(f"export_library: step {k} ({step.name}) passes "
                             f"{len(step.args)} arguments to a kernel of {nparams[symbol]}")
        steps.append((symbol, [layout.locate(v) for v in step.args]))

    def describe(name: str, **where) -> dict:
        t = model.types[name]
        return {"name": name, "shape": list(t.shape), "dtype": str(np.dtype(t.dtype)), **where}

    inputs_meta = [describe(name, offset=layout.locate(name)[1]) for name in model.inputs]
    outputs_meta = []
    for name in model.outputs:
        region, offset = layout.locate(name)
        outputs_meta.append(describe(name, region=region, offset=offset))

    # 2. The entry, linked with the kernels' optimised modules into one module and object.
    triple = triple or host_triple()
    try:
        kernel_modules = [(_kernel_module(kernel, symbol), symbol) for kernel, symbol in modules]
    except RuntimeError as err:
        raise BuildError(f"export_library: reading the kernels of {model.name} failed: "
                         f"{err}") from err
    pooled = any(_calls(module, threadpool.LAUNCH) for module, _ in kernel_modules)
    checked = frozenset(symbol for kernel, symbol in modules if kernel.checks)
    entry = _entry_module(
        steps, nparams,
        [(e["offset"], model.types[e["name"]].nbytes) for e in inputs_meta],
        [(e["region"], e["offset"], model.types[e["name"]].nbytes) for e in outputs_meta],
        layout.weights_bytes > 0, triple, hold_team=pooled, checked=checked)
    # The kernels of one build are compiled for one machine; the module is emitted for it.
    if len(machines) > 1:
        raise BuildError(f"export_library: the kernels of {model.name} are compiled for "
                         f"{len(machines)} different machines; build the model again")
    machine = target_machine(machines.pop() if machines else LLVMTarget())
    try:
        combined = llvm.parse_assembly(str(entry))
        combined.data_layout = str(machine.target_data)
        for module, _ in kernel_modules:
            combined.link_in(module)
        if pooled:
            combined.link_in(threadpool.runtime_module(machine, triple))
            for name in threadpool.ENTRY_POINTS:
                combined.get_function(name).linkage = "internal"
        for _, symbol in modules:
            combined.get_function(symbol).linkage = "internal"
            if symbol in checked:
                combined.get_global_variable(symbol + FAULT_SUFFIX).linkage = "internal"
        combined.verify()
    except RuntimeError as err:
        raise BuildError(f"export_library: linking the kernels of {model.name} failed: "
                         f"{err}") from err
    object_code = machine.emit_object(combined)

    # 3. The folder: library, weights, metadata, loader.  Written under temporary names and
    #    renamed, so an interrupted export does not leave a library beside other weights.
    os.makedirs(folder, exist_ok=True)
    earlier = _earlier_library(folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".export-") as tmp:
        linked = os.path.join(tmp, "model.so")
        link_shared(object_code, linked, with_runtime=False)
        # NOTE: the library's name carries a digest of its content.  A process that loaded
        # an earlier export of this folder keeps that library mapped, and dlopen of the same
        # path (or file) again returns the old one: a new name is what makes a re-export
        # load as itself.
        with open(linked, "rb") as f:
            library = f"model-{hashlib.sha256(f.read()).hexdigest()[:16]}.so"
        os.replace(linked, os.path.join(tmp, library))
        checksum = layout.write_weights(os.path.join(tmp, WEIGHTS_FILE))
        meta = {
            "format": deploy_loader.FORMAT,
            "format_version": deploy_loader.FORMAT_VERSION,
            "model": model.name,
            "target": executor.target,
            "triple": triple,
            "byteorder": sys.byteorder,
            "library": library,
            "entry": ENTRY,
            "signature": f"int32_t {ENTRY}(void *workspace, const void *weights, "
                         f"const void *const *inputs, void *const *outputs)",
            "alignment": ALIGNMENT,
            "workspace_bytes": layout.workspace_bytes,
            "weights_file": WEIGHTS_FILE,
            "weights_bytes": layout.weights_bytes,
            "weights_sha256": checksum,
            "inputs": inputs_meta,
            "outputs": outputs_meta,
            "weights": layout.weights,
            "kernels": [{"step": step.name, "symbol": symbol,
                         "args": [{"value": v, "region": r, "offset": o}
                                  for v, (r, o) in zip(step.args, args)],
                         "checks": _check_args(step.kernel)}
                        for step, (symbol, args) in zip(executor.steps, steps)],
        }
        with open(os.path.join(tmp, deploy_loader.METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
        shutil.copyfile(deploy_loader.__file__, os.path.join(tmp, LOADER_FILE))
        # The metadata last: a folder whose metadata is in place is complete.
        for name in (library, WEIGHTS_FILE, LOADER_FILE, deploy_loader.METADATA_FILE):
            os.replace(os.path.join(tmp, name), os.path.join(folder, name))
    if earlier and earlier != library:
        os.remove(os.path.join(folder, earlier))
    return folder


def _check_args(kernel) -> list[dict]:
    """The kernel's index checks for model.json, each with the argument it indexes (its
    position; None for a buffer of the kernel's own)."""
    names = [p.name for p in kernel.params]
    return [{"arg": names.index(c["buffer"]) if c["buffer"] in names else None,
             "buffer": c["buffer"], "axis": c["axis"], "extent": c["extent"]}
            for c in kernel.checks]


def _calls(module: llvm.ModuleRef, name: str) -> bool:
    """Whether ``module`` declares (so calls) the function ``name``."""
    return any(fn.name == name and fn.is_declaration for fn in module.functions)


def _earlier_library(folder: str) -> str | None:
    """The library file an earlier export in ``folder`` names, if any."""
    try:
        with open(os.path.join(folder, deploy_loader.METADATA_FILE), encoding="utf-8") as f:
            name = json.load(f).get("library")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(name, str) and os.path.basename(name) == name and \
            os.path.isfile(os.path.join(folder, name)):
        return name
    return None

