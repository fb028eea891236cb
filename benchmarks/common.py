"""Shared pieces of the benchmark commands: a clean OpenBLAS environment, the BLAS kernel in
use, and interleaved median timing."""
from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable

# The machine presets these to select an older OpenBLAS kernel that is correct on every CPU it
# may run on but about twice slower; a fair comparison needs numpy's best kernel.
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def reexec_without_openblas_env(module: str) -> None:
    """Restart this process (``python -m module``) without OPENBLAS_CORETYPE / L2_SIZE.

    OpenBLAS reads them when numpy is first imported, so they must be gone before that; only
    this benchmark's own process is affected (tests and CI keep the machine's settings).
    """
    if not any(v in os.environ for v in OPENBLAS_VARS):
        return
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARS}
    env["AUTOTUNE_BENCH_UNSET_OPENBLAS"] = ",".join(v for v in OPENBLAS_VARS
                                                     if v in os.environ)
    os.execve(sys.executable, [sys.executable, "-m", module] + sys.argv[1:], env)


def blas_info() -> dict:
    """The BLAS library and kernel numpy uses, as threadpoolctl reports it."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - threadpoolctl is a test dependency
        return {"error": "threadpoolctl not installed"}
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            return {k: info.get(k) for k in ("internal_api", "version", "architecture",
                                             "num_threads")}
    return {}


def environment() -> dict:
    unset = os.environ.get("AUTOTUNE_BENCH_UNSET_OPENBLAS", "")
    return {
        "openblas_vars_unset": [v for v in unset.split(",") if v],
        "blas": blas_info(),
        "cpu_count": os.cpu_count(),
    }


def time_once(fn: Callable[[], None], min_seconds: float = 0.05) -> float:
    """Seconds per call of ``fn``: calls are repeated until a sample lasts ``min_seconds``."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return elapsed / number
        number = max(number * 2, int(number * min_seconds / max(elapsed, 1e-9) * 1.2))


def interleaved_medians(fns: dict[str, Callable[[], None]], rounds: int = 9,
                        min_seconds: float = 0.3, cooldown: float = 0.15,
                        between: Callable[[], None] | None = None) -> dict[str, dict]:
    """Time several callables side by side: each round times every one once, in turn, so a
    change in machine load hits them alike.  Returns per-name median and all samples.
    ``between``, when given, is called before the first round and after every round (e.g.
    to note the host's state around each round).

    NOTE: thread pools keep spinning for a while after a call (OpenBLAS's workers for up to
    ~0.1 s, libgomp's for its spin count) and would steal the cores from whatever runs next;
    ``cooldown`` seconds of sleep before each sample let the previous one's threads park.
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm up: page in buffers, spin up thread pools
    if between is not None:
        between()
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(cooldown)
            samples[name].append(time_once(fn, min_seconds))
        if between is not None:
            between()
    return {name: {"median_s": statistics.median(s), "samples_s": s}
            for name, s in samples.items()}


def round_states(probes: list[float | None]) -> list[str]:
    """The host's state in each timed round from the cross-core probes taken before the
    first round and after every round (``autotune.measure.host.CrossCoreProbe``): "quiet"
    when both probes around a round are under QUIET_FACTOR times the run's lowest, "slow"
    when both are at or over it, "mixed" otherwise, "unknown" where a probe gave nothing."""
    from autotune.measure.host import QUIET_FACTOR

    known = [p for p in probes if p is not None]
    if not known:
        return ["unknown"] * (len(probes) - 1)
    limit = QUIET_FACTOR * min(known)
    out = []
    for before, after in zip(probes, probes[1:]):
        if before is None or after is None:
            out.append("unknown")
        elif before < limit and after < limit:
            out.append("quiet")
        elif before >= limit and after >= limit:
            out.append("slow")
        else:
            out.append("mixed")
    return out


def rounds_by_state(states: list[str]) -> dict[str, list[int]]:
    """The indices of the rounds in each state that occurs (round_states' labels), in the
    order quiet, slow, mixed, unknown."""
    out = {}
    for state in ("quiet", "slow", "mixed", "unknown"):
        picked = [k for k, s in enumerate(states) if s == state]
        if picked:
            out[state] = picked
    return out
