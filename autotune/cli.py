"""The ``tune-model`` console script: tune a whole model, or reprint its report.

    tune-model resnet18 --trials 1000 --db tuning.db --report report/
    tune-model model.onnx --target "llvm -num-cores 2" --time-budget 8h --db tuning.db
    tune-model model.onnx --target opencl --trials 200 --db tuning.db   # an OpenCL device
    tune-model resnet18 --db tuning.db --until 07:30        # plan the run to end by then
    tune-model resnet18 --db tuning.db                      # again: resumes where it stopped
    tune-model resnet50 --db tuning.db --cost-model-file model.json   # a pre-trained model
    tune-model report --db tuning.db [--model resnet18] [--report report/]

MODEL is a zoo name (resnet18, resnet50, mobilenet_v2, bert_base_layer; ``--option
image_size=64`` and the like shrink them) or an .onnx file (``--input-shape
input=1x3x224x224`` fixes symbolic dimensions).  ``--trials`` is the model's total, counting
records already in the database, so rerunning a stopped command finishes the same budget.

On a terminal a live display shows every task (trials, best time, share of the estimated
latency, GFLOP/s, roofline) and the overall trials, elapsed time, time left and estimated
latency; elsewhere plain log lines are written.  Ctrl-C stops after the batch in flight (its
records are committed); a second Ctrl-C drops that batch (nothing of it is written).  The run
ends with the report: the text table on standard output, plus report.txt, report.json and the
tuning curve curve.png under ``--report DIR``.

Every candidate is timed on this machine, so ``--target`` must describe it (another CPU of the
same kind whose features this one has is fine, and ``opencl`` when an OpenCL device is here);
a target it cannot run, such as ``llvm -mtriple=aarch64-linux-gnu`` on an x86-64 host, is
refused before any work starts.  The outputs (``--db``, ``--log-file``, ``--report``) are
checked up front too: a missing report folder is created, a missing folder for a file is an
error.

Exit status: 0 done; 1 an error (named on standard error), including a run whose trials all
failed (none measured a valid time: the most common error is named); 2 a usage error (an
unknown option value or kind, an output that cannot be written, a target this machine cannot
run); 3 the coverage is below ``--min-coverage``; 130 stopped by Ctrl-C.  Environment:
TERM=dumb turns the live display off (so does ``--no-live``).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import signal
import sys
import threading
from collections import Counter

__all__ = ["main"]

EXIT_ERROR, EXIT_USAGE, EXIT_COVERAGE, EXIT_INTERRUPTED = 1, 2, 3, 130


_EPILOG = ("exit status: 0 done; 1 an error, including a run in which no trial measured a "
           "valid time (the most common error is named); 2 a usage error (unknown kind, "
           "unwritable output, a target this machine cannot run); 3 coverage below "
           "--min-coverage; 130 stopped by Ctrl-C")


def _tune_parser() -> argparse.ArgumentParser:
    # The kinds are read from the registries, so a kind registered by an imported plugin is
    # accepted too, and argparse's "invalid choice" message lists them (exit status 2).
    import cost_models
    import search
    from search.config import POLICIES

    p = argparse.ArgumentParser(
        prog="tune-model",
        description="Tune every fused function of a model and store the records in a "
                    "database.  'tune-model report --db FILE' reprints a stored report.",
        epilog=_EPILOG)
    p.add_argument("model", help="zoo model name or .onnx file")
    p.add_argument("--target", default="llvm", help="target string (default: llvm, this CPU)")
    p.add_argument("--trials", type=int, default=None,
                   help="the model's total trial budget, stored records included "
                        "(default: 64 per task, or unlimited with a time limit)")
    p.add_argument("--time-budget", default=None,
                   help="wall-time limit of this run, e.g. 8h, 1h30m, 45m, 600")
    p.add_argument("--until", default=None, metavar="HH:MM",
                   help="end the run by this local time (the next one to come)")
    p.add_argument("--db", default="tuning.db", help="record database (default: tuning.db)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=None,
                   help="build processes (default: the usable cores)")
    p.add_argument("--log-file", default=None, help="append plain progress lines to this file")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="write report.txt, report.json and curve.png here")
    p.add_argument("--policy", default="gradient", choices=POLICIES,
                   help="how trials are shared among tasks: %(choices)s (default: gradient)")
    p.add_argument("--strategy", default="evolutionary", choices=search.kinds(),
                   metavar="KIND",
                   help="search strategy kind: %(choices)s (default: evolutionary)")
    models = p.add_mutually_exclusive_group()
    # NOTE: the default is None, not "xgb": argparse tells a given option from a default one
    # by identity, so "--cost-model xgb --cost-model-file F" would otherwise pass unnoticed.
    models.add_argument("--cost-model", default=None, choices=cost_models.kinds(),
                        metavar="KIND", help="cost model kind: %(choices)s (default: xgb)")
    models.add_argument("--cost-model-file", default=None, metavar="FILE",
                        help="start every task from this saved, pre-trained cost model "
                             "(python -m cost_models pretrain writes one); it is read, never "
                             "written")
    p.add_argument("--batch-size", type=int, default=16, help="trials per measured batch")
    p.add_argument("--patience", type=int, default=None,
                   help="trials without improvement after which a task stops "
                        "(default: 12 batches)")
    p.add_argument("--repeat", type=int, default=None, help="timed repeats per candidate")
    p.add_argument("--min-repeat-ms", type=float, default=None,
                   help="shortest timed repeat in milliseconds")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one candidate may run")
    p.add_argument("--remeasure-top", type=int, default=3,
                   help="best candidates per task re-timed at the end (0: none)")
    p.add_argument("--rerank-top", type=int, default=8,
                   help="best records of each heavy task timed inside the built model at the "
                        "end, the fastest there chosen for the model's builds (CPU; 0: none)")
    p.add_argument("--min-coverage", type=float, default=None, metavar="FRACTION",
                   help="strict mode: fail (exit 3) when records cover less than this share "
                        "of the model's FLOPs, e.g. 0.95")
    p.add_argument("--measure-latency", action="store_true",
                   help="time the built model end to end at the end")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="zoo model option, e.g. image_size=64 (repeatable)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="ONNX input shape, e.g. input=1x3x224x224 (repeatable)")
    p.add_argument("--no-live", action="store_true", help="plain log lines, even on a terminal")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="build and measure on a Ray cluster: its address, 'auto' (the one "
                        "`ray start` made on this machine) or 'local' (start one here); "
                        "needs the [ray] extra")
    return p


def _report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tune-model report",
                                description="Reprint the report of models tuned into a "
                                            "database, from its records.")
    p.add_argument("--db", default="tuning.db", help="record database (default: tuning.db)")
    p.add_argument("--model", default=None, help="only this model (by name)")
    p.add_argument("--target", default=None, help="only this target string")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="also write report.txt, report.json and curve.png here")
    return p


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _key_values(items, what: str, parse) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} {item!r} must be written KEY=VALUE")
        out[key.strip()] = parse(value.strip())
    return out


def _dims(text: str) -> tuple:
    try:
        return tuple(int(d) for d in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise ValueError(f"input shape {text!r} must be dimensions joined by x, e.g. "
                         f"1x3x224x224") from None


def until_deadline(text: str, now: _dt.datetime | None = None) -> float:
    """Seconds since the epoch of the next local time ``HH:MM`` (today, or tomorrow when it
    has passed)."""
    try:
        hour, minute = (int(x) for x in text.strip().split(":"))
        if not (0 <= hour < 24 and 0 <= minute < 60):
            raise ValueError
    except ValueError:
        raise ValueError(f"--until {text!r} must be a local time HH:MM, e.g. 07:30") from None
    now = now or _dt.datetime.now()
    end = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if end <= now:
        end += _dt.timedelta(days=1)
    return end.timestamp()


def _check_output_dir(option: str, directory: str) -> None:
    """Make sure ``directory`` is a folder this process can write into, creating it when it
    is missing: checked before any work, so that a long run never ends in a lost report."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"{option} {directory} exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{option} {directory}: cannot create the folder "
                         f"({err.strerror or err})") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {directory}: the folder is not writable")


def _check_output_file(option: str, path: str) -> None:
    """Make sure ``path`` names a file that can be created or appended to: not a directory,
    in an existing, writable folder.  The folder is not created: a typo in it should not
    leave a new directory behind."""
    if os.path.isdir(path):
        raise ValueError(f"{option} {path} is a directory, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{option} {path}: the folder {folder} does not exist")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ValueError(f"{option} {path}: the file is not writable")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: the folder {folder} is not writable")


def _check_runnable(spec: str, target) -> None:
    """Refuse a target whose code cannot run here: tune-model times every candidate on this
    machine, so each trial would end in a runtime error and the run would measure nothing.
    An opencl target runs here when this machine has an OpenCL device that matches it, a cuda
    target when pycuda sees a GPU."""
    from .backends import backend_for

    problem = backend_for(target).unavailable(target)
    if problem is not None:
        raise ValueError(f"--target {spec!r}: {problem}; tune-model times every candidate "
                         f"on this machine, so it would measure nothing.  Tune on a machine "
                         f"that has it, or leave -mtriple, -mcpu and -mattr out of a CPU "
                         f"target to tune for this one")


class _RunTally:
    """Wraps the scheduler listener to learn how many of this run's trials failed: the
    tasks' error counts include stored records, so they are read at "start" (after the
    scheduler has resumed from the database) and compared at the end."""

    def __init__(self, listener):
        self.listener = listener
        self.errors_before: dict[str, int] | None = None

    def __call__(self, event: str, scheduler, task=None) -> None:
        if event == "start":
            self.errors_before = {t.key: t.errors for t in scheduler.tasks}
        self.listener(event, scheduler, task)

    def nothing_measured(self, result, database: str) -> str | None:
        """Why no trial of this run measured a valid time (None when one did, or when the
        run had nothing left to do, e.g. its budget was already spent)."""
        if result is None or self.errors_before is None:
            return None
        if result.tasks and all(t.status == "failed" for t in result.tasks):
            first = result.tasks[0]
            return (f"every task was set aside, none could be tuned; {first.name}: "
                    f"{first.error}")
        if not result.trials_run:
            return None
        ran = [t for t in result.tasks if t.run_trials]
        failed = sum(t.errors - self.errors_before.get(t.key, 0) for t in ran)
        if failed < sum(t.run_trials for t in ran):
            return None
        return (f"none of the {result.trials_run} trials of this run measured a valid time; "
                f"{_most_common_error(database, result.target, ran)}")


def _most_common_error(database: str, target: str, tasks) -> str:
    """'most common error: runtime (12 of 12): <message>', from the run's records (a task's
    latest ones), or the tasks' last error when the database cannot be read back."""
    from records import Database, DatabaseError

    kinds: Counter = Counter()
    example: dict[str, str] = {}
    try:
        with Database(database, create=False, readonly=True) as db:
            for task in tasks:
                # NOTE: a task's newest records are this run's, unless another tuner wrote
                # the same workload meanwhile; good enough to name an error.
                for rec in db.records(task.key, target)[-task.run_trials:]:
                    if rec.error_kind is not None:
                        kinds[rec.error_kind] += 1
                        example.setdefault(rec.error_kind, rec.error_msg or "")
    except (DatabaseError, OSError):
        kinds.clear()
    if not kinds:
        last = next((t.last_error for t in tasks if t.last_error), None)
        return f"last error: {last}" if last else "the errors were not recorded"
    kind, count = kinds.most_common(1)[0]
    message = " ".join(example[kind].split())
    if len(message) > 300:
        message = message[:297] + "..."
    return (f"most common error: {kind} ({count} of {sum(kinds.values())}): {message}")


def _write_report_dir(directory: str, reports) -> None:
    from .tuning.report import format_report, save_plot

    os.makedirs(directory, exist_ok=True)
    many = len(reports) > 1
    for report in reports:
        stem = "" if not many else report.model.replace(os.sep, "_") + "-"
        with open(os.path.join(directory, f"{stem}report.txt"), "w") as f:
            f.write(format_report(report) + "\n")
        doc = report.to_json()
        doc["curve"] = [list(point) for point in report.curve]
        doc["estimated_latency"] = report.estimated_latency
        with open(os.path.join(directory, f"{stem}report.json"), "w") as f:
            json.dump(doc, f, indent=1, default=str)
        save_plot(report, os.path.join(directory, f"{stem}curve.png"))


class _Interrupts:
    """Ctrl-C handling: the first SIGINT asks the scheduler to stop after the batch in flight;
    the second raises KeyboardInterrupt, dropping that batch (its transaction never began or
    is rolled back)."""

    def __init__(self, notify):
        self.requested = threading.Event()
        self.notify = notify
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum, frame):
        if self.requested.is_set():
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested.set()
        self.notify("[tune-model] Ctrl-C: stopping after the batch in flight (Ctrl-C again "
                    "to drop it)")


def _tune(argv) -> int:
    args = _tune_parser().parse_args(argv)
    import autotune
    import search
    from autotune.measure import MeasureConfig
    from records import DatabaseError

    from .tuning.progress import Progress
    from .tuning.report import format_report
    from .tuning.tune_model import BuildConfig, CoverageError, RunControl, parse_duration

    # 1. Everything the user got wrong is found here, before the model is tuned: option
    #    values, a target this machine cannot run, outputs that could not be written.
    try:
        model_options = _key_values(args.option, "--option", _number)
        input_shapes = _key_values(args.input_shape, "--input-shape", _dims) or None
        deadline = until_deadline(args.until) if args.until else None
        time_budget = parse_duration(args.time_budget) if args.time_budget else None
        measure = {k: v for k, v in (("repeat", args.repeat),
                                     ("min_repeat_ms", args.min_repeat_ms),
                                     ("timeout", args.timeout)) if v is not None}
        config = MeasureConfig(**measure)
        if args.rerank_top < 0:
            raise ValueError(f"--rerank-top must be 0 (none) or more, got {args.rerank_top}")
        target = autotune.Target(args.target)
        if args.ray is None:  # on a cluster, nodes with the target's hardware measure it
            _check_runnable(args.target, target)
        _check_output_file("--db", args.db)
        if args.log_file:
            _check_output_file("--log-file", args.log_file)
        if args.report:
            _check_output_dir("--report", args.report)
        cost_model = args.cost_model or "xgb"
        if args.cost_model_file is not None:
            import cost_models

            # Read once, up front: a missing or foreign file is a usage error, before tuning.
            cost_model = cost_models.load(args.cost_model_file)
        # The settings objects check their values as they are made: a bad flag value is a
        # usage error, found before the model is loaded.
        search_config = search.SearchConfig(
            strategy=args.strategy, cost_model=cost_model, batch_size=args.batch_size,
            seed=args.seed, remeasure_top=args.remeasure_top)
        sharing = search.SchedulerConfig(policy=args.policy, patience=args.patience)
        finish = BuildConfig(rerank_top=args.rerank_top, measure_latency=args.measure_latency,
                             min_coverage=args.min_coverage)
        limits = RunControl(time_budget=time_budget, deadline=deadline)
        model = autotune.load_model(args.model, input_shapes, **model_options)
        progress = Progress(sys.stderr, model=model.name,
                            live=False if args.no_live else None, log_file=args.log_file)
    except (ValueError, OSError) as err:  # bad option values, FrontendError, missing file
        print(f"tune-model: {err}", file=sys.stderr)
        return EXIT_USAGE
    builder = runner = None
    if args.ray is not None:
        try:
            from .measure.cluster import RayBuilder, RayRunner

            builder = RayBuilder(address=args.ray, max_in_flight=None)
            runner = RayRunner(config, address=args.ray, log=progress.line)
        except Exception as err:  # noqa: BLE001 - no Ray, or no cluster at that address
            progress.close()
            print(f"tune-model: --ray {args.ray}: {type(err).__name__}: {err}",
                  file=sys.stderr)
            return EXIT_USAGE
        progress.status = runner.describe
    elif args.num_workers is not None:
        from .measure import LocalBuilder

        builder = LocalBuilder(max_workers=args.num_workers)  # closed with the runner below

    # 2. The run.
    tally = _RunTally(progress.listener)
    result, status = None, 0
    try:
        with _Interrupts(progress.line) as interrupts:
            try:
                control = dataclasses.replace(limits, listener=tally,
                                              should_stop=interrupts.requested.is_set)
                result = autotune.tune_model(
                    model, target, trials=args.trials, database=args.db, search=search_config,
                    measure=config, scheduler=sharing, build=finish, control=control,
                    builder=builder, runner=runner, log=progress.line)
            except CoverageError as err:
                result, status = err.result, EXIT_COVERAGE
                message = str(err)
            except KeyboardInterrupt:
                progress.close()
                print("tune-model: interrupted; the batch in flight was dropped (every "
                      "committed record is kept; run the same command again to resume)",
                      file=sys.stderr)
                return EXIT_INTERRUPTED
    except (ValueError, OSError, DatabaseError) as err:  # TuneError, TargetError, ...
        progress.close()
        print(f"tune-model: {err}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        progress.close()
        for part in (runner, builder):
            if part is not None:
                part.close()

    # 3. The report, then the exit status: the report is written even for a failed run, as
    #    it shows which tasks failed and how.
    print(format_report(result.report))
    if args.report:
        _write_report_dir(args.report, [result.report])
        folder = os.path.join(args.report, "")  # one trailing separator, given or not
        print(f"report written to {folder} (report.txt, report.json, curve.png)")
    failure = tally.nothing_measured(result, args.db)
    if failure is not None:
        print(f"tune-model: {failure}", file=sys.stderr)
    if status == EXIT_COVERAGE:
        print(f"tune-model: {message}", file=sys.stderr)
    if result.stopped == "interrupted":
        print("tune-model: stopped by Ctrl-C after the batch in flight; run the same command "
              "again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if failure is not None:
        return EXIT_ERROR
    return status


def _report(argv) -> int:
    args = _report_parser().parse_args(argv)
    from records import Database, DatabaseError

    from .tuning.report import format_report, load

    if args.report:
        try:
            _check_output_dir("--report", args.report)
        except ValueError as err:
            print(f"tune-model report: {err}", file=sys.stderr)
            return EXIT_USAGE
    if not os.path.exists(args.db):
        print(f"tune-model report: no database at {args.db}", file=sys.stderr)
        return EXIT_ERROR
    try:
        with Database(args.db, create=False, readonly=True) as db:
            target = None
            if args.target is not None:
                from records import canonical_target

                target = canonical_target(args.target)
            reports = load(db, args.model, target)
    except (DatabaseError, ValueError) as err:
        print(f"tune-model report: {err}", file=sys.stderr)
        return EXIT_ERROR
    if not reports:
        which = f" of model {args.model}" if args.model else ""
        print(f"tune-model report: {args.db} holds no tune-model report{which}",
              file=sys.stderr)
        return EXIT_ERROR
    print("\n\n".join(format_report(r) for r in reports))
    if args.report:
        _write_report_dir(args.report, reports)
    return 0


def main(argv=None) -> int:
    """Entry point of the ``tune-model`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        return _report(argv[1:])
    return _tune(argv)


if __name__ == "__main__":
    sys.exit(main())
