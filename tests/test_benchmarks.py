"""The benchmark commands the README names run and print the JSON they promise."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest


def test_build_time_prints_json_with_phases():
    from benchmarks import build_time

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert build_time.main(["--repeat", "1", "--ops", "relu,matmul"]) == 0
    doc = json.loads(buf.getvalue())
    assert {r["op"] for r in doc["ops"]} == {"relu", "matmul"}
    for row in doc["ops"] + [doc["matmul_1024"]]:
        assert row["create_ms"] > 0 and row["lower_ms"] > 0 and row["llvm_ms"] > 0
    assert doc["matmul_1024"]["limit_ms"] == 150.0


def test_hand_written_matmul_schedule_is_correct():
    import numpy as np

    import autotune
    from benchmarks.matmul_schedule import schedule_matmul
    from tensor_ir import ops
    from tensor_ir.interp import evaluate

    n = 64
    sch = schedule_matmul(ops.matmul(n, n, n))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), "float32"), rng.standard_normal((n, n), "float32")
    out = np.empty((n, n), "float32")
    autotune.build(sch.func)(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(evaluate(sch.func, a, b)[0], a @ b, rtol=1e-4, atol=1e-4)


def test_winograd_layouts_times_both_layouts_of_every_half():
    from benchmarks import winograd_layouts

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert winograd_layouts.main(["--layers", "32x6x2", "--trials", "2",
                                      "--rounds", "1", "--min-repeat-ms", "1"]) == 0
    (layer,) = json.loads(buf.getvalue())["layers"]
    halves = ("input_rows", "input_cols", "output_rows", "output_cols")
    assert set(layer["median_us"]) == set(halves) | {f"{h}_nchwc" for h in halves}
    assert all(us > 0 for us in layer["median_us"].values())
    assert layer["total_us"]["NCHW"] == pytest.approx(
        sum(layer["median_us"][h] for h in halves), abs=0.2)
    assert layer["blocked_vs_nchw"] == pytest.approx(
        layer["total_us"]["blocked"] / layer["total_us"]["NCHW"], abs=1e-3)


def test_tune_ops_times_naive_and_tuned_side_by_side():
    import subprocess
    import sys
    from pathlib import Path

    # A subprocess: the command restarts itself without the machine's OpenBLAS variables.
    args = ["--workloads", "softmax", "--trials", "4,8", "--batch-size", "4",
            "--random-for", "", "--heldout", "0", "--rounds", "2"]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.tune_ops", *args],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    entry = json.loads(proc.stdout)["workloads"]["softmax"]
    sbs = entry["side_by_side"]
    assert sbs["rounds"] == 2
    for name in ("naive", "after_first", "final"):
        assert sbs[f"{name}_ms"] > 0
    # The speed-ups are ratios of the side-by-side medians, and the headline figure is one.
    # Both sides are printed rounded (times to 4 decimals of a ms, speed-ups to 2 decimals), so
    # the ratio is checked against the interval the rounded times allow, widened by the
    # speed-up's own rounding: a fixed relative tolerance fails on small ratios (0.23 vs 0.2345).
    naive, first = sbs["naive_ms"], sbs["after_first_ms"]
    half_ms, half_ratio = 0.5e-4, 0.5e-2
    low = (naive - half_ms) / (first + half_ms) - half_ratio
    high = (naive + half_ms) / max(first - half_ms, 1e-12) + half_ratio
    assert low <= sbs["speedup_after_first"] <= high
    assert entry["speedup_vs_naive_after_first"] == sbs["speedup_after_first"]
    assert entry["naive_ms"] == sbs["naive_ms"]
    assert set(entry["tuned"]["after"]) == {"4", "8"}


def test_hand_written_depthwise_schedules_are_correct():
    import numpy as np

    import autotune
    from benchmarks.depthwise_ceiling import SCHEDULES, depthwise, schedule_depthwise

    func = depthwise()
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 144, 56, 56), "float32")
    weight = rng.standard_normal((144, 1, 3, 3), "float32")
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(padded[:, :, dy:dy + 56, dx:dx + 56] * weight[None, :, 0, dy, dx, None, None]
               for dy in range(3) for dx in range(3))
    for rows, lanes, pad_at in SCHEDULES:
        out = np.full((1, 144, 56, 56), np.nan, "float32")
        autotune.build(schedule_depthwise(func, rows, lanes, pad_at).func)(data, weight, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{rows}x{lanes}, padding per {pad_at}")


def test_gpu_kernels_prints_json_with_checked_schedules():
    pytest.importorskip("pyopencl")
    import subprocess
    import sys
    from pathlib import Path

    # Two of the cases: the test checks the benchmark's plumbing, not PoCL's speed.
    cases = ["add_1M", "transpose_1024_tile16"]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_kernels",
                           "--only", ",".join(cases)],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    if "error" in doc:
        pytest.skip(doc["error"])
    assert list(doc["schedules"]) == cases
    for entry in doc["schedules"].values():
        assert entry["correct"] and entry["kernel_ms"] > 0 and entry["reference_ms"] > 0


@pytest.mark.parametrize("name", ["C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP", "T2D", "CAP",
                                  "NRM", "SFM", "CBR", "TBG"])
def test_op_table_default_programs_equal_their_numpy_references(name):
    from benchmarks.op_table import check_default

    row = check_default(name)
    assert row["ok"], row


def test_op_table_references_agree_with_the_operator_library():
    # The table's own numpy references (windows + einsum) against the library's, where the
    # library has the operator: a wrong reference would pass a wrong kernel.
    import numpy as np

    from benchmarks.op_table import make, random_inputs
    from tensor_ir import ops

    for name, groups, dilation in (("C2D", 1, 1), ("GRP", 4, 1), ("DIL", 1, 2)):
        w = make(name)
        x, k = random_inputs(w)
        stride = {"C2D": 2, "GRP": 2, "DIL": 1}[name]
        pad = {"C2D": 3, "GRP": 1, "DIL": 1}[name]
        want = ops.ref_conv2d_nhwc(x.astype("float64"), k.astype("float64"), stride, pad,
                                   dilation, groups)
        np.testing.assert_allclose(w.reference(x, k), want, rtol=1e-9, atol=1e-9)
    w = make("T2D")
    x, k = random_inputs(w)
    want = ops.ref_conv2d_transpose_nchw(np.transpose(x, (0, 3, 1, 2)).astype("float64"),
                                         np.transpose(k, (2, 3, 0, 1)).astype("float64"),
                                         stride=2, padding=1)
    np.testing.assert_allclose(w.reference(x, k), np.transpose(want, (0, 2, 3, 1)),
                               rtol=1e-9, atol=1e-9)


def test_search_efficiency_table_prints_ratios_against_tvm(tmp_path):
    from benchmarks import search_efficiency

    tvm = tmp_path / "tvm.json"
    tvm.write_text(json.dumps({"results": [{"workload": "DEP#0", "remeasured_ms": 0.05}]}))
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert search_efficiency.main(["table", "--only", "DEP", "--trials", "4",
                                       "--seeds", "0,1", "--tvm", str(tvm)]) == 0
    doc = json.loads(buf.getvalue())
    assert [r["seed"] for r in doc["rows"]] == [0, 1]
    for row in doc["rows"]:
        assert row["workload"] == "DEP#0" and row["correct"] and row["trials"] == 4
        # The speedup is printed to three decimals: below 0.05 the rounding alone is over 1%.
        assert row["speedup_vs_tvm"] == pytest.approx(0.05 / row["ours_ms"], rel=1e-2,
                                                      abs=5e-4)
    # The verdict is on the median of the seeds' runs (of two: their mean).
    (median,) = doc["median_over_seeds"]
    ms = [r["ours_ms"] for r in doc["rows"]]
    assert median["median_ours_ms"] == pytest.approx(sum(ms) / 2, rel=1e-3)
    assert median["speedup_range"] == sorted(r["speedup_vs_tvm"] for r in doc["rows"])
    assert doc["geomean_speedup_vs_tvm"] == pytest.approx(median["speedup_vs_tvm"], rel=1e-3)
    assert doc["slowest_vs_tvm"] == median["speedup_vs_tvm"]


def test_search_efficiency_transfer_tunes_cold_and_warm(tmp_path):
    import autotune
    from autotune.measure import MeasureConfig
    from benchmarks import search_efficiency
    from search import SearchConfig
    from tensor_ir import ops

    db = tmp_path / "source.db"
    fast = MeasureConfig(repeat=1, min_repeat_ms=1)
    for seed, func in enumerate((ops.matmul(32, 64, 32),
                                 ops.conv2d_nchw(1, 8, 10, 10, 16, 3, 3, padding=1))):
        autotune.tune(func, "llvm", trials=12, database=str(db),
                      search=SearchConfig(seed=seed, batch_size=6, remeasure_top=0), measure=fast,
                      log=False)
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert search_efficiency.main(["transfer", "--pretrain-db", str(db), "--models",
                                       "mobilenet_v2", "--tasks-per-model", "1", "--trials",
                                       "4", "--folds", "2"]) == 0
    doc = json.loads(buf.getvalue())
    (row,) = doc["tasks"]
    assert row["model"] == "mobilenet_v2" and row["cold"]["trials_to_90pct_of_cold_best"]
    assert row["warm"]["best_ms_after"]["4"] > 0
    # Both ways of using the pre-trained model ran, each compared with the cold run.
    assert row["warm_blend"]["best_ms_after"]["4"] > 0
    assert "median_warm_over_cold_trials_to_90pct" in doc
    assert "median_warm_blend_over_cold_trials_to_90pct" in doc
    # The task's best is the best of its runs, which one of them reaches by its last trial.
    ends = [row[m]["best_ms_after"]["4"] for m in ("cold", "warm", "warm_blend")]
    assert row["task_best_ms"] == pytest.approx(min(ends), abs=2e-4)
    assert any(row[m]["trials_to_90pct_of_task_best"] for m in ("cold", "warm", "warm_blend"))
    assert "median_warm_over_cold_trials_to_90pct_of_task_best" in doc
    assert set(doc["mean_model_accuracy"]) == {"cold", "warm", "warm_blend"}
    assert doc["source"]["workloads"] == 2 and doc["source"]["heldout_ranking"]["model"]


def test_gemm_ceiling_times_checked_tiles_beside_mlas_and_the_fma_peak():
    pytest.importorskip("onnxruntime")
    from benchmarks import gemm_ceiling

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert gemm_ceiling.main(["--shapes", "24x256x96", "--threads", "1,2", "--rows", "8,12",
                                  "--k-blocks", "48,64", "--prefetch", "0,512", "--rounds", "2",
                                  "--min-seconds", "0.01", "--cols", "32,16"]) == 0
    doc = json.loads(buf.getvalue())
    assert set(doc["peak_gflops"]) == {"1", "2"}
    # 16 lanes x 2 FLOPs per FMA: even a slow host does more than one FMA per nanosecond.
    assert all(g > 32 for g in doc["peak_gflops"].values())
    # k blocks of 64 do not divide 96: only the 48s run, each of both row counts and panel
    # widths, with and without the panel prefetched.
    names = {"mlas"} | {f"ours_{r}x{c}_k48{pf}" for r in (8, 12) for c in (32, 16)
                        for pf in ("", "_pf512")}
    for threads in (1, 2):
        rows = [r for r in doc["results"] if r["threads"] == threads]
        assert {r["program"] for r in rows} == names
        peak = doc["peak_gflops"][str(threads)]
        for r in rows:
            assert r["p10_ms"] <= r["median_ms"]
            # gflops is rounded to a tenth; a spilling tile on AVX2 runs at 2 GFLOPS here.
            assert r["gflops"] == pytest.approx(2 * 24 * 256 * 96 / r["median_ms"] / 1e6,
                                                rel=1e-2, abs=0.05)
            assert r["share_of_peak"] == pytest.approx(r["gflops"] / peak, abs=2e-3)


def test_gemm_ceiling_schedules_compute_the_matmul():
    import numpy as np

    import autotune
    from benchmarks.gemm_ceiling import schedule_gemm
    from tensor_ir import ops
    from tensor_ir.interp import evaluate

    m, n, k = 24, 256, 96
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), "float32"), rng.standard_normal((k, n), "float32")
    for rows, k_block, threads, prefetch, cols, unroll in (
            (8, 48, 1, 0, 32, 1), (12, 96, 2, 0, 32, 1), (24, 32, 2, 1024, 32, 1),
            (6, 48, 2, 0, 16, 1), (4, 48, 2, 0, 24, 8), (8, 96, 1, 0, 32, 4)):
        func = schedule_gemm(ops.matmul(m, n, k), rows, k_block, threads, prefetch,
                             cols, unroll).func
        out = np.full((m, n), np.nan, "float32")
        autotune.build(func, f"llvm -num-cores {threads}")(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3,
                                   err_msg=f"{rows} rows, k block {k_block}")
    np.testing.assert_allclose(evaluate(func, a, b)[0], a @ b, rtol=1e-4, atol=1e-3)


def test_gemm_ceiling_rejects_a_malformed_shape():
    from benchmarks import gemm_ceiling

    with pytest.raises(SystemExit):
        gemm_ceiling.main(["--shapes", "128x3072"])
    with pytest.raises(SystemExit):
        gemm_ceiling.main(["--rows", "0"])
    with pytest.raises(SystemExit):
        gemm_ceiling.main(["--prefetch", "-64"])
    with pytest.raises(SystemExit):
        gemm_ceiling.main(["--unroll", "0"])


def test_gemm_ceiling_unrolls_only_where_the_k_block_divides():
    pytest.importorskip("onnxruntime")
    from benchmarks import gemm_ceiling

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert gemm_ceiling.main(["--shapes", "24x96x96", "--threads", "1", "--rows", "4",
                                  "--k-blocks", "48,96", "--unroll", "1,32",
                                  "--rounds", "2", "--min-seconds", "0.01",
                                  "--cols", "24"]) == 0
    names = {r["program"] for r in json.loads(buf.getvalue())["results"]}
    # 32 divides the k block of 96, not that of 48.
    assert names == {"mlas", "ours_4x24_k48", "ours_4x24_k96", "ours_4x24_k96_u32"}


def test_fastmath_inputs_checks_every_function_on_every_input_set():
    from benchmarks import fastmath_inputs

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert fastmath_inputs.main(["--rows", "2", "--cols", "64", "--threads", "1",
                                     "--rounds", "1"]) == 0
    doc = json.loads(buf.getvalue())
    assert {(r["function"], r["inputs"]) for r in doc["results"]} == {
        (f, i) for f in fastmath_inputs.FUNCTIONS for i in ("std1", "std9", "masked")}
    for row in doc["results"]:
        assert row["median_ms"] > 0 and row["max_error"] < 1e-6, row


def _recorded_copies(db_path: str, copies: int) -> str:
    """A database holding, for the small BERT layer's first task with a register tile, one
    record of a candidate whose tile takes ``copies`` copies per reduction step; its name."""
    import autotune
    from autotune.tuning.tune_model import model_tasks
    from benchmarks.decision_ab import decision_indices
    from records import Database, TuningRecord
    from schedules.space import DesignSpace

    model = autotune.load_model("bert_base_layer", seq=16, hidden=64, heads=2, ffn=128)
    target = autotune.Target("llvm -num-cores 2")
    for task in model_tasks(model):
        space = DesignSpace(task.func, target)
        for seed in range(40):
            cand = space.sample(seed=seed)
            (k,) = decision_indices(cand.trace, "pragma_unroll_by") or (None,)
            if k is not None and dict(cand.trace[k].attrs)["candidates"][
                    cand.trace[k].decision] == copies:
                with Database(db_path) as db:
                    db.commit_workload(task.func, task.name)
                    db.commit_records([TuningRecord(task.key, str(target), cand.trace,
                                                    run_times=(1e-3,))])
                return task.name
    raise AssertionError("no task samples a register tile's copies")


def test_decision_ab_times_a_record_beside_its_changed_decision(tmp_path):
    from benchmarks import decision_ab

    db = str(tmp_path / "ab.db")
    name = _recorded_copies(db, 8)
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert decision_ab.main(["--small", "--model", "bert_base_layer", "--db", db,
                                 "--rounds", "2"]) == 0
    doc = json.loads(buf.getvalue())
    (row,) = doc["tasks"]
    assert row["task"] == name and row["chosen"] == 8 and row["calls"] >= 1
    assert row["recorded_ms"] > 0 and row["changed_ms"] > 0
    assert row["ratio"] == round(row["recorded_ms"] / row["changed_ms"], 3)
    assert doc["weighted_ms"]["recorded"] == pytest.approx(row["recorded_ms"] * row["calls"],
                                                           rel=1e-3)
    assert name not in doc["skipped"] and len(doc["skipped"]) >= 1  # tasks without a record
    # A value the record already takes, or one not among the candidates: nothing to time.
    for value in ("8", "3"):
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert decision_ab.main(["--small", "--model", "bert_base_layer", "--db", db,
                                     "--value", value, "--rounds", "1"]) == 0
        doc = json.loads(buf.getvalue())
        assert doc["tasks"] == [] and doc["weighted_ratio"] is None and name in doc["skipped"]
    with pytest.raises(SystemExit):
        decision_ab.main(["--model", "bert_base_layer", "--db", str(tmp_path / "none.db")])


def test_decision_ab_changes_every_decision_the_annotation_takes():
    from benchmarks.decision_ab import changed, decision_indices
    from schedules.space import DesignSpace
    from tensor_ir import ops

    space = DesignSpace(ops.matmul(64, 96, 128), "llvm -num-cores 2")

    def copies(trace) -> int:
        (k,) = decision_indices(trace, "pragma_unroll_by")
        return dict(trace[k].attrs)["candidates"][trace[k].decision]

    trace = next(c.trace for c in (space.sample(seed=s) for s in range(40))
                 if copies(c.trace) == 4)
    chosen, other = changed(trace, "pragma_unroll_by", 1)
    assert chosen == [4]
    (k,) = decision_indices(other, "pragma_unroll_by")
    assert other[k].decision == 0 and trace[k].decision != 0
    assert changed(trace, "pragma_unroll_by", 4) is None   # already taken
    assert changed(trace, "pragma_unroll_by", 2) is None   # not a candidate
    assert changed(trace, "no_such_annotation", 1) is None
