"""The live display of a model tuning run, and its plain-text fallback.

    progress = Progress(sys.stderr, model="resnet18", log_file="tune.log")
    autotune.tune_model(..., control=RunControl(listener=progress.listener),
                        log=progress.line)
    progress.close()

On a terminal the display is redrawn in place (ANSI cursor movement), from the scheduler's
events and once a second in between so the clocks move: a header with the trials (done /
planned), the elapsed time, the time left and the ETA, the estimated end-to-end latency; then
one row per task (trials, best time, share of the estimated latency, GFLOP/s and the roofline
column of autotune.tuning.report, status), the tasks with the largest share first, as many as
fit the window; then the latest notices (tasks set aside, converged, ...).  A ``status``
callable (the Ray runner's ``describe``: the nodes in use) adds its line under the header, and
in the plain lines whenever it changes.  Anywhere else (a pipe, a file, CI) it writes plain log
lines instead: one per measured batch and one per notice.  A log file, when given, receives the
plain lines with a timestamp in either case.
"""
from __future__ import annotations

import math
import os
import shutil
import threading
import time
from collections import deque
from typing import TextIO

from .report import format_duration, format_seconds, roofline, task_columns

__all__ = ["Progress"]

_CLEAR_BELOW = "\x1b[J"


class Progress:
    """Shows a TaskScheduler's progress on ``stream``.  ``live``: redraw in place (default:
    when ``stream`` is a terminal and TERM is not "dumb"); ``log_file``: a path that gets
    every plain line; ``refresh``: seconds between redraws of the live display."""

    def __init__(self, stream: TextIO, model: str = "", live: bool | None = None,
                 log_file: str | os.PathLike | None = None, refresh: float = 1.0):
        self.stream = stream
        self.model = model
        if live is None:
            isatty = getattr(stream, "isatty", None)
            live = bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"
        self.live = live
        self.refresh = refresh
        self._log = open(log_file, "a", encoding="utf-8") if log_file else None
        self._lock = threading.RLock()
        self._scheduler = None
        self._drawn = 0            # lines of the live display currently on screen
        self._notices: deque[str] = deque(maxlen=4)
        self._peaks = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.status = None            # a callable giving one more header line, or None
        self._status_shown = None     # the status line last printed (plain mode)

    # -- inputs ------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        """A plain log line (from the tuning loops or the scheduler)."""
        with self._lock:
            self._write_log(text)
            if self.live:
                self._notices.append(text)
                self._draw()
            else:
                self._print(text)

    def listener(self, event: str, scheduler, task=None) -> None:
        """The TaskScheduler listener: "start", "batch", "task", "remeasure", "end"."""
        with self._lock:
            self._scheduler = scheduler
            if self._peaks is None:
                self._peaks = roofline(scheduler.target)
            text = self._event_line(event, scheduler, task)
            status = self._status_line() if event in ("batch", "end") else None
            if status is not None and status != self._status_shown:
                self._status_shown = status
                self._write_log(status)
                if not self.live:
                    self._print(status)
            if text:
                self._write_log(text)
            if self.live:
                if event == "task" and text:
                    self._notices.append(text)
                self._draw()
                if event == "start":
                    self._start_ticker()
                elif event == "end":
                    self._stop_ticker()
            elif text:
                self._print(text)

    def close(self) -> None:
        """Stop redrawing (the last frame stays on screen) and close the log file."""
        self._stop_ticker()
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plain lines -------------------------------------------------------------------------
    def _event_line(self, event: str, s, task) -> str:
        if event == "start":
            planned = s.budget if s.budget is not None else "until the deadline"
            return (f"[tune-model] {self.model}: {len(s.tasks)} tasks on {s.target}, "
                    f"budget {planned} trials ({s.total_trials} stored), policy {s.policy}")
        if event == "batch":
            latency, estimated = s.estimated_latency()
            note = f" ({estimated} estimated)" if estimated else ""
            return (f"[tune-model] {self._trials(s)}  {task.name}: {task.trials} trials, best "
                    f"{format_seconds(task.best_seconds)}  |  est. latency "
                    f"{format_seconds(latency)}{note}  |  elapsed "
                    f"{format_duration(s.elapsed)}, left {self._left(s)}")
        if event == "task":
            if task.status == "failed":
                return f"[tune-model] set aside {task.name}: {task.error}"
            return f"[tune-model] {task.name} is done ({task.status}) after {task.trials} trials"
        if event == "remeasure":
            return "[tune-model] re-measuring the best candidates of the tuned tasks"
        if event == "end":
            latency = s.estimated_latency()[0]
            return (f"[tune-model] stopped ({s.stopped}) after {s.trials_run} trials in "
                    f"{format_duration(s.elapsed)}; estimated latency {format_seconds(latency)}")
        return ""

    def _status_line(self) -> str | None:
        if self.status is None:
            return None
        try:
            return str(self.status())
        except Exception as err:  # noqa: BLE001 - a display must never stop the tuning
            return f"(status unavailable: {type(err).__name__})"

    def _trials(self, s) -> str:
        planned = s.planned_trials()
        total = s.total_trials + planned if planned is not None else None
        return f"trials {s.total_trials}/{total if total is not None else '?'}"

    def _left(self, s) -> str:
        eta = s.eta_seconds()
        if eta is None:
            return "?"
        at = time.strftime("%H:%M", time.localtime(time.time() + eta))
        return f"~{format_duration(eta)} (ETA {at})"

    def _print(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe must not stop the tuning

    def _write_log(self, text: str) -> None:
        if self._log is not None:
            self._log.write(time.strftime("%Y-%m-%d %H:%M:%S ") + text + "\n")
            self._log.flush()

    # -- the live display --------------------------------------------------------------------
    def render(self, width: int = 100, height: int = 40) -> list[str]:
        """The live display's lines for a window of ``width`` x ``height``."""
        s = self._scheduler
        if s is None:
            return []
        latency, estimated = s.estimated_latency()
        note = f" ({estimated} tasks estimated)" if estimated else ""
        phase = {"remeasuring": "  [re-measuring the best]", "done": f"  [{s.stopped}]"}.get(
            s.phase, "")
        lines = [f"tune-model {self.model} on {s.target}  (policy {s.policy}){phase}",
                 f"{self._trials(s)}   elapsed {format_duration(s.elapsed)}   left "
                 f"{self._left(s)}   est. latency {format_seconds(latency)}{note}"]
        status = self._status_line()
        if status:
            lines.append(status)
        name_width = max(12, min(32, width - 66))
        head = (f"{'task':<{name_width}} {'x':>2} {'trials':>6} {'best':>10} {'share':>6} "
                f"{'GFLOP/s':>9} {'roofline':>8}  status")
        lines += [head, "-" * min(width, len(head) + 6)]
        rows = sorted(s.tasks, key=lambda t: -(t.weight * t.best_seconds
                                               if math.isfinite(t.best_seconds) else 0.0))
        room = max(1, height - len(lines) - 2 - len(self._notices))
        peak, bandwidth = self._peaks or (None, None)
        for t in rows[:room if len(rows) <= room else room - 1]:
            c = task_columns(t, latency, peak, bandwidth)
            lines.append(f"{t.name[:name_width]:<{name_width}} {t.weight:>2} {t.trials:>6} "
                         f"{c['best']:>10} {c['share']:>6} {c['gflops']:>9} "
                         f"{c['roofline']:>8}  {t.status}")
        if len(rows) > room:
            lines.append(f"... {len(rows) - room + 1} more tasks")
        lines += list(self._notices)
        return [line[:width] for line in lines]

    def _draw(self) -> None:
        size = shutil.get_terminal_size((100, 40))
        lines = self.render(size.columns - 1, size.lines - 1)
        up = f"\x1b[{self._drawn}F" if self._drawn else "\r"
        try:
            self.stream.write(up + _CLEAR_BELOW + "".join(line + "\n" for line in lines))
            self.stream.flush()
        except (OSError, ValueError):
            return
        self._drawn = len(lines)

    def _start_ticker(self) -> None:
        if self._ticker is not None:
            return
        self._stop.clear()

        def tick():
            while not self._stop.wait(self.refresh):
                with self._lock:
                    self._draw()

        self._ticker = threading.Thread(target=tick, name="tune-model-display", daemon=True)
        self._ticker.start()

    def _stop_ticker(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2 * self.refresh + 1)
            self._ticker = None
