"""autotune.tune_model on a tiny model with real builds and measurements; a task whose builds
keep failing; strict coverage; the stored report; the live display and its plain fallback."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

import autotune
from autotune.tuning import report as report_mod
from autotune.measure import BuildResult, LocalBuilder, MeasureConfig
from autotune.tuning.progress import Progress
from autotune.tuning.tune_model import BuildConfig, RunControl, model_tasks, parse_duration
from records import Database, MemoryDatabase
import search
from search import SchedulerConfig
from search.config import SearchConfig
from search.task_scheduler import TaskScheduler
from tensor_ir.target import Target

from .tiny_onnx import write_tiny_mlp

FAST = MeasureConfig(repeat=1, min_repeat_ms=1.0)


def test_tune_model_tunes_every_task_and_builds_from_the_records(tmp_path):
    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    db_path = tmp_path / "tuning.db"
    events = []
    result = autotune.tune_model(path, "llvm", trials=9, database=str(db_path),
                                 search=SearchConfig(batch_size=3, remeasure_top=1,
                                                     remeasure_rounds=1),
                                 measure=FAST,
                                 control=RunControl(listener=lambda e, s, t: events.append(e)))
    assert result.trials == result.trials_run == 9 and result.stopped == "budget"
    assert [t.trials for t in result.tasks] == [3, 3, 3]      # the warm-up visits every task
    assert all(math.isfinite(t.best_seconds) for t in result.tasks)
    assert result.estimated_latency == pytest.approx(
        sum(t.weight * t.best_seconds for t in result.tasks))
    assert result.coverage == 1.0 and not result.build_report.fallbacks
    assert events[0] == "start" and events.count("batch") == 3 and events[-1] == "end"
    text = str(result)
    for t in result.tasks:
        assert t.name in text
    assert "trials: 9 of a budget of 9" in text

    # The records serve a build of the model, which computes what the default build does.
    model = autotune.load_model(path)
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    with autotune.apply_history_best(str(db_path), strict=True):
        tuned = autotune.build(model, "llvm")
    plain = autotune.build(model, "llvm")
    np.testing.assert_allclose(tuned.run({"x": x})["y"], plain.run({"x": x})["y"],
                               rtol=1e-4, atol=1e-5)

    # The report is kept in the database and rebuilt from its records.
    with Database(db_path, create=False) as db:
        (stored,) = report_mod.load(db)
    assert stored.model == "mlp" and stored.trials == 9 and stored.coverage == 1.0
    assert [r.key for r in stored.tasks] == [t.key for t in result.tasks]
    assert stored.estimated_latency == pytest.approx(result.estimated_latency)
    assert stored.curve[-1][0] == 9
    png = report_mod.save_plot(stored, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG" and png.endswith("curve.png")


class PickyBuilder(LocalBuilder):
    """Refuses every candidate of one workload (as a broken code generator would)."""

    def __init__(self, refused_key: str):
        super().__init__()
        self.refused_key = refused_key

    def build(self, inputs):
        good = [i for i, inp in enumerate(inputs) if inp.workload_key != self.refused_key]
        built = iter(super().build([inputs[i] for i in good]))
        return [next(built) if i in good else
                BuildResult(None, "synthetic: the code generator refused it", 0.0)
                for i in range(len(inputs))]


def test_a_task_whose_builds_keep_failing_is_set_aside(tmp_path):
    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    tasks = model_tasks(autotune.load_model(path))
    bad = next(t for t in tasks if t.name == "fused_softmax")
    builder = PickyBuilder(bad.key)
    try:
        with pytest.raises(autotune.CoverageError, match="below the required") as info:
            autotune.tune_model(path, trials=12, database=MemoryDatabase(),
                                search=SearchConfig(batch_size=2, cost_model="random",
                                                    remeasure_top=0),
                                scheduler=SchedulerConfig(policy="round-robin"), builder=builder,
                                measure=FAST, build=BuildConfig(min_coverage=0.99))
    finally:
        builder.close()
    result = info.value.result
    failed = {t.name: t for t in result.failed}
    assert list(failed) == ["fused_softmax"]
    assert failed["fused_softmax"].trials == 4                 # two batches, then set aside
    assert "code generator refused" in failed["fused_softmax"].error
    assert result.trials == 12                                 # the others used the rest
    assert 0.9 < result.coverage < 1.0
    assert "set aside: fused_softmax" in str(result)


def test_model_tasks_are_unique_weighted_and_grouped():
    model = autotune.load_model("resnet18", image_size=16, width=4, num_classes=4)
    tasks = model_tasks(model)
    assert len({t.name for t in tasks}) == len(tasks) == len({t.key for t in tasks})
    convs = [t for t in tasks if t.name.startswith("fused_conv2d_add_relu")]
    assert len(convs) > 1 and convs[1].name == "fused_conv2d_add_relu#2"
    # Grouped by name and work per output: the 3x3 convolutions of one width together.
    assert all(t.group.startswith("fused_conv2d_add_relu/") for t in convs)
    assert any(sum(o.group == t.group for o in convs) > 1 for t in convs)
    assert sum(t.weight for t in tasks) > len(tasks)           # repeated blocks share a task
    assert all(t.bytes > 0 and t.flops >= 0 for t in tasks)


def test_depthwise_and_pointwise_convolutions_are_not_compared():
    from autotune.tuning.tune_model import similarity_group

    model = autotune.load_model("mobilenet_v2", image_size=32, width=0.25, num_classes=4)
    tasks = model_tasks(model)

    def weight(task):
        return tuple(task.func.params[1].const_shape)

    # NCHW weights [K, C, R, S] (depthwise: C = 1); blocked ones [K/kb, C/cb, R, S, cb, kb],
    # depthwise [C/b, R, S, b].
    depthwise = [t for t in tasks if t.func.name.startswith("fused_depthwise_conv2d_nchwc")
                 or (len(weight(t)) == 4 and weight(t)[1] == 1)]
    pointwise = [t for t in tasks if len(weight(t)) in (4, 6) and weight(t)[2:4] == (1, 1)
                 and (weight(t)[1] if len(weight(t)) == 4 else weight(t)[1] * weight(t)[4])
                 >= 64]
    assert depthwise and pointwise
    assert not {t.group for t in depthwise} & {t.group for t in pointwise}
    # The name still leads the group: a matmul and a convolution are never siblings.
    assert all(t.group.split("/")[0] == t.func.name for t in tasks)
    assert similarity_group(tasks[0].func, 0.0) == tasks[0].func.name


def test_parse_duration():
    assert parse_duration("8h") == 8 * 3600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90 and parse_duration("600") == 600
    assert parse_duration(2.5) == 2.5
    for bad in ("soon", "8x", "", "0m", -3):
        with pytest.raises(autotune.TuneError):
            parse_duration(bad)


def test_bad_arguments_are_named(tmp_path):
    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    with pytest.raises(autotune.TuneError, match="trials"):
        autotune.tune_model(path, trials=-1)
    with pytest.raises(autotune.TuneError, match="database"):
        autotune.tune_model(path, trials=1, database=42)
    # A settings object of the wrong kind is named; one of the right kind checked its values
    # when it was made (below).
    with pytest.raises(autotune.TuneError, match="build must be a BuildConfig"):
        autotune.tune_model(path, trials=1, build=False)
    with pytest.raises(autotune.TuneError, match="scheduler must be a SchedulerConfig"):
        autotune.tune_model(path, trials=1, scheduler="round-robin")
    with pytest.raises(autotune.TuneError, match="search.strategy must be a kind"):
        autotune.tune_model(path, trials=1,
                            search=SearchConfig(strategy=search.create("random", seed=0)))


def test_model_settings_are_checked_when_made():
    with pytest.raises(autotune.TuneError, match="min_coverage"):
        BuildConfig(min_coverage=2.0)
    with pytest.raises(autotune.TuneError, match="rerank_rounds"):
        BuildConfig(rerank_rounds=-1)
    with pytest.raises(autotune.TuneError, match="measure_latency"):
        BuildConfig(measure_latency="yes")
    with pytest.raises(autotune.TuneError, match="time budget"):
        RunControl(time_budget="tomorrow")
    with pytest.raises(autotune.TuneError, match="deadline"):
        RunControl(deadline="noon")
    with pytest.raises(autotune.TuneError, match="listener must be callable"):
        RunControl(listener=3)
    with pytest.raises(search.SearchError, match="share_cost_model"):
        SchedulerConfig(share_cost_model=1)
    # The earlier of the two limits ends the run; neither: only the trials do.
    assert RunControl(time_budget="1m", deadline=1000.0).end_by(now=500.0) == 560.0
    assert RunControl(time_budget=90, deadline=100.0).end_by(now=50.0) == 100.0
    assert RunControl().end_by(now=50.0) is None


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def progress_scheduler():
    model = autotune.load_model("resnet18", image_size=16, width=4, num_classes=4)
    sched = TaskScheduler(model_tasks(model), lambda task: None, MemoryDatabase(),
                          Target("llvm"), trials=100, search=SearchConfig(batch_size=4))
    sched.started = sched.clock() - 65
    sched.phase = "tuning"
    sched.trials_run = 8
    sched._batch_seconds = 16.0
    for task, seconds in zip(sched.tasks[:2], (2e-3, 5e-6)):
        for _ in range(4):
            task.add_trial(seconds)
        task.run_trials, task.status = 4, "tuning"
    return sched


def test_live_display_redraws_in_place(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    screen = FakeTerminal()
    sched = progress_scheduler()
    progress = Progress(screen, model="resnet18")
    assert progress.live
    try:
        progress.listener("batch", sched, sched.tasks[0])
        first = screen.getvalue()
        frame = progress.render(120, 40)
        assert frame[0].startswith("tune-model resnet18 on llvm")
        assert "trials 8/100" in frame[1] and "elapsed 1m05s" in frame[1]
        assert "left ~" in frame[1] and "ETA" in frame[1] and "est. latency" in frame[1]
        assert any(line.startswith("fused_conv2d_add_relu ") and "2.000 ms" in line
                   for line in frame)
        assert "roofline" in frame[2] and "share" in frame[2]
        progress.listener("batch", sched, sched.tasks[1])
        second = screen.getvalue()[len(first):]
        assert second.startswith(f"\x1b[{first.count(chr(10))}F\x1b[J")   # redrawn in place
        # A small window keeps the largest shares and says how many are hidden.
        small = progress.render(100, 12)
        assert len(small) <= 12 and any("more tasks" in line for line in small)
    finally:
        progress.close()


def test_plain_lines_when_not_on_a_terminal(tmp_path):
    out = io.StringIO()
    sched = progress_scheduler()
    log = tmp_path / "tune.log"
    with Progress(out, model="resnet18", log_file=log) as progress:
        assert not progress.live
        progress.listener("batch", sched, sched.tasks[0])
        sched.tasks[1].status, sched.tasks[1].error = "failed", "ScheduleError: no sketch"
        progress.listener("task", sched, sched.tasks[1])
        progress.line("a line from a tuning loop")
    text = out.getvalue()
    assert "\x1b[" not in text
    assert "trials 8/100" in text and "fused_conv2d_add_relu: 4 trials, best 2.000 ms" in text
    assert "set aside fused_max_pool2d: ScheduleError: no sketch" in text
    logged = log.read_text().splitlines()
    assert len(logged) == 3 and logged[2].endswith("a line from a tuning loop")


def test_roofline_figures():
    peak, how = report_mod.peak_flops(Target("llvm"))
    assert peak > 1e9 and ("GHz" in how or "measured" in how)
    memory = report_mod.peak_bandwidth(Target("llvm"))[0]
    assert memory > 1e8
    # Compute-bound: against the peak; memory-bound: against intensity x bandwidth.
    assert report_mod.roofline_fraction(1e9, 1e3, 1.0, 4e9, 1e9) == pytest.approx(0.25)
    assert report_mod.roofline_fraction(1e6, 1e6, 1e-3, 1e12, 1e9) == pytest.approx(1.0)
    assert report_mod.roofline_fraction(0, 1e6, 1e-3, 1e12, 2e9) == pytest.approx(0.5)
    assert report_mod.roofline_fraction(1e6, 1e6, math.inf, 1e12, 1e9) is None
    assert report_mod.peak_flops(
        Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"))[0] is None


def test_tune_model_times_tasks_on_activations_written_just_before_each_call(tmp_path):
    """In a model each kernel's inputs were just written by the kernel before it: the
    candidates of a CPU model's tasks are measured that way (MeasureInput.fresh_inputs),
    while a lone ``tune`` keeps re-reading its inputs."""
    from search.simulation import SimulationBuilder, SimulationRunner

    seen = []

    def cost(inp):
        seen.append(inp.fresh_inputs)
        return 1e-3

    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    result = autotune.tune_model(path, "llvm", trials=3, database=MemoryDatabase(),
                                 search=SearchConfig(batch_size=1, remeasure_top=0),
                                 builder=SimulationBuilder(), runner=SimulationRunner(cost),
                                 build=BuildConfig(build=False))
    assert seen and all(seen)
    # A runner that keeps no count of waits for a quiet host reports none.
    assert result.host_waits == (0, 0.0)
    seen.clear()
    (task,) = model_tasks(autotune.load_model(path))[:1]
    autotune.tune(task.func, "llvm", trials=2, builder=SimulationBuilder(),
                  runner=SimulationRunner(cost), log=False, search=SearchConfig(remeasure_top=0))
    assert seen and not any(seen)


def test_tune_model_times_weights_out_of_the_private_caches_the_model_outgrows(tmp_path):
    """A model whose weights and activations outgrow the cores' private caches evicts each
    kernel's weights from them between its calls: its tasks' candidates are timed with the
    weights rotated over as many bytes as the model streams (MeasureInput.cold_bytes); where
    they outgrow the last-level cache too, over twice it (cold_bytes 0, from memory); where
    the private caches hold the model, warm."""
    from autotune.tuning.tune_model import streamed_bytes, weight_state, weights_read_cold
    from search.simulation import SimulationBuilder, SimulationRunner

    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    model = autotune.load_model(path)
    small_l2 = Target("llvm -num-cores 2 -l2-cache=1024 -l3-cache=1073741824")
    streamed = streamed_bytes(model, small_l2)
    assert streamed > 2 * 1024 and not weights_read_cold(model, small_l2)
    seen = []

    def cost(inp):
        seen.append((inp.cold_weights, inp.cold_bytes))
        return 1e-3

    for target, want in ((small_l2, (True, streamed)),
                         ("llvm -num-cores 2 -l2-cache=1024 -l3-cache=1024", (True, 0)),
                         ("llvm -num-cores 2 -l2-cache=1073741824 -l3-cache=1073741824",
                          (False, 0))):
        seen.clear()
        autotune.tune_model(path, target, trials=2, database=MemoryDatabase(),
                            search=SearchConfig(batch_size=1, remeasure_top=0),
                            builder=SimulationBuilder(), runner=SimulationRunner(cost),
                            build=BuildConfig(build=False))
        assert seen and set(seen) == {want}, target
        # weight_state answers what tune_model used (the benchmark re-times records by it).
        assert weight_state(model, Target(str(target))) == want


def test_streamed_bytes_are_the_weights_and_the_planned_activations():
    from autotune.graph.passes import fuse_ops, optimize, plan_memory
    from autotune.tuning.tune_model import streamed_bytes

    model = autotune.load_model("mobilenet_v2", image_size=32, width=0.25, num_classes=10)
    optimized = optimize(model)
    total = plan_memory(optimized, fuse_ops(optimized)).total_bytes + sum(
        np.asarray(a).nbytes for a in optimized.constants.values())
    # Two cores' private caches just below and just above it.
    below, above = (total - 1) // 2, -(-total // 2)
    assert streamed_bytes(model, Target(f"llvm -num-cores 2 -l2-cache={below}")) == total
    assert streamed_bytes(model, Target(f"llvm -num-cores 2 -l2-cache={above}")) == 0
    assert streamed_bytes(model, Target(f"llvm -num-cores 1 -l2-cache={total - 1}")) == total
    # Not a CPU cache question on a GPU; no answer without the private caches' size.
    assert streamed_bytes(model, Target("opencl")) == 0
    assert streamed_bytes(model, Target("llvm -mtriple=aarch64-linux-gnu -num-cores 2")) == 0
