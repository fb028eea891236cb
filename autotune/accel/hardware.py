"""The simulated accelerator's description: its matrix unit, scratchpads, DMA, clock and target.

The machine (in the spirit of TVM's VTA, much simplified)::

    main memory ──DMA──► inp scratchpad (int8)  ─┐
                ──DMA──► wgt scratchpad (int8)  ─┼─► matrix unit: C[16,16] += A[16,16] @ B[16,16]
                ◄──DMA── acc scratchpad (int32) ◄┘   (int8 x int8 -> int32, one GEMM instruction)

- **Matrix unit**: one instruction multiplies a 16x16 int8 tile of the input scratchpad by a
  16x16 int8 tile of the weight scratchpad and adds the product into a 16x16 int32 tile of the
  accumulator scratchpad (a 16x16x16 GEMM tile).  It takes ``mac_cycles`` cycles (16: one row
  of the output tile per cycle).  It reads and writes scratchpads only.
- **Accumulator reset**: zeroing accumulator elements takes one cycle per ``reset_lanes``
  elements of a reset instruction (a reset instruction is one loop nest of zero stores).
- **Scratchpads**: storage scopes ``local.inp_buffer``, ``local.wgt_buffer`` and
  ``local.acc_buffer`` (tagged local scopes, see tensor_ir.buffer), each with a capacity in
  bytes.  A program whose scratchpad allocations of one scope add up to more than its capacity
  is refused with :class:`ScratchpadOverflowError`.
- **DMA**: a copy between main memory and a scratchpad is one transfer per execution of its
  copy loop nest (any rectangular region: the engine walks strides itself); it costs
  ``dma_setup_cycles + ceil(bytes / dma_bytes_per_cycle)`` cycles.
- **Overlap**: none.  The accelerator executes one in-order instruction stream: each transfer,
  reset and GEMM waits for the one before it, so the total is the sum of their cycles.  (VTA
  hides load latency behind compute with double buffering; this design space has no double
  buffering to choose, so modelling it would reward nothing the search can pick.)
- **Clock**: ``clock_hz``; cycles become seconds as ``cycles / clock_hz`` wherever the tuner
  expects a time (records, search, apply_history_best).

The host side (loop control, address arithmetic) is free: the accelerator's instruction
fetch runs ahead of it, as a decoupled access/execute machine's does.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensor_ir.errors import TensorIRError
from tensor_ir.target import Target, TargetError, host_info

__all__ = [
    "ACC_SCOPE",
    "DEFAULT_ACCELERATOR",
    "INP_SCOPE",
    "SCRATCHPAD_SCOPES",
    "TARGET_NAME",
    "WGT_SCOPE",
    "Accelerator",
    "AcceleratorError",
    "ScratchpadOverflowError",
    "UnsupportedProgramError",
    "accelerator_target",
]

INP_SCOPE = "local.inp_buffer"
WGT_SCOPE = "local.wgt_buffer"
ACC_SCOPE = "local.acc_buffer"
SCRATCHPAD_SCOPES = (INP_SCOPE, WGT_SCOPE, ACC_SCOPE)

# The registered target name.  A registered name resolves to its llvm string, so the name
# alone would not set the accelerator's records apart from the host CPU's; the vendor field of
# the triple does (see accelerator_target).
TARGET_NAME = "simaccel"
VENDOR = "simaccel"


class AcceleratorError(TensorIRError, ValueError):
    """The simulated accelerator cannot run a program, or its functional model cannot be
    built; the message says what and where."""


class ScratchpadOverflowError(AcceleratorError):
    """A program's buffers in a scratchpad scope exceed the scratchpad's capacity."""


class UnsupportedProgramError(AcceleratorError):
    """A program does something the accelerator has no instruction for (a computation other
    than the GEMM tile and accumulator resets, a GEMM operand outside its scratchpad, ...)."""


@dataclass(frozen=True)
class Accelerator:
    """The accelerator's facts (see the module text for what each one means).

    The GEMM tile is fixed at 16x16x16 (the functional model in ``model.c`` implements that
    shape); the rest may be changed to model a bigger or slower variant."""

    inp_bytes: int = 32 * 1024
    wgt_bytes: int = 32 * 1024
    acc_bytes: int = 64 * 1024
    clock_hz: float = 100e6
    mac_cycles: int = 16
    reset_lanes: int = 16
    dma_setup_cycles: int = 64
    dma_bytes_per_cycle: int = 8

    #: The GEMM tile (rows of A, columns of B, reduction length).
    tile = (16, 16, 16)

    def __post_init__(self):
        for name in ("inp_bytes", "wgt_bytes", "acc_bytes", "mac_cycles", "reset_lanes",
                     "dma_bytes_per_cycle"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise AcceleratorError(f"Accelerator.{name} must be an int >= 1, got {value!r}")
        if not (isinstance(self.dma_setup_cycles, int) and self.dma_setup_cycles >= 0):
            raise AcceleratorError(f"Accelerator.dma_setup_cycles must be an int >= 0, got "
                                   f"{self.dma_setup_cycles!r}")
        if not self.clock_hz > 0:
            raise AcceleratorError(f"Accelerator.clock_hz must be > 0, got {self.clock_hz!r}")

    @property
    def scratchpads(self) -> dict[str, int]:
        """Capacity in bytes of each scratchpad scope."""
        return {INP_SCOPE: self.inp_bytes, WGT_SCOPE: self.wgt_bytes, ACC_SCOPE: self.acc_bytes}

    def dma_cycles(self, nbytes: int) -> int:
        """Cycles of one DMA transfer of ``nbytes`` bytes."""
        return self.dma_setup_cycles + -(-nbytes // self.dma_bytes_per_cycle)

    def seconds(self, cycles: int) -> float:
        """``cycles`` at the accelerator's clock, in seconds."""
        return cycles / self.clock_hz

    def facts(self) -> dict:
        """The description as a plain dict (for reports and notebooks)."""
        return {"gemm_tile": self.tile, "scratchpads": self.scratchpads,
                "clock_hz": self.clock_hz, "mac_cycles": self.mac_cycles,
                "reset_lanes": self.reset_lanes, "dma_setup_cycles": self.dma_setup_cycles,
                "dma_bytes_per_cycle": self.dma_bytes_per_cycle}


DEFAULT_ACCELERATOR = Accelerator()


def accelerator_target() -> Target:
    """The accelerator's target: the host CPU (which runs the loops and, through the functional
    model, the GEMM tiles) with the triple's vendor field set to ``simaccel`` and one core
    (the accelerator executes one instruction stream).  Registered as ``simaccel``, so
    ``Target("simaccel")`` names it too.

    The vendor field is what sets its records apart from the plain CPU's: ``str(target)``
    (the key records are stored under) reads ``llvm -mtriple=x86_64-simaccel-linux-gnu ...``,
    while code generation for an unknown vendor is the same as for the host."""
    host = host_info().triple
    parts = host.split("-")
    if len(parts) < 3:
        raise AcceleratorError(f"cannot derive the accelerator's triple from the host triple "
                               f"{host!r} (expected arch-vendor-os[-env])")
    triple = "-".join([parts[0], VENDOR] + parts[2:])
    spec = f"llvm -mtriple={triple} -num-cores=1"
    try:
        return Target.register(TARGET_NAME, spec, overwrite=True)
    except TargetError as err:
        raise AcceleratorError(f"cannot register the accelerator's target {spec!r}: "
                               f"{err}") from err


# Registered at import, so that ``Target("simaccel")`` resolves in any process that imported
# autotune.accel.
accelerator_target()
