"""Building a whole model: optimize, fuse, schedule each fused function, compile, plan memory.

    lib = build_model(model, "llvm")                          # default schedules
    lib = build_model(model, "llvm", database="tuning.db")    # best records where there are
                                                              # (or those chosen in the model)
    lib = build_model(model, "llvm", lookup=my_lookup)        # lookup(func) -> trace or None
    lib = build_model(Partition.of(model), "llvm")            # a partition made beforehand
    lib = build_model(model, "opencl", database="tuning.db")  # OpenCL kernels, device buffers
    lib.run({"input": x}); lib.report.coverage; lib.report.fallbacks

``autotune.build(model, target)`` dispatches here for a Model.  Each fused function is looked
up by its workload (the structural hash of the unscheduled function): with a record its trace
is replayed (schedules.postproc.replay); without one the default schedule is used: the
function's design space with rule-of-thumb decisions (parallel outer loops, vectorised and
register-blocked inner loops, see schedules.default_schedule), or the plain loop nest when the
space yields no valid program.  Identical fused functions are scheduled and compiled once;
the scheduled functions and compiled kernels are also cached for the process, so building
the same model again is cheap.

The target's backend (autotune.backends) compiles the kernels, gives the default schedule and
the device the executor keeps its buffers on.  On an ``opencl`` or ``cuda`` target the
records are those tuned for it, the default schedule is a sample at the build's seed of the
GPU design space restricted to inlining and binding (autotune.backends.gpu), and the
executor keeps weights and intermediates on the device (autotune.runtime.gpu_executor).
Weights are not prepacked there: a packing stage of a GPU schedule runs on the device with the
rest of its function.
"""
from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from typing import Callable

import numpy as np

from records import Database, TuningRecord
from schedules.postproc import replay
from schedules.schedule import Schedule
from schedules.trace import Trace
from tensor_ir.errors import BuildError, TensorIRError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from ..backends import backend_for
from ..runtime.executor import BuildReport, Executor, FunctionReport, Step
from ..frontends import load_model
from ..tuning.history import choose_record
from .ir import Model
from .operators import VIEW
from .tasks import Partition
from ..runtime.prepack import split_packing

__all__ = [
    "DefaultScheduleWarning",
    "MissingRecordWarning",
    "build_model",
    "clear_caches",
    "database_lookup",
    "default_schedule",
]

Lookup = Callable[[PrimFunc], object]


class MissingRecordWarning(UserWarning):
    """A fused function had no tuning record and uses its default schedule."""


class DefaultScheduleWarning(UserWarning):
    """No default schedule could be sampled for a function; it runs as a plain loop nest."""


# Process-wide caches: (target, workload key) -> scheduled func; (target, scheduled hash) ->
# kernel.  Bounded so that a long session building many models does not grow without end.
_CACHE_SIZE = 512
_schedules: OrderedDict = OrderedDict()
_kernels: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()


def _cache_get(cache: OrderedDict, key):
    with _cache_lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _cache_put(cache: OrderedDict, key, value) -> None:
    with _cache_lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)


def clear_caches() -> None:
    """Forget the cached default schedules and compiled kernels."""
    with _cache_lock:
        _schedules.clear()
        _kernels.clear()


def default_schedule(func: PrimFunc, target: Target, seed: int = 0) -> PrimFunc | None:
    """The default schedule of ``func``: its backend's (autotune.backends; on a CPU
    schedules.default_schedule, the program the tuner measures first), cached for the
    process; None when the space yields no valid program."""
    key = (str(target), func.structural_hash(), seed)
    cached = _cache_get(_schedules, key)
    if cached is not None:
        return cached
    try:
        scheduled = backend_for(target).default_schedule(func, target, seed)
    except (TensorIRError, RecursionError):
        scheduled = None
    if scheduled is None:
        return None
    _cache_put(_schedules, key, scheduled)
    return scheduled


def _apply_record(func: PrimFunc, found, target: Target) -> PrimFunc:
    """The scheduled function a lookup returned: a Trace or TuningRecord (replayed by
    schedules.postproc.replay), a Schedule or a PrimFunc (taken as scheduled)."""
    if isinstance(found, PrimFunc):
        return found
    if isinstance(found, Schedule):
        return found.func
    if isinstance(found, TuningRecord):
        found = found.trace()
    if not isinstance(found, Trace):
        raise BuildError(f"the record lookup returned a {type(found).__name__}; expected a "
                         f"Trace, Schedule, PrimFunc or TuningRecord")
    return replay(found, func, target).func


def database_lookup(database, target: Target, context: str | None = None) -> Lookup:
    """A lookup over a records database (a ``records.Database``, or a path to open): the
    program of the record :func:`autotune.tuning.history.choose_record` picks for a function (the
    one chosen for it in ``context``, a model's name, else the best by score that replays)."""
    if isinstance(database, (str, os.PathLike)):
        database = Database(os.fspath(database), create=False, readonly=True)
    if not isinstance(database, Database):
        raise BuildError(f"database must be a records.Database or a path, got "
                         f"{type(database).__name__}")

    def lookup(func: PrimFunc):
        return choose_record(database, func, target, context).func
    return lookup


def _compile(func: PrimFunc, target: Target, name: str):
    key = (str(target), func.structural_hash())
    kernel = _cache_get(_kernels, key)
    if kernel is None:
        kernel = backend_for(target).compile(func, target, name=name)
        _cache_put(_kernels, key, kernel)
    return kernel


def build_model(model, target: str | Target | None = "llvm", database=None,
                lookup: Lookup | None = None, seed: int = 0, warn: bool = True,
                prepack: bool = True) -> Executor:
    """Compile ``model`` (a Model, its Partition as a tuning run made it, or anything
    ``load_model`` takes) for ``target``: a CPU (``llvm``) target gives an Executor, an
    ``opencl`` or ``cuda`` one a GPUExecutor (see the module text; BuildError when no OpenCL
    device matches the target, or for cuda without pycuda or a GPU).

    ``lookup(func) -> trace | None`` supplies tuning records (``apply_history_best`` passes
    one); ``database`` (a records.Database or a path) builds such a lookup; with neither, every
    function uses its default schedule (``seed`` picks it).  With a lookup, each function
    without a record is reported in one MissingRecordWarning.  The returned executor's
    ``report`` says which functions used a record, weighted by their share of FLOPs.
    ``prepack``: a schedule's packing of a weight into another layout is done once here (see
    autotune.runtime.prepack) rather than in every call (CPU targets)."""
    if not isinstance(model, (Model, Partition)):
        model = load_model(model)
    part = Partition.of(model)
    target = Target("llvm" if target is None else target)
    backend = backend_for(target)
    # A missing device or GPU runtime is named before any function is scheduled (a CPU
    # target that is not this machine still builds: its kernels are exported).
    device = backend.model_device(target)
    if database is not None:
        if lookup is not None:
            raise BuildError("build_model: pass database= or lookup=, not both")
        lookup = database_lookup(database, target, part.name)
    optimized, groups, funcs, plan = part.model, part.groups, part.funcs, part.plan

    # 1. Schedule and compile every structurally unique function once.
    kernels: dict[str, object] = {}
    scheduled_funcs: dict[str, PrimFunc] = {}
    report = BuildReport(part.name, str(target))
    by_key: dict[str, FunctionReport] = {}
    for group in groups:
        if group.kind == VIEW:
            continue
        gf = funcs[group.output]
        entry = by_key.get(gf.key)
        if entry is not None:
            entry.count += 1
            continue
        scheduled, source = None, "default"
        if lookup is not None:
            found = lookup(gf.func)
            if found is not None:
                try:
                    scheduled, source = _apply_record(gf.func, found, target), "record"
                except (TensorIRError, ValueError) as err:
                    warnings.warn(f"the tuning record of {group.name} [{gf.key[:12]}] does not "
                                  f"apply ({err}); using the default schedule",
                                  MissingRecordWarning, stacklevel=2)
        if scheduled is None:
            scheduled = default_schedule(gf.func, target, seed)
        if scheduled is None:
            warnings.warn(f"no default schedule could be sampled for {group.name} "
                          f"[{gf.key[:12]}]; it runs as a plain loop nest",
                          DefaultScheduleWarning, stacklevel=2)
            scheduled, source = gf.func, "unscheduled"
        kernels[gf.key] = _compile(scheduled, target, f"{group.name}_{gf.key[:8]}")
        scheduled_funcs[gf.key] = scheduled
        entry = by_key[gf.key] = FunctionReport(group.name, gf.key, 1, gf.flops, source)
        report.functions.append(entry)
    if lookup is not None and warn and report.fallbacks:
        names = ", ".join(f"{f.name} [{f.key[:12]}]" for f in report.fallbacks)
        warnings.warn(f"{len(report.fallbacks)} of {len(report.functions)} fused functions of "
                      f"{part.name} have no tuning record for {target} and use default "
                      f"schedules ({1 - report.coverage:.1%} of the FLOPs): {names}",
                      MissingRecordWarning, stacklevel=2)

    # 2. Steps in topological order (weights packed for their kernels), views, memory.
    steps: list[Step] = []
    packed: dict[str, np.ndarray] = {}
    splits: dict[tuple, tuple] = {}
    views: dict[str, str] = {}
    for group in groups:
        if group.kind == VIEW:
            views[group.output] = group.inputs[0]
            continue
        gf = funcs[group.output]
        kernel, args = kernels[gf.key], gf.params + [group.output]
        constant = gf.weight_params
        if constant and prepack and backend.cpu:
            split = splits.get((gf.key, constant))
            if split is None:
                split = splits[gf.key, constant] = _split_packing(
                    group.name, gf.key, scheduled_funcs[gf.key], constant, target)
            if split[1]:
                kernel, args = split[0], _packed_args(args, split[1], optimized.constants,
                                                      packed)
        steps.append(Step(group.name, kernel, args, gf.key))
    if device is not None:
        from ..runtime.gpu_executor import GPUExecutor

        return GPUExecutor(optimized, steps, plan, views, report, str(target), device)
    return Executor(optimized, steps, plan, views, report, str(target), extra_constants=packed)


def _split_packing(name: str, key: str, scheduled: PrimFunc, constant: frozenset,
                   target: Target):
    """(main kernel, [(parameter index, packing kernel, packed value suffix)]) for a function
    whose packing of model weights (``constant``: indices of its parameters that are weights)
    is done once at build instead of in every call; (None, []) when it packs none of them."""
    main, packs = split_packing(scheduled, constant)
    if not packs:
        return None, []
    kernels = [(p.index, _compile(p.pack, target, f"{name}_{key[:8]}_pack{p.index}"),
                p.pack.structural_hash()[:16]) for p in packs]
    return _compile(main, target, f"{name}_{key[:8]}_prepacked"), kernels


def _packed_args(args: list, packs, constants: dict, packed: dict) -> list:
    """``args`` with each packed weight replaced by its packed copy, computed into ``packed``
    the first time (a weight shared by two calls with the same packing is packed once)."""
    args = list(args)
    for index, pack_kernel, suffix in packs:
        value = f"{args[index]}@{suffix}"
        if value not in packed:
            spec = pack_kernel.params[1]  # the packed buffer
            out = np.empty(spec.shape, spec.dtype)
            pack_kernel(np.ascontiguousarray(constants[args[index]]), out)
            packed[value] = out
        args[index] = value
    return args
