"""The timing protocol every measuring worker follows, whatever its device: outputs poisoned
before the warm-up, repeats grown to ``min_repeat_ms`` and stopped early for a candidate far
slower than the best (:func:`timed_repeats`), then inputs checked unchanged and outputs
compared with the reference (:func:`check_after_timing`, :func:`compare_outputs`).  The CPU
worker (:mod:`.runner`), the GPU one (:mod:`.gpu`) and the simulated accelerator's call these
functions; only how one call is launched and timed differs between them.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

__all__ = ["DEFAULT_TOLERANCE", "EPSILON", "check_after_timing", "compare_outputs", "poison",
           "timed_repeats"]

# The output check's relative tolerance per dtype, and each dtype's machine epsilon (the
# widening for long reductions, autotune.measure.runner.reduction_rtol, uses it).
DEFAULT_TOLERANCE = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}
EPSILON = {"float16": 9.8e-4, "float32": 1.2e-7, "float64": 2.3e-16}


def poison(arrays: Sequence[np.ndarray]) -> None:
    """Fill outputs with values a kernel cannot leave behind unnoticed."""
    for a in arrays:
        if a.dtype.kind == "f":
            a.fill(np.nan)
        elif a.dtype.kind == "b":
            a.fill(True)
        else:
            a.fill(np.iinfo(a.dtype).max)


def compare_outputs(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray],
                    names: Sequence[str], rtol: float | None,
                    atol: float | None) -> str | None:
    """None when every output matches its reference, else a readable description."""
    for out, ref, name in zip(outputs, references, names):
        if out.dtype.kind != "f":
            bad = out != ref
            if bad.any():
                where = tuple(int(i) for i in np.argwhere(bad)[0])
                return (f"wrong result: output {name} differs from the reference in "
                        f"{int(bad.sum())} of {out.size} elements (first at {name}{list(where)}: "
                        f"expected {ref[where]}, got {out[where]})")
            continue
        tol = DEFAULT_TOLERANCE.get(str(out.dtype), 1e-4)
        finite = np.isfinite(ref)
        scale = float(np.abs(ref[finite]).max()) if finite.any() else 1.0
        r = tol if rtol is None else rtol
        a = tol * max(1.0, scale) if atol is None else atol
        ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isclose(out64, ref64, rtol=r, atol=a, equal_nan=True)
        if close.all():
            continue
        bad = ~close
        missing = bad & np.isnan(out64) & ~np.isnan(ref64)
        with np.errstate(invalid="ignore"):
            diff = np.where(bad & ~missing, np.abs(out64 - ref64), -np.inf)
        if np.isfinite(diff).any() and diff.max() > -np.inf:
            where = np.unravel_index(int(np.argmax(diff)), diff.shape)
            where_t = tuple(int(i) for i in where)
            return (f"wrong result: max abs diff {diff[where]:.6g} in output {name} at "
                    f"{name}{list(where_t)} (expected {ref64[where]:.6g}, got {out64[where]:.6g};"
                    f" {int(bad.sum())} of {out.size} elements off, rtol={r:g}, atol={a:.3g})")
        where_t = tuple(int(i) for i in np.argwhere(missing)[0])
        return (f"wrong result: output {name} has {int(missing.sum())} of {out.size} elements "
                f"not written (NaN) where the reference has values, first at {name}"
                f"{list(where_t)}")
    return None


def timed_repeats(timed, warm: float, request: dict, deadline: float, before_repeat=None
                  ) -> tuple[list[float], int, bool]:
    """(seconds per call of each repeat, calls per repeat, stopped early) after a warm-up
    call of ``warm`` seconds; ``timed(n)`` runs the kernel ``n`` times and returns the
    seconds.  The protocol of the CPU and OpenCL workers alike: ``number`` aimed a little
    above ``min_repeat_ms`` (the warm-up ran cold and overestimates a call) and regrown from
    a repeat that came out short; a candidate far slower than the best, or one whose next
    repeat would pass ``deadline``, stops early with what it has."""
    best = request["best"]
    slow_limit = best * request["slow_factor"] if best is not None else math.inf
    min_repeat = request["min_repeat_ms"] / 1000.0
    if warm > slow_limit and warm >= min_repeat:
        # Far slower than the best, going by the warm-up alone.  That call ran cold and a
        # busy host can stall any single call (a 64x64 matmul's warm-up on a freshly
        # restarted worker has taken 7.9 ms), so one timed call confirms it before the
        # candidate is written off; one slow again stops with that call as its one repeat.
        if time.perf_counter() + warm > deadline:
            return [warm], 1, True
        if before_repeat is not None:
            before_repeat()
        again = timed(1)
        if again > slow_limit:
            return [again], 1, True
        warm = again  # the warm-up was the outlier: time the candidate as usual
    number = max(request["number"], math.ceil(1.15 * min_repeat / max(warm, 1e-9)))
    if time.perf_counter() + warm * number > deadline:
        # Not one full repeat fits in the time-out: the warm-up call is the one repeat.
        return [warm], 1, True
    times: list[float] = []
    regrows = 0
    while len(times) < request["repeat"]:
        per_call = times[-1] if times else warm
        if times and time.perf_counter() + per_call * number * 1.1 > deadline:
            return times, number, True
        if before_repeat is not None:
            before_repeat()
        elapsed = timed(number)
        if elapsed < min_repeat and regrows < 4:
            # The warm-up overestimated the per-call time (cold caches, page faults): grow
            # ``number`` from this repeat, with a margin, and time again.
            number = max(number + 1, math.ceil(number * 1.15 * min_repeat / max(elapsed, 1e-9)))
            regrows += 1
            continue
        times.append(elapsed / number)
        if times[-1] > slow_limit:
            return times, number, True
    return times, number, False


def check_after_timing(work: dict, request: dict, inputs_now: Sequence[np.ndarray], snapshot,
                       median: float, check_possible: bool, kernel_seconds: float,
                       restore=None) -> dict:
    """The checks after timing, for the CPU and OpenCL workers alike: an error reply when
    the candidate wrote into an input (it would corrupt every later measurement of the
    workload; ``restore(i)`` puts input ``i`` back) or its warm-up outputs ``snapshot``
    differ from the reference; otherwise ``{"checked": whether the outputs were compared}``
    (they are when the run asks always, or the candidate is the best so far)."""
    params = work["params"]
    for i, now in zip(work["inputs"], inputs_now):
        pristine = work["pristine"][work["inputs"].index(i)]
        if not np.array_equal(now, pristine, equal_nan=now.dtype.kind == "f"):
            if restore is not None:
                restore(i)
            return {"error_kind": "wrong_result", "kernel_seconds": kernel_seconds,
                    "error_msg": f"wrong result: the candidate wrote into its input "
                                 f"{params[i]['name']}"}
    best = request["best"]
    if not (check_possible and (request["check_always"] or best is None or median < best)):
        return {"checked": False}
    names = [params[i]["name"] for i in work["outputs"]]
    problem = compare_outputs(snapshot, work["reference"], names, request["rtol"],
                              request["atol"])
    if problem is not None:
        return {"error_kind": "wrong_result", "error_msg": problem,
                "kernel_seconds": kernel_seconds}
    return {"checked": True}
