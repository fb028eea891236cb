"""A model's Partition (autotune.graph.tasks) is made once per tune_model run and serves the
tasks, the weight state, the re-ranking and the final build; the old call forms
(extract_tasks, partition, build_model of a Model, weight_state of a Model) answer as
before."""
from __future__ import annotations

import sys

import numpy as np

import autotune
from autotune.graph import passes
from autotune.graph.operators import VIEW
from autotune.graph.tasks import Partition, extract_tasks, group_func, partition
from autotune.measure import MeasureConfig
from autotune.graph.build import build_model, database_lookup
from autotune.tuning.tune_model import BuildConfig, model_tasks, streamed_bytes, weight_state
from records import Database
from search import SearchConfig
from tensor_ir import dtype as dt
from tensor_ir.target import Target

from .tiny_onnx import write_tiny_mlp

FAST = MeasureConfig(repeat=1, min_repeat_ms=1.0)


def count_calls(monkeypatch, function) -> list:
    """Replace ``function`` by a counting wrapper in every loaded module that holds it under
    its own name, so that a call from any module counts, whichever way it imported it."""
    calls: list = []

    def counted(*args, **kwargs):
        result = function(*args, **kwargs)
        calls.append(result)
        return result

    holders = [m for m in list(sys.modules.values())
               if m is not None and vars(m).get(function.__name__) is function]
    assert holders, f"no module holds {function.__name__}"
    for module in holders:
        monkeypatch.setattr(module, function.__name__, counted)
    return calls


def test_tune_model_partitions_the_model_once_and_builds_what_a_fresh_build_does(
        tmp_path, monkeypatch):
    path = write_tiny_mlp(tmp_path / "mlp.onnx")
    db_path = tmp_path / "tuning.db"
    fusions = count_calls(monkeypatch, passes.fuse_ops)
    optimizations = count_calls(monkeypatch, passes.optimize)
    plans = count_calls(monkeypatch, passes.plan_memory)
    builds = count_calls(monkeypatch, build_model)
    # Two records per task, so that the rerank has candidates to build the model with.
    result = autotune.tune_model(path, "llvm", trials=6, database=str(db_path),
                                 search=SearchConfig(batch_size=2, remeasure_top=0), measure=FAST,
                                 build=BuildConfig(rerank_top=2, rerank_rounds=1, build=True))
    assert result.reranked, "the rerank built no candidate"
    # The rerank's base build, one build per candidate of each re-ranked task, the final one.
    assert len(builds) >= 2 + sum(len(r["in_model_ms"]) for r in result.reranked)
    assert len(optimizations) == len(fusions) == len(plans) == 1
    tuned = builds[-1]
    assert result.coverage == 1.0

    # The final build is the one a build of the model from scratch makes from the records.
    monkeypatch.undo()
    model = autotune.load_model(path)
    with Database(db_path, create=False) as db:
        fresh = build_model(model, "llvm", lookup=database_lookup(db, Target("llvm"),
                                                                  model.name), warn=False)
    assert [(s.name, s.key, s.args) for s in tuned.steps] == \
        [(s.name, s.key, s.args) for s in fresh.steps]
    assert [(f.key, f.count, f.source) for f in tuned.report.functions] == \
        [(f.key, f.count, f.source) for f in fresh.report.functions]
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    out = tuned.run({"x": x})["y"]
    np.testing.assert_allclose(out, fresh.run({"x": x})["y"], rtol=1e-6, atol=0)
    np.testing.assert_allclose(out, model.evaluate({"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_a_build_of_a_partition_does_not_partition_again(tmp_path, monkeypatch):
    model = autotune.load_model(write_tiny_mlp(tmp_path / "mlp.onnx"))
    part = Partition.of(model)
    assert Partition.of(part) is part and part.name == model.name
    fusions = count_calls(monkeypatch, passes.fuse_ops)
    lib = build_model(part, "llvm")
    assert fusions == [] and lib.plan is part.plan
    monkeypatch.undo()
    plain = build_model(model, "llvm")
    x = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(lib.run({"x": x})["y"], plain.run({"x": x})["y"], rtol=1e-6,
                               atol=0)


def test_the_partition_holds_what_the_separate_passes_compute():
    model = autotune.load_model("resnet18", image_size=16, width=4, num_classes=4)
    part = Partition.of(model)
    optimized = passes.optimize(model)
    groups = passes.fuse_ops(optimized)
    assert [g.output for g in part.groups] == [g.output for g in groups]
    for group in groups:
        if group.kind == VIEW:
            assert group.output not in part.funcs
            continue
        gf, want = part.funcs[group.output], group_func(optimized, group)
        assert (gf.key, gf.params, gf.flops) == (want.key, want.params, want.flops)
        assert gf.weight_params == {k for k, v in enumerate(gf.params)
                                    if v in optimized.constants}
    plan = passes.plan_memory(optimized, groups)
    assert (part.plan.storage, part.plan.sizes) == (plan.storage, plan.sizes)
    assert part.run_bytes == plan.total_bytes + sum(
        np.asarray(a).nbytes for a in optimized.constants.values())
    # The old entry points are views of it.
    assert [(t.key, t.weight, t.groups, t.weight_params) for t in extract_tasks(model)] == \
        [(t.key, t.weight, t.groups, t.weight_params) for t in part.tasks]
    assert sum(t.weight for t in part.tasks) == len(part.funcs)
    _, old_groups, old_funcs = partition(model)
    assert [g.output for g in old_groups] == [g.output for g in groups]
    assert {k: f.key for k, f in old_funcs.items()} == {k: f.key for k, f in part.funcs.items()}


def test_tasks_and_weight_state_of_a_partition_are_those_of_its_model():
    model = autotune.load_model("mobilenet_v2", image_size=32, width=0.25, num_classes=10)
    part = Partition.of(model)
    by_model, by_part = model_tasks(model), model_tasks(part)
    assert [(t.name, t.key, t.weight, t.flops, t.bytes, t.group, t.weight_params)
            for t in by_model] == \
        [(t.name, t.key, t.weight, t.flops, t.bytes, t.group, t.weight_params)
         for t in by_part]
    for task, graph_task in zip(by_part, part.tasks):
        # Every parameter's elements times its dtype's size (all float32 here).
        assert task.bytes == sum(int(np.prod(b.const_shape)) * dt.bits(b.dtype) // 8
                                 for b in graph_task.func.params) > 0
    total = part.run_bytes
    below, above = (total - 1) // 2, -(-total // 2)
    for spec, want in ((f"llvm -num-cores 2 -l2-cache={below} -l3-cache=1073741824",
                        (True, total)),
                       (f"llvm -num-cores 2 -l2-cache={above} -l3-cache=1073741824",
                        (False, 0)),
                       ("llvm -num-cores 2 -l2-cache=1024 -l3-cache=1024", (True, 0))):
        target = Target(spec)
        assert weight_state(part, target) == weight_state(model, target) == want, spec
    assert streamed_bytes(part, Target("opencl")) == 0

