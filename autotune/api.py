"""autotune.build: compile a PrimFunc or a whole model, with the best tuning records of the
active ``apply_history_best`` context.

    kernel = autotune.build(func, "llvm")            # the schedule as written
    with autotune.apply_history_best("tuning.db"):
        kernel = autotune.build(func, "llvm")        # the best record's program (or the default)
        lib = autotune.build(model, "llvm")          # every fused function from its record

The layers below take what they need explicitly: :func:`autotune.runtime.build.build` compiles a
function as scheduled, :func:`autotune.graph.build.build_model` takes a record lookup.  Only
this entry point reads the thread's context.
"""
from __future__ import annotations

from tensor_ir.errors import BuildError
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from .backends import backend_for
from .runtime.build import Kernel
from .runtime.executor import Executor
from .runtime.opencl import GPUKernel
from .graph.ir import Model
from .tuning.history import ApplyHistoryBest, MissingRecordError, current
from .graph.build import build_model, default_schedule

__all__ = ["build"]


def build(func: PrimFunc | Model, target: str | Target | None = "llvm",
          name: str | None = None) -> Kernel | GPUKernel | Executor:
    """Compile ``func`` (a PrimFunc, or a Model from ``load_model``) for ``target``.  Under
    ``apply_history_best`` an unlowered function is replaced by its best record's program
    (by its default schedule when it has none); otherwise a function builds as scheduled and
    a model with default schedules.  ``name``: a kernel's symbol.  The target's backend
    (autotune.backends) compiles it: an ``opencl`` or ``cuda`` target gives a GPU kernel."""
    context = current()
    if not isinstance(func, (PrimFunc, Model)):
        raise BuildError(f"build takes a PrimFunc or a Model, got {type(func).__name__}")
    resolved = Target("llvm" if target is None else target)
    if isinstance(func, Model):
        return _build_model(func, resolved, context)
    if context is not None and not func.attr("lowered"):
        scheduled = context.lookup(func, resolved)
        if scheduled is None:
            # No usable record: the default schedule, as the context's warning says and as a
            # model's functions get, rather than the plain loop nest.
            scheduled = default_schedule(func, resolved)
        if scheduled is not None:
            func = scheduled
    return backend_for(resolved).compile(func, resolved, name)


def _build_model(model: Model, target: Target, context: ApplyHistoryBest | None) -> Executor:
    """Every fused function takes its best record from the context (default schedules
    otherwise); a strict context raises once, naming every function without a record."""
    if context is None:
        return build_model(model, target)
    before = len(context.entries)
    strict = context.strict
    context.strict = False  # collect every missing workload, then raise once naming them all
    try:
        lib = build_model(model, target,
                          lookup=lambda f: context.lookup(f, target, model.name), warn=False)
    finally:
        context.strict = strict
    missing = [e for e in context.entries[before:] if not e.served]
    if strict and missing:
        names = ", ".join(f"{e.name} [{e.workload_key[:12]}]" for e in missing)
        raise MissingRecordError(f"apply_history_best(strict=True): {len(missing)} workload(s) "
                                 f"of {model.name} have no tuning record for {target}: {names}")
    return lib
