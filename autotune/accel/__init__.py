"""A simulated accelerator: a 16x16x16 int8 -> int32 GEMM unit with scratchpads and a DMA, its
intrinsic (a C functional model), a cycle-counting runner and a matmul design space.

    from autotune import accel
    func = accel.matmul_int8(256, 256, 256)
    target = accel.accelerator_target()              # also Target("simaccel")
    with accel.AcceleratorRunner() as runner, accel.AcceleratorBuilder() as builder:
        best = autotune.tune(func, target, trials=64, space=accel.design_space(func),
                             runner=runner, builder=builder)
    best.best_time * accel.DEFAULT_ACCELERATOR.clock_hz    # simulated cycles
    accel.simulate(accel.default_schedule(func).func).cycles   # the naive schedule's
    with autotune.apply_history_best(db):
        kernel = accel.build(func)                   # the best program; GEMMs run in the model

Modules: :mod:`.hardware` (the description, the timing parameters, the target),
:mod:`.intrinsic` (the GEMM intrinsic and compiling ``model.c`` into the cache folder,
``~/.cache/autotune/accel`` or :func:`set_cache_dir`'s), :mod:`.timing` (cycles from
the lowered program, capacity verification), :mod:`.space` (design space, default schedule),
:mod:`.runner` (the Runner), :mod:`.builder` (the LocalBuilder whose workers know the
intrinsic).
"""
from __future__ import annotations

from tensor_ir.func import PrimFunc

from .backend import AcceleratorBackend
from .builder import AcceleratorBuilder
from .hardware import (
    ACC_SCOPE,
    DEFAULT_ACCELERATOR,
    INP_SCOPE,
    SCRATCHPAD_SCOPES,
    TARGET_NAME,
    WGT_SCOPE,
    Accelerator,
    AcceleratorError,
    ScratchpadOverflowError,
    UnsupportedProgramError,
    accelerator_target,
)
from .intrinsic import (
    GEMM_INTRIN,
    GEMM_SYMBOL,
    default_cache_dir,
    functional_model,
    gemm_description,
    get_cache_dir,
    set_cache_dir,
)
from .runner import AcceleratorRunner, cycles_of
from .space import (
    VerifyAccelerator,
    default_schedule,
    design_space,
    gemm_template,
    matmul_int8,
    schedule_gemm,
)
from .timing import CycleReport, scratchpad_usage, simulate, verify


def build(func: PrimFunc, cache_dir: str | None = None):
    """``autotune.build(func, accelerator_target())`` after making sure the functional model
    is compiled (the kernel calls it for every GEMM tile).  Under ``apply_history_best`` an
    unscheduled ``func`` is replaced by its best record's program."""
    import autotune

    functional_model(cache_dir)
    return autotune.build(func, accelerator_target())


__all__ = [
    "ACC_SCOPE",
    "DEFAULT_ACCELERATOR",
    "GEMM_INTRIN",
    "GEMM_SYMBOL",
    "INP_SCOPE",
    "SCRATCHPAD_SCOPES",
    "TARGET_NAME",
    "WGT_SCOPE",
    "Accelerator",
    "AcceleratorBackend",
    "AcceleratorBuilder",
    "AcceleratorError",
    "AcceleratorRunner",
    "CycleReport",
    "ScratchpadOverflowError",
    "UnsupportedProgramError",
    "VerifyAccelerator",
    "accelerator_target",
    "build",
    "cycles_of",
    "default_cache_dir",
    "default_schedule",
    "design_space",
    "functional_model",
    "gemm_description",
    "gemm_template",
    "get_cache_dir",
    "matmul_int8",
    "schedule_gemm",
    "scratchpad_usage",
    "set_cache_dir",
    "simulate",
    "verify",
]
