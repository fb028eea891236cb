"""tune-model and ``python -m records`` refuse what cannot work before any work starts (unknown
kinds, a target this machine cannot run, outputs that cannot be written), a run that measured
nothing fails, and LocalBuilder removes the build folders of dead tuners only."""
from __future__ import annotations

import importlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import cost_models
import search
from autotune import cli
from autotune.measure import builder as builder_module
from autotune.measure.builder import LocalBuilder
from autotune.measure.runner import LocalRunner
from records import Database
from records.__main__ import main as records_main
from search.measure import MeasureResult

# A tiny ResNet-18 (as in test_cli.py's spirit): loads in well under a second.
TINY = ["resnet18", "--option", "image_size=16", "--option", "width=4", "--option",
        "num_classes=4"]
FAST = ["--batch-size", "2", "--repeat", "1", "--min-repeat-ms", "1", "--cost-model",
        "random", "--remeasure-top", "0", "--no-live", "--policy", "round-robin"]


# -- 8a: unknown kinds ------------------------------------------------------------------------

@pytest.mark.parametrize("option, known", [
    ("--cost-model", cost_models.kinds()),
    ("--strategy", search.kinds()),
    ("--policy", ["gradient", "round-robin"]),
])
def test_unknown_kind_is_a_usage_error_listing_the_known_ones(tmp_path, capsys, option, known):
    db = tmp_path / "tuning.db"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*TINY, "--db", str(db), "--trials", "2", option, "bogus"])
    assert exit_info.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "bogus" in err and option in err
    for kind in known:
        assert repr(kind) in err
    assert not db.exists()  # refused before anything was opened


# -- 8b: a target this machine cannot run, and a run that measured nothing ---------------------

def test_a_target_this_machine_cannot_run_is_refused_up_front(tmp_path, capsys):
    foreign = "x86_64-unknown-linux-gnu" if platform.machine().lower() in ("aarch64", "arm64") \
        else "aarch64-linux-gnu"
    db = tmp_path / "tuning.db"
    code = cli.main([*TINY, "--db", str(db), "--trials", "2", "--target",
                     f"llvm -mtriple={foreign}", *FAST])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert foreign in err and "cannot run on this machine" in err
    assert not db.exists()


def test_a_run_whose_trials_all_failed_exits_1_and_names_the_error(tmp_path, capsys,
                                                                   monkeypatch):
    # Every candidate builds, then fails to run, as on a machine that cannot run the code.
    def run(self, inputs, builds):
        return [MeasureResult.error("runtime", "simulated: the kernel cannot run here")
                for _ in inputs]

    monkeypatch.setattr(LocalRunner, "run", run)
    code = cli.main([*TINY, "--db", str(tmp_path / "tuning.db"), "--trials", "2", *FAST])
    captured = capsys.readouterr()
    assert code == cli.EXIT_ERROR, captured.err
    assert "none of the 2 trials of this run measured a valid time" in captured.err
    assert "most common error: runtime (2 of 2): simulated: the kernel cannot run here" \
        in captured.err
    assert "tune-model report" in captured.out  # the report is still printed


def test_a_run_that_set_every_task_aside_exits_1(tmp_path, capsys, monkeypatch):
    def no_space(func, target):
        raise RuntimeError("simulated: no design space")

    monkeypatch.setattr(importlib.import_module("autotune.tuning.tune"), "DesignSpace", no_space)
    code = cli.main([*TINY, "--db", str(tmp_path / "tuning.db"), "--trials", "2", *FAST])
    err = capsys.readouterr().err
    assert code == cli.EXIT_ERROR, err
    assert "every task was set aside" in err and "simulated: no design space" in err


# -- 9: outputs checked before any work --------------------------------------------------------

def test_report_naming_a_file_is_refused_before_tuning(tmp_path, capsys):
    report = tmp_path / "report"
    report.write_text("not a folder")
    db = tmp_path / "tuning.db"
    code = cli.main([*TINY, "--db", str(db), "--trials", "2", "--report", str(report), *FAST])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert f"--report {report} exists and is not a directory" in err
    assert not db.exists()  # nothing was tuned
    assert report.read_text() == "not a folder"

    assert cli.main(["report", "--db", str(db), "--report", str(report)]) == cli.EXIT_USAGE
    assert "not a directory" in capsys.readouterr().err


def test_a_missing_report_folder_is_created_up_front(tmp_path, capsys):
    report = tmp_path / "out" / "report"
    # The model name is wrong, so the run stops at once: the folder exists already.
    assert cli.main(["no_such_model", "--db", str(tmp_path / "x.db"), "--report",
                     str(report)]) == cli.EXIT_USAGE
    assert report.is_dir()
    capsys.readouterr()


def test_log_file_and_db_in_a_missing_folder_are_usage_errors(tmp_path, capsys):
    missing = tmp_path / "missing"
    code = cli.main([*TINY, "--db", str(tmp_path / "tuning.db"), "--log-file",
                     str(missing / "tune.log"), *FAST])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert f"--log-file {missing / 'tune.log'}: the folder {missing} does not exist" in err
    code = cli.main([*TINY, "--db", str(tmp_path), *FAST])
    assert code == cli.EXIT_USAGE
    assert f"--db {tmp_path} is a directory" in capsys.readouterr().err
    code = cli.main([*TINY, "--db", str(missing / "tuning.db"), *FAST])
    assert code == cli.EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err
    assert not missing.exists()


def test_records_export_checks_its_output_first(tmp_path, capsys):
    db = str(tmp_path / "tuning.db")
    Database(db).close()
    missing = tmp_path / "missing" / "records.jsonl"
    assert records_main(["export", db, str(missing)]) == 2
    assert f"the folder {missing.parent} does not exist" in capsys.readouterr().err
    assert records_main(["export", db, str(tmp_path)]) == 2
    assert f"{tmp_path} is a directory" in capsys.readouterr().err
    assert records_main(["export", db, str(tmp_path / "ok.jsonl")]) == 0
    assert (tmp_path / "ok.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".export-")] == []


# -- 12: build folders of dead tuners ----------------------------------------------------------

def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _plant(root, name: str, owner: dict | None):
    path = root / name
    path.mkdir()
    (path / "cand0000001.o").write_bytes(b"\0" * 16)
    if owner is not None:
        (path / builder_module.OWNER_FILE).write_text(json.dumps(owner))
    return path


def test_a_builder_removes_only_the_build_folders_of_dead_owners(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    host = socket.gethostname()
    dead = _dead_pid()
    stale = _plant(tmp_path, f"autotune-build-{dead}-abc", {"pid": dead, "host": host})
    live = _plant(tmp_path, f"autotune-build-{os.getpid()}-def",
                  {"pid": os.getpid(), "host": host})
    elsewhere = _plant(tmp_path, f"autotune-build-{dead}-ghi",
                       {"pid": dead, "host": host + "-other"})
    unmarked = _plant(tmp_path, "autotune-build-jkl", None)  # being created, or older

    builder = LocalBuilder(max_workers=1)
    try:
        assert not stale.exists()
        assert live.exists() and elsewhere.exists() and unmarked.exists()
        own = builder.work_dir
        assert os.path.dirname(own) == str(tmp_path)
        with open(os.path.join(own, builder_module.OWNER_FILE)) as f:
            assert json.load(f) == {"pid": os.getpid(), "host": host}
    finally:
        builder.close()
    assert not os.path.exists(own)


def test_a_folder_whose_owner_was_killed_while_marking_it_is_swept_once_old(tmp_path):
    # Killed between creating the folder and renaming its owner file into place: nothing
    # names the owner, but a half-written marker this old has no writer any more.
    def plant(name: str, age: float, extra: bool = False):
        path = tmp_path / name
        path.mkdir()
        part = path / (builder_module.OWNER_FILE + ".part")
        part.write_text("")
        if extra:
            (path / "cand0000001.o").write_bytes(b"\0")
        then = time.time() - age
        os.utime(part, (then, then))
        return path

    old = plant("autotune-build-1-old", builder_module.ABANDONED_SECONDS + 60)
    fresh = plant("autotune-build-2-new", 1.0)  # may be being written right now
    busy = plant("autotune-build-3-busy", builder_module.ABANDONED_SECONDS + 60, extra=True)
    assert builder_module.clean_stale_build_dirs(str(tmp_path)) == [str(old)]
    assert not old.exists() and fresh.exists() and busy.exists()


def test_the_folder_of_a_killed_tuner_is_removed_by_the_next_builder(tmp_path, monkeypatch):
    # A tuner killed with SIGKILL cannot remove its folder; the next builder does.
    script = ("import os, signal\n"
              "from autotune.measure.builder import LocalBuilder\n"
              "b = LocalBuilder(max_workers=1)\n"
              "print(b.work_dir, flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = proc.stdout.strip()
    assert os.path.isdir(left) and os.path.dirname(left) == str(tmp_path)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    LocalBuilder(max_workers=1).close()
    assert not os.path.exists(left)
    assert [p for p in tmp_path.iterdir() if p.name.startswith("autotune-build-")] == []


def test_a_negative_rerank_count_is_a_usage_error(tmp_path, capsys):
    code = cli.main([*TINY, "--db", str(tmp_path / "tuning.db"), "--trials", "1", *FAST,
                     "--rerank-top", "-1"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "--rerank-top must be 0 (none) or more, got -1" in err
    assert not (tmp_path / "tuning.db").exists()   # refused before anything was written
