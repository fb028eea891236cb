"""The report of a model tuning run: per-task table, roofline figures, tuning curve, storage.

    report = ModelReport.from_result(...)      # made by tune_model at the end of a run
    print(format_report(report))               # the text table
    save_plot(report, "report/curve.png")      # estimated latency against trials
    store(db, report); load(db)                # kept in the database, reprinted later

Roofline: each task's achieved rate is compared with what the target can reach for its
arithmetic intensity (FLOPs per byte of its parameters): ``min(peak FLOP/s, intensity *
bandwidth)``.  The peak FLOP/s comes from Target facts: cores x float32 vector lanes x
FLOPs per lane per cycle (4 with FMA: two FMA pipes of 2 FLOPs each, the common case on
current x86 and ARM cores; 2 without: one multiply and one add pipe) x clock.  The clock is
the highest ``cpu MHz`` of /proc/cpuinfo (or cpufreq's maximum) for a target that is this
machine; when it cannot be read, the peak is measured once per process as the float32 GEMM
rate of numpy's BLAS (a lower bound of the true peak).  The bandwidth is that of the smallest
level holding the task's parameters (L2, last-level cache, or main memory), measured once per
process as numpy's single-stream copy rate at that size; one stream understates what several
cores draw, so a parallel memory-bound kernel can show more than 100%.  For a target that is
not this machine the figures are unknown and the column shows "-".

The report of a model is stored as a database note (``Database.set_note``) holding the model's
task list (keys, weights, FLOPs) and the run's outcome; ``load`` rebuilds the table and the
curve from the records themselves, so ``tune-model report`` always shows the database as it is.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import numpy as np

from search.task_scheduler import SchedulerTask, TaskTotals, estimated_latency
from tensor_ir.target import Target

from ..backends import backend_for
from .history import choose_record

__all__ = ["ModelReport", "format_duration", "format_report", "format_seconds", "load",
           "peak_bandwidth", "peak_flops", "refresh", "roofline", "roofline_fraction",
           "save_plot", "store"]

NOTE_PREFIX = "tune_model/"


# The task fields a stored report keeps (the rest of a SchedulerTask is a run's working state).
_STORED_FIELDS = ("name", "key", "weight", "flops", "bytes", "group", "trials", "errors",
                  "best_seconds", "status", "error")


@dataclass
class ModelReport(TaskTotals):
    """A model's tuning state for one target.  ``trials_run``/``wall_seconds``/``stopped``
    describe the latest run; ``curve`` is (model trials, estimated latency in seconds, tasks
    whose time is estimated because they had no successful trial yet) over every stored
    record; ``coverage`` the share of the model's FLOPs built from records
    (None when no build was made) and ``default_latency`` the estimate before tuning when
    known."""

    model: str
    target: str
    tasks: list[SchedulerTask]
    budget: int | None = None
    trials_run: int = 0
    wall_seconds: float = 0.0
    stopped: str | None = None
    started: float = 0.0
    coverage: float | None = None
    measured_latency: float | None = None
    curve: list[tuple[int, float, int]] = field(default_factory=list)

    def to_json(self) -> dict:
        # The curve is left out: it is rebuilt from the records when loaded.
        doc = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("tasks", "curve")}
        rows = ({k: getattr(t, k) for k in _STORED_FIELDS} for t in self.tasks)
        doc["tasks"] = [{k: (None if isinstance(v, float) and math.isinf(v) else v)
                         for k, v in row.items()} for row in rows]
        return doc


# ---------------------------------------------------------------------------------------------
# Roofline
# ---------------------------------------------------------------------------------------------

_MEASURED: dict[str, float] = {}


def _clock_hz() -> float | None:
    """This machine's highest core clock: /proc/cpuinfo's "cpu MHz", else cpufreq's maximum."""
    mhz = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "cpu MHz":
                    try:
                        mhz.append(float(value))
                    except ValueError:
                        pass
    except OSError:
        pass
    if mhz and max(mhz) > 0:
        return max(mhz) * 1e6
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return float(f.read().strip()) * 1e3  # kHz
    except (OSError, ValueError):
        return None


def _measure_gemm_rate() -> float:
    if "gemm" not in _MEASURED:
        n = 512
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        a @ b  # warm-up: thread pool start, page faults
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
        _MEASURED["gemm"] = 2.0 * n ** 3 / best
    return _MEASURED["gemm"]


def peak_flops(target: Target) -> tuple[float | None, str]:
    """(peak float32 FLOP/s of ``target`` or None, how it was obtained); see the module text."""
    backend = backend_for(target)
    if not backend.cpu:
        return None, f"no peak figure for {backend.name} targets"
    lanes = target.vector_lanes("float32")
    per_lane = 4 if (target.has_feature("fma") or target.has_feature("neon")) else 2
    cores = target.num_cores or 1
    clock = _clock_hz() if target.is_host else None
    if clock:
        return (cores * lanes * per_lane * clock,
                f"{cores} cores x {lanes} lanes x {per_lane} FLOP/cycle x "
                f"{clock / 1e9:.2f} GHz")
    if target.is_host:
        return _measure_gemm_rate(), "measured: numpy float32 GEMM (a lower bound)"
    return None, "the clock of a target that is not this machine is unknown"


def _copy_rate(nbytes: int, repeats: int) -> float:
    """Best read + write rate of numpy copying ``nbytes`` (one stream)."""
    src = np.ones(max(1, nbytes // 4), np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2.0 * src.nbytes / best


def peak_bandwidth(target: Target, nbytes: float | None = None) -> tuple[float | None, str]:
    """(bandwidth in bytes/s or None, how it was obtained) for a working set of ``nbytes``:
    the rate of the smallest cache level (L2, last level) that holds it, main memory when
    none does or ``nbytes`` is None.  Measured once per process per level; see the module
    text."""
    if not backend_for(target).cpu or not target.is_host:
        return None, "bandwidth is measured on this machine's CPU only"
    levels = [("L2", target.l2_cache), ("L3", target.l3_cache)]
    for name, size in levels:
        # Half the level for source and destination together, so both stay resident.
        if size and nbytes is not None and 2 * nbytes <= size:
            if name not in _MEASURED:
                _MEASURED[name] = _copy_rate(size // 4, 200)
            return _MEASURED[name], f"measured: numpy copy within {name}"
    if "memory" not in _MEASURED:
        # Each array exceeds the last-level cache, so the copy streams from memory.
        _MEASURED["memory"] = _copy_rate(max(64 << 20, 2 * (target.l3_cache or 0)), 3)
    return _MEASURED["memory"], "measured: numpy copy from memory, one stream"


def roofline_fraction(flops: float, nbytes: float, seconds: float, peak: float | None,
                      bandwidth: float | None) -> float | None:
    """Achieved share of the attainable rate ``min(peak, flops/bytes * bandwidth)`` (FLOP
    rate; byte rate against ``bandwidth`` for tasks without FLOPs).  None when unknown."""
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    if flops > 0 and peak:
        attainable = peak if not (bandwidth and nbytes > 0) else \
            min(peak, flops / nbytes * bandwidth)
        return flops / seconds / attainable
    if nbytes > 0 and bandwidth:
        return nbytes / seconds / bandwidth
    return None


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------

def format_seconds(seconds: float | None) -> str:
    """A run time: "1.234 ms", "56.7 us", "-" when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.0f} ns"


def format_duration(seconds: float | None) -> str:
    """A wall time: "42s", "3m05s", "2h04m"."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def task_columns(row, total_latency: float, peak: float | None,
                 bandwidth) -> dict[str, str]:
    """The display columns of one task (shared by the report and the live display);
    ``bandwidth`` is bytes/s or a function of the task's bytes (see :func:`roofline`)."""
    best = row.best_seconds
    share = row.weight * best / total_latency if math.isfinite(best) and total_latency > 0 \
        and math.isfinite(total_latency) else None
    rate = "-"
    if math.isfinite(best) and best > 0:
        rate = f"{row.flops / best / 1e9:.2f}" if row.flops > 0 else \
            f"{row.bytes / best / 1e9:.2f} GB/s"
    if callable(bandwidth):
        bandwidth = bandwidth(row.bytes)
    frac = roofline_fraction(row.flops, row.bytes, best, peak, bandwidth)
    return {"best": format_seconds(best), "share": "-" if share is None else f"{share:.1%}",
            "gflops": rate, "roofline": "-" if frac is None else f"{frac:.1%}"}


def format_report(report: ModelReport, peaks: tuple | None = None) -> str:
    """The report as a text table: one row per task (largest share of the estimated latency
    first), then the totals, failures and coverage.  ``peaks``: (FLOP/s, bytes/s) to use
    instead of :func:`peak_flops` / :func:`peak_bandwidth` of the report's target."""
    peak, bandwidth = roofline(report.target) if peaks is None else peaks
    total = report.estimated_latency
    rows = sorted(report.tasks, key=lambda r: -(r.weight * r.best_seconds
                                                if math.isfinite(r.best_seconds) else 0.0))
    name_width = min(40, max([len("task")] + [len(r.name) for r in rows]))
    head = (f"{'#':>3}  {'task':<{name_width}}  {'x':>2}  {'trials':>6}  {'err':>4}  "
            f"{'best':>10}  {'share':>6}  {'GFLOP/s':>9}  {'roofline':>8}  status")
    lines = [f"tune-model report: {report.model} on {report.target}", head, "-" * len(head)]
    for i, r in enumerate(rows, 1):
        c = task_columns(r, total, peak, bandwidth)
        lines.append(f"{i:>3}  {r.name[:name_width]:<{name_width}}  {r.weight:>2}  "
                     f"{r.trials:>6}  {r.errors:>4}  {c['best']:>10}  {c['share']:>6}  "
                     f"{c['gflops']:>9}  {c['roofline']:>8}  {r.status}")
    lines.append("-" * len(head))
    budget = f" of a budget of {report.budget}" if report.budget is not None else ""
    lines.append(f"trials: {report.trials}{budget} ({report.trials_run} in the latest run, "
                 f"{format_duration(report.wall_seconds)}; stopped: {report.stopped or '-'})")
    lines.append(f"estimated end-to-end latency: {format_seconds(total)} "
                 f"(sum of weight x best time over {len(report.tasks)} tasks)")
    if report.measured_latency is not None:
        lines.append(f"measured end-to-end latency: {format_seconds(report.measured_latency)}")
    memory = bandwidth(None) if callable(bandwidth) else bandwidth
    lines.append(f"roofline: peak {_rate(peak, 'FLOP/s')}, memory bandwidth "
                 f"{_rate(memory, 'B/s')} (cache bandwidth for tasks that fit in cache)")
    if report.coverage is not None:
        lines.append(f"coverage: {report.coverage:.1%} of the model's FLOPs built from tuning "
                     f"records")
    for r in report.failed:
        lines.append(f"set aside: {r.name} [{r.key[:12]}]: {r.error}")
    return "\n".join(lines)


def roofline(target: str | Target) -> tuple[float | None, Callable]:
    """(peak FLOP/s or None, bandwidth(nbytes) -> bytes/s or None) of ``target``; a target
    string that no longer parses (a stored report) gives unknowns."""
    try:
        target = Target(target) if isinstance(target, str) else target
        peak = peak_flops(target)[0]
    except Exception:  # noqa: BLE001 - an unparseable stored target leaves the column empty
        return None, lambda nbytes: None
    return peak, lambda nbytes: peak_bandwidth(target, nbytes)[0]


def _rate(value: float | None, unit: str) -> str:
    return "unknown" if value is None else f"{value / 1e9:.1f} G{unit}"


# ---------------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------------

def save_plot(report: ModelReport, path: str | os.PathLike) -> str:
    """Write the tuning curve (estimated end-to-end latency against trials) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    import matplotlib.pyplot as plt

    path = os.fspath(path)
    points = [(n, s, e) for n, s, e in report.curve if math.isfinite(s)]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        if points:
            # While some tasks have no measured time their share is estimated (the curve can
            # then rise when one is measured): that stretch is drawn dashed.
            split = next((i for i, p in enumerate(points) if p[2] == 0), len(points))
            early, late = points[:split + 1], points[split:]
            if len(early) > 1 or not late:
                ax.step([p[0] for p in early], [p[1] * 1e3 for p in early], where="post",
                        color="tab:gray", linestyle="--",
                        label="some tasks not measured yet (estimated)")
            if late:
                ax.step([p[0] for p in late], [p[1] * 1e3 for p in late], where="post",
                        color="tab:blue", label="every task measured")
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper right", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no successful measurement yet", ha="center",
                    transform=ax.transAxes)
        ax.set_xlabel("trials (whole model)")
        ax.set_ylabel("estimated latency (ms)")
        ax.set_title(f"{report.model}: tuning curve")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------

def note_name(model: str, target: str) -> str:
    return f"{NOTE_PREFIX}{model}|{target}"


def store(db, report: ModelReport) -> None:
    """Keep the report (task list and run outcome) in the database as a note."""
    db.set_note(note_name(report.model, report.target), json.dumps(report.to_json()))


def load(db, model: str | None = None, target: str | None = None) -> list[ModelReport]:
    """The stored reports (of one model and/or target string), refreshed from the records:
    trial and error counts, best times and the tuning curve are read from the database."""
    out = []
    for text in db.notes(NOTE_PREFIX).values():
        doc = json.loads(text)
        if model is not None and doc["model"] != model:
            continue
        if target is not None and doc["target"] != target:
            continue
        rows = [SchedulerTask(**{**r, "best_seconds": math.inf if r.get("best_seconds") is None
                                 else r["best_seconds"]}) for r in doc.pop("tasks")]
        report = ModelReport(tasks=rows, **doc)
        refresh(db, report)
        out.append(report)
    return out


def refresh(db, report: ModelReport) -> None:
    """Re-read trial counts, errors, best times and the curve from the records.  A task's
    best is the record a build takes (autotune.tuning.history.choose_record): one whose trace does
    not replay in this release is named in a warning and left out."""
    target = Target(report.target)
    events: list[tuple[int, int, float]] = []  # (record id, task index, seconds)
    for i, row in enumerate(report.tasks):
        records = db.records(row.key, report.target)
        row.trials = len(records)
        row.errors = sum(1 for r in records if r.is_error)
        best = (choose_record(db, db.workload(row.key).func, target).record
                if row.trials > row.errors else None)
        row.best_seconds = math.inf if best is None else (
            best.score if best.score is not None else best.median)
        events.extend((r.record_id, i, math.inf if r.is_error else r.median) for r in records)
    events.sort()
    tasks = [replace(t, best_seconds=math.inf) for t in report.tasks]
    curve = []
    for n, (_, i, seconds) in enumerate(events, 1):
        # A point where the estimate changes (a step plot holds it in between), and the end.
        if seconds < tasks[i].best_seconds:
            tasks[i].best_seconds = seconds
            curve.append((n, *estimated_latency(tasks)))
    if events and (not curve or curve[-1][0] != len(events)):
        curve.append((len(events), *estimated_latency(tasks)))
    report.curve = curve
