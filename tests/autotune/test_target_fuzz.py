"""Property-based fuzzing of target strings: ``autotune.Target(s)`` on random tokens, real and
bogus, either succeeds (and its canonical string parses back to an equal target) or raises
TargetError; nothing else escapes."""
from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import autotune
from autotune import Target, TargetError

_KINDS = ["llvm", "cuda", "LLVM", "llvm ", "opencl", "c", "", "-", "--", "llvm\t"]
_KEYS = ["mcpu", "mattr", "mtriple", "num-cores", "vector-width", "l1d-cache", "l2-cache",
         "l3-cache", "cache-line", "arch", "max-threads-per-block", "warp-size",
         "max-shared-memory-per-block", "registers-per-block", "host", "keys", "device", "",
         "-", "mcpu=", "num_cores"]
_VALUES = ["", "skylake-avx512", "znver4", "cortex-a72", "native", "generic", "bogus-cpu",
           "x86_64-linux-gnu", "aarch64-linux-gnu", "riscv64-unknown-elf", "nonsense-triple",
           "+avx2,+fma", "-avx512f", "avx2", "+", ",", "+avx2,,+fma", "0", "1", "2", "-1",
           "64", "32K", "1M", "1.5", "1e3", "9" * 30, "0x10", "sm_80", "sm_90", "sm_1000",
           "'llvm -num-cores 2'", "'llvm", '"', "\\", "=", "==", "\u00e9", "\u4e2d\u6587",
           "\U0001f600", "\x00", "\n", " "]


@st.composite
def target_strings(draw) -> str:
    tokens = [draw(st.sampled_from(_KINDS))]
    for _ in range(draw(st.integers(0, 4))):
        shape = draw(st.integers(0, 4))
        key, value = draw(st.sampled_from(_KEYS)), draw(st.sampled_from(_VALUES))
        if shape == 0:
            tokens.append(f"-{key}={value}")
        elif shape == 1:
            tokens += [f"-{key}", value]
        elif shape == 2:
            tokens.append(f"--{key}={value}")
        elif shape == 3:
            tokens.append(value)
        else:
            tokens.append(draw(st.text(max_size=6)))
    return draw(st.sampled_from([" ", "  ", "\t"])).join(tokens)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(target_strings())
# A quoted -mcpu with spaces was once accepted and written back unquoted; always try it.
@example("llvm -mcpu 'llvm -num-cores 2'")
@example("llvm -mcpu='llvm -num-cores 2' -num-cores 4")
def test_random_target_strings_give_a_target_or_target_error(spec):
    try:
        target = Target(spec)
    except TargetError:
        return
    assert isinstance(target, autotune.Target)
    assert Target(str(target)) == target
