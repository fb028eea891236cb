"""benchmarks.e2e on shrunk models with a tiny budget: the JSON it promises, onnxruntime
running the same model (our graph exported to ONNX) with the same outputs, and resuming the
budget from the database."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

pytest.importorskip("onnxruntime")


def test_export_matches_our_build_for_every_benchmarked_zoo_model():
    import autotune
    from autotune.graph.build import build_model
    from benchmarks.e2e import MODELS, SMALL_OPTIONS, onnxruntime_session, to_onnx

    assert set(MODELS) == {"resnet18", "mobilenet_v2", "bert_base_layer"}
    for name in MODELS:
        model = autotune.load_model(name, **SMALL_OPTIONS[name])
        feed = {n: np.random.default_rng(0).uniform(-1, 1, t.shape).astype(t.dtype)
                for n, t in model.input_types().items()}
        ours = build_model(model, "llvm").run(feed)
        theirs = onnxruntime_session(to_onnx(model), 2).run(None, feed)
        np.testing.assert_allclose(theirs[0], ours["output"], rtol=1e-4, atol=1e-4)


def test_e2e_prints_json_and_resumes(tmp_path):
    from benchmarks import e2e

    db = str(tmp_path / "e2e.db")
    args = ["--small", "--models", "bert_base_layer", "--budgets", "2,4", "--batch-size", "2",
            "--repeat", "2", "--db", db]
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert e2e.main(args) == 0
    (entry,) = json.loads(buf.getvalue())["models"]
    assert entry["model"] == "bert_base_layer" and entry["tasks"] == 12
    assert entry["default_ms"] > 0 and entry["onnxruntime_ms"] > 0
    assert entry["onnxruntime_max_abs_diff"] < 1e-4
    assert [b["trials"] for b in entry["budgets"]] == [2, 4]
    assert [b["trials_this_run"] for b in entry["budgets"]] == [2, 2]
    for b in entry["budgets"]:
        assert b["tuned_ms"] > 0 and 0 < b["coverage"] <= 1
        # Timed in the same rounds as onnxruntime: the ratio of the two medians is kept
        # beside the headline, the median of the rounds' ratios.
        assert b["tuned_vs_onnxruntime_ratio_of_medians"] == pytest.approx(
            b["tuned_ms"] / b["onnxruntime_ms"], rel=1e-2)
        assert b["tuned_vs_onnxruntime"] > 0 and b["exported_vs_onnxruntime"] > 0
        assert b["max_abs_diff_vs_default"] < 1e-3
        # The tuning's waits for a quiet host are reported (none needed on a quiet one).
        assert b["host_waits"] >= 0 and b["host_wait_seconds"] >= 0
        assert (b["host_waits"] == 0) == (b["host_wait_seconds"] == 0)
        # Every round kept (a run that changed state shows it), and the medians are theirs.
        rounds = b["rounds_ms"]
        assert {len(v) for v in rounds.values()} == {2}
        assert set(rounds) == {"ours", "onnxruntime", "exported"}
        # (the rounds are kept to 0.1 us: a median of a tiny model may sit half a step out)
        assert min(rounds["ours"]) - 5e-5 <= b["tuned_ms"] <= max(rounds["ours"]) + 5e-5
        # The tuned tasks' best records re-timed alone beside the model: with two rounds
        # (--small) the median round's sum is the sum of the per-task medians (means of 2),
        # each in the kernel table under its task.
        assert b["tasks_retimed_ms"] > 0 and b["tuned_beside_tasks_ms"] > 0
        alone = [k["alone_ms"] for k in b["kernels"] if "alone_ms" in k]
        assert alone and len(alone) <= len(b["kernels"])
        assert sum(alone) == pytest.approx(b["tasks_retimed_ms"], rel=1e-9)
        assert all(k["model_vs_alone"] == round(k["model_ms"] / k["alone_ms"], 3)
                   for k in b["kernels"] if "alone_ms" in k)
        assert b["tuned_vs_tasks_retimed"] > 0 and b["retime_rounds"] == 2
        # The re-time's rounds split by the host's state: a probe before the first round
        # and after each, every round in one state.
        assert len(b["retime_round_trip_ns"]) == 3
        split = b["tasks_retimed_by_state"]
        assert set(split) <= {"quiet", "slow", "mixed", "unknown"}
        assert sum(s["rounds"] for s in split.values()) == 2
        for s in split.values():
            assert s["tasks_ms"] > 0 and s["model_ms"] > 0 and s["model_vs_tasks"] > 0
    # Run again: the budgets are already reached, nothing is measured.
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert e2e.main(args) == 0
    (entry,) = json.loads(buf.getvalue())["models"]
    assert [b["trials_this_run"] for b in entry["budgets"]] == [0, 0]


def test_e2e_refuses_a_retime_without_rounds(capsys):
    from benchmarks import e2e

    with pytest.raises(SystemExit):
        e2e.main(["--small", "--models", "bert_base_layer", "--retime-rounds", "0"])
    assert "--retime-rounds must be at least 1" in capsys.readouterr().err


def test_e2e_compare_times_each_database_s_build_beside_onnxruntime(tmp_path):
    from benchmarks import e2e, e2e_compare

    tuned, empty = str(tmp_path / "tuned.db"), str(tmp_path / "empty.db")
    with redirect_stdout(io.StringIO()):
        assert e2e.main(["--small", "--models", "mobilenet_v2", "--budgets", "2",
                         "--batch-size", "2", "--repeat", "2", "--db", tuned]) == 0
    from records import Database
    Database(empty).close()
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert e2e_compare.main(["--small", "--model", "mobilenet_v2", "--repeat", "3",
                                 "--db", tuned, "--db", empty]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["model"] == "mobilenet_v2" and doc["onnxruntime_ms"] > 0
    rows = doc["builds"]
    assert [r["db"] for r in rows] == ["tuned.db", "empty.db"]
    # Records cover some of the first build; the empty database builds default schedules.
    assert rows[0]["coverage"] > 0 and rows[1]["coverage"] == 0
    for r in rows:
        assert r["ms"] > 0 and r["vs_onnxruntime"] > 0
        assert r["max_abs_diff_vs_onnxruntime"] < 1e-3
    with pytest.raises(SystemExit):
        e2e_compare.main(["--model", "mobilenet_v2", "--db", str(tmp_path / "none.db")])
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert e2e_compare.main(["--small", "--model", "mobilenet_v2", "--repeat", "3",
                                 "--by-state", "--db", tuned]) == 0
    doc = json.loads(buf.getvalue())
    # A probe before the first round and after each: every round falls in one state.
    assert len(doc["round_trip_ns"]) == 4
    states = doc["by_state"]
    assert set(states) <= {"quiet", "slow", "mixed", "unknown"}
    assert sum(s["rounds"] for s in states.values()) == 3
    for s in states.values():
        assert s["onnxruntime_ms"] > 0 and s["db0"]["ms"] > 0 and s["db0"]["vs_onnxruntime"] > 0


def test_round_states_follow_the_probes_around_each_round():
    from benchmarks.common import round_states
    from benchmarks.e2e_compare import _by_state

    # Lowest probe 100 ns: under 200 is quiet, at or over it slow.
    assert round_states([100, 150, 450, 500, 120, None, 110]) == \
        ["quiet", "mixed", "slow", "mixed", "unknown", "unknown"]
    assert round_states([None, None]) == ["unknown"]
    table = _by_state(["quiet", "slow", "quiet"],
                      {"db0": [1.0, 4.0, 3.0], "onnxruntime": [2.0, 2.0, 2.0]})
    assert table["quiet"]["rounds"] == 2 and table["slow"]["rounds"] == 1
    assert table["quiet"]["db0"]["ms"] == pytest.approx(2000.0)
    assert table["quiet"]["db0"]["vs_onnxruntime"] == pytest.approx(1.0)
    assert table["slow"]["db0"]["vs_onnxruntime"] == pytest.approx(2.0)


def test_e2e_ops_profiles_our_kernels_beside_onnxruntime_s_nodes():
    from benchmarks import e2e_ops

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert e2e_ops.main(["--small", "--model", "bert_base_layer", "--rounds", "2",
                             "--runs", "2"]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["database"] is None and doc["coverage"] == 0
    import autotune
    from autotune.graph.build import build_model

    lib = build_model(autotune.load_model("bert_base_layer", **doc["options"]), "llvm",
                      warn=False)
    assert [k["step"] for k in doc["ours"]] == [s.name for s in lib.steps]
    assert all(k["ms"] > 0 for k in doc["ours"])
    # onnxruntime's nodes, each timed in every timed run (not the warm-up ones): its fused
    # matmuls are among them.
    ops = {n["op"] for n in doc["onnxruntime"]}
    assert ops & {"MatMul", "Gemm", "FusedMatMul"}
    assert all(n["runs"] == 2 * 2 and n["ms"] >= 0 for n in doc["onnxruntime"])
    for key in ("ours_run_ms", "onnxruntime_run_ms", "ours_kernel_sum_ms",
                "onnxruntime_node_sum_ms"):
        assert doc[key] > 0
    with pytest.raises(SystemExit):
        e2e_ops.main(["--model", "bert_base_layer", "--db", "no-such.db"])


def test_idle_gap_times_the_first_inferences_after_each_gap():
    from benchmarks import idle_gap

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert idle_gap.main(["--small", "--model", "mobilenet_v2", "--rounds", "1",
                              "--gaps", "0,0.001"]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["model"] == "mobilenet_v2" and doc["database"] is None
    assert [g["gap_s"] for g in doc["gaps"]] == [0.0, 0.001]
    for g in doc["gaps"]:
        for side in ("ours", "onnxruntime"):
            assert len(g[f"{side}_ms"]) == idle_gap.TIMED_RUNS
            assert all(ms > 0 for ms in g[f"{side}_ms"]) and g[f"{side}_first_vs_hot"] > 0
    for bad in (["--gaps", "x"], ["--gaps", "-1"], ["--rounds", "0"],
                ["--db", "no-such.db"]):
        with pytest.raises(SystemExit):
            idle_gap.main(["--small", "--model", "mobilenet_v2", *bad])


def test_idle_gap_runs_hot_then_idles_then_times_each_run():
    from benchmarks import idle_gap

    events = []
    result = idle_gap.first_runs(lambda: events.append("run"), 0.02, rounds=2,
                                 sleep=lambda s: events.append(s))
    one_round = ([idle_gap.PARK] + ["run"] * idle_gap.HOT_RUNS + [0.02]
                 + ["run"] * idle_gap.TIMED_RUNS)
    assert events == one_round * 2
    assert len(result) == idle_gap.TIMED_RUNS and all(ms >= 0 for ms in result)
    # No gap: the timed runs follow the hot ones at once.
    events.clear()
    idle_gap.first_runs(lambda: events.append("run"), 0.0, rounds=1,
                        sleep=lambda s: events.append(s))
    assert events == [idle_gap.PARK] + ["run"] * (idle_gap.HOT_RUNS + idle_gap.TIMED_RUNS)
