"""The tune-model command: interrupted with SIGINT and rerun, it resumes and finishes the full
budget; ``tune-model report`` reprints the table; usage errors and strict coverage."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import metadata

import pytest

from autotune import cli
from records import Database

from .tiny_onnx import write_tiny_mlp

# Small and fast: two candidates per batch, short timing, the random cost model.
FAST = ["--batch-size", "2", "--repeat", "1", "--min-repeat-ms", "1", "--cost-model",
        "random", "--remeasure-top", "1", "--no-live"]


def run_cli(args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def count_records(path) -> int:
    if not os.path.exists(path):
        return 0
    with Database(path, create=False) as db:
        return db.count()


def test_interrupt_then_rerun_resumes_and_finishes_the_budget(tmp_path):
    model = write_tiny_mlp(tmp_path / "mlp.onnx")
    db = tmp_path / "tuning.db"
    budget = 60
    args = [model, "--db", str(db), "--trials", str(budget), "--seed", "3", *FAST]

    # 1. Start, wait for the first committed batch, then Ctrl-C.
    proc = run_cli(args, cwd=tmp_path)
    deadline = time.monotonic() + 90
    while count_records(db) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no batch was committed in 90 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert "Ctrl-C" in err and "resume" in err
    first = count_records(db)
    assert 2 <= first < budget
    assert first % 2 == 0                       # whole batches only: never half-written
    assert "stopped: interrupted" in out        # the report of what was done is printed

    # 2. The same command again: resumes, finishes with the full budget, nothing twice.
    report_dir = tmp_path / "report"
    proc = run_cli(args + ["--report", str(report_dir), "--log-file", str(tmp_path / "log")],
                   cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert count_records(db) == budget
    assert f"trials: {budget} of a budget of {budget} ({budget - first} in the latest run" in out
    for name in ("fused_matmul_add_relu", "fused_matmul", "fused_softmax"):
        assert name in out
    assert "coverage: 100.0%" in out
    with Database(db, create=False) as handle:
        for workload in handle.workloads():
            hashes = [r.trace_hash for r in handle.records(workload.key)]
            assert len(hashes) == len(set(hashes))
    png = (report_dir / "curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
    assert "tune-model report" in (report_dir / "report.txt").read_text()
    assert "trials" in (tmp_path / "log").read_text()

    # 3. tune-model report reprints the table from the database.
    proc = run_cli(["report", "--db", str(db)], cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "tune-model report: mlp on llvm" in out
    assert f"trials: {budget} of a budget of {budget}" in out
    assert "fused_softmax" in out and "roofline" in out


def test_strict_coverage_fails_below_the_threshold(tmp_path, capsys):
    model = write_tiny_mlp(tmp_path / "mlp.onnx")
    db = str(tmp_path / "tuning.db")
    # Two trials reach one task only: the others build with default schedules.
    code = cli.main([model, "--db", db, "--trials", "2", "--policy", "round-robin",
                     "--min-coverage", "0.99", *FAST])
    captured = capsys.readouterr()
    assert code == cli.EXIT_COVERAGE
    assert "below the required 99.0%" in captured.err
    assert "coverage:" in captured.out and "set aside" not in captured.out


def test_usage_errors_name_the_problem(tmp_path, capsys):
    assert cli.main(["no_such_model", "--db", str(tmp_path / "x.db")]) == cli.EXIT_USAGE
    assert "neither an existing ONNX file nor a zoo model" in capsys.readouterr().err
    assert cli.main(["resnet18", "--until", "25:99"]) == cli.EXIT_USAGE
    assert "HH:MM" in capsys.readouterr().err
    assert cli.main(["resnet18", "--time-budget", "soon"]) == cli.EXIT_USAGE
    assert "time budget" in capsys.readouterr().err
    assert cli.main(["resnet18", "--option", "image_size"]) == cli.EXIT_USAGE
    assert "KEY=VALUE" in capsys.readouterr().err
    assert cli.main(["report", "--db", str(tmp_path / "missing.db")]) == cli.EXIT_ERROR
    assert "no database" in capsys.readouterr().err
    Database(str(tmp_path / "empty.db")).close()
    assert cli.main(["report", "--db", str(tmp_path / "empty.db")]) == cli.EXIT_ERROR
    assert "holds no tune-model report" in capsys.readouterr().err


def test_until_picks_the_next_occurrence():
    import datetime as dt

    now = dt.datetime(2024, 5, 1, 22, 15)
    assert cli.until_deadline("23:00", now) == dt.datetime(2024, 5, 1, 23, 0).timestamp()
    assert cli.until_deadline("07:30", now) == dt.datetime(2024, 5, 2, 7, 30).timestamp()
    with pytest.raises(ValueError, match="HH:MM"):
        cli.until_deadline("7h", now)


def test_console_script_is_declared():
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts.get("tune-model") == "autotune.cli:main"
